"""numpy's signatures on the hybrid sort: :func:`sort`, :func:`argsort` and the key-value :func:`sort_by_key`.

Every dtype numpy sorts by value (bool, int8 to uint64, float16 to float64,
datetime64, timedelta64) in numpy's order (NaN and NaT last, -0.0 equal to
+0.0), stably, along any axis.  How:

- 1-D :func:`sort` runs :func:`hpu.hybrid_mergesort` (the model splits the
  work between the CPU pool and the device) on the keys themselves, on
  float16 widened to float32 (exact and order-preserving), and on
  order-preserving uint64 keys for datetime64 and timedelta64
  (:func:`hpu.sorting.keys.to_unsigned`, one-to-one there).
- :func:`argsort` packs each key with its position into one integer
  (:mod:`hpu.sorting.keys`), sorts the packed integers with
  :func:`hpu.hybrid_mergesort` and keeps the positions: the device sorts its
  (key, index) pairs and the CPU share its own, in the same pipeline, pools
  and split as the sort.  64-bit keys take two such passes, least significant
  32 bits first (an LSD radix sort with 32-bit digits, each pass stable).
- Where the device alone sorts (:func:`packs_on_device`: 32- and 64-bit
  integers and floats, datetime64, timedelta64), the keys go up as they are
  and the device packs them, sorts (64-bit keys in two passes, as above),
  and unpacks the positions or gathers keys and values itself
  (:func:`hpu.sorting.pipeline.fast_keyed_sort`); rows the same way, with
  the row number packed above the key (a segmented sort).
- bool and 8- and 16-bit integer keys (float16's too, for argsort, as
  uint16 keys) go to numpy's own stable sort, a radix sort in O(n), on the
  CPU; with a device strategy forced they are widened to 32 bits (exact)
  for :func:`hpu.hybrid_mergesort` instead (:func:`_radix`).
- Several rows (``axis`` of an N-D array): rows no longer than a
  work-group's tile sorted one work-group a row on the device
  (:func:`rows_on_device`, :func:`hpu.sorting.pipeline.fast_row_sort`),
  longer ones packed on the device as above, or the CPU pool sorts blocks of
  rows with numpy; with the ``"basic"`` or
  ``"advanced"`` strategy forced, row numbers go into integers packed on the
  host and one hybrid sort orders every row (see :func:`_packed_segmented`).
- :func:`sort_by_key` is the stable argsort of the keys and a gather of the
  keys and of every value array (on the device with the packing there, else
  in the thread pool).  Gathering from the
  input keeps every bit: the two zeros and NaN payloads stay as numpy leaves
  them.

Positions are packed in ``bits(n - 1)`` bits, so an argsort row holds fewer
than ``2**32`` elements.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.hybrid import check_on_device_error, check_split, check_strategy
from ..core.kernels import CL_TYPES
from ..core.runtime import Runtime, check_runtime, resolve_runtime
from ..core.util import wait_all
from .costs import fast_cost, has_device_curves
from .cpu import stable_sort_inplace
from .keys import check_sort_dtype, key_bits, pack, packed_bits, time_from_unsigned, to_unsigned, unpack_positions
from .mergesort import SORT_STRATEGIES, hybrid_mergesort, planned_strategy
from .device import default_algorithm, row_block
from .pipeline import fast_keyed_sort, fast_row_sort, keyed_fits, keyed_key_type, row_tile

__all__ = ["KINDS", "argsort", "packs_on_device", "rows_on_device", "sort", "sort_by_key"]

#: ``kind`` values accepted for numpy compatibility; every one gives the stable result.
KINDS = (None, "quicksort", "mergesort", "heapsort", "stable")

#: Fewest elements a thread-pool task handles (smaller work runs on the calling thread).
_TASK_ELEMENTS = 1 << 16
#: Most elements that :func:`sort`, :func:`argsort` and :func:`sort_by_key` with ``strategy="auto"`` and no forced
#: split sort on the calling thread by numpy alone, asking neither the model nor the pools: there a call's fixed
#: costs exceed the sort.  On the CPU-only machine (``experiments/bench_small.py``,
#: ``experiments/results/cpu-only/bench_small_before.log``) such calls took 10-240 us up to 2^12 elements
#: against 0.4-58 us for numpy's stable sorts, which took 2.3-19 times hpu's time from 2^14 on.
SMALL_MAX = 1 << 12
_LOW32 = np.uint64(0xFFFFFFFF)


def sort(a: Any, axis: int | None = -1, kind: str | None = None, order: Any = None, *, stable: bool | None = None,
         runtime: Runtime | None = None, strategy: str = "auto", alpha: float | None = None,
         transfer_level: int | None = None, on_device_error: str = "fallback") -> np.ndarray:
    """A sorted copy of ``a``, like ``numpy.sort(a, axis, kind="stable")``, on the CPU pool and the device.

    Parameters
    ----------
    a : array_like
        Any shape; bool, (u)int8-64, float16/32/64, datetime64 or timedelta64
        (either byte order).  Never modified.
    axis : int or None
        Axis to sort along (default -1, the last); ``None`` sorts the
        flattened array.
    kind : {None, "quicksort", "mergesort", "heapsort", "stable"}
        Accepted for numpy compatibility (numpy's abbreviations and bytes
        too); the result is always the stable one.
    order : None
        numpy's sort by the fields of a structured array; hpu sorts no
        structured dtype, so only None (numpy's ``ValueError`` for an array
        without fields otherwise).
    stable : bool or None
        numpy 2's keyword (any value, as numpy takes it; not with ``kind``);
        the result is always the stable one.
    runtime : hpu.Runtime, optional
        Default :func:`hpu.default_runtime`.
    strategy : {"auto", "advanced", "basic", "gpu", "cpu", "keyrange", "exchange"}
        As for :func:`hpu.hybrid_mergesort`; for several rows, ``"auto"`` and
        ``"gpu"`` sort rows of at most a work-group's tile one work-group a
        row on the device where :func:`rows_on_device` says so, longer rows
        on the device alone, packed there, where
        :func:`packs_on_device` says so; ``"cpu"`` (and ``"auto"``
        otherwise) sorts blocks of rows in the pool, and ``"basic"``,
        ``"advanced"``, ``"keyrange"`` and ``"exchange"`` one segmented sort
        packed on the host where it fits 64 bits (keys of at most 32 bits)
        and the model gives the device a share of it.  ``alpha`` and ``transfer_level`` then apply to that
        packed sort of every element.  ``"auto"`` sorts inputs of at most
        :data:`SMALL_MAX` elements with numpy on the calling thread (unless
        ``alpha`` or ``transfer_level`` is given).
    alpha, transfer_level : optional
        Force the split of the underlying :func:`hpu.hybrid_mergesort`; for
        rows sorted one work-group a row (``"auto"``, ``"gpu"``), ``alpha``
        is the CPU's share of the rows, sorted in the pool while the device
        sorts the others (by default none: see :func:`rows_on_device`).
    on_device_error : {"fallback", "raise"}
        As for :func:`hpu.hybrid_mergesort`.

    Returns
    -------
    numpy.ndarray
        ``a``'s shape (flattened for ``axis=None``), dtype and memory order
        (numpy's order ``"K"``), equal bit for bit to ``numpy.sort(a, axis,
        kind="stable")``: NaN and NaT last, -0.0 and +0.0 in input order.
        Always a base-class ``ndarray``: a subclass (``numpy.matrix``) is
        read as ``numpy.asarray`` reads it and not wrapped again.
        Writeable, but unlike numpy's result it need not own its memory (a
        view; large results lie in memory the runtime recycles,
        :mod:`hpu.core.hostmem`), so ``ndarray.resize`` raises ``ValueError``
        where numpy's result would resize: ``numpy.resize`` or a copy serves.

    Raises
    ------
    TypeError
        Complex, object, string, structured or other unsupported dtypes, and
        masked arrays; an ``axis`` that is not an integer (numpy's integers
        and 0-d integer arrays are; a bool is not), a ``kind`` that is
        neither str nor bytes (as numpy), an ``alpha`` that is not a real
        number.
    numpy.exceptions.AxisError
        ``axis`` out of range (a ``ValueError``); ValueError also for an
        ``a`` that numpy cannot make an array of (a ragged sequence: numpy's
        own error, as for any other that ``numpy.asarray`` raises), an
        unknown ``kind``, ``kind`` with ``stable``, an ``order`` other than
        None, an unknown ``strategy`` or ``on_device_error``, ``alpha``
        outside ``[0, 1]``, and ``transfer_level`` not an integer in
        ``[0, ceil(log2 n)]`` for ``a``'s ``n`` elements (on every path, also
        where no hybrid sort uses it).
    hpu.DeviceFailure
        With ``on_device_error="raise"`` when the device fails.
    """
    arr, axis = _prepare(a, axis, kind, "hpu.sort", order, stable)
    opts = _Options(runtime, strategy, alpha, transfer_level, on_device_error, arr.size)
    if opts.small(arr.size):
        with opts.guard():
            if arr.ndim > 1:
                return np.sort(arr, axis=axis, kind="stable")
            out = arr.copy()
            stable_sort_inplace(out)  # numpy's quicksort, -0.0 and NaN put back in input order: its stable result
            return out
    rows = _rows(arr, axis)
    with opts.runtime.call():
        if rows.size == 0:
            out = rows.copy()
        elif rows.shape[0] == 1:
            out = _sort_1d(rows[0], opts).reshape(1, -1)
        elif _rows_on_device(rows, opts):  # one work-group a row, pipelined with the copies; a CPU share of rows
            out = fast_row_sort(rows.reshape(-1), rows.shape[1], opts.runtime, sort_into=_sort_rows_into,
                                cpu_rows=_cpu_rows_share(rows, opts), on_device_error=opts.on_device_error,
                                strategy=opts.strategy)[0].reshape(rows.shape)
        elif _keyed_on_device(rows.reshape(-1), [], opts, rows.shape[0], gather=True):  # segmented, on the device
            out = fast_keyed_sort(rows.reshape(-1), [], opts.runtime, gather=True, row_length=rows.shape[1],
                                  redo=lambda: [_cpu_rows(rows, opts.runtime, _sort_rows_into, rows.dtype)],
                                  on_device_error=opts.on_device_error, strategy=opts.strategy)[0][0]
            out = out.reshape(rows.shape)
        elif _packed_segmented(*rows.shape, key_bits(rows.dtype), opts):
            out = _take_rows(rows, _argsort_rows(rows, opts), opts.runtime)
        else:
            out = _cpu_rows(rows, opts.runtime, _sort_rows_into, rows.dtype)
    out = _unrows(out, arr.shape, axis).astype(arr.dtype, copy=False)  # the input's byte order
    if out.ndim < 2 or arr.flags.c_contiguous:
        return out
    laid = np.empty_like(arr, dtype=out.dtype)  # and the memory order (numpy sorts a copy of order "K")
    laid[...] = out
    return laid


def argsort(a: Any, axis: int | None = -1, kind: str | None = None, order: Any = None, *,
            stable: bool | None = None, runtime: Runtime | None = None, strategy: str = "auto",
            alpha: float | None = None, transfer_level: int | None = None,
            on_device_error: str = "fallback") -> np.ndarray:
    """The stable permutation that sorts ``a``, like ``numpy.argsort(a, axis, kind="stable")``.

    Parameters are those of :func:`sort`.

    Returns
    -------
    numpy.ndarray of int64 (``numpy.intp``)
        ``a``'s shape (flattened for ``axis=None``; a 0-d ``a`` as one
        element, as numpy takes it): indices along ``axis``, equal element
        for element to ``numpy.argsort(a, axis, kind="stable")``; its
        memory and class as for :func:`sort`.

    Raises
    ------
    TypeError, ValueError, numpy.exceptions.AxisError, hpu.DeviceFailure
        As for :func:`sort`; ``ValueError`` also for rows of ``2**32`` or more
        elements.
    """
    if np.ndim(a) == 0 and not isinstance(a, np.ma.MaskedArray):  # numpy's argsort takes a scalar as one element
        a = np.reshape(a, 1)
    arr, axis = _prepare(a, axis, kind, "hpu.argsort", order, stable)
    opts = _Options(runtime, strategy, alpha, transfer_level, on_device_error, arr.size)
    if opts.small(arr.size):
        with opts.guard():
            return np.argsort(arr, axis=axis, kind="stable").astype(np.int64, copy=False)
    rows = _rows(arr, axis)
    with opts.runtime.call():
        if rows.size == 0:
            return np.zeros(arr.shape, np.int64)
        return _unrows(_argsort_rows(rows, opts), arr.shape, axis)


def sort_by_key(keys: Any, values: Any, *, runtime: Runtime | None = None, strategy: str = "auto",
                alpha: float | None = None, transfer_level: int | None = None,
                on_device_error: str = "fallback") -> tuple[np.ndarray, Any]:
    """Sort ``keys`` stably and carry ``values`` along: a key-value sort.

    Parameters
    ----------
    keys : array_like, shape (n,)
        A dtype :func:`sort` accepts.  Never modified.
    values : array_like of shape (n,), or a tuple of them
        Any dtype (structured records included), each one-dimensional with
        ``n`` elements; a tuple carries several arrays at once (a list is one
        array, as for numpy).  Never modified.
    runtime, strategy, alpha, transfer_level, on_device_error
        As for :func:`sort`.

    Returns
    -------
    sorted_keys : numpy.ndarray, shape (n,)
        ``numpy.sort(keys, kind="stable")``, bit for bit.
    sorted_values : numpy.ndarray, or a tuple of them
        Each value array in the same order, ``v[numpy.argsort(keys,
        kind="stable")]`` (a tuple when ``values`` is one).  Their memory
        as for :func:`sort`.

    Raises
    ------
    TypeError
        Unsupported key dtype; masked keys or values.
    ValueError
        ``keys`` not 1-D, a value array not 1-D, or of another length than
        ``keys``; keys or values that numpy cannot make an array of (as for
        :func:`sort`); a bad ``strategy``, ``alpha``, ``transfer_level`` or
        ``on_device_error`` (as for :func:`sort`).
    hpu.DeviceFailure
        With ``on_device_error="raise"`` when the device fails.
    """
    arr, _ = _prepare(keys, None, None, "hpu.sort_by_key keys")
    if np.ndim(keys) != 1:
        raise ValueError(f"sort_by_key sorts 1-D keys; got shape {np.shape(keys)}")
    many = isinstance(values, tuple)
    for i, v in enumerate(values if many else [values]):
        if isinstance(v, np.ma.MaskedArray):  # its mask would be dropped
            raise TypeError(f"hpu.sort_by_key: masked {f'values[{i}]' if many else 'values'} are not supported; "
                            "pass v.filled(...) and carry the mask as another value array")
    vals = [np.asarray(v) for v in (values if many else [values])]
    for i, v in enumerate(vals):
        name = f"values[{i}]" if many else "values"
        if v.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional (one value per key), got shape {v.shape}")
        if v.shape[0] != arr.shape[0]:
            raise ValueError(f"{name} has {v.shape[0]} elements but keys has {arr.shape[0]}")
    opts = _Options(runtime, strategy, alpha, transfer_level, on_device_error, arr.size)

    def on_cpu(o: _Options) -> list[np.ndarray]:
        perm = _argsort_rows(arr.reshape(1, -1), o)
        return [_take_rows(x.reshape(1, -1), perm, o.runtime)[0] for x in [arr, *vals]]

    if opts.small(arr.size):
        with opts.guard():
            perm = np.argsort(arr, kind="stable")
            out = [x.view(_raw(x.dtype))[perm].view(x.dtype) for x in [arr, *vals]]
        return out[0], (tuple(out[1:]) if many else out[1])
    with opts.runtime.call():
        if _keyed_on_device(arr, vals, opts):  # packed, sorted and gathered on the device
            out = fast_keyed_sort(arr, vals, opts.runtime, gather=True, redo=lambda: on_cpu(opts.on_cpu()),
                                  on_device_error=opts.on_device_error, strategy=opts.strategy)[0]
        else:
            out = on_cpu(opts)
    return out[0], (tuple(out[1:]) if many else out[1])


# -- arguments and layout ------------------------------------------------------


class _Options:
    """One call's checked runtime and split arguments (``ValueError`` naming a bad one).

    ``transfer_level`` lies in ``[0, ceil(log2 n)]`` for the call's ``n`` keys, as :func:`hybrid_mergesort`
    checks it, on every path (rows and numpy's radix sorts included, which do not use it).
    """

    def __init__(self, runtime: Runtime | None, strategy: str, alpha: float | None, transfer_level: int | None,
                 on_device_error: str, n: int | None = None):
        check_strategy(strategy, SORT_STRATEGIES)
        check_on_device_error(on_device_error)
        alpha, transfer_level = check_split(alpha, transfer_level)  # here too: not every path is hybrid_mergesort
        depth = None if n is None else max(int(n) - 1, 0).bit_length()  # ceil(log2 n)
        if transfer_level is not None and depth is not None and transfer_level > depth:
            raise ValueError(f"transfer_level must lie in [0, {depth}] for n={n} keys, got {transfer_level}")
        self.given, self.strategy, self.on_device_error = check_runtime(runtime), strategy, on_device_error
        self.alpha, self.transfer_level = alpha, transfer_level
        self._runtime: Runtime | None = None

    @property
    def runtime(self) -> Runtime:
        """The runtime given, else the default one (made on first use: not by calls that numpy alone sorts).

        A plain attribute, not ``functools.cached_property``, whose lock (Python 3.10 and 3.11: one for every
        instance) made a call with its own runtime wait while another thread made the default one."""
        if self._runtime is None:
            self._runtime = resolve_runtime(self.given)
        return self._runtime

    @property
    def hybrid(self) -> dict[str, Any]:
        """The keyword arguments of :func:`hybrid_mergesort` for this call."""
        return dict(strategy=self.strategy, alpha=self.alpha, transfer_level=self.transfer_level,
                    runtime=self.runtime, on_device_error=self.on_device_error)

    def small(self, n: int) -> bool:
        """Whether numpy alone sorts ``n`` elements on the calling thread: at most :data:`SMALL_MAX`, with
        ``strategy="auto"`` and no split forced."""
        return n <= SMALL_MAX and self.strategy == "auto" and self.alpha is None and self.transfer_level is None

    def guard(self) -> contextlib.AbstractContextManager:
        """For a call that numpy alone sorts: the given runtime's :meth:`~hpu.Runtime.call` (a closed one raises),
        else nothing (the default runtime is not made for it)."""
        return self.given.call() if self.given is not None else contextlib.nullcontext()

    def on_cpu(self) -> _Options:
        """The same call on the CPU alone (what a device share that failed is redone with)."""
        return _Options(self.runtime, "cpu", None, None, "raise")


def _prepare(a: Any, axis: int | None, kind: str | None, what: str, order: Any = None,
             stable: Any = None) -> tuple[np.ndarray, int]:
    """The input as an array of a sortable dtype and the axis as a non-negative int (``None``: flattened);
    ``kind``, ``order`` and ``stable`` checked as numpy checks them (every result is the stable one).  What
    ``numpy.asarray`` cannot convert raises numpy's own error (a ragged sequence: ``ValueError``)."""
    if kind is not None:
        if not isinstance(kind, (str, bytes)):
            raise TypeError(f"sort kind must be str, not {type(kind).__name__}")
        try:
            text = kind.decode() if isinstance(kind, bytes) else kind  # numpy takes b"stable" too, as UTF-8
        except UnicodeDecodeError:
            text = ""
        if not text or text[0] not in "qQmMhHsS":
            raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))} (or numpy's abbreviations), "
                             f"got {kind!r}")
    if kind is not None and stable is not None:
        raise ValueError("`kind` and `stable` parameters can't be provided at the same time; use only one of them")
    if isinstance(a, np.ma.MaskedArray):
        raise TypeError(f"{what}: masked arrays are not supported (numpy.ma.sort orders masked entries last); "
                        "pass a.filled(...) or a.compressed()")
    arr = np.asarray(a)
    check_sort_dtype(arr.dtype, what)
    if order is not None:  # structured dtypes, the only ones with fields, were refused just above
        raise ValueError(f"{what}: cannot specify order when the array has no fields")
    if axis is None:
        return arr.reshape(-1), 0
    if isinstance(axis, bool):  # numpy's argsort refuses a bool axis (its sort takes True as 1)
        raise TypeError(f"axis must be an integer or None, got {axis!r}")
    try:
        axis = operator.index(axis)  # what numpy takes: ints, numpy integers, 0-d integer arrays, any __index__
    except TypeError:
        raise TypeError(f"axis must be an integer or None, got {axis!r}") from None
    if not -arr.ndim <= axis < arr.ndim:
        raise np.exceptions.AxisError(axis, arr.ndim)
    return arr, axis % arr.ndim


def _rows(arr: np.ndarray, axis: int) -> np.ndarray:
    """``arr`` with ``axis`` last, as a C-contiguous ``(rows, m)`` array in native byte order (a view if it can)."""
    # Without numpy's axis moves where the axis is already last, nor a copy where the rows are a view: a call's
    # code before its sort starts runs cold (its caches cleared by the last call's data).
    moved = arr if axis == arr.ndim - 1 else np.moveaxis(arr, axis, -1)
    rows = moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1])
    if rows.flags.c_contiguous and rows.dtype.isnative:
        return rows
    return np.ascontiguousarray(rows, dtype=arr.dtype.newbyteorder("="))


def _unrows(out: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Undo :func:`_rows`: a C-contiguous array of ``shape`` (with ``out``'s dtype)."""
    if axis == len(shape) - 1:
        return np.ascontiguousarray(out.reshape(shape))
    moved = shape[:axis] + shape[axis + 1:] + shape[axis:axis + 1]
    return np.ascontiguousarray(np.moveaxis(out.reshape(moved), -1, axis))


# -- sorting -------------------------------------------------------------------


def _sort_1d(x: np.ndarray, opts: _Options) -> np.ndarray:
    """``np.sort(x, kind="stable")`` through :func:`hybrid_mergesort` on a native, widened or mapped dtype."""
    dt = x.dtype
    if _radix(dt, opts):
        return np.sort(x, kind="stable")
    if dt in CL_TYPES:
        return hybrid_mergesort(x, **opts.hybrid)
    if dt.kind in "Mm":  # one-to-one uint64 keys (keys.to_unsigned), mapped back
        return time_from_unsigned(hybrid_mergesort(to_unsigned(x), **opts.hybrid), dt)
    if dt.kind == "b":  # by byte value, as numpy orders bools (a view of other bytes keeps them)
        return hybrid_mergesort(x.view(np.uint8).astype(np.uint32), **opts.hybrid).astype(np.uint8).view(dt)
    wide = np.float32 if dt.kind == "f" else np.int32 if dt.kind == "i" else np.uint32
    return hybrid_mergesort(x.astype(wide), **opts.hybrid).astype(dt)


def _radix(dtype: np.dtype, opts: _Options) -> bool:
    """Whether numpy's own stable sort, a radix sort for bool and 8- and 16-bit integers (O(n)), serves ``dtype``.

    Linear time, against the widened comparison sort (or, for argsort, the
    packed one of twice the data); forced device strategies still use the
    device.
    """
    return _numpy_radix(dtype) and opts.strategy in ("auto", "cpu")


def _numpy_radix(dtype: np.dtype) -> bool:
    """Whether numpy's stable sort of ``dtype`` is its radix sort: bool, 8- and 16-bit integers."""
    return dtype.kind in "biu" and dtype.itemsize <= 2


#: Rows :func:`_sort_rows_into` copies and sorts at a time: about this many bytes, so that a chunk stays in a
#: core's cache from its copy through its sort.
_CHUNK_BYTES = 256 << 10


def _sort_rows_into(block: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = np.sort(block, axis=-1, kind="stable")``, by numpy's faster default sort where that gives the
    same bits, chunk by chunk of rows in place in ``out`` (no temporary the size of the block).

    Equal keys of different bits exist only among floats (-0.0 and +0.0, NaN
    payloads): rows holding a negative zero or a NaN (NaN sorts last) are
    sorted again stably, found by one check of the whole block (not chunk by
    chunk: small numpy calls hold the GIL, which many threads then wait for):
    a row's last key is NaN, or the least of its input bits as signed
    integers is -0.0's (numpy's SIMD sort may write -0.0 as +0.0).  For bool
    and 8- and 16-bit integers numpy's stable sort is a radix sort, the
    fastest.  ``block`` and ``out``: shape ``(k, m)``, ``m >= 1``, one dtype,
    rows contiguous, not overlapping.
    """
    if _numpy_radix(block.dtype):
        out[...] = np.sort(block, axis=-1, kind="stable")
        return
    step = max(1, _CHUNK_BYTES // max(1, block.shape[-1] * block.dtype.itemsize))
    for i in range(0, block.shape[0], step):
        np.copyto(out[i:i + step], block[i:i + step])
        out[i:i + step].sort(axis=-1)
    if block.dtype.kind == "f":  # -0.0's bits are the least signed integer of their width; NaN sorts last
        bits = block.view(f"i{block.dtype.itemsize}")  # the input's: numpy's SIMD sort may write -0.0 as +0.0
        redo = np.isnan(out[:, -1]) | (bits.min(axis=-1) == np.iinfo(bits.dtype).min)
        if redo.any():
            out[redo] = np.sort(block[redo], axis=-1, kind="stable")


def _packed_segmented(r: int, m: int, width: int, opts: _Options) -> bool:
    """Whether ``r`` rows of ``m`` keys of ``width`` bits are sorted by one packed sort rather than by blocks of rows
    on the CPU: only when a device strategy is forced and the model gives the device a share of that sort.

    ``"auto"`` keeps rows on the CPU: on the H100 machine 2^14 rows of 2^10 float32 took 11.7 ms in CPU row blocks
    (16 threads) against 49.2 ms as one packed segmented sort on the device (``experiments/results/h100/
    bench_argsort.json``): the packed integers are twice the data and their packing and gathers cost host passes.
    """
    bits = packed_bits(width, m, r)
    if opts.strategy in ("auto", "cpu") or bits > 64:
        return False
    return planned_strategy(r * m, np.uint64 if bits > 32 else np.uint32, opts.runtime, opts.strategy) != "cpu"


def packs_on_device(n: int, dtype: Any, runtime: Runtime | None = None, *, rows: int = 1,
                    value_dtypes: tuple[Any, ...] = (), strategy: str = "auto", gather: bool = False) -> bool:
    """Whether :func:`argsort` or :func:`sort_by_key` (with ``value_dtypes``) of ``n`` keys of ``dtype`` in
    ``rows`` rows, or with ``gather`` :func:`sort` of those rows, with no CPU share forced, runs on the device
    alone with the (row, key, column) packing done there (:func:`hpu.sorting.pipeline.fast_keyed_sort`).

    When: native 32- or 64-bit integer or float keys (float64 on a device with fp64), datetime64 or
    timedelta64 (:func:`hpu.sorting.pipeline.keyed_key_type`), values without Python objects, (row, 32-bit
    digit, column) in 64 bits
    (:func:`hpu.sorting.keys.packed_bits`), room on the device (:func:`hpu.sorting.pipeline.keyed_fits`), and
    the ``"gpu"`` strategy, forced or the model's plan: for one row, its plan for the packed 64-bit sort; for
    rows, the device predicted faster than the CPU's row sorts: the transfers of the keys (at their own size)
    and the device's sort of as many packed 64-bit integers, against the CPU's whole sort of the keys scaled
    by ``log2(m) / log2(n)`` (a comparison sort's ``n log m`` work for rows of ``m``), each from the profile's
    measured curves (:func:`hpu.sorting.costs.fast_cost`).  Packing on the device saves the host passes of
    the packed host path (to unsigned keys, packing, unpacking: over twice the keys' bytes each) and copies up
    only the keys (``experiments/bench_argsort.py``).

    Parameters
    ----------
    n : int
        Keys in all (``n >= 0``).
    dtype : numpy dtype
        The keys' dtype.
    runtime : hpu.Runtime, optional
        Default :func:`hpu.default_runtime`.
    rows : int
        Rows of ``n / rows`` keys each (``axis=-1`` of a 2-D array).
    value_dtypes : tuple of numpy dtypes
        The value arrays' dtypes (:func:`sort_by_key`).
    strategy : str
        As for :func:`sort` (``"gpu"`` forces the device; ``"auto"`` asks the model).
    gather : bool
        Keys and values come back gathered (:func:`sort`, :func:`sort_by_key`)
        rather than positions (:func:`argsort`): a second copy of each array
        on the device.

    Returns
    -------
    bool
        False also for ``n < 2`` (nothing to sort on the device).

    Raises
    ------
    ValueError
        An unknown ``strategy``, or ``rows`` that does not divide ``n``.
    """
    check_strategy(strategy, SORT_STRATEGIES)
    if rows < 1 or n % rows:
        raise ValueError(f"rows must divide n: got {rows} rows of {n} keys")
    dt, vals = np.dtype(dtype), [np.dtype(v) for v in value_dtypes]
    if keyed_key_type(dt) is None or n < 2 or any(v.hasobject or v.itemsize == 0 for v in vals):
        return False
    rt = resolve_runtime(runtime)
    if packed_bits(32, n // rows, rows) > 64 or not (rt.has_device and rt.supports(dt)):
        return False
    if not keyed_fits(rt, n, [dt.itemsize, *(v.itemsize for v in vals)], bool(vals) or gather):
        return False
    if rows == 1 or strategy != "auto":
        return planned_strategy(n, np.uint64, rt, strategy) == "gpu"
    if not has_device_curves(rt.profile):  # uncalibrated, or calibrated without a device: the CPU
        return False
    device = fast_cost(rt.profile, "transfer", n, dt.itemsize) + fast_cost(rt.profile, "device_sort", n, 8)
    cpu_rows = fast_cost(rt.profile, "cpu_sort", n, dt.itemsize) * np.log2(n // rows) / np.log2(n)
    return bool(device < cpu_rows)


def rows_on_device(rows: int, m: int, dtype: Any, runtime: Runtime | None = None, *,
                   strategy: str = "auto") -> bool:
    """Whether :func:`sort` of ``rows`` rows of ``m`` keys of ``dtype`` (``axis=-1``), with no CPU share forced,
    sorts each row in one work-group on the device (:func:`hpu.sorting.pipeline.fast_row_sort`).

    When: at least two rows of ``2 <= m <= row_tile`` keys
    (:func:`hpu.sorting.pipeline.row_tile`: a dtype of
    :data:`hpu.core.kernels.CL_TYPES` the device supports, rows that fit one
    work-group's local memory), all ``n = rows * m`` keys in
    :attr:`hpu.Runtime.device_memory_bytes` and one allocation, and the
    ``"gpu"`` strategy, forced or, under ``"auto"``, on a device whose
    measured ``device_sort`` curve is the merge sort's (not a CPU device's
    radix sort: :func:`hpu.sorting.device.default_algorithm`) and predicted
    faster than the CPU's row sorts:

    ``transfer(n) + device_sort(n) * (b / m) * log2(b) / log2(n)  <  cpu_sort(n) * log2(m) / log2(n)``

    with the profile's measured curves (:func:`hpu.sorting.costs.fast_cost`,
    at the keys' size): a comparison sort's work ``n log2 n`` scaled to rows
    of ``m`` (``n log2 m``) on the CPU, and on the device to blocks of
    ``b = row_block(m)`` keys, pads included
    (:func:`hpu.sorting.device.row_block`).  ``transfer`` is everything of a
    device-only sort but the sort (staging and both copies).

    The rows then all go to one unit.  A CPU share beside the device
    (``alpha`` of :func:`sort`) would share the host's cores and memory with
    the staging copies that bound the device's rows: the work of the two
    units adds up on the host rather than overlapping, so a split never
    beats the faster unit alone (on the H100 machine 5% of 2^14 rows of
    2^10 float32 on the CPU took 6.54 ms against 4.81 ms on the device
    alone, ``experiments/results/h100/bench_argsort_check_rowshare.json``;
    with the CPU's row sorts in place, queued before the device's, 10% took
    6.94 ms against 4.82, ``bench_argsort_rows_share.json``).

    Parameters
    ----------
    rows, m : int
        Rows and keys per row (``>= 0``).
    dtype : numpy dtype
    runtime : hpu.Runtime, optional
        Default :func:`hpu.default_runtime`.
    strategy : str
        As for :func:`sort`: ``"gpu"`` forces it where it can run, ``"auto"``
        asks the model (uncalibrated: no), the others never.

    Returns
    -------
    bool

    Raises
    ------
    ValueError
        An unknown ``strategy``.
    """
    check_strategy(strategy, SORT_STRATEGIES)
    rt = resolve_runtime(runtime)
    if strategy not in ("auto", "gpu") or rows < 2 or m < 2 or not rt.has_device:
        return False
    return _rows_memo(rt)(int(rows), int(m), np.dtype(dtype), strategy)


def _rows_memo(rt: Runtime) -> Callable[[int, int, np.dtype, str], bool]:
    """The runtime's memoised :func:`rows_on_device` decision for its current profile (deterministic; thread-safe;
    the cache goes with the runtime's resources when its context is rebuilt): the decision takes a few cost-curve
    evaluations and device queries, Python that ran before the staging on every call."""
    profile = rt.profile

    def make() -> Callable[[int, int, np.dtype, str], bool]:
        @functools.lru_cache(maxsize=1024)
        def decide(rows: int, m: int, dt: np.dtype, strategy: str) -> bool:
            n, dev = rows * m, rt.device  # read once: another thread's failed rebuild may set it to None
            if dev is None:
                return False
            if strategy == "auto" and (not has_device_curves(profile) or default_algorithm(dev) != "merge"):
                return False  # checked before row_tile, which builds the kernels; no device curves: the CPU
            if m > row_tile(rt, dt) or n * dt.itemsize > min(rt.device_memory_bytes, int(dev.max_mem_alloc_size)):
                return False
            if strategy == "gpu":
                return True
            b, size = row_block(m, dt.itemsize), dt.itemsize
            device = fast_cost(profile, "transfer", n, size) + \
                fast_cost(profile, "device_sort", n, size) * (b / m) * np.log2(b) / np.log2(n)
            return bool(device < fast_cost(profile, "cpu_sort", n, size) * np.log2(m) / np.log2(n))
        return decide

    return rt.resources.get(("sort", "rows_on_device", id(profile)), make)


def _rows_on_device(rows: np.ndarray, opts: _Options) -> bool:
    """:func:`rows_on_device` for this call: never with ``transfer_level`` forced; with ``alpha`` forced (the CPU's
    share of the rows) wherever it can run."""
    h = opts.hybrid
    if h["transfer_level"] not in (None, 0) or opts.strategy not in ("auto", "gpu"):
        return False
    return rows_on_device(*rows.shape, rows.dtype, opts.runtime,
                          strategy="gpu" if h["alpha"] is not None else opts.strategy)


def _cpu_rows_share(rows: np.ndarray, opts: _Options) -> int:
    """The rows the CPU sorts beside the device: ``alpha``'s when forced, else none.

    The model gives rows to one unit (:func:`rows_on_device`): on the H100 machine a CPU share of 10% of 2^14 rows
    of 2^10 float32 made the sort 44% slower than the device alone (6.94 against 4.82 ms,
    ``experiments/results/h100/bench_argsort_rows_share.json``; 5%: 6.54 against 4.81 ms before the CPU sorted
    its rows in place, ``bench_argsort_check_rowshare.json``): the device's rows are bound by the host's staging
    copies, and the CPU's sorts share the host's cores and memory with them.
    """
    alpha = opts.hybrid["alpha"]
    return 0 if alpha is None else int(round(float(alpha) * rows.shape[0]))


def _keyed_on_device(keys: np.ndarray, values: list[np.ndarray], opts: _Options, rows: int = 1,
                     gather: bool = False) -> bool:
    """:func:`packs_on_device` for this call (never with ``alpha`` or ``transfer_level`` forced)."""
    h = opts.hybrid
    if h["alpha"] not in (None, 0) or h["transfer_level"] not in (None, 0):
        return False
    return packs_on_device(keys.shape[0], keys.dtype, opts.runtime, rows=rows,
                           value_dtypes=tuple(v.dtype for v in values), strategy=opts.strategy,
                           gather=gather or bool(values))


def _argsort_rows(rows: np.ndarray, opts: _Options) -> np.ndarray:
    """Each row's stable argsort, int64 ``(rows, m)``."""
    r, m = rows.shape
    if m >= 1 << 32:
        raise ValueError(f"argsort sorts rows of fewer than 2**32 elements, got {m}")
    if _keyed_on_device(rows.reshape(-1), [], opts, r):
        redo = lambda: [_argsort_rows(rows, opts.on_cpu()).reshape(-1)]  # noqa: E731
        perm = fast_keyed_sort(rows.reshape(-1), [], opts.runtime, row_length=m, redo=redo,
                               on_device_error=opts.on_device_error, strategy=opts.strategy)[0][0]
        return perm.reshape(r, m)
    width = key_bits(rows.dtype)
    rt = opts.runtime
    if width < 64:
        keys = _empty(rt, (r, m), to_unsigned(rows[:0]).dtype)
        _in_pool(rt, r, m, lambda rs, cs: to_unsigned(rows[rs, cs], keys[rs, cs]))
        return _argsort_keys(keys, width, opts)
    # Two stable passes of 32-bit digits, least significant first (the second only if the high digits differ).
    low, high, ranges = _empty(rt, (r, m), np.uint32), _empty(rt, (r, m), np.uint32), []

    def split(rs: slice, cs: slice) -> None:
        k = to_unsigned(rows[rs, cs])
        np.bitwise_and(k, _LOW32, out=low[rs, cs], casting="unsafe")
        np.right_shift(k, np.uint64(32), out=high[rs, cs], casting="unsafe")
        ranges.append((high[rs, cs].min(initial=2**32 - 1), high[rs, cs].max(initial=0)))

    _in_pool(rt, r, m, split)
    first = _argsort_keys(low, 32, opts)
    if min(lo for lo, _ in ranges) >= max(hi for _, hi in ranges):
        return first
    second = _argsort_keys(_take_rows(high, first, rt), 32, opts)
    return _take_rows(first, second, rt)


def _argsort_keys(keys: np.ndarray, width: int, opts: _Options) -> np.ndarray:
    """The stable argsort of each row of unsigned ``keys`` (``width`` bits): packed, then sorted."""
    r, m = keys.shape
    rt = opts.runtime
    if _radix(keys.dtype, opts):  # 8- and 16-bit keys (float16's included): numpy's radix argsort
        return _cpu_rows(keys, rt, _stable_argsort_into, np.dtype(np.int64))
    if r == 1 or _packed_segmented(r, m, width, opts):
        dtype = np.uint32 if packed_bits(width, m, r) <= 32 else np.uint64
        packed = _empty(rt, (r, m), dtype)
        _in_pool(rt, r, m, lambda rs, cs: pack(keys[rs, cs], width, packed[rs, cs], m, cs.start, rs.start))
        ordered = hybrid_mergesort(packed.reshape(-1), **opts.hybrid).reshape(r, m)
        del packed
        # 64-bit packed integers become their positions in place (no second array to allocate and fault in).
        out = ordered.view(np.int64) if dtype is np.uint64 else _empty(rt, (r, m), np.int64)
        _in_pool(rt, r, m, lambda rs, cs: unpack_positions(ordered[rs, cs], m, out[rs, cs]))
        return out

    def block(k: np.ndarray, o: np.ndarray) -> None:
        dtype = np.uint32 if packed_bits(width, m) <= 32 else np.uint64
        p = pack(k, width, np.empty(k.shape, dtype))
        p.sort(axis=-1)
        unpack_positions(p, m, o)

    return _cpu_rows(keys, rt, block, np.dtype(np.int64))


def _stable_argsort_into(keys: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = np.argsort(keys, axis=-1, kind="stable")``."""
    out[...] = np.argsort(keys, axis=-1, kind="stable")


def _take_rows(src: np.ndarray, perm: np.ndarray, rt: Runtime) -> np.ndarray:
    """``np.take_along_axis(src, perm, axis=-1)`` in the thread pool, every byte of each element kept.

    Structured elements move as raw bytes (numpy copies them field by field,
    which leaves the padding between fields as the output memory had it),
    except those holding Python objects, which numpy moves field by field.
    """
    out = _empty(rt, perm.shape, src.dtype)
    raw = _raw(src.dtype)
    s, o = src.view(raw), out.view(raw)

    def take(rs: slice, cs: slice) -> None:
        if s.shape[0] == 1:
            np.take(s[0], perm[0, cs], out=o[0, cs])
        else:
            o[rs] = np.take_along_axis(s[rs], perm[rs], axis=-1)

    _in_pool(rt, *perm.shape, take)
    return out


def _raw(dtype: np.dtype) -> np.dtype:
    """The dtype that moves ``dtype``'s elements whole: raw bytes for structured ones without Python objects (numpy
    copies those field by field, leaving the padding between fields as the output memory had it), else itself."""
    return np.dtype((np.void, dtype.itemsize)) if dtype.names and not dtype.hasobject else dtype


def _cpu_rows(rows: np.ndarray, rt: Runtime, fn: Callable[[np.ndarray, np.ndarray], None],
              dtype: np.dtype) -> np.ndarray:
    """``fn(block, out_block)`` over blocks of rows in the thread pool (numpy's sorts release the GIL), each
    writing its rows of one result of ``dtype``."""
    out = _empty(rt, rows.shape, dtype)

    def run(rs: slice, cs: slice) -> None:
        fn(rows[rs], out[rs])

    _in_pool(rt, rows.shape[0], rows.shape[1], run, split_columns=False)
    return out


def _empty(rt: Runtime, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised array from the runtime's recycled host memory (no page faults; :mod:`hpu.core.hostmem`),
    or from ``numpy.empty`` when the pool has none."""
    return rt.host_pool.empty_or_new(math.prod(int(d) for d in shape), dtype).reshape(shape)


def _in_pool(rt: Runtime, r: int, m: int, fn: Callable[[slice, slice], Any], split_columns: bool = True) -> None:
    """``fn(row_slice, column_slice)`` over blocks covering ``(r, m)``, one task a block in ``rt``'s pool.

    Blocks of whole rows; a single row (``split_columns``) in column chunks.
    At least :data:`_TASK_ELEMENTS` elements a task, at most one task a thread.
    The caller holds ``rt.call()`` (every public entry point does).
    """
    tasks = max(1, min(rt.threads, (r * m) // _TASK_ELEMENTS))
    if tasks == 1 or (r == 1 and not split_columns):
        fn(slice(0, r), slice(0, m))
        return
    if r == 1:
        b = np.linspace(0, m, tasks + 1).astype(np.int64)
        blocks = [(slice(0, 1), slice(int(b[i]), int(b[i + 1]))) for i in range(tasks)]
    else:
        b = np.linspace(0, r, min(tasks, r) + 1).astype(np.int64)
        blocks = [(slice(int(b[i]), int(b[i + 1])), slice(0, m)) for i in range(len(b) - 1)]
    wait_all(rt.pool.submit(fn, rs, cs) for rs, cs in blocks)
