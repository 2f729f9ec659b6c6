"""A hybrid evolutionary algorithm: an EA on the CPU whose mutation is an iterated tabu search run by the engine.

Luong, Melab and Talbi, "Parallel Hybrid Evolutionary Algorithms on GPU",
IEEE CEC 2010.  The CPU runs the evolutionary process (the
paper's high-level layer, sections II-B and III-A, fig. 2: population,
selection, crossover, replacement), a local search takes the place of the
mutation operator (section II-A), and the neighbourhood of each search is
evaluated by :func:`hpu.tabu.tabu_search` on the CPU, the device or both, as
the HPU model splits it.  The paper's QAP configuration (section IV-A) is the
default:

* random initial population of ``mu = 10`` individuals;
* deterministic tournament of size 2 for each parent;
* crossover keeping the attributes common to both parents, the other entries
  at random (rate 100%; :func:`crossover`);
* mutation (rate 100%) replaced by an iterated local search (ILS) of 3 tabu
  searches of 10000 iterations, each after the first started from the best
  solution so far perturbed by a random number of pairwise exchanges; tabu
  tenure ``2 floor(sqrt(N))`` for a neighbourhood of ``N`` moves;
* ``(mu + lambda)`` replacement, 10 generations.

The paper's neighbourhood is the Hamming ball of radius 3 (two swaps,
``n (n-1) (n-2) / 6`` moves); here the neighbourhood is the problem's own
(the 2-swap for :class:`hpu.tabu.QAP`).  The paper evaluates the offspring
one after another and names "one LS per GPU in parallel, each CPU core
executing one individual" as future work (section V).  Here the ``lambda``
local searches of a generation run concurrently, one Python thread and one
:class:`hpu.DeviceLease` (OpenCL command queue) each, so that their launches and read-backs overlap and
the device stays busy between one search's iterations; or, with ``strategy="many"``, in lock step, each ILS
step's searches as one :func:`hpu.tabu.tabu_search_many` call (one work-group per search on the device, and
searches on the CPU's threads, divided by the model).

>>> from hpu.tabu import QAP
>>> from hpu.tabu.evolution import hybrid_ea
>>> qap = QAP.from_qaplib("experiments/data/qaplib/tai12a.dat")  # doctest: +SKIP
>>> res = hybrid_ea(qap, generations=3, ls_iterations=500, seed=1)  # doctest: +SKIP
>>> res.best_value, res.history                                      # doctest: +SKIP
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import time
from typing import Any

import numpy as np

from ..core.hybrid import check_on_device_error
from ..core.runtime import Runtime, resolve_runtime
from ..core.util import check_int, check_positive
from .problem import TabuProblem
from .many import tabu_search_many
from .search import TabuResult, check_tenure, choose_split_or_cpu, tabu_search
from .split import STRATEGIES, TabuSplit, plan_split

__all__ = ["EvolutionResult", "crossover", "hybrid_ea", "paper_tenure"]


@dataclasses.dataclass(frozen=True, repr=False)
class EvolutionResult:
    """Outcome of :func:`hybrid_ea` (named fields, like :class:`hpu.tabu.TabuResult`).

    Attributes
    ----------
    best_solution : numpy.ndarray of int64, shape (n,)
        Best solution found (a permutation of ``0..n-1``).
    best_value : int
        Its objective.
    history : numpy.ndarray of int64, shape (generations + 1,)
        Best objective in the population: entry 0 for the random initial
        population, entry ``g`` after generation ``g``'s replacement
        (non-increasing: the replacement is elitist).
    population : numpy.ndarray of int64, shape (mu, n)
        The final population, best first.
    values : numpy.ndarray of int64, shape (mu,)
        Their objectives, non-decreasing.
    generations : int
        Generations completed.
    stop : str
        ``"time_limit"`` when the time limit stopped or skipped a local search
        or a generation, else ``"generations"``.
    local_searches : int
        Tabu searches run (``ils_iterations`` per offspring unless stopped by the time limit).
    ls_iterations : int
        Tabu-search iterations performed, summed over all searches.
    concurrency : int
        Local searches run at once.
    split : TabuSplit
        The division of each neighbourhood between CPU and device (the same
        for every search; with ``strategy="many"``, the first search's).
    wall_time : float
        Seconds of the generations (after set-up).
    search_time : float
        Seconds of wall time spent in the local searches (the concurrent part
        of each generation); ``wall_time - search_time`` is the evolutionary
        process (selection, crossover, replacement) and the thread hand-offs.
    setup_time : float
        Seconds before the first generation: runtime, split (calibration)
        and the initial population.
    cpu_time, device_time : float
        Busy seconds of the CPU share and of the device (kernels, read-backs,
        applies), summed over the searches: with concurrent searches they
        overlap, and can exceed ``search_time``.
    num_moves : int
        Neighbourhood size ``N``.
    fallbacks : int
        Local searches in which the device failed and the CPU evaluated the
        rest (each took the moves the device would have).
    """

    best_solution: np.ndarray
    best_value: int
    history: np.ndarray
    population: np.ndarray
    values: np.ndarray
    generations: int
    stop: str
    local_searches: int
    ls_iterations: int
    concurrency: int
    split: TabuSplit
    wall_time: float
    search_time: float
    setup_time: float
    cpu_time: float
    device_time: float
    num_moves: int
    fallbacks: int = 0

    @property
    def moves_per_second(self) -> float:
        """Neighbours evaluated per second of :attr:`search_time` (all concurrent searches together)."""
        return self.num_moves * self.ls_iterations / self.search_time if self.search_time > 0 else math.inf

    @property
    def time_per_generation(self) -> float:
        """``wall_time / generations`` (seconds)."""
        return self.wall_time / max(self.generations, 1)

    def __repr__(self) -> str:
        s = self.split
        return (
            f"EvolutionResult(best_value={self.best_value}, generations={self.generations}, stop={self.stop!r}, "
            f"local_searches={self.local_searches}, concurrency={self.concurrency}, strategy={s.strategy!r}, "
            f"alpha={s.alpha:.3g}, wall_time={self.wall_time:.3g} s, "
            f"moves_per_second={self.moves_per_second:.3g})"
        )


def paper_tenure(num_moves: int) -> int:
    """The paper's tabu tenure ``2 floor(sqrt(N))`` for ``N`` moves, capped at ``N - 1`` (section IV-A)."""
    return min(2 * math.isqrt(int(num_moves)), int(num_moves) - 1)


def crossover(parent1: Any, parent2: Any, rng: np.random.Generator) -> np.ndarray:
    """The paper's crossover: keep the attributes common to both parents, fill the rest at random.

    Positions where the parents agree keep their value; the values of
    ``parent1`` at the other positions are shuffled (uniformly) over those
    positions (Luong, Melab and Talbi 2010, section IV-A).  For two
    permutations of the same values the child is a permutation of them too.

    Parameters
    ----------
    parent1, parent2 : array_like of int, shape (n,)
    rng : numpy.random.Generator
        Draws the shuffle.

    Returns
    -------
    numpy.ndarray, shape (n,)
        The child (a new array of ``parent1``'s dtype).

    Raises
    ------
    ValueError
        If the parents are not 1-D arrays of one length.
    """
    a, b = np.asarray(parent1), np.asarray(parent2)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"parents must be 1-D arrays of one length, got shapes {a.shape} and {b.shape}")
    child = a.copy()
    free = np.flatnonzero(a != b)
    child[free] = rng.permutation(a[free])
    return child


def _tournament(values: np.ndarray, size: int, rng: np.random.Generator) -> int:
    """Index of the winner of a deterministic tournament: ``size`` individuals drawn with replacement, best wins."""
    entrants = rng.integers(0, values.size, size)
    return int(entrants[np.argmin(values[entrants])])


def _perturb(solution: np.ndarray, most: int, rng: np.random.Generator) -> np.ndarray:
    """``solution`` after a random number, from 1 to ``most``, of random pairwise exchanges."""
    s = solution.copy()
    for _ in range(int(rng.integers(1, most + 1))):
        i, j = rng.choice(s.size, 2, replace=False)
        s[i], s[j] = s[j], s[i]
    return s


def _root(seed: Any) -> np.random.SeedSequence:
    """``seed`` as the SeedSequence of :func:`hybrid_ea`'s streams (a SeedSequence is returned as is).

    Raises
    ------
    TypeError
        ``seed`` not None, an int, a sequence of ints or a SeedSequence (e.g. a float, a string or a Generator).
    ValueError
        ``seed`` a negative int, or a sequence holding one.
    """
    if isinstance(seed, np.random.SeedSequence):
        return seed
    try:
        return np.random.SeedSequence(seed)
    except (TypeError, ValueError) as e:
        raise (ValueError if isinstance(e, ValueError) else TypeError)(
            f"seed must be None, an int >= 0, a sequence of them or a numpy SeedSequence, got {seed!r}") from None


def _stream(root: np.random.SeedSequence, *key: int) -> np.random.Generator:
    """The random stream of ``root`` named by ``key`` (independent of thread timing)."""
    return np.random.default_rng(np.random.SeedSequence(root.entropy, spawn_key=root.spawn_key + key))


#: Accepted values of :func:`hybrid_ea`'s ``strategy``: the neighbourhood splits, and ``"many"``.
EA_STRATEGIES = (*STRATEGIES, "many")


@dataclasses.dataclass(frozen=True)
class _Settings:
    """Checked arguments of :func:`hybrid_ea`."""

    mu: int
    generations: int
    lam: int
    tournament: int
    ils_iterations: int
    ls_iterations: int
    tenure: int
    most_swaps: int
    workers: int
    time_limit: float | None
    strategy: str
    on_device_error: str


def _settings(problem: TabuProblem, population: Any, generations: Any, offspring: Any, tournament: Any,
              ils_iterations: Any, ls_iterations: Any, tenure: Any, perturbation: Any, concurrency: Any,
              time_limit: Any, strategy: str, on_device_error: str) -> _Settings:
    """Check :func:`hybrid_ea`'s arguments (``ValueError``, or ``TypeError`` for a ``time_limit`` of no number, naming
    the bad one) and fill in the defaults."""
    mu = check_int("population", population, 2)
    generations = check_int("generations", generations, 1)
    lam = mu if offspring is None else check_int("offspring", offspring, 1)
    tournament = check_int("tournament", tournament, 1)
    ils_iterations = check_int("ils_iterations", ils_iterations, 1)
    ls_iterations = check_int("ls_iterations", ls_iterations, 1)
    N = problem.num_moves
    tenure = paper_tenure(N) if tenure is None else check_tenure(tenure, N)
    most_swaps = max(1, problem.n // 4) if perturbation is None else check_int("perturbation", perturbation, 1)
    workers = lam if concurrency is None else min(check_int("concurrency", concurrency, 1), lam)
    if time_limit is not None and time_limit != math.inf:  # inf: no limit
        time_limit = check_positive("time_limit (seconds)", time_limit)  # no bools or strings
    if strategy not in EA_STRATEGIES:
        raise ValueError(f"strategy must be one of {EA_STRATEGIES}, got {strategy!r}")
    return _Settings(mu, generations, lam, tournament, ils_iterations, ls_iterations, tenure, most_swaps,
                     workers, time_limit, strategy, check_on_device_error(on_device_error))


@dataclasses.dataclass
class _Tally:
    """What local searches did, summed (the counters of :class:`EvolutionResult`)."""

    searches: int = 0
    iterations: int = 0
    fallbacks: int = 0
    cpu_time: float = 0.0
    device_time: float = 0.0

    def add(self, other: _Tally) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclasses.dataclass
class _Mutation:
    """Outcome of one offspring's ILS-TS."""

    solution: np.ndarray
    value: int
    tally: _Tally = dataclasses.field(default_factory=_Tally)
    cut: bool = False  # the time limit stopped a search or skipped one

    def take(self, res: TabuResult) -> None:
        """Count one tabu search of the ILS and keep its best if it is better."""
        self.cut |= res.stop == "time_limit"
        self.tally.add(_Tally(searches=1, iterations=res.iterations, fallbacks=int(bool(res.fallback)),
                              cpu_time=res.cpu_time, device_time=res.device_time))
        if res.best_value < self.value:
            self.solution, self.value = res.best_solution, res.best_value


class _IteratedTabuSearch:
    """The mutation: an ILS of tabu searches (section IV-A), callable on ``(generation, index, child)``.

    Every search borrows its own lease of the runtime (in :func:`tabu_search`);
    a call's random stream derives from ``root``, the generation and the
    offspring index only.
    """

    def __init__(self, problem: TabuProblem, runtime: Runtime, root: np.random.SeedSequence, cfg: _Settings,
                 forced: dict[str, Any]):
        self.problem, self.runtime, self.root, self.cfg, self.forced = problem, runtime, root, cfg, forced
        self.deadline: float | None = None
        self.split: TabuSplit | None = None  # strategy "many": the first search's

    def __call__(self, job: tuple[int, int, np.ndarray]) -> _Mutation:
        g, k, child = job
        cfg = self.cfg
        rng = _stream(self.root, 1, g, k)
        out = _Mutation(child, self.problem.objective(child))
        for i in range(cfg.ils_iterations):
            left = None if self.deadline is None else self.deadline - time.perf_counter()
            if left is not None and left <= 0:
                out.cut = True
                break
            initial = child if i == 0 else _perturb(out.solution, cfg.most_swaps, rng)
            with self.runtime.helping():  # on the call's executor: part of the running call (close() waits)
                out.take(tabu_search(self.problem, iterations=cfg.ls_iterations, tenure=cfg.tenure, seed=rng,
                                     runtime=self.runtime, time_limit=left, initial=initial,
                                     on_device_error=cfg.on_device_error, **self.forced))
        return out

    def all_at_once(self, jobs: list[tuple[int, int, np.ndarray]]) -> list[_Mutation]:
        """Every child's ILS in lock step (``strategy="many"``): step ``i`` runs the children's ``i``-th tabu
        searches in one :func:`hpu.tabu.tabu_search_many` call; each child's stream is drawn from as
        :meth:`__call__` draws from it, so the mutants are the same."""
        cfg = self.cfg
        rngs = [_stream(self.root, 1, g, k) for g, k, _ in jobs]
        outs = [_Mutation(child, self.problem.objective(child)) for _, _, child in jobs]
        for i in range(cfg.ils_iterations):
            left = None if self.deadline is None else self.deadline - time.perf_counter()
            if left is not None and left <= 0:
                for out in outs:
                    out.cut = True
                break
            initials = [job[2] if i == 0 else _perturb(out.solution, cfg.most_swaps, rng)
                        for job, out, rng in zip(jobs, outs, rngs)]
            results = tabu_search_many(self.problem, rngs, initials=initials, iterations=cfg.ls_iterations,
                                       tenure=cfg.tenure, runtime=self.runtime, time_limit=left,
                                       on_device_error=cfg.on_device_error)
            for out, res in zip(outs, results):
                out.take(res)
            self.split = self.split or results[0].split
        return outs


def _forced(split: TabuSplit) -> dict[str, Any]:
    """:func:`tabu_search` arguments that force ``split`` on every local search."""
    return {
        "strategy": split.strategy,
        "alpha": split.alpha if split.strategy == "hybrid" else None,
        "transfer_level": split.transfer_level if split.transfer_level >= 0 else None,
        "cpu_chunks": split.cpu_chunks or None,
    }


@dataclasses.dataclass
class _Evolution:
    """A run's population (best first), its objectives and what the generations did."""

    pop: np.ndarray
    values: np.ndarray
    history: list[int]
    tally: _Tally = dataclasses.field(default_factory=_Tally)
    search_time: float = 0.0
    generations: int = 0
    stop: str = "generations"

    @classmethod
    def initial(cls, problem: TabuProblem, mu: int, rng: np.random.Generator, given: Any = None) -> _Evolution:
        """``mu`` random permutations (or the ``given`` ones), sorted by objective."""
        if given is None:
            pop = np.stack([_permutation(problem, problem.random_solution(rng)) for _ in range(mu)])
        else:
            given = np.asarray(given)
            if given.ndim != 2 or given.shape[0] != mu:
                raise ValueError(f"initial_population must have shape ({mu}, n), got {given.shape}")
            pop = np.stack([_permutation(problem, p) for p in given])
        values = np.array([problem.objective(p) for p in pop], dtype=np.int64)
        order = np.argsort(values, kind="stable")
        return cls(pop[order], values[order], [int(values[order][0])])

    def offspring(self, problem: TabuProblem, g: int, cfg: _Settings,
                  rng: np.random.Generator) -> list[tuple[int, int, np.ndarray]]:
        """Generation ``g``'s children: tournament-selected parents and :func:`crossover`, as mutation jobs."""
        jobs = []
        for k in range(cfg.lam):
            a, b = _tournament(self.values, cfg.tournament, rng), _tournament(self.values, cfg.tournament, rng)
            jobs.append((g, k, problem.check_solution(crossover(self.pop[a], self.pop[b], rng))))
        return jobs

    def replace(self, mutants: list[_Mutation], mu: int) -> None:
        """``(mu + lambda)`` replacement, parents first among equals (a stable sort); count the searches."""
        for m in mutants:
            self.tally.add(m.tally)
        pop = np.concatenate([self.pop, np.stack([m.solution for m in mutants])])
        values = np.concatenate([self.values, np.array([m.value for m in mutants], dtype=np.int64)])
        order = np.argsort(values, kind="stable")[:mu]
        self.pop, self.values = pop[order], values[order]
        self.history.append(int(self.values[0]))


def _evolve(problem: TabuProblem, run: _Evolution, rng: np.random.Generator, mutate: _IteratedTabuSearch,
            pool: concurrent.futures.Executor | None, cfg: _Settings) -> None:
    """Run the generations (until the last, or the deadline) on ``run``."""
    for g in range(1, cfg.generations + 1):
        jobs = run.offspring(problem, g, cfg, rng)
        t0 = time.perf_counter()
        if cfg.strategy == "many":
            mutants = mutate.all_at_once(jobs)
        else:
            mutants = list(pool.map(mutate, jobs) if pool else map(mutate, jobs))
        run.search_time += time.perf_counter() - t0
        run.replace(mutants, cfg.mu)
        run.generations = g
        if any(m.cut for m in mutants) or (
                g < cfg.generations and mutate.deadline is not None and time.perf_counter() >= mutate.deadline):
            run.stop = "time_limit"
            break


def hybrid_ea(
    problem: TabuProblem,
    *,
    population: int = 10,
    generations: int = 10,
    offspring: int | None = None,
    tournament: int = 2,
    ils_iterations: int = 3,
    ls_iterations: int = 10000,
    tenure: int | None = None,
    perturbation: int | None = None,
    seed: Any = None,
    strategy: str = "hybrid",
    concurrency: int | None = None,
    runtime: Runtime | None = None,
    time_limit: float | None = None,
    on_device_error: str = "fallback",
    initial_population: Any = None,
) -> EvolutionResult:
    """Hybrid evolutionary algorithm with an iterated tabu search as mutation (Luong, Melab and Talbi 2010).

    Each generation draws ``offspring`` children: two parents by deterministic
    tournaments, one child by :func:`crossover`, then the child is mutated by
    an iterated local search of ``ils_iterations`` tabu searches
    (:func:`hpu.tabu.tabu_search`, ``ls_iterations`` iterations each; the
    second and later start from the best solution of the ILS so far after
    1 to ``perturbation`` random pairwise exchanges).  The ``mu + lambda``
    parents and mutated children are sorted by objective (parents first
    among equals) and the ``mu`` best survive.  The defaults are the paper's
    QAP configuration (section IV-A; ``lambda = mu``).

    The local searches of a generation run ``concurrency`` at a time, each on
    its own thread and :class:`hpu.DeviceLease` (command queue); the split of the neighbourhood
    between CPU and device is chosen once (:func:`hpu.tabu.choose_split`,
    calibrating if needed) and forced on every search.

    Parameters
    ----------
    problem : TabuProblem
        A permutation problem: its solutions are permutations of ``0..n-1``
        (e.g. :class:`hpu.tabu.QAP`).
    population : int
        ``mu``, individuals kept (>= 2).
    generations : int
        Generations to run (>= 1).
    offspring : int, optional
        ``lambda``, children (and local searches) per generation (>= 1; default ``mu``).
    tournament : int
        Tournament size (>= 1).
    ils_iterations : int
        Tabu searches per mutation (>= 1).
    ls_iterations : int
        Iterations of each tabu search (>= 1).
    tenure : int, optional
        Tabu tenure in iterations, in ``[0, N)`` for a neighbourhood of ``N``
        moves (default :func:`paper_tenure`, ``2 floor(sqrt(N))``).
    perturbation : int, optional
        Most pairwise exchanges of an ILS perturbation (>= 1; default ``max(1, n // 4)``;
        the paper only says "a random number").
    seed : int, sequence of int, numpy.random.SeedSequence or None
        Seeds the population, selection and crossover (one stream) and each
        local search (a stream derived from the generation and offspring
        index), so the same seed gives the same result with every strategy
        and concurrency (unless the time limit stops it).
    strategy : {"hybrid", "cpu", "gpu", "many"}
        Who evaluates the neighbourhoods (see :func:`hpu.tabu.tabu_search`),
        or ``"many"``: the children's ILS run in lock step, each step's
        ``offspring`` tabu searches in one :func:`hpu.tabu.tabu_search_many`
        call (a batch on the device, one work-group per search, and searches
        on the runtime's threads, divided by the model).  Every strategy gives
        the same result.
    concurrency : int, optional
        Local searches run at once (>= 1; default and at most ``offspring``);
        ``"many"`` runs all ``offspring`` at once.
    runtime : hpu.Runtime, optional
        Default :func:`hpu.default_runtime`.  Its thread pool evaluates CPU
        shares; the searches run on threads of their own.  Other threads may
        use the runtime meanwhile.
    time_limit : float, optional
        Seconds (> 0; ``math.inf``: no limit): searches running when it passes stop, the rest of the
        mutations are skipped, the generation's replacement completes and no
        further generation starts.
    on_device_error : {"fallback", "raise"}
        When the device fails, a local search goes on with the CPU alone
        from the same state (same trajectory; counted in
        :attr:`EvolutionResult.fallbacks`), or :class:`hpu.DeviceFailure`
        is raised (see :func:`hpu.tabu.tabu_search`).
    initial_population : array_like of int, shape (population, n), optional
        The first population (e.g. an island's after a migration,
        :func:`hpu.dask.hybrid_ea_islands`); default ``population`` random
        permutations.  Not modified.

    Returns
    -------
    EvolutionResult

    Raises
    ------
    TypeError
        ``time_limit`` not a real number (a bool or a string included), or ``seed`` not None, an int, a sequence
        of ints or a SeedSequence (e.g. a float, a string or a numpy Generator).
    ValueError
        ``seed`` a negative integer (or a sequence holding one),
        a count below its minimum (``population``, ``generations``,
        ``offspring``, ``tournament``, ``ils_iterations``, ``ls_iterations``,
        ``perturbation``, ``concurrency``), ``tenure`` outside ``[0, N)``,
        ``time_limit`` not positive (or NaN), unknown ``strategy``, or a problem whose
        random solutions are not permutations of ``0..n-1``, or an
        ``initial_population`` of another shape or not of permutations.
    hpu.NoDeviceError
        ``strategy="gpu"`` without an OpenCL device.
    hpu.DeviceFailure
        The device failed and ``on_device_error="raise"``.
    """
    cfg = _settings(problem, population, generations, offspring, tournament, ils_iterations, ls_iterations, tenure,
                    perturbation, concurrency, time_limit, strategy, on_device_error)
    root = _root(seed)
    rng = _stream(root, 0)
    t_setup = time.perf_counter()
    rt = resolve_runtime(runtime)
    with rt.call():
        split = None
        if strategy != "many":
            split, _ = choose_split_or_cpu(problem, rt, on_device_error=cfg.on_device_error, strategy=strategy)
        run = _Evolution.initial(problem, cfg.mu, rng, initial_population)
        mutate = _IteratedTabuSearch(problem, rt, root, cfg, {} if split is None else _forced(split))
        with contextlib.ExitStack() as stack:
            pool = None
            if cfg.workers > 1 and strategy != "many":
                pool = stack.enter_context(concurrent.futures.ThreadPoolExecutor(cfg.workers, "hpu-ea"))
            start = time.perf_counter()
            mutate.deadline = None if cfg.time_limit is None else start + cfg.time_limit
            _evolve(problem, run, rng, mutate, pool, cfg)
            wall = time.perf_counter() - start
    if split is None:  # strategy "many": the first search's, or none ran
        split = mutate.split or plan_split(problem.num_moves, None, strategy="cpu", cpu_chunks=1, has_device=False)
    return EvolutionResult(
        best_solution=run.pop[0].copy(),
        best_value=int(run.values[0]),
        history=np.array(run.history, dtype=np.int64),
        population=run.pop,
        values=run.values,
        generations=run.generations,
        stop=run.stop,
        local_searches=run.tally.searches,
        ls_iterations=run.tally.iterations,
        concurrency=cfg.lam if strategy == "many" else cfg.workers,
        split=split,
        wall_time=wall,
        search_time=run.search_time,
        setup_time=start - t_setup,
        cpu_time=run.tally.cpu_time,
        device_time=run.tally.device_time,
        num_moves=problem.num_moves,
        fallbacks=run.tally.fallbacks,
    )


def _permutation(problem: TabuProblem, solution: np.ndarray) -> np.ndarray:
    """``solution`` checked by the problem and to be a permutation of ``0..n-1`` (what :func:`crossover` needs)."""
    s = problem.check_solution(solution)
    if not np.array_equal(np.sort(s), np.arange(problem.n)):
        raise ValueError(f"hybrid_ea needs a permutation problem; {type(problem).__name__} gave {s.tolist()}")
    return s
