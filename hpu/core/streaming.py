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
"""

from __future__ import annotations

import ctypes
import functools
import logging
from typing import Any

import numpy as np

from .util import native_library

log = logging.getLogger("hpu")

__all__ = ["STREAM_MIN_BYTES", "copy_into", "stream_copy", "streaming_available"]

#: Copies of fewer bytes go through ``numpy.copyto``: small copies gain nothing, and their destination may be read
#: again soon (from the cache, which streaming stores bypass).  glibc's own threshold when set low on the H100
#: machine (``GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=0x40000``, ``experiments/README.md``).
STREAM_MIN_BYTES = 256 << 10


@functools.cache
def _library() -> Any:
    """The compiled copy function, or None (not built, or not loadable)."""
    lib = native_library("hpu.core._streamcopy")
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
