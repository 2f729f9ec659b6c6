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
    ``f(n) = 1``).  Pads with 0.
    """
    return DCSpec(
        name="array_sum",
        combine_cl="    OUT(0) = IN(0, 0) + IN(1, 0);\n",
        combine_np=_sum_rows,
        branching=2,
        combine_exponent=0.0,
        pad=lambda dt: 0,
    )
