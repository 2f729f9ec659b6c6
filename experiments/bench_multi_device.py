"""Several devices in one HPU: DMA rates of each device from and to each kind of host memory, and sorts side by side.

For every device of ``hpu.Runtime(devices=...)`` (one OpenCL context for all of
them), the host-to-device and device-to-host rate of one copy of --mib MiB
from and to: the runtime's pooled pinned memory, the device's own lease's
pinned memory, the other device's lease's pinned memory, and a touched
numpy array; then every device at once from its own pinned memory.  Then
``hybrid_mergesort`` with the first device alone (``gpu``) and with the
exchange sort over all of them (``exchange``), in alternating calls at each
--logs size: each call's wall time, the traced part of it, and whether its
result came from pinned pool memory.

    python experiments/bench_multi_device.py [--devices all] [--mib 256] [--logs 27,28] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

import hpu
from bench_common import command_line, utc_now, write_json


def rate(queue, host: np.ndarray, buf, repeats: int) -> tuple[float, float]:
    """(host-to-device, device-to-host) GB/s of one copy of ``host``, the best of ``repeats``."""
    out = []
    for up in (True, False):
        best = np.inf
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            (cl.enqueue_copy(queue, buf, host) if up else cl.enqueue_copy(queue, host, buf)).wait()
            best = min(best, time.perf_counter() - t0)
        out.append(host.nbytes / best / 1e9)
    return out[0], out[1]


def copies(rt: hpu.Runtime, nbytes: int, repeats: int) -> list[dict]:
    """Rates of every device from and to every kind of host memory, then all devices at once."""
    leases = [u.acquire_lease() for u in rt.units]
    try:
        pool = rt.host_pool.empty(nbytes, np.uint8, pinned=True)
        own = [lease.pinned("probe", nbytes)[:nbytes] for lease in leases]
        plain = np.ones(nbytes, np.uint8)
        rows = []
        for i, lease in enumerate(leases):
            buf = lease.buffer("probe", nbytes)
            kinds = {"pool pinned": pool, "own pinned": own[i], "other pinned": own[(i + 1) % len(own)],
                     "numpy": plain}
            for kind, host in kinds.items():
                if host is None:
                    continue
                h2d, d2h = rate(lease.queue, host, buf, repeats)
                rows.append({"device": i, "memory": kind, "h2d_GBps": h2d, "d2h_GBps": d2h})
                print(f"device {i}  {kind:>13}  h2d {h2d:6.1f} GB/s  d2h {d2h:6.1f} GB/s", flush=True)
        result: dict[int, tuple[float, float]] = {}

        def one(i: int) -> None:
            result[i] = rate(leases[i].queue, own[i], leases[i].buffer("probe", nbytes), repeats)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(leases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (h2d, d2h) in sorted(result.items()):
            rows.append({"device": i, "memory": "own pinned, all devices at once", "h2d_GBps": h2d, "d2h_GBps": d2h})
            print(f"device {i}  all at once from own pinned  h2d {h2d:6.1f} GB/s  d2h {d2h:6.1f} GB/s", flush=True)
        return rows
    finally:
        for u, lease in zip(rt.units, leases):
            u.release_lease(lease)


def sorts(rt: hpu.Runtime, logs: list[int], calls: int) -> list[dict]:
    """Alternating ``gpu`` and ``exchange`` sorts: each call's wall time and whether its result is pinned."""
    rows = []
    for lg in logs:
        a = np.random.default_rng(lg).integers(0, 2 << lg, 1 << lg).astype(np.int32)
        ref = np.sort(a)
        for c in range(calls):
            for strategy in ("gpu", "exchange"):
                t0 = time.perf_counter()
                out, tr = hpu.hybrid_mergesort(a, strategy=strategy, runtime=rt, return_trace=True)
                wall = time.perf_counter() - t0
                pinned = rt.host_pool.is_pinned(out)
                if not np.array_equal(out, ref):
                    raise SystemExit(f"wrong result: {strategy}, n = 2^{lg}")
                del out
                rows.append({"n": 1 << lg, "strategy": strategy, "call": c, "seconds": wall, "pinned": pinned,
                             "traced_seconds": tr.wall, "fallback": tr.fallback})
                print(f"2^{lg}  {strategy:>8}  call {c}  {wall * 1e3:8.2f} ms  (traced {tr.wall * 1e3:8.2f} ms)  "
                      f"pinned result {pinned}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="all", help="'all' or a comma-separated list (default all)")
    ap.add_argument("--mib", type=int, default=256, help="copy size in MiB (default 256)")
    ap.add_argument("--repeats", type=int, default=3, help="copies per rate, the best kept (default 3)")
    ap.add_argument("--logs", default="27,28", help="sort sizes, log2 (default 27,28)")
    ap.add_argument("--calls", type=int, default=4, help="calls of each strategy per size (default 4)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    devices = args.devices if args.devices == "all" else args.devices.split(",")
    with hpu.Runtime(devices=devices) as rt:
        meta = {"date": utc_now(), "command": command_line("bench_multi_device.py", argv),
                "devices": [u.device_name for u in rt.units], "threads": rt.threads,
                "shared_context": all(u.context is rt.context for u in rt.units)}
        print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()), flush=True)
        rows = copies(rt, args.mib << 20, args.repeats)
        sort_rows = sorts(rt, [int(v) for v in args.logs.split(",")], args.calls)
    if args.json:
        print(f"wrote {write_json(args.json, {'meta': meta, 'copies': rows, 'sorts': sort_rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
