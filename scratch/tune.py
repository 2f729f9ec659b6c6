import time, sys, numpy as np, hpu, pyopencl as cl
from hpu.sorting import device as dv
rt = hpu.Runtime(sys.argv[1] if len(sys.argv) > 1 else "gpu")
rng = np.random.default_rng(1)
res = {}
configs = [(256, 15), (256, 23), (128, 15), (128, 31), (512, 7), (256, 11), (128, 23)]
for lg in ((16, 18) if len(sys.argv) > 1 else (22, 24)):
    n = 1 << lg
    keys = rng.integers(-2**31, 2**31 - 1, n, dtype=np.int32)
    ref = np.sort(keys)
    src = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=keys)
    out = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, keys.nbytes)
    sorters = {"merge": dv.DeviceSorter(rt, np.int32, algorithm="merge")}
    for wg, items in configs:
        dv._TILE_RADIX_WG, dv._TILE_RADIX_ITEMS = wg, {4: items, 8: max(1, items // 2)}
        try:
            sorters[f"r{wg}x{items}"] = dv.DeviceSorter(rt, np.int32, algorithm="tile-radix")
        except Exception as e:
            print(wg, items, "failed", str(e)[:200])
    for name, s in sorters.items():
        s.sort(src, n, out=out)[1].wait()
        got = np.empty_like(keys); cl.enqueue_copy(rt.queue, got, out).wait()
        assert np.array_equal(got, ref), name
        ts = []
        for i in range(15):
            rt.queue.finish(); t0 = time.perf_counter(); s.sort(src, n, out=out); rt.queue.finish(); ts.append(time.perf_counter() - t0)
        print(lg, name, f"{np.median(ts) * 1e3:.3f}", flush=True)
# per-kernel times at 2^24 for the default config via profiling events
dv._TILE_RADIX_WG, dv._TILE_RADIX_ITEMS = 256, {4: 15, 8: 7}
q = cl.CommandQueue(rt.context, rt.device, properties=cl.command_queue_properties.PROFILING_ENABLE)
s = dv.DeviceSorter(rt, np.int32, algorithm="tile-radix")
k = s._kernels; wg, tile = s._radix_tile; n = 1 << (18 if len(sys.argv) > 1 else 24); tiles = -(-n // tile); m = 256 * tiles; blocks = -(-m // (wg * 16))
counts = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, 4 * m); sums = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, 4 * blocks)
u = np.uint32
for rep in range(3):
    e1 = k["radix_tile_count"](q, (tiles * wg,), (wg,), src, u(n), u(0), u(256), counts)
    e2 = k["radix_scan_blocks"](q, (blocks * wg,), (wg,), counts, u(m), sums)
    e3 = k["radix_scan_sums"](q, (wg,), (wg,), sums, u(blocks))
    e4 = k["radix_tile_scatter"](q, (tiles * wg,), (wg,), src, out, u(n), u(0), u(256), counts, sums)
    q.finish()
print("kernels ms:", [round((e.profile.end - e.profile.start) * 1e-6, 4) for e in (e1, e2, e3, e4)])
