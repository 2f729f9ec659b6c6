"""Exact mapping between a move index and the k-subset of positions it flips (Hamming-k neighbourhoods).

A Hamming-k neighbourhood of a binary vector of length ``n`` has one move
per k-subset ``c_1 < c_2 < ... < c_k`` of positions: ``C(n, k)`` moves.
Luong, Melab and Talbi, "GPU Computing for Parallel Local Search
Metaheuristic Algorithms", IEEE TC 62(1), 2013,
number them so that one GPU thread handles one move: for ``k = 1`` the
position itself (section 4.3) and for ``k = 2`` the pairs row by row through
the upper triangle (section 4.6.1, propositions 1 and 2, as
:mod:`hpu.tabu.pairs`): both are the lexicographic order of the subsets, the
order :func:`itertools.combinations` lists them in.  The paper's mapping for
``k = 3`` is in its appendix A.3, which our copy lacks; triples are numbered
lexicographically too, extending proposition 1.

Ranking uses the combinatorial number system: with ``a_t = n - 1 - c_t``,
``index = C(n, k) - 1 - sum_t C(a_t, k + 1 - t)``.  Unranking takes, for
``t = 1 .. k``, the largest ``a_t`` with ``C(a_t, k + 1 - t)`` at most what
is left; a floating-point root gives a first guess (a square root for
``k + 1 - t = 2``, a cube root for 3) that integer comparisons then correct,
so the mapping is exact wherever the indices fit in int64 (the scalar path
uses Python integers and is exact for every ``n``).  ``kernels_cl/tabu_ppp.cl``
holds the OpenCL version, with the same correction.
"""

from __future__ import annotations

import math

import numpy as np

from .pairs import index_array, pair_block, triangle

__all__ = ["num_subsets", "subset_index", "subset_from_index", "subset_block"]

MAX_K = 3  #: Largest subset size supported (the paper's Hamming-1, -2 and -3 neighbourhoods).


def _check(n: int, k: int) -> tuple[int, int]:
    for what, v in (("n", n), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{what} must be an integer, got {v!r}")
    n, k = int(n), int(k)
    if not 1 <= k <= MAX_K:
        raise ValueError(f"the subset size k must be 1, 2 or 3, got k = {k}")
    if n < k:
        raise ValueError(f"a Hamming-{k} neighbourhood needs n >= {k} positions, got n = {n}")
    return n, k


def num_subsets(n: int, k: int) -> int:
    """Number of moves ``C(n, k)`` of the Hamming-``k`` neighbourhood of a length-``n`` vector.

    Raises
    ------
    TypeError
        If ``n`` or ``k`` is not an integer.
    ValueError
        If ``k`` is not 1, 2 or 3, or ``n < k``.
    """
    n, k = _check(n, k)
    return math.comb(n, k)


#: From this ``n`` on, ``a (a - 1) (a - 2)`` may overflow int64 long before ``C(a, 3)`` does.
_WIDE_N = 2**21 - 2


def _comb_array(a: np.ndarray, r: int, wide: bool = False) -> np.ndarray:
    """``C(a, r)`` elementwise for int64 ``a >= 0`` (0 when ``a < r``), ``r`` in 1..3.

    ``wide`` (needed once ``a + 1`` may reach ``2**21``): divide each factor before multiplying it, so that no
    intermediate exceeds ``C(a, r)`` and the result is exact wherever it fits in int64.
    """
    if r == 1:
        return a.copy()
    if not wide:
        return a * (a - 1) // 2 if r == 2 else a * (a - 1) * (a - 2) // 6
    pair = triangle(a - 1)  # C(a, 2)
    if r == 2:
        return pair
    return np.where(pair % 3 == 0, (pair // 3) * (a - 2), pair * ((a - 2) // 3))  # 3 divides C(a, 2) or a - 2


def subset_index(n: int, *elements) -> np.ndarray | int:
    """Move index of the subset ``c_1 < ... < c_k`` (``k = len(elements)``), lexicographic order.

    ``index = C(n, k) - 1 - sum_t C(n - 1 - c_t, k + 1 - t)``; for ``k = 2``
    this is proposition 1 of Luong et al. 2013, section 4.6.1.

    Parameters
    ----------
    n : int
        Length of the vector (``>= k``).
    *elements : int or array_like of int
        ``k`` positions (1 to 3 of them), broadcast together, with
        ``0 <= c_1 < ... < c_k < n``.

    Returns
    -------
    int or numpy.ndarray of int64
        Indices in ``[0, C(n, k))`` (an int when every element is a scalar).

    Raises
    ------
    ValueError
        If the positions are not strictly increasing inside ``[0, n)``, or ``k``
        is not 1, 2 or 3.
    """
    n, k = _check(n, len(elements))
    if all(np.ndim(e) == 0 for e in elements):
        c = [int(v) for v in index_array("positions", elements)]
        if c[0] < 0 or c[-1] >= n or any(a >= b for a, b in zip(c, c[1:])):
            raise ValueError(f"positions must satisfy 0 <= c_1 < ... < c_k < n = {n}, got {tuple(c)}")
        return math.comb(n, k) - 1 - sum(math.comb(n - 1 - ct, k - t) for t, ct in enumerate(c))
    c = np.broadcast_arrays(*(index_array("positions", e) for e in elements))
    bad = (c[0] < 0) | (c[-1] >= n)
    for a, b in zip(c, c[1:]):
        bad |= a >= b
    if np.any(bad):
        raise ValueError(f"positions must satisfy 0 <= c_1 < ... < c_k < n = {n}")
    out = np.full(c[0].shape, math.comb(n, k) - 1, dtype=np.int64)
    for t, ct in enumerate(c):
        out -= _comb_array(n - 1 - ct, k - t, n >= _WIDE_N)
    return out


def _largest_scalar(rest: int, r: int) -> int:
    """Largest ``a >= r - 1`` with ``C(a, r) <= rest`` (Python integers, exact)."""
    if r == 1:
        return rest
    if r == 2:
        a = (1 + math.isqrt(8 * rest + 1)) // 2  # exact: a (a - 1) / 2 <= rest < (a + 1) a / 2
    else:
        a = int(round((6 * rest) ** (1.0 / 3.0))) + 1  # guess, corrected below
        while math.comb(a, 3) > rest:
            a -= 1
        while math.comb(a + 1, 3) <= rest:
            a += 1
    return a


def _largest_array(rest: np.ndarray, r: int, wide: bool) -> np.ndarray:
    """Largest ``a`` with ``C(a, r) <= rest`` elementwise: a float root, corrected with int64 comparisons
    (``wide``: as :func:`_comb_array`)."""
    if r == 1:
        return rest.copy()
    root = np.sqrt(2.0 * rest) if r == 2 else np.cbrt(6.0 * rest)
    a = root.astype(np.int64) + 1
    while True:  # the guess is off by at most a few; step it to the exact value
        high = _comb_array(a, r, wide) > rest
        low = _comb_array(a + 1, r, wide) <= rest
        if not (high.any() or low.any()):
            return a
        a = a - high + low


def subset_from_index(n: int, k: int, index) -> tuple:
    """The subset ``(c_1, ..., c_k)`` of a move index (inverse of :func:`subset_index`), exact.

    For ``k = 2`` this is proposition 2 of Luong et al. 2013, section 4.6.1,
    with its square root corrected by integer comparisons (module docstring).

    Parameters
    ----------
    n : int
        Length of the vector (``>= k``).
    k : int
        Subset size: 1, 2 or 3.
    index : int or array_like of int
        Move indices in ``[0, C(n, k))``.

    Returns
    -------
    tuple of k ints, or of k numpy.ndarray of int64
        ``0 <= c_1 < ... < c_k < n``.

    Raises
    ------
    ValueError
        If an index is outside ``[0, C(n, k))``, or ``k`` or ``n`` is invalid.
    """
    n, k = _check(n, k)
    total = math.comb(n, k)
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        idx = int(index)
        if not 0 <= idx < total:
            raise ValueError(f"move index out of range [0, {total}) for n = {n}, k = {k}")
        rest, out = total - 1 - idx, []
        for t in range(k):
            a = _largest_scalar(rest, k - t)
            rest -= math.comb(a, k - t)
            out.append(n - 1 - a)
        return tuple(out)
    idx = index_array("index", index)
    if np.any(idx < 0) or np.any(idx >= total):
        raise ValueError(f"move index out of range [0, {total}) for n = {n}, k = {k}")
    rest, out, wide = total - 1 - idx, [], n >= _WIDE_N
    for t in range(k):
        a = _largest_array(rest, k - t, wide)
        rest = rest - _comb_array(a, k - t, wide)
        out.append(n - 1 - a)
    return tuple(out)


def subset_block(n: int, k: int, lo: int, hi: int) -> tuple[np.ndarray, ...]:
    """The subsets of the contiguous move range ``[lo, hi)`` (what a vectorised evaluation needs).

    Equal to ``subset_from_index(n, k, np.arange(lo, hi))``; for ``k = 2`` it
    is :func:`hpu.tabu.pair_block` (built from the row structure).

    Returns
    -------
    tuple of k numpy.ndarray of int64, each of shape ``(hi - lo,)``

    Raises
    ------
    ValueError
        If ``not 0 <= lo <= hi <= C(n, k)``, or ``k`` or ``n`` is invalid.
    """
    n, k = _check(n, k)
    total = math.comb(n, k)
    lo, hi = int(lo), int(hi)
    if not 0 <= lo <= hi <= total:
        raise ValueError(f"move range [{lo}, {hi}) is not inside [0, {total})")
    if k == 2:
        return pair_block(n, lo, hi)
    return subset_from_index(n, k, np.arange(lo, hi, dtype=np.int64))
