"""How closely the copies up follow the staging: the ways of handing staged pieces to the DMA engine.

hpu's pipeline (:func:`hpu.sorting.pipeline.stage_pieces`) enqueues every piece's copy up at once, each behind a
``UserEvent`` that the pool task staging the piece sets, and the tasks take the pieces in order, so that the
pieces of a wave are staged side by side and end together.  Each variant below moves ``--mib`` MiB of int32 from
a pageable array (touched, as a caller's) into one device buffer, in pieces of ``--piece-mib`` MiB, on one
in-order queue, and is timed by the caller's clock until ``finish()``:

- ``pinned, at once``: the copies from pinned memory already staged, enqueued at once (the bus alone);
- ``pinned, behind user events``: the same, each behind a user event set right after all are enqueued;
- ``staged alone``: the staging by ``--tasks`` tasks of hpu's pool (streaming stores), no copies;
- ``staged, then copied``: the staging, then the copies (nothing overlapped);
- ``staged, user events``: hpu's way: the copies enqueued first, each behind its piece's user event;
- ``staged, user events, flushed``: as hpu's way, each task flushing the queue after it sets its piece's event;
- ``staged, enqueued by the task``: each task enqueues its piece's copy itself once the piece is staged;
- ``registered by the task``: nothing staged: each task makes a ``USE_HOST_PTR`` buffer over its piece of the
  pageable array (which NVIDIA's driver pins where it lies) and enqueues the copy up from the piece's own pages
  (``, buffer copy``: from that buffer, ``clEnqueueCopyBuffer``); the buffers are released once the copies end;
  ``, a new array``: the same over a new array each call (made and filled before the clock starts);
- ``staged, user events, slices of S``: as hpu's way, each piece staged and copied in slices of ``S`` MiB
  (the device still sees whole pieces' data land in order).

Beside the wall time, the copies' own span on the device (first start to last end, from their profiling events),
their summed busy time, and the tail: from the last staging copy's end (host clock) to ``finish()`` returning.
Medians of ``--repeats`` shuffled rounds after the idle pause, and back to back.

    python experiments/bench_upload_chain.py --device gpu --json results/h100/bench_upload_chain.json
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl

import hpu
from bench_common import add_runtime_arguments, command_line, shuffled_rounds, utc_now, write_json
from hpu.core.streaming import stream_copy
from hpu.core.util import host_description

COMPLETE = cl.command_execution_status.COMPLETE


class Chain:
    """The buffers and queue the variants share, and the last run's marks (host clock, seconds)."""

    def __init__(self, rt: hpu.Runtime, mib: int, piece_mib: float, tasks: int) -> None:
        n = mib << 18
        self.rt, self.tasks = rt, tasks
        self.src = np.random.default_rng(0).integers(-2**31, 2**31, n, dtype=np.int32)
        self.stage = rt.empty_pinned(n, np.int32)
        self.stage[:] = self.src  # the pinned variants' input
        self.d = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, self.src.nbytes)
        self.q = cl.CommandQueue(rt.context, rt.device, properties=cl.command_queue_properties.PROFILING_ENABLE)
        length = int(piece_mib * (1 << 18))
        self.pieces = [(a, min(a + length, n)) for a in range(0, n, length)]
        self.new_src = self.src
        self.staged_at = 0.0
        self.events: list = []

    def renew(self) -> None:
        """A new copy of the input for the next call (made before its clock starts)."""
        self.new_src = np.empty_like(self.src)
        self.new_src[:] = self.src

    def check(self, fn: Callable[[], None]) -> bool:
        """Run ``fn`` once on a zeroed device buffer; whether the device then holds the input."""
        self.renew()
        cl.enqueue_fill_buffer(self.q, self.d, np.int32(0), 0, self.src.nbytes)
        self.q.finish()
        fn()
        back = np.empty_like(self.src)
        cl.enqueue_copy(self.q, back, self.d, is_blocking=True)
        return bool(np.array_equal(back, self.src))

    def slices(self, slice_mib: float | None) -> list[tuple[int, int]]:
        if slice_mib is None:
            return self.pieces
        length = int(slice_mib * (1 << 18))
        return [(s, min(s + length, b)) for a, b in self.pieces for s in range(a, b, length)]

    def copy(self, a: int, b: int, wait_for: list | None = None) -> Any:
        return cl.enqueue_copy(self.q, self.d, self.stage[a:b], dst_offset=a * 4, is_blocking=False,
                               wait_for=wait_for)

    def stage_all(self, parts: list[tuple[int, int]], after: Callable[[int], None], copy: bool = True) -> None:
        """``--tasks`` tasks of hpu's pool (the caller one of them) stage ``parts`` in order (with ``copy``),
        each calling ``after(i)`` once part ``i`` is staged; returns when all are staged."""
        counter, src, stage = itertools.count(), self.src, self.stage

        def task() -> None:
            for i in counter:
                if i >= len(parts):
                    return
                a, b = parts[i]
                if copy:
                    stream_copy(stage[a:b], src[a:b])
                after(i)

        futures = [self.rt.pool.submit(task) for _ in range(self.tasks - 1)]
        task()
        for f in futures:
            f.result()
        self.staged_at = time.perf_counter()

    def finish(self, events: list) -> None:
        self.q.finish()
        self.events = events


def variants(c: Chain, slice_mibs: list[float]) -> dict[str, Callable[[], None]]:
    def pinned_at_once() -> None:
        c.staged_at = time.perf_counter()
        c.finish([c.copy(a, b) for a, b in c.pieces])

    def pinned_user_events() -> None:
        ready = [cl.UserEvent(c.rt.context) for _ in c.pieces]
        evs = [c.copy(a, b, [u]) for (a, b), u in zip(c.pieces, ready)]
        c.q.flush()
        for u in ready:
            u.set_status(COMPLETE)
        c.staged_at = time.perf_counter()
        c.finish(evs)

    def staged_alone() -> None:
        c.stage_all(c.pieces, lambda i: None)
        c.events = []

    def staged_then_copied() -> None:
        c.stage_all(c.pieces, lambda i: None)
        c.finish([c.copy(a, b) for a, b in c.pieces])

    def user_events(slice_mib: float | None, flush: bool = False) -> Callable[[], None]:
        def run() -> None:
            parts = c.slices(slice_mib)
            ready = [cl.UserEvent(c.rt.context) for _ in parts]
            evs = [c.copy(a, b, [u]) for (a, b), u in zip(parts, ready)]
            c.q.flush()

            def after(i: int) -> None:
                ready[i].set_status(COMPLETE)
                if flush:
                    c.q.flush()

            c.stage_all(parts, after)
            c.finish(evs)
        return run

    def registered(buffer_copy: bool, new_array: bool) -> Callable[[], None]:
        def run() -> None:
            src = c.new_src if new_array else c.src
            evs: list = [None] * len(c.pieces)
            held: list = [None] * len(c.pieces)
            flags = cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR

            def after(i: int) -> None:
                a, b = c.pieces[i]
                held[i] = cl.Buffer(c.rt.context, flags, hostbuf=src[a:b])
                if buffer_copy:
                    evs[i] = cl.enqueue_copy(c.q, c.d, held[i], dst_offset=a * 4)
                else:
                    evs[i] = cl.enqueue_copy(c.q, c.d, src[a:b], dst_offset=a * 4, is_blocking=False)
                c.q.flush()

            c.stage_all(c.pieces, after, copy=False)
            c.finish(evs)
            for b in held:
                b.release()
        return run

    def enqueued_by_task() -> None:
        evs: list = [None] * len(c.pieces)

        def after(i: int) -> None:
            a, b = c.pieces[i]
            evs[i] = c.copy(a, b)
            c.q.flush()

        c.stage_all(c.pieces, after)
        c.finish(evs)

    runs = {"pinned, at once": pinned_at_once, "pinned, behind user events": pinned_user_events,
            "staged alone": staged_alone, "staged, then copied": staged_then_copied,
            "staged, user events": user_events(None), "staged, user events, flushed": user_events(None, True),
            "staged, enqueued by the task": enqueued_by_task,
            "registered by the task": registered(False, False),
            "registered by the task, buffer copy": registered(True, False),
            "registered by the task, a new array": registered(False, True)}
    for s in slice_mibs:
        runs[f"staged, user events, slices of {s:g}"] = user_events(s)
    return runs


def marks(c: Chain, t0: float, t1: float) -> dict[str, float]:
    """The last run's device span and busy time of its copies, and its tail after the staging (ms)."""
    out = {"tail ms": 1e3 * (t1 - c.staged_at)}
    if c.events:
        starts = [e.profile.start for e in c.events]
        ends = [e.profile.end for e in c.events]
        out["copies span ms"] = 1e-6 * (max(ends) - min(starts))
        out["copies busy ms"] = 1e-6 * sum(e - s for s, e in zip(starts, ends))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runtime_arguments(ap)
    ap.add_argument("--mib", type=int, default=64, help="MiB moved (default 64: 2^24 int32)")
    ap.add_argument("--piece-mib", type=float, default=4.0, help="MiB a piece (default 4, the sort's)")
    ap.add_argument("--slices-mib", default="1,0.5", help="comma-separated slice sizes of the sliced variants")
    ap.add_argument("--tasks", type=int, default=8, help="staging tasks, the caller one of them (default 8)")
    ap.add_argument("--repeats", type=int, default=21, help="rounds of each mode")
    ap.add_argument("--pause-ms", type=float, default=20.0, help="idle pause before each call (default 20)")
    args = ap.parse_args(argv)
    rt = hpu.Runtime(args.device, profile=args.profile, threads=args.threads)
    if not rt.has_device:
        raise SystemExit("no OpenCL device")
    c = Chain(rt, args.mib, args.piece_mib, args.tasks)
    runs = variants(c, [float(s) for s in args.slices_mib.split(",") if s])
    extra: dict[str, list[dict[str, float]]] = {k: [] for k in runs}

    def timed(name: str, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            t0 = time.perf_counter()
            fn()
            extra[name].append(marks(c, t0, time.perf_counter()))
        return run

    wrapped = {k: timed(k, f) for k, f in runs.items()}
    right = {k: c.check(f) for k, f in runs.items() if k != "staged alone"}  # also the first touches
    order = np.random.default_rng(1)
    modes = {"after pauses": args.pause_ms / 1e3, "back to back": 0.0}
    samples, details = {}, {}
    for mode, p in modes.items():
        for v in extra.values():
            v.clear()
        samples[mode] = shuffled_rounds(wrapped, args.repeats, order, pause=p, before=c.renew)
        details[mode] = {k: {m: float(np.median([x[m] for x in v])) for m in v[0]} for k, v in extra.items()}
    meta = {"date": utc_now(), "command": command_line("bench_upload_chain.py", argv), "device": rt.device.name,
            "host": host_description(), "threads": rt.threads, "tasks": args.tasks, "mib": args.mib,
            "piece_mib": args.piece_mib, "repeats": args.repeats, "pause_ms": args.pause_ms,
            "variants with wrong data": [k for k, ok in right.items() if not ok], "hpu": hpu.__version__}
    print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
    rows = []
    for mode in modes:
        print(f"## {mode}: medians, ms")
        print(f"{'variant':40s} {'wall':>7s} {'tail':>7s} {'span':>7s} {'busy':>7s}")
        for name in runs:
            d = details[mode][name]
            wall = 1e3 * float(np.median(samples[mode][name]))
            rows.append({"mode": mode, "variant": name, "wall ms": wall, **d})
            print(f"{name:40s} {wall:7.3f} {d['tail ms']:7.3f} {d.get('copies span ms', float('nan')):7.3f} "
                  f"{d.get('copies busy ms', float('nan')):7.3f}")
    rt.close()
    if args.json:
        print(f"wrote {write_json(args.json, {'meta': meta, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
