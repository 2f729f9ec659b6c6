"""The bus and the host's copies that hpu's staged transfers are made of, measured side by side.

What bounds a device sort of a pageable array: the PCIe copies themselves,
or the host's copies into pinned memory that feed them (both at once, as
the pipeline makes them, are in ``bench_pipeline.py``'s traces).  For one size
(default 64 MiB, the bytes of 2^24 int32 keys), in shuffled rounds with
hpu's idle pause before each call (``bench_common.shuffled_rounds``;
``--pause 0``: back to back):

- ``h2d pinned``: one copy up from pinned host memory (a mapped
  ``ALLOC_HOST_PTR`` buffer, as hpu's staging memory) into a device buffer;
  ``h2d pinned pieces``: the same in pieces of ``--piece-mib``;
- ``d2h pinned``: one copy down into pinned memory;
- ``h2d + d2h``: both at once, on two command queues;
- ``h2d pageable``: from an ordinary numpy array (the driver stages it);
- ``stage N tasks``: the pageable array copied into the pinned memory piece
  by piece by N tasks of hpu's thread pool (each N of ``--tasks``), each
  taking the next piece in order (no copy to the device);
- ``stage + h2d N tasks``: as hpu's pipeline (``hpu.sorting.pipeline``):
  N tasks (the middle of ``--tasks``) stage the pieces while the copy up
  of each, enqueued behind a user event, starts once its task completes
  the event;
- ``stage + h2d N tasks, ring K``: the same through a ring of K pieces of
  pinned memory (each of ``--ring``) instead of pinned memory the size of
  the array: a task stages piece k into slot k mod K once the copy up of
  piece k - K has left it, so that the slots can stay in the host's cache
  and the DMA engine read them there rather than from memory;
- ``stage + h2d + d2h N tasks``: the same, then the whole copied back down
  into pinned memory (a device sort of a pageable array, there and back,
  without the sort); with K > 1 GPUs also ``, shares on xK GPUs, a thread
  each`` / ``a process each``: the bytes split between the GPUs, each share
  of its own pageable memory staged by N threads of its own (K N in all;
  by streaming stores where hpu's library has them, without a
  ``, streaming`` variant), copied up and back, by a thread a GPU in this
  process or by a process a GPU (the host's least work for a sort split
  between the GPUs that way), and ``, a process each, gathered``: the
  shares of all processes but the first then copied on into one block of
  shared memory as they come down (the least a process a GPU adds where
  the caller gets one array); ``stage + h2d N tasks, shares on xK GPUs, a
  thread each``: the same by a thread a GPU without the copies back (the
  staging beside the copies up alone, as a sort's first phase);
- ``unstage N tasks``: pinned memory copied into an ordinary array (touched
  before) by N tasks (the middle of ``--tasks``), as a result leaves the
  staging memory;
- each staging variant also ``, streaming``: the copies by streaming stores
  (``hpu.core.streaming.stream_copy``, hpu's default) rather than
  ``numpy.copyto``;
- ``h2d pinned xK GPUs`` / ``h2d + d2h xK GPUs`` where the device's
  platform has K > 1 GPUs: the same copies on every GPU at once, each from
  pinned memory of its own context (GB/s: all the GPUs' bytes together);
  ``, a thread each``: each GPU's copies enqueued and waited for by a
  thread of its own; ``, a process each``: by a process of its own (with
  one GPU, ``h2d + d2h, a process each direction``: its copy up and its
  copy down at once, each made by a process of its own);
  ``, buffer copies``: copies between the pinned buffer object and the
  device buffer (``clEnqueueCopyBuffer``) rather than from its mapped
  memory (``clEnqueueWriteBuffer``/``ReadBuffer``), also on one GPU;
- ``cupy h2d pinned`` / ``cupy d2h pinned`` / ``cupy h2d + d2h`` (both at
  once, on two streams) where cupy is importable (CUDA's copies of the same
  bytes, for reference), and with several GPUs ``cupy h2d
  pinned xK GPUs`` / ``cupy h2d + d2h xK GPUs``: every GPU's copies at once,
  each from pinned memory of its own, on streams of its own.

Prints the median milliseconds and GB/s (10^9 bytes a second) of each
(``--only``: of the variants whose names contain one of its comma-separated
parts; the others' buffers and processes are still set up, not timed).
Every copy's event is kept until the copy is done: pyopencl's event of a
copy from host memory, once freed, waits for the copy holding the GIL, so
a copy enqueued that way would end before the next could start.
With ``--flush-mib``, each call comes after that many MiB written and read
on one thread (untimed), so that it finds the caches cold, as a call after
other work does.

    python experiments/bench_bus.py --device gpu --json results/h100/bench_bus.json
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import multiprocessing
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import pyopencl as cl

import hpu
from bench_common import add_runtime_arguments, cache_flusher, command_line, shuffled_rounds, utc_now, write_json
from hpu.core.streaming import stream_copy, streaming_available
from hpu.core.util import host_description


def pinned(ctx: Any, queue: Any, nbytes: int) -> tuple[Any, np.ndarray]:
    """A host buffer of ``nbytes`` allocated by the driver (``ALLOC_HOST_PTR``), mapped, every page touched."""
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, nbytes)
    host, _ = cl.enqueue_map_buffer(queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (nbytes,), np.uint8,
                                    is_blocking=True)
    host[:] = 0
    return buf, host


def staging(pool: Executor, src: np.ndarray, dst: np.ndarray, piece: int, tasks: int,
            staged: Callable[[int], None] = lambda k: None, copy: Callable = np.copyto,
            slot: Callable[[int], int] | None = None) -> list[Future]:
    """Start copying ``src`` into ``dst`` in pieces of ``piece`` bytes on ``tasks`` tasks of ``pool`` (hpu's thread
    pool, or a process's own), each taking the next
    piece in order, as hpu's staging does, by ``copy(dst_piece, src_piece)``, and calling ``staged(k)`` once piece
    ``k`` is in; the tasks' futures.  With ``slot``, piece ``k`` goes to ``dst[slot(k):]`` (which may wait for the
    slot to be free) rather than to its own offset."""
    pieces = range(0, src.shape[0], piece)
    order = itertools.count()  # next() is atomic under the GIL

    def task() -> None:
        for k in order:
            if k >= len(pieces):
                return
            a = pieces[k]
            b = min(a + piece, src.shape[0])
            d = a if slot is None else slot(k)
            copy(dst[d:d + b - a], src[a:b])
            staged(k)

    return [pool.submit(task) for _ in range(tasks)]


def wait(futures: list[Future]) -> None:
    """Wait for every future (their errors raised)."""
    for f in futures:
        f.result()


def staged_trip(pool: Executor, q: Any, d_a: Any, src: np.ndarray, up: np.ndarray, down: np.ndarray | None,
                piece: int, tasks: int, copy: Callable, out: np.ndarray | None = None) -> None:
    """``src`` (pageable) staged into the pinned ``up`` in pieces of ``piece`` bytes by ``tasks`` tasks of ``pool``,
    each piece's copy up into ``d_a`` enqueued on ``q`` behind a user event that its task completes, as hpu's
    pipeline does; with ``down``, then ``d_a`` copied down into the pinned ``down`` (a device sort's way there and
    back, without the sort); with ``out`` too, copied down in pieces, each copied on into ``out`` by the tasks as
    it arrives.  Returns once every copy is done."""
    nbytes = src.shape[0]
    ready = [cl.UserEvent(q.context) for _ in range(0, nbytes, piece)]
    tasks_done = staging(pool, src, up, piece, tasks,
                         lambda k: ready[k].set_status(cl.command_execution_status.COMPLETE), copy)
    # Kept until the end: pyopencl's event of a copy from host memory waits for the copy when it is freed, with
    # the GIL held, so a copy still waiting for its piece would then wait forever for the staging tasks.
    up_copies = [cl.enqueue_copy(q, d_a, up[a:a + piece], dst_offset=a, wait_for=[ev], is_blocking=False)
                 for a, ev in zip(range(0, nbytes, piece), ready)]
    q.flush()
    wait(tasks_done)
    downs = []  # kept too: a copy down's event freed at once would wait for it here, holding the GIL
    if down is not None and out is None:  # once staged (PoCL may hold the GIL in this enqueue); the queue is in order
        downs = [cl.enqueue_copy(q, down[:nbytes], d_a, is_blocking=False)]
    elif down is not None:
        downs = [cl.enqueue_copy(q, down[a:a + piece], d_a, src_offset=a, is_blocking=False)
                 for a in range(0, nbytes, piece)]
        q.flush()
        order = itertools.count()  # next() is atomic under the GIL

        def onward() -> None:
            for k in order:
                if k >= len(downs):
                    return
                downs[k].wait()
                copy(out[k * piece:(k + 1) * piece], down[k * piece:(k + 1) * piece])

        wait([pool.submit(onward) for _ in range(tasks)])
    q.finish()
    del up_copies, downs


Runs = dict[str, tuple[Callable[[], None], int]]  # variant -> (a call that returns when its copies are done, bytes)


def opencl_runs(rt: hpu.Runtime, nbytes: int, piece: int, tasks: list[int], rings: list[int]) -> Runs:
    """The OpenCL variants on ``rt``'s device."""
    ctx = rt.context
    q, q2 = cl.CommandQueue(ctx, rt.device), cl.CommandQueue(ctx, rt.device)
    d_a, d_b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes), cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    up_buf, up = pinned(ctx, q, nbytes)
    down_buf, down = pinned(ctx, q, nbytes)
    pageable = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
    plain = np.zeros_like(pageable)
    mid = tasks[len(tasks) // 2]

    def ring_upload(copy: Callable, slots: int) -> None:
        starts = range(0, nbytes, piece)
        ready = [cl.UserEvent(ctx) for _ in starts]
        up_copies = [cl.enqueue_copy(q, d_a, up[k % slots * piece:][:min(piece, nbytes - a)], dst_offset=a,
                                     wait_for=[ready[k]], is_blocking=False) for k, a in enumerate(starts)]
        q.flush()

        def slot(k: int) -> int:
            if k >= slots:
                up_copies[k - slots].wait()  # releases the GIL
            return k % slots * piece

        tasks_done = staging(rt.pool, pageable, up, piece, mid,
                             lambda k: ready[k].set_status(cl.command_execution_status.COMPLETE), copy, slot)
        wait(tasks_done)
        q.finish()
        del up_copies

    def copies(*enqueue: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            events = [e() for e in enqueue]  # kept: pyopencl waits for a freed copy's event, holding the GIL
            q.finish()
            q2.finish()
            del events
        return run

    return {
        "h2d pinned": (copies(lambda: cl.enqueue_copy(q, d_a, up, is_blocking=False)), nbytes),
        "h2d pinned pieces": (copies(*[lambda a=a: cl.enqueue_copy(q, d_a, up[a:a + piece], dst_offset=a,
                                                                   is_blocking=False)
                                       for a in range(0, nbytes, piece)]), nbytes),
        "d2h pinned": (copies(lambda: cl.enqueue_copy(q, down, d_b, is_blocking=False)), nbytes),
        "h2d + d2h": (copies(lambda: cl.enqueue_copy(q, d_a, up, is_blocking=False),
                             lambda: cl.enqueue_copy(q2, down, d_b, is_blocking=False)), 2 * nbytes),
        "h2d + d2h, buffer copies": (copies(lambda: cl.enqueue_copy(q, d_a, up_buf),
                                            lambda: cl.enqueue_copy(q2, down_buf, d_b)), 2 * nbytes),
        "h2d pageable": (copies(lambda: cl.enqueue_copy(q, d_a, pageable, is_blocking=False)), nbytes),
        **{f"stage {t} tasks{name}": ((lambda t=t, c=c: wait(staging(rt.pool, pageable, up, piece, t, copy=c))),
                                      nbytes)
           for t in tasks for name, c in copiers()},
        **{f"stage + h2d {mid} tasks{name}": ((lambda c=c: staged_trip(rt.pool, q, d_a, pageable, up, None, piece, mid,
                                                                      c)), nbytes) for name, c in copiers()},
        **{f"stage + h2d + d2h {mid} tasks{name}": ((lambda c=c: staged_trip(rt.pool, q, d_a, pageable, up, down,
                                                                            piece, mid, c)), 2 * nbytes)
           for name, c in copiers()},
        **{f"stage + h2d {mid} tasks, ring {k}{name}": ((lambda c=c, k=k: ring_upload(c, k)), nbytes)
           for k in rings if k * piece < nbytes for name, c in copiers()},
        **{f"unstage {mid} tasks{name}": ((lambda c=c: wait(staging(rt.pool, down, plain, piece, mid, copy=c))),
                                          nbytes)
           for name, c in copiers()},
    }


def copiers() -> list[tuple[str, Callable]]:
    """The host copies compared: numpy.copyto, and streaming stores where hpu's library is built."""
    return [("", np.copyto)] + ([(", streaming", stream_copy)] if streaming_available() else [])


def all_gpu_runs(rt: hpu.Runtime, nbytes: int, piece: int, tasks: int) -> Runs:
    """Where the device's platform has several GPUs: the copy up (and both copies) of ``nbytes`` on every GPU at
    once, each from pinned memory of its own context, as several devices in one HPU use them, from one thread and
    from a thread each, and from a process each (:func:`process_runs`); then ``nbytes`` of pageable memory split
    between the GPUs, each share staged by ``tasks`` threads of its own, copied up and back (:func:`staged_trip`),
    from a thread each and from a process each (:func:`staged_process_runs`).  With one GPU, its two directions from
    a process each."""
    gpus = [d for d in rt.device.platform.get_devices() if d.type & cl.device_type.GPU]
    if len(gpus) < 2:
        return process_runs(1, nbytes) if gpus else {}
    units = []
    for dev in gpus:
        ctx = cl.Context([dev])
        q, q2 = cl.CommandQueue(ctx, dev), cl.CommandQueue(ctx, dev)
        d_a, d_b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes), cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
        (up_buf, up), (down_buf, down) = pinned(ctx, q, nbytes), pinned(ctx, q, nbytes)
        units.append((q, q2, d_a, d_b, up, down, up_buf, down_buf))

    def start(unit: tuple, both: bool, buffers: bool = False) -> list:
        """The unit's copies enqueued; their events, to be kept until :func:`finish` (pyopencl's event of a copy
        from host memory, freed, waits for the copy, holding the GIL: the next copy would not start before)."""
        q, q2, d_a, d_b, up, down, up_buf, down_buf = unit
        events = [cl.enqueue_copy(q, d_a, up_buf) if buffers else cl.enqueue_copy(q, d_a, up, is_blocking=False)]
        if both:
            events.append(cl.enqueue_copy(q2, down_buf, d_b) if buffers
                          else cl.enqueue_copy(q2, down, d_b, is_blocking=False))
        q.flush()
        q2.flush()
        return events

    def finish(unit: tuple, events: list) -> None:
        unit[0].finish()
        unit[1].finish()
        events.clear()

    def run(both: bool, buffers: bool = False) -> None:
        events = [start(unit, both, buffers) for unit in units]
        for unit, ev in zip(units, events):
            finish(unit, ev)

    def on_threads(work: list[Callable[[], None]]) -> None:  # each GPU's work on a thread of its own
        threads = [threading.Thread(target=w) for w in work]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    k = len(units)
    share = nbytes // k
    halves = [np.random.default_rng(i).integers(0, 256, share, dtype=np.uint8) for i in range(k)]
    pools = [ThreadPoolExecutor(tasks) for _ in units]
    copy = stream_copy if streaming_available() else np.copyto

    def trips(down: bool = True) -> None:
        on_threads([lambda u=u, h=h, p=p: staged_trip(p, u[0], u[2], h, u[4], u[5] if down else None, piece, tasks,
                                                      copy)
                    for u, h, p in zip(units, halves, pools)])

    return {f"h2d pinned x{k} GPUs": ((lambda: run(False)), k * nbytes),
            f"h2d + d2h x{k} GPUs": ((lambda: run(True)), 2 * k * nbytes),
            f"h2d pinned x{k} GPUs, a thread each": ((lambda: on_threads([lambda u=u: finish(u, start(u, False))
                                                                         for u in units])), k * nbytes),
            f"h2d + d2h x{k} GPUs, a thread each": ((lambda: on_threads([lambda u=u: finish(u, start(u, True))
                                                                        for u in units])), 2 * k * nbytes),
            f"h2d + d2h x{k} GPUs, buffer copies": ((lambda: run(True, True)), 2 * k * nbytes),
            **process_runs(len(gpus), nbytes),
            f"stage + h2d {tasks} tasks, shares on x{k} GPUs, a thread each": ((lambda: trips(False)), k * share),
            f"stage + h2d + d2h {tasks} tasks, shares on x{k} GPUs, a thread each": (trips, 2 * k * share),
            **staged_process_runs(k, share, piece, tasks)}


def _copier(index: int, nbytes: int, directions: str, start: Any, done: Any) -> None:
    """A process of :func:`process_runs`: GPU ``index``'s copies (``directions``: up, down or both) of ``nbytes``
    each round."""
    dev = _gpu(index)
    ctx = cl.Context([dev])
    q, q2 = cl.CommandQueue(ctx, dev), cl.CommandQueue(ctx, dev)
    d_a, d_b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes), cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    (_, up), (_, down) = pinned(ctx, q, nbytes), pinned(ctx, q, nbytes)
    while True:
        start.wait()
        events = []  # kept till the copies are done: a freed event would wait for its copy before the next starts
        if "up" in directions:
            events.append(cl.enqueue_copy(q, d_a, up, is_blocking=False))
        if "down" in directions:
            events.append(cl.enqueue_copy(q2, down, d_b, is_blocking=False))
        q.finish()
        q2.finish()
        del events
        done.wait()


def _stager(index: int, nbytes: int, piece: int, tasks: int, shared: str | None, start: Any, done: Any) -> None:
    """A process of :func:`staged_process_runs`: GPU ``index``'s :func:`staged_trip` of ``nbytes`` of its own
    pageable memory, staged by ``tasks`` threads of its own, each round; with ``shared`` (the name of a
    ``multiprocessing.shared_memory`` block) and ``index > 0``, its share copied on into part ``index - 1`` of it."""
    dev = _gpu(index)
    ctx = cl.Context([dev])
    q = cl.CommandQueue(ctx, dev)
    d_a = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    (_, up), (_, down) = pinned(ctx, q, nbytes), pinned(ctx, q, nbytes)
    src = np.random.default_rng(index).integers(0, 256, nbytes, dtype=np.uint8)
    copy = stream_copy if streaming_available() else np.copyto
    block = shared_memory.SharedMemory(shared) if shared and index else None
    out = None if block is None else np.ndarray(nbytes, np.uint8, block.buf, (index - 1) * nbytes)
    with ThreadPoolExecutor(tasks) as pool:
        while True:
            start.wait()
            staged_trip(pool, q, d_a, src, up, down, piece, tasks, copy, out)
            done.wait()


def _gpu(index: int) -> Any:
    """The ``index``-th GPU of the first OpenCL platforms that have GPUs (as a fresh process sees them)."""
    return [d for p in cl.get_platforms() for d in p.get_devices() if d.type & cl.device_type.GPU][index]


def _barrier_run(jobs: list[tuple[Callable[..., None], tuple]]) -> Callable[[], None]:
    """Start a process for each ``(target, args)`` of ``jobs`` (spawned, daemons: ended with this one), each
    called as ``target(*args, start, done)`` and looping over rounds that begin and end at two barriers; a call
    that runs one round."""
    mp = multiprocessing.get_context("spawn")
    start, done = mp.Barrier(len(jobs) + 1), mp.Barrier(len(jobs) + 1)
    for target, args in jobs:
        mp.Process(target=target, args=(*args, start, done), daemon=True).start()

    def run() -> None:
        start.wait(timeout=60)  # a process that failed breaks the barrier rather than hang the benchmark
        done.wait(timeout=60)

    return run


def process_runs(k: int, nbytes: int) -> Runs:
    """Copies made by processes of their own (started here, ended with this one; the rounds start and end at
    barriers with them): with ``k > 1`` GPUs both copies on each at once, a process a GPU; with one, the first
    GPU's copy up and copy down at once, a process a direction."""
    jobs = [(i, "up,down") for i in range(k)] if k > 1 else [(0, "up"), (0, "down")]
    name = f"h2d + d2h x{k} GPUs, a process each" if k > 1 else "h2d + d2h, a process each direction"
    return {name: (_barrier_run([(_copier, (i, nbytes, d)) for i, d in jobs]), 2 * k * nbytes)}


def staged_process_runs(k: int, share: int, piece: int, tasks: int) -> Runs:
    """:func:`staged_trip` of ``share`` bytes on each of ``k`` GPUs at once, each by a process of its own with its
    own pageable memory, pinned memory and ``tasks`` staging threads: the host's least work for a sort split
    between the GPUs by processes (nothing partitioned or exchanged, nothing sorted, no copy between processes);
    ``, gathered``: the same, the shares of all processes but the first then copied on, piece by piece as they come
    down, into one block of shared memory (a stand-in for the first process's result array: the least a process a
    GPU adds where the caller gets one array, since a process's pinned memory is its driver's, not shared)."""
    block = shared_memory.SharedMemory(create=True, size=(k - 1) * share)
    np.ndarray((k - 1) * share, np.uint8, block.buf)[:] = 0  # touched, as a result of hpu's pool would be
    run = _barrier_run([(_stager, (i, share, piece, tasks, None)) for i in range(k)])
    gathered = _barrier_run([(_stager, (i, share, piece, tasks, block.name)) for i in range(k)])
    atexit.register(block.unlink)  # (which keeps it alive till then)
    name = f"stage + h2d + d2h {tasks} tasks, shares on x{k} GPUs, a process each"
    return {name: (run, 2 * k * share), f"{name}, gathered": (gathered, 2 * k * share)}


def cupy_runs(nbytes: int) -> Runs:
    """CUDA's copies of the same bytes through cupy (none where cupy is not importable)."""
    try:
        import cupy as cp
    except ImportError:
        return {}
    host = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)
    host[:] = 0
    dev = cp.empty(nbytes, cp.uint8)

    def up() -> None:
        dev.set(host)
        cp.cuda.runtime.deviceSynchronize()

    def down() -> None:
        dev.get(out=host)
        cp.cuda.runtime.deviceSynchronize()

    h_down = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)
    h_down[:] = 0
    d_b = cp.empty(nbytes, cp.uint8)
    s_up, s_down = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)

    def both() -> None:
        dev.set(host, stream=s_up)
        d_b.get(stream=s_down, out=h_down, blocking=False)
        s_up.synchronize()
        s_down.synchronize()

    runs = {"cupy h2d pinned": (up, nbytes), "cupy d2h pinned": (down, nbytes), "cupy h2d + d2h": (both, 2 * nbytes)}
    k = cp.cuda.runtime.getDeviceCount()
    if k < 2:
        return runs
    units = []
    for i in range(k):
        with cp.cuda.Device(i):
            h_up = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)
            h_down = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)
            h_up[:] = 0
            h_down[:] = 0
            units.append((i, h_up, h_down, cp.empty(nbytes, cp.uint8), cp.empty(nbytes, cp.uint8),
                          cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)))

    def all_gpus(both: bool) -> None:  # every GPU's copies queued on its streams, then waited for
        for i, h_up, h_down, d_a, d_b, s, s2 in units:
            with cp.cuda.Device(i):
                d_a.set(h_up, stream=s)
                if both:
                    d_b.get(stream=s2, out=h_down, blocking=False)
        for i, *_, s, s2 in units:
            s.synchronize()
            s2.synchronize()

    runs[f"cupy h2d pinned x{k} GPUs"] = ((lambda: all_gpus(False)), k * nbytes)
    runs[f"cupy h2d + d2h x{k} GPUs"] = ((lambda: all_gpus(True)), 2 * k * nbytes)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_runtime_arguments(ap)
    ap.add_argument("--mib", type=int, default=64, help="bytes moved by each variant, MiB (default 64)")
    ap.add_argument("--piece-mib", type=float, default=4.0, help="staged piece and copy size, MiB (default 4)")
    ap.add_argument("--tasks", type=lambda v: [int(t) for t in v.split(",")], default=[4, 8, 16],
                    help="comma-separated numbers of pool tasks that stage (default 4,8,16; hpu's: 8)")
    ap.add_argument("--ring", type=lambda v: [int(t) for t in v.split(",") if t], default=[4, 8],
                    help="comma-separated pieces in the ring of the staged upload through a ring (default 4,8)")
    ap.add_argument("--flush-mib", type=int, default=0,
                    help="MiB written and read before each call, so that it finds the caches cold (default 0)")
    ap.add_argument("--only", type=lambda v: [w for w in v.split(",") if w], default=[],
                    help="comma-separated parts of variant names: time only the variants whose names contain one "
                         "(default all)")
    ap.add_argument("--rounds", type=int, default=15, help="shuffled rounds (default 15)")
    ap.add_argument("--pause", type=float, default=None,
                    help="idle seconds before each call (default hpu.core.calibrate.IDLE_PAUSE; 0: back to back)")
    args = ap.parse_args(argv)
    nbytes, piece = args.mib << 20, max(1, int(args.piece_mib * (1 << 20)))
    with hpu.Runtime(args.device, profile="hpu1", threads=args.threads) as rt:
        if not rt.has_device:
            ap.error("bench_bus.py needs an OpenCL device")
        mid = args.tasks[len(args.tasks) // 2]
        runs = {**opencl_runs(rt, nbytes, piece, args.tasks, args.ring), **all_gpu_runs(rt, nbytes, piece, mid),
                **cupy_runs(nbytes)}
        if args.only:
            runs = {k: v for k, v in runs.items() if any(w in k for w in args.only)}
        for fn, _ in runs.values():  # warm-up: first-touch costs, driver set-up
            fn()
        samples = shuffled_rounds({k: fn for k, (fn, _) in runs.items()}, args.rounds, np.random.default_rng(0),
                                  pause=args.pause, before=cache_flusher(args.flush_mib))
        meta = {"date": utc_now(), "command": command_line("bench_bus.py", argv), "device": rt.device_name,
                "host": host_description(), "threads": rt.threads, "bytes": nbytes, "piece_bytes": piece,
                "tasks": args.tasks, "ring": args.ring, "only": args.only, "flush_mib": args.flush_mib,
                "rounds": args.rounds, "pause": args.pause, "streaming": streaming_available()}
    print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
    print(f"{'variant':<40} {'median ms':>10} {'GB/s':>7}")
    rows = []
    for name, ts in samples.items():
        t = float(np.median(ts))
        moved = runs[name][1]
        rows.append({"variant": name, "seconds": t, "samples": ts, "bytes": moved, "gb_per_s": moved / t / 1e9})
        print(f"{name:<40} {t * 1e3:10.3f} {moved / t / 1e9:7.1f}", flush=True)
    if args.json:
        write_json(args.json, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
