"""The CPU share of fast mode: variants of the parallel sort (PSRS) timed side by side against numpy.sort.

For uniform random int32 of size n, times in shuffled rounds (each run after
``hpu.calibrate.IDLE_PAUSE``, as ``bench_mergesort.py`` does):

* ``numpy``: ``numpy.sort`` on one core;
* ``psrs T q``: :func:`hpu.cpusort.parallel_sort` on T threads, buckets
  re-sorted by numpy's quicksort (``TIMSORT_MAX_RUNS = 2``);
* ``psrs T t``: the same, buckets merged by numpy's timsort, which finds
  the sorted runs (``TIMSORT_MAX_RUNS`` unbounded);
* ``psrs T t x2``: twice as many first-phase runs as threads;
* ``... fresh``: into a new ``numpy.empty`` result (first-touch page faults)
  instead of one reused array.

and prints the median, fastest and slowest time and the median's speed-up
over numpy.  The default variant of hpu is marked.

    python experiments/bench_cpusort.py [--log 24] [--threads 16,8] [--rounds 15] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np

import hpu
import hpu.cpusort as cs
from hpu.calibrate import IDLE_PAUSE, host_description


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", default="24", help="comma-separated log2 n (default 24)")
    ap.add_argument("--threads", default=None, help="comma-separated thread counts (default: all cores and half)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    default_runs = cs.TIMSORT_MAX_RUNS
    rows = []
    with hpu.Runtime("none", profile=hpu.Profile(p=1, g=1, gamma=1)) as rt:  # only its thread pool
        threads = [int(x) for x in args.threads.split(",")] if args.threads else sorted({rt.threads, max(1, rt.threads // 2)}, reverse=True)
        meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": "python experiments/bench_cpusort.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                "host": host_description(), "pool_threads": rt.threads, "numpy": np.__version__}
        print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
        print(f"{'n':>10} {'variant':>18} {'median ms':>10} {'min':>8} {'max':>8} {'vs numpy':>9}")
        for lg in (int(x) for x in args.log.split(",")):
            n = 1 << lg
            a = np.random.default_rng(lg).integers(0, 2 * n, n).astype(np.int32)
            ref = np.sort(a)
            out = np.empty_like(a)
            scratch = np.empty_like(a)

            def psrs(t: int, timsort: bool, runs: int, fresh: bool):
                def run() -> np.ndarray:
                    cs.TIMSORT_MAX_RUNS = 1 << 30 if timsort else 2
                    try:
                        return cs.parallel_sort(a, rt.pool, t, out=np.empty_like(a) if fresh else out,
                                                scratch=scratch, runs=runs)
                    finally:
                        cs.TIMSORT_MAX_RUNS = default_runs
                return run

            variants = {"numpy": lambda: np.sort(a)}
            for t in threads:
                variants[f"psrs {t} q"] = psrs(t, False, t, False)
                variants[f"psrs {t} t"] = psrs(t, True, t, False)
                variants[f"psrs {t} t x2"] = psrs(t, True, 2 * t, False)
                variants[f"psrs {t} q fresh"] = psrs(t, False, t, True)
            samples: dict[str, list[float]] = {k: [] for k in variants}
            for k, fn in variants.items():  # warm-up and check
                if not np.array_equal(fn(), ref):
                    raise SystemExit(f"wrong result: {k}")
            order = np.random.default_rng(0)
            for _ in range(args.rounds):
                for k in order.permutation(list(variants)):
                    time.sleep(IDLE_PAUSE)
                    t0 = time.perf_counter()
                    variants[k]()
                    samples[k].append(time.perf_counter() - t0)
            t_np = float(np.median(samples["numpy"]))
            for k, s in samples.items():
                med = float(np.median(s))
                rows.append({"n": n, "variant": k, "median": med, "min": min(s), "max": max(s),
                             "speedup_vs_numpy": t_np / med, "samples": s})
                print(f"{n:>10} {k:>18} {med * 1e3:10.2f} {min(s) * 1e3:8.2f} {max(s) * 1e3:8.2f} {t_np / med:9.2f}",
                      flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
