"""The trace of a hybrid run: what each unit did and when (for tables and Gantt charts)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Recorder", "Trace", "TraceEvent", "event_times"]


#: Held while a trace reads its deferred device timestamps (rare and short: one lock for every trace).
_RESOLVING = threading.RLock()


@dataclasses.dataclass(frozen=True)
class TraceEvent:
    """One timed step of a run.

    Attributes
    ----------
    unit : str
        ``"cpu:<thread name>"`` (``"cpu:pool"``: work spread over the thread
        pool; ``"cpu:hpu-stage_<k>"``: a thread of the compiled stager's,
        :class:`hpu.core.streaming.NativeStaging`), ``"device"`` (kernels)
        or ``"bus"`` (copies); a further
        device's units end with its number (``"device1"``, ``"bus1"``).
    kind : str
        The workload's name of the step: ``"h2d"`` and ``"d2h"`` (copies),
        ``"fallback"`` (the CPU redoing a failed device share), and e.g.
        ``"combine"``, ``"base"``, ``"layout"`` (:mod:`hpu.dc`), ``"sort"``,
        ``"merge"``, ``"stage"``, ``"partition"`` (:mod:`hpu.sorting`).
    level : int
        Recursion level (0 = root; ``depth`` = leaves; -1 for copies and staging).
    start, end : float
        Seconds since the start of the run (host clock; device events are
        converted with the queue's clock offset).
    count : int
        Subproblems handled.
    size : int
        Elements per subproblem.
    nbytes : int
        Bytes moved (copies) or touched.
    """

    unit: str
    kind: str
    level: int
    start: float
    end: float

    @property
    def duration(self) -> float:
        """``end - start`` in seconds."""
        return self.end - self.start

    count: int = 0
    size: int = 0
    nbytes: int = 0


@dataclasses.dataclass
class Trace:
    """What a run did and when: the executor's record, for tables and Gantt charts.

    Attributes
    ----------
    strategy : str
        The strategy run (after any substitution, e.g. ``"cpu"`` in CPU-only mode).
    alpha : float
        CPU share at the transfer level as executed (after rounding to whole subproblems).
    transfer_level : int
    depth : int
    n : int
    wall : float
        Seconds from start to result.
    events : list of TraceEvent
    split : hpu.Split or None
        The model's split that was executed, with its predicted times: the
        model's choice, or with a forced ``strategy`` the model's split for
        that strategy (paper mode's advanced split with a forced ``alpha``
        too, :func:`hpu.advanced_split` taking it).  None when the caller
        forced what the split would choose (``alpha``, ``transfer_level``
        or ``shares`` in fast mode; ``transfer_level`` in paper mode), and
        when the runtime's profile is uncalibrated
        (:attr:`hpu.Runtime.calibrated` False: the fast-mode sorts then run
        on the CPU alone, chosen without the model).
    fallback : str
        Non-empty when the device failed and the CPU redid its share (the reason).
    start : float or None
        ``time.perf_counter()`` seconds at the trace's zero, from which its
        events' times and ``wall`` count: lines a trace up with the caller's
        clock (how long a call ran before its first event, or after its
        last) or with another call's trace.  None for a trace that kept no
        clock (a sort of at most one element).
    """

    strategy: str
    alpha: float
    transfer_level: int
    depth: int
    n: int
    wall: float = 0.0
    events: list[TraceEvent] = dataclasses.field(default_factory=list)
    split: Any = None
    fallback: str = ""
    start: float | None = None
    _deferred: list = dataclasses.field(default_factory=list, repr=False, compare=False)

    def resolve(self) -> Trace:
        """Add the events whose device timestamps are still to be read; return ``self``.

        Fast mode defers reading its OpenCL events' profiling times (some 40
        queries) until a trace is asked for, so that a sort that returns no
        trace does not pay for them.  :func:`hpu.hybrid_mergesort` resolves
        the trace it returns; the methods below resolve before they read.
        Thread-safe: a thread that asks while another resolves waits for it.
        """
        with _RESOLVING:
            while self._deferred:
                self._deferred.pop(0)()
        return self

    def busy(self, unit_prefix: str) -> float:
        """Total seconds of events whose unit starts with ``unit_prefix``."""
        self.resolve()
        return sum(e.duration for e in self.events if e.unit.startswith(unit_prefix))

    def span(self, unit_prefix: str) -> tuple[float, float]:
        """(first start, last end) of events on matching units; (0, 0) if none."""
        self.resolve()
        ev = [e for e in self.events if e.unit.startswith(unit_prefix)]
        return (min(e.start for e in ev), max(e.end for e in ev)) if ev else (0.0, 0.0)

    def to_dict(self) -> dict:
        """JSON-ready dict (events as dicts; the split as its fields)."""
        self.resolve()
        d = dataclasses.asdict(self)  # the split too, as its fields (asdict recurses into dataclasses)
        del d["_deferred"]
        return d

    def summary(self) -> str:
        """A short human-readable table: per unit, busy seconds and events."""
        self.resolve()
        units: dict[str, list[TraceEvent]] = {}
        for e in self.events:
            units.setdefault(e.unit, []).append(e)
        lines = [
            f"{self.strategy}: n={self.n} depth={self.depth} alpha={self.alpha:.4f} "
            f"transfer_level={self.transfer_level} wall={self.wall * 1e3:.2f} ms"
            + (f" (device fell back to CPU: {self.fallback})" if self.fallback else "")
        ]
        for u in sorted(units):
            ev = units[u]
            lines.append(f"  {u:<24} {sum(e.duration for e in ev) * 1e3:9.2f} ms busy  {len(ev):5d} events")
        return "\n".join(lines)


class Recorder:
    """Collects a run's :class:`TraceEvent` from any thread (locked), on one clock.

    ``now()`` is seconds since the recorder was made; ``device_offset`` is
    the device clock (seconds) at that instant, or None without profiling;
    ``deferred`` holds callables that add events whose device timestamps are
    read only when the trace is resolved (:meth:`Trace.resolve`).
    """

    def __init__(self) -> None:
        self.device_offset: float | None = 0.0  # device-clock seconds at t0 (None: no profiling)
        self.t0 = time.perf_counter()
        self.events: list[TraceEvent] = []
        self.deferred: list[Callable[[], None]] = []  # see Trace.resolve
        self.lock = threading.Lock()

    def now(self) -> float:
        """Seconds since the recorder was made."""
        return time.perf_counter() - self.t0

    def add(self, *args: Any, **kw: Any) -> None:
        """Append ``TraceEvent(*args, **kw)``."""
        with self.lock:
            self.events.append(TraceEvent(*args, **kw))

    def finish(self, trace: Trace) -> Trace:
        """Hand the events (and the deferred device timestamps) to ``trace``, set its wall time and start; return
        it."""
        trace.events, trace.wall, trace._deferred, trace.start = self.events, self.now(), self.deferred, self.t0
        return trace


def event_times(ev: Any, rec: Recorder, fallback: float) -> tuple[float, float]:
    """(start, end) of a profiled OpenCL event in seconds of ``rec``'s clock.

    Uses ``rec.device_offset``; returns ``(fallback, fallback)`` when the
    offset is None (a queue without profiling) or the event has no timestamps.
    """
    off = rec.device_offset
    if off is None:
        return fallback, fallback
    try:
        return ev.profile.start * 1e-9 - off, ev.profile.end * 1e-9 - off
    except Exception:  # queue without profiling
        return fallback, fallback
