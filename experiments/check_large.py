"""Sorts past 2^31 keys checked against numpy: the 32-bit index boundary on a real device (no timing claims).

For each size (default 2^31 + 3 int32 keys, 8 GiB), makes uniform random
keys, sorts them once with ``numpy.sort(kind="stable")`` as the reference,
then with ``hpu.hybrid_mergesort`` under each strategy asked for
(``capped-S``: strategy ``S`` on a runtime whose device memory is capped at
``--cap-gib``, so that the device sorts key ranges in pieces; ``capped``:
``capped-auto``),
and prints whether each result equals the reference bit for bit, with the
wall time of the call and the strategy the runtime chose.  Exits 1 if any
result differs.  Needs several times the keys' bytes of host memory.

    python experiments/check_large.py --device gpu [--log 31] [--extra 3] [--strategies auto,gpu,capped,capped-gpu]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import hpu
from bench_common import command_line, utc_now


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="OpenCL device (default: hpu's choice)")
    ap.add_argument("--log", type=int, default=31, help="n = 2^LOG + EXTRA keys (default 31)")
    ap.add_argument("--extra", type=int, default=3, help="keys beyond 2^LOG (default 3)")
    ap.add_argument("--dtype", default="int32")
    ap.add_argument("--strategies", default="auto,gpu,capped,capped-gpu",
                    help="comma-separated hybrid_mergesort strategies; 'capped-S': S with the device capped "
                         "('capped': the default)")
    ap.add_argument("--cap-gib", type=float, default=1.0, help="device memory cap of the 'capped' run (GiB)")
    args = ap.parse_args(argv)
    n = (1 << args.log) + args.extra
    rng = np.random.default_rng(0)
    a = rng.integers(np.iinfo(np.int32).min, np.iinfo(np.int32).max, n, dtype=np.int32).astype(args.dtype, copy=False)
    t = time.perf_counter()
    ref = np.sort(a, kind="stable")
    print(f"# date: {utc_now()}  command: {command_line('check_large.py', argv)}  n: {n}  dtype: {a.dtype}  "
          f"numpy.sort: {time.perf_counter() - t:.1f} s", flush=True)
    bad = 0
    with hpu.Runtime(args.device) as rt:
        print(f"# device: {rt.device_name}  calibrated: {rt.calibrated}", flush=True)
        for s in args.strategies.split(","):
            capped = s.startswith("capped")
            strategy = (s.partition("-")[2] or "auto") if capped else s
            run_rt = hpu.Runtime(args.device, device_memory_limit=int(args.cap_gib * (1 << 30))) if capped else rt
            try:
                before = a[:16].copy()
                t = time.perf_counter()
                out, tr = hpu.hybrid_mergesort(a, strategy=strategy, runtime=run_rt, return_trace=True)
                wall = time.perf_counter() - t
                ok = out.dtype == ref.dtype and np.array_equal(out.view(np.uint8), ref.view(np.uint8))
                ok = ok and np.array_equal(a[:16], before)
                bad += not ok
                print(f"{s:>8}  {'ok' if ok else 'WRONG'}  {wall:7.2f} s  (chose {tr.strategy}, alpha {tr.alpha:.3f}"
                      f"{', fallback: ' + tr.fallback if tr.fallback else ''})", flush=True)
                del out
            finally:
                if capped:
                    run_rt.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
