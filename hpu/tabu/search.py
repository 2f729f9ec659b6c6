"""The tabu-search driver: best-improvement moves, per-move tabu tenure, aspiration, restarts.

A search runs on a shared :class:`hpu.Runtime` (by default
:func:`hpu.default_runtime`): any number of threads may search on one runtime
at once, each search with its own :class:`hpu.DeviceLease` (command queue)
held by its :class:`~hpu.tabu.engine.Evaluator`, and each takes the moves it
would take alone.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Any

import numpy as np

from ..core.hybrid import DeviceFailure, check_on_device_error, check_split
from ..core.runtime import Runtime, resolve_runtime
from ..core.trace import Recorder, Trace
from ..core.util import check_int, check_positive
from .calibrate import calibrate
from .engine import (HALT_NO_FEASIBLE_MOVE, HALT_STOPS, INFEASIBLE, NO_BEST, TIE_BREAKS, Evaluator,
                     default_work_group_size)
from .problem import TabuProblem, seeded_rng
from .split import STRATEGIES, TabuCosts, TabuSplit, plan_split

__all__ = ["DEFAULT_BLOCK_ITERATIONS", "MAX_RESTARTS_PER_ITERATION", "TabuResult", "check_tenure", "choose_split",
           "choose_split_or_cpu", "count_restart", "tabu_search"]

log = logging.getLogger("hpu")

#: Restarts allowed at one iteration before a search gives up (``RuntimeError``).
MAX_RESTARTS_PER_ITERATION = 100

#: Iterations per round trip when they run resident on the device and no costs are at hand for the model's choice
#: (``tabu_search``'s ``block_iterations``; :meth:`TabuCosts.plan_resident` chooses otherwise).
DEFAULT_BLOCK_ITERATIONS = 32


@dataclasses.dataclass(frozen=True, repr=False)
class TabuResult:
    """Outcome of :func:`tabu_search` (named fields, like :class:`scipy.optimize.OptimizeResult`).

    Attributes
    ----------
    best_solution : numpy.ndarray or None
        Best (feasible) solution found; None if no feasible solution was met.
    best_value : int or None
        Its objective.
    history : numpy.ndarray of int64, shape (iterations,)
        Objective of the current solution after each iteration.
    moves : numpy.ndarray of int64, shape (iterations,)
        Index of the move taken at each iteration (the trajectory).
    iterations : int
        Iterations performed.
    stop : str
        ``"iterations"``, ``"no_improvement"``, ``"time_limit"`` or ``"target"``.
    restarts : int
        Restarts because no neighbour was feasible (section 3.4 of Hou et al.).
    split : TabuSplit
        The division of each neighbourhood between CPU and device.
    wall_time : float
        Seconds spent in the iterations.
    setup_time : float
        Seconds spent before them (calibration, kernel build, buffers).
    cpu_time, device_time, host_time : float
        Seconds spent by each unit during the iterations: the CPU share of
        the evaluation, the device (kernel, read-back and apply, from event
        profiling), and the host's combine and move bookkeeping.
    num_moves : int
        Neighbourhood size ``N``.
    fallback : str
        Empty, or why the device failed and the CPU evaluated the rest of the
        search (the trajectory is the same: the CPU evaluation is exact).
    tabu_attribute : str
        What the tabu status was kept for (:attr:`TabuProblem.tabu_attribute`).
    tie_break : str
        How ties between equal moves were broken (``"random"`` or ``"index"``).
    block_iterations : int
        Iterations per round trip to the device: more than 1 when they ran
        resident on it (``tabu_search``'s ``block_iterations``), 1 on the host loop.
        The value asked for: after a device failure (see ``fallback``) the
        rest of the search ran on the host loop.
    trace : hpu.Trace or None
        With ``tabu_search(..., trace=True)``: every step of the iterations
        (see :attr:`hpu.tabu.engine.Evaluator.recorder`), seconds since the
        first iteration began, device events placed on the host clock by the
        waits for them; ``n`` is the number of moves ``N`` and ``depth`` 0.
        Device events need a profiling queue (the runtime's default).
    """

    best_solution: np.ndarray | None
    best_value: int | None
    history: np.ndarray
    moves: np.ndarray
    iterations: int
    stop: str
    restarts: int
    split: TabuSplit
    wall_time: float
    setup_time: float
    cpu_time: float
    device_time: float
    host_time: float
    num_moves: int
    fallback: str = ""
    tabu_attribute: str = "move"
    tie_break: str = "index"
    block_iterations: int = 1
    trace: Trace | None = None

    @property
    def time_per_iteration(self) -> float:
        """``wall_time / iterations`` (seconds)."""
        return self.wall_time / max(self.iterations, 1)

    @property
    def moves_per_second(self) -> float:
        """Moves evaluated per second of wall time."""
        return self.num_moves * self.iterations / self.wall_time if self.wall_time > 0 else math.inf

    def __repr__(self) -> str:
        s = self.split
        return (
            f"TabuResult(best_value={self.best_value}, iterations={self.iterations}, stop={self.stop!r}, "
            f"restarts={self.restarts}, strategy={s.strategy!r}, alpha={s.alpha:.3g}, "
            f"transfer_level={s.transfer_level}, tabu_attribute={self.tabu_attribute!r}, "
            f"tie_break={self.tie_break!r}, time_per_iteration={self.time_per_iteration * 1e3:.3g} ms"
            + (f", fallback={self.fallback!r})" if self.fallback else ")")
        )


def _needs_costs(strategy: str, alpha: float | None, transfer_level: int | None, cpu_chunks: int | None,
                 runtime: Runtime) -> bool:
    cpu_free = cpu_chunks is None and runtime.threads > 1
    if strategy == "cpu" or not runtime.has_device:
        return cpu_free
    if strategy == "gpu":
        return transfer_level is None
    if alpha is None:
        return True
    return (alpha > 0 and cpu_free) or (alpha < 1 and transfer_level is None)


def choose_split(problem: TabuProblem, runtime: Runtime | None = None, *, strategy: str = "hybrid",
                 alpha: float | None = None, transfer_level: int | None = None, cpu_chunks: int | None = None,
                 costs: TabuCosts | None = None) -> TabuSplit:
    """The split :func:`tabu_search` uses: forced values, the rest chosen by the model.

    Calibrates (:func:`hpu.tabu.calibrate`, cached) when the model must
    choose something and ``costs`` is not given.

    Parameters
    ----------
    problem : TabuProblem
    runtime : hpu.Runtime, optional
        Default :func:`hpu.default_runtime`.
    strategy, alpha, transfer_level, cpu_chunks, costs
        As for :func:`tabu_search`.

    Returns
    -------
    TabuSplit
        :func:`hpu.tabu.plan_split`'s choice for ``problem.num_moves`` moves.

    Raises
    ------
    ValueError
        Unknown strategy or out-of-range forced values.
    hpu.NoDeviceError
        ``strategy="gpu"`` (or a forced device share) on a CPU-only runtime.
    hpu.DeviceFailure
        The device failed during the calibration.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    alpha, transfer_level = check_split(alpha, transfer_level)  # an integer level, a real alpha, or refused
    if cpu_chunks is not None:
        cpu_chunks = check_int("cpu_chunks", cpu_chunks, 1)
    runtime = resolve_runtime(runtime)
    with runtime.call():
        if strategy == "gpu" or (alpha is not None and alpha < 1):
            runtime.require_device()
        if costs is None and _needs_costs(strategy, alpha, transfer_level, cpu_chunks, runtime):
            cpu_alone = strategy == "cpu" or (alpha is not None and alpha >= 1)  # the device is left alone
            costs = calibrate(problem, runtime, units="cpu" if cpu_alone else "all")
        device = runtime.device  # read once: another thread's failure may take it away
        return plan_split(problem.num_moves, costs, strategy=strategy, alpha=alpha, transfer_level=transfer_level,
                          cpu_chunks=1 if cpu_chunks is None and runtime.threads == 1 else cpu_chunks,
                          threads=runtime.threads, has_device=device is not None,
                          work_group_size=default_work_group_size(device) if device is not None else 0)


def check_tenure(tenure: Any, num_moves: int) -> int:
    """``tenure`` as an int, if it is an integer in ``[0, num_moves)`` (a tabu tenure in iterations).

    Raises
    ------
    ValueError
        Naming the range, for anything else.
    """
    return check_int("tenure", tenure, 0, num_moves, " (the number of moves)")


@dataclasses.dataclass(frozen=True)
class Stops:
    """The stopping rules of one search (checked arguments of :func:`tabu_search`)."""

    iterations: int
    tenure: int
    time_limit: float | None
    max_no_improve: int | None
    target: int | None


def check_stops(problem: TabuProblem, iterations: Any, tenure: Any, time_limit: Any, max_no_improve: Any,
                 target: Any) -> Stops:
    """Check :func:`tabu_search`'s iteration, tenure and stopping arguments (``ValueError`` naming the bad one)."""
    iterations = check_int("iterations", iterations, 1)
    tenure = check_tenure(tenure, problem.num_moves)
    if iterations + tenure >= 2**31:
        raise ValueError("iterations + tenure must be < 2**31 (the tabu status is int32)")
    if time_limit is not None and time_limit != math.inf:  # inf: no limit
        time_limit = check_positive("time_limit (seconds)", time_limit)  # no bools or strings
    if max_no_improve is not None:  # past the iterations it never stops a search: the same in int32
        max_no_improve = min(check_int("max_no_improve", max_no_improve, 1), iterations + 1)
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, np.integer))):
        raise ValueError(f"target must be an integer objective value, got {target!r}")
    if target is not None:  # int64 objectives: below their range never reached, above it reached by any
        target = None if target < -2**63 else min(int(target), 2**63 - 2)  # 2**63 - 1: the device's "no best"
    return Stops(iterations, tenure, time_limit, max_no_improve, target)


def count_restart(tries: tuple[int, int], it: int) -> tuple[int, int]:
    """``(iteration, restarts at it)`` after one more restart at iteration ``it``, from the same pair before it.

    Raises
    ------
    RuntimeError
        More than :data:`MAX_RESTARTS_PER_ITERATION` restarts at ``it``: no feasible neighbour is found.
    """
    count = tries[1] + 1 if tries[0] == it else 1
    if count > MAX_RESTARTS_PER_ITERATION:
        raise RuntimeError(f"no feasible neighbour after {MAX_RESTARTS_PER_ITERATION} restarts")
    return it, count


def tabu_search(
    problem: TabuProblem,
    *,
    iterations: int,
    tenure: int,
    seed: Any = None,
    strategy: str = "hybrid",
    runtime: Runtime | None = None,
    time_limit: float | None = None,
    max_no_improve: int | None = None,
    target: int | None = None,
    initial: Any = None,
    alpha: float | None = None,
    transfer_level: int | None = None,
    cpu_chunks: int | None = None,
    costs: TabuCosts | None = None,
    on_device_error: str = "fallback",
    tie_break: str = "random",
    block_iterations: int | None = None,
    trace: bool = False,
) -> TabuResult:
    """Tabu search with the whole neighbourhood evaluated each iteration on the CPU and the device.

    Each iteration evaluates every move of the current solution and moves to
    the best admissible one (lowest objective; ties as ``tie_break`` says): a
    move is admissible when its neighbour is feasible and the move is not
    tabu, or is tabu but reaches a value below the best found (aspiration;
    Hou et al. 2019, section 3.5).  The move taken makes its tabu attributes
    (:attr:`TabuProblem.tabu_attribute`: the move itself, or e.g. (job,
    position) pairs) tabu while the iteration is below the one it was taken
    at plus ``tenure``: for the next ``tenure - 1`` iterations (``tenure``
    0 and 1 alike keep nothing tabu).  When every
    feasible move is tabu the best of them is taken (Hou et al. pick one at
    random, section 3.6; taking the best keeps every split's trajectory
    identical); when no move is feasible the problem restarts (section 3.4)
    and the iteration evaluates the new neighbourhood.

    Parameters
    ----------
    problem : TabuProblem
        E.g. :class:`hpu.tabu.QAP` or :class:`hpu.tabu.HWSWPartitioning`.
    iterations : int
        Maximum number of iterations (>= 1).
    tenure : int
        Tabu tenure in iterations, ``0 <= tenure < num_moves``: a move taken at
        iteration ``t`` is tabu up to iteration ``t + tenure - 1``.
    seed : int, numpy.random.Generator or None
        Seeds the random start and the restarts (anything
        :func:`numpy.random.default_rng` takes).  The same seed gives the same
        trajectory with every strategy and split.
    strategy : {"hybrid", "cpu", "gpu"}
        Who evaluates the neighbourhood: both units split by the model, the
        CPU only, or the device only.
    runtime : hpu.Runtime, optional
        Default :func:`hpu.default_runtime`.  Any number of threads may
        search on one runtime at once: each search borrows its own
        :class:`hpu.DeviceLease` (command queue) for its device share.
    time_limit : float, optional
        Stop after this many seconds of iterations (> 0; ``math.inf``: no limit).
    max_no_improve : int, optional
        Stop after this many consecutive iterations without a new best.
    target : int, optional
        Stop after the first iteration at whose end the best feasible
        objective is ``<= target`` (e.g. 0 for a permuted perceptron
        instance, or a known optimum).
    initial : array_like, optional
        Start here instead of at a random solution.
    alpha, transfer_level, cpu_chunks : optional
        Force the CPU share of the moves, the transfer level of the device's
        reduction (``2**transfer_level`` partial minima) and the number of CPU
        ranges instead of letting the model choose (see :func:`hpu.tabu.plan_split`).
    costs : TabuCosts, optional
        Use these costs instead of :func:`hpu.tabu.calibrate`'s (cached) ones.
    on_device_error : {"fallback", "raise"}
        When the device fails (an OpenCL error, during the calibration or
        mid-search): the CPU evaluates every later neighbourhood from the same
        state, so the trajectory is the one the device would have taken
        (:attr:`TabuResult.fallback` says why), or :class:`hpu.DeviceFailure`
        is raised.  Either way the runtime is told, and rebuilds its context
        before its next device call if the failure was fatal.
    tie_break : {"random", "index"}
        Among admissible moves of equal objective: ``"random"`` takes the one
        with the lowest seeded hash of (move, iteration) (:func:`hpu.tabu.tie_hash`;
        reproducible from ``seed``, the same on every unit), ``"index"`` the
        lowest move index.  On plateaus of equal objectives (flow-shop
        makespans) the lowest index keeps revisiting the same few moves: on
        Taillard's ta001 ``"index"`` stalls where ``"random"`` reaches the
        optimum (``experiments/bench_tabu_attributes.py``).
    block_iterations : int, optional
        Where the device evaluates the whole neighbourhood (the split's CPU
        share is 0), run this many iterations back to back on the device per
        round trip: evaluation, the choice of the move (tabu status,
        aspiration, tie-break), the move and the stop rules ``target`` and
        ``max_no_improve`` all stay there, and the host reads the trajectory
        back once per block (``time_limit`` is checked between blocks).  The
        trajectory is the one of the host loop.  Default: the model's
        (:meth:`TabuCosts.plan_resident`: the smallest power of two whose
        round trip adds at most 5% to an iteration, from the calibrated
        costs; the transfer level, unless forced, is then the resident
        blocks' fastest), or :data:`DEFAULT_BLOCK_ITERATIONS` where no costs
        were needed for the split; capped by ``iterations``.  1 runs the host
        loop.  With a CPU share the iterations always run one by one.
    trace : bool
        Record what each unit did and when (:attr:`TabuResult.trace`, for a
        Gantt chart of the iterations: :func:`hpu.plots.tabu_gantt`).

    Returns
    -------
    TabuResult

    Raises
    ------
    TypeError
        ``time_limit`` not a real number (a bool or a string included), or ``seed`` not a seed
        :func:`numpy.random.default_rng` takes (e.g. a float or a string).
    ValueError
        ``seed`` a negative integer (or a sequence holding one),
        ``iterations < 1``, ``tenure`` outside ``[0, num_moves)``,
        ``iterations + tenure >= 2**31``, a bad
        ``initial`` solution (e.g. not a permutation), ``time_limit`` or
        ``max_no_improve`` not positive (or NaN), a ``target`` that is not an integer,
        unknown strategy, ``on_device_error`` or ``tie_break``, a bad forced
        split, ``block_iterations`` below 1 or above ``iterations``.
    hpu.NoDeviceError
        ``strategy="gpu"`` without an OpenCL device.
    hpu.DeviceFailure
        The device failed and ``on_device_error="raise"``.
    """
    stops = check_stops(problem, iterations, tenure, time_limit, max_no_improve, target)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    check_on_device_error(on_device_error)
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}, got {tie_break!r}")
    rng = seeded_rng(seed)
    solution = problem.check_solution(initial) if initial is not None else problem.random_solution(rng)
    tie_seed = int(rng.integers(2**32)) if tie_break == "random" else None
    if block_iterations is not None:
        check_int("block_iterations", block_iterations, 1)
        if block_iterations > stops.iterations:
            raise ValueError(f"block_iterations ({block_iterations}) exceeds the iteration budget "
                             f"(iterations={stops.iterations})")
    rt = resolve_runtime(runtime)
    with rt.call():
        t_setup = time.perf_counter()
        forced = dict(strategy=strategy, alpha=alpha, transfer_level=transfer_level, cpu_chunks=cpu_chunks)
        split, fallback = choose_split_or_cpu(problem, rt, on_device_error=on_device_error, costs=costs, **forced)
        split, block = _plan_blocks(problem, rt, split, costs, forced, block_iterations, stops.iterations)
        with Evaluator(problem.state(solution), rt, cpu_moves=split.cpu_moves, cpu_chunks=split.cpu_chunks,
                       groups=max(split.groups, 1), on_device_error=on_device_error, tie_seed=tie_seed) as ev:
            if block > 1:
                ev.prepare_resident(min(block, stops.iterations))  # its kernels built and compiled in the set-up
            setup_time = time.perf_counter() - t_setup
            if trace:
                ev.recorder = Recorder()
                ev.recorder.device_offset = None  # placed by the first wait for the device
            result = _run(problem, ev, split, rng, stops, setup_time, block if ev.device_only else 1)
            if trace:
                ev.drain()
                result = dataclasses.replace(result, trace=ev.recorder.finish(Trace(
                    strategy=split.strategy, alpha=split.alpha, transfer_level=split.transfer_level, depth=0,
                    n=problem.num_moves, split=split, fallback=ev.fallback)).resolve())
    return dataclasses.replace(result, fallback=fallback) if fallback and not result.fallback else result


def _plan_blocks(problem: TabuProblem, rt: Runtime, split: TabuSplit, costs: TabuCosts | None,
                 forced: dict[str, Any], block_iterations: int | None, iterations: int) -> tuple[TabuSplit, int]:
    """The split and iterations per round trip: the model's (:meth:`TabuCosts.plan_resident`) where the device
    evaluates every move and costs are at hand (given, or calibrated for the split), else ``block_iterations`` or
    :data:`DEFAULT_BLOCK_ITERATIONS`; an unforced transfer level becomes the resident blocks' best."""
    block = min(block_iterations or DEFAULT_BLOCK_ITERATIONS, iterations)
    if split.cpu_moves > 0 or split.groups == 0 or block_iterations == 1:
        return split, block
    if costs is None and _needs_costs(forced["strategy"], forced["alpha"], forced["transfer_level"],
                                      forced["cpu_chunks"], rt):
        costs = calibrate(problem, rt)  # the split's own, cached: no new measurement
    plan = costs.plan_resident(forced["transfer_level"]) if costs is not None else None
    if plan is None:
        return split, block
    level, k, seconds = plan
    if block_iterations is None:
        block = min(k, iterations)
    if forced["transfer_level"] is None and block > 1:
        split = dataclasses.replace(split, transfer_level=level, groups=min(2**level, split.num_moves),
                                    predicted_cpu_time=0.0, predicted_device_time=seconds, predicted_time=seconds)
    return split, block


def choose_split_or_cpu(problem: TabuProblem, runtime: Runtime, *, on_device_error: str,
                        costs: TabuCosts | None = None, **forced: Any) -> tuple[TabuSplit, str]:
    """:func:`choose_split`, or the CPU alone after a device failure during the calibration.

    Parameters
    ----------
    problem : TabuProblem
    runtime : hpu.Runtime
    on_device_error : {"fallback", "raise"}
        ``"raise"`` lets :class:`hpu.DeviceFailure` through.
    costs : TabuCosts, optional
    **forced
        ``strategy``, ``alpha``, ``transfer_level``, ``cpu_chunks`` as for :func:`choose_split`.

    Returns
    -------
    split : TabuSplit
        After a failure: ``strategy="cpu"`` in ``cpu_chunks`` ranges (default
        one per thread of the pool).
    fallback : str
        Empty, or why the device is not used.
    """
    try:
        return choose_split(problem, runtime, costs=costs, **forced), ""
    except DeviceFailure as e:
        if on_device_error == "raise":
            raise
        log.warning("device failed calibrating the tabu search (%s); searching on the CPU", e)
        chunks = forced.get("cpu_chunks") or min(runtime.threads, problem.num_moves)
        return plan_split(problem.num_moves, None, strategy="cpu", cpu_chunks=chunks, has_device=False), str(e)


class _Search:
    """One search's progress through its iterations, on the host loop or in device-resident blocks.

    After device-resident blocks the host's state lags behind: the blocks'
    moves wait in :attr:`behind` and are replayed only when the host needs its
    state (a restart, a device failure, a best solution the device cannot
    give back).
    """

    def __init__(self, problem: TabuProblem, ev: Evaluator, rng: np.random.Generator, stops: Stops):
        self.problem, self.ev, self.rng, self.stops = problem, ev, rng, stops
        state = ev.state
        feasible = problem.feasible(state.solution)
        self.value = state.value  # the current value (the host's state may lag behind it: catch_up)
        self.best_value = state.value if feasible else None
        self.best_solution = state.solution if feasible else None
        self.best_on_device = False  # the best came from a block not replayed: the device keeps its solution
        self.behind: list[tuple[int, np.ndarray]] = []  # (first iteration, moves) of blocks not replayed
        self.history = np.empty(stops.iterations, dtype=np.int64)
        self.moves = np.empty(stops.iterations, dtype=np.int64)
        self.restarts = self.last_improvement = self.done = 0
        self._tries = (0, 0)  # (iteration, restarts at it)

    def _aspiration(self) -> int:
        return np.iinfo(np.int64).max if self.best_value is None else self.best_value - self.ev.state.value

    def _restart(self, it: int) -> None:
        """No feasible neighbour at iteration ``it``: a new current solution (at most 100 per iteration)."""
        self._tries = count_restart(self._tries, it)
        self.restarts += 1
        state = self.ev.state
        self.ev.reset(self.problem.restart(self.rng))
        self.value = state.value
        if self.problem.feasible(state.solution) and (self.best_value is None or state.value < self.best_value):
            self.best_value, self.best_solution, self.last_improvement = state.value, state.solution, it
            self.best_on_device = False

    def _took(self, it: int, index: int) -> str:
        """Record iteration ``it``'s move (host loop); the stop rule that ends the search after it, or ``""``."""
        state, stops = self.ev.state, self.stops
        self.history[it - 1], self.moves[it - 1], self.done, self.value = state.value, index, it, state.value
        if self.best_value is None or state.value < self.best_value:
            self.best_value, self.best_solution, self.last_improvement = state.value, state.solution, it
            self.best_on_device = False
        if stops.target is not None and self.best_value is not None and self.best_value <= stops.target:
            return "target"
        if stops.max_no_improve is not None and it - self.last_improvement >= stops.max_no_improve:
            return "no_improvement"
        return ""

    def iteration(self, it: int) -> str:
        """Iteration ``it`` on the host loop (the evaluator's split); the stop rule met, or ``""``."""
        cls, delta, index = self.ev.evaluate(it, self._aspiration())
        while cls == INFEASIBLE:
            self._restart(it)
            cls, delta, index = self.ev.evaluate(it, self._aspiration())
        self.ev.apply(index, delta, it + self.stops.tenure)
        return self._took(it, index)

    def block(self, it: int, count: int) -> str:
        """Iterations ``it ..`` (at most ``count``) resident on the device; the stop rule met, or ``""``.

        The trajectory, the best value and the stop come from the block's
        trail and control block; its moves join :attr:`behind`.
        """
        ev, stops = self.ev, self.stops
        control = np.array([self.value, NO_BEST if self.best_value is None else self.best_value,
                            self.last_improvement, 0, it - 1], dtype=np.int64)
        trail = ev.run_block(it, count, stops.tenure, control, stops.target, stops.max_no_improve)
        if trail is None:  # the device failed; the host catches up and the CPU goes on from iteration it
            self.catch_up()
            return ""
        moves, values = trail[0::2], trail[1::2]
        if moves.size:
            last = it + moves.size - 1
            self.moves[it - 1 : last], self.history[it - 1 : last] = moves, values
            self.behind.append((it, moves))
            self.done, self.value = last, int(values[-1])
            low = int(values.min())
            if self.best_value is None or low < self.best_value:
                self.best_value, self.best_on_device = low, True
                self.last_improvement = it + int(np.argmax(values == low))
        if control[0] != self.value or control[1] != (NO_BEST if self.best_value is None else self.best_value):
            raise RuntimeError(f"the device's block diverged from its trail: value {control[0]} != {self.value} "
                               f"or best {control[1]} != {self.best_value}")
        halt = int(control[3])
        if halt == HALT_NO_FEASIBLE_MOVE:
            self.catch_up()
            self._restart(self.done + 1)
        return HALT_STOPS.get(halt, "")

    def catch_up(self) -> None:
        """Replay :attr:`behind` on the host's state (and take the best solution on the way if it is there)."""
        ev, state, tenure = self.ev, self.ev.state, self.stops.tenure
        for first, moves in self.behind:
            for t, index in enumerate(moves.tolist()):
                it = first + t
                ev.follow(index, int(self.history[it - 1]) - state.value, it + tenure)
                if self.best_on_device and it == self.last_improvement:
                    self.best_solution, self.best_on_device = state.solution, False
        self.behind.clear()
        if state.value != self.value:
            raise RuntimeError(f"device-resident iterations diverged from the host: {self.value} != {state.value}")

    def finish(self) -> None:
        """Take the best solution from the device when it kept it (else from the host's replay)."""
        if self.best_on_device:
            best = self.ev.read_best()
            if best is None:
                self.catch_up()
            else:
                self.best_solution, self.best_on_device = self.problem.check_solution(best), False

    def result(self, stop: str, split: TabuSplit, wall: float, setup_time: float, block: int) -> TabuResult:
        ev, it = self.ev, self.done
        return TabuResult(
            best_solution=self.best_solution,
            best_value=None if self.best_value is None else int(self.best_value),
            history=self.history[:it].copy(),
            moves=self.moves[:it].copy(),
            iterations=it,
            stop=stop,
            restarts=self.restarts,
            split=split,
            wall_time=wall,
            setup_time=setup_time,
            cpu_time=ev.cpu_time,
            device_time=ev.device_time,
            host_time=ev.host_time,
            num_moves=self.problem.num_moves,
            fallback=ev.fallback,
            tabu_attribute=self.problem.tabu_attribute,
            tie_break="index" if ev.tie_seed is None else "random",
            block_iterations=block,
        )


def _run(problem: TabuProblem, ev: Evaluator, split: TabuSplit, rng: np.random.Generator, stops: Stops,
         setup_time: float, block: int) -> TabuResult:
    """The iterations: blocks of ``block`` resident on the device while it evaluates every move, else one by one."""
    search = _Search(problem, ev, rng, stops)
    stop = "iterations"
    start = time.perf_counter()
    while search.done < stops.iterations:
        it = search.done + 1
        if block > 1 and ev.device_only:
            met = search.block(it, min(block, stops.iterations - it + 1))
        else:
            met = search.iteration(it)
        if met:
            stop = met
            break
        if (stops.time_limit is not None and search.done < stops.iterations
                and time.perf_counter() - start >= stops.time_limit):
            stop = "time_limit"
            break
    search.finish()
    return search.result(stop, split, time.perf_counter() - start, setup_time, block)
