"""hpu: hybrid CPU + OpenCL execution of divide-and-conquer algorithms.

The work is split between a CPU thread pool and an OpenCL device with the HPU
model of López-Ortiz, Salinger and Suderman, "Toward a Generic Hybrid CPU-GPU
Parallelization of Divide-and-Conquer Algorithms" (IJNC 4(1), 2014),
calibrated on the machine at hand by ``python -m hpu.calibrate``.

Layout: :mod:`hpu.core` is the runtime, model, split search, hybrid driver
and trace, and knows no workload; :mod:`hpu.dc` is the breadth-first
transformer for any D&C spec (paper section 4); :mod:`hpu.sorting` and
:mod:`hpu.tabu` are workloads built on the core.

Names are imported lazily: ``from hpu import Profile, advanced_split`` needs
numpy and scipy only, not OpenCL.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

__version__ = "0.1.0"

#: Public name -> module that defines it (imported on first access).
_EXPORTS = {
    "CostCurves": "hpu.core.costs",
    "Profile": "hpu.core.profile",
    "ProfileError": "hpu.core.costs",
    "reference_profile": "hpu.core.profile",
    "Recurrence": "hpu.core.model",
    "Split": "hpu.core.model",
    "advanced_split": "hpu.core.model",
    "basic_split": "hpu.core.model",
    "DeviceFailure": "hpu.core.hybrid",
    "Trace": "hpu.core.trace",
    "TraceEvent": "hpu.core.trace",
    "DeviceInfo": "hpu.core.runtime",
    "NoDeviceError": "hpu.core.runtime",
    "Runtime": "hpu.core.runtime",
    "RuntimeClosedError": "hpu.core.runtime",
    "default_runtime": "hpu.core.runtime",
    "list_devices": "hpu.core.runtime",
    "select_device": "hpu.core.runtime",
    "set_default_runtime": "hpu.core.runtime",
    "using_runtime": "hpu.core.runtime",
    "DCSpec": "hpu.dc.spec",
    "Plan": "hpu.dc.spec",
    "execute": "hpu.dc.executor",
    "array_sum_spec": "hpu.arraysum",
    "mergesort_spec": "hpu.sorting.paper",
    "fast_split": "hpu.sorting.costs",
    "hybrid_mergesort": "hpu.sorting.mergesort",
    "sort": "hpu.sorting.api",
    "argsort": "hpu.sorting.api",
    "sort_by_key": "hpu.sorting.api",
    "PipelineOptions": "hpu.sorting.pipeline",
}

__all__ = sorted(_EXPORTS)
_IMPORTING = threading.RLock()


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'hpu' has no attribute {name!r}") from None
    # One thread at a time: hpu.sorting's package imports its api, which imports its mergesort, while a first
    # hpu.hybrid_mergesort imports the mergesort module itself; two threads importing both at once took Python's
    # module locks in opposite orders (its deadlock detection failed both calls).
    with _IMPORTING:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
