"""Exact mapping between a move index and the pair ``(i, j)`` it swaps or flips.

The 2-element neighbourhoods of this package (QAP 2-swap, HW/SW 2-flip) have
one move per pair ``0 <= i < j < n``, numbered row by row through the strict
upper triangle: ``(0, 1), (0, 2), ..., (0, n-1), (1, 2), ...``.  Luong,
Melab and Talbi, "GPU Computing for Parallel Local Search Metaheuristic
Algorithms", IEEE TC 62(1), 2013, section 4.6.1,
propositions 1 and 2, give the two-to-one and one-to-two transformations.
Proposition 2 takes a square root; evaluated in floating point it is wrong
for large ``n`` (in float32 already for a few thousand elements), so here
the root only gives a first guess that integer arithmetic then corrects.
The OpenCL version, with the same correction, is ``kernels_cl/tabu_pairs.cl``.
"""

from __future__ import annotations

import functools
import math

from typing import Any

import numpy as np

_INT64_MAX = 2**63 - 1

__all__ = ["index_array", "triangle", "num_pairs", "pair_index", "pair_from_index", "pair_block", "all_pairs",
           "packed_pairs"]


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an integer, got {n!r}")
    n = int(n)
    if n < 2:
        raise ValueError(f"a 2-element neighbourhood needs n >= 2 elements, got n = {n}")
    return n


def triangle(q: Any) -> Any:
    """``q (q + 1) / 2`` (``C(q + 1, 2)``) of integers ``q >= -1`` (a Python int, or an int64 array or scalar), with
    no product past the result: exact in int64 wherever the result fits (``q (q + 1)`` itself overflows for ``q``
    near ``2**31.5``)."""
    return np.where(q & 1, q * ((q + 1) >> 1), (q >> 1) * (q + 1)) if isinstance(q, (np.ndarray, np.integer)) \
        else q * (q + 1) // 2


def _check_int64(n: int, total: int, what: str) -> None:
    if total > _INT64_MAX:
        raise ValueError(f"{what} of n = {n}: its n (n - 1) / 2 move indices do not fit int64")


def num_pairs(n: int) -> int:
    """Number of moves ``n (n - 1) / 2`` of a 2-element neighbourhood.

    Raises
    ------
    ValueError
        If ``n < 2``.
    """
    n = _check_n(n)
    return n * (n - 1) // 2


def index_array(name: str, value: Any) -> np.ndarray:
    """``value``, integers (Python or numpy, any shape, not bools), as int64.

    Raises
    ------
    TypeError
        Other values: a float was truncated to an index, a bool taken as one.
    """
    a = np.asarray(value)
    if a.dtype.kind not in "iu" and a.size:
        raise TypeError(f"{name} must be integers, got {a.dtype} {value!r:.60}")
    return a.astype(np.int64)


def pair_index(n: int, i, j) -> np.ndarray | int:
    """Move index of the pair ``(i, j)``, ``i < j`` (Luong et al. 2013, proposition 1).

    ``f(i, j) = i (n - 1) - i (i + 1) / 2 + j - 1``.

    Parameters
    ----------
    n : int
        Number of elements (>= 2).
    i, j : int or array_like of int
        Pairs with ``0 <= i < j < n`` (broadcast together).

    Returns
    -------
    int or numpy.ndarray of int64
        Indices in ``[0, n (n - 1) / 2)``.

    Raises
    ------
    ValueError
        If a pair is not ``0 <= i < j < n``; arrays for an ``n`` whose indices do not fit int64 (scalars are exact
        for every ``n``).
    """
    n = _check_n(n)
    scalar = np.ndim(i) == 0 and np.ndim(j) == 0
    ii, jj = index_array("i", i), index_array("j", j)
    if np.any(ii < 0) or np.any(ii >= jj) or np.any(jj >= n):
        raise ValueError(f"pairs must satisfy 0 <= i < j < n = {n}")
    if scalar:
        ii, jj = int(ii), int(jj)
    else:
        _check_int64(n, n * (n - 1) // 2, "pair_index of arrays")
    # i (n - 1 - i) + (i - 1) i / 2 + j - 1: terms >= 0, none past the result (i (n - 1) alone may overflow int64)
    return ii * (n - 1 - ii) + triangle(ii - 1) + jj - 1


def pair_from_index(n: int, index) -> tuple:
    """The pair ``(i, j)`` of a move index (Luong et al. 2013, proposition 2, made exact).

    With ``k = N - 1 - index`` (``N = n (n - 1) / 2``) counted from the last
    move, ``i = n - 2 - q`` where ``q`` is the largest integer with
    ``q (q + 1) / 2 <= k``.  The square root ``q ~ (sqrt(8 k + 1) - 1) / 2``
    in float64 is only a guess; integer comparisons correct it, so the result
    is exact for every ``n`` whose indices fit in int64 (a single index uses
    the exact :func:`math.isqrt`).

    Parameters
    ----------
    n : int
        Number of elements (>= 2).
    index : int or array_like of int
        Move indices in ``[0, N)``.

    Returns
    -------
    (i, j) : tuple of int or of numpy.ndarray of int64
        ``0 <= i < j < n``.

    Raises
    ------
    ValueError
        If an index is outside ``[0, N)``; arrays for an ``n`` whose indices do not fit int64.
    """
    n = _check_n(n)
    total = n * (n - 1) // 2
    if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        idx = int(index)
        if not 0 <= idx < total:
            raise ValueError(f"move index out of range [0, {total}) for n = {n}")
        q = (math.isqrt(8 * (total - 1 - idx) + 1) - 1) // 2  # exact integer square root
        i = n - 2 - q
        return i, idx - (i * (n - 1) - i * (i + 1) // 2) + 1
    _check_int64(n, total, "pair_from_index of arrays")
    idx = index_array("index", index)
    if np.any(idx < 0) or np.any(idx >= total):
        raise ValueError(f"move index out of range [0, {total}) for n = {n}")
    k = total - 1 - idx
    q = np.minimum((np.sqrt(8.0 * k + 1.0) - 1.0) // 2, n - 2).astype(np.int64)  # i = n - 2 - q >= 0
    while True:  # the float guess is off by at most one; correct it exactly
        high = triangle(q) > k
        low = triangle(q + 1) <= k
        if not (high.any() or low.any()):
            break
        q = q - high + low
    # row i = n - 2 - q holds the k (counted from the last move) in [T(q), T(q + 1)), its last move at j = n - 1
    return n - 2 - q, n - 1 - (k - triangle(q))


def pair_block(n: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of the contiguous move range ``[lo, hi)``, fast.

    Equivalent to ``pair_from_index(n, np.arange(lo, hi))`` but built from the
    row structure (one square root per range, not per move), which is what the
    vectorised CPU evaluation needs for every chunk of moves.

    Returns
    -------
    (i, j) : tuple of numpy.ndarray of int64, each of shape ``(hi - lo,)``

    Raises
    ------
    ValueError
        If ``not 0 <= lo <= hi <= n (n - 1) / 2``, or ``hi > 2**63 - 1`` (int64 indices).
    """
    n = _check_n(n)
    total = n * (n - 1) // 2
    lo, hi = int(lo), int(hi)
    if not 0 <= lo <= hi <= total:
        raise ValueError(f"move range [{lo}, {hi}) is not inside [0, {total})")
    if hi > _INT64_MAX:
        raise ValueError(f"move range [{lo}, {hi}) passes the int64 indices")
    if lo == hi:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty.copy()
    first, _ = pair_from_index(n, lo)
    last, _ = pair_from_index(n, hi - 1)
    rows = np.arange(first, last + 1, dtype=np.int64)
    offset = rows * (n - 1 - rows) + triangle(rows - 1)  # i (n - 1) - T(i): row i holds [offset + i, offset + n - 1)
    counts = np.minimum(offset + n - 1, hi) - np.maximum(offset + rows, lo)
    i = np.repeat(rows, counts)
    j = np.arange(lo, hi, dtype=np.int64) - np.repeat(offset - 1, counts)
    return i, j


@functools.lru_cache(maxsize=16)
def all_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of every move, ``pair_block(n, 0, n (n - 1) / 2)``, made once per ``n`` (cached; read-only).

    Returns
    -------
    (i, j) : tuple of numpy.ndarray of int64, each of shape ``(n (n - 1) / 2,)``

    Raises
    ------
    ValueError
        If ``n < 2``.
    """
    n = _check_n(n)
    pairs = pair_block(n, 0, n * (n - 1) // 2)
    for a in pairs:
        a.flags.writeable = False
    return pairs


@functools.lru_cache(maxsize=16)
def packed_pairs(n: int) -> np.ndarray:
    """Every move's pair packed as ``i << 16 | j``, the table the device reads a move's pair from (``pairs`` in
    ``kernels_cl/tabu_qap.cl``) in place of Luong et al.'s proposition 2 per move and iteration.

    Made once per ``n`` (cached; read-only).

    Returns
    -------
    numpy.ndarray of uint32, shape ``(n (n - 1) / 2,)``

    Raises
    ------
    ValueError
        If ``n < 2`` or ``n >= 2**16`` (``j`` takes 16 bits).
    """
    n = _check_n(n)
    if n >= 1 << 16:
        raise ValueError(f"packed pairs need n < 65536 elements, got n = {n}")
    i, j = all_pairs(n)
    out = (i.astype(np.uint32) << 16) | j.astype(np.uint32)
    out.flags.writeable = False
    return out
