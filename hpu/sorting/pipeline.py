"""Fast-mode hybrid mergesort: what the paper's conclusions name as future work.

Where the paper-faithful scheme (:mod:`hpu.dc.executor`) runs one work-item per
merge and one launch per level, fast mode uses

* a base-case cutoff: the device sorts leaf blocks in work-group local
  memory (:class:`hpu.sorting.device.DeviceSorter`), the CPU sorts its chunks with
  numpy in the thread pool (:func:`hpu.sorting.cpu.parallel_sort`);
* merge-path (co-rank) partitioned merges on the device, and a multiway
  merge split into balanced buckets on the CPU, so that top levels with few
  subproblems still use every work-group and every core;
* pinned, chunked host-device transfers: CPU threads stage chunks into a
  pinned buffer while the DMA engine moves the chunks already staged, in
  both directions; the whole device pipeline is enqueued at once (each copy
  waits on a user event its staging task completes), the caller then
  stages beside the pool's tasks, and a single device run sorts each
  staging wave as soon as it is in, then merges the waves;
* results in recycled host memory (:mod:`hpu.core.hostmem`): pinned when a device
  is in use, so that a device-only sort stages its input into the result
  itself and the DMA engine copies the sorted keys straight back into it,
  with no page faults and no copy out.

A run is described by the same two numbers as the paper's advanced split
(section 5.2): ``alpha``, the fraction of the input sorted by the CPU, and
``transfer_level`` ``t``: the device sorts its share as ``2**t`` independent
segments (levels ``t`` and below of its subtree) and the CPU merges every
sorted run (its own and the device's ``2**t``) in one multiway merge (the
levels above).  ``"cpu"`` is ``alpha = 1``, ``"gpu"`` is ``alpha = 0, t = 0``,
``"basic"`` is ``alpha = 0`` with ``t >= 1`` (paper 5.1), ``"advanced"`` any
pair (paper 5.2).  :func:`hpu.sorting.costs.fast_split` predicts the time of
each pair from the profile's measured cost curves and picks the fastest.

:func:`fast_keyed_sort` runs the same device pipeline for argsorts, key-value
and row sorts: the device packs (row, 32-bit key digit, position) into
64-bit integers, sorts them (64-bit keys: twice, low digit first), and
unpacks the positions or gathers the keys and values.  :func:`fast_row_sort`
sorts rows no longer than a work-group's tile one work-group a row, piece by
piece as the copies come up.

Each call's device share runs through the core's driver
(:func:`hpu.core.hybrid.run_hybrid`) on a :class:`~hpu.core.runtime.DeviceLease`:
its own command queues, device buffers and pinned staging memory, so that
any number of threads may sort on one runtime at once.  The pipeline's steps
(:func:`stage_pieces`, :func:`upload_pieces`, :func:`download_pieces`, :func:`enqueue_sorts`,
:func:`merge_tree`, :func:`copy_out`, :func:`prepare_record`, :func:`defer_record`, :func:`quiesce`)
are shared with the exchange sort of several devices
(:mod:`hpu.sorting.exchange`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import itertools
import numbers
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from typing import Any

import numpy as np

from ..core.hybrid import DeviceFailure, HybridResult, run_hybrid
from ..core.kernels import CL_TYPES, cl_type
from ..core.runtime import DeviceLease, Runtime
from ..core.streaming import NativeStaging, copy_into, native_staging_available
from ..core.trace import Recorder, Trace, event_times
from ..core.util import check_int, interrupts_deferred, wait_all
from .costs import cpu_sort_method, fast_cost
from .cpu import multiway_merge, native_partition, parallel_copy, parallel_sort
from .device import ALGORITHMS, DeviceSorter, device_algorithms, fast_algorithm
from .keys import packed_bits

try:
    import pyopencl as cl
except Exception:  # pragma: no cover
    cl = None

__all__ = ["DEFAULT_OPTIONS", "PipelineOptions", "cpu_method", "device_share", "fast_keyed_sort", "fast_row_sort",
           "fast_sort", "keyed_fits", "keyed_key_type", "kept_policy", "max_device_elements", "Rental",
           "rent_meter", "RentMeter", "row_tile"]


@dataclasses.dataclass(frozen=True)
class PipelineOptions:
    """Tuning knobs of the fast-mode pipeline (the defaults are the measured best on the H100 machine).

    Attributes
    ----------
    chunk_bytes : int or None
        Bytes per staged piece and per DMA copy in either direction; None
        (default): 4 MiB, and 8 MiB for key-value sorts
        (:meth:`piece_bytes`).
    sort_waves : bool
        A single device run sorts each staging wave as soon as its copies
        are in (then merges the waves' runs), rather than the whole share
        after the last copy (default True; with the merge sort only).
    result_memory : {"auto", "pin", "plain"}
        Where a device-sorted result goes when the host pool has no free
        pinned block of its size because the caller keeps earlier results
        (:meth:`hpu.core.hostmem.HostArrayPool.empty`, ``kept``): freshly
        pinned memory the device writes into (``"pin"``), or plain memory
        that the thread pool fills from the lease's pinned staging buffer
        (``"plain"``); ``"auto"`` (default) takes the cheaper by the
        profile's measured ``kept_pinned`` and ``kept_plain`` curves, and
        ``"pin"`` where it has none.
    device_sort : {"merge", "radix", "tile-radix", "onesweep"} or None
        The device's sort (:class:`hpu.sorting.device.DeviceSorter`'s
        ``algorithm``); None (default): the pipeline's for the keys
        (:func:`hpu.sorting.device.fast_algorithm`: the onesweep radix
        sort for 4-byte keys on NVIDIA GPUs, else the device's default).
        No waves with ``"radix"`` (a CPU device's).
    staging_tasks : int
        Most pool tasks that stage pieces at once (default 8; never more than
        half the pieces nor the pool's threads).  Staging is bound by host
        memory, which the DMA engine reads at the same time: more tasks
        copying at once slow each other and the copies up.  On the H100
        machine (``experiments/bench_pipeline.py --tasks 4,6,8,16``, medians
        of 15 calls at 2^24 keys, two machines of that kind:
        ``experiments/results/h100/pipeline_tasks.log`` and
        ``pipeline_tasks_earlier.log``) a key-value sort of int32 keys with
        int64 values (24 pieces) took 10.6 and 11.1 ms with 8 tasks, 11.3 and
        12.0 ms with 12 (the cap of 16: half the pieces, as before this
        option), 12.3 and 13.4 ms with 4; for a sort and for rows (16 pieces:
        8 tasks) 4 tasks were up to 0.5 ms faster on one machine and up to
        0.6 ms slower on the other.
    wave_pieces : int or None
        Staged pieces per sort wave (``sort_waves``); None (default): as
        many as the staging tasks (:meth:`waves`).
    last_wave : float
        In (0, 0.5]: the last two sort waves' pieces are shared out again so
        that the last holds this fraction of them (at least one piece, no
        more than it held; :meth:`waves`), so that after the last copy up
        the device sorts fewer keys while the wave before, larger, is sorted
        as the last pieces are staged (the pieces staged in order:
        ``staging_slices``); 0.5 leaves them as they are.  Default 0.25 (16
        pieces: waves of 12 and 4).  On the H100 machine a sort of 2^24 keys
        (medians of 15 calls): 4.81 ms with waves of 12 and 4 against 4.99
        with two of 8 (``experiments/results/h100/session28/slices/
        slices.log``), and on another machine 4.26 against 4.30 ms after
        idle pauses, 4.08 against 4.09 back to back; a key-value sort there
        9.95 against 9.85 and 9.87 against 9.74, within its spread
        (``session28/last_wave/``).
    staging_slices : int or None
        The compiled stager (``native_staging``) copies each piece in this
        many slices, each by whichever of its threads takes it, so that the
        threads copy the pieces together, one after another, and each
        piece's copy up follows right behind its staging; None (default):
        as many as the staging tasks; 1: each piece by one thread (whose
        pieces then all end at about one time, their copies up queued
        behind each other).  Slices shorter than
        :data:`hpu.core.streaming.STREAM_MIN_BYTES` are copied by
        ``memcpy``, not streaming stores.  On the H100 machine
        (``experiments/results/h100/session28/slices/slices.log``, medians
        of 15 calls of 2^24 keys after 20 ms idle): a sort 4.99 ms against
        5.28 with a piece a thread, rows 4.13 against 4.51, a key-value
        sort 12.01 against 12.33.
    stream_copies : bool
        The host's copies into and out of pinned staging memory use
        streaming stores (:func:`hpu.core.streaming.stream_copy`; default
        True), rather than ``numpy.copyto`` (False).
    native_staging : bool
        The pieces are staged by threads of hpu's compiled library
        (:class:`hpu.core.streaming.NativeStaging`; default True, where
        it was built, every array is C-contiguous and more than one task
        stages), rather than by tasks of the runtime's Python thread pool
        (False).
    cpu_sort : {"auto", "sample", "psrs"}
        The CPU's sort (:func:`hpu.sorting.cpu.parallel_sort`'s ``method``; ``"sample"`` where the compiled
        partition takes the keys, else PSRS); ``"auto"`` (default): the one the profile measured faster at the
        call's size (:func:`cpu_method`).

    Raises
    ------
    ValueError
        ``chunk_bytes``, ``staging_tasks``, ``wave_pieces`` or ``staging_slices`` not an integer >= 1 (numpy
        integers are taken as the Python integers they hold; floats, bools and strings are refused), ``last_wave``
        not a real number in (0, 0.5], or an unknown ``device_sort``, ``result_memory`` or ``cpu_sort``.
    TypeError
        ``sort_waves``, ``stream_copies`` or ``native_staging`` not a bool (``numpy.bool_`` is taken as the bool it
        holds).
    """

    chunk_bytes: int | None = None
    sort_waves: bool = True
    result_memory: str = "auto"
    device_sort: str | None = None
    staging_tasks: int = 8
    wave_pieces: int | None = None
    last_wave: float = 0.25
    staging_slices: int | None = None
    stream_copies: bool = True
    native_staging: bool = True
    cpu_sort: str = "auto"

    def __post_init__(self) -> None:
        for name, optional in (("chunk_bytes", True), ("staging_tasks", False), ("wave_pieces", True),
                               ("staging_slices", True)):
            value = getattr(self, name)
            if value is not None or not optional:  # as a Python int (a float, a bool or a string refused)
                object.__setattr__(self, name, check_int(name, value, 1, what=" (or None)" if optional else ""))
        if isinstance(self.last_wave, (bool, np.bool_)) or not (
                isinstance(self.last_wave, numbers.Real) and 0 < self.last_wave <= 0.5):
            raise ValueError(f"last_wave must be a number in (0, 0.5], got {self.last_wave!r}")
        object.__setattr__(self, "last_wave", float(self.last_wave))
        if self.device_sort not in (None, *ALGORITHMS):
            raise ValueError(f"device_sort must be None or one of {', '.join(ALGORITHMS)}, got {self.device_sort!r}")
        if self.result_memory not in ("auto", "pin", "plain"):
            raise ValueError(f"result_memory must be 'auto', 'pin' or 'plain', got {self.result_memory!r}")
        if self.cpu_sort not in ("auto", "sample", "psrs"):
            raise ValueError(f"cpu_sort must be 'auto', 'sample' or 'psrs', got {self.cpu_sort!r}")
        for name in ("sort_waves", "stream_copies", "native_staging"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):  # "no" or 0 would read as true or false unseen
                raise TypeError(f"{name} must be a bool, got {value!r}")
            object.__setattr__(self, name, bool(value))

    def piece_bytes(self, values: bool = False) -> int:
        """Bytes per staged piece and DMA copy: ``chunk_bytes`` when set; else 4 MiB, or 8 MiB with ``values``
        (the arrays of a key-value sort, :func:`fast_keyed_sort`).

        The measured best on the H100 machine (``experiments/bench_pipeline.py``, best of six calls,
        ``experiments/results/h100/pipeline_sort.json`` and ``pipeline_kv.log``): 4 MiB for a sort of 2^24
        int32 (6.2 ms against 6.5 with 8 MiB); 8 MiB for a key-value sort of 2^24 int32 keys with int64 values,
        three times the bytes (11.3 ms against 13.7 with 4 MiB).
        """
        if self.chunk_bytes is not None:
            return int(self.chunk_bytes)
        return (8 if values else 4) << 20

    def device_algorithm(self, device: Any, dtype: Any) -> str:
        """The device sort (:class:`DeviceSorter`'s ``algorithm``) for keys of ``dtype`` on the OpenCL ``device``:
        ``device_sort`` when set, else :func:`hpu.sorting.device.fast_algorithm`'s."""
        return self.device_sort or fast_algorithm(device, dtype)

    def waves(self, pieces: int, tasks: int) -> list[int]:
        """The staged pieces of each sort wave (:func:`enqueue_sorts`), in order, ``pieces`` in all: ``wave_pieces``
        a wave when set, else ``tasks``, the tasks that stage them (``experiments/results/h100/pipeline_waves.log``:
        smaller waves were slower), the last wave what is left; then the last two waves' ``k`` pieces shared out
        again as ``k - m`` and ``m = max(1, floor(last_wave * k))`` (no more than the last wave held)."""
        per = int(self.wave_pieces) if self.wave_pieces is not None else max(1, tasks)
        sizes = [per] * (pieces // per) + ([pieces % per] if pieces % per else [])
        if len(sizes) >= 2:
            last = sizes.pop()
            k = last + sizes.pop()
            m = min(last, max(1, int(self.last_wave * k)))
            sizes += [k - m, m]
        return sizes


DEFAULT_OPTIONS = PipelineOptions()


class RentMeter:
    """Recent wall times of a runtime's device calls, per kind of call and result size, by where the result went:
    a pinned block handed out before (recycled) or plain memory (rented); what renting plain memory costs such a
    call (:meth:`rent`), for :func:`kept_policy`.

    The profile's rent is a sort's, whose copies out of staging memory into a plain result hide behind the
    device's sort; rows and keyed sorts have less device work after their staging to hide them behind, and pay
    more (``experiments/README.md``, *Rent measured by the loop*).  Thread-safe.
    """

    #: Calls kept per kind, size and memory; calls of each needed before :meth:`rent` measures.
    SAMPLES, LEAST = 9, 3

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[tuple[str, int, bool], collections.deque] = {}

    def add(self, rt: Runtime, kind: str, nbytes: int, result: np.ndarray, trace: Trace) -> None:
        """Count a call of ``kind`` whose cost key is ``nbytes`` (the bytes :func:`kept_policy` is asked for)
        and whose result is ``result``, timed by ``trace``: a recycled pinned block or plain memory; a freshly
        pinned block (whose call paid the pinning) and a call that fell back to the CPU are not counted."""
        pool = rt.host_pool
        if trace.fallback or pool.is_pinned(result) and not pool.recycled_pinned(result):
            return
        key = (kind, int(nbytes), pool.recycled_pinned(result))
        with self._lock:
            self._seconds.setdefault(key, collections.deque(maxlen=self.SAMPLES)).append(float(trace.wall))

    def rent(self, kind: str, nbytes: int) -> float | None:
        """Seconds a call of ``kind`` and ``nbytes`` pays for a plain result over a recycled pinned one: the
        median of its last plain calls less that of its last recycled ones; None until each has
        :attr:`LEAST` calls."""
        with self._lock:
            plain, pinned = (list(self._seconds.get((kind, int(nbytes), r), ())) for r in (False, True))
        if min(len(plain), len(pinned)) < self.LEAST:
            return None
        return float(np.median(plain) - np.median(pinned))


def rent_meter(rt: Runtime) -> RentMeter:
    """``rt``'s :class:`RentMeter` (one a runtime)."""
    return rt.resources.get(("rent-meter",), RentMeter, RentMeter)


@dataclasses.dataclass(frozen=True)
class Rental:
    """A device call's result as the host pool's rent-or-buy choice and the runtime's :class:`RentMeter` see it:
    the call's ``kind`` and its ``n`` keys of ``itemsize`` bytes (one key for both, so they cannot drift apart)."""

    kind: str
    n: int
    itemsize: int

    def kept(self, rt: Runtime, options: PipelineOptions) -> Callable[[int], str]:
        """``kept`` for :meth:`hpu.core.hostmem.HostArrayPool.empty`: :func:`kept_policy` of this call."""
        return functools.partial(kept_policy, rt, self.n, self.itemsize, options, kind=self.kind)

    def record(self, rt: Runtime, result: np.ndarray, trace: Trace) -> Trace:
        """``trace``, after :meth:`RentMeter.add` of the call (its ``result``) to ``rt``'s meter."""
        rent_meter(rt).add(rt, self.kind, self.n * self.itemsize, result, trace)
        return trace


def kept_policy(rt: Runtime, n: int, itemsize: int, options: PipelineOptions, rentals: int = 0,
                kind: str | None = None) -> str:
    """``kept`` for :meth:`hpu.core.hostmem.HostArrayPool.empty` of a device-sorted result of ``n`` keys, after
    ``rentals`` results of its size were given plain memory since its last answer ``"pin"`` for that size.

    ``options.result_memory`` unless ``"auto"``.  Then, by the profile's
    measured device-only sorts (:func:`hpu.sorting.calibrate.measure_costs`:
    ``kept_plain`` and ``kept_pinned`` with every earlier result kept, into
    plain memory or into freshly pinned memory; ``device_sort`` plus
    ``transfer``, a recycled block), a call in plain memory pays
    ``r = kept_plain - recycled`` more than one that recycles a block (rent;
    where a measurement's noise puts it below 0, a size given plain memory
    once is given it always), and pinning one more block pays
    ``B = kept_pinned - recycled``
    once (buy), after which the caller's loop recycles the blocks.  Not
    knowing how many calls are to come, rent while the rent paid, this
    call's included, stays below the price of buying, and buy then:
    ``"plain"`` while ``(rentals + 1) r < B``, else ``"pin"``, the
    deterministic rule for the ski-rental problem, whose cost is at most
    twice that of the best choice made knowing the future (Karlin, Manasse,
    Rudolph and Sleator, "Competitive snoopy caching", Algorithmica 3,
    1988).  With ``rentals = 0``: plain memory where it is the cheaper for
    one call.  With ``kind`` (the caller's calls of this kind record their
    times in :func:`rent_meter`), the rent those calls measured replaces the
    profile's once there is one: a loop that keeps its last result
    alternates a recycled pinned block and plain memory, and so measures it.
    Beyond the paper.
    """
    if options.result_memory != "auto":
        return options.result_memory
    curves = rt.profile.cost_curves("sort")
    if curves is None or "kept_plain" not in curves or "kept_pinned" not in curves:
        return "pin"
    plain, pinned = (float(fast_cost(rt.profile, k, n, itemsize)) for k in ("kept_plain", "kept_pinned"))
    recycled = sum(float(fast_cost(rt.profile, k, n, itemsize)) for k in ("device_sort", "transfer") if k in curves)
    rent, buy = plain - recycled, pinned - recycled
    measured = None if kind is None else rent_meter(rt).rent(kind, n * itemsize)
    if measured is not None:
        rent = measured
    return "plain" if (int(rentals) + 1) * rent < buy else "pin"


def cpu_method(rt: Runtime, n: int, dtype: np.dtype, options: PipelineOptions = DEFAULT_OPTIONS) -> str:
    """``method`` for :func:`hpu.sorting.cpu.parallel_sort` of ``n`` keys of ``dtype``: ``options.cpu_sort`` unless
    ``"auto"``, else the one the profile measured faster at ``n`` (:func:`hpu.sorting.costs.cpu_sort_method`);
    PSRS instead of the sample sort where the compiled partition does not take the keys
    (:func:`hpu.sorting.cpu.native_partition`)."""
    method = options.cpu_sort
    if method == "auto":
        method = cpu_sort_method(rt.profile, n, np.dtype(dtype).itemsize)
    return "psrs" if method == "sample" and not native_partition(dtype) else method


def _piece_length(itemsize: int, chunk_bytes: int, align: int) -> int:
    """Elements in each staged piece (:func:`stage_pieces`): ``chunk_bytes`` rounded down to a multiple of ``align``
    elements, at least ``align``."""
    return max(chunk_bytes // itemsize // align * align, align)


def _staging_align(lease: DeviceLease) -> int:
    """Elements that a staged piece's length is a multiple of (:func:`_piece_length`): the device's sub-buffer
    alignment, ``mem_base_addr_align`` bits, as bytes (so that device ranges may start at any piece)."""
    return max(1, int(lease.device.mem_base_addr_align) // 8)


def _staging_tasks(rt: Runtime, pieces: int, most: int) -> int:
    """Pool tasks that stage ``pieces`` pieces (:func:`stage_pieces`): half as many, at least one, at most the
    threads and ``most`` (:attr:`PipelineOptions.staging_tasks`)."""
    return max(1, min(rt.threads, (pieces + 1) // 2, most))


def stage_pieces(rt: Runtime, lease: DeviceLease, src: np.ndarray, stage: np.ndarray, rec: Recorder,
                 chunk_bytes: int, row_length: int | None = None, *, most_tasks: int, stream: bool = True,
                 native: bool = True, slices: int | None = None) -> tuple[list, list, int, list]:
    """Copy ``src`` into the pinned ``stage`` piece by piece on the thread pool (nothing to copy: ``src`` is ``stage``).

    Pieces of ``chunk_bytes`` (rounded down to whole multiples of the
    device's sub-buffer alignment, ``mem_base_addr_align``, in elements, so
    that device ranges may start at any piece; with ``row_length``, to whole
    rows of that many elements instead) are staged by at most half as many
    pool tasks as there are pieces and at most ``most_tasks``
    (:attr:`PipelineOptions.staging_tasks`; :func:`_staging_tasks`), and by
    the caller when it waits for them (a future that runs its share:
    :class:`_OnCaller`; one piece, by the caller alone), each task taking
    the next piece in order as soon as it is free, so that they are staged in
    at least two waves of ``tasks`` consecutive pieces.  Few, large pieces:
    every piece costs Python's global lock, which 16 threads staging small
    pieces contend for (measured by ``experiments/bench_pipeline.py``).
    With ``stream``, each piece is copied by streaming stores
    (:func:`hpu.core.streaming.stream_copy`), else by ``numpy.copyto``.
    With ``native`` (and hpu's compiled stager built, both arrays
    C-contiguous, more than one task), the tasks are the caller and
    ``tasks - 1`` threads of that library's own pool (at most the
    runtime's threads in all: :class:`hpu.core.streaming.NativeStaging`),
    which take, copy and report the pieces without Python's global lock,
    woken at once, rather than tasks of the runtime's pool that start one
    after another (and the caller besides them); those threads copy each
    piece in ``slices`` slices (:attr:`PipelineOptions.staging_slices`;
    None: as many as the tasks; 1: a piece a thread), so that the pieces end
    one after another, about in order.

    Returns
    -------
    pieces : list of (start, stop)
        Element ranges, in order.
    ready : list of pyopencl.UserEvent
        ``ready[k]`` completes when piece ``k`` is staged: device copies wait
        for it, so that the caller can enqueue the whole pipeline at once.  A
        task that fails stops the others, and the last task to end completes
        every remaining event (the device then copies stale data, which the
        caller discards): no command waits forever.
    tasks : int
        The staging tasks (:meth:`PipelineOptions.waves` makes them the pieces per wave of
        :func:`enqueue_sorts` by default).
    futures : list of concurrent.futures.Future
        The tasks; their exceptions are the staging errors.  The first is
        the caller's own share: wait for the futures in order, each of them
        (``result()``, or ``exception()`` after a failure), once the device's
        work is enqueued, and block on nothing that waits for the staging
        before (with one piece, no pool task stages it).
    """
    [(pieces, ready)], tasks, futures = _stage_arrays(rt, lease, [(src, stage)], rec, chunk_bytes, most_tasks,
                                                      row_length, stream=stream, native=native, slices=slices)
    return pieces, ready, tasks, futures


def _slice_bytes(piece_bytes: int, slices: int) -> int:
    """Bytes the compiled stager's threads copy at a time to copy a piece of ``piece_bytes`` (the pipeline's
    ``chunk_bytes``: a piece of whole rows may be longer, one of :func:`_ramp_pieces` shorter) in ``slices``
    slices (:class:`NativeStaging`'s ``slice_bytes``): rounded up to whole cache lines of 64 bytes; 0 (a piece a
    thread) for one slice."""
    if slices <= 1:
        return 0
    per = -(-piece_bytes // slices)
    return -(-per // 64) * 64


def _ramp_pieces(n: int, length: int, align: int, tasks: int) -> list[tuple[int, int]]:
    """Element ranges of ``n`` elements: ``tasks - 1`` pieces of ``length * i / tasks`` elements (``i = 1 ..
    tasks - 1``, multiples of ``align``, at least ``align``), then pieces of ``length``.

    ``tasks`` tasks that each take the next piece as soon as they are free then finish their pieces one after
    another, a piece's staging apart, rather than all at once (:func:`_stage_arrays`).
    """
    if n == 0:
        return []
    sizes = [max(align, length * i // tasks // align * align) for i in range(1, tasks)]
    bounds, a = [0], 0
    for size in sizes:
        if a + size >= n:
            break
        a += size
        bounds.append(a)
    bounds += list(range(a + length, n, length)) + [n]
    return list(zip(bounds[:-1], bounds[1:]))


def _stage_arrays(rt: Runtime, lease: DeviceLease, pairs: list[tuple[np.ndarray, np.ndarray]], rec: Recorder,
                  chunk_bytes: int, most_tasks: int, row_length: int | None = None, *, stream: bool = True,
                  native: bool = True, slices: int | None = None) -> tuple[list[tuple[list, list]], int, list]:
    """:func:`stage_pieces` of several arrays (each ``(src, stage)``) by one set of tasks, as many as for the
    pieces of all arrays, each task taking the next piece in order as soon as it is free: the first array's
    pieces all before the second's, and with several arrays the first array's growing
    (:func:`_ramp_pieces`; one array: pieces of one length, as :func:`stage_pieces`, whose count sets the
    device's sort waves).

    For :func:`fast_keyed_sort`: the keys are in before the values, so that the device sorts them while the
    values are staged, and the pieces are staged one after another, a piece's staging apart, so that the copies
    up follow right behind.  With a set of tasks for each array, keys and values were staged together and each
    array's last pieces all at once: on the H100 machine (a key-value sort of 2^24 int32 keys with int64 values
    in pieces of 8 MiB, ``experiments/bench_pipeline.py --part kv``) the keys' sort ended at 7.6 ms and the copies
    up at 8.8 ms of 12.3 (``experiments/results/h100/pipeline_kv_separate_staging.log``); staged this way, at
    6.7 and 7.7 ms of 11.3 (``pipeline_kv.log``).  The copies up still end 1.7 ms after the staging: while 16
    threads stage, the DMA engine reads pinned memory at about 29 GB/s, not the 55 GB/s it reaches alone.

    Returns ``([(pieces, ready)] per array, tasks, futures)`` as :func:`stage_pieces`.
    """
    complete = cl.command_execution_status.COMPLETE
    align = row_length or _staging_align(lease)
    lengths = [_piece_length(src.itemsize, chunk_bytes, align) for src, _ in pairs]
    pieces_in_all = sum(-(-src.shape[0] // length) for (src, _), length in zip(pairs, lengths))
    tasks = _staging_tasks(rt, pieces_in_all, most_tasks)
    layout, todo = [], []  # per array (src, stage, pieces, copied); the arrays to copy, as NativeStaging takes them
    for i, ((src, stage), length) in enumerate(zip(pairs, lengths)):
        pieces = _ramp_pieces(src.shape[0], length, align, tasks if i == 0 and len(pairs) > 1 else 1)
        copied = src.__array_interface__["data"][0] != stage.__array_interface__["data"][0]  # else in place already
        if copied and src.dtype.names:  # structured elements as raw bytes (numpy copies fields, not the padding)
            raw = np.dtype((np.void, src.itemsize))
            src, stage = src.view(raw), stage.view(raw)
        layout.append((src, stage, pieces, copied))
        if copied:
            todo.append((stage, src, pieces))
    workers = min(tasks, sum(len(pieces) for _, _, pieces in todo))
    # The compiled stager wakes its helpers at once, and starts before the pieces' events are made (each a call
    # into the OpenCL driver); with one task (the caller alone) there are none to wake.  Its pieces are given as
    # ranges of whole arrays: no array object a piece to make before the copies start.
    job = None
    if native and workers > 1 and native_staging_available() and all(
            src.ndim == 1 and src.flags.c_contiguous and stage.flags.c_contiguous for stage, src, _ in todo):
        job = NativeStaging.of_ranges(todo, helpers=workers - 1, stream=stream, most_threads=rt.threads,
                                      slice_bytes=_slice_bytes(chunk_bytes, tasks if slices is None else slices))
    try:
        work, out = [], []
        for src, stage, pieces, copied in layout:
            ready = [cl.UserEvent(lease.context) for _ in pieces]
            out.append((pieces, ready))
            if copied:
                work += [(src, stage, a, b, ev) for (a, b), ev in zip(pieces, ready)]
            else:
                for ev in ready:
                    ev.set_status(complete)
        if job is not None:
            try:
                job.set_events([w[4] for w in work])
            except RuntimeError as e:  # an event's setting failed (nothing waits for the events yet)
                raise DeviceFailure(str(e)) from e
    except BaseException:
        if job is not None:  # its threads let go of the caller's array and the staging memory before this returns
            with contextlib.suppress(RuntimeError):
                job.finish()
            _complete_staged([ev for _, ready in out for ev in ready])  # every piece copied; none left unset
        raise
    if job is not None:
        return out, tasks, [_OnCaller(functools.partial(_native_staged, job, work, rec))]
    pooled = workers if workers > 1 else 0  # one piece: the caller's alone, no pool task to wake
    staging = _InOrderStaging(work, rec, pooled + bool(workers), stream)
    # The caller's own share first: a wait for the futures in order then stages beside the pool's tasks.
    caller = [_OnCaller(staging.task)] if workers else []
    return out, tasks, caller + [rt.pool.submit(staging.task) for _ in range(pooled)]


def _complete_staged(events: list) -> None:
    """Set each of the staged pieces' user ``events`` that is still unset to complete (errors ignored: nothing more
    can be done for such an event).  A ``clSetUserEventStatus`` that failed leaves a staged piece's event unset, and
    every command behind it waiting: :func:`quiesce`, which finishes their queues, would wait forever.  The piece's
    bytes are copied, so its copy up may run; the call raises, and its results are discarded."""
    complete = cl.command_execution_status.COMPLETE
    for ev in events:
        with contextlib.suppress(cl.Error):
            if ev.command_execution_status != complete:
                ev.set_status(complete)


def _native_staged(job: NativeStaging, work: list, rec: Recorder) -> None:
    """Finish a :class:`NativeStaging` of ``work`` (:func:`_stage_arrays`) on the caller and note its pieces in
    ``rec``, each under the thread that copied it (staged in slices, several threads copy a piece: it is noted
    under the one that copied its last slice, from its first slice's start to its end, so that a thread's lane of a
    Gantt chart may show pieces overlapping)."""
    try:
        times = job.finish()
    except RuntimeError as e:  # an event's setting failed: every piece is copied, every other event set
        _complete_staged([w[4] for w in work])
        raise DeviceFailure(str(e)) from e
    caller = f"cpu:{threading.current_thread().name}"
    for (src, _, a, b, _), (t0, t1, who) in zip(work, times):
        unit = caller if who == 0 else f"cpu:hpu-stage_{int(who) - 1}"
        rec.add(unit, "stage", -1, t0 - rec.t0, t1 - rec.t0, 1, b - a, (b - a) * src.itemsize)


class _OnCaller(Future):
    """A future of ``fn()`` that runs it on the thread that first asks for its result or exception.

    One of :func:`_stage_arrays`' staging tasks is this: the caller, which
    waits for the staging once it has enqueued the device's work, stages
    pieces beside the pool's tasks instead of sleeping until they end, and
    a call of one piece stages on the caller alone.  So between the
    submission and the futures' results the caller must not block on
    anything that waits for the staging, such as a mapping on a queue that
    holds its copies up.  On the H100 machine a task that does nothing,
    submitted to the pool and waited for, took 0.08 ms back to back and
    0.19 ms after a pause of 20 ms, about the time of copying a MiB
    (``experiments/bench_latency.py``, ``experiments/results/h100/latency_before.log``).
    """

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__()
        self._fn: Callable[[], Any] | None = fn

    def _run(self) -> None:
        try:  # whatever is raised (Ctrl-C lands on this thread) ends the future
            fn, self._fn = self._fn, None
            if fn is not None:
                self.set_result(fn())
        except BaseException as e:  # delivered as the pool's futures deliver theirs
            self.set_exception(e)
            # The error's traceback holds this frame: no cycle through the future, nothing of the task's kept
            self = fn = None

    def result(self, timeout: float | None = None) -> Any:
        try:
            self._run()
            return super().result(timeout)
        finally:
            self = None  # as Future.result does: a raised error's traceback holds this frame

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self._run()
            return super().exception(timeout)
        finally:
            self = None  # the frame of _run, kept by the error's traceback, refers to this one


class _InOrderStaging:
    """The shared state of :func:`_stage_arrays`'s tasks: the pieces in order (``(src, stage, start, stop, ready
    event)``), a counter handing out the next one and one counting the tasks that ended (``next`` of
    ``itertools.count`` is atomic under the global lock: no lock of our own for the tasks to queue on)."""

    def __init__(self, work: list[tuple[np.ndarray, np.ndarray, int, int, Any]], rec: Recorder, tasks: int,
                 stream: bool) -> None:
        self.work, self.rec, self.tasks, self.stream = work, rec, tasks, stream
        self.next, self.ended, self.failed = itertools.count(), itertools.count(1), False
        self.staged = [False] * len(work)

    def task(self) -> None:
        """Copy the next piece until none is left (or a task failed) and complete its event; the last task to end
        completes the events of pieces a failure left unstaged (no copy waits forever)."""
        complete, unit, rec = cl.command_execution_status.COMPLETE, f"cpu:{threading.current_thread().name}", self.rec
        try:
            for i in self.next:
                if i >= len(self.work) or self.failed:
                    return
                src, stage, a, b, ready = self.work[i]
                t0 = rec.now()
                copy_into(stage[a:b], src[a:b], self.stream)
                rec.add(unit, "stage", -1, t0, rec.now(), 1, b - a, (b - a) * src.itemsize)
                ready.set_status(complete)
                self.staged[i] = True
        except BaseException:
            self.failed = True
            raise
        finally:
            if next(self.ended) == self.tasks:  # an interrupt may have come between a piece's event and its note
                for (_, _, _, _, ready), staged in zip(self.work, self.staged):
                    if not staged and ready.command_execution_status != complete:
                        ready.set_status(complete)


def merge_tree(queue: Any, sorter: Any, runs: list[tuple[int, int]], src: Any, dst: Any,
                itemsize: int) -> tuple[Any, Any]:
    """Merge the sorted ranges ``runs`` of ``src`` pairwise, level by level, ping-ponging between ``src`` and ``dst``.

    ``runs`` are contiguous, in order, and cover ``[0, n)``.  Each level
    halves their number (an odd last run is copied across); the result is in
    ``src`` after an even number of levels, in ``dst`` after an odd one.
    Returns ``(buffer holding the result, event of the last command)``.
    """
    event = None
    while len(runs) > 1:
        merged = []
        for i in range(0, len(runs), 2):
            a0, a1 = runs[i]
            if i + 1 < len(runs):
                b0, b1 = runs[i + 1]
                _, event = sorter.merge(src, a1 - a0, src, b1 - b0, a_offset=a0, b_offset=b0, out=dst,
                                        out_offset=a0)
                merged.append((a0, b1))
            else:
                event = cl.enqueue_copy(queue, dst, src, byte_count=(a1 - a0) * itemsize,
                                        src_offset=a0 * itemsize, dst_offset=a0 * itemsize)
                merged.append((a0, a1))
        runs, src, dst = merged, dst, src
    return src, event


def _segments(n: int, t: int, align: int) -> list[tuple[int, int]]:
    """``2**t`` contiguous segments of ``[0, n)`` with starts aligned to ``align`` elements."""
    k = 1 << t
    bounds = [0]
    for i in range(1, k):
        b = (n * i // k) // align * align
        bounds.append(max(b, bounds[-1]))
    bounds.append(n)
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def max_device_elements(rt: Runtime, itemsize: int) -> int:
    """Most keys of ``itemsize`` bytes one device run of :func:`device_share` may sort on ``rt``'s device.

    The input buffer, the sorter's output and its scratch: three copies, and
    where the device runs the onesweep radix sort (:func:`hpu.sorting.device.fast_algorithm`) its status words,
    a byte a 4-byte key, in :attr:`hpu.Runtime.device_memory_bytes` (the runtime's
    ``device_memory_limit``), each copy within the device's largest allocation.  (8-byte keys sorted by
    ``PipelineOptions(device_sort="onesweep")`` need four bytes a key more than this counts.)  0 without a device:
    also once another thread's failed rebuild has left the runtime CPU-only since the caller checked it.
    """
    dev = rt.device
    if dev is None:
        return 0
    by_total = rt.device_memory_bytes // (3 * itemsize + ("onesweep" in device_algorithms(dev)))
    by_alloc = int(dev.max_mem_alloc_size) // itemsize
    return max(0, min(by_total, by_alloc))


def wave_merges(sizes: Sequence[int]) -> tuple[list[tuple[int, int, int, int]], list[int]]:
    """The merges that join the sorted runs of waves of ``sizes`` pieces, in arrival order, as soon as they can run.

    A stack of runs as they arrive: after wave ``w`` is sorted, the last two
    runs are merged while the last holds at least as many pieces as the one
    before it (waves of one size: a binary counter); after the last wave,
    the runs left are merged from the last one back.  Every merge but those
    of the last waves thus runs while later waves are still being copied
    up, and after the last copy only the last wave's sort and the merges
    that take it in remain (about log2 of the wave count, the last one over
    every key), not every merge level.

    Parameters
    ----------
    sizes : sequence of int
        Each wave's pieces (>= 1), in input order.

    Returns
    -------
    merges : list of (i, j, k, after)
        Merge the run of waves ``[i, j)`` with the run of waves ``[j, k)``,
        enqueued after wave ``after`` is sorted; in order.
    depth : list of int
        For each wave, how many merges its keys go through.
    """
    waves = len(sizes)
    merges: list[tuple[int, int, int, int]] = []
    stack: list[tuple[int, int, int]] = []  # (first wave, end wave, pieces)
    for w, size in enumerate(sizes):
        stack.append((w, w + 1, int(size)))
        while len(stack) > 1 and stack[-1][2] >= stack[-2][2]:
            (i, j, p), (_, k, q) = stack[-2], stack.pop()
            stack[-1] = (i, k, p + q)
            merges.append((i, j, k, w))
    while len(stack) > 1:
        (i, j, p), (_, k, q) = stack[-2], stack.pop()
        stack[-1] = (i, k, p + q)
        merges.append((i, j, k, waves - 1))
    depth = [sum(i <= w < k for i, _, k, _ in merges) for w in range(waves)]
    return merges, depth


def enqueue_sorts(lease: DeviceLease, sorter: DeviceSorter, h2d: list, pieces: list, waves: Sequence[int], n: int,
                  t: int, d_in: Any, d_out: Any, sort_waves: bool,
                  prepare: Callable[[int, int, list], Any] | None = None,
                  bits: int | None = None) -> tuple[list, list]:
    """Enqueue the device sort of ``d_in`` into ``d_out`` behind the copies ``h2d``.

    With one segment (``t == 0``), ``sort_waves`` and a GPU's sort (not ``"radix"``), each
    wave (of ``waves[i]`` pieces, in order: :meth:`PipelineOptions.waves`) is sorted as soon as its copies are in,
    and the waves' runs are merged as they come (:func:`wave_merges`); each wave is
    sorted into ``d_in`` (in place) or ``d_out`` by the parity of the merges
    its keys go through, so that the last merge writes ``d_out``.

    ``prepare(a, b, wait_for)``, if given, enqueues what fills ``d_in[a:b]``
    once the copies ``wait_for`` are in (e.g. packing keys) and returns its
    event, which the sort of that range waits for instead.  ``bits``: passed
    to the radix sorts (:meth:`DeviceSorter.sort`).  No waves with the CPU-shaped radix sort: a CPU
    device's sort shares the cores that stage the next wave, and merging the
    waves would cost it passes of its own.

    Returns ``(steps, segments)``: per step ``(kind, runs, keys, copies it
    waited for, last event)``, and the ``2**t`` sorted segments.
    """
    w = sorter.dtype.itemsize
    steps: list[tuple[str, int, int, list, Any]] = []

    def ready(a: int, b: int, copies: list) -> list:
        return copies if prepare is None else [prepare(a, b, copies)]

    if t == 0 and sort_waves and sorter.algorithm != "radix":
        assert sum(waves) == len(pieces), "the waves hold every piece"
        ends = list(itertools.accumulate(waves))
        spans = list(zip([0, *ends[:-1]], ends))
        bounds = [(pieces[i][0], pieces[j - 1][1]) for i, j in spans]
        merges, depth = wave_merges(waves)
        where = [d_out if d % 2 == 0 else d_in for d in depth]  # each run's buffer, from its wave's
        for v, ((i, j), (a, b)) in enumerate(zip(spans, bounds)):
            sub_in = d_in.get_sub_region(a * w, (b - a) * w)
            sub_out = sub_in if where[v] is d_in else d_out.get_sub_region(a * w, (b - a) * w)
            ev = sorter.sort(sub_in, b - a, out=sub_out, wait_for=ready(a, b, h2d[i:j]), bits=bits)[1]
            steps.append(("sort", 1, b - a, h2d[i:j], ev))
            for x, y, z, after in merges:
                if after != v:
                    continue
                src = where[x]
                assert where[y] is src, "runs to merge lie in one buffer"
                dst = d_in if src is d_out else d_out
                (a0, a1), (b0, b1) = (bounds[x][0], bounds[y - 1][1]), (bounds[y][0], bounds[z - 1][1])
                ev = sorter.merge(src, a1 - a0, src, b1 - b0, a_offset=a0, b_offset=b0, out=dst, out_offset=a0)[1]
                steps.append(("merge", 2, b1 - a0, [], ev))
                where[x:z] = [dst] * (z - x)
        assert all(buf is d_out for buf in where)
        return steps, [(0, n)]
    align = max(1, int(lease.device.mem_base_addr_align) // 8 // w)
    segs = _segments(n, t, align)
    for i, (a, b) in enumerate(segs):
        sub_in = d_in.get_sub_region(a * w, (b - a) * w)
        sub_out = d_out.get_sub_region(a * w, (b - a) * w)
        ev = sorter.sort(sub_in, b - a, out=sub_out, wait_for=ready(0, n, h2d) if i == 0 else None, bits=bits)[1]
    steps.append(("sort", len(segs), n, h2d, ev))
    return steps, segs


def _enqueue_rows(lease: DeviceLease, d_buf: Any, stage: np.ndarray, pieces: list, h2d: list,
                  m: int) -> tuple[list, list]:
    """Enqueue, piece by piece of whole rows, the sort of each row of ``m`` keys of ``d_buf`` in place as soon as
    the piece's copy ``h2d[k]`` is in (on the lease's queue), then the piece's copy back into ``stage`` once its
    sort ends, on the lease's download queue: each copy back overlaps the next pieces' sorts and copies up.
    ``(steps, copies back)``.

    With the copies back on the sorts' queue, each sort waited for the copy back before it: on the H100 machine
    (2^14 rows of 2^10 float32 in 16 pieces, ``experiments/results/h100/pipeline_streaming_rows.json``) the
    sorts and copies back then ran one after another at 0.11-0.15 ms a piece of 4 MiB, as slow as the staging.
    """
    sorter = DeviceSorter.for_rows(lease, stage.dtype, m)
    steps, d2h = [], []
    for (a, b), h in zip(pieces, h2d):
        ev = sorter.sort_rows(d_buf, a, b, m, wait_for=[h])
        steps.append(("sort", -(-(b - a) // m), b - a, [h], ev))
        d2h.append(cl.enqueue_copy(lease.download_queue, stage[a:b], d_buf, src_offset=a * stage.itemsize,
                                   is_blocking=False, wait_for=[ev]))
    return steps, d2h


def wait_staged(staging_tasks: list) -> None:
    """Wait for :func:`stage_pieces`' tasks in order (the caller's own share, first, runs now); the first error
    raised, after which the caller calls :func:`quiesce`.  This frame, which that error's traceback keeps, holds
    no future (a future holds the error: a cycle that would keep the staging memory until a collection)."""
    for i in range(len(staging_tasks)):
        staging_tasks[i].result()


def quiesce(staging_tasks: list, queues: tuple) -> None:
    """After a failure: wait for the staging tasks and finish the queues, so that nothing still writes into the
    staging or result memory once the caller sees the error (a faulted queue's own error is already on its way).
    ``staging_tasks`` is emptied: the caller's frame, kept by the error's traceback, then holds none of them."""
    for f in staging_tasks:
        f.exception()
    staging_tasks.clear()
    for queue in queues:  # every queue flushed before any is finished: one's commands may wait for another's
        try:
            queue.flush()
        except Exception:
            pass
    for queue in queues:
        try:
            queue.finish()
        except Exception:
            pass


def copy_out(rt: Runtime, jobs: Sequence[tuple[np.ndarray, np.ndarray, list, list]], rec: Recorder, *,
             stream: bool = True) -> None:
    """For each job ``(stage, dst, pieces, d2h)``: thread-pool workers copy each piece ``(a, b)`` from ``stage`` into
    ``dst`` as soon as its device-to-host copy (``d2h``, one event a piece) ends (by streaming stores with
    ``stream``: :func:`hpu.core.streaming.stream_copy`); returns once every piece is copied.  Every job's pieces are
    queued before any is waited for."""
    # Touch dst's pages while the DMA engine and the device work (after staging): its first-touch page faults would
    # otherwise slow the copy-out (experiments/bench_host_memory.py).  Not where the pool's memory is mapped already.
    def touch(dst: np.ndarray, a: int, b: int) -> None:
        t0 = rec.now()
        dst[a:b] = 0
        rec.add(f"cpu:{threading.current_thread().name}", "touch", -1, t0, rec.now(), 1, b - a, 0)

    # finished long before the sort; never race a copy-out
    wait_all(rt.pool.submit(touch, dst, a, b) for _, dst, pieces, _ in jobs if not rt.host_pool.paged_in(dst)
             for a, b in pieces)

    def piece(ev: Any, stage: np.ndarray, dst: np.ndarray, a: int, b: int) -> None:
        cl.wait_for_events([ev])  # not ev.wait(): that lets go of the copy's host array, whose size the trace reads
        t0 = rec.now()
        copy_into(dst[a:b], stage[a:b], stream)
        rec.add(f"cpu:{threading.current_thread().name}", "stage", -1, t0, rec.now(), 1, b - a,
                (b - a) * dst.itemsize)

    # Every piece ends before an error is raised: none writes into dst after its caller's redo.
    wait_all(rt.pool.submit(piece, ev, stage, dst, a, b) for stage, dst, pieces, d2h in jobs
             for ev, (a, b) in zip(d2h, pieces))


def copied_bytes(ev: Any) -> int:
    """Bytes a host-device copy event of pyopencl moves: its host array's (0 for an event without one)."""
    ward = ev.get_ward() if hasattr(ev, "get_ward") else None
    return 0 if ward is None else memoryview(ward).nbytes


def prepare_record(rec: Recorder, h2d: list, d2h: list, steps: list, t: int, itemsize: int,
                   unit: str = "") -> Callable[[], None]:
    """The first half of :func:`defer_record`, for enqueued copies and steps: read their handles while the device
    works; returns ``ended()``, to be called once the last copy down has ended, which takes the host's clock and
    queues the reading of the device times until the trace is resolved (:meth:`Trace.resolve`).

    Call it before waiting for the copies: the handles are then read while the device works rather than after
    the last copy down, and afterwards the caller holds the only references to pyopencl's copy events, which it may
    let go as they end (freeing such an event waits for its copy, with Python's global lock held).  A copy's bytes
    are its host array's (:func:`copied_bytes`).
    """
    # Plain handles of the copies: pyopencl's copy events keep their host array alive, and a trace that held them
    # would keep the result's pooled memory from being recycled.
    plain = {id(e): cl.Event.from_int_ptr(e.int_ptr) for e in h2d + d2h}
    moved = {id(e): copied_bytes(e) for e in h2d + d2h}
    h2d, d2h = [(plain[id(e)], moved[id(e)]) for e in h2d], [(plain[id(e)], moved[id(e)]) for e in d2h]
    steps = [(kind, parts, keys, [plain[id(e)] for e in waited], ev) for kind, parts, keys, waited, ev in steps]
    host_end = 0.0

    def record() -> None:  # reading ~40 events' times costs host time
        try:  # the device clock at the recorder's start, from the last copy's end (copies of several queues)
            rec.device_offset = max(e.profile.end for e, _ in d2h) * 1e-9 - host_end
        except Exception:  # no profiling: every device event is put at the end
            rec.device_offset = None
        for (ev, nbytes), kind in [(e, "h2d") for e in h2d] + [(e, "d2h") for e in d2h]:
            rec.add(f"bus{unit}", kind, -1, *event_times(ev, rec, host_end), 1, nbytes // itemsize, nbytes)
        prev_end = -np.inf
        for kind, parts, keys, waited, ev in steps:
            # A step starts when the one before it and the copies it waited for have ended (in-order queue; a
            # step of another queue, such as a key-value sort's gathers, is at least not drawn starting after it ends).
            end = event_times(ev, rec, host_end)[1]
            start = min(max([prev_end, *(event_times(e, rec, host_end)[1] for e in waited)]), end)
            prev_end = end
            rec.add(f"device{unit}", kind, t, start, prev_end, parts, keys // parts, keys * itemsize)

    def ended() -> None:
        nonlocal host_end
        host_end = rec.now()
        rec.deferred.append(record)

    return ended


def defer_record(rec: Recorder, h2d: list, d2h: list, steps: list, t: int, itemsize: int, unit: str = "") -> None:
    """Queue the reading of ended copies' and steps' device times until the trace is resolved
    (:meth:`Trace.resolve`): :func:`prepare_record`, then its ``ended()`` at once.

    Wait for the copies with ``cl.wait_for_events``, as ``event.wait()`` lets go of the host array whose size
    the trace reads."""
    prepare_record(rec, h2d, d2h, steps, t, itemsize, unit)()


def device_share(rt: Runtime, lease: DeviceLease, src: np.ndarray, t: int, rec: Recorder,
                 dst: np.ndarray | None, options: PipelineOptions, unit: str = "",
                 row_length: int | None = None, staged: Callable[[], None] | None = None) -> list[np.ndarray]:
    """Sort ``src`` on the lease's device as ``2**t`` segments; return the sorted runs as views of its staging memory.

    With ``row_length`` (``t == 0``, at most the tile of
    :meth:`DeviceSorter.for_rows`), sort each row of that many keys instead
    (a segmented sort): each staged piece of whole rows is copied up, its
    rows sorted in place, one work-group a row, and copied back while the
    next pieces are staged and copied up.

    With ``dst`` (only when ``t == 0``) the result ends in ``dst`` and
    ``[dst]`` is returned: when ``dst`` is pinned memory of ``rt``'s host
    pool in the lease's context it is the staging buffer itself (and when
    ``src`` is ``dst``, nothing is staged: the sort is in place); otherwise
    thread-pool workers copy each chunk from the pinned staging buffer into
    ``dst`` as soon as its device-to-host copy completes.  When ``src`` is
    itself pinned memory of ``rt``'s host pool in the lease's context (such
    as an earlier result that the caller passes on), the DMA engine reads
    it directly: nothing is staged.  ``rt`` gives
    the thread pool and host pool (a peer device's lease may come from
    another runtime); ``unit`` suffixes the trace's ``device`` and ``bus``.
    ``staged()``, if given, is called once the staging tasks are queued in the
    pool (and nothing else of the call's is): work it queues comes behind them.
    """
    n, dt = src.shape[0], src.dtype
    nbytes = n * dt.itemsize
    d_in = lease.buffer("in", nbytes)
    in_place = dst is not None and rt.host_pool.is_pinned(dst) and lease.context is rt.context
    stage = dst if in_place else lease.pinned("staging", nbytes)[:nbytes].view(dt)
    up = src if dma_reads(rt, lease, src) else stage
    q, cq = lease.queue, lease.copy_queue
    queues = (cq, q) if row_length is None else (cq, q, lease.download_queue)  # made before anything can fail
    pieces, ready, tasks, staging_tasks = stage_pieces(rt, lease, src, up, rec, options.piece_bytes(), row_length,
                                                       most_tasks=options.staging_tasks, stream=options.stream_copies,
                                                       native=options.native_staging, slices=options.staging_slices)
    try:
        if staged is not None:
            staged()
        # The whole pipeline is enqueued at once: each copy waits for its piece to be staged.  Every event is kept
        # before a Ctrl-C can unwind (interrupts_deferred): a dropped copy's event would wait for the staging.
        with interrupts_deferred():
            h2d = upload_pieces(cq, d_in, up, pieces, ready)
            cq.flush()
            if row_length is None:
                d_out = lease.buffer("out", nbytes)
                sorter = DeviceSorter.of_lease(lease, dt, options.device_algorithm(lease.device, dt))
                steps, segs = enqueue_sorts(lease, sorter, h2d, pieces, options.waves(len(pieces), tasks), n, t,
                                            d_in, d_out, options.sort_waves)
                # One copy down unless copy_out takes the pieces as they land: every copy's event costs the call an
                # enqueue and, freed, a wait.  Into a named list (download_pieces says why).
                d2h: list = []
                download_pieces(q, stage, d_out, pieces if dst is not None and not in_place else [(0, n)], d2h)
            else:
                (steps, d2h), segs = _enqueue_rows(lease, d_in, stage, pieces, h2d, row_length), [(0, n)]
                lease.download_queue.flush()
            q.flush()
        wait_staged(staging_tasks)
    except BaseException:
        quiesce(staging_tasks, queues)  # stage may be the result
        raise
    ended = prepare_record(rec, h2d, d2h, steps, t, dt.itemsize, unit)
    if h2d:  # ended before the copies down: their events are freed at no cost now, not after those
        cl.wait_for_events(h2d)
    del h2d, steps
    if dst is not None and not in_place:
        copy_out(rt, [(stage, dst, pieces, d2h)], rec, stream=options.stream_copies)
    cl.wait_for_events(d2h[-1:])
    ended()
    if dst is not None:
        return [dst]
    return [stage[a:b] for a, b in segs]


def dma_reads(rt: Runtime, lease: DeviceLease, a: np.ndarray) -> bool:
    """Whether the lease's DMA engine reads ``a`` itself, so that copies up come from ``a`` unstaged: C-contiguous
    pinned memory of ``rt``'s host pool in the lease's context (an earlier result passed on, or
    :meth:`hpu.Runtime.empty_pinned`)."""
    return bool(a.flags.c_contiguous) and rt.host_pool.is_pinned(a) and lease.context is rt.context


def fast_sort(arr: np.ndarray, rt: Runtime, *, strategy: str, alpha: float, transfer_level: int,
              on_device_error: str = "fallback", split: Any = None, cpu_threads: int = 0,
              options: PipelineOptions = DEFAULT_OPTIONS) -> tuple[np.ndarray, Trace]:
    """Sort ``arr`` in fast mode with a CPU share ``alpha`` and ``2**transfer_level`` device segments.

    Parameters
    ----------
    arr : numpy.ndarray, shape (n,)
        Native-order numeric array (int32, uint32, int64, uint64, float32,
        float64); never modified.
    rt : Runtime
    strategy : str
        Recorded in the trace (``alpha``/``transfer_level`` decide the work).
    alpha : float
        Fraction of the input (its first ``round(alpha n)`` elements) sorted
        on the CPU, in [0, 1]; raised when the device share would not fit in
        device memory.
    transfer_level : int
        >= 0: the device sorts its share as ``2**transfer_level`` segments
        (capped so that segments keep at least 1024 keys).
    on_device_error : {"fallback", "raise"}
    split : optional
        Recorded in the trace.
    cpu_threads : int
        Threads that sort when the CPU sorts everything: 0 for all of
        ``rt.threads``, else at most that many (the CPU share of a split
        always uses all).
    options : PipelineOptions
        Staging piece size and wave sorting.

    Returns
    -------
    sorted : numpy.ndarray, shape (n,)
        Equal to ``np.sort(arr, kind="stable")``; a new array, from
        ``rt.host_pool`` when it has room (:mod:`hpu.core.hostmem`; pinned when
        the device alone sorts it).
    trace : Trace

    Raises
    ------
    DeviceFailure
        With ``on_device_error="raise"`` when the device fails.
    """
    n, dt = arr.shape[0], arr.dtype
    rec = Recorder()
    src = np.ascontiguousarray(arr)
    use_device = rt.has_device and rt.supports(dt) and alpha < 1.0
    n_cpu = n if not use_device else int(round(alpha * n))
    if use_device:
        n_cpu = max(n_cpu, n - max_device_elements(rt, dt.itemsize))
    n_dev = n - n_cpu
    t = max(0, min(int(transfer_level), max(0, int(np.log2(max(n_dev, 1))) - 10)))  # segments >= 2^10 keys
    # One device run goes straight into out (pinned: the DMA engine writes it); else the CPU writes out.
    pinned = n_cpu == 0 and t == 0
    rental = Rental("sort", n, dt.itemsize)
    kept = rental.kept(rt, options) if pinned else "pin"
    out = rt.host_pool.empty_or_new(n, dt, pinned=pinned, kept=kept, inputs=(arr,))
    trace = Trace(strategy, n_cpu / n if n else 1.0, t, int(np.ceil(np.log2(max(n, 2)))), n, split=split)

    if n_dev == 0:
        tt = rec.now()
        threads = min(cpu_threads, rt.threads) if cpu_threads > 0 else rt.threads
        parallel_sort(src, rt.pool, threads, out=out, scratch=rt.host_pool.empty(n, dt),
                      method=cpu_method(rt, n, dt, options))
        rec.add("cpu:pool", "sort", 0, tt, rec.now(), 1, n, src.nbytes)
        return out, rec.finish(trace)

    direct = out if n_cpu == 0 and t == 0 else None  # one device run: stream it straight into out

    def cpu_share() -> np.ndarray:
        cpu_run = np.empty(n_cpu, dtype=dt)
        tt = rec.now()
        parallel_sort(src[:n_cpu], rt.pool, rt.threads, out=cpu_run, scratch=rt.host_pool.empty(n_cpu, dt),
                      method=cpu_method(rt, n_cpu, dt, options))
        rec.add("cpu:pool", "sort", 0, tt, rec.now(), 1, n_cpu, n_cpu * dt.itemsize)
        return cpu_run

    def redo() -> list[np.ndarray]:
        tt = rec.now()
        run = parallel_sort(src[n_cpu:], rt.pool, rt.threads, method=cpu_method(rt, n_dev, dt, options))
        rec.add("cpu:pool", "fallback", 0, tt, rec.now(), 1, n_dev, n_dev * dt.itemsize)
        return [run]

    def finish(r: HybridResult) -> None:  # runs while the lease (whose staging memory holds the runs) is held
        trace.fallback = r.fallback
        runs = ([r.cpu] if r.cpu is not None else []) + list(r.device)
        if not (len(runs) == 1 and runs[0] is out):
            tt = rec.now()
            if len(runs) == 1:
                parallel_copy(runs[0], out, rt.pool, rt.threads, stream=options.stream_copies)
            else:
                multiway_merge(runs, out, rt.pool, rt.threads)
            rec.add("cpu:pool", "merge" if len(runs) > 1 else "stage", 0, tt, rec.now(), len(runs), n, src.nbytes)

    run_hybrid(rt, device=lambda lease: device_share(rt, lease, src[n_cpu:], t, rec, direct, options),
               cpu=cpu_share if n_cpu else None, redo=redo, on_device_error=on_device_error, finish=finish)
    return out, rental.record(rt, out, rec.finish(trace)) if pinned else rec.finish(trace)


# -- rows of at most a tile: a segmented sort without merge passes ----------------------------------------------


def row_tile(rt: Runtime, dtype: Any) -> int:
    """The longest rows :func:`fast_row_sort` sorts on ``rt``'s device: the tile (keys a work-group sorts in local
    memory) of its largest merge-sort work-group for ``dtype`` keys (:class:`DeviceSorter`); 0 for dtypes it does
    not sort (:data:`hpu.core.kernels.CL_TYPES`, native, float64 only with fp64) or without a device.

    The sorter is built on a lease (the next call that borrows it reuses it): a lease's device and context are one
    generation's, where the runtime's may become None at any moment (another thread's failed rebuild)."""
    dt = np.dtype(dtype)
    if not (rt.has_device and dt in CL_TYPES and dt.isnative and rt.supports(dt)):
        return 0

    def tile() -> int:
        lease = rt.acquire_lease()
        try:
            return DeviceSorter.of_lease(lease, dt, "merge").tile
        finally:
            rt.release_lease(lease)

    try:
        return rt.resources.get(("row-tile", dt.str), tile, int)
    except DeviceFailure:  # no device left
        return 0


def fast_row_sort(keys: np.ndarray, m: int, rt: Runtime, *, sort_into: Callable[[np.ndarray, np.ndarray], None],
                  cpu_rows: int = 0, on_device_error: str = "fallback", options: PipelineOptions = DEFAULT_OPTIONS,
                  strategy: str = "gpu") -> tuple[np.ndarray, Trace]:
    """Sort each row of ``m`` keys stably: the device its rows one work-group a row, pipelined with the copies, while
    the CPU pool sorts the first ``cpu_rows`` rows.

    The host stages pieces of the device's whole rows into pinned memory (the
    result itself when the host pool has it, as :func:`fast_sort`); each
    piece is copied up, its rows sorted in place by the merge sort's leaf
    kernel (``kernels_cl/fastsort.cl``: a register sort and merge-path merges
    in local memory, so no global merge pass) and copied back while the next
    pieces are staged and copied up (:func:`device_share` with
    ``row_length``).  The CPU share's rows go to the pool in blocks, one
    task for each thread the staging leaves free, queued once the staging's tasks are,
    each ``sort_into`` its rows of the result;
    the two shares write disjoint rows of the result, so nothing is merged.

    Parameters
    ----------
    keys : numpy.ndarray, shape (n,)
        Rows of ``m`` keys one after another (``n`` a multiple of ``m``);
        a dtype of :data:`hpu.core.kernels.CL_TYPES` in native byte order
        that the device supports.  Never modified.
    m : int
        Keys per row, ``1 <= m <= row_tile(rt, keys.dtype)``.
    rt : Runtime
        With a device; the caller checks that the device's rows fit its memory.
    sort_into : callable(block, out) -> None
        The CPU's sort of a block of rows into ``out`` (both of shape ``(k, m)``,
        e.g. ``out[...] = numpy.sort(block, axis=-1, kind="stable")``): for the
        CPU share, and for the device's rows when the device fails and
        ``on_device_error="fallback"``.  It must release the GIL to run in parallel.
    cpu_rows : int
        Rows the CPU sorts, ``0 <= cpu_rows <= n / m`` (all: no device).
    on_device_error : {"fallback", "raise"}
    options : PipelineOptions
        :meth:`PipelineOptions.piece_bytes`: bytes per piece (rounded down to whole rows, at least one).
    strategy : str
        Recorded in the trace.

    Returns
    -------
    sorted : numpy.ndarray, shape (n,)
        Each row equal to ``numpy.sort(row, kind="stable")``, bit for bit
        (NaN last, -0.0 and +0.0 in input order); from ``rt.host_pool``
        (pinned) when it has room.
    trace : Trace
        ``alpha`` is the CPU's share of the rows.

    Raises
    ------
    TypeError
        Keys of a dtype the device does not sort.
    ValueError
        ``m`` outside ``[1, row_tile]`` or not dividing ``n``; ``cpu_rows``
        out of range.
    DeviceFailure
        With ``on_device_error="raise"`` when the device fails.
    """
    n, dt = keys.shape[0], keys.dtype
    # No device left (another thread's failed rebuild since the caller's check): any m; the device share falls back.
    tile = row_tile(rt, dt) or (0 if rt.has_device else max(m, 1))
    if tile == 0:
        raise TypeError(f"fast_row_sort sorts native {', '.join(map(str, CL_TYPES))} keys the device supports, "
                        f"not {dt}")
    if not 1 <= m <= tile or n % m:
        raise ValueError(f"rows of m={m} keys must divide the {n} keys and hold at most the tile, {tile} keys")
    r, cpu_rows = n // m, int(cpu_rows)
    if not 0 <= cpu_rows <= r:
        raise ValueError(f"cpu_rows must lie in [0, {r}], got {cpu_rows}")
    split, rec = cpu_rows * m, Recorder()
    rental = Rental("rows", n - split, dt.itemsize)
    out = rt.host_pool.empty_or_new(n, dt, pinned=True, kept=rental.kept(rt, options), inputs=(keys,))
    trace = Trace(strategy, cpu_rows / r, 0, int(np.ceil(np.log2(max(m, 2)))), n)
    rows_in, rows_out = keys.reshape(r, m), out.reshape(r, m)
    staging = _staging_tasks(rt, -(-(n - split) // _piece_length(dt.itemsize, options.piece_bytes(), m)),
                             options.staging_tasks)

    # The device share runs on this thread, as without a CPU share, and queues the CPU's tasks right behind its
    # staging tasks: queued first, they held the staging back by 1-2 ms on the H100 machine
    # (experiments/results/h100/pipeline_rows_share_before.log).  From a pool worker submissions run at once: there
    # the CPU share runs on this thread beside the device share's feeder thread.
    t0, tasks = rec.now(), rt.threads if cpu_rows == r else max(1, rt.threads - staging)
    queued: list[Future] = []
    on_worker = rt.pool.in_worker()

    def queue_cpu_share() -> None:
        if cpu_rows > 0 and not queued:
            queued.extend(_rows_in_pool(rt, rows_in[:cpu_rows], rows_out[:cpu_rows], sort_into, tasks))

    def cpu_share() -> None:
        queue_cpu_share()  # unless the device share did
        wait_all(queued)
        rec.add("cpu:pool", "sort", 0, t0, rec.now(), 1, split, split * dt.itemsize)

    def redo() -> list[np.ndarray]:
        t1 = rec.now()
        part = np.empty((r - cpu_rows, m), dt)
        wait_all(_rows_in_pool(rt, rows_in[cpu_rows:], part, sort_into, rt.threads))
        rec.add("cpu:pool", "fallback", 0, t1, rec.now(), 1, n - split, (n - split) * dt.itemsize)
        return [part]

    def finish(res: HybridResult) -> np.ndarray:
        trace.fallback = res.fallback
        if res.fallback:
            rows_out[cpu_rows:] = res.device[0]
        return out

    device = None if cpu_rows == r else (
        lambda lease: device_share(rt, lease, keys[split:], 0, rec, out[split:], options, row_length=m,
                                   staged=None if on_worker else queue_cpu_share))
    if on_worker or device is None or cpu_rows == 0:
        result = run_hybrid(rt, device=device, cpu=cpu_share if cpu_rows else None, redo=redo,
                            on_device_error=on_device_error, finish=finish)
    else:
        try:
            result = run_hybrid(rt, device=device, redo=redo, on_device_error=on_device_error, finish=finish)
        except BaseException:
            wait(queued)  # no task left writing into the result (pooled memory) once the error propagates
            raise
        cpu_share()  # the CPU's rows, queued by the device share (or now, if it failed before and was redone)
    if device is None:
        return result, rec.finish(trace)
    return result, rental.record(rt, out, rec.finish(trace))


def _rows_in_pool(rt: Runtime, src: np.ndarray, dst: np.ndarray,
                  sort_into: Callable[[np.ndarray, np.ndarray], None], tasks: int) -> list[Future]:
    """Queue ``sort_into(src[block], dst[block])`` over at most ``tasks`` blocks of whole rows in ``rt``'s pool;
    the tasks' futures."""
    bounds = np.linspace(0, src.shape[0], max(1, min(tasks, src.shape[0])) + 1).astype(np.int64)
    return [rt.pool.submit(sort_into, src[a:b], dst[a:b]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


# -- argsort and key-value sorts with the packing on the device ------------------------------------------------

_WORDS = ((8, "ulong"), (4, "uint"), (2, "ushort"), (1, "uchar"))
#: Ranges a value array of a key-value sort is gathered in on the device, each copied down once gathered
#: (:func:`_gather_ranges`).
GATHER_RANGES = 8


def keyed_key_type(dtype: Any) -> tuple[str, int] | None:
    """``(OpenCL type, KEY_KIND)`` of ``kernels_cl/keyed.cl`` for keys of ``dtype`` that :func:`fast_keyed_sort`
    packs on the device: native 32- and 64-bit integers and floats, datetime64 and timedelta64; None for others."""
    dt = np.dtype(dtype)
    if dt.kind in "Mm" and dt.isnative:  # 64-bit integers underneath
        return cl_type(np.int64), 3
    return (cl_type(dt), "uif".index(dt.kind)) if dt in CL_TYPES else None


def keyed_fits(rt: Runtime, n: int, itemsizes: Sequence[int], gathered: bool) -> bool:
    """Whether :func:`fast_keyed_sort` of ``n`` keys fits ``rt``'s device.

    Parameters
    ----------
    rt : Runtime
        With a device.
    n : int
        Keys.
    itemsizes : sequence of int
        Bytes per element of the keys and of each value array.
    gathered : bool
        Whether the arrays are gathered (key-value and row sorts), which
        needs a second copy of each on the device.

    Returns
    -------
    bool
        The arrays, three 8-byte buffers (packed, sorted, the sorter's
        scratch) and the gathered copies take at most
        :attr:`hpu.Runtime.device_memory_bytes`, and each buffer at most the
        device's largest allocation.
    """
    dev = rt.device
    per_element = sum(itemsizes) * (2 if gathered else 1) + 3 * 8
    return n * per_element <= rt.device_memory_bytes and n * max(8, *itemsizes) <= dev.max_mem_alloc_size


def fast_keyed_sort(keys: np.ndarray, values: Sequence[np.ndarray], rt: Runtime, *, gather: bool = False,
                    row_length: int | None = None, redo: Callable[[], list[np.ndarray]] | None,
                    on_device_error: str = "fallback", options: PipelineOptions = DEFAULT_OPTIONS,
                    strategy: str = "gpu") -> tuple[list[np.ndarray], Trace]:
    """The device alone sorts ``keys`` (or each row of them) as (key, position) pairs that it packs itself; the
    stable argsort, or the keys and values gathered in its order.

    The host stages the keys (and values) into pinned memory as in
    :func:`fast_sort` and copies them up as they are; the device packs each
    key's 32-bit digit with its column, ``row << (32 + c) | digit << c | col``
    with ``c = bits(m - 1)`` (:mod:`hpu.sorting.keys`; ``kernels_cl/keyed.cl``;
    one row: ``row = 0``; 64-bit keys: the low digit, then the high one),
    sorts the packed 64-bit integers (wave by wave with
    ``options.sort_waves``) and merges the waves (:class:`DeviceSorter`),
    then keeps their low bits (the positions) or gathers every array by them,
    and the results are copied straight into pinned result memory (results
    in plain memory, where the caller keeps earlier ones, come down through
    the arrays' staging memory, each piece copied on by the thread pool as it
    lands: :func:`_keyed_download`).  No
    host pass over the keys besides the staging copy: the host-side packing
    (:func:`hpu.sorting.keys.pack`) costs two passes over twice the data.

    Parameters
    ----------
    keys : numpy.ndarray, shape (n,)
        A dtype of :func:`keyed_key_type` (float64 where the device has
        fp64), ``1 <= n``: one row, or rows of ``row_length`` one after
        another.  Never modified.  64-bit keys take two sorts of 32-bit
        digits, least significant first (an LSD radix sort, each pass stable).
    values : sequence of numpy.ndarray, each shape (n,)
        Arrays of any fixed-size dtype without objects, gathered along with
        the keys (with ``gather``).
    gather : bool
        Return the keys and values in sorted order rather than the positions.
    rt : Runtime
        With a device; the caller checks :func:`keyed_fits`.
    row_length : int, optional
        ``m``, dividing ``n``: sort each row of ``m`` keys (default one row,
        ``m = n``).  ``bits(n / m - 1) + 32 + bits(m - 1) <= 64``
        (:func:`hpu.sorting.keys.packed_bits`), so ``m < 2**32``.
    redo : callable() -> list of numpy.ndarray, or None
        The same result on the CPU, run when the device fails and
        ``on_device_error="fallback"`` (None only with ``"raise"``).
    on_device_error : {"fallback", "raise"}
    options : PipelineOptions
    strategy : str
        Recorded in the trace.

    Returns
    -------
    results : list of numpy.ndarray, each shape (n,)
        ``[numpy.argsort(keys, kind="stable")]`` as int64 without ``gather``
        (each row's, flattened, for rows); else ``[keys[perm], *(v[perm]
        for v in values)]`` with that (flat) ``perm``: every bit kept, the two
        zeros and NaN payloads as numpy leaves them.
        From ``rt.host_pool`` (pinned) when it has room.
    trace : Trace

    Raises
    ------
    TypeError
        Keys of a dtype :func:`keyed_key_type` does not take, or values
        holding Python objects (with ``gather``).
    ValueError
        Values of another length than the keys (with ``gather``), or a
        ``row_length`` that does not divide ``n`` or packs into more than 64 bits.
    DeviceFailure
        With ``on_device_error="raise"`` when the device fails.
    """
    n = keys.shape[0]
    if keyed_key_type(keys.dtype) is None:
        raise TypeError(f"fast_keyed_sort packs native 32- and 64-bit numeric, datetime64 and timedelta64 keys on "
                        f"the device, not {keys.dtype}")
    if gather:
        for v in values:
            if v.dtype.hasobject:
                raise TypeError(f"values of dtype {v.dtype} hold Python objects; the device cannot gather them")
            if v.shape != keys.shape:
                raise ValueError(f"values of shape {v.shape} for keys of shape {keys.shape}")
    m = n if row_length is None else int(row_length)
    if m < 1 or n % m or packed_bits(32, m, n // m) > 64:
        raise ValueError(f"row_length {row_length} does not divide {n} keys into rows packed in 64 bits")
    rec = Recorder()
    trace = Trace(strategy, 0.0, 0, int(np.ceil(np.log2(max(n, 2)))), n)
    dtypes = [keys.dtype, *(v.dtype for v in values)] if gather else [np.dtype(np.int64)]
    # The meter's kind: rows and one row apart
    rental = Rental(f"keyed-{'values' if gather else 'positions'}-{m}", n, sum(dt.itemsize for dt in dtypes))
    outs = _result_arrays(rt, n, dtypes, rental.kept(rt, options), (keys, *values))

    def finish(r: HybridResult) -> list[np.ndarray]:
        trace.fallback = r.fallback
        return r.device

    carried = list(values) if gather else None
    result = run_hybrid(rt, device=lambda lease: _keyed_share(rt, lease, keys, carried, m, outs, rec, options),
                        redo=redo, on_device_error=on_device_error, finish=finish)
    return result, rental.record(rt, outs[0], rec.finish(trace))


def _result_arrays(rt: Runtime, n: int, dtypes: Sequence[np.dtype], kept: Callable[[int], str],
                   inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Uninitialised arrays of ``n`` elements of each of ``dtypes``: views of one block of ``rt.host_pool`` (pinned
    where it has room; ``kept``, the call's :meth:`Rental.kept`, for the whole block), at offsets aligned to 64 bytes.

    One request a call: the pool takes a pinned block of a result's size that is still leased for a result the
    caller keeps (:meth:`hpu.core.hostmem.HostArrayPool.empty`), and with one request for each result a call's own
    first result looked like one: after an argsort had left a single 128 MB block, each key-value sort of 2^24 int32
    keys put its keys there and its values in plain memory.  ``inputs``, the arrays the call reads, are not
    results kept (an input in pinned memory is not staged, and its block would otherwise look like one).  The
    block returns to the pool when every view is gone.
    """
    sizes = [n * dt.itemsize for dt in dtypes]
    offsets = np.cumsum([0] + [-(-size // 64) * 64 for size in sizes]).tolist()
    block = rt.host_pool.empty_or_new(offsets[-1], np.uint8, pinned=True, kept=kept, inputs=inputs)
    return [block[o:o + size].view(dt) for o, size, dt in zip(offsets, sizes, dtypes)]


def _keyed_kernels(lease: DeviceLease, key_dtype: np.dtype, word: str) -> dict[str, Any]:
    """The kernels of ``kernels_cl/keyed.cl`` for ``key_dtype`` keys and ``word`` gathers, kept by the lease."""
    ctype, kind = keyed_key_type(key_dtype)

    def build() -> dict[str, Any]:
        prg = lease.program("keyed", {"KEY_T": ctype, "KEY_KIND": kind, "KEY_BITS": 8 * key_dtype.itemsize,
                                      "WORD_T": word})
        return {name: cl.Kernel(prg, name) for name in ("pack_keys", "unpack_positions", "compose", "gather",
                                                         "unpack_keys")}

    return lease.cached(("keyed", ctype, kind, word), build)


def _keyed_share(rt: Runtime, lease: DeviceLease, keys: np.ndarray, values: list[np.ndarray] | None, m: int,
                 outs: list[np.ndarray], rec: Recorder, options: PipelineOptions) -> list[np.ndarray]:
    """The device share of :func:`fast_keyed_sort`: stage, pack, sort, then unpack the positions (``values``
    None) or gather the keys and ``values``; copy back into ``outs``."""
    n, arrays = keys.shape[0], [keys, *(values or [])]
    col_bits, i64 = np.int32((m - 1).bit_length()), np.int64
    mask = np.uint64((1 << int(col_bits)) - 1)
    prg = _keyed_kernels(lease, keys.dtype, "ulong")
    sorter = DeviceSorter.of_lease(lease, np.uint64, options.device_algorithm(lease.device, np.uint64))
    d_src = [lease.buffer(f"keyed-in{i}", a.nbytes) for i, a in enumerate(arrays)]
    d_in, d_out = lease.buffer("in", 8 * n), lease.buffer("out", 8 * n)
    q, cq = lease.queue, lease.copy_queue
    direct = lease.context is rt.context and rt.host_pool.is_pinned(outs[0])  # outs: views of one block

    def staging(i: int, nbytes: int) -> np.ndarray:
        return lease.pinned(f"staging{i or ''}", nbytes)[:nbytes]

    # Results not pinned come down into their array's staging memory first (the argsort's positions into the keys',
    # made large enough; an input the DMA engine reads itself leaves its staging memory free): a result's copy down
    # waits for its gather, behind every copy up of that array.  Made before anything is enqueued: pinning maps
    # memory on the lease's queue, which would wait behind copies that wait for this thread's share of the staging.
    reads = [dma_reads(rt, lease, a) for a in arrays]  # inputs the DMA engine reads itself, unstaged
    downs: list[np.ndarray | None] = [None] * len(outs)
    if not direct:
        for i, out in enumerate(outs):
            try:
                downs[i] = staging(i, max(0 if reads[i] else arrays[i].nbytes, out.nbytes))[:out.nbytes]
            except cl.MemoryError:  # no pinned memory to spare: straight into the result, at the pageable rate
                pass
    stages = [a if read else staging(i, a.nbytes).view(a.dtype) for i, (a, read) in enumerate(zip(arrays, reads))]
    futures: list = []
    pack, chunk, align = prg["pack_keys"], options.piece_bytes(values=bool(values)), _staging_align(lease)
    jobs: list = []  # copy_out's, where the results are not pinned

    def packed(a: int, b: int, wait_for: list) -> Any:
        return pack(q, (b - a,), None, d_src[0], d_in, None, i64(m), col_bits, np.int32(0), i64(b),
                    global_offset=(a,), wait_for=wait_for)

    try:  # the keys staged first (the sort waits for them), then the values
        staged, tasks, futures = _stage_arrays(rt, lease, list(zip(arrays, stages)), rec, chunk,
                                               options.staging_tasks, stream=options.stream_copies,
                                               native=options.native_staging, slices=options.staging_slices)
        h2d: list[list] = []  # a named list, as device_share's copies down
        with interrupts_deferred():  # every event kept before a Ctrl-C can unwind, as in device_share
            for d, (pieces, ready), stage in zip(d_src, staged, stages):
                h2d.append(upload_pieces(cq, d, stage, pieces, ready))
            cq.flush()
            pieces = staged[0][0]
            bits = packed_bits(32, m, n // m)
            steps, _ = enqueue_sorts(lease, sorter, h2d[0], pieces, options.waves(len(pieces), tasks), n, 0, d_in,
                                     d_out, options.sort_waves, prepare=packed, bits=bits)
            order = d_out
            if keys.itemsize == 8:  # the high digits, in the low digits' order: the positions end in d_in
                order = _high_digits(prg, sorter, q, d_src[0], d_out, d_in, n, m, col_bits, mask, steps, bits)
            if values is None:
                if order is d_out:
                    steps.append(("unpack", 1, n, [], prg["unpack_positions"](q, (n,), None, d_out, mask, i64(n))))
                d2h = _keyed_download(q, order, outs[0], [(n, steps[-1][4])], downs[0], chunk, align, jobs)
            else:
                d2h = _gather_all(lease, arrays, d_src, [h[-1:] for h in h2d], order, m, col_bits, steps, outs,
                                  downs, chunk, align, jobs)
            q.flush()
            cq.flush()
        wait_staged(futures)
    except BaseException:
        quiesce(futures, (cq, q))
        raise
    ups = [e for h in h2d for e in h]
    del h2d
    ended = prepare_record(rec, ups, d2h, steps, 0, 8)
    try:
        cl.wait_for_events(ups)  # their events freed at no cost now, as in device_share
        del ups, steps
        if jobs:
            copy_out(rt, jobs, rec, stream=options.stream_copies)
        cl.wait_for_events(d2h)  # the copies down of two in-order queues
    except BaseException:  # the other queue may still be copying into the results
        quiesce([], (cq, q))
        raise
    ended()
    return outs


def _high_digits(prg: dict[str, Any], sorter: DeviceSorter, q: Any, d_keys: Any, d_first: Any, d_work: Any, n: int,
                 m: int, col_bits: np.int32, mask: np.uint64, steps: list, bits: int) -> Any:
    """The second pass of 64-bit keys: pack each key's high 32 bits in the order of the first pass's sorted
    ``d_first`` into ``d_work``, sort it there (packed integers below ``2**bits``), and map its columns back
    through ``d_first``: ``d_work`` then holds every row's stable argsort (LSD radix sort, least significant
    digit first)."""
    i64 = np.int64
    ev = prg["pack_keys"](q, (n,), None, d_keys, d_work, d_first, i64(m), col_bits, np.int32(32), i64(n))
    steps.append(("pack", 1, n, [], ev))
    steps.append(("sort", 1, n, [], sorter.sort(d_work, n, out=d_work, bits=bits)[1]))
    steps.append(("compose", 1, n, [], prg["compose"](q, (n,), None, d_first, d_work, i64(m), mask, i64(n))))
    return d_work


def _gather_all(lease: DeviceLease, arrays: list[np.ndarray], d_src: list, copied: list[list], d_sorted: Any, m: int,
                col_bits: np.int32, steps: list, outs: list[np.ndarray], downs: list, chunk: int, align: int,
                jobs: list) -> list:
    """Enqueue the sorted keys and every value array, ``dst[i] = src[row * m + column]`` (of ``sorted[i]``, whose
    low ``col_bits`` bits are the column), and their copies down into ``outs`` (through the pinned bytes
    ``downs[i]`` unless that is None, in pieces of about ``chunk`` bytes, a multiple of ``align`` elements); the
    copies' events, in order.

    The keys go on the lease's kernel queue, right behind the sort, and come down behind them
    (:func:`_keyed_download`) while the values still go up: with every copy down on the copy queue, the keys'
    waited behind the values' copies up on the H100 machine, 1.2 ms of a 13.6 ms key-value sort of 2^24 int32 keys
    with int64 values (``experiments/results/h100/pipeline_kv_before.log``).  32-bit integer keys are not gathered
    but unpacked from the sorted integers' digits (``unpack_keys``), which reads them in order: their gather took
    0.43 ms there right before the copies down, which then ran without a break to the call's end
    (``experiments/results/h100/pipeline_chain.log``).  The values are gathered on the copy queue, behind their
    own copies up (``copied[i]``, the last of them) and the sort, in ranges whose copies down go on the kernel queue
    behind the keys', each waiting for its range's gather only (:func:`_gather_ranges`).

    An element is gathered as whole words: of 8, 4, 2 or 1 bytes, the widest that divides its size.
    """
    n, d2h, sorted_ev = arrays[0].shape[0], [], steps[-1][4]
    mask = np.uint64((1 << int(col_bits)) - 1)
    for i, a in enumerate(arrays):
        size, word = next((size, word) for size, word in _WORDS if a.itemsize % size == 0)
        prg = _keyed_kernels(lease, arrays[0].dtype, word)
        dst = lease.buffer(f"keyed-out{i}", a.nbytes)
        args = (d_src[i], d_sorted, dst, np.int64(m), mask, np.int32(a.itemsize // size))
        # Two queues at most run one program of the lease at once: PoCL before 7.0 may abort with three
        # (hpu.core.runtime.pocl_shares_kernels_across_queues)
        if i:
            ranges = _gather_ranges(lease, prg["gather"], args, [sorted_ev], copied[i], n, a.itemsize, chunk, align,
                                    steps)
        elif a.dtype.kind in "iu" and a.itemsize == 4:  # the keys, in order behind the sort
            ranges = [(n, prg["unpack_keys"](lease.queue, (n,), None, d_sorted, dst, col_bits, np.int64(n)))]
            steps.append(("unpack", 1, n, [], ranges[0][1]))
        else:
            ranges = [(n, prg["gather"](lease.queue, (n,), None, *args, np.int64(n), wait_for=copied[0]))]
            steps.append(("gather", 1, n, copied[0], ranges[0][1]))
        d2h += _keyed_download(lease.queue, dst, outs[i], ranges, downs[i], chunk, align, jobs)
    return d2h


def _gather_ranges(lease: DeviceLease, gather: Any, args: tuple, after: list, copied: list, n: int, itemsize: int,
                   chunk: int, align: int, steps: list) -> list[tuple[int, Any]]:
    """Enqueue the gather of one value array (``gather(*args, end)`` over element ranges) on the lease's copy queue
    after the events ``after``, in at most :data:`GATHER_RANGES` ranges of whole pieces of ``chunk`` bytes (a
    multiple of ``align`` elements, the pieces of :func:`_keyed_download`); ``(stop, event)`` of each range, in
    order, for :func:`_keyed_download` to copy each range down as soon as its gather ends.

    Every range needs every value on the device, so the gathers begin after the last copy up; in ranges the copies
    down begin after the first range's gather rather than the whole array's (0.55 ms of a key-value sort of
    2^24 int32 keys with int64 values on the H100 machine, ``experiments/results/h100/ab_unpack/``): there the
    copies down then ended 2.55-2.68 ms after the last copy up instead of 2.98-3.00 ms in the fastest calls
    (``experiments/results/h100/ab_ranges/``).
    """
    length = _piece_length(itemsize, chunk, align)
    pieces = -(-n // length)
    ranges = min(GATHER_RANGES, pieces)
    stops = [min(n, length * (pieces * j // ranges)) for j in range(1, ranges + 1)]  # as even as whole pieces allow
    out, start = [], 0
    for stop in stops:
        ev = gather(lease.copy_queue, (stop - start,), None, *args, np.int64(stop), global_offset=(start,),
                    wait_for=after)
        steps.append(("gather", 1, stop - start, [] if out else copied, ev))
        out.append((stop, ev))
        start = stop
    return out


def _keyed_download(queue: Any, buf: Any, host: np.ndarray, ranges: list[tuple[int, Any]], stage: np.ndarray | None,
                    chunk: int, align: int, jobs: list) -> list:
    """Copy ``buf`` down into the host array ``host`` on ``queue``, each range of elements (``ranges``: ``(stop,
    event)``, in order, the last stop ``host``'s length) once its event completes; the copies' events, in order.

    Without ``stage`` (``host`` is pinned) the DMA engine writes each range of ``host`` in one copy (every copy's
    event costs the call an enqueue and, freed, a wait).  Else ``buf`` comes down into ``stage`` (pinned bytes of
    ``host``'s size) in pieces of ``chunk`` bytes (whole elements, a multiple of ``align`` of them, as the staged
    pieces: :func:`_piece_length`, :func:`_staging_align`; each range's stop a piece's end), and ``jobs`` gets the
    :func:`copy_out` job that moves each piece on into ``host`` as it lands: the DMA engine writes pageable memory
    at a fraction of its pinned rate (``experiments/results/h100/host_memory.json``).
    """
    n, s = host.shape[0], host.itemsize
    raw = _bytes(host, 0, n)
    length = _piece_length(s, chunk, align)
    pieces = [(a * s, min(a + length, n) * s) for a in range(0, n, length)]
    events: list = []  # a named list, as device_share's copies down
    start = 0
    for stop, after in ranges:
        if stage is None:
            events.append(cl.enqueue_copy(queue, raw[start * s:stop * s], buf, src_offset=start * s,
                                          is_blocking=False, wait_for=[after]))
        else:
            download_pieces(queue, stage, buf, [p for p in pieces if start * s <= p[0] < stop * s], events,
                            wait_for=[after])
        start = stop
    if stage is not None:
        jobs.append((stage, raw, pieces, events))
    return events


def upload_pieces(cq: Any, d: Any, stage: np.ndarray, pieces: list[tuple[int, int]], ready: list) -> list:
    """Enqueue the copy of each staged piece ``stage[a:b]`` into the buffer ``d`` on ``cq`` once ``ready`` says it is
    staged; the copies' events.  The queue is flushed after the first copy, which may then start (a pinned input's
    pieces are ready at once) while the others are enqueued."""
    events = []
    for (a, b), r in zip(pieces, ready):
        events.append(cl.enqueue_copy(cq, d, _bytes(stage, a, b), dst_offset=a * stage.itemsize, is_blocking=False,
                                      wait_for=[r]))
        if len(events) == 1:
            cq.flush()
    return events


def download_pieces(queue: Any, stage: np.ndarray, d: Any, pieces: list[tuple[int, int]], events: list,
                    wait_for: list | None = None) -> None:
    """Enqueue the copy of each piece ``(a, b)`` of the buffer ``d`` down into ``stage[a:b]`` (elements of ``stage``'s
    dtype, at the same offsets) on ``queue`` after ``wait_for``: :func:`upload_pieces`' counterpart.  Each copy's
    event is appended to ``events`` as it is enqueued, a list the caller names, so that an enqueue failing midway
    leaves the events of the copies already enqueued to it rather than freeing them at once (a freed copy's event
    waits for its copy, holding Python's global lock, and the copy may wait for the caller's own staging)."""
    for a, b in pieces:
        events.append(cl.enqueue_copy(queue, stage[a:b], d, src_offset=a * stage.itemsize, is_blocking=False,
                                      wait_for=wait_for))


def _bytes(a: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Elements ``start:stop`` of the contiguous 1-D ``a`` as bytes (any dtype, structured ones included, copies)."""
    return a.view(np.uint8)[start * a.itemsize:stop * a.itemsize]
