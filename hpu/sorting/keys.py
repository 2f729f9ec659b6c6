"""numpy's sort order of every numeric dtype as unsigned integer keys, and (key, position) packing.

numpy's order (``numpy.sort``, ``numpy.argsort``): bools and integers by
value; floats by value with -0.0 equal to +0.0 and every NaN after +inf, all
NaNs equal to each other; datetime64 and timedelta64 by value with NaT last
(numpy >= 1.18).  :func:`to_unsigned` maps an array of any of these
dtypes to unsigned integers of the same width whose plain ``<`` is that
order: ``k[i] < k[j]`` exactly when ``a[i]`` sorts before ``a[j]``, and
``k[i] == k[j]`` exactly when numpy holds them equal.  For floats the map is
not one-to-one (the two zeros, and all NaNs, get one key each), so it serves
argsort; the sorted values themselves are gathered from the input
(``a[perm]``), which keeps every bit.

:func:`pack` puts a key and its position in one unsigned integer,
``key << bits(m - 1) | position`` (and, for many rows, the row number above
the key), so that an ordinary sort of the packed integers, stable or not
since they are all distinct, yields the stable argsort (a radix-style
"key-index" packing; e.g. Satish, Harris and Garland, "Designing efficient
sorting algorithms for manycore GPUs", IPDPS 2009, sort key-index pairs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SORT_DTYPES", "check_sort_dtype", "key_bits", "pack", "packed_bits", "time_from_unsigned", "to_unsigned",
           "unpack_positions"]

#: dtype kinds hpu sorts: bool, signed and unsigned integers, floats, datetime64 ('M') and timedelta64 ('m').
SORT_DTYPES = "biufMm"

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
#: The canonical (positive, quiet) NaN's bits per float width: every NaN becomes this one key.
_QUIET_NAN = {2: 0x7E00, 4: 0x7FC00000, 8: 0x7FF8000000000000}


def check_sort_dtype(dtype: np.dtype, what: str = "input") -> np.dtype:
    """``dtype`` if hpu can sort it (:data:`SORT_DTYPES`, native byte order or not), else ``TypeError``.

    Raises
    ------
    TypeError
        Complex, object, string, structured and other dtypes; the message
        names ``what`` and the supported kinds.
    """
    dtype = np.dtype(dtype)
    if dtype.kind not in SORT_DTYPES or dtype.fields is not None or dtype.itemsize not in _UINT:
        raise TypeError(f"unsupported dtype {dtype} for {what}; hpu sorts bool, integer, float (16, 32 and 64 bits), "
                        "datetime64 and timedelta64 arrays")
    return dtype


def key_bits(dtype: np.dtype) -> int:
    """Width in bits of :func:`to_unsigned`'s keys for ``dtype`` (its item size times 8)."""
    return 8 * check_sort_dtype(dtype).itemsize


def to_unsigned(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Order-preserving unsigned keys of ``a`` (module docstring); ``a`` is not modified.

    Parameters
    ----------
    a : numpy.ndarray
        Any shape; a dtype of :data:`SORT_DTYPES` in either byte order.
    out : numpy.ndarray, optional
        Destination of ``a``'s shape and the unsigned dtype below (a new
        array by default).

    Returns
    -------
    numpy.ndarray
        Same shape; uint8, uint16, uint32 or uint64 (``a``'s item size).

    Raises
    ------
    TypeError
        Unsupported dtype.

    Notes
    -----
    Signed integers: the sign bit flipped.  Floats (IEEE 754 binary16/32/64):
    negative values have all bits inverted and the others the sign bit set
    (the classic float radix-sort map, ``bits ^ (-(bits >> s) | sign)``),
    then -0.0 takes +0.0's key and every NaN the positive quiet NaN's.
    datetime64/timedelta64: the int64 value with the sign bit flipped, minus
    1 modulo 2**64, which sends NaT (the int64 minimum) to the largest key and
    keeps every other order.
    """
    dtype = check_sort_dtype(a.dtype)
    a = a.astype(dtype.newbyteorder("="), copy=False)
    size = dtype.itemsize
    u = _UINT[size]
    sign = u(1) << u(8 * size - 1)
    bits = a.view(u)
    out = np.empty(a.shape, u) if out is None else out
    if dtype.kind in "bu":
        np.copyto(out, bits)
    elif dtype.kind == "i":
        np.bitwise_xor(bits, sign, out=out)
    elif dtype.kind in "Mm":
        np.bitwise_xor(bits, sign, out=out)
        out -= u(1)  # wraps NaT (0 after the flip) to 2**64 - 1
    else:
        np.right_shift(bits, u(8 * size - 1), out=out)
        np.negative(out, out=out)  # all ones for negative values, 0 for the others
        out |= sign
        out ^= bits
        out[out == ~sign] = sign  # -0.0 -> +0.0
        out[np.isnan(a)] = _QUIET_NAN[size] | sign
    return out


def time_from_unsigned(keys: np.ndarray, dtype: Any) -> np.ndarray:
    """Undo :func:`to_unsigned` for datetime64/timedelta64 keys, in place: ``keys`` viewed as ``dtype``.

    Parameters
    ----------
    keys : numpy.ndarray of uint64
        Keys of :func:`to_unsigned` (overwritten).
    dtype : numpy dtype
        A native datetime64 or timedelta64 dtype (any unit).

    Returns
    -------
    numpy.ndarray of ``dtype``, ``keys``' shape (a view of ``keys``)
    """
    keys += np.uint64(1)  # NaT's key 2**64 - 1 wraps to 0 ...
    keys ^= np.uint64(1 << 63)  # ... and the sign bit flips back
    return keys.view(dtype)


def packed_bits(key_width: int, m: int, rows: int = 1) -> int:
    """Bits a packed (row, key, position) integer needs: ``bits(rows - 1) + key_width + bits(m - 1)``."""
    return (max(rows - 1, 0)).bit_length() + key_width + (max(m - 1, 0)).bit_length()


def pack(keys: np.ndarray, key_width: int, out: np.ndarray, m: int | None = None, col0: int = 0,
         row0: int | None = None) -> np.ndarray:
    """Pack a block of unsigned keys with their column (and row) numbers into one integer each, into ``out``.

    ``out[r, j] = (row0 + r) << (key_width + c) | keys[r, j] << c | (col0 + j)``
    with ``c = bits(m - 1)``; the row term only when ``row0`` is given.
    Sorting the packed integers of a row (all distinct) and keeping their low
    ``c`` bits gives the row's stable argsort; with row numbers, sorting all
    of them at once gives every row's.

    Parameters
    ----------
    keys : numpy.ndarray, shape (rows, k)
        Unsigned keys of :func:`to_unsigned`, at most ``key_width`` bits:
        columns ``col0`` to ``col0 + k`` of rows ``row0`` to ``row0 + rows``.
    key_width : int
        Bits of a key (8, 16, 32 or 64).
    out : numpy.ndarray, shape (rows, k)
        uint32 or uint64, with room for :func:`packed_bits` bits (the caller
        checks).
    m : int, optional
        Length of a whole row (default ``k``).
    col0, row0 : int
        Number of the block's first column and first row.

    Returns
    -------
    numpy.ndarray
        ``out``.
    """
    rows, k = keys.shape
    t = out.dtype.type
    c = (max((k if m is None else m) - 1, 0)).bit_length()
    np.left_shift(keys, t(c), out=out, dtype=out.dtype, casting="unsafe")
    out |= np.arange(col0, col0 + k, dtype=out.dtype)
    if row0 is not None and row0 + rows > 1:
        out |= (np.arange(row0, row0 + rows, dtype=out.dtype) << t(key_width + c))[:, None]
    return out


def unpack_positions(packed: np.ndarray, m: int, out: np.ndarray | None = None) -> np.ndarray:
    """The positions (low ``bits(m - 1)`` bits) of packed integers, as int64 (into ``out`` if given)."""
    mask = packed.dtype.type((1 << (max(m - 1, 0)).bit_length()) - 1)
    return np.bitwise_and(packed, mask, out=out, dtype=np.int64, casting="unsafe")
