"""Fast-mode hybrid mergesort: what the paper's conclusions name as future work.

Where the paper-faithful scheme (:mod:`hpu.executor`) runs one work-item per
merge and one launch per level, fast mode uses

* a base-case cutoff: the device sorts leaf blocks in work-group local
  memory (:class:`hpu.fastsort.DeviceSorter`), the CPU sorts its chunks with
  numpy in the thread pool (:func:`hpu.cpusort.parallel_sort`);
* merge-path (co-rank) partitioned merges on the device, and a multiway
  merge split into balanced buckets on the CPU, so that top levels with few
  subproblems still use every work-group and every core;
* pinned, chunked host-device transfers: CPU threads stage chunks into a
  pinned buffer while the DMA engine moves the chunks already staged, in
  both directions; the whole device pipeline is enqueued at once (each copy
  waits on a user event its staging task completes), and a single device
  run sorts each staging wave as soon as it is in, then merges the waves;
* results in recycled host memory (:mod:`hpu.hostmem`): pinned when a device
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
pair (paper 5.2).  :func:`hpu.model.fast_split` predicts the time of each
pair from the profile's fast-mode rates and picks the fastest.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from .cpusort import multiway_merge, parallel_copy, parallel_sort
from .device import Runtime
from .executor import DeviceFailure, Trace, _Recorder

try:
    import pyopencl as cl
except Exception:  # pragma: no cover
    cl = None

log = logging.getLogger("hpu")

__all__ = ["fast_sort", "CHUNK_BYTES"]

#: Bytes per staged piece and per DMA copy in either direction.
CHUNK_BYTES = 4 << 20

#: Whether a single device run sorts each staging wave as soon as its copies are in (then merges the
#: waves' runs) rather than the whole share after the last copy.
SORT_WAVES = True


def _stage(rt: Runtime, src: np.ndarray, stage: np.ndarray, rec: _Recorder) -> tuple[list, list, int, list]:
    """Copy ``src`` into the pinned ``stage`` piece by piece on the thread pool.

    Pieces of :data:`CHUNK_BYTES` are shared out round robin among at most
    half as many pool tasks as there are pieces, so that they are staged in
    at least two waves of ``tasks`` consecutive pieces.  Few, large tasks:
    every task switch costs Python's global lock, which 16 threads staging
    small pieces contend for (measured by ``experiments/bench_pipeline.py``).

    Returns
    -------
    pieces : list of (start, stop)
        Element ranges, in order.
    ready : list of pyopencl.UserEvent
        ``ready[k]`` completes when piece ``k`` is staged: device copies wait
        for it, so that the caller can enqueue the whole pipeline at once.  A
        task that fails still completes its remaining events (the device then
        copies stale data, which the caller discards): no command waits forever.
    tasks : int
    futures : list of concurrent.futures.Future
        The tasks; their exceptions are the staging errors.
    """
    n, item = src.shape[0], src.itemsize
    piece = max(CHUNK_BYTES // item, 1)
    bounds = list(range(0, n, piece)) + [n]
    pieces = list(zip(bounds[:-1], bounds[1:]))
    tasks = max(1, min(rt.threads, (len(pieces) + 1) // 2))
    ready = [cl.UserEvent(rt.context) for _ in pieces]
    complete = cl.command_execution_status.COMPLETE

    def task(w: int) -> None:
        mine = list(range(w, len(pieces), tasks))
        try:
            while mine:
                a, b = pieces[mine[0]]
                t0 = rec.now()
                np.copyto(stage[a:b], src[a:b])
                rec.add(f"cpu:{threading.current_thread().name}", "stage", -1, t0, rec.now(), 1, b - a,
                        (b - a) * item)
                ready[mine.pop(0)].set_status(complete)
        finally:
            for k in mine:
                ready[k].set_status(complete)

    return pieces, ready, tasks, [rt.pool.submit(task, w) for w in range(tasks)]


def _copy_queue(rt: Runtime) -> Any:
    """A second in-order command queue for host-to-device copies, so that they never wait behind kernels."""
    key = ("fastmode", "copy_queue")
    q = rt.resources.get(key)
    if q is None:
        q = rt.resources[key] = cl.CommandQueue(rt.context, properties=rt.queue.properties)
    return q


def _merge_tree(rt: Runtime, sorter: Any, runs: list[tuple[int, int]], src: Any, dst: Any,
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
                event = cl.enqueue_copy(rt.queue, dst, src, byte_count=(a1 - a0) * itemsize,
                                        src_offset=a0 * itemsize, dst_offset=a0 * itemsize)
                merged.append((a0, a1))
        runs, src, dst = merged, dst, src
    return src, event


def _pinned(rt: Runtime, nbytes: int) -> np.ndarray:
    """A pinned host staging array of at least ``nbytes`` (uint8), cached on the runtime and grown as needed."""
    key = ("fastmode", "pinned")
    cur = rt.resources.get(key)
    if cur is None or cur[1].nbytes < nbytes:
        if cur is not None:
            del rt.resources[key]
        size = max(nbytes, 1 << 20)
        buf = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, size)
        host, _ = cl.enqueue_map_buffer(rt.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (size,),
                                        np.uint8, is_blocking=True)
        cur = (buf, host)
        rt.resources[key] = cur
    return cur[1]


def _host_scratch(rt: Runtime, dtype: np.dtype, n: int) -> np.ndarray:
    """A cached host array of at least ``n`` elements for the CPU sort's chunks."""
    key = ("fastmode", "scratch", dtype.str)
    cur = rt.resources.get(key)
    if cur is None or cur.shape[0] < n:
        cur = rt.resources[key] = np.empty(n, dtype=dtype)
    return cur


def _device_buffer(rt: Runtime, name: str, nbytes: int) -> Any:
    key = ("fastmode", name)
    cur = rt.resources.get(key)
    if cur is None or cur.size < nbytes:
        cur = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, max(nbytes, 1))
        rt.resources[key] = cur
    return cur


def _sorter(rt: Runtime, dtype: np.dtype) -> Any:
    from .fastsort import DeviceSorter

    key = ("fastmode", "sorter", dtype.str)
    s = rt.resources.get(key)
    if s is None:
        s = rt.resources[key] = DeviceSorter(rt, dtype)
    return s


def _segments(n: int, t: int, align: int) -> list[tuple[int, int]]:
    """``2**t`` contiguous segments of ``[0, n)`` with starts aligned to ``align`` elements."""
    k = 1 << t
    bounds = [0]
    for i in range(1, k):
        b = (n * i // k) // align * align
        bounds.append(max(b, bounds[-1]))
    bounds.append(n)
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _max_device_elements(rt: Runtime, itemsize: int) -> int:
    dev = rt.device
    # Input buffer, the sorter's output and scratch: three copies of the device share.
    by_total = int(0.8 * dev.global_mem_size) // (3 * itemsize)
    by_alloc = int(dev.max_mem_alloc_size) // itemsize
    return max(0, min(by_total, by_alloc))


def _device_share(rt: Runtime, src: np.ndarray, t: int, staging: np.ndarray | None, rec: _Recorder,
                  dst: np.ndarray | None = None) -> list[np.ndarray]:
    """Sort ``src`` on the device as ``2**t`` segments; return the sorted runs as views of ``staging``.

    With ``dst`` (only when ``t == 0``) the result ends in ``dst`` and
    ``[dst]`` is returned: when ``dst`` is pinned memory of the runtime's
    host pool it is the staging buffer itself (``staging`` may be None);
    otherwise thread-pool workers copy each chunk from the pinned buffer into
    ``dst`` as soon as its device-to-host copy completes.
    """
    n, dt = src.shape[0], src.dtype
    nbytes = n * dt.itemsize
    q = rt.queue
    sorter = _sorter(rt, dt)
    d_in = _device_buffer(rt, "in", nbytes)
    d_out = _device_buffer(rt, "out", nbytes)
    in_place = dst is not None and rt.host_pool.is_pinned(dst)
    stage = dst if in_place else staging[:nbytes].view(dt)
    copy_back = dst is not None and not in_place

    steps: list[tuple[str, int, int, list, Any]] = []  # (kind, runs, keys, copies it waited for, last event)
    pieces, ready, tasks, staging_tasks = _stage(rt, src, stage, rec)
    cq = _copy_queue(rt)
    try:
        # The whole pipeline is enqueued at once: each copy waits for its piece to be staged.
        h2d = [cl.enqueue_copy(cq, d_in, stage[a:b], dst_offset=a * dt.itemsize, is_blocking=False, wait_for=[r])
               for (a, b), r in zip(pieces, ready)]
        cq.flush()
        if t == 0 and SORT_WAVES:
            # One run: each wave is sorted as soon as its copies are in, while the next is staged, then
            # the waves' runs are merged.  An odd number of merge levels starts from d_in, sorted in place.
            waves = [(i, min(i + tasks, len(pieces))) for i in range(0, len(pieces), tasks)]
            first = d_in if max(len(waves) - 1, 0).bit_length() % 2 else d_out
            runs = []
            for i, j in waves:
                a, b = pieces[i][0], pieces[j - 1][1]
                sub_in = d_in.get_sub_region(a * dt.itemsize, (b - a) * dt.itemsize)
                sub_out = sub_in if first is d_in else d_out.get_sub_region(a * dt.itemsize, (b - a) * dt.itemsize)
                ev = sorter.sort(sub_in, b - a, out=sub_out, wait_for=h2d[i:j])[1]
                steps.append(("sort", 1, b - a, h2d[i:j], ev))
                runs.append((a, b))
            if len(runs) > 1:
                result, ev = _merge_tree(rt, sorter, runs, first, d_in if first is d_out else d_out, dt.itemsize)
                assert result is d_out
                steps.append(("merge", len(runs), n, [], ev))
        else:
            align = max(1, int(rt.device.mem_base_addr_align) // 8 // dt.itemsize)
            segs = _segments(n, t, align)
            for i, (a, b) in enumerate(segs):
                sub_in = d_in.get_sub_region(a * dt.itemsize, (b - a) * dt.itemsize)
                sub_out = d_out.get_sub_region(a * dt.itemsize, (b - a) * dt.itemsize)
                ev = sorter.sort(sub_in, b - a, out=sub_out, wait_for=h2d if i == 0 else None)[1]
            steps.append(("sort", len(segs), n, h2d, ev))
        d2h = [cl.enqueue_copy(q, stage[a:b], d_out, src_offset=a * dt.itemsize, is_blocking=False)
               for a, b in pieces]
        q.flush()
        for f in staging_tasks:
            f.result()
    except BaseException:
        # Nothing may still write into stage (it may be the result) once this returns.
        for f in staging_tasks:
            f.exception()
        cq.finish()
        q.finish()
        raise
    if copy_back:
        # Touch dst's pages while the DMA engine and the device work (after staging): its first-touch page
        # faults would otherwise slow the copy-out (experiments/bench_host_memory.py).
        def touch(a: int, b: int) -> None:
            t0 = rec.now()
            dst[a:b] = 0
            rec.add(f"cpu:{threading.current_thread().name}", "touch", -1, t0, rec.now(), 1, b - a, 0)

        touched = [rt.pool.submit(touch, a, b) for a, b in pieces]
        for f in touched:  # finished long before the sort is; never race a copy-out
            f.result()

        def copy_out(ev: Any, a: int, b: int) -> None:
            ev.wait()
            t0 = rec.now()
            np.copyto(dst[a:b], stage[a:b])
            rec.add(f"cpu:{threading.current_thread().name}", "stage", -1, t0, rec.now(), 1, b - a,
                    (b - a) * dt.itemsize)

        outs = [rt.pool.submit(copy_out, ev, a, b) for ev, (a, b) in zip(d2h, pieces)]
        for o in outs:
            o.result()
    d2h[-1].wait()
    host_end = rec.now()
    # Plain handles of the finished copies: pyopencl's copy events keep their host array alive, and a trace
    # that held them would keep the result's pooled memory from being recycled.
    plain = {id(e): cl.Event.from_int_ptr(e.int_ptr) for e in h2d + d2h}
    h2d, d2h = [plain[id(e)] for e in h2d], [plain[id(e)] for e in d2h]
    steps = [(kind, parts, keys, [plain[id(e)] for e in waited], ev) for kind, parts, keys, waited, ev in steps]

    def record() -> None:  # deferred (Trace.resolve): reading ~40 events' times costs host time
        try:  # the device clock at the recorder's start, from the last copy's end
            rec.device_offset = d2h[-1].profile.end * 1e-9 - host_end
        except Exception:  # no profiling: every device event is put at the end
            rec.device_offset = None
        for ev, kind in [(e, "h2d") for e in h2d] + [(e, "d2h") for e in d2h]:
            rec.add("bus", kind, -1, *_times(ev, rec, host_end), 1, 0, 0)
        prev_end = -np.inf
        for kind, parts, keys, waited, ev in steps:
            # A step starts when the one before it and the copies it waited for have ended (in-order queue).
            start = max([prev_end, *(_times(e, rec, host_end)[1] for e in waited)])
            prev_end = _times(ev, rec, host_end)[1]
            rec.add("device", kind, t, start, prev_end, parts, keys // parts, keys * dt.itemsize)

    rec.deferred.append(record)
    if dst is not None:
        return [dst]
    return [stage[a:b] for a, b in segs] if t else [stage[:n]]


def _times(ev: Any, rec: _Recorder, fallback: float) -> tuple[float, float]:
    """(start, end) of an OpenCL event in seconds of the recorder's clock; ``fallback`` twice without profiling."""
    off = rec.device_offset
    if off is None:
        return fallback, fallback
    return ev.profile.start * 1e-9 - off, ev.profile.end * 1e-9 - off


def fast_sort(arr: np.ndarray, rt: Runtime, *, strategy: str, alpha: float, transfer_level: int,
              on_device_error: str = "fallback", split: Any = None, cpu_threads: int = 0) -> tuple[np.ndarray, Trace]:
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

    Returns
    -------
    sorted : numpy.ndarray, shape (n,)
        Equal to ``np.sort(arr, kind="stable")``; a new array, from
        ``rt.host_pool`` when it has room (:mod:`hpu.hostmem`; pinned when
        the device alone sorts it).
    trace : Trace

    Raises
    ------
    DeviceFailure
        With ``on_device_error="raise"`` when the device fails.
    """
    n, dt = arr.shape[0], arr.dtype
    rec = _Recorder()
    src = np.ascontiguousarray(arr)
    use_device = rt.has_device and rt.supports(dt) and alpha < 1.0
    n_cpu = n if not use_device else int(round(alpha * n))
    if use_device:
        n_cpu = max(n_cpu, n - _max_device_elements(rt, dt.itemsize))
    n_dev = n - n_cpu
    t = max(0, min(int(transfer_level), max(0, int(np.log2(max(n_dev, 1))) - 10)))  # segments >= 2^10 keys
    # One device run goes straight into out (pinned: the DMA engine writes it); else the CPU writes out.
    out = rt.host_pool.empty(n, dt, pinned=n_cpu == 0 and t == 0)
    if out is None:
        out = np.empty_like(src)
    trace = Trace(strategy, n_cpu / n if n else 1.0, t, int(np.ceil(np.log2(max(n, 2)))), n, split=split)

    if n_dev == 0:
        tt = rec.now()
        threads = min(cpu_threads, rt.threads) if cpu_threads > 0 else rt.threads
        parallel_sort(src, rt.pool, threads, out=out, scratch=_host_scratch(rt, dt, n))
        rec.add("cpu:pool", "sort", 0, tt, rec.now(), 1, n, src.nbytes)
        trace.events, trace.wall, trace._deferred = rec.events, rec.now(), rec.deferred
        return out, trace

    direct = out if n_cpu == 0 and t == 0 else None  # one device run: stream it straight into out
    staging = None if direct is not None and rt.host_pool.is_pinned(out) else _pinned(rt, n_dev * dt.itemsize)
    result: list[Any] = []

    def device_job() -> None:
        try:
            result.append(_device_share(rt, src[n_cpu:], t, staging, rec, dst=direct))
        except BaseException as e:
            result.append(e)

    cpu_run = None
    if n_cpu:  # the device share is fed from its own thread while this one sorts the CPU share
        feeder = threading.Thread(target=device_job, name="hpu-device-feeder", daemon=True)
        feeder.start()
        cpu_run = np.empty(n_cpu, dtype=dt)
        tt = rec.now()
        parallel_sort(src[:n_cpu], rt.pool, rt.threads, out=cpu_run, scratch=_host_scratch(rt, dt, n_cpu))
        rec.add("cpu:pool", "sort", 0, tt, rec.now(), 1, n_cpu, n_cpu * dt.itemsize)
        feeder.join()
    else:
        device_job()
    dev = result[0]
    if isinstance(dev, BaseException):
        if cl is not None and isinstance(dev, (cl.Error, MemoryError)):
            dev = DeviceFailure(f"{type(dev).__name__}: {dev}")
        if not isinstance(dev, DeviceFailure) or on_device_error == "raise":
            raise dev
        log.warning("device share failed (%s); the CPU redoes it", dev)
        trace.fallback = str(dev)
        tt = rec.now()
        dev = [parallel_sort(src[n_cpu:], rt.pool, rt.threads)]
        rec.add("cpu:pool", "fallback", 0, tt, rec.now(), 1, n_dev, n_dev * dt.itemsize)
    runs = ([cpu_run] if cpu_run is not None else []) + list(dev)
    if not (len(runs) == 1 and runs[0] is out):
        tt = rec.now()
        if len(runs) == 1:
            parallel_copy(runs[0], out, rt.pool, rt.threads)
        else:
            multiway_merge(runs, out, rt.pool, rt.threads)
        rec.add("cpu:pool", "merge" if len(runs) > 1 else "stage", 0, tt, rec.now(), len(runs), n, src.nbytes)
    trace.events, trace.wall, trace._deferred = rec.events, rec.now(), rec.deferred
    return out, trace

