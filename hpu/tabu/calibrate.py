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
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import optimize

from ..core.runtime import Runtime, default_profile_path, device_key
from .engine import Evaluator, _best_of
from .problem import TabuProblem
from .split import TabuCosts, transfer_levels

__all__ = ["calibrate", "costs_path"]

log = logging.getLogger("hpu")

_CPU_SIZE_CAP = 1 << 20  # largest CPU range timed
_POOL_RANGE = 1 << 17  # moves per pooled range timed
_CPU_SECONDS_CAP = 0.25  # no larger CPU range is timed once one took this long


def costs_path(problem: TabuProblem, runtime: Runtime) -> Path:
    """Where :func:`calibrate` caches the costs of ``problem``'s kind and size on ``runtime``.

    ``<profile directory>/tabu/<device>-<kind>-<size key>-t<threads>.json``,
    next to the device profile (``$HPU_PROFILE_DIR`` or the user cache).
    """
    base = default_profile_path(runtime.device).parent / "tabu"
    return base / f"{device_key(runtime.device)}-{problem.kind}-{problem.cache_key}-t{runtime.threads}.json"


_SLOW_SECONDS = 1.0  # a timing stops repeating past this, whatever min_repeats asks (huge neighbourhoods)


def _median_time(fn: Callable[[], object], *, min_repeats: int = 3, max_repeats: int = 25,
                 budget: float = 0.05) -> float:
    """Median seconds of ``fn()`` after a warm-up: at least ``min_repeats`` runs (unless they pass
    :data:`_SLOW_SECONDS`), more while within ``budget`` seconds, at most ``max_repeats``."""
    fn()  # warm-up
    times: list[float] = []
    start = time.perf_counter()
    while not times or (len(times) < min_repeats and time.perf_counter() - start < _SLOW_SECONDS) or (
            len(times) < max_repeats and time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _nnls_relative(a: np.ndarray, t: np.ndarray, offset: float = 0.0) -> tuple[np.ndarray, float]:
    """Non-negative least squares of ``offset + a x ~ t`` with residuals relative to ``t``."""
    x, res = optimize.nnls(a / t[:, None], 1.0 - offset / t)
    return x, float(res)


def _measure_hybrid(ev: Evaluator, costs: TabuCosts, cpu_pass: Callable[[list], None],
                    device_pass: Callable[[], None], it: int, asp: int,
                    threads: int) -> tuple[float, float, float, dict]:
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
    def hybrid() -> None:
        ev._enqueue_apply(0, 0)
        ev.evaluate(it, asp)

    def ranges(m: int, k: int) -> list[tuple[int, int]]:
        b = np.linspace(0, m, k + 1).round().astype(np.int64)
        return [(int(x), int(y)) for x, y in zip(b[:-1], b[1:]) if y > x]

    chunks = [1] + ([threads] if threads > 1 else [])
    rows: dict[int, list] = {k: [] for k in chunks}
    for m in shares:
        ev._set_device_range(m, N, groups)
        dev = _median_time(device_pass, min_repeats=5, budget=0.1)
        for k in chunks:
            cpu = _median_time(lambda m=m, k=k: cpu_pass(ranges(m, k)), min_repeats=5, budget=0.1)
            ev.configure(m, min(k, m), groups)
            rows[k].append((cpu, dev, _median_time(hybrid, min_repeats=5, budget=0.1)))
    raw = {"level": level, "cpu_moves": shares}
    o, omega = 0.0, {}
    for k in chunks:  # o from the calling thread's fit; the pool's shares it
        cpu, dev, hyb = (np.array(v, dtype=np.float64) for v in zip(*rows[k]))
        if k == 1:
            fit = optimize.lsq_linear(np.column_stack([np.ones(len(cpu)), np.minimum(cpu, dev)]),
                                      hyb - np.maximum(cpu, dev), bounds=([0.0, 0.0], [np.inf, 2.0]))
            o, serial = (float(v) for v in fit.x)
        else:
            fit = optimize.lsq_linear(np.minimum(cpu, dev)[:, None], hyb - np.maximum(cpu, dev) - o,
                                      bounds=([0.0], [2.0]))
            serial = float(fit.x[0])
        omega[k] = 1.0 - serial
        raw[f"k{k}"] = {"cpu_seconds": cpu.tolist(), "device_seconds": dev.tolist(), "hybrid_seconds": hyb.tolist()}
    return o, omega[1], omega.get(threads, omega[1]), raw


def calibrate(problem: TabuProblem, runtime: Runtime, *, force: bool = False, cache: bool = True) -> TabuCosts:
    """Measure (or load from the cache) the costs the split model needs for ``problem``'s kind and size.

    Parameters
    ----------
    problem : TabuProblem
        Its kind and :attr:`~TabuProblem.cache_key` name the cache; the
        measurements run on a random solution of it.
    runtime : hpu.Runtime
        The CPU pool (``runtime.threads``) and device to measure.
    force : bool
        Measure even when a cached file exists (and overwrite it).
    cache : bool
        Read and write the cache file (:func:`costs_path`).

    Returns
    -------
    TabuCosts

    Notes
    -----
    Takes one to a few seconds for small instances, several for the largest
    benchmark instances (the CPU is timed on at most 2**20 moves per range,
    and on no larger range once one took 0.25 s; each transfer level for up
    to 0.1 s, the hybrid at three CPU shares).
    """
    path = costs_path(problem, runtime)
    if cache and not force and path.exists():
        try:
            costs = TabuCosts.load(path)
            log.debug("tabu costs loaded from %s", path)
            return costs
        except ValueError as e:
            log.warning("ignoring the cached tabu costs: %s", e)
    state = problem.state(problem.random_solution(np.random.default_rng(0)))
    N = problem.num_moves
    ev = Evaluator(state, runtime, cpu_moves=N)
    meas: dict = {}
    it, asp = 1, np.iinfo(np.int64).max

    def cpu_pass(ranges: list[tuple[int, int]]) -> None:
        """The CPU side of :meth:`Evaluator.evaluate`: the ranges, then the host's combine of their minima."""
        _best_of(*(np.array(v, dtype=np.int64) for v in zip(*ev._cpu_parts(ranges, it, asp))))

    # CPU, one thread: t(M) = c0 + c M.
    sizes, t_cpu = [], []
    for m in sorted({min(max(s, 1), N, _CPU_SIZE_CAP) for s in (state.block_moves, N // 16, N // 4, N)}):
        sizes.append(m)
        t_cpu.append(_median_time(lambda m=m: cpu_pass([(0, m)])))
        if len(sizes) >= 2 and t_cpu[-1] > _CPU_SECONDS_CAP:  # the line through two sizes is enough
            break
    (c0, c), _ = _nnls_relative(np.column_stack([np.ones(len(sizes)), sizes]), np.array(t_cpu))
    c = max(c, 1e-12)
    meas["cpu"] = {"moves": sizes, "seconds": t_cpu}
    host = _median_time(lambda: state.apply(N // 2, 0), min_repeats=9)

    # Thread pool: dispatch cost and speed-up of `threads` ranges.
    p = runtime.threads
    d, p_eff = 0.0, 1.0
    if p > 1:
        d = _median_time(lambda: [f.result() for f in [runtime.pool.submit(int) for _ in range(p)]])
        m = min(N, p * _POOL_RANGE, max(p, int(p * _CPU_SECONDS_CAP / 4 / c)))  # each range ~1/16 s at most
        bounds = np.linspace(0, m, p + 1).round().astype(np.int64)
        ranges = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        t_pool = _median_time(lambda: cpu_pass(ranges))
        p_eff = float(np.clip(c * m / max(t_pool - d - c0, 1e-12), 1.0, p))
        meas["pool"] = {"dispatch": d, "moves": m, "seconds": t_pool}

    fields: dict = {}
    if runtime.has_device:
        ev.configure(N - 1, 1, 1)
        w = ev.work_group_size

        def device_pass() -> None:
            cls, delta, index = ev._device_result(ev._launch(it, asp))
            _best_of(cls, delta, index)

        def device_pass_applied() -> None:
            ev._enqueue_apply(0, 0)
            device_pass()

        lam0 = _median_time(device_pass, min_repeats=5)
        lam = max(_median_time(device_pass_applied, min_repeats=5), lam0)
        rows, times = [], []
        for nd in sorted({N, N // 8} - {0}):
            if nd < N and nd < 8 * w:
                continue
            for t in transfer_levels(nd, w):
                g = min(2**t, nd)
                ev._set_device_range(N - nd, N, g)
                rows.append((nd, g))
                times.append(_median_time(device_pass, min_repeats=5, budget=0.1))
        times_arr = np.array(times)
        nd_arr, g_arr = np.array(rows, dtype=np.float64).T
        best = (np.inf, 0.0, 0.0, 0.0)
        for sat in w * 2.0 ** np.arange(0, 24.01, 0.25):
            per_item = np.maximum(np.ceil(np.ceil(nd_arr / g_arr) / w), nd_arr / sat)
            (tau, kappa), res = _nnls_relative(np.column_stack([per_item, g_arr]), times_arr, lam0)
            if res < best[0] - 1e-12:
                best = (res, tau, kappa, sat)
        _, tau, kappa, sat = best
        curve = times_arr[nd_arr == N] + (lam - lam0)  # every level, in order; the apply kernel as in a search
        fields = dict(
            work_group_size=w,
            device_fixed_seconds=lam,
            device_move_seconds=max(tau, 1e-15),
            device_saturation=float(sat),
            partial_seconds=kappa,
            device_level_seconds=tuple(curve.tolist()),
            device_level_moves=N,
            device=runtime.device_name,
            shared_cores=runtime.device_shares_host_cores,
        )
        meas["device"] = {"fixed": lam0, "fixed_with_apply": lam, "device_moves": nd_arr.tolist(),
                          "groups": g_arr.tolist(), "seconds": times}
        if N > 1:
            partial = TabuCosts(kind=problem.kind, key=problem.cache_key, threads=p, cpu_move_seconds=float(c),
                                cpu_call_seconds=float(c0), pool_seconds=d, cpu_parallelism=p_eff, **fields)
            o, omega, omega_p, meas["hybrid"] = _measure_hybrid(ev, partial, cpu_pass, device_pass_applied, it,
                                                                asp, p)
            fields.update(hybrid_seconds=o, overlap=omega, pool_overlap=omega_p)
    costs = TabuCosts(
        kind=problem.kind,
        key=problem.cache_key,
        threads=p,
        work_group_size=0,
        cpu_move_seconds=float(c),
        cpu_call_seconds=float(c0),
        pool_seconds=d,
        cpu_parallelism=p_eff,
        host_seconds=host,
        measurements=meas,
    )
    costs = dataclasses.replace(costs, **fields)
    if cache:
        costs.save(path)
        log.info("tabu costs saved to %s", path)
    return costs
