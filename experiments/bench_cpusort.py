"""The CPU share of fast mode: the parallel sorts (sample sort, PSRS) timed side by side against numpy.sort.

For uniform random keys of size n, times in shuffled rounds (each run after
``hpu.core.calibrate.IDLE_PAUSE``, as ``bench_mergesort.py`` does):

* ``numpy``: ``numpy.sort`` on one core (its default quicksort);
* ``sample T``: :func:`hpu.sorting.cpu.parallel_sort` on T threads as hpu runs it by default where the compiled
  partition was built (:func:`hpu.sorting.cpu.sample_sort`);
* ``psrs T q``: the same by PSRS (``method="psrs"``, the default where no C compiler was found), buckets re-sorted
  by numpy's quicksort (``timsort_max_runs=2``);
* ``psrs T t``: PSRS with the buckets merged by numpy's timsort, which finds the sorted runs (``timsort_max_runs``
  unbounded);
* ``... fresh``: into a new ``numpy.empty`` result (first-touch page faults) instead of one reused array.

and prints the median, fastest and slowest time and the median's speed-up
over numpy.

    python experiments/bench_cpusort.py [--log 24] [--dtype int32] [--threads 16,8] [--rounds 15] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

import hpu
from bench_common import command_line, shuffled_rounds, utc_now, write_json
from hpu.core.util import host_description
from hpu.sorting.cpu import native_partition, parallel_sort

#: ``timsort_max_runs`` of the "t" variants: every bucket merged by timsort.
UNBOUNDED = 1 << 30


def variants(a: np.ndarray, rt: hpu.Runtime, threads: list[int]) -> dict[str, Callable[[], np.ndarray]]:
    """numpy.sort and the variants of :func:`parallel_sort` on ``a`` (one reused result and scratch array)."""
    out = np.empty_like(a)
    scratch = np.empty_like(a)

    def sort(t: int, method: str, timsort: bool, fresh: bool) -> Callable[[], np.ndarray]:
        def run() -> np.ndarray:
            return parallel_sort(a, rt.pool, t, out=np.empty_like(a) if fresh else out, scratch=scratch,
                                 timsort_max_runs=UNBOUNDED if timsort else 2, method=method)
        return run

    found: dict[str, Callable[[], np.ndarray]] = {"numpy": lambda: np.sort(a)}
    for t in threads:
        found[f"sample {t}"] = sort(t, "sample", False, False)
        found[f"sample {t} fresh"] = sort(t, "sample", False, True)
        found[f"psrs {t} q"] = sort(t, "psrs", False, False)
        found[f"psrs {t} t"] = sort(t, "psrs", True, False)
    return found


def bench_size(lg: int, dtype: np.dtype, rt: hpu.Runtime, threads: list[int], rounds: int) -> list[dict]:
    """The rows of one size n = 2^lg (printed): every variant's median, extremes and speed-up over numpy."""
    n = 1 << lg
    a = np.random.default_rng(lg).integers(0, 2 * n, n).astype(dtype)
    ref = np.sort(a)
    runs = variants(a, rt, threads)
    for k, fn in runs.items():  # warm-up and check
        if not np.array_equal(fn(), ref):
            raise SystemExit(f"wrong result: {k}")
    samples = shuffled_rounds(runs, rounds, np.random.default_rng(0))
    t_np = float(np.median(samples["numpy"]))
    rows = []
    for k, s in samples.items():
        med = float(np.median(s))
        rows.append({"n": n, "dtype": str(a.dtype), "variant": k, "median": med, "min": min(s), "max": max(s),
                     "speedup_vs_numpy": t_np / med, "samples": s})
        print(f"{n:>10} {k:>18} {med * 1e3:10.2f} {min(s) * 1e3:8.2f} {max(s) * 1e3:8.2f} {t_np / med:9.2f}",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", default="24", help="comma-separated log2 n (default 24)")
    ap.add_argument("--dtype", default="int32", help="numpy dtype of the keys (default int32)")
    ap.add_argument("--threads", default=None, help="comma-separated thread counts (default: all cores and half)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    with hpu.Runtime("none", profile=hpu.Profile(p=1, g=1, gamma=1)) as rt:  # only its thread pool
        threads = ([int(x) for x in args.threads.split(",")] if args.threads
                   else sorted({rt.threads, max(1, rt.threads // 2)}, reverse=True))
        meta = {"date": utc_now(), "command": command_line("bench_cpusort.py", argv),
                "host": host_description(), "pool_threads": rt.threads, "numpy": np.__version__,
                "dtype": args.dtype, "compiled_partition": native_partition()}
        print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
        print(f"{'n':>10} {'variant':>18} {'median ms':>10} {'min':>8} {'max':>8} {'vs numpy':>9}")
        for lg in (int(x) for x in args.log.split(",")):
            rows += bench_size(lg, np.dtype(args.dtype), rt, threads, args.rounds)
    if args.json:
        write_json(args.json, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
