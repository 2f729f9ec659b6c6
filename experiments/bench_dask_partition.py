"""One block's partition in hpu.dask.sort, both ways: numpy on the CPU, or sorted on the device and cut; and one key
range from sorted pieces, merged or sorted again.

For int64 blocks of 2^min-log .. 2^max-log uniform random keys and one
splitter (the key in the middle of the block), times (median of --repeats
after a warm-up call, in one process, with a runtime of --threads threads as
a worker's) ``hpu.dask.partition_block`` with ``method="numpy"`` (order-
preserving keys, a search among the splitters, a stable counting sort of the
range numbers, a gather) and ``method="sort"`` (``hpu.sort`` on the default
device with its calibrated profile, then a binary search of each splitter),
prints the ratio and what ``"auto"`` takes.  Then, for a key range of as many
keys made of --pieces sorted pieces (as the range's pieces arrive from blocks
sorted and cut), times merging them in the runtime's thread pool
(``hpu.sorting.cpu.multiway_merge``, numpy's timsort merging the runs in each
bucket) against ``hpu.sort`` of their concatenation (the runtime's plan).

    python experiments/bench_dask_partition.py [--min-log 20] [--max-log 24] [--threads 1] [--pieces 8]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import hpu
from bench_common import command_line, timings, utc_now, write_json
from hpu.dask import partition_block
from hpu.sorting.cpu import multiway_merge
from hpu.sorting.keys import to_unsigned


def merge_or_sort(n: int, pieces: int, rt: hpu.Runtime, repeats: int) -> tuple[float, float]:
    """Median seconds to merge ``pieces`` sorted int64 pieces of ``n`` keys in all, and to sort them again."""
    rng = np.random.default_rng(n + pieces)
    runs = [np.sort(rng.integers(0, 1 << 40, n // pieces)) for _ in range(pieces)]
    out = np.empty(sum(r.size for r in runs), np.int64)
    merge = timings(lambda: multiway_merge(runs, out, rt.pool, rt.threads, timsort_max_runs=pieces), repeats)
    again = timings(lambda: hpu.sort(np.concatenate(runs), runtime=rt), repeats)
    return float(np.median(merge)), float(np.median(again))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-log", type=int, default=20)
    ap.add_argument("--max-log", type=int, default=24)
    ap.add_argument("--threads", type=int, default=1, help="the runtimes' threads, as a worker's (default 1)")
    ap.add_argument("--pieces", type=int, default=8, help="sorted pieces of a key range (default 8)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    with hpu.Runtime(threads=args.threads) as rt, hpu.using_runtime(rt):
        meta = {"date": utc_now(), "command": command_line("bench_dask_partition.py", argv),
                "device": rt.device_name, "calibrated": rt.calibrated, "threads": args.threads}
        print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
        for lg in range(args.min_log, args.max_log + 1):
            block = np.random.default_rng(lg).integers(0, 1 << 40, 1 << lg)
            mid = block.size // 2
            splitters = (to_unsigned(block[mid : mid + 1]), np.array([mid], np.int64))

            def part(method: str) -> float:
                return float(np.median(timings(lambda: partition_block(block, 0, splitters, 2, method=method),
                                               args.repeats)))

            numpy_s, cut_s = part("numpy"), part("sort")
            plan = hpu.sorting.planned_strategy(block.size, block.dtype, rt)
            merge_s, again_s = merge_or_sort(block.size, args.pieces, rt, args.repeats)
            rows.append({"n": 1 << lg, "numpy_partition_seconds": numpy_s, "sort_and_cut_seconds": cut_s,
                         "plan": plan, "pieces": args.pieces, "merge_seconds": merge_s, "sort_again_seconds": again_s})
            print(f"2^{lg}  numpy partition {numpy_s * 1e3:8.2f} ms  sorted and cut {cut_s * 1e3:8.2f} ms  "
                  f"x{numpy_s / cut_s:5.2f}  (the runtime's plan for the block: {plan});  {args.pieces} sorted "
                  f"pieces merged {merge_s * 1e3:8.2f} ms, sorted again {again_s * 1e3:8.2f} ms", flush=True)
    if args.json:
        print(f"wrote {write_json(args.json, {'meta': meta, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
