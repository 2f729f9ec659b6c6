"""Hybrid executor: runs a breadth-first :class:`~hpu.dc.Plan` under a split.

The CPU share runs in the runtime's thread pool (numpy releases the GIL, so
the threads really run in parallel); the device share runs on the runtime's
OpenCL command queue, driven by one feeder thread that mostly waits on
events.  Both overlap in time for the ``"advanced"`` strategy (paper 5.2,
algorithm 8).  Every step is recorded in a :class:`Trace`.

Strategies (paper section 5):

``"cpu"``
    every level in the thread pool;
``"gpu"``
    every level on the device (one transfer each way);
``"basic"``
    levels ``transfer_level .. depth-1`` on the device, then the levels
    above on the CPU (paper 5.1: one transfer);
``"advanced"``
    at level ``y = transfer_level``, the first ``round(alpha * b**y)``
    subproblems go to the CPU and the rest to the device; both work
    bottom-up concurrently (the CPU goes on above ``y`` inside its own share
    while it can), the device share comes back at level ``y``, and the CPU
    finishes the top levels (paper 5.2, fig. 2, algorithm 8).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .dc import Plan
from .device import Runtime

try:
    import pyopencl as cl
except Exception:  # pragma: no cover
    cl = None

log = logging.getLogger("hpu")

__all__ = ["STRATEGIES", "DeviceFailure", "Trace", "TraceEvent", "execute"]

STRATEGIES = ("cpu", "gpu", "basic", "advanced")


class DeviceFailure(RuntimeError):
    """The device share of a run failed (build error, out of resources, lost device)."""


@dataclasses.dataclass(frozen=True)
class TraceEvent:
    """One timed step of a run.

    Attributes
    ----------
    unit : str
        ``"cpu:<thread name>"``, ``"device"`` (kernels) or ``"bus"`` (copies).
    kind : str
        ``"combine"``, ``"base"``, ``"h2d"``, ``"d2h"``, ``"layout"`` or ``"fallback"``.
    level : int
        Recursion level (0 = root; ``depth`` = leaves; -1 for copies).
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
    count: int = 0
    size: int = 0
    nbytes: int = 0

    @property
    def duration(self) -> float:
        """``end - start`` in seconds."""
        return self.end - self.start


@dataclasses.dataclass
class Trace:
    """What a run did and when: the executor's record, for tables and Gantt charts.

    Attributes
    ----------
    strategy : str
    alpha : float
        CPU share at the transfer level as executed (after rounding to whole subproblems).
    transfer_level : int
    depth : int
    n : int
    wall : float
        Seconds from start to result.
    events : list of TraceEvent
    split : hpu.Split or None
        The model's split that was executed (None when forced by the caller).
    fallback : str
        Non-empty when the device failed and the CPU redid its share (the reason).
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
    _deferred: list = dataclasses.field(default_factory=list, repr=False, compare=False)

    def resolve(self) -> Trace:
        """Add the events whose device timestamps are still to be read; return ``self``.

        Fast mode defers reading its OpenCL events' profiling times (some 40
        queries) until a trace is asked for, so that a sort that returns no
        trace does not pay for them.  :func:`hpu.hybrid_mergesort` resolves
        the trace it returns; the methods below resolve before they read.
        """
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
        d = dataclasses.asdict(self)
        del d["_deferred"]
        d["split"] = dataclasses.asdict(self.split) if self.split is not None else None
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


class _Recorder:
    def __init__(self) -> None:
        self.device_offset: float | None = 0.0  # device-clock seconds at t0 (None: no profiling)
        self.t0 = time.perf_counter()
        self.events: list[TraceEvent] = []
        self.deferred: list[Callable[[], None]] = []  # see Trace.resolve
        self.lock = threading.Lock()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def add(self, *args: Any, **kw: Any) -> None:
        with self.lock:
            self.events.append(TraceEvent(*args, **kw))


# ---------------------------------------------------------------------------
# CPU share
# ---------------------------------------------------------------------------


def _cpu_level(rt: Runtime, plan: Plan, work: np.ndarray, level: int, r0: int, r1: int, rec: _Recorder,
               kind: str = "combine") -> None:
    """Run subproblems ``[r0, r1)`` of ``level`` in the thread pool, one chunk of rows per thread."""
    if r1 <= r0:
        return
    lv = plan.level(level)
    size = lv.size if kind == "combine" else plan.spec.leaf_size
    rows = work[: plan.padded_n].reshape(-1, size)
    fn = plan.spec.combine_np if kind == "combine" else plan.spec.base_np
    nchunks = min(rt.threads, r1 - r0)
    bounds = np.linspace(r0, r1, nchunks + 1).astype(np.int64)

    def task(a: int, b: int) -> None:
        t = rec.now()
        fn(rows[a:b])
        rec.add(f"cpu:{threading.current_thread().name}", kind, level, t, rec.now(), b - a, size, (b - a) * size * plan.dtype.itemsize)

    futures = [rt.pool.submit(task, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    for f in futures:
        f.result()


def _cpu_levels(rt: Runtime, plan: Plan, work: np.ndarray, lo: int, hi: int, first: int, last: int,
                rec: _Recorder) -> None:
    """CPU runs the subtree over leaf-level rows ``[first, last)`` from the leaves up to level ``lo``.

    ``hi`` is the level at which ``first``/``last`` are expressed (number of
    subproblems ``b**hi``); rows at level ``i`` are scaled by ``b**(hi-i)``.
    """
    b = plan.spec.branching
    if plan.spec.base_np is not None:
        scale = b ** (plan.depth - hi)
        _cpu_level(rt, plan, work, plan.depth, first * scale, last * scale, rec, kind="base")
    for i in range(plan.depth - 1, lo - 1, -1):
        if i >= hi:
            scale = b ** (i - hi)
            _cpu_level(rt, plan, work, i, first * scale, last * scale, rec)
        else:
            d = b ** (hi - i)
            _cpu_level(rt, plan, work, i, first // d, last // d, rec)


# ---------------------------------------------------------------------------
# Device share
# ---------------------------------------------------------------------------


def _event_times(ev: Any, rec: _Recorder, offset: float) -> tuple[float, float]:
    try:
        return ev.profile.start * 1e-9 - offset, ev.profile.end * 1e-9 - offset
    except Exception:  # queue without profiling
        t = rec.now()
        return t, t


def _clock_offset(rt: Runtime, rec: _Recorder) -> float:
    """Device-clock seconds at the recorder's t0 (from a marker event); also stored in ``rec``."""
    ev = cl.enqueue_marker(rt.queue)
    ev.wait()
    host = rec.now()
    try:
        rec.device_offset = ev.profile.end * 1e-9 - host
    except Exception:
        rec.device_offset = 0.0
    return rec.device_offset


def _device_share(rt: Runtime, plan: Plan, work: np.ndarray, y: int, first: int, last: int, rec: _Recorder) -> None:
    """Device runs subproblems ``[first, last)`` of level ``y`` from the leaves up to level ``y``.

    Copies the region to the device, runs the base case and one combine
    launch per level (interleaved layout if the spec asks for it, paper 6.3),
    converts back to the contiguous layout and copies the region back into
    ``work``.  Raises :class:`DeviceFailure` on any OpenCL error.
    """
    spec, dt = plan.spec, plan.dtype
    seg = plan.level(y).size
    lo_e, hi_e = first * seg, last * seg
    count = last - first
    nbytes = (hi_e - lo_e) * dt.itemsize
    region = work[lo_e:hi_e]
    try:
        _check_device_memory(rt, nbytes)
        prg = rt.build(plan.device_source())
        q = rt.queue
        mf = cl.mem_flags
        a = cl.Buffer(rt.context, mf.READ_WRITE, nbytes)
        bbuf = cl.Buffer(rt.context, mf.READ_WRITE, nbytes)
        offset = _clock_offset(rt, rec)
        events: list[tuple[Any, str, int, int, int, int]] = []
        ev = cl.enqueue_copy(q, a, region, is_blocking=False)
        events.append((ev, "h2d", -1, 0, 0, nbytes))
        b = spec.branching
        if spec.base_cl is not None:
            m = count * b ** (plan.depth - y)
            ev = cl.Kernel(prg, f"{spec.name}_base")(q, (m,), None, a, np.uint64(m), np.uint64(spec.leaf_size))
            events.append((ev, "base", plan.depth, m, spec.leaf_size, nbytes))
        src, dst = a, bbuf
        interleaved = spec.coalesced
        if interleaved and spec.leaf_size > 1 and y < plan.depth:
            m = count * b ** (plan.depth - y)
            ev = cl.Kernel(prg, "interleave")(q, (m * spec.leaf_size,), None, src, dst, np.uint64(m), np.uint64(spec.leaf_size))
            events.append((ev, "layout", plan.depth, m, spec.leaf_size, nbytes))
            src, dst = dst, src
        kname = f"{spec.name}_combine_interleaved" if interleaved else f"{spec.name}_combine"
        kern = cl.Kernel(prg, kname)
        for i in range(plan.depth - 1, y - 1, -1):
            lv = plan.level(i)
            m = count * b ** (i - y)
            ev = kern(q, (m,), None, src, dst, np.uint64(m), np.uint64(lv.size))
            events.append((ev, "combine", i, m, lv.size, nbytes))
            src, dst = dst, src
        if interleaved and count > 1 and y < plan.depth:
            ev = cl.Kernel(prg, "deinterleave")(q, (count * seg,), None, src, dst, np.uint64(count), np.uint64(seg))
            events.append((ev, "layout", y, count, seg, nbytes))
            src, dst = dst, src
        ev = cl.enqueue_copy(q, region, src, is_blocking=False)
        events.append((ev, "d2h", -1, 0, 0, nbytes))
        ev.wait()
        for ev, kind, level, m, size, nb in events:
            t0, t1 = _event_times(ev, rec, offset)
            rec.add("bus" if kind in ("h2d", "d2h") else "device", kind, level, t0, t1, m, size, nb)
        a.release()
        bbuf.release()
    except DeviceFailure:
        raise
    except Exception as e:
        if cl is not None and isinstance(e, (cl.Error, MemoryError)):
            raise DeviceFailure(f"{type(e).__name__}: {e}") from e
        raise


def _check_device_memory(rt: Runtime, nbytes: int) -> None:
    dev = rt.device
    if nbytes > dev.max_mem_alloc_size or 2 * nbytes > 0.8 * dev.global_mem_size:
        raise DeviceFailure(
            f"device share of {nbytes / 2**20:.0f} MiB exceeds the device memory "
            f"(max allocation {dev.max_mem_alloc_size / 2**20:.0f} MiB, global {dev.global_mem_size / 2**20:.0f} MiB)"
        )


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------


def execute(plan: Plan, data: np.ndarray, runtime: Runtime, *, strategy: str, alpha: float = 0.0,
            transfer_level: int | None = None, on_device_error: str = "fallback", split: Any = None
            ) -> tuple[np.ndarray, Trace]:
    """Run ``plan`` on ``data`` with a strategy; return the padded result array and its trace.

    Parameters
    ----------
    plan : Plan
    data : numpy.ndarray, shape (n,)
        Input of ``plan.dtype``; never modified (the executor works on a padded copy).
    runtime : Runtime
    strategy : {"cpu", "gpu", "basic", "advanced"}
    alpha : float
        CPU fraction of the subproblems at ``transfer_level`` (``"advanced"``
        only), in [0, 1]; rounded to whole subproblems.
    transfer_level : int, optional
        Level ``y`` at which the device share comes back (``0 .. depth``);
        required for ``"basic"`` and ``"advanced"``.
    on_device_error : {"fallback", "raise"}
        On a device failure, redo the device share on the CPU from the input
        (logged warning) or raise :class:`DeviceFailure`.  Either way no
        partly computed data is returned.
    split : hpu.Split, optional
        Recorded in the trace.

    Returns
    -------
    result : numpy.ndarray, shape (plan.padded_n,)
        The combined array in the contiguous layout (slice ``[:n]`` for the
        caller's elements).
    trace : Trace

    Raises
    ------
    ValueError
        Unknown strategy, alpha outside [0, 1], transfer level outside
        ``[0, depth]``, or a device strategy in CPU-only mode.
    DeviceFailure
        With ``on_device_error="raise"``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if on_device_error not in ("fallback", "raise"):
        raise ValueError(f"on_device_error must be 'fallback' or 'raise', got {on_device_error!r}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
    depth = plan.depth
    if strategy == "cpu":
        y, alpha = depth, 1.0
    elif strategy == "gpu":
        y, alpha = 0, 0.0
    else:
        if transfer_level is None:
            raise ValueError(f"strategy {strategy!r} needs a transfer_level")
        y = int(transfer_level)
        if not 0 <= y <= depth:
            raise ValueError(f"transfer_level must lie in [0, {depth}] (the recursion tree's levels), got {transfer_level}")
        if strategy == "basic":
            alpha = 0.0
    if strategy != "cpu" and not runtime.has_device:
        raise ValueError(f"strategy {strategy!r} needs an OpenCL device, but the runtime is CPU-only")

    rec = _Recorder()
    work = plan.padded(data)
    b = plan.spec.branching
    total = b**y
    n_cpu = min(total, max(0, int(round(alpha * total))))
    if y == depth and plan.spec.base_cl is None:  # a device share of bare leaves: no work, so no copies either
        n_cpu = total
    trace = Trace(strategy, n_cpu / total, y, depth, plan.n, split=split)

    if n_cpu == total:  # everything on the CPU
        _cpu_levels(rt=runtime, plan=plan, work=work, lo=0, hi=depth, first=0, last=b**depth, rec=rec)
        trace.events, trace.wall = rec.events, rec.now()
        return work, trace

    # The CPU may go on above y inside its own share while its subproblems stay whole.
    cpu_top = y
    while cpu_top > 0 and n_cpu % b ** (y - cpu_top + 1) == 0:
        cpu_top -= 1
    failure: list[BaseException] = []

    def device_job() -> None:
        try:
            _device_share(runtime, plan, work, y, n_cpu, total, rec)
        except BaseException as e:  # handed to the caller's thread
            failure.append(e)

    feeder = threading.Thread(target=device_job, name="hpu-device-feeder", daemon=True)
    feeder.start()
    if n_cpu:
        _cpu_levels(runtime, plan, work, cpu_top, y, 0, n_cpu, rec)
    feeder.join()
    if failure:
        err = failure[0]
        if not isinstance(err, DeviceFailure) or on_device_error == "raise":
            raise err
        log.warning("device share failed (%s); the CPU redoes it", err)
        seg = plan.level(y).size
        t = rec.now()
        work[n_cpu * seg : total * seg] = plan.padded(data)[n_cpu * seg : total * seg]
        rec.add("cpu:main", "fallback", y, t, rec.now())
        _cpu_levels(runtime, plan, work, y, y, n_cpu, total, rec)
        trace.fallback = str(err)
    # Top levels: everything above y on the CPU (rows of the CPU share already done are skipped).
    for i in range(y - 1, -1, -1):
        r0 = n_cpu // b ** (y - i) if i >= cpu_top else 0
        _cpu_level(runtime, plan, work, i, r0, b**i, rec)
    trace.events, trace.wall = rec.events, rec.now()
    return work, trace
