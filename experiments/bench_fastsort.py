"""Device-resident sort of int32 keys: hpu's device sorts against pyopencl's BitonicSort and RadixSort.

For each n = 2^k the keys are uniform random int32 in [0, 2n), already on the
device; a run is timed on the host as ``queue.finish()`` before, the sort,
``queue.finish()`` after (launch overheads included), and the median of
``--repeats`` runs after one warm-up run (which also checks the result
against ``np.sort``) is reported in milliseconds.  BitonicSort sorts in
place, so its input is restored from a pristine copy before each run (not
timed); it handles powers of two only.

Usage::

    python experiments/bench_fastsort.py --sizes 16-26 --json experiments/results/fastsort.json
    python experiments/bench_fastsort.py --algorithms merge,tile-radix --no-baselines

The ratio columns divide each other sorter's time by the first of hpu's; "merges" is the merge sort's count of
global merge passes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
import pyopencl.tools as cl_tools

import hpu
from bench_common import command_line, utc_now
from hpu.sorting.device import ALGORITHMS, DeviceSorter

DTYPE = np.dtype(np.int32)


def parse_sizes(text: str) -> list[int]:
    """``"16-20,24"`` -> [16, 17, 18, 19, 20, 24] (exponents of two)."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    if not out or min(out) < 1 or max(out) > 40:
        raise argparse.ArgumentTypeError(f"bad --sizes {text!r}: exponents between 1 and 40, e.g. 16-26 or 16,20,24")
    return out


def time_runs(queue: Any, run: Callable[[], Any], prepare: Callable[[], None], repeats: int) -> list[float]:
    """Milliseconds of ``repeats`` calls of ``run``, each after ``prepare`` and a drained queue."""
    times = []
    for _ in range(repeats):
        prepare()
        queue.finish()
        t0 = time.perf_counter()
        run()
        queue.finish()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def baselines(rt: hpu.Runtime) -> dict[str, Any]:
    """pyopencl's device sorts that import here: name -> factory of a per-size runner."""
    out: dict[str, Any] = {}
    queue = rt.queue
    try:
        from pyopencl.bitonic_sort import BitonicSort
    except ImportError as e:
        print(f"BitonicSort unavailable: {e}", file=sys.stderr)
    else:
        bitonic = BitonicSort(rt.context)

        def bitonic_case(src: Any, n: int):
            arr = cl_array.empty(queue, n, DTYPE)

            def prepare():
                cl.enqueue_copy(queue, arr.data, src)

            def run():
                bitonic(arr, queue=queue)
                return arr

            return prepare, run

        out["bitonic"] = bitonic_case
    try:
        from pyopencl.algorithm import RadixSort
    except ImportError as e:
        print(f"RadixSort unavailable: {e}", file=sys.stderr)
    else:
        radix = RadixSort(rt.context, "int *ary", key_expr="ary[i]", sort_arg_names=["ary"], key_dtype=np.uint32)
        pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))

        def radix_case(src: Any, n: int):
            arr = cl_array.empty(queue, n, DTYPE, allocator=pool)

            def prepare():
                cl.enqueue_copy(queue, arr.data, src)

            def run():
                (res,), _ = radix(arr, queue=queue, allocator=pool, key_bits=32)
                return res

            return prepare, run

        out["radix"] = radix_case
    return out


def time_size(rt: hpu.Runtime, k: int, sorters: dict[str, DeviceSorter], others: dict[str, Any], repeats: int,
              rng: np.random.Generator, passes: int) -> dict[str, Any]:
    """One row of the table: every sorter's times at ``n = 2**k`` (each result checked against ``np.sort``)."""
    n = 1 << k
    keys = rng.integers(0, 2 * n, n, dtype=DTYPE)
    expect = np.sort(keys)
    queue, ctx = rt.queue, rt.context
    src = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=keys)
    out = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, keys.nbytes)
    cases = {name: (lambda: None, lambda s=s: s.sort(src, n, out=out)[0]) for name, s in sorters.items()}
    cases.update({name: make(src, n) for name, make in others.items()})
    row: dict[str, Any] = {"log2n": k, "n": n, "passes": passes}
    for name, (prepare, run) in cases.items():
        try:
            prepare()
            result = run()
            got = np.empty_like(keys)
            cl.enqueue_copy(queue, got, result.data if isinstance(result, cl_array.Array) else result)
            times = time_runs(queue, run, prepare, repeats)
        except cl.Error as e:  # e.g. out of device memory for a baseline
            row[name] = {"error": str(e)}
            continue
        row[name] = {"median_ms": statistics.median(times), "times_ms": times,
                     "correct": bool(np.array_equal(got, expect))}
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes("16-26"),
                    help="exponents k of n = 2^k: ranges and lists, e.g. 16-26 or 16,20,24 (default 16-26)")
    ap.add_argument("--repeats", type=int, default=10, help="timed runs per size and sorter (default 10)")
    ap.add_argument("--device", default=None, help="OpenCL device, as hpu.Runtime accepts (default: a GPU)")
    ap.add_argument("--algorithms", default="merge",
                    help=f"comma-separated DeviceSorter algorithms of hpu to time, of {', '.join(ALGORITHMS)} "
                         "(default merge)")
    ap.add_argument("--work-group-size", type=int, default=None, help="hpu merge kernels' work-group size")
    ap.add_argument("--items-per-thread", type=int, default=None, help="hpu merge kernels' keys per work-item")
    ap.add_argument("--no-baselines", action="store_true", help="time hpu only")
    ap.add_argument("--json", type=Path, default=None, help="write all timings to this JSON file")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    algorithms = args.algorithms.split(",")
    if not set(algorithms) <= set(ALGORITHMS):
        ap.error(f"--algorithms: each of {', '.join(ALGORITHMS)}, got {args.algorithms!r}")

    with hpu.Runtime(args.device, profile="hpu1") as rt:  # the profile plays no part here
        rt.require_device()
        info = rt.device_info
        sorters = {f"hpu {a}": DeviceSorter(rt, DTYPE, work_group_size=args.work_group_size,
                                            items_per_thread=args.items_per_thread, algorithm=a) for a in algorithms}
        sorter = next(iter(sorters.values()))
        ref = next(iter(sorters))
        others = {} if args.no_baselines else baselines(rt)
        print(f"device: {info.name} ({info.platform}, {info.version}, driver {info.driver})")
        print(f"hpu: work_group_size={sorter.work_group_size} items_per_thread={sorter.items_per_thread} "
              f"tile={sorter.tile}; int32 uniform in [0, 2n); median of {args.repeats} runs, ms\n")
        names = [*sorters, *others]
        print(" ".join([f"{'n':>6}", f"{'merges':>6}", *(f"{name + ' ms':>18}" for name in names),
                        f"{'Mkeys/s':>11}", *(f"{name + '/first':>18}" for name in names[1:])]))
        rows = []
        all_correct = True
        rng = np.random.default_rng(20261122)
        for k in args.sizes:
            row = time_size(rt, k, sorters, others, args.repeats, rng, sorter.passes(1 << k))
            n = 1 << k
            rows.append(row)
            med = {name: row[name].get("median_ms") for name in names}
            hpu_ms = med[ref]
            cells = [f"{'2^%d' % k:>6}", f"{row['passes']:>6}",
                     *(f"{m:>18.3f}" if m else f"{'n/a':>18}" for m in med.values()),
                     f"{n / hpu_ms / 1e3:>11.1f}" if hpu_ms else f"{'n/a':>11}",
                     *(f"{med[name] / hpu_ms:>18.2f}" if med[name] and hpu_ms else f"{'n/a':>18}"
                       for name in names[1:])]
            wrong = [name for name in names if row[name].get("correct") is False]
            all_correct &= not wrong
            if wrong:
                cells.append(f" WRONG RESULT: {', '.join(wrong)}")
            print(" ".join(cells), flush=True)

        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({
                "benchmark": "device-resident sort, int32 uniform in [0, 2n)",
                "date": utc_now(), "command": command_line("bench_fastsort.py", argv),
                "device": info.name, "platform": info.platform, "device_version": info.version,
                "driver": info.driver, "pyopencl": cl.VERSION_TEXT, "repeats": args.repeats,
                "timing": "host wall clock between queue.finish() calls, milliseconds",
                "hpu": {"work_group_size": sorter.work_group_size, "items_per_thread": sorter.items_per_thread,
                        "tile": sorter.tile, "algorithms": algorithms},
                "results": rows,
            }, indent=1))
            print(f"\nwrote {args.json}")
    return 0 if all_correct else 1


if __name__ == "__main__":
    sys.exit(main())
