"""The permutation flow-shop problem (PFSP): minimise the makespan, swap and insertion neighbourhoods.

``n`` jobs pass through ``m`` machines in the same order; a solution is the
permutation ``pi`` of the jobs (position ``k`` holds job ``pi[k]``).  With
``p[i, j]`` the processing time of job ``j`` on machine ``i``, the completion
times follow the recurrence of Wu, Wei, Lai and Li, "Avoiding duplicated
computation to improve the performance of PFSP on CUDA GPUs", section 2.2::

    C[i, k] = p[i, pi[k]] + max(C[i, k-1], C[i-1, k])    (C[-1, k] = C[i, -1] = 0)

and the makespan is ``C[m-1, n-1]``.

Neighbourhoods (:attr:`PFSP.num_moves` moves, numbered exactly):

- ``"swap"``: exchange the jobs at positions ``i < j``: the ``C(n, 2)``
  children of Wu et al., section 3.1, numbered as the pairs of
  :mod:`hpu.tabu.pairs`.
- ``"insertion"``: take the job at position ``a`` out and put it back at
  position ``b != a``.  Inserting ``a`` at ``a + 1`` and ``a + 1`` at ``a``
  give the same child, so the redundant backward adjacent moves
  ``(a, a - 1)`` are left out: ``(n - 1)**2`` distinct moves (Taillard, "Some
  efficient heuristic methods for the flow shop sequencing problem", EJOR 47,
  1990).

Prefix sharing (Wu et al., section 3.2): a child that differs from the
parent from position ``f`` on has the parent's completion-time columns
``0 .. f-1``, so its evaluation starts from the parent's column ``f - 1`` and
recomputes only positions ``f .. n-1``.  The state keeps the parent's table on
the host and on the device; after a move, the device rebuilds it from column
``f`` on in one work-group along anti-diagonals (Wu et al., section 3.2,
figure 5; ``kernels_cl/tabu_pfsp.cl``).  With ``prefix_sharing=False``
(:class:`PFSP`) every child is instead evaluated from column ``0``, the
baseline of Czapiński and Barnes that Wu et al. compare against (section 4,
table 2); the deltas are the same.

On the CPU, :meth:`~NeighbourhoodState.deltas` takes the recurrence machine
by machine, each step a vector operation over a block of moves.  A single
sequence (the makespan, the parent's table, NEH's heads and tails) takes a
whole column per step: unrolling the recurrence down the machines gives, for
the job ``j`` at position ``k``,
``C[i, k] = P[i, j] + max_{l <= i} (C[l, k-1] - P[l-1, j])`` with
``P[i, j] = p[0, j] + ... + p[i, j]`` (``P[-1, j] = 0``), a running maximum
(:func:`numpy.maximum.accumulate`) over the machines.

Taillard's instances (Taillard, "Benchmarks for basic scheduling problems",
EJOR 64, 1993) are generated from their seeds: :meth:`PFSP.taillard`.
"""

from __future__ import annotations

import csv
from importlib import resources
from typing import Any

import numpy as np

from ..core.util import check_int
from .pairs import pair_block, pair_from_index
from .problem import NeighbourhoodState, TabuProblem

__all__ = ["PFSP", "NEIGHBOURHOODS", "taillard_processing_times"]

#: Accepted values of ``neighbourhood``.
NEIGHBOURHOODS = ("insertion", "swap")

_INT32_SAFE = 2**31 - 1  # the device works in int when every completion time fits
_INT64_SAFE = 2**62  # host bound on the total processing time (makespans and differences in int64)
_BLOCK_ELEMENTS = 1 << 16  # moves x machines per temporary of the CPU evaluation (stays in cache)
_LEHMER_M = 2**31 - 1


def _taillard_seeds() -> dict[str, tuple[int, int, int]]:
    """``{name: (jobs, machines, time_seed)}`` of Taillard's 120 instances (package data)."""
    res = resources.files("hpu.tabu") / "data" / "taillard_pfsp_seeds.csv"
    with res.open("r", newline="") as f:
        return {r["instance"]: (int(r["jobs"]), int(r["machines"]), int(r["time_seed"])) for r in csv.DictReader(f)}


def taillard_processing_times(time_seed: int, jobs: int, machines: int) -> np.ndarray:
    """Processing times from Taillard's generator (Taillard, EJOR 64, 1993, section 3).

    A Lehmer generator ``seed <- 16807 seed mod (2**31 - 1)``, computed with
    Schrage's method (``q = 127773``, ``r = 2836``) as Taillard's code does;
    each draw gives ``1 + floor(seed / (2**31 - 1) * 99)``, an integer in
    ``[1, 99]`` (here in exact integer arithmetic; for the 120 instances this
    equals Taillard's double-precision formula).  Times are drawn machine by
    machine and, within a machine, job by job.

    Parameters
    ----------
    time_seed : int
        Initial seed, in ``[1, 2**31 - 2]``.
    jobs, machines : int
        Instance size (each >= 1).

    Returns
    -------
    numpy.ndarray of int64, shape (machines, jobs)

    Raises
    ------
    ValueError
        If the seed or a size is out of range.
    """
    seed = check_int("PFSP: Taillard's time seed", time_seed, 1, _LEHMER_M)
    jobs, machines = check_int("PFSP: jobs", jobs, 1), check_int("PFSP: machines", machines, 1)
    out = np.empty(machines * jobs, dtype=np.int64)
    for t in range(out.size):
        hi, lo = divmod(seed, 127773)
        seed = 16807 * lo - 2836 * hi
        if seed < 0:
            seed += _LEHMER_M
        out[t] = 1 + seed * 99 // _LEHMER_M
    return out.reshape(machines, jobs)


class PFSP(TabuProblem):
    """A permutation flow-shop instance: minimise the makespan over job permutations.

    Parameters
    ----------
    processing_times : array_like of non-negative int, shape (machines, jobs)
        ``p[i, j]``: time (any integer unit) of job ``j`` on machine ``i``.
        Needs ``machines >= 1`` and ``jobs >= 2``.
    neighbourhood : {"insertion", "swap"}
        The moves of the tabu search (module docstring).
    name : str
        Instance name (e.g. ``"ta001"``).
    tabu_attribute : {"job-position", "move"}, optional
        What the tabu status is kept for.  ``"job-position"`` (default): the
        (job, position) pairs of Taillard (EJOR 47, 1990), extended: applying
        a move marks the former position of every job whose position changes
        (the two of a swap; the inserted job and those it shifts), and a move
        is tabu when it puts any job it moves at a position still tabu for that
        job, so that the two encodings of one adjacent exchange have one
        status.  ``"move"``: the move's index is tabu.
    prefix_sharing : bool
        How a move is evaluated, on the CPU and on the device.  ``True``: from
        the parent's completion-time column ``f - 1``, ``f`` the child's first
        changed position, recomputing only positions ``f .. n-1`` (Wu et al.,
        section 3.2).  ``False``: the child's whole table from column ``0``,
        the method of Czapiński and Barnes (J. Parallel Distrib. Comput. 71,
        2011) that Wu et al.'s table 2 (section 4) measures their speedups
        against.  The deltas, hence the search, are identical either way; only
        the cost of a move changes, so :attr:`cache_key` names the option.
        Applying a move rebuilds the parent's table from position ``f`` on in
        both cases (its makespan is the reference of the deltas).

    Raises
    ------
    TypeError
        If ``prefix_sharing`` is not a bool.
    ValueError
        If the times are not a 2-D array of non-negative integers with at least
        one machine and two jobs, their total is ``>= 2**62`` (makespans could
        overflow int64), or ``neighbourhood`` or ``tabu_attribute`` is unknown.

    Attributes
    ----------
    processing_times : numpy.ndarray of int64, shape (machines, jobs)
        Read-only copy of ``p``.
    machines, jobs : int
        ``m`` and ``n`` (:attr:`n` equals :attr:`jobs`).
    neighbourhood : str
    prefix_sharing : bool
    """

    kind = "pfsp"
    TABU_ATTRIBUTES = ("job-position", "move")

    def __init__(self, processing_times: Any, *, neighbourhood: str = "insertion", name: str = "",
                 prefix_sharing: bool = True, tabu_attribute: str | None = None):
        self._set_tabu_attribute(tabu_attribute)
        if neighbourhood not in NEIGHBOURHOODS:
            raise ValueError(f"PFSP: neighbourhood must be one of {NEIGHBOURHOODS}, got {neighbourhood!r}")
        if not isinstance(prefix_sharing, (bool, np.bool_)):
            raise TypeError(f"PFSP: prefix_sharing must be a bool, got {prefix_sharing!r}")
        try:
            p = np.array(processing_times)
        except ValueError as e:  # ragged nested lists
            raise ValueError(f"PFSP: processing_times must be a (machines, jobs) array: {e}") from None
        if p.ndim != 2:
            raise ValueError(f"PFSP: processing_times must be a 2-D array (machines, jobs), got shape {p.shape}")
        machines, jobs = p.shape
        if machines < 1 or jobs < 2:
            raise ValueError(f"PFSP: needs at least 1 machine and 2 jobs, got shape (machines, jobs) = {p.shape}")
        if p.dtype.kind not in "iu":
            if p.dtype.kind != "f" or not np.all(np.isfinite(p)) or not np.all(p == np.round(p)):
                raise ValueError(f"PFSP: processing_times must hold integers, got dtype {p.dtype}")
        if (p < 0).any():
            raise ValueError(f"PFSP: processing_times must be non-negative, found {p.min()}")
        if float(p.sum(dtype=np.float64)) >= _INT64_SAFE:
            raise ValueError("PFSP: processing times too large: the total must be < 2**62 (int64 makespans)")
        self.processing_times = p.astype(np.int64)
        self.processing_times.flags.writeable = False
        self.machines, self.jobs = int(machines), int(jobs)
        self.n = self.jobs
        self.neighbourhood = neighbourhood
        self.prefix_sharing = bool(prefix_sharing)
        self.name = name
        self._total = int(self.processing_times.sum())
        # Job-major (row j): _prefix[j, i] = P[i, j] = p[0, j] + ... + p[i, j], _prefix_before[j, i] = P[i-1, j].
        self._prefix = np.ascontiguousarray(np.cumsum(self.processing_times, axis=0).T)
        self._prefix_before = self._prefix - self.processing_times.T

    def __repr__(self) -> str:
        full = "" if self.prefix_sharing else ", no prefix sharing"
        return f"PFSP({self.name or 'unnamed'}, jobs={self.jobs}, machines={self.machines}, {self.neighbourhood}{full})"

    @classmethod
    def taillard(cls, name: str, **kw: Any) -> PFSP:
        """Taillard's instance ``name`` (``"ta001"`` .. ``"ta120"``), generated from its seed.

        See :func:`taillard_processing_times`; the seeds, sizes and names are
        the package data ``hpu/tabu/data/taillard_pfsp_seeds.csv``.  Keywords
        go to :class:`PFSP` (e.g. ``neighbourhood="swap"``, ``prefix_sharing=False``).

        Raises
        ------
        ValueError
            If ``name`` is not one of Taillard's 120 instances.
        """
        seeds = _taillard_seeds()
        key = str(name).lower()
        if key not in seeds:
            raise ValueError(f"PFSP: unknown Taillard instance {name!r} (expected ta001 .. ta{len(seeds):03d})")
        jobs, machines, seed = seeds[key]
        return cls(taillard_processing_times(seed, jobs, machines), name=key, **kw)

    @property
    def cache_key(self) -> str:
        """``<neighbourhood>-m<machines>-n<jobs>-<i32|i64>-<prefix|full>`` (the last: :attr:`prefix_sharing`)."""
        cell = "i32" if self._total <= _INT32_SAFE else "i64"
        evaluation = "prefix" if self.prefix_sharing else "full"
        return f"{self.neighbourhood}-m{self.machines}-n{self.jobs}-{cell}-{evaluation}"

    # -- neighbourhood ---------------------------------------------------------
    @property
    def num_moves(self) -> int:
        """``n (n - 1) / 2`` swaps or ``(n - 1)**2`` insertions."""
        n = self.jobs
        return n * (n - 1) // 2 if self.neighbourhood == "swap" else (n - 1) ** 2

    def move(self, index: int) -> tuple[int, int]:
        """The positions of move ``index`` (exact integer unranking).

        Swap: the pair ``(i, j)``, ``i < j``, of :func:`hpu.tabu.pair_from_index`.
        Insertion: ``(a, b)``, the job at position ``a`` goes to position
        ``b``.  Moves ``0 .. n-2`` are ``(0, 1) .. (0, n-1)``; then each
        ``a >= 1`` has ``n - 2`` moves, to ``b = 0 .. n-1`` in order, skipping
        ``b = a`` and the redundant ``b = a - 1`` (module docstring).

        Raises
        ------
        TypeError
            If ``index`` is not an integer.
        ValueError
            If ``index`` is outside ``[0, num_moves)``.
        """
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"PFSP: a move index must be an integer, got {index!r}")
        idx, n = int(index), self.jobs
        if not 0 <= idx < self.num_moves:
            raise ValueError(f"PFSP: move index out of range [0, {self.num_moves}), got {idx}")
        if self.neighbourhood == "swap":
            return pair_from_index(n, idx)
        if idx < n - 1:
            return 0, idx + 1
        a, t = divmod(idx - (n - 1), n - 2)
        a += 1
        return a, t if t < a - 1 else t + 2

    def _move_block(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """``(a, b)`` of moves ``[lo, hi)`` as int64 arrays (vectorised :meth:`move`)."""
        if self.neighbourhood == "swap":
            return pair_block(self.jobs, lo, hi)
        n = self.jobs
        idx = np.arange(lo, hi, dtype=np.int64)
        first_row = idx < n - 1
        a, t = np.divmod(idx - (n - 1), max(n - 2, 1))
        a += 1
        b = np.where(first_row, idx + 1, np.where(t < a - 1, t, t + 2))
        return np.where(first_row, 0, a), b

    # -- solutions -------------------------------------------------------------
    def check_solution(self, solution: Any) -> np.ndarray:
        """Return ``solution`` as a new int64 array after checking it is a permutation of ``0..n-1``.

        Raises
        ------
        ValueError
            If it is not a 1-D integer permutation of the jobs ``0..n-1``.
        """
        pi = np.array(solution)
        if pi.ndim != 1 or pi.shape[0] != self.jobs:
            raise ValueError(f"PFSP: a solution must be a permutation of the jobs 0..{self.jobs - 1}, "
                             f"got shape {pi.shape}")
        if pi.dtype.kind not in "iu" or not np.array_equal(np.sort(pi), np.arange(self.jobs)):
            raise ValueError(f"PFSP: solution is not a permutation of the jobs 0..{self.jobs - 1}: {pi.tolist()}")
        return pi.astype(np.int64)

    def _columns(self, start: np.ndarray, jobs: np.ndarray) -> np.ndarray:
        """Completion-time columns of ``jobs`` processed in order after the column ``start``.

        ``start`` (shape ``(m,)``) is the column of the position before (zeros
        at the start); returns shape ``(len(jobs), m)`` (position-major).
        """
        out = np.empty((len(jobs), self.machines), dtype=np.int64)
        c = start
        for k, j in enumerate(jobs):
            c = self._prefix[j] + np.maximum.accumulate(c - self._prefix_before[j])
            out[k] = c
        return out

    def completion_times(self, solution: Any) -> np.ndarray:
        """The completion-time table of a permutation (Wu et al., section 2.2).

        Returns
        -------
        numpy.ndarray of int64, shape (machines, jobs)
            ``C[i, k]``: when machine ``i`` finishes the job at position ``k``.

        Raises
        ------
        ValueError
            If ``solution`` is not a permutation of ``0..n-1``.
        """
        pi = self.check_solution(solution)
        return self._columns(np.zeros(self.machines, dtype=np.int64), pi).T.copy()

    def objective(self, solution: Any) -> int:
        """The makespan ``C[m-1, n-1]`` of the permutation (exact).

        Raises
        ------
        ValueError
            If ``solution`` is not a permutation of ``0..n-1``.
        """
        return int(self.completion_times(solution)[-1, -1])

    def random_solution(self, rng: np.random.Generator) -> np.ndarray:
        """A uniformly random permutation of the jobs (int64, shape ``(n,)``)."""
        return rng.permutation(self.jobs).astype(np.int64)

    def apply_move(self, solution: Any, index: int) -> np.ndarray:
        """The child permutation of move ``index`` (a new int64 array; see :meth:`move`)."""
        pi = self.check_solution(solution)
        _apply(pi, self.neighbourhood, *self.move(index))
        return pi

    def neh(self) -> np.ndarray:
        """The NEH heuristic's permutation (Nawaz, Enscore and Ham, Omega 11, 1983).

        Jobs are taken by decreasing total processing time (ties: lower job
        first); each is inserted at the position of the partial sequence that
        minimises its makespan (ties: the first such position).  The insertion
        positions are evaluated together with Taillard's heads and tails
        (Taillard, EJOR 47, 1990): inserting job ``j`` at position ``t`` gives
        ``max_i (f[i, t] + q[i, t])``, ``f`` the completion times of ``j``
        after the heads ``e[:, t-1]`` and ``q`` the tails from position ``t``.

        Returns
        -------
        numpy.ndarray of int64, shape (n,)
        """
        m = self.machines
        order = np.argsort(-self.processing_times.sum(axis=0), kind="stable")
        rev = PFSP(self.processing_times[::-1])  # tails = heads of the reversed sequence on reversed machines
        zero = np.zeros((1, m), dtype=np.int64)
        seq = np.array(order[:1], dtype=np.int64)
        for j in order[1:]:
            heads = np.vstack([zero, self._columns(zero[0], seq)])  # heads[t] = e[:, t-1]
            tails = np.vstack([rev._columns(zero[0], seq[::-1])[::-1, ::-1], zero])  # tails[t] = q[:, t]
            f = self._prefix[j] + np.maximum.accumulate(heads - self._prefix_before[j], axis=1)
            t = int(np.argmin((f + tails).max(axis=1)))
            seq = np.insert(seq, t, j)
        return seq

    def state(self, solution: Any) -> _PFSPState:
        return _PFSPState(self, self.check_solution(solution))


def _apply(pi: np.ndarray, neighbourhood: str, a: int, b: int) -> None:
    """Apply the move ``(a, b)`` to the permutation ``pi`` in place."""
    if neighbourhood == "swap":
        pi[a], pi[b] = pi[b], pi[a]
    else:
        job = pi[a]
        if a < b:
            pi[a:b] = pi[a + 1 : b + 1]
        else:
            pi[b + 1 : a + 1] = pi[b:a]
        pi[b] = job


class _PFSPState(NeighbourhoodState):
    """Current permutation and its completion-time table (position-major, with a zero column in front)."""

    kernel = "tabu_pfsp"

    def __init__(self, problem: PFSP, perm: np.ndarray):
        self.problem = problem
        self.block_moves = max(1, _BLOCK_ELEMENTS // problem.machines)
        self._cell = np.int32 if problem._total <= _INT32_SAFE else np.int64
        self.reset(perm)

    def reset(self, solution: np.ndarray) -> None:
        pb = self.problem
        self._perm = np.array(solution, dtype=np.int64)
        # _table[k + 1] = column k of C (machines), _table[0] = 0: the column before position 0.
        self._table = np.zeros((pb.jobs + 1, pb.machines), dtype=np.int64)
        self._rebuild(0)

    def _rebuild(self, first: int) -> None:
        """Recompute the table's columns ``first .. n-1`` (the prefix before is unchanged)."""
        self._table[first + 1 :] = self.problem._columns(self._table[first], self._perm[first:])
        self.value = int(self._table[-1, -1])

    @property
    def solution(self) -> np.ndarray:
        return self._perm.copy()

    def deltas(self, lo: int, hi: int) -> tuple[np.ndarray, None]:
        """Makespan changes of moves ``[lo, hi)``, with or without prefix sharing (Wu et al., section 3.2).

        Each move starts at position ``s``: its first changed position ``f``
        with :attr:`PFSP.prefix_sharing`, else ``0`` (the whole table).  The
        moves are sorted by ``s``; at position ``k`` the moves with ``s <= k``
        (a prefix of that order) take one step of the recurrence, machine by
        machine, each from the column it holds, which starts as the parent's
        column ``s - 1`` (zeros for ``s = 0``).  Columns are stored
        machine-major, ``(m, moves)``, so each step is a vector operation over
        the moves.
        """
        pb = self.problem
        if hi == lo:
            return np.empty(0, dtype=np.int64), None
        a, b = pb._move_block(lo, hi)
        start = np.minimum(a, b) if pb.prefix_sharing else np.zeros_like(a)
        order = np.argsort(start, kind="stable")
        a, b, start = a[order], b[order], start[order]
        active = np.searchsorted(start, np.arange(pb.jobs), side="right")  # moves with s <= k
        c = self._table[start].T.copy()  # the parent's column s - 1 (zeros for s = 0), shape (m, moves)
        swap = pb.neighbourhood == "swap"
        for k in range(int(start[0]), pb.jobs):
            s = active[k]
            ak, bk, ck = a[:s], b[:s], c[:, :s]
            if swap:
                src = np.where(ak == k, bk, np.where(bk == k, ak, k))
            else:  # child position k holds the parent's k + 1 (a <= k < b), k - 1 (b < k <= a), or a (k = b)
                src = k + ((ak <= k) & (k < bk)) - ((bk < k) & (k <= ak))
                src = np.where(bk == k, ak, src)
            p = pb.processing_times[:, self._perm[src]]
            ck[0] += p[0]
            for i in range(1, pb.machines):  # C[i, k] = max(C[i, k-1], C[i-1, k]) + p[i, job]
                np.maximum(ck[i], ck[i - 1], out=ck[i])
                ck[i] += p[i]
        delta = np.empty(hi - lo, dtype=np.int64)
        delta[order] = c[-1] - self.value
        return delta, None

    def _attribute_count(self) -> int:
        """``n * n`` (job, position) pairs, job-major."""
        return self.problem.jobs ** 2

    def _attribute_tabu(self, lo: int, hi: int, tabu_until: np.ndarray, iteration: int) -> np.ndarray:
        """Job-position: whether a move puts any job it moves at a position still tabu for that job.

        With ``q[k, t]``: the job now at position ``k`` may not go to ``t``, a
        swap ``(a, b)`` is tabu when ``q[a, b]`` or ``q[b, a]``; an insertion
        when ``q[a, b]`` or, for the jobs it shifts by one, ``q[k, k - 1]``
        (``a < k <= b``) or ``q[k, k + 1]`` (``b <= k < a``), counted with
        prefix sums along those diagonals.
        """
        pb = self.problem
        n = pb.jobs
        q = tabu_until.reshape(n, n)[self._perm] > iteration
        a, b = pb._move_block(lo, hi)
        moved = q[a, b]
        if pb.neighbourhood == "swap":
            return moved | q[b, a]
        k = np.arange(n - 1)
        down = np.concatenate([[0, 0], np.cumsum(q[k + 1, k])])  # down[t + 1] = #{1 <= k <= t: q[k, k - 1]}
        up = np.concatenate([[0], np.cumsum(q[k, k + 1])])  # up[t] = #{k < t: q[k, k + 1]}
        shifted = np.where(a < b, down[b + 1] - down[a + 1], up[a] - up[b]) > 0
        return moved | shifted

    def _mark_attributes(self, index: int, tabu_until: np.ndarray, until: int) -> None:
        """Job-position: ``(job, position)`` of every job whose position the move changes, before it."""
        pb = self.problem
        a, b = pb.move(index)
        k = np.array([a, b]) if pb.neighbourhood == "swap" else np.arange(min(a, b), max(a, b) + 1)
        tabu_until[self._perm[k] * pb.jobs + k] = until

    def apply(self, index: int, delta: int) -> None:
        a, b = self.problem.move(index)
        _apply(self._perm, self.problem.neighbourhood, a, b)
        self._rebuild(min(a, b))

    # -- device ----------------------------------------------------------------
    def defines(self) -> dict[str, Any]:
        return {
            "MACHINES": max(self.problem.machines, 2),
            "CELL_T": "int" if self._cell == np.int32 else "long",
            "INSERTION": int(self.problem.neighbourhood == "insertion"),
            "PREFIX_SHARING": int(self.problem.prefix_sharing),
        }

    def device_arrays(self) -> list[tuple[np.ndarray, bool]]:
        """Times and table job- and position-major; one machine gets a machine of zero times in front, which
        changes no completion time of the last (PoCL aborts building ``apply_move`` with ``MACHINES`` 1)."""
        pt, table = self.problem.processing_times.T, self._table[1:]
        if self.problem.machines == 1:
            pt, table = (np.hstack([np.zeros_like(a), a]) for a in (pt, table))
        pt, table = (np.ascontiguousarray(a, dtype=self._cell) for a in (pt, table))
        return [(pt, False), (self._perm.astype(np.int32), True), (table, True)]

    def apply_range(self, work_group_size: int) -> tuple[tuple[int], tuple[int]]:
        """One work-group of ``min(work_group_size, machines)`` work-items (one per machine of a diagonal; two for
        one machine, see :meth:`device_arrays`)."""
        w = min(work_group_size, max(self.problem.machines, 2))
        return (w,), (w,)
