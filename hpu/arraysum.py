"""The paper's divide-and-conquer array sum as a spec (López-Ortiz et al. 2014, algorithms 4 and 5).

A second, constant-time-combine example for the transformer of :mod:`hpu.dc`
(``f(n) = 1``), beside the mergesort of :mod:`hpu.sorting.paper`.
"""

from __future__ import annotations

import numpy as np

from .dc.spec import DCSpec

__all__ = ["array_sum_spec"]


def _sum_rows(seg: np.ndarray) -> None:
    cs = seg.shape[1] // 2
    seg[:, 0] += seg[:, cs]


def array_sum_spec() -> DCSpec:
    """Divide-and-conquer array sum (paper, algorithms 4 and 5).

    The sum of a segment is stored in its first element; combine adds the
    second child's first element to the first's (constant time, so
    ``f(n) = 1``: ``T(n) = 2 T(n/2) + 1``, paper section 4).  Pads with 0.

    Returns
    -------
    DCSpec
        ``name="array_sum"``, branching 2, leaf size 1, no base case,
        ``combine_exponent=0``.  Plan it with ``spec.plan(n, dtype)`` for a
        1-D array of ``n >= 1`` elements; :func:`hpu.execute` then returns
        the padded array whose element 0 is the sum.  Supported dtypes:
        int32, uint32, int64, uint64, float32 and float64 (float64 on the
        device needs ``cl_khr_fp64``); others raise TypeError
        in :meth:`DCSpec.plan`.  Integer sums wrap around on overflow, as
        numpy's and OpenCL C's do; float sums are added pairwise (tree
        order), so they may differ from ``numpy.sum`` in the last bits.
    """
    return DCSpec(
        name="array_sum",
        combine_cl="    OUT(0) = IN(0, 0) + IN(1, 0);\n",
        combine_np=_sum_rows,
        branching=2,
        combine_exponent=0.0,
        pad=lambda dt: 0,
    )
