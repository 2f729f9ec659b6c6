"""Whether the OpenCL driver can copy a caller's pageable array without hpu's staging: ``USE_HOST_PTR`` buffers.

hpu copies a pageable input into pinned memory on the host's cores before the DMA engine reads it (staging), and
the host's memory bandwidth, shared by those copies and the DMA engine, bounds its sorts of large arrays.  An
OpenCL buffer made with ``CL_MEM_USE_HOST_PTR`` over the caller's own array lets a driver pin those pages where
they are (as CUDA's ``cudaHostRegister``) and read them with the DMA engine.  Each variant below moves ``--mib`` MiB
of int32 from a pageable array (rewritten with new values before every call, so that a driver that kept an old
copy is caught) into a device buffer, or back, and checks every value, timed by the caller's clock:

- ``write_buffer``: ``clEnqueueWriteBuffer`` from a page-aligned pageable array (the driver's own pageable
  path); ``, numpy's alignment``: from an array as numpy allocates it (16 bytes past a page boundary); ``, a new
  array``: from a new array each call (made and filled before the clock starts), either alignment; ``, the array
  under host_ptr``: from the array that the kept ``USE_HOST_PTR`` buffer below lies over;
- ``read_buffer`` (the same variants): ``clEnqueueReadBuffer`` into the pageable array, the values then checked;
- ``staged``: ``numpy.copyto`` into pinned memory (``ALLOC_HOST_PTR``, mapped), then ``clEnqueueWriteBuffer`` from it;
- ``host_ptr, made per call``: a ``USE_HOST_PTR`` buffer over the array made, copied to the device buffer
  (``clEnqueueCopyBuffer``) and released, each call;
- ``host_ptr, a new array`` (either alignment): the same over a new array each call (made and filled before the
  clock starts): what registering a caller's array costs;
- ``host_ptr, kept``: one such buffer made once over the array; each call maps and unmaps it for writing (the
  spec's way of telling the driver the host changed it), then copies it to the device buffer;
- ``host_ptr, kept, down``: the device buffer copied into a kept ``USE_HOST_PTR`` buffer over a result array, then
  mapped for reading (the values then checked in the result array itself);
- ``host_ptr, a new array, down``: the device buffer copied into a ``USE_HOST_PTR`` buffer made over a new
  result array (``numpy.empty``, not touched before), then mapped for reading and released;
- ``kernel reads host_ptr``: a kernel that copies the kept buffer into the device buffer (zero-copy reads over
  the bus, where the driver maps host memory into the device).

Medians of ``--repeats`` calls after one untimed call; the driver's pinned-memory rates are the ones to beat.

    python experiments/bench_host_ptr.py --device gpu --json results/h100/bench_host_ptr.json
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np
import pyopencl as cl

import hpu
from bench_common import add_runtime_arguments, command_line, utc_now, write_json
from hpu.core.util import host_description

KERNEL = "__kernel void take(__global const int *src, __global int *dst) { size_t i = get_global_id(0); " \
         "dst[i] = src[i]; }"


def page_aligned(n: int) -> np.ndarray:
    """``n`` int32 zeros starting at a page boundary (drivers that pin memory in place want whole pages)."""
    a = page_aligned_empty(n)
    a[:] = 0
    return a


def page_aligned_empty(n: int) -> np.ndarray:
    """``n`` int32 starting at a page boundary, not written (its pages not yet mapped)."""
    raw = np.empty(n + 1024, np.int32)
    off = (-raw.ctypes.data % 4096) // 4
    return raw[off:off + n]


class Probe:
    """The arrays, buffers and queue the variants share; each variant a method that returns once its work is done."""

    def __init__(self, rt: hpu.Runtime, n: int) -> None:
        ctx, mf = rt.context, cl.mem_flags
        self.ctx, self.n, self.q = ctx, n, cl.CommandQueue(ctx, rt.device)
        self.src, self.res, self.plain = page_aligned(n), page_aligned(n), page_aligned(n)
        self.numpy, self.out_numpy = np.zeros(n, np.int32), np.zeros(n, np.int32)
        self.new_aligned, self.new_numpy = self.plain, self.numpy
        self.d = cl.Buffer(ctx, mf.READ_WRITE, self.src.nbytes)
        self.pinned_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.ALLOC_HOST_PTR, self.src.nbytes)
        self.pinned, _ = cl.enqueue_map_buffer(self.q, self.pinned_buf, cl.map_flags.WRITE, 0, (n,), np.int32)
        self.kept = cl.Buffer(ctx, mf.READ_ONLY | mf.USE_HOST_PTR, hostbuf=self.src)
        self.kept_out = cl.Buffer(ctx, mf.WRITE_ONLY | mf.USE_HOST_PTR, hostbuf=self.res)
        self.take = cl.Program(ctx, KERNEL).build().take
        self.rng, self.value = np.random.default_rng(0), 0

    def fresh(self) -> None:
        """New contents in every input (so that a stale device-side copy is caught), and new arrays."""
        self.value += 1
        self.src[:] = self.value
        self.src[::4097] = self.rng.integers(0, 1 << 30, self.src[::4097].shape[0], dtype=np.int32)
        self.new_aligned, self.new_numpy = page_aligned_empty(self.n), np.empty(self.n, np.int32)
        for a in (self.plain, self.numpy, self.new_aligned, self.new_numpy):
            a[:] = self.src

    def on_device(self) -> bool:
        back = np.empty(self.n, np.int32)
        cl.enqueue_copy(self.q, back, self.d, is_blocking=True)
        return bool(np.array_equal(back, self.src))

    def write(self, arr: Callable[[], np.ndarray]) -> Callable[[], None]:
        return lambda: cl.enqueue_copy(self.q, self.d, arr(), is_blocking=True)

    def staged(self) -> None:
        np.copyto(self.pinned, self.src)
        cl.enqueue_copy(self.q, self.d, self.pinned, is_blocking=True)

    def made_over(self, arr: Callable[[], np.ndarray]) -> Callable[[], None]:
        def run() -> None:
            b = cl.Buffer(self.ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR, hostbuf=arr())
            cl.enqueue_copy(self.q, self.d, b)
            self.q.finish()
            b.release()
        return run

    def host_changed(self) -> None:  # the spec's way of telling the driver that the host wrote the array
        m, _ = cl.enqueue_map_buffer(self.q, self.kept, cl.map_flags.WRITE, 0, (self.n,), np.int32)
        m.base.release(self.q)

    def kept_copy(self) -> None:
        self.host_changed()
        cl.enqueue_copy(self.q, self.d, self.kept)
        self.q.finish()

    def kernel_reads(self) -> None:
        self.host_changed()
        self.take(self.q, (self.n,), None, self.kept, self.d)
        self.q.finish()

    def ups(self) -> dict[str, Callable[[], None]]:
        return {"write_buffer": self.write(lambda: self.plain),
                "write_buffer, numpy's alignment": self.write(lambda: self.numpy),
                "write_buffer, a new array": self.write(lambda: self.new_aligned),
                "write_buffer, a new array, numpy's alignment": self.write(lambda: self.new_numpy),
                "write_buffer, the array under host_ptr": self.write(lambda: self.src),
                "staged": self.staged,
                "host_ptr, made per call": self.made_over(lambda: self.src),
                "host_ptr, a new array": self.made_over(lambda: self.new_aligned),
                "host_ptr, a new array, numpy's alignment": self.made_over(lambda: self.new_numpy),
                "host_ptr, kept": self.kept_copy, "kernel reads host_ptr": self.kernel_reads}

    def read(self, arr: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
        def run() -> np.ndarray:
            a = arr()
            cl.enqueue_copy(self.q, a, self.d, is_blocking=True)
            return a
        return run

    def kept_down(self) -> np.ndarray:
        cl.enqueue_copy(self.q, self.kept_out, self.d)
        m, _ = cl.enqueue_map_buffer(self.q, self.kept_out, cl.map_flags.READ, 0, (self.n,), np.int32)
        m.base.release(self.q)
        self.q.finish()
        return self.res

    def new_result(self) -> np.ndarray:
        a = page_aligned_empty(self.n)
        b = cl.Buffer(self.ctx, cl.mem_flags.WRITE_ONLY | cl.mem_flags.USE_HOST_PTR, hostbuf=a)
        cl.enqueue_copy(self.q, b, self.d)
        m, _ = cl.enqueue_map_buffer(self.q, b, cl.map_flags.READ, 0, (self.n,), np.int32)
        m.base.release(self.q)
        self.q.finish()
        b.release()
        return a

    def downs(self) -> dict[str, Callable[[], np.ndarray]]:
        return {"read_buffer": self.read(lambda: self.plain),
                "read_buffer, numpy's alignment": self.read(lambda: self.out_numpy),
                "read_buffer, a new array": self.read(lambda: self.new_aligned),
                "read_buffer, a new array, numpy's alignment": self.read(lambda: self.new_numpy),
                "read_buffer, the array under host_ptr": self.read(lambda: self.res),
                "host_ptr, kept, down": self.kept_down, "host_ptr, a new array, down": self.new_result}

    def measure(self, repeats: int) -> list[dict]:
        """Median ms of each variant (after one untimed call) and whether every call's values were right."""
        rows = []
        for name, fn in self.ups().items():
            times, right = [], True
            for i in range(repeats + 1):
                self.fresh()
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
                right &= self.on_device()
            rows.append({"variant": name, "ms": 1e3 * float(np.median(times[1:])), "right": right})
        for name, fn in self.downs().items():
            times, right = [], True
            for i in range(repeats + 1):
                self.fresh()
                cl.enqueue_copy(self.q, self.d, self.src, is_blocking=True)
                for a in (self.res, self.plain, self.out_numpy, self.new_aligned, self.new_numpy):
                    a[:] = -1
                t0 = time.perf_counter()
                got = fn()
                times.append(time.perf_counter() - t0)
                right &= bool(np.array_equal(got, self.src))
            rows.append({"variant": name, "ms": 1e3 * float(np.median(times[1:])), "right": right})
        return rows

    def close(self) -> None:
        self.pinned.base.release(self.q)
        self.q.finish()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runtime_arguments(ap)
    ap.add_argument("--mib", type=int, default=64, help="MiB moved (default 64: 2^24 int32)")
    ap.add_argument("--repeats", type=int, default=11, help="timed calls of each variant")
    args = ap.parse_args(argv)
    rt = hpu.Runtime(args.device, profile=args.profile, threads=args.threads)
    if not rt.has_device:
        raise SystemExit("no OpenCL device")
    probe = Probe(rt, args.mib << 18)
    rows = probe.measure(args.repeats)
    meta = {"date": utc_now(), "command": command_line("bench_host_ptr.py", argv), "device": rt.device.name,
            "driver": rt.device.driver_version, "host": host_description(), "mib": args.mib,
            "repeats": args.repeats, "hpu": hpu.__version__}
    print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
    print(f"{'variant':44s} {'ms':>8s} {'GB/s':>7s}  right")
    for r in rows:
        print(f"{r['variant']:44s} {r['ms']:8.3f} {probe.src.nbytes / r['ms'] / 1e6:7.1f}  {r['right']}")
    probe.close()
    rt.close()
    if args.json:
        print(f"wrote {write_json(args.json, {'meta': meta, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
