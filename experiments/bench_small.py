"""What the numpy-compatible calls cost on small arrays: ``hpu.sort``, ``hpu.argsort`` and ``hpu.sort_by_key``
beside numpy's stable sorts, from one element to 2^16.

A drop-in replacement for ``numpy.sort`` is also called on small arrays, where a call's fixed costs (checking the
arguments, the model's choice, the pools) are all there is.  For each size and dtype the script times, back to
back on one thread, the best of ``--repeats`` loops of calls (each loop long enough to take about
``--loop-ms``), every call's result checked once against numpy's first:

- ``hpu.sort(a)`` against ``numpy.sort(a, kind="stable")``;
- ``hpu.argsort(a)`` against ``numpy.argsort(a, kind="stable")``;
- ``hpu.sort_by_key(a, v)`` (int64 values) against ``p = numpy.argsort(a, kind="stable"); a[p], v[p]``;

and prints microseconds a call and hpu's time over numpy's.  The first call of ``hpu.sort`` in the process (100
keys, with hpu's import) and the first of 2^16 keys after it, which makes the default runtime
(:func:`hpu.default_runtime`) unless the first did, are timed apart.

    python experiments/bench_small.py --json results/cpu-only/bench_small.json
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench_common import command_line, utc_now, write_json


def calls(a: np.ndarray, v: np.ndarray) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """Per call, ``(hpu's, numpy's)`` on keys ``a`` and values ``v``."""
    import hpu

    def np_by_key() -> tuple[np.ndarray, np.ndarray]:
        p = np.argsort(a, kind="stable")
        return a[p], v[p]

    return {"sort": (lambda: hpu.sort(a), lambda: np.sort(a, kind="stable")),
            "argsort": (lambda: hpu.argsort(a), lambda: np.argsort(a, kind="stable")),
            "sort_by_key": (lambda: hpu.sort_by_key(a, v), np_by_key)}


def same(x: Any, y: Any) -> bool:
    """Whether two results (arrays or tuples of them) are equal bit for bit."""
    if isinstance(x, tuple):
        return len(x) == len(y) and all(same(p, q) for p, q in zip(x, y))
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def per_call(fn: Callable[[], Any], repeats: int, loop_s: float) -> float:
    """Seconds a call: the best of ``repeats`` loops of as many calls as fill about ``loop_s``."""
    t0 = time.perf_counter()
    fn()
    number = max(1, int(loop_s / max(time.perf_counter() - t0, 1e-7)))
    return min(timeit.repeat(fn, number=number, repeat=repeats)) / number


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-log", type=int, default=16, help="largest size, 2**k elements (default 16)")
    ap.add_argument("--repeats", type=int, default=5, help="loops a measurement, the best taken (default 5)")
    ap.add_argument("--loop-ms", type=float, default=20.0, help="milliseconds a loop (default 20)")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    first, larger = rng.integers(0, 1000, 100, dtype=np.int32), rng.integers(0, 1000, 1 << 16, dtype=np.int32)
    t0 = time.perf_counter()
    import hpu

    hpu.sort(first)
    t1 = time.perf_counter()
    hpu.sort(larger)
    first_s, larger_s = t1 - t0, time.perf_counter() - t1
    rt = hpu.default_runtime()
    print(f"# {utc_now()}  {rt!r}")
    print(f"first hpu.sort in the process, 100 keys (with hpu's import): {first_s * 1e3:.1f} ms; "
          f"the first of 2^16 keys after it: {larger_s * 1e3:.1f} ms")
    print(f"{'dtype':8s} {'n':>7s} {'call':12s} {'hpu us':>9s} {'numpy us':>9s} {'ratio':>7s}")
    rows = []
    sizes = sorted({0, 1, *(4**k for k in range(1, args.max_log // 2 + 1)), 2**args.max_log})
    for dtype in (np.int32, np.float64):
        for n in sizes:
            a = (rng.random(n) * 2**20).astype(dtype)
            v = rng.integers(0, 2**62, n)
            for name, (mine, theirs) in calls(a, v).items():
                if not same(mine(), theirs()):
                    raise SystemExit(f"wrong result: hpu.{name} of {n} {np.dtype(dtype)} keys")
                h, t = (per_call(f, args.repeats, args.loop_ms / 1e3) for f in (mine, theirs))
                rows.append({"dtype": np.dtype(dtype).name, "n": n, "call": name, "hpu_s": h, "numpy_s": t})
                print(f"{np.dtype(dtype).name:8s} {n:7d} {name:12s} {h * 1e6:9.2f} {t * 1e6:9.2f} {h / t:7.2f}")
    if args.json:
        from hpu.core.util import host_description

        write_json(Path(args.json), {"date": utc_now(), "command": command_line("bench_small.py", argv),
                                     "host": host_description(), "runtime": repr(rt), "first_call_s": first_s,
                                     "first_larger_call_s": larger_s, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
