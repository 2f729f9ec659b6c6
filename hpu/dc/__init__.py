"""The breadth-first divide-and-conquer transformer and its hybrid executor (López-Ortiz et al. 2014, section 4).

A :class:`~hpu.dc.spec.DCSpec` describes any regular array D&C algorithm by
its combine (and base-case) snippets; :meth:`~hpu.dc.spec.DCSpec.plan` turns
it into level kernels, and :func:`~hpu.dc.executor.execute` runs a plan under
the paper's splits through the core's hybrid driver.  No algorithm lives
here: the paper's mergesort and array sum are specs of :mod:`hpu.sorting.paper`
and :mod:`hpu.arraysum`.
"""

from .executor import STRATEGIES, execute
from .spec import DCSpec, Level, Plan

__all__ = ["STRATEGIES", "DCSpec", "Level", "Plan", "execute"]
