"""The sort workload: ``hybrid_mergesort`` in the paper's mode and the fast pipeline (López-Ortiz et al. 2014, section 6),
and numpy's signatures on it (``sort``, ``argsort``, ``sort_by_key``: every numeric dtype, any axis, key-value).

Built on :mod:`hpu.core` as every workload is (see its docstring for the
contract): :mod:`~hpu.sorting.costs` (cost curves and the fast-mode split),
:mod:`~hpu.sorting.calibrate` (their measurement), :mod:`~hpu.sorting.pipeline`
(the device share and CPU share of one call, run by the core's driver),
:mod:`~hpu.sorting.device` (the device sorter), :mod:`~hpu.sorting.cpu` (the
parallel CPU sort), :mod:`~hpu.sorting.paper` (the paper's mergesort spec),
:mod:`~hpu.sorting.keys` (numpy's order as unsigned keys, key-index packing)
and :mod:`~hpu.sorting.api` (the numpy-style functions).
"""

from .api import argsort, packs_on_device, rows_on_device, sort, sort_by_key
from .costs import FAST_COSTS, fast_cost, fast_split, mergesort_closed_forms
from .mergesort import as_sortable, hybrid_mergesort, planned_split, planned_strategy
from .paper import mergesort_spec
from .pipeline import PipelineOptions, fast_keyed_sort, fast_row_sort, fast_sort

__all__ = ["FAST_COSTS", "PipelineOptions", "argsort", "as_sortable", "fast_cost", "fast_keyed_sort", "fast_row_sort",
           "fast_sort", "fast_split", "hybrid_mergesort", "mergesort_closed_forms", "mergesort_spec", "packs_on_device",
           "planned_split", "planned_strategy", "rows_on_device", "sort", "sort_by_key"]
