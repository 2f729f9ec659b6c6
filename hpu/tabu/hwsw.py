"""Hardware/software partitioning (problem P) with the 2-flip neighbourhood.

Hou, He, Zhou and Chen, "An efficient GPU-based parallel tabu search
algorithm for hardware/software co-design", Front. Comput. Sci. 2019,
after Arató et al.: a task graph ``G(V, E)`` with
software cost ``s_u``, hardware cost ``h_u`` per task and communication cost
``c_uv`` per edge.  A partition is ``x`` with ``x_u = 1`` for software, ``0``
for hardware.  Problem P (section 2, equations 1-5): minimise the hardware
cost ``H(x) = sum_u h_u (1 - x_u)`` subject to
``S(x) + C(x) <= R`` with ``S(x) = sum_u s_u x_u`` and
``C(x) = sum_{(u, v) in E} c_uv |x_u - x_v|``.

A move flips two tasks ``i < j`` (section 3.1, ``n (n - 1) / 2`` moves);
neighbours violating the constraint are filtered out (section 3.2), and when
none is feasible the search restarts (section 3.4).  All costs are integers,
so every evaluation is exact and the CPU and the device agree bit for bit.

A 2-flip keeps the parity of the number of tasks in software, and a restart
puts two tasks there: a search reaches only partitions of its start's parity,
and of even parity after its first restart (the paper's neighbourhood; where
the best partition may have the other parity, search from a start of it too,
``initial=``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.util import check_int
from .pairs import num_pairs, pair_block, pair_from_index, pair_index
from .problem import NeighbourhoodState, TabuProblem, seeded_rng

__all__ = ["HWSWPartitioning"]

_BLOCK_MOVES = 1 << 15  # moves per block of the CPU evaluation (temporaries stay in cache)


def _int_vector(v: Any, n: int | None, what: str) -> np.ndarray:
    arr = np.array(v)
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        want = f"({n},)" if n is not None else "1-D"
        raise ValueError(f"{what} must have shape {want}, got {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError(f"{what} must hold integers")
    if arr.size and (float(arr.min()) < 0 or float(arr.max()) >= 2.0**62):
        raise ValueError(f"{what} must be non-negative integers below 2**62")
    return arr.astype(np.int64)


class HWSWPartitioning(TabuProblem):
    """An instance of HW/SW partitioning problem P (Hou et al. 2019, section 2).

    Parameters
    ----------
    software : array_like of int, shape (n,)
        Software costs ``s_u >= 0``.
    hardware : array_like of int, shape (n,)
        Hardware costs ``h_u >= 0``.
    edges : array_like of int, shape (m, 2)
        Undirected edges ``(u, v)``, ``u != v``, no duplicates.
    communication : array_like of int, shape (m,)
        Communication costs ``c_uv >= 0`` of the edges.
    limit : int
        The bound ``R >= 0`` on ``S(x) + C(x)``.
    name : str
        Instance name.

    Raises
    ------
    ValueError
        On negative or non-integer costs, ``n < 2``, bad or duplicate edges,
        mismatched lengths, ``R < 0``, or costs so large that sums could
        overflow int64.

    Notes
    -----
    Solutions are arrays of 0 (hardware) and 1 (software) of length ``n``.
    The objective is ``H(x)``; :meth:`load` gives ``S(x) + C(x)`` and
    :meth:`feasible` checks it against ``R``.  A move (2-flip) keeps the
    parity of the number of tasks in software, and :meth:`restart` gives an
    even one: a search reaches partitions of its start's parity only, and of
    even parity after its first restart (:mod:`hpu.tabu.hwsw`).
    """

    kind = "hwsw"

    def __init__(self, software: Any, hardware: Any, edges: Any, communication: Any, limit: int, *, name: str = ""):
        s = _int_vector(software, None, "software costs")
        n = s.shape[0]
        if n < 2:
            raise ValueError(f"HW/SW partitioning needs n >= 2 tasks, got n = {n}")
        h = _int_vector(hardware, n, "hardware costs")
        e = np.array(edges) if np.size(edges) else np.empty((0, 2), np.int64)
        if e.ndim != 2 or e.shape[1] != 2:
            raise ValueError(f"edges must have shape (m, 2): one (task, task) pair a row, got {e.shape}")
        if e.dtype.kind not in "iu" and not (e.dtype.kind == "f" and np.all(e == np.round(e))):
            raise ValueError("edge endpoints must be integers (task indices)")
        e = e.astype(np.int64)
        c = _int_vector(communication, e.shape[0], "communication costs")
        if e.size and (e.min() < 0 or e.max() >= n):
            raise ValueError(f"edge endpoints must lie in [0, {n})")
        if np.any(e[:, 0] == e[:, 1]):
            raise ValueError("an edge must join two different tasks")
        lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
        if e.size and np.unique(lo * n + hi).size != e.shape[0]:
            raise ValueError("duplicate edge")
        limit = check_int("the limit R", limit, 0)
        if sum(int(x) for x in s) + sum(int(x) for x in h) + 4 * sum(int(x) for x in c) + limit >= 2**62:
            raise ValueError("costs too large: sums could overflow int64")
        self.n = n
        self.name = name
        self.software, self.hardware, self.communication = s, h, c
        self.edges = np.stack([lo, hi], axis=1)
        self.limit = limit
        for arr in (self.software, self.hardware, self.communication, self.edges):
            arr.flags.writeable = False
        # CSR adjacency, neighbours sorted per row (both directions).
        src = np.concatenate([lo, hi])
        dst = np.concatenate([hi, lo])
        cost = np.concatenate([c, c])
        order = np.lexsort((dst, src))
        self._adj_node = dst[order].astype(np.int32)
        self._adj_cost = cost[order]
        self._adj_ptr = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.bincount(src, minlength=n), out=self._adj_ptr[1:])
        # Edges in move order, for the CPU's correction of flipping both endpoints.
        self._edge_move = pair_index(n, lo, hi) if e.size else np.empty(0, np.int64)
        order = np.argsort(self._edge_move)
        self._edge_move = self._edge_move[order]
        self._edge_lo, self._edge_hi, self._edge_cost = lo[order], hi[order], c[order]

    @classmethod
    def random(
        cls,
        n: int,
        *,
        edges: int | None = None,
        ccr: float = 1.0,
        constraint: str | int = "low",
        k: float = 1.0,
        lam: float = 0.3,
        seed: Any = None,
    ) -> HWSWPartitioning:
        """A random instance following Hou et al. 2019, section 4.1.

        * a random graph with ``n`` tasks and ``edges`` distinct edges drawn
          uniformly (default ``2 n``, at most all pairs; the paper's random1-9
          use ``n``, ``2n``, ``3n``);
        * ``s_u ~ U{1, ..., 100}``;
        * ``h_u ~ Normal(k s_u, k lam s_u)``, rounded, at least 1;
        * ``c_uv ~ U[0, 2 ccr s_max]``, rounded (``ccr`` is the
          communication-to-computation ratio rho: 0.1, 1 or 10 in the paper);
        * ``R ~ U[0, sum s / 2]`` for ``constraint="low"`` (strict real-time
          constraint), ``U[sum s / 2, sum s]`` for ``"high"`` (loose), floored;
          an integer sets ``R`` directly.

        Costs are rounded to integers so that every evaluation is exact
        (use ``k > 1`` for a finer hardware-cost resolution).

        Raises
        ------
        TypeError
            If ``seed`` is not a seed :func:`numpy.random.default_rng` takes (e.g. a float or a string).
        ValueError
            If ``n`` is not an integer >= 2, ``edges`` not an integer in
            ``[0, n (n - 1) / 2]``, ``ccr``, ``k`` or ``lam`` negative or not
            finite, ``constraint`` is neither known nor an integer >= 0, or
            ``seed`` is a negative integer.
        """
        n = check_int("HW/SW partitioning: the number of tasks n", n, 2)
        m = min(2 * n, num_pairs(n)) if edges is None else edges
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 0 <= m <= num_pairs(n):
            raise ValueError(f"edges must lie in [0, {num_pairs(n)}] for n = {n} (an integer), got {m!r}")
        m = int(m)
        for what, v in (("ccr", ccr), ("k", k), ("lam", lam)):
            if not 0 <= float(v) < math.inf:
                raise ValueError(f"{what} must be finite and >= 0, got {v!r}")
        rng = seeded_rng(seed)
        s = rng.integers(1, 101, size=n)
        h = np.maximum(1, np.rint(rng.normal(k * s, k * lam * s))).astype(np.int64)
        pairs = rng.choice(num_pairs(n), size=m, replace=False)
        u, v = pair_from_index(n, np.sort(pairs))
        c = np.rint(rng.uniform(0.0, 2.0 * ccr * s.max(), size=m)).astype(np.int64)
        total = int(s.sum())
        if isinstance(constraint, str):
            if constraint == "low":
                limit = int(rng.uniform(0, total / 2))
            elif constraint == "high":
                limit = int(rng.uniform(total / 2, total))
            else:
                raise ValueError(f"constraint must be 'low', 'high' or an integer R, got {constraint!r}")
        else:
            limit = check_int("constraint (the limit R)", constraint, 0)
        name = f"hwsw{n}-m{m}-ccr{ccr:g}-{constraint}"
        return cls(s, h, np.stack([u, v], axis=1), c, limit, name=name)

    def __repr__(self) -> str:
        return f"HWSWPartitioning({self.name or 'unnamed'}, n={self.n}, m={len(self.edges)}, R={self.limit})"

    @property
    def cache_key(self) -> str:
        return f"n{self.n}-m{len(self.edges)}"

    # -- costs -------------------------------------------------------------------
    def check_solution(self, solution: Any) -> np.ndarray:
        """Return ``solution`` as a new int64 array of 0/1 after checking it.

        Raises
        ------
        ValueError
            If it is not a 1-D array of ``n`` zeros and ones.
        """
        x = np.array(solution)
        if x.ndim != 1 or x.shape[0] != self.n:
            raise ValueError(f"a HW/SW partition must be a vector of {self.n} zeros and ones, got shape {x.shape}")
        if x.dtype.kind not in "biu" or not np.all((x == 0) | (x == 1)):
            raise ValueError("a HW/SW partition must hold only 0 (hardware) and 1 (software)")
        return x.astype(np.int64)

    def objective(self, solution: Any) -> int:
        """Hardware cost ``H(x) = sum_u h_u (1 - x_u)`` (equation 1)."""
        x = self.check_solution(solution)
        return int(self.hardware @ (1 - x))

    def software_cost(self, solution: Any) -> int:
        """``S(x) = sum_u s_u x_u`` (equation 2)."""
        x = self.check_solution(solution)
        return int(self.software @ x)

    def communication_cost(self, solution: Any) -> int:
        """``C(x) = sum_{(u, v) in E} c_uv |x_u - x_v|`` (equation 3)."""
        x = self.check_solution(solution)
        return int(self.communication @ np.abs(x[self.edges[:, 0]] - x[self.edges[:, 1]]))

    def load(self, solution: Any) -> int:
        """``S(x) + C(x)``, the left-hand side of constraint (4)."""
        return self.software_cost(solution) + self.communication_cost(solution)

    def feasible(self, solution: Any) -> bool:
        """Whether ``S(x) + C(x) <= R`` (constraint 4)."""
        return self.load(solution) <= self.limit

    def random_solution(self, rng: np.random.Generator) -> np.ndarray:
        """Each task in software or hardware with probability 1/2."""
        return rng.integers(0, 2, size=self.n).astype(np.int64)

    def apply_move(self, solution: Any, index: int) -> np.ndarray:
        """The partition with both tasks of move ``index`` flipped."""
        x = self.check_solution(solution)
        i, j = pair_from_index(self.n, index)
        x[i] ^= 1
        x[j] ^= 1
        return x

    def restart(self, rng: np.random.Generator) -> np.ndarray:
        """All tasks in hardware, then two random tasks flipped (section 3.4).

        The all-hardware partition is feasible (``S = C = 0 <= R``) and is a
        neighbour of the result, so after a restart a feasible move exists.
        """
        x = np.zeros(self.n, dtype=np.int64)
        x[rng.choice(self.n, size=2, replace=False)] = 1
        return x

    def state(self, solution: Any) -> _HWSWState:
        return _HWSWState(self, self.check_solution(solution))


class _HWSWState(NeighbourhoodState):
    """Current partition, its ``H`` and ``S + C``, and the per-task flip changes ``dh``, ``dl``."""

    kernel = "tabu_hwsw"
    block_moves = _BLOCK_MOVES

    def __init__(self, problem: HWSWPartitioning, x: np.ndarray):
        self.problem = problem
        self.reset(x)

    def reset(self, solution: np.ndarray) -> None:
        pb = self.problem
        self._x = np.array(solution, dtype=np.int64)
        self.value = pb.objective(self._x)
        self.load = pb.load(self._x)
        self._dh = np.empty(pb.n, dtype=np.int64)
        self._dl = np.empty(pb.n, dtype=np.int64)
        self._update(np.arange(pb.n))

    def _update(self, nodes: np.ndarray) -> None:
        """Recompute ``dh`` and ``dl`` of ``nodes`` from ``x``."""
        pb, x = self.problem, self._x
        u = np.unique(nodes)
        start, count = pb._adj_ptr[u].astype(np.int64), np.diff(pb._adj_ptr)[u]
        seg = np.repeat(np.arange(u.size), count)
        e = np.arange(seg.size) - np.repeat(np.cumsum(count) - count, count) + np.repeat(start, count)
        g = np.zeros(u.size, dtype=np.int64)
        np.add.at(g, seg, pb._adj_cost[e] * (1 - 2 * (x[pb._adj_node[e]] != x[u][seg])))
        self._dl[u] = pb.software[u] * (1 - 2 * x[u]) + g
        self._dh[u] = pb.hardware[u] * (2 * x[u] - 1)

    def _edge_cost(self, i: int, j: int) -> int:
        pb = self.problem
        lo, hi = pb._adj_ptr[i], pb._adj_ptr[i + 1]
        k = lo + int(np.searchsorted(pb._adj_node[lo:hi], j))
        return int(pb._adj_cost[k]) if k < hi and pb._adj_node[k] == j else 0

    @property
    def solution(self) -> np.ndarray:
        return self._x.copy()

    def deltas(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        pb = self.problem
        dh, dl = self._dh, self._dl
        i, j = pair_block(pb.n, lo, hi)
        delta = dh[i] + dh[j]
        dload = dl[i] + dl[j]
        # Edges (i, j): their cut state does not change, but dl[i] and dl[j] both counted it.
        e0, e1 = np.searchsorted(pb._edge_move, [lo, hi])
        if e1 > e0:
            u, v = pb._edge_lo[e0:e1], pb._edge_hi[e0:e1]
            cut = self._x[u] != self._x[v]
            dload[pb._edge_move[e0:e1] - lo] -= 2 * pb._edge_cost[e0:e1] * (1 - 2 * cut)
        return delta, dload <= pb.limit - self.load

    def apply(self, index: int, delta: int) -> None:
        pb = self.problem
        i, j = pair_from_index(pb.n, index)
        x = self._x
        c = self._edge_cost(i, j)
        self.load += int(self._dl[i] + self._dl[j]) - 2 * c * (1 - 2 * int(x[i] != x[j]))
        self.value += int(delta)
        x[i] ^= 1
        x[j] ^= 1
        ptr = pb._adj_ptr
        self._update(np.concatenate([[i, j], pb._adj_node[ptr[i] : ptr[i + 1]], pb._adj_node[ptr[j] : ptr[j + 1]]]))

    # -- device ----------------------------------------------------------------
    def device_arrays(self) -> list[tuple[np.ndarray, bool]]:
        pb = self.problem
        return [(self._x.astype(np.int32), True), (self._dh, True), (self._dl, True), (pb.software, False),
                (pb.hardware, False), (pb._adj_ptr, False), (pb._adj_node, False), (pb._adj_cost, False),
                (np.array([pb.limit - self.load], dtype=np.int64), True)]
