"""Helpers shared by the ``experiments/bench_*.py`` scripts (not a benchmark itself).

They time configurations side by side as the benchmarks do: in rounds, each
round running every configuration once in a shuffled order after the same
idle pause (``hpu.core.calibrate.IDLE_PAUSE`` by default), so that noise,
slow spells and after-effects (an OpenCL CPU device still spinning) hit all
configurations alike.  hpu is not imported here at module level (see
``bench_default_runtime.py``, which sets ``HPU_PROFILE_DIR`` first).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np


def utc_now() -> str:
    """The current UTC time in ISO format, to the second (the benchmarks' ``date``)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def command_line(script: str, argv: list[str] | None) -> str:
    """``python experiments/<script> ARGS`` for the JSON (``argv`` default: ``sys.argv[1:]``)."""
    return shlex.join(["python", f"experiments/{script}", *(sys.argv[1:] if argv is None else argv)])


def shuffled_rounds(runs: Mapping[str, Callable[[], Any]], rounds: int, order: np.random.Generator,
                    pause: float | None = None, before: Callable[[], Any] | None = None) -> dict[str, list[float]]:
    """Wall seconds of every callable of ``runs``, ``rounds`` times each, in rounds of shuffled order.

    Each call runs after ``before()`` (untimed; e.g. :func:`cache_flusher`'s) and an idle pause of ``pause``
    seconds (default :data:`hpu.core.calibrate.IDLE_PAUSE`); ``order`` shuffles each round.
    Returns the samples per key of ``runs``, in call order.
    """
    if pause is None:
        from hpu.core.calibrate import IDLE_PAUSE

        pause = IDLE_PAUSE
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for k in order.permutation(list(runs)):
            if before is not None:
                before()
            time.sleep(pause)
            t0 = time.perf_counter()
            runs[k]()
            samples[k].append(time.perf_counter() - t0)
    return samples


def cache_flusher(mib: int) -> Callable[[], None]:
    """A call that writes and reads ``mib`` MiB of its own memory (one thread), so that the next timed call finds
    the host's caches holding none of its data, as a call after other work does (0: a call that does nothing)."""
    junk = np.zeros(max(0, mib) << 17, np.int64)

    def flush() -> None:
        if junk.size:
            np.add(junk, 1, out=junk)
            junk.sum()

    return flush


def timings(fn: Callable[[], Any], repeats: int) -> list[float]:
    """Wall seconds of ``repeats`` calls of ``fn``, back to back, after one untimed warm-up call."""
    fn()  # warm-up (kernel builds, page faults)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def write_json(path: Path, data: dict) -> Path:
    """Write ``data`` as indented JSON to ``path`` (its directory made if missing); return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return path


def add_runtime_arguments(ap: argparse.ArgumentParser) -> None:
    """The options every hpu benchmark takes: ``--device``, ``--profile``, ``--threads`` (for ``hpu.Runtime``) and
    ``--json``."""
    ap.add_argument("--device", default=None, help="OpenCL device (default: hpu's choice)")
    ap.add_argument("--profile", default=None,
                    help="profile JSON path or shipped name (default: this device's calibrated profile)")
    ap.add_argument("--threads", type=int, default=None, help="hpu's CPU threads (default: all cores)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows and machine facts as JSON")
