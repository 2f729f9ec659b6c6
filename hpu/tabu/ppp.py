"""The permuted perceptron problem (PPP) with the Hamming-1, -2 and -3 neighbourhoods.

Pointcheval's identification scheme rests on it; Luong, Melab and Talbi,
"GPU Computing for Parallel Local Search Metaheuristic Algorithms", IEEE TC
62(1), 2013, section 6.2, definition 1: given an
m x n matrix ``A`` of +-1 (an epsilon-matrix) and a multiset ``S`` of ``m``
non-negative integers, find a vector ``V`` of ``n`` entries +-1 with
``{(AV)_j : j = 1..m} = S`` (as multisets; so ``AV >= 0``).

The paper's text states the problem, not the fitness; its authors'
implementation (ParadisEO-GPU, ``PPPEval``) minimises the fitness of Knudsen
and Meier ("Cryptanalysis of an identification scheme based on the permuted
perceptron problem", Eurocrypt 1999) with weights 30 and 1::

    f(V) = 30 sum_j (|Y_j| - Y_j) + sum_{v=1..n} |H_Y(v) - H_S(v)|,     Y = AV,

``H_X(v)`` being the number of entries of ``X`` equal to ``v``.  ``f >= 0``,
and ``f(V) = 0`` exactly when ``V`` solves the instance (then ``Y >= 0``
and the counts of positive values agree, so the counts of zeros do too).
The instance generator (:meth:`PPP.generate`) plants a solution as
Pointcheval's scheme and the paper's generator do.

A solution is a vector of +-1 (the paper's binary encoding); a move of the
Hamming-k neighbourhood flips ``k`` of its entries (``C(n, k)`` moves,
numbered lexicographically: :mod:`hpu.tabu.hamming`, section 4.6).
Flipping the set ``F`` changes ``Y_j`` by ``-2 sum_{c in F} A[j, c] V_c``,
so the state keeps ``Y`` and the counts of its values and evaluates a
move in O(m k) (section 6.2: "the evaluation of a neighbor can be performed
in linear time").  Every quantity is an integer: CPU and device agree
exactly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .hamming import subset_block, subset_from_index, subset_index
from .problem import NeighbourhoodState, TabuProblem, seeded_rng

__all__ = ["PPP", "PAPER_SIZES", "PENALTY_WEIGHT"]

#: Weight of the penalty term ``sum_j (|Y_j| - Y_j)`` (Knudsen and Meier; the histogram term has weight 1).
PENALTY_WEIGHT = 30
#: The instance sizes ``(m, n)`` of the paper's tables 3 and 4 (section 6.2).
PAPER_SIZES = ((73, 73), (81, 81), (101, 117), (201, 217), (401, 417), (601, 617), (801, 817), (1001, 1017),
               (1301, 1317))

_MAX_MOVES = 1 << 40  # the engine's largest neighbourhood
_BLOCK_ELEMENTS = 1 << 15  # (move, row or bin) pairs per temporary of the CPU evaluation (stays in cache)


def _penalty(y: np.ndarray) -> np.ndarray:
    """``|y| - y`` elementwise: twice the negative part."""
    return np.abs(y) - y


def _check_hamming(hamming: Any) -> int:
    if isinstance(hamming, bool) or not isinstance(hamming, (int, np.integer)) or int(hamming) not in (1, 2, 3):
        raise ValueError(f"hamming must be 1, 2 or 3 (the Hamming distance of a move), got {hamming!r}")
    return int(hamming)


def _check_size(what: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 1:
        raise ValueError(f"{what} must be a positive integer, got {v!r}")
    return int(v)


class PPP(TabuProblem):
    """A permuted perceptron problem instance with a Hamming-k neighbourhood (Luong et al. 2013, section 6.2).

    Parameters
    ----------
    A : array_like of int, shape (m, n)
        The epsilon-matrix: every entry +1 or -1 (integers, or floats equal to +-1).
    S : array_like of int, shape (m,)
        The multiset of the values ``(AV)_j`` (any order): integers in
        ``[0, n]`` of the parity of ``n`` (every ``(AV)_j`` is a sum of ``n``
        terms +-1).
    hamming : {1, 2, 3}
        Hamming distance of a move: the neighbourhood has ``C(n, hamming)`` moves.
    name : str
        Instance name.

    Raises
    ------
    ValueError
        If ``A`` is not a 2-D matrix of +-1 (a boolean matrix is refused),
        ``S`` is not ``m`` integers in ``[0, n]`` of the parity of ``n``,
        ``hamming`` is not 1, 2 or 3, ``n < hamming``, or the neighbourhood
        has ``2**40`` moves or more.

    Attributes
    ----------
    A : numpy.ndarray of int8, shape (m, n)
        Read-only.
    S : numpy.ndarray of int64, shape (m,)
        The multiset, sorted ascending; read-only.
    histogram : numpy.ndarray of int64, shape (n + 1,)
        ``histogram[v]`` = number of entries of ``S`` equal to ``v``; read-only.
    m, n, hamming : int
    planted : numpy.ndarray of int64, shape (n,), or None
        The hidden solution of an instance made by :meth:`generate`.
    """

    def __init__(self, A: Any, S: Any, *, hamming: int = 1, name: str = ""):
        a = np.array(A)
        if a.ndim != 2 or a.size == 0:
            raise ValueError(f"A must be a non-empty 2-D matrix (m x n), got shape {a.shape}")
        if a.dtype.kind not in "iuf" or not np.all((a == 1) | (a == -1)):
            raise ValueError("A must be an epsilon-matrix: every entry +1 or -1")
        m, n = a.shape
        k = _check_hamming(hamming)
        if n < k:
            raise ValueError(f"a Hamming-{k} neighbourhood needs n >= {k} columns, got n = {n}")
        if math.comb(n, k) >= _MAX_MOVES:
            raise ValueError(f"n = {n} gives C(n, {k}) >= 2**40 moves, more than the tabu engine handles")
        s = np.array(S)
        if s.ndim != 1 or s.shape[0] != m:
            raise ValueError(f"S must be a multiset of m = {m} values (A has {m} rows), got shape {s.shape}")
        if s.dtype.kind not in "iu":
            if s.dtype.kind != "f" or not np.all(np.isfinite(s)) or not np.all(s == np.round(s)):
                raise ValueError("S must hold integers")
        s = np.sort(s.astype(np.int64))
        if s[0] < 0 or s[-1] > n:
            raise ValueError(f"S must hold values in [0, n = {n}] (|(AV)_j| <= n), got {s[0]} .. {s[-1]}")
        if np.any((s - n) % 2):
            raise ValueError(f"S must hold values of the parity of n = {n}: every (AV)_j is a sum of n terms +-1")
        self.m, self.n, self.hamming, self.name = m, n, k, name
        self.A = a.astype(np.int8)
        self.S = s
        self.histogram = np.bincount(s, minlength=n + 1).astype(np.int64)
        for arr in (self.A, self.S, self.histogram):
            arr.flags.writeable = False
        self.planted: np.ndarray | None = None
        # Bin b holds the value 2 b - n (the parity of n); positive values from bin n // 2 + 1 on.
        self._first_pos = n // 2 + 1
        values = 2 * np.arange(n + 1) - n
        self._target = np.where(values > 0, self.histogram[np.clip(values, 0, n)], 0).astype(np.int64)
        self._parity = None if m % 2 == 0 else (int(self.A.sum(dtype=np.int64)) - int(s.sum())) // 2 % 2

    @classmethod
    def generate(cls, m: int, n: int, seed: Any, *, hamming: int = 1) -> PPP:
        """A random instance with a planted solution (attribute :attr:`planted`).

        ``V`` and ``A`` are drawn uniformly from +-1, then each row ``j`` of
        ``A`` with ``(AV)_j < 0`` is negated (so ``AV >= 0``) and ``S`` is the
        multiset of ``AV``: Pointcheval's construction, as in the paper's
        ParadisEO-GPU generator.  For even ``n`` some ``(AV)_j`` may be 0
        (they stay, and ``S`` holds them); the paper's sizes
        (:data:`PAPER_SIZES`) all have odd ``n``.

        Parameters
        ----------
        m, n : int
            Rows and columns (positive; ``n >= hamming``).
        seed : int, numpy.random.Generator or None
            Seeds :func:`numpy.random.default_rng`; the same seed gives the same instance.
        hamming : {1, 2, 3}

        Returns
        -------
        PPP
            With ``objective(planted) == 0``.

        Raises
        ------
        TypeError
            If ``seed`` is not a seed :func:`numpy.random.default_rng` takes (e.g. a float or a string).
        ValueError
            If ``m`` or ``n`` is not a positive integer, ``seed`` a negative integer, or as :class:`PPP`.
        """
        m, n = _check_size("m", m), _check_size("n", n)
        rng = seeded_rng(seed)
        a = 2 * rng.integers(0, 2, (m, n), dtype=np.int64) - 1
        v = 2 * rng.integers(0, 2, n, dtype=np.int64) - 1
        y = a @ v
        a[y < 0] *= -1
        pb = cls(a, np.abs(y), hamming=hamming, name=f"ppp{m}-{n}")
        pb.planted = v
        pb.planted.flags.writeable = False
        return pb

    def __repr__(self) -> str:
        return f"PPP({self.name or 'unnamed'}, m={self.m}, n={self.n}, hamming={self.hamming})"

    @property
    def kind(self) -> str:  # type: ignore[override]
        """``"ppp-h1"``, ``"ppp-h2"`` or ``"ppp-h3"``: the cost of a move depends on the Hamming distance."""
        return f"ppp-h{self.hamming}"

    @property
    def cache_key(self) -> str:
        return f"m{self.m}-n{self.n}"

    # -- neighbourhood -----------------------------------------------------------
    @property
    def num_moves(self) -> int:
        """``C(n, hamming)``."""
        return math.comb(self.n, self.hamming)

    def move(self, index: int) -> tuple[int, ...]:
        """The ``hamming`` positions ``c_1 < ... < c_k`` that move ``index`` flips (exact lexicographic unranking).

        Raises
        ------
        ValueError
            If ``index`` is outside ``[0, num_moves)``.
        """
        return subset_from_index(self.n, self.hamming, index)

    def move_index(self, *positions: int) -> int:
        """Index of the move flipping ``positions`` (``hamming`` of them, increasing): inverse of :meth:`move`.

        Raises
        ------
        ValueError
            If there are not ``hamming`` strictly increasing positions in ``[0, n)``.
        """
        if len(positions) != self.hamming:
            raise ValueError(f"a Hamming-{self.hamming} move flips {self.hamming} positions, got {len(positions)}")
        return subset_index(self.n, *positions)

    # -- solutions -----------------------------------------------------------------
    def check_solution(self, solution: Any) -> np.ndarray:
        """Return ``solution`` as a new int64 array after checking it is a vector of ``n`` entries +-1.

        Raises
        ------
        ValueError
            If it is not 1-D of length ``n``, not of an integer dtype, or has an entry other than +1 and -1.
        """
        v = np.array(solution)
        if v.ndim != 1 or v.shape[0] != self.n:
            raise ValueError(f"a PPP solution must be a vector of n = {self.n} entries +-1, got shape {v.shape}")
        if v.dtype.kind not in "iu" or not np.all((v == 1) | (v == -1)):
            raise ValueError("a PPP solution must hold only the integers +1 and -1")
        return v.astype(np.int64)

    def objective(self, solution: Any) -> int:
        """``30 sum_j (|Y_j| - Y_j) + sum_{v=1..n} |H_Y(v) - H_S(v)|`` with ``Y = AV`` (exact; module docstring).

        Raises
        ------
        ValueError
            If ``solution`` is not a vector of ``n`` entries +-1.
        """
        y = self.A.astype(np.int64) @ self.check_solution(solution)
        h = np.bincount(y[y > 0], minlength=self.n + 1)
        return PENALTY_WEIGHT * int(_penalty(y).sum()) + int(np.abs(h - self.histogram)[1:].sum())

    @property
    def solution_parity(self) -> int | None:
        """Parity of the number of -1 entries of every solution, or None when ``m`` is even.

        Summing the rows of ``AV = Y`` gives the public linear equation
        ``sum_c a_c V_c = sum(S)``, ``a_c`` the column sums of ``A``.  With
        ``u_c = (1 - V_c) / 2``: ``sum_c a_c u_c = (sum_c a_c - sum(S)) / 2``.
        For odd ``m`` every ``a_c`` is odd, so the number of -1 entries
        ``sum_c u_c`` has the parity of the right-hand side.  (The paper's
        sizes all have odd ``m``.)
        """
        return self._parity

    def random_solution(self, rng: np.random.Generator) -> np.ndarray:
        """A random start: uniform among the vectors of +-1 whose number of -1 entries has :attr:`solution_parity`.

        All ``n`` entries are drawn uniformly; if the parity is wrong the last
        one is negated (for even ``m``, where the parity is not known, it
        stays).  A Hamming-2 move flips two entries and so keeps this parity:
        a search started with the other one could never reach a solution.
        """
        v = 2 * rng.integers(0, 2, self.n, dtype=np.int64) - 1
        parity = self.solution_parity
        if parity is not None and int(np.count_nonzero(v == -1)) % 2 != parity:
            v[-1] = -v[-1]
        return v

    def apply_move(self, solution: Any, index: int) -> np.ndarray:
        """The vector with the positions of move ``index`` negated (a new array)."""
        v = self.check_solution(solution)
        v[list(self.move(index))] *= -1
        return v

    def state(self, solution: Any) -> _PPPState:
        return _PPPState(self, self.check_solution(solution))


class _PPPState(NeighbourhoodState):
    """Current ``V``, ``Y = AV``, the bin counts of ``Y`` and the two fitness terms.

    Row ``j`` is in bin ``(Y_j + n) / 2`` (bin ``b`` holds the value
    ``2 b - n``).  The host keeps ``W = (A diag(V))^T`` so that the change
    of every ``Y_j`` under a move is a sum of ``k`` rows of ``W``.
    """

    kernel = "tabu_ppp"

    def __init__(self, problem: PPP, v: np.ndarray):
        self.problem = problem
        # |Y| <= n: int16 arithmetic (half the memory traffic of int32) whenever Y + n cannot overflow it.
        self._dtype = np.int16 if 2 * problem.n < 2**15 else np.int32
        self.block_moves = max(1, _BLOCK_ELEMENTS // (problem.n + 1 + problem.m))
        self.reset(v)

    def reset(self, solution: np.ndarray) -> None:
        pb = self.problem
        self._v = np.array(solution, dtype=np.int64)
        self._w = np.ascontiguousarray((pb.A * self._v).T, dtype=self._dtype)
        self._y = (pb.A.astype(np.int64) @ self._v).astype(self._dtype)
        self._count = np.bincount((self._y + pb.n) >> 1, minlength=pb.n + 1).astype(np.int64)
        self._pen = int(_penalty(self._y.astype(np.int64)).sum())
        self._hist = int(np.abs(self._count - pb._target)[pb._first_pos :].sum())
        self.value = PENALTY_WEIGHT * self._pen + self._hist

    @property
    def solution(self) -> np.ndarray:
        return self._v.copy()

    def deltas(self, lo: int, hi: int) -> tuple[np.ndarray, None]:
        """Fitness changes of moves ``[lo, hi)``: new ``Y`` per (move, row), its penalty and positive-bin counts."""
        pb = self.problem
        cols = subset_block(pb.n, pb.hamming, lo, hi)
        s = self._w[cols[0]]
        for c in cols[1:]:
            s = s + self._w[c]
        y = self._y - 2 * s  # (moves, m): Y after each move
        pen = _penalty(y).sum(axis=1, dtype=np.int64)
        nb = pb.n + 1
        b = ((y + pb.n) >> 1).astype(np.intp)  # bins of the rows after each move ...
        b += np.arange(0, (hi - lo) * nb, nb, dtype=np.intp)[:, None]  # ... one histogram per move
        counts = np.bincount(b.ravel(), minlength=(hi - lo) * nb).reshape(hi - lo, nb)[:, pb._first_pos :]
        hist = np.abs(counts - pb._target[pb._first_pos :]).sum(axis=1)
        return PENALTY_WEIGHT * (pen - self._pen) + (hist - self._hist), None

    def apply(self, index: int, delta: int) -> None:
        """Flip the move's positions and update ``Y``, the bin counts and both terms in O(m k).

        The new value is recomputed from the changed rows and bins (it equals
        ``value + delta`` when ``delta`` is the move's true change).
        """
        pb = self.problem
        cols = list(pb.move(index))
        s = self._w[cols].sum(axis=0)
        rows = np.flatnonzero(s)
        y_old = self._y[rows]
        y_new = y_old - 2 * s[rows]
        b_old, b_new = (y_old + pb.n) >> 1, (y_new + pb.n) >> 1
        touched = np.unique(np.concatenate([b_old, b_new]))
        touched = touched[touched >= pb._first_pos]
        before = int(np.abs(self._count[touched] - pb._target[touched]).sum())
        np.subtract.at(self._count, b_old, 1)
        np.add.at(self._count, b_new, 1)
        self._hist += int(np.abs(self._count[touched] - pb._target[touched]).sum()) - before
        self._pen += int(_penalty(y_new.astype(np.int64)).sum() - _penalty(y_old.astype(np.int64)).sum())
        self._y[rows] = y_new
        self._v[cols] *= -1
        self._w[cols] *= -1
        self.value = PENALTY_WEIGHT * self._pen + self._hist

    # -- device ----------------------------------------------------------------
    def defines(self) -> dict[str, Any]:
        pb = self.problem
        return {"ROWS": max(pb.m, 2), "HAMMING_K": pb.hamming, "FIRST_POS": pb._first_pos, "NBINS": pb.n + 1,
                "PENALTY_WEIGHT": PENALTY_WEIGHT}

    def device_arrays(self) -> list[tuple[np.ndarray, bool]]:
        """``A``; ``V``, ``Y``, the rows in bin order, the bin counts (the state); the target histogram; the
        scratch of ``apply_move``'s counting sort (int32 but ``A``).

        One row gets a row of zeros after it (``ROWS`` 2; PoCL aborts building ``apply_move`` with ``ROWS`` 1): its
        ``Y`` stays 0, in a bin below ``FIRST_POS``, so it changes no penalty and no histogram term.
        """
        pb = self.problem
        a, y, count = pb.A, self._y, self._count
        if pb.m == 1:
            a, y, count = np.vstack([a, np.zeros_like(a)]), np.append(y, y.dtype.type(0)), count.copy()
            count[pb.n >> 1] += 1
        order = np.argsort(y, kind="stable")
        state = [(v.astype(np.int32), True) for v in (self._v, y, order, count)]
        return [(np.ascontiguousarray(a), False), *state, (pb._target.astype(np.int32), False),
                (np.zeros(pb.n + 1, dtype=np.int32), True)]
