"""Measure the costs of one problem kind's move evaluation on this machine (:class:`TabuCosts`).

The measurements run the engine's own code paths on a scratch search state:
the CPU range evaluation at several sizes (fit ``c0 + c M``), the thread
pool's dispatch cost and parallel speed-up, and the fused kernel over every
sensible transfer level at two device shares.  The device model
``lambda + tau max(ceil(ceil(N_d / G) / W), N_d / g) + kappa G`` is fitted
with ``g`` on a geometric grid and ``(tau, kappa)`` by non-negative least
squares on relative residuals (:func:`scipy.optimize.nnls`), as DESIGN.md
asks for the knee ``g`` of the HPU model (paper 6.4): a piecewise fit, not by
eye.  The whole-neighbourhood timings are also kept as a curve over the
transfer levels, which the model follows at ``alpha = 0`` (measured beats fitted).

Last, the hybrid is timed against each unit alone at three CPU shares, up
to the one the model balances: ``T_hyb - max(T_cpu, T_dev) = o + (1 - omega)
min(T_cpu, T_dev)`` gives the fixed cost ``o`` of using both units and
their overlap ``omega`` in ``[-1, 1]`` (bounded least squares,
:func:`scipy.optimize.lsq_linear`), once with the CPU share on the calling
thread and, with more than one thread, once in the thread pool (``o`` from
the first).

With a device, blocks of iterations resident on the device alone
(:meth:`~hpu.tabu.engine.Evaluator.run_block`) are timed at one work-group
and at the fastest measured transfer level, 4 and 64 iterations a block:
``o_t + K s_t`` gives each level's cost per iteration ``s_t`` and per round
trip ``o_t``, from which :meth:`TabuCosts.plan_resident` chooses the level
and the iterations per round trip.

The costs are kept in the costs file (:func:`costs_path`, the core's
versioned format) and, once loaded or measured, in the runtime's
:class:`~hpu.core.runtime.ResourceCache`: threads that ask at once for the
costs of one problem kind and size wait for one measurement and share it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize

from ..core.calibrate import median_time
from ..core.costs import ProfileError
from ..core.runtime import Runtime, default_profile_path, device_key, resolve_runtime
from .engine import NO_BEST, Evaluator
from .problem import TabuProblem
from .split import TabuCosts, transfer_levels

__all__ = ["calibrate", "costs_path"]

log = logging.getLogger("hpu")

_CPU_SIZE_CAP = 1 << 20  # largest CPU range timed
_POOL_RANGE = 1 << 17  # moves per pooled range timed
_CPU_SECONDS_CAP = 0.25  # no larger CPU range is timed once one took this long
_SLOW_SECONDS = 1.0  # a timing stops repeating past this, whatever its repeats ask (huge neighbourhoods)
_LEVEL_STOP = 8.0  # a transfer level this many times slower than the fastest ends the descent...
_LEVEL_STOP_SECONDS = 0.05  # ...when it also takes longer than this (see _time_levels)
_NO_ASPIRATION = np.iinfo(np.int64).max
_RESIDENT_TENURE = 7  # tenure of the timed resident blocks (capped below the move count)


def costs_path(problem: TabuProblem, runtime: Runtime | None = None) -> Path:
    """Where :func:`calibrate` caches the costs of ``problem``'s kind and size on ``runtime``.

    ``<profile directory>/tabu/<device>-<kind>-<size key>-t<threads>.json``,
    next to the device profile (``$HPU_PROFILE_DIR`` or the user cache);
    ``runtime`` defaults to :func:`hpu.default_runtime`.
    """
    runtime = resolve_runtime(runtime)
    base = default_profile_path(runtime.device).parent / "tabu"
    return base / f"{device_key(runtime.device)}-{problem.kind}-{problem.cache_key}-t{runtime.threads}.json"


def _seconds(fn: Callable[[], object], *, repeats: int = 3, budget: float = 0.05) -> float:
    """Median seconds of ``fn()`` (:func:`hpu.core.calibrate.median_time`): at least ``repeats`` runs unless they
    pass :data:`_SLOW_SECONDS`, more while within ``budget`` seconds, at most 25."""
    return median_time(fn, repeats=repeats, max_repeats=25, budget=budget, slow=_SLOW_SECONDS)[0]


def _nnls_relative(a: np.ndarray, t: np.ndarray, offset: float = 0.0) -> tuple[np.ndarray, float]:
    """Non-negative least squares of ``offset + a x ~ t`` with residuals relative to ``t``."""
    x, res = optimize.nnls(a / t[:, None], 1.0 - offset / t)
    return x, float(res)


def _ranges(m: int, k: int) -> list[tuple[int, int]]:
    """Moves ``[0, m)`` as at most ``k`` contiguous non-empty ranges of near-equal size."""
    b = np.linspace(0, m, k + 1).round().astype(np.int64)
    return [(int(x), int(y)) for x, y in zip(b[:-1], b[1:]) if y > x]


class _Passes:
    """What is timed: the engine's own code paths for one neighbourhood, at iteration 1 with no aspiration."""

    def __init__(self, ev: Evaluator):
        self.ev = ev

    def cpu(self, ranges: list[tuple[int, int]]) -> None:
        """The CPU side of :meth:`Evaluator.evaluate`: the ranges, then the host's combine of their minima."""
        self.ev.best_of_ranges(ranges, 1, _NO_ASPIRATION)

    def device(self) -> None:
        """The device side: the fused kernel, the read-back and the host's combine of the partial minima."""
        self.ev.best_of_device(1, _NO_ASPIRATION)

    def device_applied(self) -> None:
        """The device side after the apply kernel of a move, as in a search."""
        self.ev.apply_on_device(0, 0)
        self.device()

    def hybrid(self) -> None:
        """A whole iteration of the evaluator's split, apply kernel included."""
        self.ev.apply_on_device(0, 0)
        self.ev.evaluate(1, _NO_ASPIRATION)


def _measure_cpu(passes: _Passes, block_moves: int, N: int) -> tuple[float, float, dict]:
    """One thread: fit ``t(M) = c0 + c M`` over a few range sizes; returns ``(c0, c, raw timings)``."""
    sizes, t_cpu = [], []
    for m in sorted({min(max(s, 1), N, _CPU_SIZE_CAP) for s in (block_moves, N // 16, N // 4, N)}):
        sizes.append(m)
        t_cpu.append(_seconds(lambda m=m: passes.cpu([(0, m)])))
        if len(sizes) >= 2 and t_cpu[-1] > _CPU_SECONDS_CAP:  # the line through two sizes is enough
            break
    (c0, c), _ = _nnls_relative(np.column_stack([np.ones(len(sizes)), sizes]), np.array(t_cpu))
    return float(c0), max(float(c), 1e-12), {"moves": sizes, "seconds": t_cpu}


def _measure_pool(runtime: Runtime, passes: _Passes, N: int, c0: float, c: float) -> tuple[float, float, dict | None]:
    """The thread pool's dispatch cost ``d`` and speed-up of ``threads`` ranges; returns ``(d, p, raw timings)``."""
    p = runtime.threads
    if p == 1:
        return 0.0, 1.0, None
    d = _seconds(lambda: [f.result() for f in [runtime.pool.submit(int) for _ in range(p)]])
    m = min(N, p * _POOL_RANGE, max(p, int(p * _CPU_SECONDS_CAP / 4 / c)))  # each range ~1/16 s at most
    ranges = _ranges(m, p)
    t_pool = _seconds(lambda: passes.cpu(ranges))
    p_eff = float(np.clip(c * m / max(t_pool - d - c0, 1e-12), 1.0, p))
    return d, p_eff, {"dispatch": d, "moves": m, "seconds": t_pool}


def _fit_device(nd: np.ndarray, groups: np.ndarray, seconds: np.ndarray, w: int,
                lam0: float) -> tuple[float, float, float]:
    """``(tau, kappa, g)`` of ``T = lambda + tau max(ceil(ceil(N_d / G) / W), N_d / g) + kappa G`` (module docstring).

    ``g`` on a geometric grid from ``W`` to ``2**24 W``, ``(tau, kappa)`` by
    non-negative least squares on residuals relative to the times.
    """
    best = (np.inf, 0.0, 0.0, 0.0)
    for sat in w * 2.0 ** np.arange(0, 24.01, 0.25):
        per_item = np.maximum(np.ceil(np.ceil(nd / groups) / w), nd / sat)
        (tau, kappa), res = _nnls_relative(np.column_stack([per_item, groups]), seconds, lam0)
        if res < best[0] - 1e-12:
            best = (res, tau, kappa, sat)
    _, tau, kappa, sat = best
    return float(tau), float(kappa), float(sat)


def _measure_device(ev: Evaluator, passes: _Passes, runtime: Runtime) -> tuple[dict, dict]:
    """The fused kernel at every sensible transfer level, over the whole neighbourhood and an eighth of it.

    Returns the :class:`TabuCosts` fields of the device and the raw timings.
    """
    N = ev.num_moves
    ev.configure(N - 1, 1, 1)
    w = ev.work_group_size
    lam0 = _seconds(passes.device, repeats=5)
    lam = max(_seconds(passes.device_applied, repeats=5), lam0)
    rows, times, top = [], [], {}
    for nd in sorted({N, N // 8} - {0}):
        if nd < N and nd < 8 * w:
            continue
        for t, g, seconds in _time_levels(ev, passes, nd, w):
            rows.append((nd, g))
            times.append(seconds)
            if nd == N:
                top[t] = seconds + (lam - lam0)
    times_arr = np.array(times)
    nd_arr, g_arr = np.array(rows, dtype=np.float64).T
    tau, kappa, sat = _fit_device(nd_arr, g_arr, times_arr, w, lam0)
    # every level of the whole neighbourhood, in order, the apply kernel as in a search; the fit where not timed
    levels = np.minimum(2.0 ** np.arange(len(transfer_levels(N, w))), N)
    per_item = np.maximum(np.ceil(np.ceil(N / levels) / w), N / sat)
    curve = lam + tau * per_item + kappa * levels
    curve[list(top)] = list(top.values())
    fields = dict(
        work_group_size=w,
        device_fixed_seconds=lam,
        device_move_seconds=max(tau, 1e-15),
        device_saturation=sat,
        partial_seconds=kappa,
        device_level_seconds=tuple(curve.tolist()),
        device_level_moves=N,
        device=runtime.device_name,
        shared_cores=runtime.device_shares_host_cores,
    )
    raw = {"fixed": lam0, "fixed_with_apply": lam, "device_moves": nd_arr.tolist(), "groups": g_arr.tolist(),
           "seconds": times}
    return fields, raw


def _time_levels(ev: Evaluator, passes: _Passes, nd: int, w: int) -> list[tuple[int, int, float]]:
    """``(level t, G, seconds)`` of the fused kernel over the last ``nd`` moves, from the highest transfer level down.

    The descent stops after a level slower than :data:`_LEVEL_STOP` times the
    fastest and than :data:`_LEVEL_STOP_SECONDS`: the lower levels have fewer
    work-items for the same moves and are slower still (the device model's
    ``ceil(ceil(N_d / G) / W)`` term), and on a huge neighbourhood one
    work-group would take minutes to time.
    """
    out: list[tuple[int, int, float]] = []
    for t in reversed(transfer_levels(nd, w)):
        g = min(2**t, nd)
        ev.set_device_range(ev.num_moves - nd, ev.num_moves, g)
        out.append((t, g, _seconds(passes.device, repeats=5, budget=0.1)))
        if out[-1][2] > max(_LEVEL_STOP * min(s for _, _, s in out), _LEVEL_STOP_SECONDS):
            break
    return out


def _fit_overlap(rows: list[tuple[float, float, float]], o: float | None) -> tuple[float, float]:
    """``(o, omega)`` of ``T_hyb - max(T_cpu, T_dev) = o + (1 - omega) min(T_cpu, T_dev)``; ``o`` fitted if None."""
    cpu, dev, hyb = (np.array(v, dtype=np.float64) for v in zip(*rows))
    if o is None:
        fit = optimize.lsq_linear(np.column_stack([np.ones(len(cpu)), np.minimum(cpu, dev)]),
                                  hyb - np.maximum(cpu, dev), bounds=([0.0, 0.0], [np.inf, 2.0]))
        o, serial = (float(v) for v in fit.x)
    else:
        fit = optimize.lsq_linear(np.minimum(cpu, dev)[:, None], hyb - np.maximum(cpu, dev) - o,
                                  bounds=([0.0], [2.0]))
        serial = float(fit.x[0])
    return o, 1.0 - serial


def _measure_hybrid(ev: Evaluator, costs: TabuCosts, passes: _Passes, threads: int) -> tuple[float, float, float, dict]:
    """Fit ``o``, ``omega_1`` and ``omega_p`` (module docstring) from the hybrid and each unit alone.

    The CPU shares are the one where the model's ``T_cpu`` (one range) and
    ``T_dev`` (at the fastest measured level) meet, and a quarter and a
    sixteenth of it; each is timed with the CPU share in one range and, when
    ``threads > 1``, in ``threads`` ranges of the pool.  Returns
    ``(o, omega_1, omega_p, raw timings)`` (``omega_p = omega_1`` for one thread).
    """
    N = ev.num_moves
    level = int(np.argmin(costs.device_level_seconds))
    groups = min(2**level, N)
    grid = np.unique(np.geomspace(1, N - 1, 256).round().astype(np.int64))
    t_cpu, t_dev, _ = costs.predict(N, grid, 1, groups)
    balance = int(grid[np.argmin(np.abs(t_cpu - t_dev))])
    shares = sorted({max(balance // 16, 1), max(balance // 4, 1), balance})
    chunks = [1] + ([threads] if threads > 1 else [])
    rows: dict[int, list] = {k: [] for k in chunks}
    for m in shares:
        ev.set_device_range(m, N, groups)
        dev = _seconds(passes.device_applied, repeats=5, budget=0.1)
        for k in chunks:
            cpu = _seconds(lambda m=m, k=k: passes.cpu(_ranges(m, k)), repeats=5, budget=0.1)
            ev.configure(m, min(k, m), groups)
            rows[k].append((cpu, dev, _seconds(passes.hybrid, repeats=5, budget=0.1)))
    raw: dict[str, Any] = {"level": level, "cpu_moves": shares}
    o, omega = _fit_overlap(rows[1], None)
    omega_p = _fit_overlap(rows[threads], o)[1] if threads > 1 else omega
    for k in chunks:
        raw[f"k{k}"] = {name: [r[i] for r in rows[k]]
                        for i, name in enumerate(("cpu_seconds", "device_seconds", "hybrid_seconds"))}
    return o, omega, omega_p, raw


def _measure_costs(problem: TabuProblem, runtime: Runtime, device: bool = True) -> TabuCosts:
    """Run every measurement of the module docstring on a random solution of ``problem`` (the CPU's alone without
    ``device``)."""
    state = problem.state(problem.random_solution(np.random.default_rng(0)))
    N = problem.num_moves
    with Evaluator(state, runtime, cpu_moves=N, on_device_error="raise") as ev:
        passes = _Passes(ev)
        c0, c, cpu_raw = _measure_cpu(passes, state.block_moves, N)
        meas: dict = {"cpu": cpu_raw}
        host = _seconds(lambda: state.apply(N // 2, 0), repeats=9)
        d, p_eff, pool_raw = _measure_pool(runtime, passes, N, c0, c)
        if pool_raw is not None:
            meas["pool"] = pool_raw
        costs = TabuCosts(kind=problem.kind, key=problem.cache_key, threads=runtime.threads, work_group_size=0,
                          cpu_move_seconds=c, cpu_call_seconds=c0, pool_seconds=d, cpu_parallelism=p_eff,
                          host_seconds=host, measurements=meas)
        if not (device and runtime.has_device):
            return costs
        fields, meas["device"] = _measure_device(ev, passes, runtime)
        costs = dataclasses.replace(costs, **fields)
        if N > 1:
            o, omega, omega_p, meas["hybrid"] = _measure_hybrid(ev, costs, passes, runtime.threads)
            costs = dataclasses.replace(costs, hybrid_seconds=o, overlap=omega, pool_overlap=omega_p)
        fields, meas["resident"] = _measure_resident(ev, costs)
        costs = dataclasses.replace(costs, **fields)
    return costs


def _measure_resident(ev: Evaluator, costs: TabuCosts) -> tuple[dict, dict]:
    """``s_t`` and ``o_t`` of resident blocks (module docstring) at level 0 and the fastest measured level.

    The blocks move the device's state away from the host's: run last.  A
    level whose blocks all halted early (no feasible move) is left out.
    Level 0 is left out where one evaluation there is slower than at the
    fastest level by more than a round trip ``lambda`` (all that a launch
    saved per iteration can gain) and a block of 64 iterations would take
    over :data:`_SLOW_SECONDS`; blocks of 1 and 4 iterations replace those
    of 4 and 64 where 64 iterations would.
    """
    N = ev.num_moves
    curve = np.asarray(costs.device_level_seconds)
    best = int(np.argmin(curve))
    slow = 64 * curve > _SLOW_SECONDS
    hopeless = slow[0] and curve[0] - curve[best] > costs.device_fixed_seconds
    levels = sorted({best} | (set() if hopeless else {0}))
    fields: dict[str, list] = {"resident_levels": [], "resident_iteration_seconds": [], "resident_block_seconds": []}
    raw: dict[str, Any] = {}
    for t in levels:
        ev.configure(0, 1, min(2**t, N))
        points = []
        for k in (1, 4) if slow[t] else (4, 64):
            done: list[int] = []

            def block(k: int = k, done: list[int] = done) -> None:
                control = np.array([ev.state.value, NO_BEST, 0, 0, 0], dtype=np.int64)
                done.append(ev.run_block(1, k, min(_RESIDENT_TENURE, N - 1), control, None, None).size // 2)

            block()  # warm-up: the resident kernels and the trail are made on first use
            seconds = _seconds(block, repeats=3, budget=0.05)
            points.append((float(np.mean(done)), seconds))
        (d1, t1), (d2, t2) = points
        raw[f"level{t}"] = {"iterations": [d1, d2], "seconds": [t1, t2]}
        if d2 <= d1:
            continue
        s_t = max((t2 - t1) / (d2 - d1), 1e-9)
        fields["resident_levels"].append(t)
        fields["resident_iteration_seconds"].append(s_t)
        fields["resident_block_seconds"].append(max(t1 - s_t * d1, 0.0))
    return fields, raw


def _load_or_measure(problem: TabuProblem, runtime: Runtime, path: Path) -> TabuCosts:
    """The costs in ``path`` if it holds valid ones, else measured and saved there."""
    if path.exists():
        try:
            costs = TabuCosts.load(path)
            log.debug("tabu costs loaded from %s", path)
            return costs
        except ProfileError as e:
            log.warning("ignoring the cached tabu costs: %s", e)
    return _measure_and_save(problem, runtime, path)


def _measure_and_save(problem: TabuProblem, runtime: Runtime, path: Path) -> TabuCosts:
    costs = _measure_costs(problem, runtime)
    costs.save(path)
    log.info("tabu costs saved to %s", path)
    return costs


def calibrate(problem: TabuProblem, runtime: Runtime | None = None, *, force: bool = False,
              cache: bool = True, units: str = "all") -> TabuCosts:
    """Measure (or load from the cache) the costs the split model needs for ``problem``'s kind and size.

    Parameters
    ----------
    problem : TabuProblem
        Its kind and :attr:`~TabuProblem.cache_key` name the cache; the
        measurements run on a random solution of it.
    runtime : hpu.Runtime, optional
        The CPU pool (``runtime.threads``) and device to measure (default
        :func:`hpu.default_runtime`).
    force : bool
        Measure even when a cached file exists (and overwrite it).
    cache : bool
        Read and write the cache file (:func:`costs_path`) and the runtime's
        copy of it; False measures anew and keeps nothing.
    units : {"all", "cpu"}
        ``"cpu"``: the CPU's costs only, for a search that leaves the device
        alone (``strategy="cpu"``): the cached costs where the file holds
        them, else the CPU measured alone, kept by the runtime but not saved
        (the file holds every unit's); the device is not touched.

    Returns
    -------
    TabuCosts
        With ``cache=True``, one object per runtime, problem kind and size
        until ``force`` replaces it (the runtime forgets it when it rebuilds
        its context).

    Raises
    ------
    hpu.DeviceFailure
        The device failed during the measurements (the runtime is told).
    ValueError
        An unknown ``units``.

    Notes
    -----
    Takes one to a few seconds for small instances, several for the largest
    benchmark instances (the CPU is timed on at most 2**20 moves per range,
    and on no larger range once one took 0.25 s; each transfer level for up
    to 0.1 s, the hybrid at three CPU shares).  Thread-safe: threads asking
    at once for the same costs wait for one measurement (or load) and share
    its result; what other threads run on the runtime meanwhile slows the
    measured units down, so calibrate before a concurrent workload.
    """
    if units not in ("all", "cpu"):
        raise ValueError(f"units must be 'all' or 'cpu', got {units!r}")
    rt = resolve_runtime(runtime)
    with rt.call():
        if units == "cpu" and rt.has_device:
            return _cpu_costs(problem, rt, cache and not force)
        if not cache:
            return _measure_costs(problem, rt)
        path = costs_path(problem, rt)
        key = ("tabu", "costs", str(path))
        if force:
            costs = _measure_and_save(problem, rt, path)
            rt.resources.pop(key)
            rt.resources.get(key, lambda: costs, TabuCosts)
            return costs
        return rt.resources.get(key, lambda: _load_or_measure(problem, rt, path), TabuCosts)


def _cpu_costs(problem: TabuProblem, rt: Runtime, cached: bool) -> TabuCosts:
    """:func:`calibrate`'s ``units="cpu"`` on a runtime with a device."""
    def measure() -> TabuCosts:
        return _measure_costs(problem, rt, device=False)

    if not cached:
        return measure()
    path = costs_path(problem, rt)
    if path.exists():
        try:
            return rt.resources.get(("tabu", "costs", str(path)), lambda: TabuCosts.load(path), TabuCosts)
        except ProfileError as e:
            log.warning("ignoring the cached tabu costs: %s", e)
    return rt.resources.get(("tabu", "cpu costs", str(path)), measure, TabuCosts)
