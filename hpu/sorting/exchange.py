"""Exchange sort: each device sorts a range of positions, then the devices trade key ranges (beyond the paper).

The key-range split (:mod:`hpu.sorting.keyrange`) partitions the input on
the host before any device sees it; on the H100 machine that partition
costs more than a device's whole sort.  The exchange sort leaves the
partition to the devices, after their sort, where it is a binary search
(Tanasic, Vilanova, Jordà, Cabezas, Gelado, Navarro, Hwu, "Comparison based
sorting for systems with multiple GPUs", GPGPU-6 2013, section 4: each GPU
sorts its part, the GPUs agree on pivots, swap the keys on the wrong side
and merge what they hold):

1. device ``i`` takes the positions ``[p_i, p_{i+1})`` (its share of the
   input, from the model), stages and copies them up through the fast
   pipeline and sorts them (:func:`hpu.sorting.pipeline.device_share`'s
   steps, the result kept on the device);
2. splitter keys at the same cumulative shares, from a random sample of
   the input (:func:`hpu.sorting.keyrange.choose_splitters`, drawn on a
   pool thread while the devices stage and sort), are searched
   in every sorted run on its device (``rank_bounds`` in
   ``kernels_cl/fastsort.cl``); from those counts :func:`exchange_cuts` cuts
   every run into one piece per device, so that device ``e`` ends with the
   ``e``-th range of keys in the stable order;
3. every device copies the pieces of the others' runs that belong to it
   beside its own piece: each sender copies them down into pinned memory
   of its own in chunks of :data:`EXCHANGE_CHUNK_BYTES`, the receiver
   copies each chunk up from there as soon as it has landed, on its copy
   queue, so that one chunk's copy up overlaps the next one's copy down
   and a device's copies up overlap its own copies down (a copy from buffer to buffer
   between devices of one context, which the OpenCL driver routes, was
   about 30x slower on NVIDIA's: it moves whole buffers); then it
   merges the runs it holds (:meth:`hpu.sorting.device.DeviceSorter.merge`,
   ``ceil(log2 D)`` levels) and copies its range of the result down, into
   the result itself where that is pinned for it, else through its pinned
   staging memory as the fast pipeline does.

No key is partitioned or merged by the CPU.  The devices of a
several-device runtime share one OpenCL context (:class:`hpu.Runtime`), so
that pinned memory is pinned for all of them and every copy is a DMA
transfer.  Keys equal to a
splitter are divided in the order (run, place in run), which is the
input's order: the sort is stable.  A device that fails stops the others at
their next step, and the CPU sorts the whole input again
(:func:`hpu.core.hybrid.run_units`).
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.hybrid import DeviceFailure, UnitsResult, run_units
from ..core.kernels import CL_TYPES
from ..core.runtime import DeviceLease, Runtime
from ..core.trace import Recorder, Trace
from ..core.util import interrupts_deferred
from .cpu import parallel_sort
from .device import DeviceSorter
from .keyrange import check_shares, choose_splitters
from .pipeline import (DEFAULT_OPTIONS, PipelineOptions, copy_out, cpu_method, defer_record, dma_reads,
                       Rental, download_pieces, enqueue_sorts, max_device_elements, merge_tree, quiesce,
                       stage_pieces, upload_pieces, wait_staged)

try:
    import pyopencl as cl
except Exception:  # pragma: no cover
    cl = None

__all__ = ["EXCHANGE_BUFFERS", "EXCHANGE_CHUNK_BYTES", "exchange_cuts", "exchange_fits", "exchange_sort"]

#: Keys in the random sample the splitter keys come from: a device's range deviates from its share by about
#: ``sqrt(q (1 - q) / SAMPLE) n`` keys (0.4% of ``n`` for ``q = 1/2``).
SAMPLE = 1 << 14
#: Device buffers of a device's share that an exchange sort holds at once: its input, its sorted run, the
#: sorter's scratch, the pieces it receives and their merge.
EXCHANGE_BUFFERS = 5
#: Bytes of a chunk of the exchange's pieces: each is copied up as soon as its copy down ends, so the exchange takes
#: about one direction's time plus one chunk's (16 MiB: 0.3 ms at the 50 GB/s of a PCIe 5 link).
EXCHANGE_CHUNK_BYTES = 16 << 20


def exchange_cuts(lengths: Sequence[int], lower: np.ndarray, upper: np.ndarray,
                  targets: Sequence[int]) -> np.ndarray:
    """Where each sorted run is cut so that range ``e`` of the stable order goes to device ``e``.

    For splitter ``j`` (keys non-decreasing in ``j``) the ``L_j`` keys of
    all runs that sort before its key come before the cut and the ``H_j -
    L_j`` keys equal to it are divided in the order (run, place in run),
    which is the input's order when the runs hold consecutive ranges of
    positions: the first ``clip(targets[j], L_j, H_j)`` keys of the stable
    order are those before cut ``j``.

    Parameters
    ----------
    lengths : sequence of int, length D
        Keys in each run.
    lower, upper : numpy.ndarray, shape (D, J), integer
        Keys of run ``d`` less than splitter ``j``'s key / not greater than it.
    targets : sequence of int, length J
        Non-decreasing cumulative ranks asked for (the model's shares times ``n``).

    Returns
    -------
    numpy.ndarray, shape (D, J + 2), int64
        Piece ``(d, e)`` is ``run_d[cuts[d, e] : cuts[d, e + 1]]``; each row
        is non-decreasing from 0 to ``lengths[d]``.

    Raises
    ------
    ValueError
        Shapes that do not match, a negative length, decreasing targets, or bounds outside
        ``0 <= lower <= upper <= length``.
    """
    n_d = np.asarray(lengths, dtype=np.int64)
    lo, hi = np.asarray(lower, dtype=np.int64), np.asarray(upper, dtype=np.int64)
    want = np.asarray(targets, dtype=np.int64)
    if n_d.ndim != 1 or want.ndim != 1:
        raise ValueError(f"lengths and targets must be 1-D, got shapes {n_d.shape} and {want.shape}")
    if np.any(n_d < 0) or np.any(np.diff(want) < 0):
        raise ValueError("lengths must be >= 0 and targets non-decreasing")
    d, j = n_d.size, want.size
    if lo.shape != (d, j) or hi.shape != (d, j):
        raise ValueError(f"lower and upper must have shape ({d}, {j}), got {lo.shape} and {hi.shape}")
    if np.any(lo < 0) or np.any(hi < lo) or np.any(hi > n_d[:, None]):
        raise ValueError("bounds must satisfy 0 <= lower <= upper <= the run's length")
    cuts = np.zeros((d, j + 2), np.int64)
    cuts[:, -1] = n_d
    for s in range(j):
        below, level = int(lo[:, s].sum()), int(hi[:, s].sum())
        rest = min(max(int(want[s]), below), level) - below  # keys equal to the splitter before the cut
        for r in range(d):
            take = min(int(hi[r, s] - lo[r, s]), rest)
            cuts[r, s + 1] = lo[r, s] + take
            rest -= take
    return cuts


def exchange_fits(rt: Runtime, n: int, shares: Sequence[float], itemsize: int,
                  units: Sequence[Runtime] | None = None) -> bool:
    """Whether each device of ``units`` (default ``rt.units``) can hold :data:`EXCHANGE_BUFFERS` copies of its part
    of ``n`` keys of ``itemsize`` bytes under ``shares`` (the CPU's, then each device's, as :func:`exchange_sort`
    takes them), within the memory one call may use (:func:`hpu.sorting.pipeline.max_device_elements`), with room
    for four standard deviations of the sample's error in the range it ends with (``sqrt(q (1 - q) / SAMPLE) n``
    for a share ``q``).  A device lost since ``units`` was read is not asked: its lease fails instead."""
    if n < 0 or itemsize < 1:
        raise ValueError(f"n must be >= 0 and itemsize >= 1, got {n} and {itemsize}")
    units = rt.units if units is None else tuple(units)  # read once: a failed rebuild may drop a device meanwhile
    active, starts = _device_ranges(n, check_shares(shares, len(units)))
    for i, m in zip(active, np.diff(starts)):
        if not m:
            continue
        q, limit = m / n, 3 * max_device_elements(units[i], itemsize)  # 0 for a device lost (asked after this)
        if m * EXCHANGE_BUFFERS * (1 + 4 * math.sqrt((1 - q) / (q * SAMPLE))) > limit and units[i].has_device:
            return False
    return True


def _device_ranges(n: int, s: np.ndarray) -> tuple[list[int], np.ndarray]:
    """The devices with a share (indices into the units) and the bounds of their ranges of positions,
    ``round(n * cumsum(shares))`` from 0 to ``n``."""
    active = [i for i in range(s.size - 1) if s[1 + i] > 0]
    b = np.round(np.concatenate([[0.0], np.cumsum(s[1:][active])]) * n).astype(np.int64)
    b[-1] = n
    return active, np.maximum.accumulate(np.minimum(b, n))


def exchange_sort(arr: np.ndarray, rt: Runtime, shares: Sequence[float], *, on_device_error: str = "fallback",
                  split: Any = None, options: PipelineOptions = DEFAULT_OPTIONS,
                  units: Sequence[Runtime] | None = None) -> tuple[np.ndarray, Trace]:
    """Sort ``arr`` on the devices of ``units``: each sorts its positions, then they trade key ranges and merge.

    Parameters
    ----------
    arr : numpy.ndarray, shape (n,)
        int32, uint32, int64, uint64, float32 or float64; never modified.
    rt : Runtime
        Its devices (:attr:`hpu.Runtime.units`), thread pool and host pool.
    shares : sequence of float, length ``1 + len(units)``
        As for :func:`hpu.sorting.keyrange.keyrange_sort`: the CPU's share
        (must be 0: the CPU only stages), then each device's, non-negative,
        summing to 1.  Device ``i`` sorts that fraction of the positions and
        ends with about that fraction of the keys.
    on_device_error : {"fallback", "raise"}
    split : optional
        Recorded in the trace.
    options : PipelineOptions
        Staging pieces, waves, the device's sort (its merges are the merge sort's).
    units : sequence of Runtime, optional
        The devices ``shares`` names (default ``rt.units`` now): those the
        caller planned for.  One of them lost since (another thread's
        failed rebuild) fails its lease, and the CPU sorts everything or the
        call raises, as ``on_device_error`` says.

    Returns
    -------
    sorted : numpy.ndarray, shape (n,)
        Equal to ``np.sort(arr, kind="stable")``, from ``rt.host_pool``
        (pinned where it has room).
    trace : Trace
        Strategy ``"exchange"``: each device's copies (``bus``, ``bus1``,
        ...) and its sort and merge (``device``, ``device1``, ...).

    Raises
    ------
    ValueError
        ``arr`` not a 1-D numpy array; shares of the wrong length, negative, not summing to 1 or with a
        CPU share; no device with a share; a share for a dtype its device
        cannot sort, or larger than it can hold (:func:`exchange_fits`).
    hpu.DeviceFailure
        With ``on_device_error="raise"`` when a device fails.
    """
    if not isinstance(arr, np.ndarray) or arr.ndim != 1:
        raise ValueError(f"exchange_sort sorts 1-D numpy arrays, got {type(arr).__name__} of shape {np.shape(arr)}")
    units = rt.units if units is None else tuple(units)  # read once: a failed rebuild may drop a device meanwhile
    s = check_shares(shares, len(units))
    if s[0] > 0:
        raise ValueError(f"an exchange sort gives the CPU no share (it stages the devices' copies), got {s[0]}")
    n, dt = arr.shape[0], arr.dtype
    w = dt.itemsize
    active, starts = _device_ranges(n, s)
    for i in active:  # (a device lost since units was read supports nothing: its lease fails instead)
        if dt not in CL_TYPES or (not units[i].supports(dt) and units[i].has_device):
            raise ValueError(f"device {units[i].device_name!r} cannot sort {dt}; give it share 0")
    if not exchange_fits(rt, n, s, w, units):
        raise ValueError("a device's share of an exchange sort does not fit its memory; use strategy='keyrange'")
    rec = Recorder()
    src = np.ascontiguousarray(arr)
    k = len(active)
    rental = Rental(f"exchange-{k}", n, w)  # the rent of a call over k devices, as its own calls measure it
    out = rt.host_pool.empty_or_new(n, dt, pinned=True, kept=rental.kept(rt, options), inputs=(arr,))
    trace = Trace("exchange", 0.0, 0, int(np.ceil(np.log2(max(n, 2)))), n, split=split)
    if n == 0:
        return out, rec.finish(trace)
    targets = starts[1:-1]
    # The sample (random reads of the input) is drawn on a pool thread while the devices stage and sort; one
    # device needs none
    if k > 1:
        splitters = rt.pool.submit(lambda: choose_splitters(src, targets / n, sample=SAMPLE)[0])
    else:
        splitters = concurrent.futures.Future()
        splitters.set_result(np.empty(0, dt))
    run = _Exchange(rt, src, out, starts, splitters, rec, options)
    redone: list[bool] = []

    def redo(i: int) -> None:  # any failure: the CPU sorts everything again (the devices' writes are void)
        if not redone:
            t0 = rec.now()
            parallel_sort(src, rt.pool, rt.threads, out=out, scratch=rt.host_pool.empty(n, dt),
                          method=cpu_method(rt, n, dt, options))
            rec.add("cpu:pool", "fallback", 0, t0, rec.now(), 1, n, src.nbytes)
            redone.append(True)

    def finish(r: UnitsResult) -> None:
        trace.fallback = "; ".join(f for f in r.fallbacks if f)

    try:
        run_units([units[i] for i in active], devices=[run.share(j, active[j]) for j in range(k)], cpu=None,
                  redo=redo, on_device_error=on_device_error, finish=finish,
                  on_failure=lambda j: run.abort())  # the others stop at their next step
    finally:
        concurrent.futures.wait([splitters])  # nothing of the call runs on after it
        # A failed sample's exception, raised again on the devices' threads, holds their frames: run and, through the
        # calling thread's, this one: the future that holds it goes, or that cycle keeps out leased until a collection
        splitters = None
        run.release()
    return out, rental.record(rt, out, rec.finish(trace))


class _Exchange:
    """One exchange sort's shared state: the devices' bounds, the cuts, and each device's three steps."""

    def __init__(self, rt: Runtime, src: np.ndarray, out: np.ndarray, starts: np.ndarray,
                 splitters: concurrent.futures.Future, rec: Recorder, options: PipelineOptions):
        self.rt, self.src, self.out, self.starts, self.splitters = rt, src, out, starts, splitters
        self.rec, self.options = rec, options
        k, j = starts.size - 1, starts.size - 2
        self.lower = np.zeros((k, j), np.int64)
        self.upper = np.zeros((k, j), np.int64)
        self.cuts = np.zeros((k, j + 2), np.int64)
        self.outbox: dict[tuple[int, int], np.ndarray] = {}  # (sender, receiver) -> the piece in pinned memory
        self.sent: dict[tuple[int, int], list] = {}  # (sender, receiver) -> (start, end, event) of each chunk's copy
        # The devices meet once their bounds are in (the cuts are made then), then after their sends and receives
        self.bounds: threading.Barrier | None = threading.Barrier(k, action=self.cut)
        self.step: threading.Barrier | None = threading.Barrier(k)

    def cut(self) -> None:
        """:attr:`bounds`' action, once every device has its bounds: the cuts (:func:`exchange_cuts`)."""
        self.cuts = exchange_cuts(np.diff(self.starts), self.lower, self.upper, self.starts[1:-1])

    def wait(self, barrier: threading.Barrier) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            raise DeviceFailure("stopped: another device of the exchange sort failed", secondary=True) from None

    def abort(self) -> None:
        """A device failed: the others stop at their next barrier."""
        for barrier in (self.bounds, self.step):
            barrier.abort()

    def release(self) -> None:
        """Once the call has ended: the barriers (:attr:`bounds`' action refers to this object: without this,
        that cycle keeps the result leased until a garbage collection), the sample, the outboxes and the chunks'
        events."""
        self.bounds = self.step = self.splitters = None
        self.outbox.clear()
        self.sent.clear()

    def share(self, j: int, unit: int) -> Any:
        """Device ``j``'s part (``unit``: its index in the units, naming its trace rows)."""
        def run(lease: DeviceLease) -> None:
            self._device(j, lease, "" if unit == 0 else str(unit))
        return run

    def _device(self, j: int, lease: DeviceLease, unit: str) -> None:
        dt = self.out.dtype
        sorter = DeviceSorter.of_lease(lease, dt, self.options.device_algorithm(lease.device, dt))
        merger = sorter if sorter.algorithm == "merge" else DeviceSorter.of_lease(lease, dt, "merge")
        direct = self.rt.host_pool.is_pinned(self.out) and lease.context is self.rt.context  # out pinned for it
        d_run, h2d, steps = self._sort_run(j, lease, sorter, merger, direct)
        self.wait(self.bounds)
        try:
            d2h = self._send(j, lease, d_run)
            self.wait(self.step)  # every sender's chunks are enqueued (not yet copied)
            self._receive(j, lease, merger, d_run, direct, h2d, d2h, steps, unit)
            # Every receiver has copied this device's chunks up (one that receives nothing returns before its copies
            # down have ended); the leases themselves go back only once every device has ended (run_units)
            self.wait(self.step)
        except BaseException:
            # Stopped by another device (a secondary failure: its lease goes back to be lent again) or failed: its
            # copies down into its outbox and up from the others' may still run; their events die with the call
            # (pyopencl would wait for them holding the GIL), and nothing may still copy into its pinned memory.
            quiesce([], (lease.queue, lease.copy_queue))
            raise

    def _sort_run(self, j: int, lease: DeviceLease, sorter: DeviceSorter, merger: DeviceSorter,
                  direct: bool) -> tuple[Any, list, list]:
        """Step 1: stage, copy up and sort the device's positions; search the splitters in the sorted run."""
        rt, out, opts = self.rt, self.out, self.options
        dt, w = out.dtype, out.itemsize
        a, b = int(self.starts[j]), int(self.starts[j + 1])
        m = b - a
        q, cq = lease.queue, lease.copy_queue
        d_run = lease.buffer("out", m * w)
        if not m:
            return d_run, [], []
        stage = out[a:b] if direct else lease.pinned("staging", m * w)[: m * w].view(dt)
        d_in = lease.buffer("in", m * w)
        src = self.src[a:b]
        up = src if dma_reads(rt, lease, src) else stage
        # Mapped before the staging: the caller stages a share of it only once it waits for it (stage_pieces)
        h_splitters = lease.pinned("splitters", (self.starts.size - 2) * w)
        pieces, ready, tasks, staging = stage_pieces(rt, lease, src, up, self.rec, opts.piece_bytes(),
                                                     most_tasks=opts.staging_tasks, stream=opts.stream_copies,
                                                     native=opts.native_staging, slices=opts.staging_slices)
        try:
            with interrupts_deferred():  # every event kept before a Ctrl-C can unwind (device_share says why)
                h2d = upload_pieces(cq, d_in, up, pieces, ready)
                cq.flush()
                steps, _ = enqueue_sorts(lease, sorter, h2d, pieces, opts.waves(len(pieces), tasks), m, 0, d_in,
                                         d_run, opts.sort_waves)
                keys = self.splitters.result()
                got = np.zeros(2 * keys.size, np.int64)
                last = [steps[-1][-1]]
                if keys.size:  # from pinned memory: a copy from pageable memory may block until the sorts have ended
                    d_keys, d_bounds = lease.buffer("splitters", keys.nbytes), lease.buffer("bounds", 16 * keys.size)
                    h_keys = h_splitters[: keys.nbytes].view(dt)
                    h_keys[:] = keys
                    last = [cl.enqueue_copy(q, d_keys, h_keys, is_blocking=False)]
                    merger.rank_bounds(d_run, m, d_keys, keys.size, d_bounds)
                    last.append(cl.enqueue_copy(q, got, d_bounds, is_blocking=False))
                q.flush()
            wait_staged(staging)
            cl.wait_for_events(last)
        except BaseException:
            quiesce(staging, (cq, q))
            raise
        self.lower[j], self.upper[j] = got[0::2], got[1::2]
        return d_run, h2d, steps

    def _send(self, j: int, lease: DeviceLease, d_run: Any) -> list:
        """Step 2: enqueue the copies down, into the lease's pinned memory, of the pieces of the run that belong to
        other devices, in chunks of :data:`EXCHANGE_CHUNK_BYTES` (their events in :attr:`sent`); waits for none."""
        cuts, w = self.cuts, self.out.itemsize
        sizes = np.diff(cuts[j])
        sizes[j] = 0
        if not sizes.sum():
            return []
        box = lease.pinned("exchange", int(sizes.sum()) * w)[: int(sizes.sum()) * w].view(self.out.dtype)
        chunk = max(1, EXCHANGE_CHUNK_BYTES // w)
        d2h, off = [], 0
        for e in np.flatnonzero(sizes):
            c0, c = int(cuts[j, e]), int(sizes[e])
            piece, sent = box[off : off + c], []
            for a in range(0, c, chunk):
                b = min(a + chunk, c)
                ev = cl.enqueue_copy(lease.queue, piece[a:b], d_run, src_offset=(c0 + a) * w, is_blocking=False)
                sent.append((a, b, ev))
                d2h.append(ev)
            self.outbox[j, int(e)], self.sent[j, int(e)] = piece, sent
            off += c
        lease.queue.flush()
        return d2h

    def _receive(self, j: int, lease: DeviceLease, merger: DeviceSorter, d_run: Any, direct: bool, h2d: list,
                 d2h: list, steps: list, unit: str) -> None:
        """Step 3: copy the incoming pieces up beside the device's own, merge them, copy the range down."""
        cuts, out, rec, q, cq = self.cuts, self.out, self.rec, lease.queue, lease.copy_queue
        w = out.itemsize
        total = int(np.diff(cuts, axis=1)[:, j].sum())
        if total == 0:
            if d2h:  # the trace's clock offset comes from the last copy's end: once it has ended
                cl.wait_for_events(d2h)
                defer_record(rec, h2d, d2h, steps, 0, w, unit)
            return
        x = lease.buffer("xin", total * w)
        runs, up, off = [], [], 0
        for d in range(cuts.shape[0]):
            c0, c1 = int(cuts[d, j]), int(cuts[d, j + 1])
            if c1 == c0:
                continue
            if d == j:  # the device's own piece moves on the device
                cl.enqueue_copy(q, x, d_run, byte_count=(c1 - c0) * w, src_offset=c0 * w, dst_offset=off * w)
            else:  # each chunk up as soon as its copy down has ended (not ev.wait(): the trace reads its size)
                piece = self.outbox[d, j]
                for a, b, ev in self.sent[d, j]:
                    cl.wait_for_events([ev])
                    up.append(cl.enqueue_copy(cq, x, piece[a:b], dst_offset=(off + a) * w, is_blocking=False))
                    cq.flush()
            runs.append((off, off + c1 - c0))
            off += c1 - c0
        if up:  # the merge and the copies down, on the queue, wait for the copies up on the copy queue
            cl.enqueue_barrier(q, wait_for=up)
        if len(runs) > 1:
            result, ev = merge_tree(q, merger, runs, x, lease.buffer("in", total * w), w)
            steps = steps + [("merge", len(runs), total, up, ev)]
        else:
            result = x
        first = int(cuts[:, j].sum())
        dst = out[first : first + total]
        if direct:  # the DMA engine writes the result itself
            down = [cl.enqueue_copy(q, dst, result, is_blocking=False)]
            cl.wait_for_events(down)
        else:  # through the lease's pinned staging memory, piece by piece as each copy down ends
            stage = lease.pinned("staging", total * w)[: total * w].view(out.dtype)
            size = max(1, self.options.piece_bytes() // w)
            pieces = [(a, min(a + size, total)) for a in range(0, total, size)]
            down: list = []
            download_pieces(q, stage, result, pieces, down)
            copy_out(self.rt, [(stage, dst, pieces, down)], rec, stream=self.options.stream_copies)
            cl.wait_for_events(down[-1:])
        defer_record(rec, h2d + up, d2h + down, steps, 0, w, unit)
