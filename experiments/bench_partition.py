"""A block's keys grouped by bucket, both ways of :func:`hpu.sorting.cpu.stable_partition`.

For blocks of 2^--log keys (int32 and int64) in --buckets random buckets (uniform bucket numbers, so every
bucket's mask is as unpredictable as it gets), times on one thread (median of --repeats after a warm-up call), and
with --threads threads each grouping a block of its own at once (the blocks' total over the wall time, against one
thread's: numpy must release Python's global lock for the threads to gain), ``method="compress"``
(``numpy.compress`` of each bucket's keys in turn) and ``method="argsort"`` (a gather through
numpy's stable argsort of the bucket numbers), checks that both give the same result, and prints which is faster;
``"auto"`` takes the first up to :data:`hpu.sorting.cpu.COMPRESS_MAX_BUCKETS` buckets.  The key-range split's
partition (:func:`hpu.sorting.keyrange.partition`) and :func:`hpu.dask.partition_block` group their blocks so.

    python experiments/bench_partition.py [--log 20] [--buckets 2,3,4,6,8,12,16,32] [--repeats 9] [--threads 16]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import platform
import sys
from pathlib import Path

import numpy as np

from bench_common import command_line, timings, utc_now, write_json
from hpu.core.util import host_description
from hpu.sorting.cpu import COMPRESS_MAX_BUCKETS, stable_partition


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", type=int, default=20, help="2^LOG keys a block (default 20)")
    ap.add_argument("--buckets", default="2,3,4,6,8,12,16,32")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads at once (default: all cores)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    m = 1 << args.log
    meta = {"date": utc_now(), "command": command_line("bench_partition.py", argv), "host": host_description(),
            "python": platform.python_version(), "numpy": np.__version__, "compress_max_buckets": COMPRESS_MAX_BUCKETS}
    print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
    print(f"{'dtype':>6} {'buckets':>7} {'compress ms':>12} {'argsort ms':>11} {'faster':>9}   "
          f"{args.threads} threads: speed-up over one, compress / argsort")
    pool = concurrent.futures.ThreadPoolExecutor(args.threads)
    rows = []
    for dtype in (np.int32, np.int64):
        x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, m, dtype=dtype)
        for k in (int(v) for v in args.buckets.split(",")):
            ids = rng.integers(0, k, m).astype(np.uint8 if k <= 256 else np.uint16)
            out = np.empty_like(x)
            ref = stable_partition(x, ids, k, method="argsort")
            got = stable_partition(x, ids, k, out=out, method="compress")
            if not (np.array_equal(ref[0], got[0]) and np.array_equal(ref[1], got[1])):
                raise SystemExit(f"the two methods differ at {np.dtype(dtype).name}, {k} buckets")
            t = {meth: float(np.median(timings(lambda: stable_partition(x, ids, k, out=out, method=meth),
                                               args.repeats)))
                 for meth in ("compress", "argsort")}
            outs = [np.empty_like(x) for _ in range(args.threads)]

            def at_once(meth: str) -> None:
                jobs = [pool.submit(stable_partition, x, ids, k, out=o, method=meth) for o in outs]
                for f in jobs:
                    f.result()

            par = {meth: float(np.median(timings(lambda: at_once(meth), args.repeats))) for meth in t}
            gain = {meth: args.threads * t[meth] / par[meth] for meth in t}
            rows.append({"dtype": np.dtype(dtype).name, "keys": m, "buckets": k, "threads": args.threads,
                         "compress_seconds": t["compress"], "argsort_seconds": t["argsort"],
                         "compress_threads_seconds": par["compress"], "argsort_threads_seconds": par["argsort"]})
            print(f"{np.dtype(dtype).name:>6} {k:>7} {t['compress'] * 1e3:12.2f} {t['argsort'] * 1e3:11.2f} "
                  f"{min(t, key=t.get):>9}   {gain['compress']:5.1f} / {gain['argsort']:5.1f}", flush=True)
    if args.json:
        write_json(args.json, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
