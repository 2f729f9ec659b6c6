"""Hybrid mergesort (paper, section 6, and beyond).

:func:`hybrid_mergesort` sorts a 1-D array split between the CPU thread pool
and the OpenCL device by the HPU model.  Two modes:

``"fast"`` (default)
    leaf blocks sorted in work-group local memory and merge-path merges on
    the device, a parallel sort-and-multiway-merge on the CPU, pinned chunked
    transfers (:mod:`hpu.sorting.pipeline`); the split comes from
    :func:`hpu.sorting.costs.fast_split` (predicted time).
``"paper"``
    the breadth-first mergesort of paper algorithm 7 with one work-item per
    merge, the interleaved layout of paper 6.3, and the basic / advanced
    splits of paper 5.1 / 5.2 (:mod:`hpu.dc.executor`); for reproducing the
    paper's figures.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core.hybrid import check_on_device_error, check_split, check_strategy
from ..core.kernels import CL_TYPES
from ..core.model import Split, advanced_split, basic_split
from ..core.profile import Profile
from ..core.runtime import Runtime, check_runtime, resolve_runtime
from ..core.trace import Trace
from ..dc.executor import STRATEGIES, execute
from .costs import fast_split
from .paper import mergesort_spec
from .exchange import exchange_fits, exchange_sort
from .keyrange import check_shares, keyrange_sort
from .pipeline import DEFAULT_OPTIONS, PipelineOptions, fast_sort, max_device_elements

log = logging.getLogger("hpu")

__all__ = ["SORT_STRATEGIES", "hybrid_mergesort", "as_sortable", "planned_split", "planned_strategy"]

_SPEC = mergesort_spec()
#: Every ``strategy`` the sorts take: the paper's (:data:`hpu.dc.executor.STRATEGIES`), "auto" and fast mode's
#: splits across units: key ranges and the devices' exchange.
SORT_STRATEGIES = ("auto", *STRATEGIES, "keyrange", "exchange")


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


MODES = ("fast", "paper")


def hybrid_mergesort(a: Any, *, strategy: str = "auto", mode: str = "fast", alpha: float | None = None,
                     transfer_level: int | None = None, runtime: Runtime | None = None,
                     return_trace: bool = False, on_device_error: str = "fallback",
                     options: PipelineOptions | None = None,
                     shares: Sequence[float] | None = None) -> np.ndarray | tuple[np.ndarray, Trace]:
    """Sort a 1-D array on the CPU and the OpenCL device at once (paper, section 6).

    Parameters
    ----------
    a : array_like, shape (n,)
        int32, uint32, int64, uint64, float32 or float64.  Never modified
        (also when non-contiguous or read-only).
    strategy : {"auto", "advanced", "basic", "gpu", "cpu", "keyrange", "exchange"}
        Work division (paper section 5): ``"auto"`` (default: the fastest the
        model predicts in fast mode, ``"advanced"`` in paper mode),
        ``"advanced"`` (CPU share ``alpha`` and device share run
        concurrently, one transfer each way at level ``transfer_level``),
        ``"basic"`` (device levels below ``transfer_level``, CPU above),
        ``"gpu"`` or ``"cpu"`` only, or (fast mode, beyond the paper)
        ``"keyrange"``: a range of keys for the CPU and for each device of
        the runtime (:mod:`hpu.sorting.keyrange`; no final merge), or
        ``"exchange"``: every device of the runtime sorts a range of
        positions, then the devices trade key ranges and merge
        (:mod:`hpu.sorting.exchange`; the CPU only stages).  In fast mode a
        device share larger than the device memory the runtime may use
        (:attr:`hpu.Runtime.device_memory_bytes`) is sorted on the device
        in pieces by key range; in paper mode it is a device failure (see
        ``on_device_error``).  In CPU-only mode and for float64 on a
        device without fp64 every strategy runs as ``"cpu"``; in fast mode
        while the runtime has no calibrated profile
        (:attr:`hpu.Runtime.calibrated`; the device's speed is unknown, so
        ``"auto"`` never risks being slower than the CPU alone) ``"auto"``
        does, and a strategy or ``shares`` named by the caller still use
        the device.
    alpha : float, optional
        CPU fraction of the subproblems at the transfer level, in [0, 1]
        (``"advanced"``; ignored by ``"cpu"``, ``"gpu"`` and ``"basic"``);
        default: the model's choice (paper 5.2.1).
    transfer_level : int, optional
        Level at which the device share returns, 0 (root) to ``depth =
        ceil(log2 n)``; default: the model's choice (paper mode:
        ``ceil(y)``; fast mode: the device sorts ``2**transfer_level``
        segments, the CPU merges them).
    runtime : Runtime, optional
        Device, thread pool and profile; default :func:`hpu.default_runtime`
        (one per process, made on first use).  Any number of threads may
        sort on one runtime at once.
    return_trace : bool
        Also return the :class:`~hpu.core.trace.Trace`.
    on_device_error : {"fallback", "raise"}
        On a device failure, finish on the CPU with a logged warning, or raise.
    options : hpu.sorting.PipelineOptions, optional
        Fast mode's tuning knobs (staging piece size, wave sorting).
    shares : sequence of float, optional
        ``"keyrange"`` (implied when given) or ``"exchange"``: the fractions
        of the keys for the CPU, then each device of ``runtime.units``,
        summing to 1 (the CPU's 0 for ``"exchange"``); default: the model's
        (:func:`hpu.sorting.costs.keyrange_split`,
        :func:`~hpu.sorting.costs.exchange_split`), or ``alpha`` for the CPU
        and the rest divided as the model divides it (not with ``alpha``).

    Returns
    -------
    sorted : numpy.ndarray, shape (n,), ``a``'s dtype in the host's byte order
        A new array equal to ``np.sort(a, kind="stable")`` (whose keys keep
        a non-native byte order; :func:`hpu.sort` keeps it too): stable, NaNs
        last, -0.0 and +0.0 in input order.  In fast mode its memory comes
        from the runtime's recycled host pool (:mod:`hpu.core.hostmem`; pinned
        when the device alone sorts it) and returns there when the array is freed.
    trace : Trace
        Only with ``return_trace=True``.

    Raises
    ------
    TypeError
        Unsupported dtype or unconvertible input.
    ValueError
        Non-1-D input, unknown strategy, alpha outside [0, 1], transfer level
        outside ``[0, depth]``, bad ``shares`` (or with another strategy).
    hpu.DeviceFailure
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
    check_strategy(strategy, SORT_STRATEGIES)
    if shares is not None:
        if alpha is not None:
            raise ValueError("give alpha (the CPU's share) or shares (every unit's), not both")
        if strategy not in ("auto", "keyrange", "exchange"):
            raise ValueError(f"shares go with strategy='keyrange' or 'exchange', not {strategy!r}")
        strategy = "keyrange" if strategy == "auto" else strategy
    if strategy in ("keyrange", "exchange") and mode != "fast":
        raise ValueError(f"strategy={strategy!r} is a fast-mode strategy; the paper's mode splits by position")
    alpha, transfer_level = check_split(alpha, transfer_level)
    check_on_device_error(on_device_error)
    if options is not None and not isinstance(options, PipelineOptions):
        raise TypeError(f"options must be an hpu.PipelineOptions, got {type(options).__name__}")
    check_runtime(runtime)
    units = None  # the devices the shares name, read once (another thread's failed rebuild may drop one meanwhile)
    if shares is not None:  # on every path: the model's CPU fallback and n <= 1 included
        units = resolve_runtime(runtime).units
        s = check_shares(shares, len(units))
        if strategy == "exchange" and s[0] > 0:
            raise ValueError(f"an exchange sort gives the CPU no share (it stages the devices' copies), got {s[0]}")
    n = arr.shape[0]
    if n <= 1:
        if transfer_level not in (None, 0):
            raise ValueError(f"transfer_level must lie in [0, 0] for n={n}, got {transfer_level}")
        with runtime.call() if runtime is not None else contextlib.nullcontext():  # a closed one refuses it too
            out = arr.copy()
        return (out, Trace("cpu", 1.0, 0, 0, n)) if return_trace else out
    rt = resolve_runtime(runtime)
    with rt.call():
        if mode == "fast":
            return _fast(arr, rt, strategy, alpha, transfer_level, return_trace, on_device_error, options, shares,
                         rt.units if units is None else units)
        if strategy == "auto":
            strategy = "advanced"
        plan = _SPEC.plan(n, arr.dtype)
        if transfer_level is not None and not 0 <= int(transfer_level) <= plan.depth:
            raise ValueError(f"transfer_level must lie in [0, {plan.depth}] for n={n}, got {transfer_level}")
        if strategy != "cpu" and not (rt.has_device and rt.supports(arr.dtype)):
            log.info("no usable OpenCL device for %s; sorting on the CPU", arr.dtype)
            strategy = "cpu"
        split = _choose(strategy, plan.padded_n, arr.dtype.itemsize, rt, alpha)
        y = transfer_level if transfer_level is not None else (split.transfer_level if split else None)
        a_cpu = alpha if alpha is not None else (split.alpha if split else 0.0)
        # The trace holds the split only where it is what runs: the advanced split takes a forced alpha, no split a
        # forced transfer level
        ran = None if transfer_level is not None or (alpha is not None and strategy != "advanced") else split
        work, trace = execute(plan, arr, rt, strategy=strategy, alpha=float(a_cpu), transfer_level=y,
                              on_device_error=on_device_error, split=ran)
    out = work if plan.padded_n == n else work[:n].copy()
    return (out, trace) if return_trace else out


def _fast(arr: np.ndarray, rt: Runtime, strategy: str, alpha: float | None, transfer_level: int | None,
          return_trace: bool, on_device_error: str, options: PipelineOptions | None,
          shares: Sequence[float] | None, units: tuple[Runtime, ...]) -> np.ndarray | tuple[np.ndarray, Trace]:
    """Fast mode; ``units``: the devices the call plans for, read once (a device lost since fails its lease)."""
    n = arr.shape[0]
    if transfer_level is not None and not 0 <= int(transfer_level) <= max(0, int(np.ceil(np.log2(n)))):
        raise ValueError(f"transfer_level must lie in [0, ceil(log2 n)] for n={n}, got {transfer_level}")
    if strategy in ("cpu", "gpu", "basic"):
        alpha = None  # the advanced split's CPU share (paper 5.2); the others fix it, as in paper mode
    forced = alpha is not None or transfer_level is not None or shares is not None
    strategy, split, a_cpu, y, shares = _decide(n, arr.dtype, rt, strategy, alpha, transfer_level, shares, units)
    ran = None if forced else split  # the trace holds the model's split only where it is what runs
    if strategy == "exchange":
        out, trace = exchange_sort(arr, rt, shares, on_device_error=on_device_error, split=ran,
                                   options=options or DEFAULT_OPTIONS, units=units)
        return (out, trace.resolve()) if return_trace else out
    if strategy == "keyrange":
        out, trace = keyrange_sort(arr, rt, _keyrange_shares(units, split, alpha, shares),
                                   on_device_error=on_device_error, split=ran, options=options or DEFAULT_OPTIONS,
                                   units=units)
        return (out, trace.resolve()) if return_trace else out
    out, trace = fast_sort(arr, rt, strategy=strategy, alpha=a_cpu, transfer_level=y,
                           on_device_error=on_device_error, split=ran,
                           cpu_threads=split.cpu_threads if split is not None and alpha is None else 0,
                           options=options or DEFAULT_OPTIONS)
    return (out, trace.resolve()) if return_trace else out


def _decide(n: int, dtype: np.dtype, rt: Runtime, strategy: str, alpha: float | None, transfer_level: int | None,
            shares: Sequence[float] | None, units: tuple[Runtime, ...] | None = None
            ) -> tuple[str, Split | None, float, int, Sequence[float] | None]:
    """What fast mode runs for ``n > 1`` keys: (strategy, the model's split, CPU share, transfer level, shares),
    the shares for ``units`` (default ``rt.units`` now)."""
    units = rt.units if units is None else units
    strategy, split = _plan(n, dtype, rt, strategy)
    a_cpu, y = 1.0, 0
    if strategy == "exchange":
        k = len(units)
        sh = (tuple(float(v) for v in shares) if shares is not None else
              tuple(split.shares) if split is not None and len(split.shares) == 1 + k else (0.0,) + (1.0 / k,) * k)
        if alpha is None and exchange_fits(rt, n, sh, dtype.itemsize, units):
            return strategy, split, 0.0, 0, sh
        # A CPU share asked for, or more than the devices may hold: key ranges (sorted on a device in pieces).
        strategy, shares = "keyrange", (sh if alpha is None else None)
    if strategy != "keyrange":
        if split is not None and split.strategy != "keyrange":
            a_cpu, y = split.alpha, split.transfer_level
        else:
            a_cpu = {"cpu": 1.0, "gpu": 0.0, "basic": 0.0}.get(strategy, 0.5)
            y = 1 if strategy == "basic" else 0
        if alpha is not None:
            a_cpu = float(alpha)
        if transfer_level is not None:
            y = int(transfer_level)
        # More than the device may hold: sorted on the device in pieces by key range, not by the CPU.  Asked after
        # the capacity, which is 0 once the device is lost: then fast_sort, which finds none, runs the CPU alone.
        if (strategy != "cpu" and a_cpu < 1.0 and (1.0 - a_cpu) * n > max_device_elements(rt, dtype.itemsize)
                and rt.has_device and units[:1] == (rt,)):
            strategy, shares = "keyrange", (a_cpu, 1.0 - a_cpu) + (0.0,) * (len(units) - 1)
    return strategy, split, a_cpu, y, shares


def _keyrange_shares(units: tuple[Runtime, ...], split: Split | None, alpha: float | None,
                     shares: Sequence[float] | None) -> tuple[float, ...]:
    """The key-range shares to run for ``units``: the caller's, else the model's with ``alpha`` for the CPU, else
    equal ones."""
    if shares is not None:
        return tuple(float(v) for v in shares)
    k = len(units)
    model = split.shares if split is not None and len(split.shares) == 1 + k else (1.0 / (k + 1),) * (k + 1)
    if alpha is None:
        return tuple(model)
    rest = sum(model[1:])
    devs = [v / rest for v in model[1:]] if rest > 0 else [1.0 / k for _ in range(k)]
    return (float(alpha), *((1.0 - float(alpha)) * v for v in devs))


def planned_strategy(n: int, dtype: Any, runtime: Runtime, strategy: str = "auto") -> str:
    """The strategy fast-mode :func:`hybrid_mergesort` runs for ``n`` keys of ``dtype`` on ``runtime``.

    ``"cpu"`` for ``n <= 1``, without a usable device or, for ``"auto"``,
    without a calibrated profile; otherwise the model's choice
    (:func:`hpu.sorting.costs.fast_split`) for ``strategy``, ``"keyrange"``
    where the devices cannot hold their share of it.

    Raises
    ------
    ValueError
        Unknown strategy.
    """
    check_strategy(strategy, SORT_STRATEGIES)
    n = int(n)
    return "cpu" if n <= 1 else _decide(n, np.dtype(dtype), runtime, strategy, None, None, None)[0]


def planned_split(n: int, dtype: Any, runtime: Runtime, strategy: str = "auto") -> Split | None:
    """The model's split behind :func:`planned_strategy` (with its ``predicted_time`` in seconds), or None when the
    runtime's profile has no measured cost curves (uncalibrated: fast mode then runs the CPU alone unpredicted)."""
    return _plan(int(n), np.dtype(dtype), runtime, strategy)[1]


def _plan(n: int, dtype: np.dtype, rt: Runtime, strategy: str) -> tuple[str, Split | None]:
    usable = rt.has_device and rt.supports(dtype)
    if not usable or (strategy == "auto" and rt.profile.cost_curves("sort") is None):
        strategy = "cpu"  # uncalibrated: never slower than the CPU alone (hpu.Runtime.calibrated)
    if rt.profile.cost_curves("sort") is None:
        return strategy, None
    split = _profile_memo(rt, "fast_split", _fast_split_of)(n, dtype.itemsize, strategy, usable)
    return split.strategy, split


def _profile_memo(rt: Runtime, name: str, split: Callable[..., Split]) -> Callable[..., Split]:
    """``split(rt, profile, *key)`` memoised per runtime and its current profile (a split is deterministic, so
    cached; thread-safe): the runtime's resources keep one LRU cache a profile."""
    profile = rt.profile
    return rt.resources.get(("sort", name, id(profile)),
                            lambda: functools.lru_cache(maxsize=4096)(functools.partial(split, rt, profile)))


def _fast_split_of(rt: Runtime, profile: Profile, n: int, itemsize: int, strategy: str, usable: bool) -> Split:
    """:func:`fast_split` of ``n`` keys of ``itemsize`` bytes for the runtime's units (memoised by :func:`_plan`)."""
    units = rt.units  # read once: without this runtime once another thread's failed rebuild lost its device
    usable = usable and units[:1] == (rt,)
    return fast_split(n, profile, strategy=strategy, device=usable, itemsize=itemsize,
                      shared_cores=usable and rt.device_shares_host_cores,
                      devices=[u.profile for u in units],
                      capacity=[max_device_elements(u, itemsize) for u in units] if usable else None)


def _choose(strategy: str, padded_n: int, itemsize: int, rt: Runtime, alpha: float | None) -> Split | None:
    """Paper mode's split for ``strategy`` (the basic or advanced split of the runtime's profile), else None."""
    if strategy not in ("basic", "advanced"):
        return None
    return _profile_memo(rt, "paper_split", _paper_split_of)(strategy, padded_n, itemsize,
                                                              None if alpha is None else float(alpha))


def _paper_split_of(rt: Runtime, profile: Profile, strategy: str, padded_n: int, itemsize: int,
                    alpha: float | None) -> Split:
    """:func:`hpu.basic_split` or :func:`hpu.advanced_split` (whose search for alpha costs more than sorting a small
    array) of the padded size with the transfer cost of the data (memoised by :func:`_choose`)."""
    rec, data_bytes = _SPEC.recurrence, padded_n * itemsize
    if strategy == "basic":
        return basic_split(rec, padded_n, profile, data_bytes=data_bytes)
    return advanced_split(rec, padded_n, profile, data_bytes=data_bytes, alpha=alpha)
