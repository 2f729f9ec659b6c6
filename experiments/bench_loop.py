"""Long loops as users write them: ``r = f(a)`` called again and again, each result kept until the next returns.

In such a loop the pinned block of the last result is still leased when the next call asks the host pool for its
result, so the pool hands out plain memory or pins another block (:func:`hpu.sorting.pipeline.kept_policy`, a
rent-or-buy choice that counts the plain results handed out so far).  For each of ``hpu.sort`` and ``hpu.argsort``
of 2^24 int32 keys (``--log-n``), ``hpu.sort_by_key`` with int64 values and ``hpu.sort`` of 2^14 rows of 2^10
float32, the script runs on a runtime of its own (so that no other call's pinned block serves it), back to back
(``--pause-ms`` between calls):

- a loop of ``--calls`` calls whose results are dropped as they return (every call recycles one pinned block), then
- a loop of as many calls that keeps each result until the next call returns,

each call checked once against numpy first.  It prints, for windows of the loops' calls, the median milliseconds
a call and in the kept loop the share of results in pinned memory, and the pool's pinned bytes at the end.

    python experiments/bench_loop.py --device gpu --json results/h100/bench_loop.json
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import hpu
from bench_common import add_runtime_arguments, command_line, utc_now, write_json
from bench_targets import calls
from hpu.core.util import host_description

#: The windows of a loop's calls that the table gives medians of (1-based, inclusive).
WINDOWS = ((1, 10), (11, 50), (51, 100), (101, 200), (201, 400), (401, 800))


def loop(fn: Callable[[], Any], n: int, keep: bool, pause: float, pinned: Callable[[Any], bool]) -> tuple[list, list]:
    """Seconds of each of ``n`` calls of ``fn`` and whether each result lay in pinned memory; with ``keep`` each
    result is kept until the next call returns (``r = fn()``), else dropped as it returns."""
    times, where, r = [], [], None
    for _ in range(n):
        time.sleep(pause)
        t0 = time.perf_counter()
        if keep:
            r = fn()
        else:
            fn()
        times.append(time.perf_counter() - t0)
        where.append(pinned(r) if keep else True)
    del r
    return times, where


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runtime_arguments(ap)
    ap.add_argument("--log-n", type=int, default=24, help="keys = 2^log-n (default 24)")
    ap.add_argument("--calls", type=int, default=400, help="calls in each loop (default 400)")
    ap.add_argument("--pause-ms", type=float, default=0.0, help="idle pause before each call (default 0)")
    args = ap.parse_args(argv)
    meta = {"date": utc_now(), "command": command_line("bench_loop.py", argv), "host": host_description(),
            "calls": args.calls, "pause_ms": args.pause_ms, "hpu": hpu.__version__}
    windows = [(a, min(b, args.calls)) for a, b in WINDOWS if a <= args.calls]
    rows = []
    for name in ("hpu.sort", "hpu.argsort", "hpu.sort_by_key", "hpu.sort rows"):
        rt = hpu.Runtime(args.device, profile=args.profile, threads=args.threads)
        fn = calls(rt, args.log_n, 14, 10, only=name)[name]

        def pinned(r: Any, rt: hpu.Runtime = rt) -> bool:
            return all(rt.host_pool.is_pinned(x) for x in (r if isinstance(r, tuple) else (r,)))

        if not rows:
            meta.update(device=rt.device.name, threads=rt.threads, calibrated=rt.calibrated)
            print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
            print(f"{'call':16s} {'loop':8s}" + "".join(f" {f'{a}-{b}':>13s}" for a, b in windows))
        for keep in (False, True):
            times, where = loop(fn, args.calls, keep, args.pause_ms / 1e3, pinned)
            cells = [(1e3 * float(np.median(times[a - 1:b])), float(np.mean(where[a - 1:b]))) for a, b in windows]
            rows.append({"call": name, "kept": keep, "ms": times, "pinned": where,
                         "windows": [{"calls": [a, b], "median_ms": m, "pinned": p} for (a, b), (m, p) in
                                     zip(windows, cells)]})
            print(f"{name:16s} {'kept' if keep else 'dropped':8s}" +
                  "".join(f" {m:7.2f}{f' {p:4.0%}' if keep else '':>6s}" for m, p in cells))
        print(f"{'':16s} its pool: {rt.host_pool.total_bytes / 2**20:.0f} MiB held")
        rt.close()
    if args.json:
        print(f"wrote {write_json(args.json, {'meta': meta, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
