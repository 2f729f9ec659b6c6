"""The paper's breadth-first mergesort as a divide-and-conquer spec (López-Ortiz et al. 2014, section 6).

``hybrid_mergesort(mode="paper")`` runs :func:`mergesort_spec` through the
transformer and executor of :mod:`hpu.dc` under the basic or advanced split.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dc.spec import DCSpec

__all__ = ["mergesort_spec"]

#: A strict weak order that puts NaNs last, like numpy.sort.
_LESS = """
#if IS_FLOAT
#define LESS(x, y) ((x) < (y) || (isnan(y) && !isnan(x)))
#else
#define LESS(x, y) ((x) < (y))
#endif
"""

_MERGE_CL = """
    /* Stable merge of two sorted children (paper, algorithm 7, one work-item per merge). */
    ulong i = 0, j2 = 0;
    T x = IN(0, 0), y = IN(1, 0);
    for (ulong o = 0; o < S; ++o) {
        if (j2 >= CS || (i < CS && !LESS(y, x))) {
            OUT(o) = x;
            if (++i < CS) x = IN(0, i);
        } else {
            OUT(o) = y;
            if (++j2 < CS) y = IN(1, j2);
        }
    }
"""


def _merge_rows(seg: np.ndarray) -> None:
    # Each row holds two sorted runs; numpy's stable sort (timsort) detects
    # them and merges in linear time, releasing the GIL.
    seg.sort(axis=1, kind="stable")


def _sort_pad(dt: np.dtype) -> Any:
    # Pads sort last: NaN for floats (after every real NaN, since merges are
    # stable and pads sit at the end), the largest value for integers.
    return np.nan if dt.kind == "f" else np.iinfo(dt).max


def mergesort_spec() -> DCSpec:
    """Mergesort as a :class:`DCSpec` (paper, algorithms 6 and 7; 6.3 layout).

    Combine: stable merge of two sorted halves, one work-item per merge; NaNs
    last and ties kept in input order, as ``np.sort(kind="stable")``.

    Returns
    -------
    hpu.DCSpec
        Named ``"mergesort"``, branching 2, leaves of one element, combine
        cost ``n`` (:attr:`~hpu.DCSpec.recurrence` ``T(n) = 2 T(n/2) + n``),
        padded with the dtype's maximum (integers) or NaN (floats), which
        sort after every element.  Its :meth:`~hpu.DCSpec.plan` takes
        int32, uint32, int64, uint64, float32 and float64 in native byte
        order (:data:`hpu.core.kernels.CL_TYPES`; float64 on the device
        needs fp64) and raises ``TypeError`` for any other dtype (bool, 8-
        and 16-bit, float16, datetime64, complex, ...), and ``ValueError``
        for ``n < 1``.  :func:`hpu.execute` of a plan returns the
        ``plan.padded_n`` elements sorted, pads last (slice ``[:n]``);
        :func:`hpu.hybrid_mergesort` with ``mode="paper"`` does this for a
        1-D array of any byte order.
    """
    return DCSpec(
        name="mergesort",
        preamble=_LESS,
        combine_cl=_MERGE_CL,
        combine_np=_merge_rows,
        branching=2,
        combine_exponent=1.0,
        pad=_sort_pad,
    )
