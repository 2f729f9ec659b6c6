"""Hybrid mergesort (paper, section 6).

:func:`hybrid_mergesort` sorts a 1-D array with the breadth-first mergesort
of paper algorithm 7, split between the CPU thread pool and the OpenCL
device by the HPU model (basic split, paper 5.1; advanced split, paper 5.2
and algorithm 8), on the device in the interleaved layout of paper 6.3.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .dc import CL_TYPES, mergesort_spec
from .device import Runtime
from .executor import STRATEGIES, Trace, execute
from .model import Split, advanced_split, basic_split

log = logging.getLogger("hpu")

__all__ = ["hybrid_mergesort", "as_sortable"]

_SPEC = mergesort_spec()


def as_sortable(a: Any) -> np.ndarray:
    """Validate and convert sort input to a native-byte-order 1-D array (no copy when possible).

    Raises
    ------
    TypeError
        Object, complex, structured, bool, string or otherwise unsupported
        dtypes (supported: int32, uint32, int64, uint64, float32, float64),
        or input that ``numpy.asarray`` cannot convert.
    ValueError
        Input that is not one-dimensional.
    """
    try:
        arr = np.asarray(a)
    except Exception as e:
        raise TypeError(f"cannot convert input of type {type(a).__name__} to an array: {e}") from None
    if arr.dtype.kind not in "iuf" or arr.dtype.newbyteorder("=") not in CL_TYPES:
        supported = ", ".join(str(d) for d in CL_TYPES)
        raise TypeError(f"unsupported dtype {arr.dtype} for hybrid_mergesort; supported: {supported} "
                        "(convert with .astype first)")
    if arr.ndim != 1:
        raise ValueError(f"hybrid_mergesort sorts 1-D arrays; got shape {arr.shape}")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


MODES = ("paper",)


def hybrid_mergesort(a: Any, *, strategy: str = "advanced", mode: str = "paper", alpha: float | None = None,
                     transfer_level: int | None = None, runtime: Runtime | None = None,
                     return_trace: bool = False, on_device_error: str = "fallback"
                     ) -> np.ndarray | tuple[np.ndarray, Trace]:
    """Sort a 1-D array on the CPU and the OpenCL device at once (paper, section 6).

    Parameters
    ----------
    a : array_like, shape (n,)
        int32, uint32, int64, uint64, float32 or float64.  Never modified
        (also when non-contiguous or read-only).
    strategy : {"advanced", "basic", "gpu", "cpu"}
        Work division (paper section 5): ``"advanced"`` (default; CPU share
        ``alpha`` and device share run concurrently, one transfer each way
        at level ``transfer_level``), ``"basic"`` (device levels below
        ``transfer_level``, CPU above), ``"gpu"`` or ``"cpu"`` only.  In
        CPU-only mode, or for float64 on a device without fp64, every
        strategy runs as ``"cpu"``.
    alpha : float, optional
        CPU fraction of the subproblems at the transfer level, in [0, 1]
        (``"advanced"``); default: the model's choice (paper 5.2.1).
    transfer_level : int, optional
        Level at which the device share returns, 0 (root) to ``depth =
        ceil(log2 n)``; default: the model's ``ceil(y)``.
    runtime : Runtime, optional
        Device, thread pool and profile; default: a new ``Runtime()`` for
        this call (closed afterwards).
    return_trace : bool
        Also return the :class:`~hpu.executor.Trace`.
    on_device_error : {"fallback", "raise"}
        On a device failure, finish on the CPU with a logged warning, or raise.

    Returns
    -------
    sorted : numpy.ndarray, shape (n,), same dtype
        A new array equal to ``np.sort(a, kind="stable")``: stable, NaNs
        last, -0.0 and +0.0 in input order.
    trace : Trace
        Only with ``return_trace=True``.

    Raises
    ------
    TypeError
        Unsupported dtype or unconvertible input.
    ValueError
        Non-1-D input, unknown strategy, alpha outside [0, 1], transfer level
        outside ``[0, depth]``.
    hpu.executor.DeviceFailure
        With ``on_device_error="raise"`` when the device fails.

    Notes
    -----
    Lengths that are not powers of two are padded (paper section 6,
    footnote 4) with values that sort after every element (the dtype's
    maximum or NaN; merges are stable, so pads stay last).
    """
    arr = as_sortable(a)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if alpha is not None and not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
    n = arr.shape[0]
    if n <= 1:
        out = arr.copy()
        return (out, Trace("cpu", 1.0, 0, 0, n)) if return_trace else out
    own = runtime is None
    rt = Runtime() if own else runtime
    try:
        plan = _SPEC.plan(n, arr.dtype)
        if transfer_level is not None and not 0 <= int(transfer_level) <= plan.depth:
            raise ValueError(f"transfer_level must lie in [0, {plan.depth}] for n={n}, got {transfer_level}")
        if strategy != "cpu" and not (rt.has_device and rt.supports(arr.dtype)):
            log.info("no usable OpenCL device for %s; sorting on the CPU", arr.dtype)
            strategy = "cpu"
        split = _choose(strategy, plan.padded_n, arr.dtype.itemsize, rt, alpha)
        y = transfer_level if transfer_level is not None else (split.transfer_level if split else None)
        a_cpu = alpha if alpha is not None else (split.alpha if split else 0.0)
        work, trace = execute(plan, arr, rt, strategy=strategy, alpha=float(a_cpu), transfer_level=y,
                              on_device_error=on_device_error, split=split)
    finally:
        if own:
            rt.close()
    out = work if plan.padded_n == n else work[:n].copy()
    return (out, trace) if return_trace else out


def _choose(strategy: str, padded_n: int, itemsize: int, rt: Runtime, alpha: float | None) -> Split | None:
    rec = _SPEC.recurrence
    data_bytes = padded_n * itemsize
    if strategy == "basic":
        return basic_split(rec, padded_n, rt.profile, data_bytes=data_bytes)
    if strategy == "advanced":
        return advanced_split(rec, padded_n, rt.profile, data_bytes=data_bytes, alpha=alpha)
    return None
