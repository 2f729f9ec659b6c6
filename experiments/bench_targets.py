"""The open issues' per-call targets in one short run: hpu's default calls at 2^24 beside what each is held to.

Uniform random int32 keys (2^24, ``--log-n``), host arrays in and out, each call's result dropped (recycled):

- ``hpu.sort`` of the keys (issue 13: at most 5.0 ms),
- ``hpu.argsort`` of the keys (issue 16: at most 10 ms),
- ``hpu.sort_by_key`` of the keys with int64 values (issue 16: at most 12 ms),
- ``hpu.sort`` of 2^14 rows of 2^10 float32 (``--rows-log``, ``--cols-log``) and ``numpy.sort(axis=-1)`` of them on
  one core (issue 16: hpu at least 20 times faster).

Each is checked once against numpy, then timed in shuffled rounds after the idle pause of
:func:`bench_common.shuffled_rounds` (``--pause-ms``) and back to back, each result dropped as it returns, and after
the pause with each call's last result kept until its next call returns (a loop's ``r = hpu.sort(a)``: the result
before is still alive while the next call runs), medians printed.  The full benchmarks with
every baseline are ``bench_mergesort.py`` and ``bench_argsort.py``; this one is for comparing two versions of hpu
on one machine (``device_run.sh ab``).

    python experiments/bench_targets.py --device gpu --json results/h100/bench_targets.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import hpu
from bench_common import add_runtime_arguments, command_line, shuffled_rounds, utc_now, write_json
from hpu.core.util import host_description

TARGETS = {"hpu.sort": ("ms", 5.0), "hpu.argsort": ("ms", 10.0), "hpu.sort_by_key": ("ms", 12.0),
           "hpu.sort rows": ("x numpy", 20.0)}


def calls(rt: hpu.Runtime, log_n: int, rows_log: int, cols_log: int,
          only: str | None = None) -> dict[str, Callable[[], Any]]:
    """The timed calls, each checked once against numpy here (``only``: that one alone)."""
    rng = np.random.default_rng(0)
    keys = rng.integers(np.iinfo(np.int32).min, np.iinfo(np.int32).max, 2**log_n, dtype=np.int32)
    values = rng.integers(0, 2**62, keys.size, dtype=np.int64)
    rows = rng.standard_normal((2**rows_log, 2**cols_log), dtype=np.float32)
    runs = {"hpu.sort": lambda: hpu.sort(keys, runtime=rt), "hpu.argsort": lambda: hpu.argsort(keys, runtime=rt),
            "hpu.sort_by_key": lambda: hpu.sort_by_key(keys, values, runtime=rt),
            "hpu.sort rows": lambda: hpu.sort(rows, runtime=rt), "numpy.sort rows": lambda: np.sort(rows, axis=-1)}
    perm = np.argsort(keys, kind="stable") if only != "hpu.sort rows" else None
    checks = {"hpu.sort": lambda: np.array_equal(runs["hpu.sort"](), keys[perm]),
              "hpu.argsort": lambda: np.array_equal(runs["hpu.argsort"](), perm),
              "hpu.sort_by_key": lambda: all(np.array_equal(x, y) for x, y in zip(runs["hpu.sort_by_key"](),
                                                                                     (keys[perm], values[perm]))),
              "hpu.sort rows": lambda: np.array_equal(runs["hpu.sort rows"](), np.sort(rows, axis=-1, kind="stable"))}
    wrong = [k for k, check in checks.items() if only in (None, k) and not check()]
    if wrong:
        raise SystemExit(f"wrong results: {wrong}")
    return runs if only is None else {only: runs[only]}


def last_kept(runs: dict[str, Callable[[], Any]]) -> dict[str, Callable[[], None]]:
    """``runs`` as a loop calls them (``r = f()``): each call's result kept until the next call of it returns."""
    last: dict[str, Any] = {}

    def keep(name: str, fn: Callable[[], Any]) -> Callable[[], None]:
        return lambda: last.__setitem__(name, fn())

    return {name: keep(name, fn) for name, fn in runs.items()}


def table(med: dict[str, dict[str, float]], names: list[str], issue_sizes: bool) -> list[dict]:
    """Print each call's medians (``med[mode][name]``, ms) beside its target (at the issues' sizes); the rows."""
    print(f"{'call':18s}" + "".join(f" {mode + ' ms':>22s}" for mode in med) + "   target")
    rows = []
    for name in names:
        unit, target = TARGETS.get(name, ("", None)) if issue_sizes else ("", None)
        cells = [med[mode][name] for mode in med]
        note = ""
        if unit == "x numpy":
            ratios = [med[mode]["numpy.sort rows"] / med[mode][name] for mode in med]
            note = f"at least {target:g}x numpy: " + " / ".join(f"{r:.1f}x" for r in ratios)
        elif unit:
            note = f"at most {target:g} ms"
        rows.append({"call": name, **{f"{mode} ms": c for mode, c in zip(med, cells)}, "target": note})
        print(f"{name:18s}" + "".join(f" {c:22.2f}" for c in cells) + f"   {note}")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runtime_arguments(ap)
    ap.add_argument("--log-n", type=int, default=24, help="keys = 2^log-n (default 24)")
    ap.add_argument("--rows-log", type=int, default=14, help="2^rows-log rows (default 14)")
    ap.add_argument("--cols-log", type=int, default=10, help="2^cols-log float32 a row (default 10)")
    ap.add_argument("--repeats", type=int, default=15, help="timed calls of each in each mode (default 15)")
    ap.add_argument("--pause-ms", type=float, default=20.0, help="idle pause before each call (default 20)")
    args = ap.parse_args(argv)
    rt = hpu.Runtime(args.device, profile=args.profile, threads=args.threads)
    runs = calls(rt, args.log_n, args.rows_log, args.cols_log)
    order = np.random.default_rng(1)
    pause = args.pause_ms / 1e3
    modes = {"after pauses": (runs, pause), "back to back": (runs, 0.0), "last kept, pauses": (last_kept(runs), pause)}
    med = {mode: {k: 1e3 * float(np.median(v)) for k, v in shuffled_rounds(fns, args.repeats, order, pause=p).items()}
           for mode, (fns, p) in modes.items()}
    meta = {"date": utc_now(), "command": command_line("bench_targets.py", argv), "device": rt.device.name,
            "host": host_description(), "threads": rt.threads, "calibrated": rt.calibrated, "repeats": args.repeats,
            "pause_ms": args.pause_ms, "hpu": hpu.__version__}
    print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
    issue_sizes = (args.log_n, args.rows_log, args.cols_log) == (24, 14, 10)  # what the targets are for
    rows = table(med, list(runs), issue_sizes)
    if args.json:
        print(f"wrote {write_json(args.json, {'meta': meta, 'rows': rows})}")
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
