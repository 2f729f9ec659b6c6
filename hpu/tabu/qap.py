"""The quadratic assignment problem (QAP) with the 2-swap neighbourhood.

Find a permutation ``p`` of ``0..n-1`` minimising
``f(p) = sum_i sum_j A[i, j] B[p(i), p(j)]`` (QAPLIB's convention: ``A`` the
flow matrix, ``B`` the distance matrix, ``p(i)`` the location of facility
``i``).  A move swaps the locations of two facilities ``r < s``; there are
``n (n - 1) / 2`` moves and each is evaluated in O(n) (Taillard, "Robust
taboo search for the quadratic assignment problem", Parallel Computing 17,
1991; Luong, Melab and Talbi, IEEE TC 62(1), 2013, section 6.1).  The host
evaluates every move afresh; the device keeps Taillard's matrix of move
values and updates it after each move, O(1) per move that shares no
facility with the one taken (``kernels_cl/tabu_qap.cl``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .pairs import all_pairs, packed_pairs, pair_block, pair_from_index
from .problem import NeighbourhoodState, TabuProblem

__all__ = ["QAP", "QAPSolution"]

_INT32_SAFE = 2**31 - 1
#: Entries below this the device holds as int: its O(1) update adds four of them before widening to long.
_INT32_ENTRY = 2**29
_BLOCK_ELEMENTS = 1 << 16  # elements (moves x n) per temporary of the CPU evaluation (stays in cache)
_BATCH_STATES = 64  # states a stack of batch_arrays' matrix products


def _tokens(path: Path) -> list[tuple[str, int]]:
    """Tokens of a QAPLIB file (whitespace or commas separate them) with their line numbers."""
    try:
        text = path.read_text()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not a text file ({e})") from None
    out = []
    for line_no, line in enumerate(text.splitlines(), 1):
        out.extend((tok, line_no) for tok in line.replace(",", " ").split())
    return out


def _integer(path: Path, token: str, line: int, what: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise ValueError(f"{path}, line {line}: {what}: expected an integer, found {token!r}") from None


def _size(path: Path, tokens: list[tuple[str, int]]) -> int:
    if not tokens:
        raise ValueError(f"{path}: empty file (expected the size n first)")
    tok, line = tokens[0]
    n = _integer(path, tok, line, "the size n")
    if n < 1:
        raise ValueError(f"{path}, line {line}: the size n must be a positive integer, found {n}")
    return n


@dataclasses.dataclass(frozen=True)
class QAPSolution:
    """A solution read from a QAPLIB ``.sln`` file by :meth:`QAP.read_solution`.

    Attributes
    ----------
    permutation : numpy.ndarray of int64, shape (n,)
        0-based permutation (facility ``i`` at location ``permutation[i]``)
        whose objective is :attr:`value`.
    value : int
        The objective value stated in the file.
    one_based : bool
        Whether the file numbers from 1 (QAPLIB's usual convention) or from 0.
    inverse : bool
        Whether the file lists the inverse assignment (location -> facility),
        as some QAPLIB files do; :attr:`permutation` is then the inverse of
        the listed one.
    """

    permutation: np.ndarray
    value: int
    one_based: bool
    inverse: bool


class QAP(TabuProblem):
    """A QAP instance: ``f(p) = sum_ij A[i, j] B[p(i), p(j)]``, 2-swap moves.

    Parameters
    ----------
    flow : array_like of int, shape (n, n)
        ``A``.
    distance : array_like of int, shape (n, n)
        ``B``.
    name : str
        Instance name (e.g. ``"tai30a"``).
    tabu_attribute : {"facility-location", "move"}, optional
        What the tabu status is kept for.  ``"facility-location"`` (default):
        Taillard's robust tabu search (Taillard, "Robust taboo search for the
        quadratic assignment problem", Parallel Computing 17, 1991): taking
        the swap of facilities ``r`` and ``s`` makes the pairs
        (r, its location) and (s, its location) tabu, and a swap is tabu when
        it would put *both* facilities back at locations they held within the
        tenure.  ``"move"``: the swap's index is tabu.

    Raises
    ------
    ValueError
        If the matrices are not square (ragged nested sequences included),
        of one size ``n >= 2``, of integers, or so large that an objective
        could overflow int64; an unknown ``tabu_attribute``.

    Notes
    -----
    When both matrices are symmetric the delta evaluation uses the symmetric
    shortcut (half the terms); otherwise the general asymmetric formula.
    """

    kind = "qap"
    TABU_ATTRIBUTES = ("facility-location", "move")

    def __init__(self, flow: Any, distance: Any, *, name: str = "", tabu_attribute: str | None = None):
        self._set_tabu_attribute(tabu_attribute)
        a = self._matrix(flow, "flow")
        b = self._matrix(distance, "distance")
        if a.shape != b.shape:
            raise ValueError(f"flow and distance matrices differ in shape: {a.shape} vs {b.shape}")
        n = a.shape[0]
        if n < 2:
            raise ValueError(f"a QAP needs n >= 2 facilities, got n = {n}")
        amax, bmax = (max(abs(int(m.min())), abs(int(m.max()))) for m in (a, b))  # Python ints: no wrap-around
        # A delta's factors are differences of four entries: up to 2 max|entry| each with entries >= 0, 4 with mixed
        # signs (16 n amax bmax summed over a row against 4 n amax bmax; twice that for both of a move's rows).
        spread = 4 if min(int(a.min()), int(b.min())) >= 0 else 16
        if max(4 * n * n, 2 * spread * n) * amax * bmax >= 2**62:
            raise ValueError("matrix entries too large: objectives and deltas could overflow int64")
        self.n = n
        self.name = name
        self.flow = a
        self.distance = b
        self.flow.flags.writeable = False
        self.distance.flags.writeable = False
        self.symmetric = bool(np.array_equal(a, a.T) and np.array_equal(b, b.T))
        self._max_entry = max(amax, bmax)
        self._delta_bound = spread * n * amax * bmax  # bound on any partial sum of a delta

    @staticmethod
    def _matrix(m: Any, what: str) -> np.ndarray:
        try:
            arr = np.array(m)
        except ValueError:  # numpy: "setting an array element with a sequence ... inhomogeneous shape"
            raise ValueError(f"{what} matrix must be square (n x n), got ragged nested sequences") from None
        if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
            raise ValueError(f"{what} matrix must be square (n x n), got shape {arr.shape}")
        if arr.dtype.kind not in "iu":
            if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
                raise ValueError(f"{what} matrix must hold integers")
        if arr.size and (float(arr.max()) >= 2.0**63 or float(arr.min()) < -(2.0**63)):
            raise ValueError(f"{what} matrix entries must fit int64")
        return arr.astype(np.int64)

    def __repr__(self) -> str:
        sym = "symmetric" if self.symmetric else "asymmetric"
        return f"QAP({self.name or 'unnamed'}, n={self.n}, {sym})"

    @property
    def cache_key(self) -> str:
        return f"n{self.n}-{'sym' if self.symmetric else 'asym'}-{'i32' if self._max_entry < _INT32_ENTRY else 'i64'}"

    # -- files -----------------------------------------------------------------
    @classmethod
    def from_qaplib(cls, path: str | os.PathLike, **kw: Any) -> QAP:
        """Read a QAPLIB instance (``.dat``): ``n``, then ``A`` (n x n), then ``B`` (n x n).

        Tokens are separated by whitespace (commas are accepted too); line
        breaks carry no meaning.  Keywords go to :class:`QAP` (e.g.
        ``tabu_attribute="move"``).

        Raises
        ------
        FileNotFoundError
            If the file does not exist.
        ValueError
            Malformed file: a non-integer token, a size that is not a positive
            integer, too few or too many entries.  The message names the file
            and the line.
        """
        path = Path(path)
        tokens = _tokens(path)
        n = _size(path, tokens)
        need = 2 * n * n
        body = tokens[1:]
        if len(body) < need:
            last = tokens[-1][1]
            raise ValueError(
                f"{path}: expected 2 n^2 = {need} matrix entries after n = {n}, found {len(body)} "
                f"(the file ends at line {last})"
            )
        if len(body) > need:
            tok, line = body[need]
            raise ValueError(f"{path}, line {line}: unexpected token {tok!r} after the 2 n^2 = {need} matrix entries")
        values = np.empty(need, dtype=np.int64)
        for k, (tok, line) in enumerate(body):
            m, rest = divmod(k, n * n)
            what = f"{'flow' if m == 0 else 'distance'} matrix entry ({rest // n}, {rest % n})"
            values[k] = _integer(path, tok, line, what)
        if n < 2:
            raise ValueError(f"{path}: a QAP needs n >= 2 facilities, got n = {n}")
        return cls(values[: n * n].reshape(n, n), values[n * n :].reshape(n, n), name=path.stem, **kw)

    def read_solution(self, path: str | os.PathLike) -> QAPSolution:
        """Read a QAPLIB solution (``.sln``): ``n``, the objective value, then the permutation.

        The permutation may be 1-based (QAPLIB's convention) or 0-based, and
        may list the assignment or its inverse (several QAPLIB files, e.g.
        nug30 and kra30a, list the inverse); the orientation whose objective
        equals the stated value is returned.

        Returns
        -------
        QAPSolution

        Raises
        ------
        FileNotFoundError
            If the file does not exist.
        ValueError
            Malformed file (non-integer token, wrong size, wrong count, not a
            permutation of 1..n or 0..n-1), or neither orientation of the
            permutation has the stated objective.  The message names the
            file (and line).
        """
        path = Path(path)
        tokens = _tokens(path)
        n = _size(path, tokens)
        if n != self.n:
            raise ValueError(f"{path}, line {tokens[0][1]}: solution of size {n}, but the instance has n = {self.n}")
        if len(tokens) < 2:
            raise ValueError(f"{path}: missing the objective value after n")
        value = _integer(path, tokens[1][0], tokens[1][1], "the objective value")
        body = tokens[2:]
        if len(body) != n:
            where = f"line {body[n][1]}: " if len(body) > n else ""
            raise ValueError(f"{path}: {where}expected a permutation of n = {n} entries, found {len(body)}")
        perm = np.array([_integer(path, t, line, f"permutation entry {k}") for k, (t, line) in enumerate(body)])
        if np.array_equal(np.sort(perm), np.arange(1, n + 1)):
            one_based, perm = True, perm - 1
        elif np.array_equal(np.sort(perm), np.arange(n)):
            one_based = False
        else:
            raise ValueError(f"{path}: the listed assignment is not a permutation of 1..{n} (nor of 0..{n - 1})")
        inv = np.argsort(perm)
        direct, inverse = self.objective(perm), self.objective(inv)
        if direct == value:
            return QAPSolution(perm, value, one_based, False)
        if inverse == value:
            return QAPSolution(inv, value, one_based, True)
        raise ValueError(
            f"{path}: stated objective {value}, but the permutation gives {direct} and its inverse {inverse}"
        )

    # -- solutions -----------------------------------------------------------
    def check_solution(self, solution: Any) -> np.ndarray:
        """Return ``solution`` as a new int64 array after checking it is a permutation of ``0..n-1``.

        Raises
        ------
        ValueError
            If it is not a 1-D permutation of ``0..n-1``.
        """
        p = np.array(solution)
        if p.ndim != 1 or p.shape[0] != self.n:
            raise ValueError(f"a QAP solution must be a permutation of 0..{self.n - 1}, got shape {p.shape}")
        if p.dtype.kind not in "iu" or not np.array_equal(np.sort(p), np.arange(self.n)):
            raise ValueError(f"solution is not a permutation of 0..{self.n - 1}: {p.tolist()}")
        return p.astype(np.int64)

    def objective(self, solution: Any) -> int:
        """``sum_ij A[i, j] B[p(i), p(j)]`` (exact, int64).

        Raises
        ------
        ValueError
            If ``solution`` is not a permutation of ``0..n-1``.
        """
        p = self.check_solution(solution)
        return int((self.flow * self.distance[np.ix_(p, p)]).sum())

    def random_solution(self, rng: np.random.Generator) -> np.ndarray:
        """A uniformly random permutation."""
        return rng.permutation(self.n).astype(np.int64)

    def apply_move(self, solution: Any, index: int) -> np.ndarray:
        """The permutation with the locations of facilities ``r, s`` of move ``index`` swapped."""
        p = self.check_solution(solution)
        r, s = pair_from_index(self.n, index)
        p[r], p[s] = p[s], p[r]
        return p

    def state(self, solution: Any) -> _QAPState:
        return _QAPState(self, self.check_solution(solution))


class _QAPState(NeighbourhoodState):
    """Current permutation and the permuted distance matrix ``Bp[i, j] = B[p(i), p(j)]``."""

    kernel = "tabu_qap"

    def __init__(self, problem: QAP, perm: np.ndarray):
        self.problem = problem
        # Work in int32 when no partial sum of a delta can overflow it (much faster numpy products).
        self._dtype = np.int32 if problem._delta_bound < _INT32_SAFE else np.int64
        self._a = problem.flow.astype(self._dtype)
        self._at = None if problem.symmetric else np.ascontiguousarray(self._a.T)
        self._device_dtype = np.int32 if problem._max_entry < _INT32_ENTRY else np.int64
        self.block_moves = max(1, _BLOCK_ELEMENTS // problem.n)
        self.reset(perm)

    def reset(self, solution: np.ndarray) -> None:
        self._perm = np.array(solution, dtype=np.int64)
        p = self._perm
        bp = self.problem.distance[np.ix_(p, p)]
        self._bp = bp.astype(self._dtype)
        self._bpt = None if self.problem.symmetric else np.ascontiguousarray(self._bp.T)
        self.value = int((self.problem.flow * bp).sum())  # QAP.objective of the checked p, from its gather

    @property
    def solution(self) -> np.ndarray:
        return self._perm.copy()

    def deltas(self, lo: int, hi: int) -> tuple[np.ndarray, None]:
        r, s = pair_block(self.problem.n, lo, hi)
        a, bp = self._a, self._bp
        # Row part of Taillard's formula: sum_k (a_rk - a_sk)(b'_sk - b'_rk), k = r and s included.
        row = np.einsum("ij,ij->i", a[r] - a[s], bp[s] - bp[r])
        col = None
        if self._at is not None:  # the column part of the asymmetric formula: the same of A^T and Bp^T
            at, bpt = self._at, self._bpt
            col = np.einsum("ij,ij->i", at[r] - at[s], bpt[s] - bpt[r])
        return self._taillard(r, s, row, col, self._bp, self._bpt), None

    def all_deltas(self) -> np.ndarray:
        """Every move's delta, ``deltas(0, num_moves)``, with the sums over k as matrix products.

        Taillard's matrix of move values (Taillard, "Robust taboo search for
        the quadratic assignment problem", Parallel Computing 17, 1991,
        section 3), which the device keeps and updates.  With ``C = A Bp^T``
        the row part of his formula is
        ``C[r, s] - C[r, r] - C[s, s] + C[s, r]`` (and with ``A^T Bp`` the
        column part of the asymmetric one), one product of n x n matrices
        in float64 where every sum is exact there (``4 n max|A| max|B| <
        2^53``), else :meth:`deltas`.

        Returns
        -------
        numpy.ndarray of int64, shape (num_moves,)
        """
        return self._all_deltas([self])[0]

    def _all_deltas(self, states: Sequence[_QAPState]) -> np.ndarray:
        """:meth:`all_deltas` of each of ``states`` (of this problem), at once: shape (len(states), num_moves)."""
        if len(states) > _BATCH_STATES:  # bounded temporaries: a few n x n float64 matrices a state
            return np.concatenate([self._all_deltas(states[k: k + _BATCH_STATES])
                                   for k in range(0, len(states), _BATCH_STATES)])
        n, moves = self.problem.n, self.problem.num_moves
        if self.problem._delta_bound >= 2**53:
            return np.stack([st.deltas(0, moves)[0].astype(np.int64) for st in states])
        r, s = all_pairs(n)
        bp = np.stack([st._bp for st in states])
        bpt = None if self._at is None else np.stack([st._bpt for st in states])
        a, bpf = self._a.astype(np.float64), bp.astype(np.float64)

        def part(c: np.ndarray) -> np.ndarray:
            c = np.rint(c).astype(np.int64)
            return c[..., r, s] - c[..., r, r] - c[..., s, s] + c[..., s, r]

        row = part(a @ np.swapaxes(bpf, -1, -2))
        col = None if self._at is None else part(a.T @ bpf)
        return self._taillard(r, s, row, col, bp, bpt).astype(np.int64)

    def _taillard(self, r: np.ndarray, s: np.ndarray, row: np.ndarray, col: np.ndarray | None, bp: np.ndarray,
                  bpt: np.ndarray | None) -> np.ndarray:
        """Delta(p, r, s) of Taillard (1991) from the sums over every k of its row part and (asymmetric) column part:
        each less its k = r and k = s terms, doubled when A and B are symmetric, plus the terms outside the sums.
        ``bp`` (and ``bpt``, its transpose) is one permuted distance matrix or a stack of them (the result then
        one row a matrix)."""
        a = self._a
        d = row - ((a[r, r] - a[s, r]) * (bp[..., s, r] - bp[..., r, r])
                   + (a[r, s] - a[s, s]) * (bp[..., s, s] - bp[..., r, s]))
        if col is None:
            d *= 2
        else:
            at = self._at
            d += col
            d -= ((at[r, r] - at[s, r]) * (bpt[..., s, r] - bpt[..., r, r])
                  + (at[r, s] - at[s, s]) * (bpt[..., s, s] - bpt[..., r, s]))
            d += (a[r, s] - a[s, r]) * (bp[..., s, r] - bp[..., r, s])
        d += (a[r, r] - a[s, s]) * (bp[..., s, s] - bp[..., r, r])
        return d

    def _attribute_count(self) -> int:
        """``n * n`` (facility, location) pairs, row-major."""
        return self.problem.n ** 2

    def _attribute_tabu(self, lo: int, hi: int, tabu_until: np.ndarray, iteration: int) -> np.ndarray:
        """Facility-location: swap (r, s) is tabu when r's entry at p(s) and s's at p(r) are both tabu."""
        n, p = self.problem.n, self._perm
        r, s = pair_block(n, lo, hi)
        t = tabu_until.reshape(n, n)
        return (t[r, p[s]] > iteration) & (t[s, p[r]] > iteration)

    def _mark_attributes(self, index: int, tabu_until: np.ndarray, until: int) -> None:
        """Facility-location: (r, p(r)) and (s, p(s)) before the swap."""
        n, p = self.problem.n, self._perm
        r, s = pair_from_index(n, index)
        tabu_until[r * n + p[r]] = tabu_until[s * n + p[s]] = until

    def apply(self, index: int, delta: int) -> None:
        r, s = pair_from_index(self.problem.n, index)
        p, bp = self._perm, self._bp
        p[r], p[s] = p[s], p[r]
        bp[[r, s]] = bp[[s, r]]
        bp[:, [r, s]] = bp[:, [s, r]]
        if self._bpt is not None:
            bpt = self._bpt
            bpt[[r, s]] = bpt[[s, r]]
            bpt[:, [r, s]] = bpt[:, [s, r]]
        self.value += int(delta)

    # -- device ----------------------------------------------------------------
    def defines(self) -> dict[str, Any]:
        return {"MAT_T": "int" if self._device_dtype == np.int32 else "long", "SYMMETRIC": int(self.problem.symmetric)}

    def group_defines(self, work_group_size: int, local_bytes: int, groups: int = 1) -> dict[str, Any]:
        """``GROUP_LOCAL_D``, the move values (as int) and the permutation in local memory for a block, where every
        value fits in int (``4 n max|A| max|B| < 2^31``) and both fit in ``local_bytes``; in a grid of ``groups``
        work-groups (``kernels_cl/tabu_grid.cl``) each work-group's share of the values and a list of up to 2n
        shared moves, with its own copy of Bp (``GRID_SCRATCH_BYTES``)."""
        moves, n = self.problem.num_moves, self.problem.n
        own = -(-moves // groups) + (2 * n if groups > 1 else 0)
        if self.problem._delta_bound >= _INT32_SAFE or 4 * (own + n) > local_bytes:
            return {}
        defines = {"GROUP_LOCAL_D": 1, "NUM_MOVES": moves, "FACILITIES": n}
        if groups > 1:
            defines.update(GRID_GROUPS=groups, GRID_SCRATCH_BYTES=-(-n * n * np.dtype(self._device_dtype).itemsize
                                                                     // 256) * 256)
        return defines

    def device_arrays(self) -> list[tuple[np.ndarray, bool]]:
        return self.batch_arrays(())[0]

    def batch_arrays(self, batch: Sequence[NeighbourhoodState]) -> list[list[tuple[np.ndarray, bool]]]:
        """:meth:`device_arrays` of this state and each of ``batch``'s, the move values of all in stacks of matrix
        products (:meth:`all_deltas`, up to 64 states a stack).

        Raises
        ------
        ValueError
            A state of ``batch`` belongs to another problem.
        """
        states, dt = [self, *batch], self._device_dtype
        if any(st.problem is not self.problem for st in states):
            raise ValueError("batch_arrays takes states of one problem")
        flow, pairs = np.ascontiguousarray(self.problem.flow, dtype=dt), packed_pairs(self.problem.n)
        return [[(flow, False), (np.ascontiguousarray(st._bp, dtype=dt), True), (st._perm.astype(np.int32), True),
                 (d, True), (pairs, False)]  # Taillard's move values, pairs
                for st, d in zip(states, self._all_deltas(states))]
