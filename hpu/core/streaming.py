"""Large host copies by streaming (non-temporal) stores.

A plain copy (``numpy.copyto``, glibc's ``memcpy``) reads every destination
cache line into the cache before writing it (read for ownership) and evicts it
later: three passes over memory for two.  Streaming stores write whole lines
straight to memory.  glibc switches to them only above its
``x86_non_temporal_threshold``, which it derives from the shared cache: 151 MiB
on the H100 benchmark machine (``experiments/results/h100/glibc_tunables.txt``),
far above the 4-8 MiB pieces that hpu stages, and settable only before a
process starts (``GLIBC_TUNABLES``).  So hpu brings its own: a small C library
(``hpu/core/_streamcopy.c``, built at install where a compiler is found),
called through :mod:`ctypes`, which releases the GIL for the copy.

``experiments/bench_bus.py`` times both ways of staging; the pipeline's
figures on the H100 machine are in ``experiments/README.md`` (*Streaming
copies*).

The same library stages a copy in pieces by threads of its own
(:class:`NativeStaging`): Python's threads pass the global interpreter lock
from one to the next, so that a pool of them starts its staging tasks one
after another, each a thread's wake-up after the one before.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import operator
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .util import native_library

log = logging.getLogger("hpu")

__all__ = ["STREAM_MIN_BYTES", "NativeStaging", "copy_into", "native_staging_available", "stream_copy",
           "streaming_available"]

#: Copies of fewer bytes go through ``numpy.copyto``: small copies gain nothing, and their destination may be read
#: again soon (from the cache, which streaming stores bypass).  glibc's own threshold when set low on the H100
#: machine (``GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=0x40000``, ``experiments/README.md``).
STREAM_MIN_BYTES = 256 << 10


@functools.cache
def _loaded() -> Any:
    """The compiled library, or None (not built, or not loadable)."""
    return native_library("hpu.core._streamcopy")


@functools.cache
def _library() -> Any:
    """The compiled copy function, or None (not built, not loadable, or built where it does not stream)."""
    lib = _loaded()
    if lib is None:
        return None
    try:
        fn, streams = lib.hpu_stream_copy, lib.hpu_streams
    except AttributeError as exc:  # pragma: no cover - a broken build
        log.warning("hpu: the streaming copy library lacks %s; using numpy.copyto", exc)
        return None
    streams.argtypes, streams.restype = [], ctypes.c_int
    if not streams():  # built for a machine without streaming stores: memcpy, as numpy's copy
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t], None
    return fn


def streaming_available() -> bool:
    """Whether :func:`stream_copy` streams (the compiled library is present, built for x86-64) rather than calling
    ``numpy.copyto``."""
    return _library() is not None


def _contiguous_bytes(a: np.ndarray) -> bool:
    return bool(a.flags.c_contiguous) and not a.dtype.hasobject


def stream_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` by streaming stores where that applies, else ``numpy.copyto``.

    Streams when the compiled library is present (:func:`streaming_available`),
    both are numpy arrays, C-contiguous, of the same dtype and shape, hold no Python
    objects, may not overlap (``numpy.may_share_memory``), and hold at least :data:`STREAM_MIN_BYTES`.
    After the call the bytes are in memory (a store fence), visible to a DMA
    engine or another thread.

    Parameters
    ----------
    dst : numpy.ndarray
        Written; any shape.
    src : array_like
        Read; broadcastable to ``dst`` (numpy's rules apply where it does not stream).

    Raises
    ------
    ValueError, TypeError
        As ``numpy.copyto``, for shapes or dtypes it refuses.
    """
    fn = _library()
    if (fn is None or not (isinstance(dst, np.ndarray) and isinstance(src, np.ndarray))
            or src.nbytes < STREAM_MIN_BYTES or src.shape != dst.shape or src.dtype != dst.dtype
            or not (_contiguous_bytes(src) and _contiguous_bytes(dst)) or not dst.flags.writeable
            or np.may_share_memory(dst, src)):
        np.copyto(dst, src)
        return
    fn(dst.ctypes.data, src.ctypes.data, src.nbytes)


def copy_into(dst: np.ndarray, src: np.ndarray, stream: bool) -> None:
    """:func:`stream_copy` when ``stream``, else ``numpy.copyto(dst, src)`` (for side-by-side measurements:
    :attr:`hpu.sorting.pipeline.PipelineOptions.stream_copies`)."""
    if stream:
        stream_copy(dst, src)
    else:
        np.copyto(dst, src)


def _check_pair(dst: np.ndarray, src: np.ndarray, what: str) -> None:
    """Raise as :class:`NativeStaging` does for ``what``'s arrays (a piece, or an array and its destination) that
    are not C-contiguous, whose destination is read-only, or that hold Python objects (copied as raw bytes, their
    references would not be counted)."""
    if not (dst.flags.c_contiguous and src.flags.c_contiguous):
        raise ValueError(f"{what}: both arrays must be C-contiguous")
    if not dst.flags.writeable:
        raise ValueError(f"{what}: the destination is read-only")
    if dst.dtype.hasobject or src.dtype.hasobject:
        raise TypeError(f"{what}: arrays holding Python objects cannot be copied as bytes")


def _address(a: np.ndarray) -> int:
    """The address of ``a``'s first element."""
    return a.__array_interface__["data"][0]


class _Job(ctypes.Structure):
    """``struct hpu_stage_job`` of ``hpu/core/_streamcopy.c``."""

    _fields_ = [("spans", ctypes.c_void_p), ("events", ctypes.c_void_p), ("set_status", ctypes.c_void_p),
                ("times", ctypes.c_void_p), ("pieces", ctypes.c_int64), ("stream_from", ctypes.c_int64),
                ("helpers", ctypes.c_int32), ("most", ctypes.c_int32), ("slice", ctypes.c_int64),
                ("first", ctypes.c_void_p), ("state", ctypes.c_void_p), ("next", ctypes.c_int64),
                ("status", ctypes.c_int32), ("joined", ctypes.c_int32), ("left", ctypes.c_int32),
                ("queued", ctypes.c_void_p)]


@functools.cache
def _stager() -> tuple[Any, Any, Any] | None:
    """The compiled stager's start, finish and events functions, or None."""
    lib = _loaded()
    try:
        start, finish, events = lib.hpu_stage_start, lib.hpu_stage_finish, lib.hpu_stage_events
    except AttributeError:  # not built, or an older build
        return None
    start.argtypes, start.restype = [ctypes.POINTER(_Job)], ctypes.c_int
    finish.argtypes, finish.restype = [ctypes.POINTER(_Job)], ctypes.c_int32
    events.argtypes, events.restype = [ctypes.POINTER(_Job), ctypes.c_void_p], ctypes.c_int32
    return start, finish, events


@functools.cache
def _set_user_event_status() -> int:
    """The address of OpenCL's ``clSetUserEventStatus`` in the library that pyopencl calls."""
    import pyopencl._cl as cl_module  # its OpenCL library is among the extension's dependencies, which dlsym searches

    return ctypes.cast(ctypes.CDLL(cl_module.__file__).clSetUserEventStatus, ctypes.c_void_p).value


def native_staging_available() -> bool:
    """Whether :class:`NativeStaging` can run: the compiled library is present with its stager."""
    return _stager() is not None


#: Jobs started and not yet finished: their memory must outlive the pool's threads' use of it (a set's add and
#: discard are atomic under the GIL).  A forked child has none of its parent's stager threads, nor their jobs.
_RUNNING: set[NativeStaging] = set()
os.register_at_fork(after_in_child=_RUNNING.clear)


def _clock_offset() -> float:
    """``time.perf_counter()`` minus the C library's ``CLOCK_MONOTONIC`` (the stager's clock): 0 where they are one
    clock (Linux), else measured once."""
    if time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)" or not hasattr(
            time, "CLOCK_MONOTONIC"):
        return 0.0
    return time.perf_counter() - time.clock_gettime(time.CLOCK_MONOTONIC)


_CLOCK_OFFSET = _clock_offset()


class NativeStaging:
    """Copies of pieces by the caller and threads of the compiled library's own pool, none holding the GIL.

    The pieces are taken in order, each once, by up to ``helpers`` pool
    threads (woken at once) from construction on, and by the caller in
    :meth:`finish`, which returns when every piece is copied.  With
    ``slice_bytes``, each piece's slices of that many bytes are taken in
    order instead, so that the threads copy each piece together and the
    pieces end one after another, about in order (a thread slowed on a
    piece's last slice may end it after the next); a piece a thread, the
    threads' pieces end at about one time.  Each piece's OpenCL user event,
    if given (here, or later by :meth:`set_events`), is set complete
    (``CL_COMPLETE``) as soon as its copy is done and the event given, by
    the thread that copied its last byte or by :meth:`set_events`.

    Parameters
    ----------
    pieces : sequence of (dst, src) numpy arrays
        Each copied ``dst[...] = src`` as raw bytes: both C-contiguous, of
        equal ``nbytes``, ``dst`` writeable, none overlapping another; kept
        referenced until :meth:`finish` returns.
    events : sequence of pyopencl.UserEvent, optional
        One per piece.
    helpers : int
        Pool threads wanted beside the caller (>= 0; the pool makes them
        as needed, at most ``most_threads`` and 256 in all; threads busy
        with another job join this one when free).
    stream : bool
        Copy pieces (or slices) of at least :data:`STREAM_MIN_BYTES` by
        streaming stores, as :func:`stream_copy` does (where the library
        was built for them), rather than all by ``memcpy``.
    most_threads : int
        The most threads the pool may hold for this job (default 256), so
        that concurrent jobs of a runtime of ``k`` threads share ``k``.
    slice_bytes : int
        > 0: copy each piece in slices of this many bytes (the last one
        shorter), each slice by whichever thread takes it; 0 (default):
        each piece by one thread.

    Raises
    ------
    RuntimeError
        The library or its stager is not available
        (:func:`native_staging_available`).
    ValueError
        A piece's arrays not C-contiguous, of different byte lengths, or
        ``dst`` read-only; ``events`` of another length than ``pieces``;
        ``slice_bytes`` negative or from ``2**63`` on.
    TypeError
        A piece's arrays holding Python objects (copied as raw bytes, their
        references would not be counted); ``slice_bytes`` not an integer
        (a bool included).

    Attributes
    ----------
    times : numpy.ndarray or None
        :meth:`finish`'s value once it has returned; None before.
    """

    def __init__(self, pieces: Sequence[tuple[np.ndarray, np.ndarray]], events: Sequence[Any] | None = None, *,
                 helpers: int, stream: bool, most_threads: int = 256, slice_bytes: int = 0) -> None:
        spans = []
        for k, (dst, src) in enumerate(pieces):
            _check_pair(dst, src, f"piece {k}")
            if dst.nbytes != src.nbytes:
                raise ValueError(f"piece {k}: both arrays must be of one byte length")
            spans += (_address(src), _address(dst), src.nbytes)
        self._start(spans, list(pieces), events, helpers, stream, most_threads, slice_bytes)

    @classmethod
    def of_ranges(cls, arrays: Sequence[tuple[np.ndarray, np.ndarray, Sequence[tuple[int, int]]]],
                  events: Sequence[Any] | None = None, *, helpers: int, stream: bool,
                  most_threads: int = 256, slice_bytes: int = 0) -> NativeStaging:
        """The staging of element ranges: for each ``(dst, src, ranges)`` of ``arrays`` (1-D arrays), each
        ``(a, b)`` of ``ranges`` (integers) is a piece ``dst[a:b] = src[a:b]``, taken in that order, the arrays'
        pieces one after another (``events``: one per piece, in that order).  As the constructor's ``pieces``
        (no piece may overlap another's destination or any source), without an array object a piece, so that the
        copies start sooner (a call's code before its copies start runs with cold caches).

        Raises
        ------
        ValueError
            ``dst`` and ``src`` not 1-D and C-contiguous, of different lengths or element sizes, ``dst``
            read-only, a range outside the arrays or reversed; and as the constructor.
        TypeError
            Arrays holding Python objects (copied as raw bytes, their references would not be counted), or a
            range's bounds not integers; and as the constructor.
        """
        spans: list[int] = []
        keep = []
        for i, (dst, src, ranges) in enumerate(arrays):
            _check_pair(dst, src, f"array {i}")
            if dst.ndim != 1 or dst.shape != src.shape or dst.itemsize != src.itemsize:
                raise ValueError(f"array {i}: both arrays must be 1-D, of one length and element size")
            n, w, s0, d0 = dst.shape[0], dst.itemsize, _address(src), _address(dst)
            for a, b in ranges:
                a, b = operator.index(a), operator.index(b)
                if not 0 <= a <= b <= n:
                    raise ValueError(f"array {i}: the range ({a}, {b}) lies outside [0, {n}] or is reversed")
                spans += (s0 + a * w, d0 + a * w, (b - a) * w)
            keep += [dst, src]
        self = cls.__new__(cls)
        self._start(spans, keep, events, helpers, stream, most_threads, slice_bytes)
        return self

    def _start(self, spans: list[int], keep: list, events: Sequence[Any] | None, helpers: int, stream: bool,
               most_threads: int, slice_bytes: int) -> None:
        """Start copying the pieces of ``spans`` (three numbers a piece: source address, destination address,
        bytes), keeping ``keep`` and ``events`` referenced until :meth:`finish`.  ctypes arrays rather than numpy's:
        cheaper to make and to take the address of."""
        funcs = _stager()
        if funcs is None:
            raise RuntimeError("hpu's compiled stager is not available")
        if isinstance(slice_bytes, (bool, np.bool_)):
            raise TypeError(f"slice_bytes must be an integer, got {slice_bytes!r}")
        slice_bytes = operator.index(slice_bytes)
        if not 0 <= slice_bytes < 1 << 63:
            raise ValueError(f"slice_bytes must lie in [0, 2**63), got {slice_bytes}")
        pieces = len(spans) // 3
        if events is not None and len(events) != pieces:
            raise ValueError(f"{len(events)} events for {pieces} pieces")
        self._finish, self._set_events = funcs[1], funcs[2]
        self._keep = (keep, list(events) if events is not None else None)
        self._spans = (ctypes.c_int64 * len(spans))(*spans)
        self._times = (ctypes.c_double * (3 * pieces))()  # start, end (seconds, the C library's clock), thread
        self._first = (ctypes.c_int64 * (pieces + 1))()  # the stager's own: each piece's first slice, and state
        self._state = (ctypes.c_int64 * (2 * pieces))()
        self.times: np.ndarray | None = None  # finish's
        self._handles = self._event_handles(events) if events is not None else None
        self._job = _Job(spans=ctypes.addressof(self._spans),
                         events=ctypes.addressof(self._handles) if self._handles else None,
                         set_status=_set_user_event_status(), times=ctypes.addressof(self._times), pieces=pieces,
                         stream_from=STREAM_MIN_BYTES if stream and _library() else -1,
                         helpers=max(0, int(helpers)), most=max(1, min(int(most_threads), 256)), slice=slice_bytes,
                         first=ctypes.addressof(self._first), state=ctypes.addressof(self._state))
        self._done = False
        _RUNNING.add(self)
        funcs[0](ctypes.byref(self._job))

    @staticmethod
    def _event_handles(events: Sequence[Any]) -> Any:
        """The OpenCL handles of ``events`` as a C array (None for no pieces)."""
        return (ctypes.c_void_p * len(events))(*[ev.int_ptr for ev in events]) if len(events) else None

    def set_events(self, events: Sequence[Any]) -> None:
        """Give the pieces' user events after the copies began (when none were given at construction): each piece
        already copied has its event set now, each other as soon as it is copied.  For a caller that starts the
        copies before it makes the events (making an event costs a call into the OpenCL driver).

        Raises
        ------
        ValueError
            Events given before, at construction or by an earlier call, or not one per piece.
        AttributeError
            An event that is not a pyopencl event (no ``int_ptr``); nothing is given then.
        RuntimeError
            :meth:`finish` has returned; or ``clSetUserEventStatus`` failed for a piece so far (every other event
            is still set; :meth:`finish` raises it again).
        """
        if self._done:
            raise RuntimeError("the staging has finished: its events can no longer be given")
        if self._keep[1] is not None:
            raise ValueError("the pieces' events were given already")
        pieces = len(self._times) // 3
        if len(events) != pieces:
            raise ValueError(f"{len(events)} events for {pieces} pieces")
        handles = self._event_handles(events)  # before anything is kept: an object that is no event fails here
        self._keep, self._handles = (self._keep[0], list(events)), handles
        if handles is None:
            return
        status = self._set_events(ctypes.byref(self._job), ctypes.addressof(self._handles))
        if status:
            raise RuntimeError(f"clSetUserEventStatus failed ({status}) while staging")

    def finish(self) -> np.ndarray:
        """Copy pieces on the calling thread until none is left, wait for the pool's threads; return ``times``,
        shape ``(pieces, 3)`` float64: each piece's start (its first slice's) and end (its last byte copied;
        ``time.perf_counter``'s seconds) and the thread that copied its last byte (0: the caller, ``k``: the pool's
        thread ``hpu-stage_{k - 1}``).  A second call returns at once.

        Raises
        ------
        RuntimeError
            ``clSetUserEventStatus`` failed for a piece (every piece is still copied and every other event set; an
            event whose setting failed may stay unset, and commands waiting for it with it).
        """
        if not self._done:
            status = self._finish(ctypes.byref(self._job))
            self._done = True
            _RUNNING.discard(self)
            self.times = np.frombuffer(self._times, dtype=np.float64).reshape(-1, 3)
            self.times[:, :2] += _CLOCK_OFFSET
            if status:
                raise RuntimeError(f"clSetUserEventStatus failed ({status}) while staging")
        return self.times
