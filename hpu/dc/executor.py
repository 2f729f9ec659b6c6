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

import logging
import threading
from typing import Any

import numpy as np

from ..core.hybrid import (DeviceFailure, HybridResult, check_on_device_error, check_split, check_strategy,
                           run_hybrid)
from ..core.model import Split
from ..core.runtime import DeviceLease, Runtime, resolve_runtime
from ..core.trace import Recorder, Trace, event_times
from ..core.util import wait_all
from .spec import Plan

try:
    import pyopencl as cl
except Exception:  # pragma: no cover
    cl = None

log = logging.getLogger("hpu")

__all__ = ["STRATEGIES", "execute"]

#: The strategies the executor runs (:data:`hpu.core.hybrid.STRATEGIES` says what each means).
STRATEGIES = ("cpu", "gpu", "basic", "advanced")


# ---------------------------------------------------------------------------
# CPU share
# ---------------------------------------------------------------------------


def _cpu_level(rt: Runtime, plan: Plan, work: np.ndarray, level: int, r0: int, r1: int, rec: Recorder,
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
        rec.add(f"cpu:{threading.current_thread().name}", kind, level, t, rec.now(), b - a, size,
                (b - a) * size * plan.dtype.itemsize)

    wait_all(rt.pool.submit(task, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a)


def _cpu_levels(rt: Runtime, plan: Plan, work: np.ndarray, lo: int, hi: int, first: int, last: int,
                rec: Recorder) -> None:
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


def _clock_offset(queue: Any, rec: Recorder) -> float:
    """Device-clock seconds at the recorder's t0 (from a marker event); also stored in ``rec``."""
    ev = cl.enqueue_marker(queue)
    ev.wait()
    host = rec.now()
    try:
        rec.device_offset = ev.profile.end * 1e-9 - host
    except Exception:
        rec.device_offset = None
    return rec.device_offset


def _device_levels(lease: DeviceLease, plan: Plan, a: Any, b: Any, y: int, count: int) -> tuple[Any, list]:
    """Enqueue the base case, layout changes and combine levels ``depth-1 .. y`` of ``count`` subproblems.

    Returns the buffer holding the result and ``(event, kind, level, m, size)`` per launch.
    """
    spec = plan.spec
    prg = lease.build(plan.device_source())
    q, br = lease.queue, spec.branching
    launches: list[tuple[Any, str, int, int, int]] = []
    if spec.base_cl is not None:
        m = count * br ** (plan.depth - y)
        ev = cl.Kernel(prg, f"{spec.name}_base")(q, (m,), None, a, np.uint64(m), np.uint64(spec.leaf_size))
        launches.append((ev, "base", plan.depth, m, spec.leaf_size))
    src, dst = a, b
    interleaved = spec.coalesced
    if interleaved and spec.leaf_size > 1 and y < plan.depth:
        m = count * br ** (plan.depth - y)
        ev = cl.Kernel(prg, "interleave")(q, (m * spec.leaf_size,), None, src, dst, np.uint64(m),
                                          np.uint64(spec.leaf_size))
        launches.append((ev, "layout", plan.depth, m, spec.leaf_size))
        src, dst = dst, src
    kern = cl.Kernel(prg, f"{spec.name}_combine_interleaved" if interleaved else f"{spec.name}_combine")
    for i in range(plan.depth - 1, y - 1, -1):
        m = count * br ** (i - y)
        ev = kern(q, (m,), None, src, dst, np.uint64(m), np.uint64(plan.level(i).size))
        launches.append((ev, "combine", i, m, plan.level(i).size))
        src, dst = dst, src
    seg = plan.level(y).size
    if interleaved and count > 1 and y < plan.depth:
        ev = cl.Kernel(prg, "deinterleave")(q, (count * seg,), None, src, dst, np.uint64(count), np.uint64(seg))
        launches.append((ev, "layout", y, count, seg))
        src, dst = dst, src
    return src, launches


def _device_share(lease: DeviceLease, plan: Plan, work: np.ndarray, y: int, first: int, last: int,
                  rec: Recorder) -> None:
    """Device runs subproblems ``[first, last)`` of level ``y`` from the leaves up to level ``y``.

    Copies the region to the device, runs the base case and one combine
    launch per level (interleaved layout if the spec asks for it, paper 6.3),
    converts back to the contiguous layout and copies the region back into
    ``work``, all on the lease's own queue and buffers.  Raises
    :class:`DeviceFailure` if the share does not fit in device memory; OpenCL
    errors propagate (the driver turns them into device failures).
    """
    seg = plan.level(y).size
    nbytes = (last - first) * seg * plan.dtype.itemsize
    region = work[first * seg:last * seg]
    _check_device_memory(lease, nbytes)
    a, b = lease.buffer("dc-a", nbytes), lease.buffer("dc-b", nbytes)
    q = lease.queue
    _clock_offset(q, rec)
    h2d = cl.enqueue_copy(q, a, region, is_blocking=False)
    result, launches = _device_levels(lease, plan, a, b, y, last - first)
    d2h = cl.enqueue_copy(q, region, result, is_blocking=False)
    d2h.wait()
    now = rec.now()
    for ev, kind in ((h2d, "h2d"), (d2h, "d2h")):
        rec.add("bus", kind, -1, *event_times(ev, rec, now), 0, 0, nbytes)
    for ev, kind, level, m, size in launches:
        rec.add("device", kind, level, *event_times(ev, rec, now), m, size, nbytes)


def _check_device_memory(lease: DeviceLease, nbytes: int) -> None:
    device, usable = lease.device, lease.runtime.device_memory_bytes
    if nbytes > device.max_mem_alloc_size or 2 * nbytes > usable:
        raise DeviceFailure(
            f"device share of {nbytes / 2**20:.4g} MiB exceeds the device memory hpu may use "
            f"(max allocation {device.max_mem_alloc_size / 2**20:.4g} MiB, usable {usable / 2**20:.4g} MiB)"
        )


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------


def execute(plan: Plan, data: np.ndarray, runtime: Runtime | None, *, strategy: str, alpha: float = 0.0,
            transfer_level: int | None = None, on_device_error: str = "fallback", split: Any = None
            ) -> tuple[np.ndarray, Trace]:
    """Run ``plan`` on ``data`` with a strategy; return the padded result array and its trace.

    Parameters
    ----------
    plan : Plan
    data : array_like, shape (n,)
        Input of ``plan.dtype`` or a dtype that casts to it safely; any
        strides and read-only arrays are accepted; never modified (the
        executor works on a padded copy).
    runtime : Runtime or None
        None: :func:`hpu.default_runtime`.
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
        Unknown strategy, alpha outside [0, 1] (or None for ``"advanced"``), transfer level outside
        ``[0, depth]``, a device strategy on a runtime made CPU-only (one
        that lost its device falls back or raises DeviceFailure), or
        ``data`` not of shape ``(plan.n,)``.
    TypeError
        ``plan`` not a :class:`Plan`, ``runtime`` not a Runtime, ``alpha``
        not a number, ``data`` of a dtype the plan's would change (a
        float into an integer plan, a wider integer, a 64-bit integer into
        a float64 plan), or ``split`` not an :class:`hpu.Split`.
    RuntimeClosedError
        ``runtime`` is closed.
    DeviceFailure
        With ``on_device_error="raise"`` when the device fails or has been lost.
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be an hpu.Plan (from DCSpec.plan), got {type(plan).__name__}")
    runtime = resolve_runtime(runtime)
    y, alpha = _levels(plan, runtime, strategy, alpha, transfer_level)
    check_on_device_error(on_device_error)
    data = np.asarray(data)
    if data.shape != (plan.n,):
        raise ValueError(f"data must have the plan's shape ({plan.n},), got {data.shape}")
    # numpy calls int64 -> float64 safe, yet 2**53 + 1 does not survive it: integers of a float's width are refused
    if not np.can_cast(data.dtype, plan.dtype, casting="safe") or (
            data.dtype.kind in "iu" and plan.dtype.kind == "f" and data.dtype.itemsize >= plan.dtype.itemsize):
        raise TypeError(f"data of dtype {data.dtype} would not fit the plan's {plan.dtype} unchanged")
    if split is not None and not isinstance(split, Split):
        raise TypeError(f"split must be an hpu.Split or None, got {type(split).__name__}")
    with runtime.call():
        return _run(plan, data, runtime, strategy, y, alpha, on_device_error, split)


def _levels(plan: Plan, runtime: Runtime, strategy: str, alpha: float, transfer_level: int | None) -> tuple[int, float]:
    """Check a strategy's arguments; return the transfer level ``y`` and ``alpha`` it runs with."""
    check_strategy(strategy, STRATEGIES)
    alpha, transfer_level = check_split(alpha, transfer_level)
    # A runtime that lost its device (another thread's failed rebuild, perhaps after the caller checked it) is no
    # misuse: the device share's lease fails, and it falls back or raises DeviceFailure as on_device_error says.
    if strategy != "cpu" and not runtime.has_device and not runtime.device_lost:
        raise ValueError(f"strategy {strategy!r} needs an OpenCL device, but the runtime is CPU-only")
    if strategy == "cpu":
        return plan.depth, 1.0
    if strategy == "gpu":
        return 0, 0.0
    if transfer_level is None:
        raise ValueError(f"strategy {strategy!r} needs a transfer_level")
    if strategy == "advanced" and alpha is None:
        raise ValueError("strategy 'advanced' needs an alpha (the CPU's share of the subproblems), got None")
    y = transfer_level
    if not 0 <= y <= plan.depth:
        raise ValueError(f"transfer_level must lie in [0, {plan.depth}] (the recursion tree's levels), "
                         f"got {transfer_level}")
    return y, 0.0 if strategy == "basic" else alpha


def _run(plan: Plan, data: np.ndarray, runtime: Runtime, strategy: str, y: int, alpha: float,
         on_device_error: str, split: Any) -> tuple[np.ndarray, Trace]:
    depth, b = plan.depth, plan.spec.branching
    rec = Recorder()
    work = plan.padded(data)
    total = b**y
    n_cpu = min(total, max(0, int(round(alpha * total))))
    if y == depth and plan.spec.base_cl is None:  # a device share of bare leaves: no work, so no copies either
        n_cpu = total
    trace = Trace(strategy, n_cpu / total, y, depth, plan.n, split=split)
    # The CPU may go on above y inside its own share while its subproblems stay whole.
    cpu_top = y
    while cpu_top > 0 and n_cpu % b ** (y - cpu_top + 1) == 0:
        cpu_top -= 1
    seg = plan.level(y).size

    def redo() -> None:
        t = rec.now()
        work[n_cpu * seg:total * seg] = plan.padded(data)[n_cpu * seg:total * seg]
        rec.add("cpu:main", "fallback", y, t, rec.now())
        _cpu_levels(runtime, plan, work, y, y, n_cpu, total, rec)

    def finish(r: HybridResult) -> None:
        trace.fallback = r.fallback
        # Top levels: everything above y on the CPU (rows of the CPU share already done are skipped).
        for i in range(y - 1, -1, -1):
            _cpu_level(runtime, plan, work, i, n_cpu // b ** (y - i) if i >= cpu_top else 0, b**i, rec)

    run_hybrid(
        runtime,
        device=None if n_cpu == total else lambda lease: _device_share(lease, plan, work, y, n_cpu, total, rec),
        cpu=(lambda: _cpu_levels(runtime, plan, work, cpu_top if n_cpu < total else 0, y if n_cpu < total else depth,
                                 0, n_cpu if n_cpu < total else b**depth, rec)) if n_cpu else None,
        redo=redo, on_device_error=on_device_error, finish=finish)
    return work, rec.finish(trace)
