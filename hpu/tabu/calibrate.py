"""Measure the costs of one problem kind's move evaluation on this machine (:class:`TabuCosts`).

The measurements run the engine's own code paths on a scratch search state:
the CPU range evaluation at several sizes (fit ``c0 + c M``), the thread
pool's dispatch cost and parallel speed-up, and the fused kernel over every
sensible transfer level at two device shares.  The device model
``lambda + tau max(ceil(ceil(N_d / G) / W), N_d / g) + kappa G`` is fitted
with ``g`` on a geometric grid and ``(tau, kappa)`` by non-negative least
squares on relative residuals (:func:`scipy.optimize.nnls`), as DESIGN.md
asks for the knee ``g`` of the HPU model (paper 6.4): a piecewise fit, not by eye.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import optimize

from ..device import Runtime, default_profile_path, device_key
from .engine import Evaluator, _best_of
from .problem import TabuProblem
from .split import TabuCosts, transfer_levels

__all__ = ["calibrate", "costs_path"]

log = logging.getLogger("hpu")

_CPU_SIZE_CAP = 1 << 20  # largest CPU range timed
_POOL_RANGE = 1 << 17  # moves per pooled range timed


def costs_path(problem: TabuProblem, runtime: Runtime) -> Path:
    """Where :func:`calibrate` caches the costs of ``problem``'s kind and size on ``runtime``.

    ``<profile directory>/tabu/<device>-<kind>-<size key>-t<threads>.json``,
    next to the device profile (``$HPU_PROFILE_DIR`` or the user cache).
    """
    base = default_profile_path(runtime.device).parent / "tabu"
    return base / f"{device_key(runtime.device)}-{problem.kind}-{problem.cache_key}-t{runtime.threads}.json"


def _median_time(fn: Callable[[], object], *, min_repeats: int = 3, max_repeats: int = 25,
                 budget: float = 0.05) -> float:
    fn()  # warm-up
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_repeats or (len(times) < max_repeats and time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _nnls_relative(a: np.ndarray, t: np.ndarray, offset: float = 0.0) -> tuple[np.ndarray, float]:
    """Non-negative least squares of ``offset + a x ~ t`` with residuals relative to ``t``."""
    x, res = optimize.nnls(a / t[:, None], 1.0 - offset / t)
    return x, float(res)


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
    Takes about a second for small instances, a few seconds for the largest
    benchmark instances (the CPU is timed on at most 2**20 moves per range).
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

    # CPU, one thread: t(M) = c0 + c M.
    sizes = sorted({min(max(s, 1), N, _CPU_SIZE_CAP) for s in (state.block_moves, N // 16, N // 4, N)})
    t_cpu = [_median_time(lambda m=m: ev._cpu_parts([(0, m)], it, asp)) for m in sizes]
    (c0, c), _ = _nnls_relative(np.column_stack([np.ones(len(sizes)), sizes]), np.array(t_cpu))
    c = max(c, 1e-12)
    meas["cpu"] = {"moves": sizes, "seconds": t_cpu}
    host = _median_time(lambda: state.apply(N // 2, 0), min_repeats=9)

    # Thread pool: dispatch cost and speed-up of `threads` ranges.
    p = runtime.threads
    d, p_eff = 0.0, 1.0
    if p > 1:
        d = _median_time(lambda: [f.result() for f in [runtime.pool.submit(int) for _ in range(p)]])
        m = min(N, p * _POOL_RANGE)
        bounds = np.linspace(0, m, p + 1).round().astype(np.int64)
        ranges = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        t_pool = _median_time(lambda: ev._cpu_parts(ranges, it, asp))
        p_eff = float(np.clip(c * m / max(t_pool - d - c0, 1e-12), 1.0, p))
        meas["pool"] = {"dispatch": d, "moves": m, "seconds": t_pool}

    fields: dict = {}
    if runtime.has_device:
        import pyopencl as cl

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
                times.append(_median_time(device_pass))
        times_arr = np.array(times)
        nd_arr, g_arr = np.array(rows, dtype=np.float64).T
        best = (np.inf, 0.0, 0.0, 0.0)
        for sat in w * 2.0 ** np.arange(0, 24.01, 0.25):
            per_item = np.maximum(np.ceil(np.ceil(nd_arr / g_arr) / w), nd_arr / sat)
            (tau, kappa), res = _nnls_relative(np.column_stack([per_item, g_arr]), times_arr, lam0)
            if res < best[0] - 1e-12:
                best = (res, tau, kappa, sat)
        _, tau, kappa, sat = best
        fields = dict(
            work_group_size=w,
            device_fixed_seconds=lam,
            device_move_seconds=max(tau, 1e-15),
            device_saturation=float(sat),
            partial_seconds=kappa,
            shared_cores=bool(runtime.device.type & cl.device_type.CPU),
            device=runtime.device_name,
        )
        meas["device"] = {"fixed": lam0, "fixed_with_apply": lam, "device_moves": nd_arr.tolist(),
                          "groups": g_arr.tolist(), "seconds": times}
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
