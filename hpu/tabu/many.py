"""Many independent tabu searches of one problem at once: a batch on the device and searches on the CPU's threads.

Multi-start and the offspring of an evolutionary algorithm need many
independent searches of one problem, each too small to fill a device alone
(tai30a has 435 moves; one search keeps one work-group of an H100's 132
compute units busy).  :func:`tabu_search_many` runs them on both units at
once:

- **The device** runs its searches as one batch (``tabu_run_batch`` of
  ``kernels_cl/tabu_reduce.cl``): work-group ``s`` runs search ``s`` with
  its state, tabu status and control block in its own slices of buffers
  stacked search after search, ``block_iterations`` iterations per launch
  (evaluation, choice of the move, the move and the stop rules stay on the
  device, as in :func:`hpu.tabu.tabu_search`'s resident blocks), and the
  host reads back every search's trajectory once per launch.  The best
  solution of each search is kept on the device and read once at the end.
- **The CPU** runs its searches one per thread, each with the host loop on
  its thread (:func:`hpu.tabu.tabu_search` with ``strategy="cpu"``).

How many searches each unit takes is the HPU model's equal-finish rule
applied to whole searches (López-Ortiz et al. 2014, section 3; see
:func:`hpu.core.model.equal_finish_shares`): with ``S`` searches of ``I``
iterations, ``s`` of them on the CPU,

    ``T(s) = max(T_dev(S - s), T_cpu(s))``,
    ``T_dev(m) = I t_dev(m)``,
    ``T_cpu(m) = I t_cpu max(ceil(m / P), m / p)``,

minimised over ``s = 0 .. S`` (exactly: the costs are step functions of
``m``), where ``t_dev(m)`` is the measured seconds per iteration of a batch of
``m`` searches (interpolated between the measured batch sizes, linear beyond
the largest), ``t_cpu`` one search's seconds per iteration on one thread,
``P`` the threads and ``p`` the measured speed-up of ``P`` searches at once
over one (:func:`calibrate_many`).  When the device runs on the host's own
cores (a CPU OpenCL device) only the faster unit is used.

Every search takes the trajectory :func:`hpu.tabu.tabu_search` takes with
the same seed, whichever unit runs it.  A search that meets a neighbourhood
with no feasible move on the device (a restart, section 3.4 of Hou et al.
2019) and every device search after a device failure are run again on the
CPU from their seeds, so the results stay those of the searches run one by
one.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import logging
import math
import time
from typing import Any, Sequence

import numpy as np

from ..core.hybrid import as_device_failure, check_on_device_error
from ..core.runtime import Runtime, resolve_runtime
from ..core.util import check_int, seed_list
from .engine import (HALT_NO_FEASIBLE_MOVE, HALT_STOPS, NO_BEST, NO_TARGET, TIE_BREAKS, default_work_group_size,
                     program_source, tie_kernel_args)
from .problem import TabuProblem, seeded_rng
from .search import DEFAULT_BLOCK_ITERATIONS, Stops, TabuResult, check_stops, count_restart, tabu_search
from .split import TabuSplit

try:  # a dependency, but CPU-only installs must import the tabu search
    import pyopencl as cl
except Exception:  # pragma: no cover
    cl = None

__all__ = ["MANY_BLOCK_ITERATIONS", "MANY_STRATEGIES", "ManyCosts", "ManySplit", "calibrate_many", "plan_many",
           "tabu_search_many"]

log = logging.getLogger("hpu")

#: Iterations per launch of the device's batch by default (capped by the iteration budget): more than a single
#: search's :data:`~hpu.tabu.DEFAULT_BLOCK_ITERATIONS`, since each launch waits for the batch's slowest search and
#: is read back whole, and the searches stop on the device (``target``, ``max_no_improve``); a search that halts
#: for a restart waits for the launch's end.
MANY_BLOCK_ITERATIONS = 512

#: Accepted values of ``tabu_search_many``'s ``strategy``.
MANY_STRATEGIES = ("auto", "cpu", "gpu")
_CALIBRATION_ITERATIONS = 16  # iterations of each timed CPU search
_TRAIL_START = 4096  # iterations of trajectory the device batch keeps room for at first (then doubled as needed)
_CALIBRATION_SECONDS = 0.25  # no larger batch is timed once one took this long


@dataclasses.dataclass(frozen=True)
class ManyCosts:
    """Measured rates of whole searches on each unit (:func:`calibrate_many`); seconds.

    Attributes
    ----------
    batch_sizes : tuple of int
        Batch sizes ``m`` timed on the device (ascending; empty without a device).
    batch_iteration_seconds : tuple of float
        ``t_dev(m)``: seconds per iteration of a batch of ``m`` searches
        (launches and read-backs of ``block_iterations``-iteration blocks included).
    block_iterations : int
        Iterations per launch they were timed with.
    cpu_iteration_seconds : float
        ``t_cpu``: one search on one thread, per iteration (host loop).
    threads : int
        ``P``: CPU searches run at once.
    cpu_parallelism : float
        ``p``: speed-up of ``P`` searches at once over one, in ``[1, P]``.
    shared_cores : bool
        The device runs on the host's cores (a CPU OpenCL device): one unit is used.
    """

    batch_sizes: tuple[int, ...]
    batch_iteration_seconds: tuple[float, ...]
    block_iterations: int
    cpu_iteration_seconds: float
    threads: int
    cpu_parallelism: float
    shared_cores: bool = False

    def device_time(self, searches: np.ndarray, iterations: int) -> np.ndarray:
        """``T_dev(m) = I t_dev(m)`` for an array of batch sizes ``m`` (0 for ``m = 0``; inf without measurements).

        ``t_dev`` is interpolated linearly between the measured sizes and
        extended beyond the largest ``M`` as ``t_dev(M) m / M`` (more waves of
        work-groups).
        """
        m = np.asarray(searches, dtype=float)
        if not self.batch_sizes:
            return np.where(m > 0, math.inf, 0.0)
        sizes, secs = np.array(self.batch_sizes, dtype=float), np.array(self.batch_iteration_seconds)
        t = np.where(m <= sizes[-1], np.interp(m, sizes, secs), secs[-1] * m / sizes[-1])
        return np.where(m > 0, iterations * t, 0.0)

    def cpu_time(self, searches: np.ndarray, iterations: int) -> np.ndarray:
        """``T_cpu(m) = I t_cpu max(ceil(m / P), m / p)`` for an array of search counts ``m``."""
        m = np.asarray(searches, dtype=float)
        return iterations * self.cpu_iteration_seconds * np.maximum(np.ceil(m / self.threads),
                                                                    m / self.cpu_parallelism)


@dataclasses.dataclass(frozen=True)
class ManySplit:
    """How :func:`tabu_search_many` divides its searches between the device batch and the CPU's threads.

    Attributes
    ----------
    strategy : str
        What was asked for (:data:`MANY_STRATEGIES`, or ``"forced"`` for ``device_searches``).
    device_searches, cpu_searches : int
        Searches per unit (the first ``device_searches`` seeds go to the device).
    predicted_device_time, predicted_cpu_time, predicted_time : float
        Seconds the model predicts for each unit and for both at once (NaN without costs).
    """

    strategy: str
    device_searches: int
    cpu_searches: int
    predicted_device_time: float = math.nan
    predicted_cpu_time: float = math.nan
    predicted_time: float = math.nan


def plan_many(searches: int, iterations: int, costs: ManyCosts | None, *, strategy: str = "auto",
              device_searches: int | None = None, has_device: bool = True) -> ManySplit:
    """Divide ``searches`` searches of ``iterations`` iterations between the device and the CPU (module docstring).

    Parameters
    ----------
    searches, iterations : int
        ``S`` and ``I``.
    costs : ManyCosts or None
        Needed for ``strategy="auto"`` (without it the predictions are NaN).
    strategy : {"auto", "cpu", "gpu"}
        ``"auto"``: ``s = argmin max(T_dev(S - s), T_cpu(s))`` (one unit when
        the device shares the host's cores); ``"cpu"``/``"gpu"``: all on one unit.
    device_searches : int, optional
        Force this many on the device (overrides ``strategy``).
    has_device : bool
        Without a device everything goes to the CPU.

    Returns
    -------
    ManySplit

    Raises
    ------
    ValueError
        ``searches`` or ``iterations`` not an integer >= 1, unknown strategy, ``device_searches`` outside
        ``[0, searches]``, or ``"auto"`` with a device but no costs.
    """
    searches, iterations = check_int("searches", searches, 1), check_int("iterations", iterations, 1)
    if strategy not in MANY_STRATEGIES:
        raise ValueError(f"strategy must be one of {MANY_STRATEGIES}, got {strategy!r}")
    if device_searches is not None:
        d, strategy = check_int("device_searches", device_searches, 0, searches + 1), "forced"
    elif not has_device or strategy == "cpu":
        d = 0
    elif strategy == "gpu":
        d = searches
    elif costs is None:
        raise ValueError("strategy='auto' needs the measured costs (calibrate_many)")
    else:
        d = _balanced(searches, iterations, costs)
    if costs is None:
        return ManySplit(strategy, d, searches - d)
    t_dev = float(costs.device_time(np.array([d]), iterations)[0])
    t_cpu = float(costs.cpu_time(np.array([searches - d]), iterations)[0])
    return ManySplit(strategy, d, searches - d, t_dev, t_cpu, max(t_dev, t_cpu))


def _balanced(searches: int, iterations: int, costs: ManyCosts) -> int:
    """Device searches of the fastest division: every ``s`` tried (one unit only with shared cores)."""
    d = np.arange(searches + 1)
    t = np.maximum(costs.device_time(d, iterations), costs.cpu_time(searches - d, iterations))
    if costs.shared_cores:
        t[1:-1] = math.inf
    return int(np.argmin(t))


@dataclasses.dataclass
class _Start:
    """Where one search starts; the generator it draws from (the caller's when a Generator was given) and its bit
    generator's state from before anything was drawn (to run the search again; a state, not a copy of the
    generator, which would take most of a batch's set-up)."""

    solution: np.ndarray
    tie_seed: int | None
    rng: np.random.Generator
    seed: dict
    initial: Any

    def rerun_seed(self) -> np.random.Generator:
        """A fresh generator as :attr:`rng` was before the search drew anything."""
        bits = copy.copy(self.rng.bit_generator)
        bits.state = self.seed
        return np.random.Generator(bits)

    def settle(self, used: np.random.Generator) -> None:
        """Leave :attr:`rng` where ``used`` (a :meth:`rerun_seed` copy that ran the whole search) ended."""
        self.rng.bit_generator.state = used.bit_generator.state


def _starts(problem: TabuProblem, seeds: Sequence[Any], initials: Sequence[Any] | None,
            tie_break: str) -> list[_Start]:
    """Each search's start, drawn as :func:`hpu.tabu.tabu_search` draws it (from a Generator seed itself).

    Raises
    ------
    TypeError
        An entry of ``seeds`` that :func:`numpy.random.default_rng` does not take (e.g. a float or a string).
    ValueError
        The same Generator twice (its searches would draw from one stream in an order the units decide); a negative
        seed.
    """
    gens = [id(s) for s in seeds if isinstance(s, np.random.Generator)]
    if len(set(gens)) < len(gens):
        raise ValueError("seeds holds the same numpy Generator more than once; give each search its own")
    out = []
    for i, seed in enumerate(seeds):
        rng = seeded_rng(seed, f"seeds[{i}]")
        kept = rng.bit_generator.state
        initial = None if initials is None else initials[i]
        solution = problem.check_solution(initial) if initial is not None else problem.random_solution(rng)
        tie_seed = int(rng.integers(2**32)) if tie_break == "random" else None
        out.append(_Start(solution, tie_seed, rng, kept, initial))
    return out


class _DeviceBatch:
    """The device's searches: one work-group each in ``tabu_run_batch``, up to ``block`` iterations per launch.

    The host keeps each search's trajectory, best value and stop; the best
    solution stays on the device unless a restart found it.  A search halted
    on a neighbourhood with no feasible move restarts as
    :func:`hpu.tabu.tabu_search` restarts (its generator draws the new
    solution; its state is uploaded into its slices) and goes on from there
    in the next launch.
    """

    def __init__(self, problem: TabuProblem, starts: list[_Start], runtime: Runtime, stops: Stops, block: int):
        self.problem, self.starts, self.rt, self.stops, self.block = problem, starts, runtime, stops, block
        self.states = [problem.state(st.solution) for st in starts]
        S = len(starts)
        feasible = [problem.feasible(st.solution) for st in starts]
        self.best_value = [state.value if ok else None for state, ok in zip(self.states, feasible)]
        self.best_solution = [st.solution if ok else None for st, ok in zip(starts, feasible)]
        self.best_on_device = np.zeros(S, dtype=bool)
        width = min(stops.iterations, _TRAIL_START)  # grown as the searches go (most stop early or are short)
        self.history = np.zeros((S, width), dtype=np.int64)
        self.moves = np.zeros((S, width), dtype=np.int64)
        self.done = np.zeros(S, dtype=np.int64)
        self.restarts = np.zeros(S, dtype=np.int64)
        self._tries = [(0, 0)] * S  # (iteration, restarts at it)
        self.stop = [""] * S
        self.lease = None
        self.failure = ""
        self.seconds = 0.0

    def _setup(self) -> None:
        """Borrow a lease; build the kernels; stack the searches' state into the batch's buffers."""
        lease = self.lease = self.rt.acquire_lease()
        w = self.work_group_size = default_work_group_size(self.rt.device)
        kernel = lease.kernel(lease.build(program_source(self.states[0], w, self.rt.device, group=True)),
                              "tabu_run_batch")
        ctx, mf, S, N = lease.context, cl.mem_flags, len(self.states), self.problem.num_moves
        pargs = self._pargs = self.states[0].device_args(ctx, self.states[1:])
        ctrl = self.ctrl = np.zeros((S, 5), dtype=np.int64)
        ctrl[:, 0] = [state.value for state in self.states]
        ctrl[:, 1] = [NO_BEST if b is None else b for b in self.best_value]
        self.trail = np.empty((S, 2 * self.block), dtype=np.int64)
        seeds = np.array([st.tie_seed or 0 for st in self.starts], dtype=np.uint32)
        attributes = self.states[0].num_attributes

        def buf(host: np.ndarray) -> Any:
            return cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)

        self._ctrl_d, self._trail_d = buf(ctrl), cl.Buffer(ctx, mf.READ_WRITE, size=self.trail.nbytes)
        self._best_d = cl.Buffer(ctx, mf.READ_WRITE, size=4 * S * self.problem.n)
        stops = self.stops
        # kept referenced while the batch lives: a kernel argument does not keep its buffer alive
        self._buffers = [buf(seeds), self._ctrl_d, self._trail_d,
                         buf(np.zeros(S * attributes, dtype=np.int32)), self._best_d, *pargs]
        kernel.set_args(np.uint64(self.problem.n), np.uint64(N), np.int32(self.block), np.int32(stops.iterations),
                        np.int32(stops.tenure), np.int64(NO_TARGET if stops.target is None else stops.target),
                        np.int32(stops.max_no_improve or 0), tie_kernel_args(self.starts[0].tie_seed)[1],
                        np.uint64(attributes), np.uint64(2 * self.block), *self._buffers)
        self.kernel = kernel

    def run(self, on_device_error: str) -> float | None:
        """Run every search to its stop; the seconds it took, or None after a failure with ``"fallback"``.

        :attr:`seconds` is the part after the set-up (kernel build, buffers): the launches and read-backs.

        Raises
        ------
        hpu.DeviceFailure
            The device failed and ``on_device_error="raise"``.
        RuntimeError
            A search found no feasible neighbour after 100 restarts in one iteration.
        """
        t0 = time.perf_counter()
        try:
            self._setup()
            t1 = time.perf_counter()
            self._launches(t1)
            self._read_best()
            self.seconds = time.perf_counter() - t1
        except Exception as e:
            err = as_device_failure(e)
            lease, self.lease = self.lease, None
            if lease is not None:
                self.rt.release_lease(lease, failure=err or e)
            if err is None:
                raise
            if on_device_error == "raise":
                raise err from e
            self.failure = str(err)
            log.warning("device failed running a batch of tabu searches (%s); the CPU runs them again", err)
            return None
        self.rt.release_lease(self.lease)
        self.lease = None
        return time.perf_counter() - t0

    def _launches(self, t0: float) -> None:
        """Launch until every search stopped (``time_limit`` checked between launches)."""
        q, S, w, stops = self.lease.queue, len(self.states), self.work_group_size, self.stops
        while not all(self.stop):
            cl.enqueue_nd_range_kernel(q, self.kernel, (S * w,), (w,))
            # Kept until the trail's blocking read behind it returns: freed at once, pyopencl waited for the whole
            # launch holding the GIL, and the CPU's searches on the pool's threads stood still meanwhile.
            ctrl = cl.enqueue_copy(q, self.ctrl, self._ctrl_d, is_blocking=False)
            cl.enqueue_copy(q, self.trail, self._trail_d, is_blocking=True)
            del ctrl  # complete: the trail's read came after it
            for s in range(S):
                if not self.stop[s]:
                    self._absorb(s)
            if stops.time_limit is not None and time.perf_counter() - t0 >= stops.time_limit:
                self.stop = [s or "time_limit" for s in self.stop]

    def _absorb(self, s: int) -> None:
        """Take search ``s``'s trajectory, best and halt from the last launch."""
        first, last = int(self.done[s]) + 1, int(self.ctrl[s, 4])
        if last > self.history.shape[1]:  # room for the trajectories: doubled, up to the iterations
            width = min(self.stops.iterations, max(last, 2 * self.history.shape[1]))
            grow = ((0, 0), (0, width - self.history.shape[1]))
            self.history, self.moves = np.pad(self.history, grow), np.pad(self.moves, grow)
        if last >= first:
            rows = self.trail[s, : 2 * (last - first + 1)]
            self.moves[s, first - 1 : last], self.history[s, first - 1 : last] = rows[0::2], rows[1::2]
            low = int(rows[1::2].min())
            if self.best_value[s] is None or low < self.best_value[s]:
                self.best_value[s], self.best_on_device[s] = low, True
            self.done[s] = last
        if self.best_value[s] is not None and self.ctrl[s, 1] != self.best_value[s]:
            raise RuntimeError(f"batch search {s}: the device's best {self.ctrl[s, 1]} is not its trail's "
                               f"{self.best_value[s]}")
        halt = int(self.ctrl[s, 3])
        if halt == HALT_NO_FEASIBLE_MOVE:
            self._restart(s)
        elif halt:
            self.stop[s] = HALT_STOPS[halt]
        elif last >= self.stops.iterations:
            self.stop[s] = "iterations"

    def _restart(self, s: int) -> None:
        """No feasible neighbour at search ``s``'s next iteration: a new current solution drawn by its generator
        (as :func:`hpu.tabu.tabu_search` restarts; at most 100 per iteration), uploaded into its slices."""
        it = int(self.done[s]) + 1
        self._tries[s] = count_restart(self._tries[s], it)
        self.restarts[s] += 1
        solution = self.problem.restart(self.starts[s].rng)
        state = self.problem.state(solution)
        row = self.ctrl[s].copy()
        if self.problem.feasible(solution) and (self.best_value[s] is None or state.value < self.best_value[s]):
            self.best_value[s], self.best_solution[s], self.best_on_device[s] = state.value, state.solution, False
            row[1], row[2] = state.value, it
        row[0], row[3] = state.value, 0
        # row[2] = it makes the kernel copy the solution after iteration it's move as if it were a new best; that
        # copy is never read: best_on_device is False until a move beats the restart's value (and copies again)
        q = self.lease.queue
        for buf, (a, own) in zip(self._pargs, state.device_arrays()):
            if own:
                cl.enqueue_copy(q, buf, np.ascontiguousarray(a), dst_offset=s * a.nbytes)
        cl.enqueue_copy(q, self._ctrl_d, row, dst_offset=s * row.nbytes)

    def _read_best(self) -> None:
        """The best solutions the device kept (only of searches whose best came from a move there)."""
        if not self.best_on_device.any():
            return
        best = np.empty((len(self.states), self.problem.n), dtype=np.int32)
        cl.enqueue_copy(self.lease.queue, best, self._best_d, is_blocking=True)
        for s in np.flatnonzero(self.best_on_device):
            self.best_solution[s] = self.problem.check_solution(best[s])

    def result(self, s: int, wall: float, setup_time: float) -> TabuResult:
        """Search ``s``'s :class:`TabuResult` (``wall``: the batch's seconds, shared by its searches)."""
        N, it = self.problem.num_moves, int(self.done[s])
        split = TabuSplit(strategy="gpu", alpha=0.0, num_moves=N, cpu_moves=0, cpu_chunks=0, transfer_level=0,
                          groups=1, work_group_size=self.work_group_size, depth=math.log2(max(N, 1)))
        best = self.best_value[s]
        return TabuResult(best_solution=self.best_solution[s], best_value=None if best is None else int(best),
                          history=self.history[s, :it].copy(), moves=self.moves[s, :it].copy(), iterations=it,
                          stop=self.stop[s], restarts=int(self.restarts[s]), split=split, wall_time=wall,
                          setup_time=setup_time, cpu_time=0.0, device_time=wall, host_time=0.0, num_moves=N,
                          tabu_attribute=self.problem.tabu_attribute,
                          tie_break="index" if self.starts[s].tie_seed is None else "random",
                          block_iterations=self.block)


def _cpu_search(problem: TabuProblem, start: _Start, kw: dict[str, Any]) -> TabuResult:
    """One search on the calling thread (host loop), from a copy of its start's generator; the start's generator
    is then left where the search left the copy."""
    rng = start.rerun_seed()
    with kw["runtime"].helping():  # on the call's executor: part of the running call (close() waits for it)
        res = tabu_search(problem, seed=rng, initial=start.initial, strategy="cpu", cpu_chunks=1, **kw)
    start.settle(rng)
    return res


def calibrate_many(problem: TabuProblem, runtime: Runtime | None = None, *, tenure: int = 0,
                   block_iterations: int = DEFAULT_BLOCK_ITERATIONS, max_batch: int | None = None) -> ManyCosts:
    """Measure the rates :func:`plan_many` needs for ``problem`` (kept per runtime, problem kind, size and block).

    The CPU: one search of 16 iterations on one thread, then ``P`` (the
    runtime's threads) at once, one per thread (``p`` = their speed-up).  The
    device: after one untimed launch (a first launch may compile the kernel),
    one launch of ``block_iterations`` iterations for batches of
    1, 2, 4, ... searches, up to ``max_batch`` (default eight work-groups per
    compute unit, at least 64) or until one takes a quarter of a second.  The
    searches start from random solutions drawn from fixed seeds.

    Parameters
    ----------
    problem : TabuProblem
    runtime : hpu.Runtime, optional
        Default :func:`hpu.default_runtime`.
    tenure : int
        Tabu tenure of the timed searches.
    block_iterations : int
        Iterations per launch (as the searches will run).
    max_batch : int, optional
        Largest batch timed.

    Returns
    -------
    ManyCosts
        Cached in the runtime's resources: later calls with the same problem
        kind, size, tabu attribute and block return the same object.

    Raises
    ------
    hpu.DeviceFailure
        The device failed while being timed.
    """
    rt = resolve_runtime(runtime)
    block = check_int("block_iterations", block_iterations, 1)
    key = ("tabu-many", problem.kind, problem.cache_key, problem.tabu_attribute, block, max_batch)
    with rt.call():
        return rt.resources.get(key, lambda: _measure_many(problem, rt, check_int("tenure", tenure, 0), block,
                                                           max_batch), ManyCosts)


def _measure_many(problem: TabuProblem, rt: Runtime, tenure: int, block: int, max_batch: int | None) -> ManyCosts:
    k = _CALIBRATION_ITERATIONS
    kw = {"iterations": k, "tenure": tenure, "runtime": rt, "tie_break": "random"}
    starts = _starts(problem, range(rt.threads), None, "random")
    t1 = min(_cpu_search(problem, starts[0], kw).wall_time for _ in range(2)) / k
    with concurrent.futures.ThreadPoolExecutor(rt.threads, "hpu-many") as ex:
        t0 = time.perf_counter()
        list(ex.map(lambda st: _cpu_search(problem, st, kw), starts))
        wall = time.perf_counter() - t0
    parallelism = float(np.clip(rt.threads * t1 * k / wall, 1.0, rt.threads))
    sizes, secs = [], []
    if rt.has_device:
        cap = max_batch or max(64, 8 * int(rt.device.max_compute_units))
        stops = Stops(block, tenure, None, None, None)
        # Untimed first: a device may compile the kernel at its first launch (PoCL builds the work-group function
        # then), which timed would stop the sizes at 1 and hand every batch to the CPU.
        _DeviceBatch(problem, _starts(problem, range(1), None, "random"), rt, stops, block).run("raise")
        m = 1
        while m <= cap:
            batch = _DeviceBatch(problem, _starts(problem, range(m), None, "random"), rt, stops, block)
            batch.run("raise")
            sizes.append(m)
            secs.append(batch.seconds / block)
            if batch.seconds >= _CALIBRATION_SECONDS:
                break
            m *= 2
    return ManyCosts(tuple(sizes), tuple(secs), block, t1, rt.threads, parallelism, rt.device_shares_host_cores)


def tabu_search_many(
    problem: TabuProblem,
    seeds: Sequence[Any],
    *,
    iterations: int,
    tenure: int,
    initials: Sequence[Any] | None = None,
    strategy: str = "auto",
    device_searches: int | None = None,
    runtime: Runtime | None = None,
    time_limit: float | None = None,
    max_no_improve: int | None = None,
    target: int | None = None,
    tie_break: str = "random",
    block_iterations: int | None = None,
    costs: ManyCosts | None = None,
    on_device_error: str = "fallback",
) -> list[TabuResult]:
    """Run one tabu search per seed, the device's share as one batch and the CPU's on its threads, at once.

    Each search is the one :func:`hpu.tabu.tabu_search` runs with
    ``seed=seeds[i]`` (and ``initial=initials[i]``) and the same settings:
    the same trajectory and best, whichever unit runs it.  The division
    between the units is the model's (module docstring) or forced.

    Parameters
    ----------
    problem : TabuProblem
    seeds : sequence
        One search per entry, each any value :func:`numpy.random.default_rng`
        takes.  A Generator is used as :func:`hpu.tabu.tabu_search` uses it:
        the search draws its start, tie seed and restarts from it, so it is
        left in the state the search alone leaves it (each search needs its own).
    iterations, tenure, time_limit, max_no_improve, target, tie_break
        As for :func:`hpu.tabu.tabu_search`, for every search.  ``time_limit``
        bounds each CPU search and the device's batch (checked between launches).
    initials : sequence, optional
        Start solutions, one per seed (None entries: random starts).
    strategy : {"auto", "cpu", "gpu"}
        The model's division, or every search on one unit.
    device_searches : int, optional
        Force this many searches (the first seeds) onto the device.
    runtime : hpu.Runtime, optional
        Default :func:`hpu.default_runtime`; its ``threads`` run the CPU's searches.
    block_iterations : int, optional
        Iterations per launch of the device's batch (default
        :data:`MANY_BLOCK_ITERATIONS`, capped by ``iterations``).
    costs : ManyCosts, optional
        The model's rates (default :func:`calibrate_many`, measured once per runtime).
    on_device_error : {"fallback", "raise"}
        When the device fails: its searches run again on the CPU
        (:attr:`TabuResult.fallback` says why), or :class:`hpu.DeviceFailure` is raised.

    Returns
    -------
    list of TabuResult
        In the order of ``seeds``.  A device search's ``split.strategy`` is
        ``"gpu"``, its ``wall_time`` and ``device_time`` the batch's (shared by
        its searches); a CPU search's are its own.

    Raises
    ------
    ValueError
        As :func:`hpu.tabu.tabu_search`; no seeds; the same Generator twice; ``initials`` of another
        length; unknown ``strategy``; ``device_searches`` outside
        ``[0, len(seeds)]``; ``block_iterations`` below 1 or above ``iterations``.
    TypeError
        ``seeds`` not an iterable of seeds (``None``, a string, a number), or an entry that is no seed (the
        message names it, e.g. ``seeds[1]``).
    hpu.NoDeviceError
        ``strategy="gpu"`` or ``device_searches > 0`` on a CPU-only runtime.
    hpu.DeviceFailure
        The device failed and ``on_device_error="raise"``.
    """
    stops = check_stops(problem, iterations, tenure, time_limit, max_no_improve, target)
    seeds = seed_list(seeds)
    if not seeds:
        raise ValueError("tabu_search_many needs at least one seed")
    if initials is not None and len(initials) != len(seeds):
        raise ValueError(f"initials has {len(initials)} entries for {len(seeds)} seeds")
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {TIE_BREAKS}, got {tie_break!r}")
    check_on_device_error(on_device_error)
    block = min(MANY_BLOCK_ITERATIONS, stops.iterations) if block_iterations is None else \
        check_int("block_iterations", block_iterations, 1, stops.iterations + 1, " (the iteration budget)")
    rt = resolve_runtime(runtime)
    with rt.call():
        t0 = time.perf_counter()
        split = _plan(problem, len(seeds), rt, strategy, device_searches, costs, stops, block)
        starts = _starts(problem, seeds, initials, tie_break)
        kw = {"iterations": stops.iterations, "tenure": stops.tenure, "runtime": rt, "time_limit": time_limit,
              "max_no_improve": max_no_improve, "target": target, "tie_break": tie_break,
              "on_device_error": on_device_error}
        return _run_many(problem, starts, split.device_searches, rt, stops, block, kw, on_device_error,
                         time.perf_counter() - t0)


def _plan(problem: TabuProblem, searches: int, rt: Runtime, strategy: str, device_searches: int | None,
          costs: ManyCosts | None, stops: Stops, block: int) -> ManySplit:
    """:func:`plan_many` for the call, after checking the device and measuring the costs where needed."""
    if strategy not in MANY_STRATEGIES:
        raise ValueError(f"strategy must be one of {MANY_STRATEGIES}, got {strategy!r}")
    if strategy == "gpu" or (device_searches is not None and device_searches > 0):
        rt.require_device()
    if costs is None and strategy == "auto" and device_searches is None and rt.has_device:
        costs = calibrate_many(problem, rt, tenure=stops.tenure, block_iterations=block)
    return plan_many(searches, stops.iterations, costs, strategy=strategy, device_searches=device_searches,
                     has_device=rt.has_device)


def _run_many(problem: TabuProblem, starts: list[_Start], on_device: int, rt: Runtime, stops: Stops, block: int,
              kw: dict[str, Any], on_device_error: str, setup_time: float) -> list[TabuResult]:
    """The device's batch on this thread while the CPU's searches run in a pool of ``rt.threads``; then redos."""
    results: list[TabuResult | None] = [None] * len(starts)
    with concurrent.futures.ThreadPoolExecutor(rt.threads, "hpu-many") as ex:
        futures = {i: ex.submit(_cpu_search, problem, starts[i], kw) for i in range(on_device, len(starts))}
        fallback = ""
        if on_device:
            batch = _DeviceBatch(problem, starts[:on_device], rt, stops, block)
            wall = batch.run(on_device_error)
            if wall is None:
                fallback = batch.failure
            for s in range(on_device):
                if wall is None:
                    futures[s] = ex.submit(_cpu_search, problem, starts[s], kw)
                else:
                    results[s] = batch.result(s, wall, setup_time)
        for i, f in futures.items():
            res = f.result()
            results[i] = dataclasses.replace(res, fallback=fallback) if i < on_device and fallback else res
    return results  # type: ignore[return-value]
