"""The sort's calibration: its combine step for gamma, and the measured cost curves of fast mode.

:data:`MERGE_BENCHMARK` is the merge the paper times for ``gamma`` (López-Ortiz
et al. 2014, section 6.4, fig. 6); :func:`measure_costs` measures fast mode's
steps over sizes, the curves :func:`hpu.sorting.costs.fast_cost` interpolates.
``python -m hpu.calibrate`` passes both to :func:`hpu.core.calibrate.calibrate`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.calibrate import CombineBenchmark, median_time
from ..core.costs import CostCurves
from ..core.runtime import Runtime
from ..core.util import check_int
from .cpu import multiway_merge, native_partition
from .keyrange import choose_splitters, partition
from .paper import mergesort_spec
from .pipeline import PipelineOptions, fast_sort

__all__ = ["DEFAULT_MAX_LOG", "MERGE_BENCHMARK", "QUICK_MAX_LOG", "curve_sizes", "measure_costs", "sorted_runs"]


def sorted_runs(m: int, rng: np.random.Generator) -> np.ndarray:
    """``2 m`` int32 keys in ``[0, 4m)`` as two sorted runs of ``m``: one merge's input."""
    a = rng.integers(0, 4 * m, size=2 * m).astype(np.int32)
    a[:m].sort()
    a[m:].sort()
    return a


#: The paper's gamma benchmark: one work-item merging two sorted runs vs numpy's merge on one thread.
MERGE_BENCHMARK = CombineBenchmark(mergesort_spec(), sorted_runs)


#: The largest size of the cost curves by default, as log2 of the keys (a quick calibration: :data:`QUICK_MAX_LOG`).
DEFAULT_MAX_LOG = 26
QUICK_MAX_LOG = 20


def curve_sizes(quick: bool = False, max_log: int | None = None) -> list[int]:
    """The sizes :func:`measure_costs` measures: ``2**16`` keys (``2**14`` quick) times every power of 4 up to
    ``2**max_log``, and ``2**max_log`` itself for an odd ``max_log``.

    ``max_log`` defaults to :data:`DEFAULT_MAX_LOG` (:data:`QUICK_MAX_LOG` quick).

    Raises
    ------
    ValueError
        ``max_log`` not an integer, below the smallest size + 2 or above 31 (int32 keys: 8 GiB).
    """
    lo = 14 if quick else 16
    if max_log is None:
        max_log = QUICK_MAX_LOG if quick else DEFAULT_MAX_LOG
    top = check_int("max_log", max_log, lo + 2, 32)
    return [1 << k for k in sorted(set(range(lo, top + 1, 2)) | {top})]


def measure_costs(rt: Runtime, quick: bool = False, bar: Any = None, *, max_log: int | None = None) -> CostCurves:
    """Fast-mode step costs over sizes (int32 keys): the curves of :data:`hpu.sorting.costs.FAST_COSTS`.

    ``cpu_sort`` is the CPU's sample sort where the compiled partition was built (else PSRS), ``cpu_sort_psrs``
    PSRS beside it (only where the sample sort exists): the pipeline runs the faster at each size
    (:func:`hpu.sorting.costs.cpu_sort_method`).
    ``partition`` and ``partition4`` are the key-range split's partition
    (:func:`hpu.sorting.keyrange.partition`) at the median and at the
    quartiles (two and four buckets); ``kept_pinned``
    and ``kept_plain`` are device-only sorts while every earlier result is
    kept alive, into freshly pinned or into plain memory.

    Each cost is the median of calls made after an idle pause
    (:func:`hpu.core.calibrate.median_time` with ``idle=True``): the model
    predicts a typical call, not the best of a burst.  ``device_sort`` is the
    device's busy time in a device-only sort and ``transfer`` the rest of
    its wall time.

    Parameters
    ----------
    rt : Runtime
    quick : bool
        Sizes 2^14 to 2^20 (else 2^16 to 2^26), two repeats (else five).
    bar : tqdm, optional
        Progress bar: its total grows by the number of sizes, one step each.
    max_log : int, optional
        The largest size, ``2**max_log`` keys (:func:`curve_sizes`).  Past it
        :func:`hpu.sorting.costs.fast_cost` extrapolates, and a host-to-host
        device sort can grow faster than the last measured segment: calibrate
        up to the largest arrays you sort.  A size holds about ten copies of
        its keys in host memory at once (the kept-result curves keep all
        their results alive); over 20 where the OpenCL device is the CPU
        (PoCL), whose buffers are host memory too.

    Raises
    ------
    RuntimeError
        The device-only sort gave a wrong result.
    ValueError
        ``max_log`` out of range (:func:`curve_sizes`).
    """
    sizes = curve_sizes(quick, max_log)
    repeats = 2 if quick else 5
    if bar is not None:
        bar.total += len(sizes)
        bar.refresh()
    rng = np.random.default_rng(4)
    series: dict[str, list[float]] = {k: [] for k in ("cpu_sort", "merge2", "merge16", "partition", "partition4")}
    if rt.threads > 1:
        series["cpu_sort_1"] = []
    if native_partition(np.int32):
        series["cpu_sort_psrs"] = []
    if rt.has_device:
        series.update(device_sort=[], transfer=[], kept_pinned=[], kept_plain=[])
    for n in sizes:
        if bar is not None:
            bar.set_postfix_str(f"sort costs of 2^{n.bit_length() - 1} keys")
        a = rng.integers(0, 2 * n, n).astype(np.int32)
        _measure_size(rt, a, repeats, series)
        if bar is not None:
            bar.update()
    return CostCurves.measured(sizes, series)


#: One thread's sort as ``cpu_sort_1`` measures it: numpy's (PSRS on one thread), whatever an earlier profile of
#: the runtime would choose.
NUMPY_SORT = PipelineOptions(cpu_sort="psrs")


def _measure_size(rt: Runtime, a: np.ndarray, repeats: int, series: dict[str, list[float]]) -> None:
    def timed(fn: Any) -> float:
        return median_time(fn, repeats=repeats, idle=True)[0]

    out = np.empty_like(a)
    for name, method in (("cpu_sort", "sample" if "cpu_sort_psrs" in series else "psrs"), ("cpu_sort_psrs", "psrs")):
        if name in series:
            opts = PipelineOptions(cpu_sort=method)
            series[name].append(timed(lambda: fast_sort(a, rt, strategy="cpu", alpha=1.0, transfer_level=0,
                                                         options=opts)))
    if rt.threads > 1:
        series["cpu_sort_1"].append(timed(lambda: fast_sort(a, rt, strategy="cpu", alpha=1.0, transfer_level=0,
                                                             cpu_threads=1, options=NUMPY_SORT)))
    for k in (2, 16):
        parts = np.array_split(np.concatenate([np.sort(c) for c in np.array_split(a, k)]), k)
        series[f"merge{k}"].append(timed(lambda parts=parts: multiway_merge(parts, out, rt.pool, rt.threads)))
    for name, fractions in (("partition", [0.5]), ("partition4", [0.25, 0.5, 0.75])):
        keys, positions = choose_splitters(a, fractions)
        series[name].append(timed(lambda: partition(a, keys, positions, out, rt)))
    if rt.has_device:
        res, _ = fast_sort(a, rt, strategy="gpu", alpha=0.0, transfer_level=0, on_device_error="raise")
        if not np.array_equal(res, np.sort(a)):
            raise RuntimeError("fast-mode device sort gave a wrong result; the device is unreliable")
        del res

        def device_run() -> Any:
            return fast_sort(a, rt, strategy="gpu", alpha=0.0, transfer_level=0, on_device_error="raise")[1]

        wall, typical = median_time(device_run, repeats=repeats, idle=True)
        typical.resolve()
        sort_s = sum(e.duration for e in typical.events if e.unit == "device")
        series["device_sort"].append(sort_s)
        series["transfer"].append(max(typical.wall - sort_s, 1e-9))
        for name, memory in (("kept_pinned", "pin"), ("kept_plain", "plain")):
            kept: list[Any] = []  # every result stays alive: each call finds no free pinned block
            opts = PipelineOptions(result_memory=memory)
            series[name].append(timed(lambda: kept.append(fast_sort(a, rt, strategy="gpu", alpha=0.0,
                                                                        transfer_level=0, on_device_error="raise",
                                                                        options=opts)[0])))
            del kept
