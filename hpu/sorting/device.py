"""Stable, device-resident sort on an OpenCL device (the device half of fast mode).

On GPUs, a merge sort; its kernels (``kernels_cl/fastsort.cl``) sort in two stages:

1. *Leaf blocks*: one launch; each work-group sorts a block of
   ``tile = work_group_size * items_per_thread`` keys in local memory.
2. *Global merge passes*: ``ceil(log2(ceil(n / tile)))`` passes, each merging
   sorted runs of width ``w`` pairwise into runs of ``2 w``.  The output of a
   pass is cut into tiles of ``tile`` keys; a small kernel finds each tile's
   start in both runs by a binary search along the merge-path diagonal
   (co-rank), then one work-group per tile merges it through local memory.
   Every pass therefore uses all work-groups, however few runs remain.

Two buffers are used in turn (the output and one scratch buffer); all
launches go to the runtime's in-order queue without host round trips, and
the functions return the last launch's event.

On CPU devices (PoCL and the like), whose work-groups run as loops over
their work-items, an LSD radix sort of a CPU's shape instead
(``kernels_cl/radix.cl``, ``algorithm="radix"``): a few chunks per compute
unit, each counted and scattered by one work-item in a sequential loop,
``ceil(bits / 11)`` passes of at most 11-bit digits (Knuth, The Art of
Computer Programming vol. 3, section 5.2.5; per-chunk offsets as in Zagha
and Blelloch 1991).  The same radix sort in a GPU's shape
(``algorithm="tile-radix"``): ``ceil(bits / 8)`` passes, each a count per
tile of work-group size times 23 keys (7 of 8 bytes), a scan of the counts
in (digit, tile) order, and a scatter of each tile sorted by its digit in
local memory (Satish, Harris and Garland, "Designing efficient sorting
algorithms for manycore GPUs", IPDPS 2009, section 4).  On NVIDIA GPUs
(:func:`device_algorithms`) the same digits in one pass over the keys a
digit (``algorithm="onesweep"``, the pipeline's sort of 4-byte keys there:
:func:`fast_algorithm`): one read counts every pass's digits, then each
pass ranks a tile of keys stably by warp ballots and finds the counts of the
tiles before it by a decoupled look-back [4]_, [5]_.  Merges use the
merge kernels on every device.

The order is numpy's: integers by value; floats by value with -0.0 == +0.0
and every NaN after every number, all NaNs equal.  The sort is stable, so the
result is bit-for-bit ``np.sort(a, kind="stable")``.

References
----------
.. [1] O. Green, R. McColl and D. A. Bader, "GPU merge path: a GPU merging
   algorithm", Proc. 26th ACM Int. Conf. on Supercomputing (ICS), 2012.
.. [2] S. Odeh, O. Green, Z. Mwassi, O. Shmueli and Y. Birk, "Merge path -
   parallel merging made simple", IEEE IPDPS Workshops, 2012.
.. [3] S. Baxter, "moderngpu: Mergesort", NVIDIA Research, 2013.
.. [4] A. Adinets and D. Merrill, "Onesweep: a faster least significant digit
   radix sort for GPUs", arXiv:2206.01784, 2022.
.. [5] D. Merrill and M. Garland, "Single-pass parallel prefix scan with
   decoupled look-back", NVIDIA Technical Report NVR-2016-002, 2016.
"""

from __future__ import annotations

import functools
import operator
import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..core.hybrid import as_device_failure
from ..core.kernels import CL_TYPES
from ..core.runtime import Runtime, resolve_runtime

try:
    import pyopencl as cl
except Exception:  # pragma: no cover - CPU-only installs
    cl = None

__all__ = ["SUPPORTED_DTYPES", "DeviceSorter", "default_algorithm", "device_algorithms", "device_sort",
           "fast_algorithm", "merge_buffers", "row_block", "sort_buffer"]

#: Key dtypes the device sort handles (the keys of :data:`hpu.core.kernels.CL_TYPES`).
SUPPORTED_DTYPES: tuple[np.dtype, ...] = tuple(CL_TYPES)

_DEFAULT_WORK_GROUP_SIZE = 256
#: Keys per work-item by key size in bytes; odd, so that the strided
#: local-memory accesses of the block transposes are free of bank conflicts.
_DEFAULT_ITEMS = {4: 17, 8: 11}
_PARTITION_GROUP = 64
#: Fewest work-items of :meth:`DeviceSorter.for_rows`'s work-groups (a warp of NVIDIA's GPUs).
ROW_MIN_GROUP = 32
_TILE_KERNELS = ("leaf_sort", "merge_pass", "merge_ranges")
#: The radix sort's widest digit (2^11 counters per chunk) and chunks per compute unit.
RADIX_BITS = 11
_RADIX_CHUNKS_PER_UNIT = 4
#: Fewest keys per radix chunk: below it a chunk's counters cost more than its keys.
_RADIX_MIN_CHUNK = 1 << 12
#: The radix kernels count in 32-bit integers: longer sorts take the merge sort.
_RADIX_MAX_KEYS = 1 << 31
#: The GPU-shaped radix sort's digit (its tiles sort locally by two 4-bit halves), work-items per work-group, and
#: keys per work-item by key size in bytes (odd: conflict-free strided reads of local memory).
TILE_RADIX_BITS = 8
_TILE_RADIX_WG = 256
_TILE_RADIX_ITEMS = {4: 23, 8: 7}
_SCAN_BLOCK_ITEMS = 16
#: The one-pass-a-digit radix sort's digit, work-items per work-group (one a digit) and keys per work-item by key
#: size in bytes; its status words count below 2^30 keys.
ONESWEEP_BITS = 8
_ONESWEEP_WG = 256
_ONESWEEP_ITEMS = {4: 16, 8: 8}
_ONESWEEP_MAX_KEYS = 1 << 30
ALGORITHMS = ("merge", "radix", "tile-radix", "onesweep")
_KEY_KINDS = {"u": 0, "i": 1, "f": 2}


def _key_dtype(runtime: Runtime, dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in CL_TYPES or not dt.isnative:
        names = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise TypeError(f"the device sort supports the native dtypes {names}; got {dt.str!r} ({dt})")
    if not runtime.supports(dt):
        raise TypeError(f"{dt} keys need the cl_khr_fp64 extension, which {runtime.device_name} lacks")
    return dt


def _count(name: str, value: Any) -> int:
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def _check_range(name: str, buf: Any, offset: int, count: int, itemsize: int) -> None:
    if not isinstance(buf, cl.MemoryObjectHolder):
        raise TypeError(f"{name} must be a pyopencl buffer, got {type(buf).__name__}")
    if (offset + count) * itemsize > buf.size:
        raise ValueError(f"{name} holds {buf.size} bytes, too few for elements [{offset}, {offset + count}) "
                         f"of {itemsize} bytes")


def default_algorithm(device: Any) -> str:
    """:class:`DeviceSorter`'s default ``algorithm`` on the OpenCL ``device``: ``"radix"`` on a device of type CPU
    (its work-groups run as loops), else ``"merge"`` (on the H100 the GPU-shaped ``"tile-radix"`` took 0.95-1.04
    times the merge sort's time from 2^20 to 2^26 int32 keys, more below: ``experiments/results/h100/
    fastsort_tile_radix_items23.json``)."""
    return "radix" if device.type & cl.device_type.CPU else "merge"


def fast_algorithm(device: Any, dtype: Any) -> str:
    """The device sort of hpu's pipeline (fast mode) for keys of ``dtype`` on the OpenCL ``device`` where
    :attr:`hpu.PipelineOptions.device_sort` is None: ``"onesweep"`` for 4-byte keys where the device runs it (on
    the H100 0.56-0.86 times the merge sort's time from 2^16 to 2^26 int32 keys, and ``hpu.sort`` of 2^24 about
    0.3 ms faster: ``experiments/results/h100/onesweep/``), else :func:`default_algorithm` (8-byte keys: the
    key-value sort's packed keys gained nothing)."""
    if np.dtype(dtype).itemsize == 4 and "onesweep" in device_algorithms(device):
        return "onesweep"
    return default_algorithm(device)


@functools.lru_cache(maxsize=64)
def device_algorithms(device: Any) -> tuple[str, ...]:
    """The :data:`ALGORITHMS` of :class:`DeviceSorter` that the OpenCL ``device`` runs: all but ``"onesweep"``
    (inline PTX with warp votes: NVIDIA's own OpenCL platform, a GPU of compute capability 7.0 or later, where the
    device reports it) on any other device.  Cached: every sort asks, and each of its device queries costs a call
    into the driver."""
    nvidia = ("NVIDIA" in device.vendor.upper() and "NVIDIA" in device.platform.name.upper()
              and not device.type & cl.device_type.CPU)
    if nvidia and getattr(device, "compute_capability_major_nv", 7) >= 7:
        return ALGORITHMS
    return tuple(a for a in ALGORITHMS if a != "onesweep")


def row_block(m: int, itemsize: int) -> int:
    """Keys (pads included) of the local-memory block that sorts a row of ``m >= 1`` keys of ``itemsize`` bytes
    (:meth:`DeviceSorter.for_rows`): ``wg * items``, ``items`` the default keys per work-item (17 for 4-byte keys,
    11 for 8-byte ones) and ``wg`` the smallest power of two, at least :data:`ROW_MIN_GROUP`, with ``wg * items
    >= m`` (before the device's largest work-group caps it).

    Raises
    ------
    ValueError
        ``itemsize`` other than 4 or 8 (the device sort's keys).
    """
    if itemsize not in _DEFAULT_ITEMS:
        raise ValueError(f"the device sort's keys have 4 or 8 bytes, not {itemsize}")
    items = _DEFAULT_ITEMS[itemsize]
    return max(ROW_MIN_GROUP, 1 << (max(-(-int(m) // items) - 1, 0)).bit_length()) * items


def _power_of_two(value: int) -> bool:
    return value >= 1 and value & (value - 1) == 0


class DeviceSorter:
    """Compiled sort and merge kernels for one runtime and key dtype, plus reusable scratch.

    Parameters
    ----------
    runtime : Runtime or DeviceLease
        Supplies the device, context, in-order queue and program cache; a
        :class:`~hpu.core.runtime.DeviceLease` gives a sorter of one call's
        own queue (what fast mode uses, so that concurrent sorts never share
        a queue or scratch).
    dtype : dtype-like
        Key dtype, one of :data:`SUPPORTED_DTYPES` in native byte order.
    work_group_size : int, optional
        Work-items per work-group of the tile kernels, a power of two.
        Default: 256, halved until the kernels' ``WORK_GROUP_SIZE`` and the
        device's local memory allow it.
    items_per_thread : int, optional
        Keys per work-item (default 17 for 4-byte keys, 11 for 8-byte keys).
        ``tile = work_group_size * items_per_thread`` is both the leaf block
        and the output tile of a merge.
    algorithm : {"merge", "radix", "tile-radix", "onesweep"}, optional
        How :meth:`sort` sorts: the merge sort, or an LSD radix sort of
        ``kernels_cl/radix.cl`` in a CPU's shape (``"radix"``) or a GPU's
        (``"tile-radix"``; ``"onesweep"``, one pass over the keys a digit,
        NVIDIA GPUs only: :func:`device_algorithms`), these for fewer than
        ``2**31`` keys (``"onesweep"``: ``2**30``; longer sorts take the
        merge sort).  Default: :func:`default_algorithm`.

    Attributes
    ----------
    dtype : numpy.dtype
    work_group_size, items_per_thread, tile : int
    algorithm : str

    Raises
    ------
    TypeError
        Unsupported dtype, or float64 on a device without cl_khr_fp64.
    ValueError
        A ``work_group_size`` that is not a power of two, ``items_per_thread
        < 1``, a tile that does not fit the device, or an unknown
        ``algorithm`` or one the device does not run (:func:`device_algorithms`).
    NoDeviceError
        The runtime is CPU-only.

    Notes
    -----
    Build one per (lease or runtime, dtype) and reuse it: its scratch buffer
    (``n`` keys) and partition buffer (``8 * ceil(n / tile)`` bytes), or the
    radix sorts' counters (``4 * 2**digit`` bytes per chunk or tile, and the
    tile radix sort's sums of blocks of them), are kept and grown as needed.
    It relies on its queue being in order: work of successive calls, which
    share the scratch buffer, runs in call order.
    Enqueueing from several threads is serialised by a lock.

    The device must compare floats by IEEE 754 (no denormal flushing), as
    NVIDIA's and PoCL's OpenCL do unless built with ``-cl-denorms-are-zero``.
    """

    def __init__(self, runtime: Runtime, dtype: Any, *, work_group_size: int | None = None,
                 items_per_thread: int | None = None, algorithm: str | None = None):
        runtime.require_device()
        self.runtime = runtime
        self.dtype = _key_dtype(runtime, dtype)
        if algorithm is None:
            algorithm = default_algorithm(runtime.device)
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
        self.algorithm = algorithm
        items = _DEFAULT_ITEMS[self.dtype.itemsize] if items_per_thread is None else items_per_thread
        self.items_per_thread = _count("items_per_thread", items)
        if self.items_per_thread < 1:
            raise ValueError("items_per_thread must be >= 1")
        if work_group_size is not None:  # a Python int from here on (numpy's wrap, and lack bit_length)
            work_group_size = _count("work_group_size", work_group_size)
            if not _power_of_two(work_group_size):
                raise ValueError(f"work_group_size must be a power of two, got {work_group_size}")
        self._kernels = self._build(work_group_size)
        self.tile = self.work_group_size * self.items_per_thread
        self._lock = threading.Lock()
        self._scratch: Any = None
        self._partitions: Any = None
        self._counts: Any = None
        self._sums: Any = None
        if algorithm == "radix":
            self._build_radix()
        elif algorithm == "tile-radix":
            self._build_tile_radix()
        elif algorithm == "onesweep":
            self._build_onesweep()

    @classmethod
    def of_lease(cls, lease: Any, dtype: Any, algorithm: str | None = None) -> DeviceSorter:
        """The :class:`hpu.DeviceLease`'s sorter for ``dtype`` keys with the default sizes and ``algorithm``
        (None: the device's default), made once per lease."""
        dt = np.dtype(dtype).newbyteorder("=")
        return lease.cached(("sorter", dt.str, algorithm), lambda: cls(lease, dt, algorithm=algorithm))

    @classmethod
    def for_rows(cls, lease: Any, dtype: Any, m: int) -> DeviceSorter | None:
        """The :class:`hpu.DeviceLease`'s sorter of :meth:`sort_rows` for rows of ``m`` keys of ``dtype``: the
        merge kernels with the smallest work-group (a power of two, at least :data:`ROW_MIN_GROUP` work-items)
        whose tile holds ``m`` keys, made once per lease; None where even the largest work-group's tile (that of
        :meth:`of_lease`'s merge sorter) is shorter than ``m``."""
        dt = np.dtype(dtype).newbyteorder("=")
        largest = cls.of_lease(lease, dt, "merge")
        if m > largest.tile:
            return None
        wg = row_block(m, dt.itemsize) // largest.items_per_thread
        if wg >= largest.work_group_size:
            return largest
        return lease.cached(("row-sorter", dt.str, wg), lambda: cls(lease, dt, work_group_size=wg, algorithm="merge"))

    def _build(self, requested: int | None) -> dict[str, Any]:
        dev = self.runtime.device
        ctype, pad = CL_TYPES[self.dtype]
        wg = requested or 1 << (min(_DEFAULT_WORK_GROUP_SIZE, dev.max_work_group_size).bit_length() - 1)
        while True:
            local_bytes = (wg * self.items_per_thread + 1) * self.dtype.itemsize
            if wg <= dev.max_work_group_size and local_bytes <= dev.local_mem_size:
                prg = self.runtime.program("fastsort", defines={
                    "KEY_T": ctype, "KEY_PAD": pad, "KEY_IS_FLOAT": int(self.dtype.kind == "f"),
                    "KEY_FP64": int(self.dtype == np.float64), "WG": wg, "ITEMS": self.items_per_thread})
                kernels = {name: cl.Kernel(prg, name) for name in
                           (*_TILE_KERNELS, "partition_pass", "partition_ranges", "rank_bounds")}
                info = cl.kernel_work_group_info
                if all(kernels[k].get_work_group_info(info.WORK_GROUP_SIZE, dev) >= wg
                       and kernels[k].get_work_group_info(info.LOCAL_MEM_SIZE, dev) <= dev.local_mem_size
                       for k in _TILE_KERNELS):
                    break
            if requested is not None or wg == 1:
                raise ValueError(f"work_group_size={wg} with items_per_thread={self.items_per_thread} does not "
                                 f"fit {self.runtime.device_name} ({self.dtype} keys)")
            wg //= 2
        self.work_group_size = wg
        part_limit = min(kernels[k].get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, dev)
                         for k in ("partition_pass", "partition_ranges"))
        self._partition_group = 1 << (min(_PARTITION_GROUP, part_limit).bit_length() - 1)
        i64 = np.int64
        kernels["leaf_sort"].set_scalar_arg_dtypes([None, None, i64, i64, np.int32])
        kernels["partition_pass"].set_scalar_arg_dtypes([None, i64, np.int32, None, i64])
        kernels["merge_pass"].set_scalar_arg_dtypes([None, None, i64, np.int32, None])
        kernels["partition_ranges"].set_scalar_arg_dtypes([None, i64, i64, None, i64, i64, None, i64])
        kernels["merge_ranges"].set_scalar_arg_dtypes([None, i64, i64, None, i64, i64, None, i64, None])
        kernels["rank_bounds"].set_scalar_arg_dtypes([None, i64, None, np.int32, None])
        return kernels

    def _radix_defines(self) -> dict[str, Any]:
        """The macros of ``kernels_cl/radix.cl`` for this sorter's keys (both shapes of the radix sort)."""
        order = "ulong" if self.dtype.itemsize == 8 else "uint"
        return {"KEY_T": CL_TYPES[self.dtype][0], "ORDER_T": order, "AS_ORDER": f"as_{order}",
                "KEY_KIND": _KEY_KINDS[self.dtype.kind], "KEY_FP64": int(self.dtype == np.float64),
                "RADIX_BITS": RADIX_BITS}

    def _build_radix(self) -> None:
        """The CPU-shaped radix sort's kernels: one work-item a chunk, a few chunks per compute unit."""
        u32 = np.uint32
        prg = self.runtime.program("radix", defines=self._radix_defines())
        kernels = {name: cl.Kernel(prg, name) for name in ("radix_count", "radix_offsets", "radix_scatter")}
        kernels["radix_count"].set_scalar_arg_dtypes([None, u32, u32, u32, None])
        kernels["radix_offsets"].set_scalar_arg_dtypes([None, u32])
        kernels["radix_scatter"].set_scalar_arg_dtypes([None, None, u32, u32, u32, None])
        self._radix_units = max(1, int(self.runtime.device.max_compute_units)) * _RADIX_CHUNKS_PER_UNIT
        self._kernels.update(kernels)

    def _build_tile_radix(self) -> None:
        """The GPU-shaped radix sort's kernels: work-groups of ``_TILE_RADIX_WG``, the most keys a work-item (odd,
        at most ``_TILE_RADIX_ITEMS``) that the device's local memory holds."""
        wg, dev, size = _TILE_RADIX_WG, self.runtime.device, self.dtype.itemsize
        items = _TILE_RADIX_ITEMS[size]
        fixed = 4 * (16 * wg + 16 * wg // 32 + 2 * 256 + wg)  # radix_tile_scatter's counters, offsets, scan
        while items > 1 and wg * items * size + fixed > dev.local_mem_size:
            items -= 2  # odd, as the merge kernels' ITEMS
        names = ("radix_tile_count", "radix_scan_blocks", "radix_scan_sums", "radix_tile_scatter")
        misfit = ValueError(f"the tile radix sort's kernels (work-groups of {wg}) do not fit "
                            f"{self.runtime.device_name} ({self.dtype} keys)")
        if wg > dev.max_work_group_size or wg * items * size + fixed > dev.local_mem_size:
            raise misfit
        prg = self.runtime.program("radix", defines={**self._radix_defines(), "RADIX_WG": wg, "RADIX_ITEMS": items,
                                                     "SCAN_ITEMS": _SCAN_BLOCK_ITEMS})
        kernels = {name: cl.Kernel(prg, name) for name in names}
        if any(kernels[k].get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, dev) < wg for k in names):
            raise misfit
        u32 = np.uint32
        kernels["radix_tile_count"].set_scalar_arg_dtypes([None, u32, u32, u32, None])
        kernels["radix_scan_blocks"].set_scalar_arg_dtypes([None, u32, None])
        kernels["radix_scan_sums"].set_scalar_arg_dtypes([None, u32])
        kernels["radix_tile_scatter"].set_scalar_arg_dtypes([None, None, u32, u32, u32, None, None])
        self._radix_tile = (wg, wg * items)
        self._kernels.update(kernels)

    def _build_onesweep(self) -> None:
        """The one-pass-a-digit radix sort's kernels (``kernels_cl/radix.cl``, inline PTX: NVIDIA GPUs only)."""
        dev = self.runtime.device
        if "onesweep" not in device_algorithms(dev):
            raise ValueError(f"the onesweep radix sort needs an NVIDIA GPU (inline PTX), "
                             f"not {self.runtime.device_name}")
        items = _ONESWEEP_ITEMS[self.dtype.itemsize]
        prg = self.runtime.program("radix", defines={**self._radix_defines(), "ONESWEEP_WG": _ONESWEEP_WG,
                                                     "ONESWEEP_ITEMS": items})
        kernels = {name: cl.Kernel(prg, name) for name in ("onesweep_count", "onesweep_scan", "onesweep_pass")}
        u32 = np.uint32
        kernels["onesweep_count"].set_scalar_arg_dtypes([None, u32, u32, u32, None])
        kernels["onesweep_scan"].set_scalar_arg_dtypes([None, u32])
        kernels["onesweep_pass"].set_scalar_arg_dtypes([None, None, u32, u32, u32, u32, u32, None])
        self._onesweep_tile = _ONESWEEP_WG * items
        self._kernels.update(kernels)

    def __repr__(self) -> str:
        return (f"DeviceSorter({self.dtype}, algorithm={self.algorithm!r}, work_group_size={self.work_group_size}, "
                f"items_per_thread={self.items_per_thread}, device={self.runtime.device_name!r})")

    # -- helpers ---------------------------------------------------------------
    def passes(self, n: int) -> int:
        """Number of global merge passes for ``n`` keys: ``ceil(log2(ceil(n / tile)))``, 0 if ``n <= tile``."""
        tiles = -(-_count("n", n) // self.tile)
        return max(tiles - 1, 0).bit_length()

    def _buffer(self, attr: str, nbytes: int) -> Any:
        buf = getattr(self, attr)
        if buf is None or buf.size < nbytes:
            buf = cl.Buffer(self.runtime.context, cl.mem_flags.READ_WRITE, nbytes)
            setattr(self, attr, buf)
        return buf

    def _new_output(self, buf: Any, count: int) -> Any:
        return buf if buf is not None else cl.Buffer(self.runtime.context, cl.mem_flags.READ_WRITE,
                                                     count * self.dtype.itemsize)

    def _partition_launch(self, tiles: int) -> tuple[tuple[int], tuple[int]]:
        g = self._partition_group
        return (-(-tiles // g) * g,), (g,)

    # -- public ----------------------------------------------------------------
    def sort(self, buf: Any, n: int, *, out: Any = None, wait_for: Sequence[Any] | None = None,
             bits: int | None = None) -> tuple[Any, Any]:
        """Sort the first ``n`` keys of ``buf`` on the device, stably.

        Parameters
        ----------
        buf : pyopencl.Buffer
            Holds at least ``n`` keys of ``self.dtype`` (``n * itemsize``
            bytes); only ``buf[:n]`` is read, and it is left as it is unless
            ``out`` is ``buf``.
        n : int
            Number of keys, any value >= 0.
        out : pyopencl.Buffer, optional
            Receives the ``n`` sorted keys in its first ``n`` slots (the rest
            is untouched).  May be ``buf`` (in-place sort); must not
            otherwise overlap it.  Default: a new buffer of ``n`` keys.
        wait_for : sequence of pyopencl.Event, optional
            Events the first launch waits for.
        bits : int, optional
            Unsigned keys only: every key is below ``2**bits`` (``0 <= bits
            <= 8 * itemsize``), so the radix sorts take ``ceil(bits /
            RADIX_BITS)`` (``"radix"``), ``ceil(bits / TILE_RADIX_BITS)``
            (``"tile-radix"``) or ``ceil(bits / ONESWEEP_BITS)``
            (``"onesweep"``) passes rather than those of the whole width
            (the merge sort ignores it).  Larger keys are then sorted by
            their low ``bits`` bits only.

        Returns
        -------
        out : pyopencl.Buffer
            The sorted keys (for ``n == 0`` with no ``out``: ``buf`` itself).
        event : pyopencl.Event
            Completes when ``out`` holds the result; nothing waits on the
            host before that.

        Raises
        ------
        TypeError
            ``buf``/``out`` is not a buffer or ``n`` not an integer.
        ValueError
            ``n < 0``, a buffer too small for ``n`` keys, or ``bits`` out of
            range or given for keys that are not unsigned.
        """
        n = _count("n", n)
        size = self.dtype.itemsize
        _check_range("buf", buf, 0, n, size)
        if out is not None:
            _check_range("out", out, 0, n, size)
        if bits is not None:  # a Python int: the passes' arithmetic wrapped in a numpy unsigned scalar
            bits = _count("bits", bits)
            if self.dtype.kind != "u" or not 0 <= bits <= 8 * size:
                raise ValueError(f"bits={bits} needs unsigned keys and 0 <= bits <= {8 * size}; keys are {self.dtype}")
        queue = self.runtime.queue
        if n == 0:
            return (buf if out is None else out), cl.enqueue_marker(queue, wait_for=wait_for)
        out = self._new_output(out, n)
        radix = self._radix_shape()
        if radix is not None and n < radix[1]:
            return out, self._radix_sort(buf, n, out, wait_for, 8 * size if bits is None else bits)
        tiles = -(-n // self.tile)
        passes = self.passes(n)
        k = self._kernels
        wg = self.work_group_size
        with self._lock:
            scratch = self._buffer("_scratch", n * size) if passes else None
            part = self._buffer("_partitions", tiles * 8) if passes else None
            # The last pass must write out: start in out for an even number of passes.
            src, dst = (out, scratch) if passes % 2 == 0 else (scratch, out)
            event = k["leaf_sort"](queue, (tiles * wg,), (wg,), buf, src, 0, n, self.tile, wait_for=wait_for)
            part_global, part_local = self._partition_launch(tiles)
            for level in range(passes):  # runs of tile << level keys -> tile << (level + 1)
                k["partition_pass"](queue, part_global, part_local, src, n, level, part, tiles)
                event = k["merge_pass"](queue, (tiles * wg,), (wg,), src, dst, n, level, part)
                src, dst = dst, src
        return out, event

    def sort_rows(self, buf: Any, start: int, stop: int, m: int, *, out: Any = None,
                  wait_for: Sequence[Any] | None = None) -> Any:
        """Sort each row of ``m`` keys of ``buf[start:stop]`` on the device, stably: a segmented sort, one
        work-group a row (its leaf block sort in local memory), with no merge pass.

        Parameters
        ----------
        buf : pyopencl.Buffer
            Keys of ``self.dtype``: rows of ``m`` one after another from
            element ``start`` (the last row may be shorter: ``stop - start``
            need not be a multiple of ``m``).
        start, stop : int
            The element range, ``0 <= start <= stop``.
        m : int
            Keys per row, ``1 <= m <= self.tile``.
        out : pyopencl.Buffer, optional
            Receives the sorted rows at the same elements; default ``buf``
            (in place).  Must not otherwise overlap ``buf``'s range.
        wait_for : sequence of pyopencl.Event, optional

        Returns
        -------
        pyopencl.Event
            Completes when the rows are sorted.

        Raises
        ------
        TypeError, ValueError
            A non-buffer, bad counts, a range beyond a buffer, or ``m``
            outside ``[1, tile]``.
        """
        start, stop, m = _count("start", start), _count("stop", stop), _count("m", m)
        if not 1 <= m <= self.tile or stop < start:
            raise ValueError(f"rows of m={m} keys need 1 <= m <= tile={self.tile}, and start <= stop "
                             f"(got {start}, {stop})")
        size = self.dtype.itemsize
        out = buf if out is None else out
        _check_range("buf", buf, 0, stop, size)
        _check_range("out", out, 0, stop, size)
        rows = -(-(stop - start) // m)
        if rows == 0:
            return cl.enqueue_marker(self.runtime.queue, wait_for=wait_for)
        wg = self.work_group_size
        with self._lock:
            return self._kernels["leaf_sort"](self.runtime.queue, (rows * wg,), (wg,), buf, out, start, stop, m,
                                              wait_for=wait_for)

    def _radix_shape(self) -> tuple[int, int] | None:
        """(widest digit in bits, fewest keys left to the merge sort) of this sorter's radix sort; None for the merge
        sort."""
        return {"radix": (RADIX_BITS, _RADIX_MAX_KEYS), "tile-radix": (TILE_RADIX_BITS, _RADIX_MAX_KEYS),
                "onesweep": (ONESWEEP_BITS, _ONESWEEP_MAX_KEYS)}.get(self.algorithm)

    def _radix_sort(self, buf: Any, n: int, out: Any, wait_for: Sequence[Any] | None, bits: int) -> Any:
        """Enqueue the LSD radix sort of ``buf[:n]`` into ``out`` (``kernels_cl/radix.cl``); its last event."""
        queue, size = self.runtime.queue, self.dtype.itemsize
        passes = -(-bits // self._radix_shape()[0])
        if passes == 0:  # every key is 0: already sorted
            if out.int_ptr == buf.int_ptr:
                return cl.enqueue_marker(queue, wait_for=wait_for)
            return cl.enqueue_copy(queue, out, buf, byte_count=n * size, wait_for=wait_for)
        digit = -(-bits // passes)
        with self._lock:
            scratch = self._buffer("_scratch", n * size)
            if self.algorithm == "onesweep":
                one_pass, wait_for = self._onesweep(buf, n, digit, bits, wait_for)
            else:
                one_pass = self._chunk_pass(n, digit) if self.algorithm == "radix" else self._tile_pass(n, digit)
            # Passes write out and scratch in turn, the last one out; an in-place sort whose first pass
            # would write out (an odd number of passes) first moves the keys to scratch.
            src = buf
            if passes % 2 and out.int_ptr == buf.int_ptr:
                wait_for = [cl.enqueue_copy(queue, scratch, buf, byte_count=n * size, wait_for=wait_for)]
                src = scratch
            for p in range(passes):
                dst = out if (passes - 1 - p) % 2 == 0 else scratch
                event = one_pass(src, dst, p * digit, min(digit, bits - p * digit), wait_for)
                src, wait_for = dst, None
        return event

    def _chunk_pass(self, n: int, digit: int) -> Callable[[Any, Any, int, int, Any], Any]:
        """One pass of the CPU-shaped radix sort of ``n`` keys by at most ``digit`` bits, as ``(src, dst, shift,
        width, wait_for) -> event``: counts, offsets and scatter of a few chunks per compute unit."""
        queue, k = self.runtime.queue, self._kernels
        chunks = max(1, min(self._radix_units, n // _RADIX_MIN_CHUNK))
        counts = self._buffer("_counts", 4 * (1 << digit) * chunks)

        def one_pass(src: Any, dst: Any, shift: int, width: int, wait_for: Any) -> Any:
            bins = 1 << width
            k["radix_count"](queue, (chunks,), (1,), src, n, shift, bins, counts, wait_for=wait_for)
            k["radix_offsets"](queue, (1,), (1,), counts, bins * chunks)
            return k["radix_scatter"](queue, (chunks,), (1,), src, dst, n, shift, bins, counts)
        return one_pass

    def _tile_pass(self, n: int, digit: int) -> Callable[[Any, Any, int, int, Any], Any]:
        """One pass of the GPU-shaped radix sort of ``n`` keys by at most ``digit`` bits, as ``(src, dst, shift,
        width, wait_for) -> event``: per-tile counts, their scan in (digit, tile) order, the tiles' scatter."""
        queue, k = self.runtime.queue, self._kernels
        wg, tile = self._radix_tile
        tiles = -(-n // tile)
        counts = self._buffer("_counts", 4 * (1 << digit) * tiles)
        sums = self._buffer("_sums", 4 * -(-((1 << digit) * tiles) // (wg * _SCAN_BLOCK_ITEMS)))

        def one_pass(src: Any, dst: Any, shift: int, width: int, wait_for: Any) -> Any:
            bins = 1 << width
            m = bins * tiles
            blocks = -(-m // (wg * _SCAN_BLOCK_ITEMS))
            k["radix_tile_count"](queue, (tiles * wg,), (wg,), src, n, shift, bins, counts, wait_for=wait_for)
            k["radix_scan_blocks"](queue, (blocks * wg,), (wg,), counts, m, sums)
            k["radix_scan_sums"](queue, (wg,), (wg,), sums, blocks)
            return k["radix_tile_scatter"](queue, (tiles * wg,), (wg,), src, dst, n, shift, bins, counts, sums)
        return one_pass

    def _onesweep(self, buf: Any, n: int, digit: int, bits: int,
                  wait_for: Any) -> tuple[Callable[[Any, Any, int, int, Any], Any], list]:
        """The one-pass-a-digit radix sort of ``n`` keys of ``buf`` by digits of ``digit`` bits, ``bits`` in all:
        the counts of every pass's digits enqueued (one read of the keys) and scanned into each digit's start, and
        one pass as ``(src, dst, shift, width, wait_for) -> event``; with the scan's event to wait for."""
        queue, k, tile = self.runtime.queue, self._kernels, self._onesweep_tile
        passes, tiles = -(-bits // digit), -(-n // tile)
        words = passes * 257 + passes * tiles * 256  # counts, tile counters, status words (onesweep_pass)
        aux = self._buffer("_counts", 4 * words)
        zero = cl.enqueue_fill_buffer(queue, aux, np.uint32(0), 0, 4 * words, wait_for=wait_for)
        groups = max(1, min(tiles, 4 * int(self.runtime.device.max_compute_units)))
        k["onesweep_count"](queue, (groups * _ONESWEEP_WG,), (_ONESWEEP_WG,), buf, n, digit, bits, aux,
                            wait_for=[zero])
        counted = k["onesweep_scan"](queue, (_ONESWEEP_WG,), (_ONESWEEP_WG,), aux, passes)

        def one_pass(src: Any, dst: Any, shift: int, width: int, wait_for: Any) -> Any:
            return k["onesweep_pass"](queue, (tiles * _ONESWEEP_WG,), (_ONESWEEP_WG,), src, dst, n, shift,
                                      1 << width, shift // digit, passes, aux, wait_for=wait_for)
        return one_pass, [counted]

    def merge(self, a: Any, na: int, b: Any, nb: int, *, a_offset: int = 0, b_offset: int = 0,
              out: Any = None, out_offset: int = 0,
              wait_for: Sequence[Any] | None = None) -> tuple[Any, Any]:
        """Stably merge two sorted device ranges into a third.

        Parameters
        ----------
        a, b : pyopencl.Buffer
            ``a[a_offset : a_offset + na]`` and ``b[b_offset : b_offset + nb]``
            (offsets and counts in keys of ``self.dtype``), each sorted in
            numpy's order.  ``a`` and ``b`` may be the same buffer.
        na, nb : int
            Lengths, >= 0.
        out : pyopencl.Buffer, optional
            Receives the ``na + nb`` merged keys at ``out_offset``; must not
            overlap either input range.  Default: a new buffer of
            ``na + nb`` keys (and ``out_offset`` must be 0).
        a_offset, b_offset, out_offset : int
            Start of each range, in keys.
        wait_for : sequence of pyopencl.Event, optional
            Events the first launch waits for.

        Returns
        -------
        out : pyopencl.Buffer
            The merged keys; on ties keys of ``a`` come first.  For
            ``na + nb == 0`` with no ``out``: ``a``.
        event : pyopencl.Event
            Completes when ``out`` holds the result.

        Raises
        ------
        TypeError
            A non-buffer or non-integer argument.
        ValueError
            Negative counts or offsets, a range beyond its buffer, or ``out``
            overlapping an input range.
        """
        na, nb = _count("na", na), _count("nb", nb)
        a_offset, b_offset, out_offset = (_count(name, v) for name, v in
                                          (("a_offset", a_offset), ("b_offset", b_offset), ("out_offset", out_offset)))
        size = self.dtype.itemsize
        total = na + nb
        _check_range("a", a, a_offset, na, size)
        _check_range("b", b, b_offset, nb, size)
        if out is None and out_offset:
            raise ValueError("out_offset needs an out buffer")
        if out is not None:
            _check_range("out", out, out_offset, total, size)
            for name, buf, off, cnt in (("a", a, a_offset, na), ("b", b, b_offset, nb)):
                if buf.int_ptr == out.int_ptr and cnt and off < out_offset + total and out_offset < off + cnt:
                    raise ValueError(f"out[{out_offset}:{out_offset + total}] overlaps {name}[{off}:{off + cnt}]")
        queue = self.runtime.queue
        if total == 0:
            return (a if out is None else out), cl.enqueue_marker(queue, wait_for=wait_for)
        out = self._new_output(out, total)
        tiles = -(-total // self.tile)
        k = self._kernels
        wg = self.work_group_size
        with self._lock:
            part = self._buffer("_partitions", tiles * 8)
            part_global, part_local = self._partition_launch(tiles)
            k["partition_ranges"](queue, part_global, part_local, a, a_offset, na, b, b_offset, nb, part, tiles,
                                  wait_for=wait_for)
            event = k["merge_ranges"](queue, (tiles * wg,), (wg,), a, a_offset, na, b, b_offset, nb,
                                      out, out_offset, part)
        return out, event


    def rank_bounds(self, buf: Any, n: int, queries: Any, m: int, out: Any, *,
                    wait_for: Sequence[Any] | None = None) -> Any:
        """Enqueue the lower and upper bound of ``m`` query keys in the sorted ``buf[:n]`` (binary searches).

        Parameters
        ----------
        buf : pyopencl.Buffer
            ``n`` keys of ``self.dtype`` sorted in numpy's order.
        n : int
        queries : pyopencl.Buffer
            ``m`` keys of ``self.dtype``.
        m : int
            >= 1.
        out : pyopencl.Buffer
            Receives ``2 m`` int64: ``out[2 j]`` the keys of ``buf[:n]``
            less than ``queries[j]``, ``out[2 j + 1]`` those not greater
            (NaN greater than every number and equal to NaN; -0.0 equal to
            +0.0).
        wait_for : sequence of pyopencl.Event, optional

        Returns
        -------
        pyopencl.Event

        Raises
        ------
        TypeError
            ``n`` or ``m`` not an integer.
        ValueError
            ``m < 1``, or a buffer too small.
        """
        n, m = _count("n", n), _count("m", m)
        if m < 1:
            raise ValueError(f"m must be >= 1, got {m}")
        _check_range("buf", buf, 0, n, self.dtype.itemsize)
        _check_range("queries", queries, 0, m, self.dtype.itemsize)
        _check_range("out", out, 0, 2 * m, 8)
        with self._lock:
            return self._kernels["rank_bounds"](self.runtime.queue, (2 * m,), None, buf, n, queries, m, out,
                                                wait_for=wait_for)


def sort_buffer(runtime: Runtime, buf: Any, n: int, dtype: Any, *, out: Any = None,
                wait_for: Sequence[Any] | None = None) -> tuple[Any, Any]:
    """Sort ``n`` keys of a device buffer on the device, stably; see :meth:`DeviceSorter.sort`.

    Builds a :class:`DeviceSorter` (kernels come from the runtime's program
    cache) and a scratch buffer per call; for repeated sorts keep a
    :class:`DeviceSorter`, which reuses its scratch buffer.

    Parameters
    ----------
    runtime : Runtime
    buf : pyopencl.Buffer
        At least ``n`` keys of ``dtype``; left untouched unless ``out is buf``.
    n : int
        Number of keys (>= 0).
    dtype : dtype-like
        One of :data:`SUPPORTED_DTYPES`.
    out : pyopencl.Buffer, optional
        Destination (may be ``buf``); default a new buffer.
    wait_for : sequence of pyopencl.Event, optional

    Returns
    -------
    (pyopencl.Buffer, pyopencl.Event)
        The sorted buffer and the event of the last launch.

    Raises
    ------
    TypeError, ValueError, NoDeviceError
        As :class:`DeviceSorter` and :meth:`DeviceSorter.sort`.
    """
    return DeviceSorter(runtime, dtype).sort(buf, n, out=out, wait_for=wait_for)


def merge_buffers(runtime: Runtime, a: Any, na: int, b: Any, nb: int, dtype: Any, *, a_offset: int = 0,
                  b_offset: int = 0, out: Any = None, out_offset: int = 0,
                  wait_for: Sequence[Any] | None = None) -> tuple[Any, Any]:
    """Stably merge two sorted device ranges; see :meth:`DeviceSorter.merge`.

    Parameters
    ----------
    runtime : Runtime
    a, b : pyopencl.Buffer
        Hold the sorted ranges ``a[a_offset:a_offset + na]`` and
        ``b[b_offset:b_offset + nb]`` (in keys of ``dtype``).
    na, nb : int
    dtype : dtype-like
        One of :data:`SUPPORTED_DTYPES`.
    a_offset, b_offset, out_offset : int
    out : pyopencl.Buffer, optional
        Destination (must not overlap the inputs); default a new buffer.
    wait_for : sequence of pyopencl.Event, optional

    Returns
    -------
    (pyopencl.Buffer, pyopencl.Event)
        The merged keys (ties: ``a`` first) and the event of the last launch.

    Raises
    ------
    TypeError, ValueError, NoDeviceError
        As :class:`DeviceSorter` and :meth:`DeviceSorter.merge`.
    """
    return DeviceSorter(runtime, dtype).merge(a, na, b, nb, a_offset=a_offset, b_offset=b_offset, out=out,
                                              out_offset=out_offset, wait_for=wait_for)


def device_sort(array: Any, runtime: Runtime | None = None) -> np.ndarray:
    """Sort a host array on the OpenCL device and return a new sorted host array.

    Parameters
    ----------
    array : array_like, shape (n,)
        Keys of a supported dtype (:data:`SUPPORTED_DTYPES`, any byte order).
    runtime : Runtime, optional
        Device to use; default :func:`hpu.default_runtime`.

    Returns
    -------
    numpy.ndarray, shape (n,)
        Bit-for-bit equal to ``np.sort(array, kind="stable")``, same dtype.

    Raises
    ------
    ValueError
        ``array`` is not one-dimensional.
    TypeError
        Unsupported dtype, or float64 on a device without cl_khr_fp64.
    NoDeviceError
        The runtime is CPU-only.
    """
    a = np.asarray(array)
    if a.ndim != 1:
        raise ValueError(f"device_sort sorts 1-D arrays, got shape {a.shape}")
    runtime = resolve_runtime(runtime)
    key = a.dtype.newbyteorder("=")
    runtime.require_device()
    _key_dtype(runtime, key)
    host = np.ascontiguousarray(a, dtype=key)
    with runtime.call():
        if host.size == 0:
            return a.copy()
        lease = runtime.acquire_lease()
        try:
            sorter = DeviceSorter.of_lease(lease, key)
            buf = cl.Buffer(lease.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
            _, event = sorter.sort(buf, host.size, out=buf)
            result = np.empty_like(host)
            cl.enqueue_copy(lease.queue, result, buf, wait_for=[event])
        except BaseException as e:
            runtime.release_lease(lease, failure=as_device_failure(e) or e)
            raise
        runtime.release_lease(lease)
    return result.astype(a.dtype, copy=False)
