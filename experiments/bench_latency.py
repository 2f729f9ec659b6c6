"""What a device sort costs whatever its size: the OpenCL and thread-pool round trips a call is built of.

A fast-mode device sort of a few thousand keys takes over a millisecond on the H100 benchmark machine (the
profile's ``transfer`` curve), while a copy's latency is about 20 us there.  Each probe below is one of the
steps of :func:`hpu.sorting.pipeline.device_share`, alone, on 4 bytes (``--bytes``), timed by the caller's clock:

- ``copies``: a copy up and a copy down on one in-order queue, then a wait for the last one (``, polled``: its
  status read in a loop until it is complete, then the wait);
- ``copies behind a user event``: the copy up waits for a ``UserEvent`` set by this thread right after the
  enqueue (hpu's copies up wait for their piece's staging that way);
- ``copies behind a user event set by a pool task``: the event set by a task of hpu's pool, as the staging
  tasks do;
- ``copy up on a second queue``: the copy up on one queue, a kernel and the copy down on another waiting for it
  (hpu's copy queue and compute queue);
- ``kernel``: a one-work-item kernel and a wait;
- ``pool task`` / ``8 pool tasks``: tasks that do nothing, submitted to hpu's pool and waited for;
- ``hpu gpu 2^k``: ``hpu.hybrid_mergesort(strategy="gpu")`` of uniform random int32, with the trace's first
  staging start, last copy's end and wall (ms, medians of as many calls after the pause, each returning its
  trace) beside it, and on the caller's clock (:attr:`hpu.Trace.start`) how long the call ran before its first
  staging copy began and after its last copy down ended (when the host saw it end: the trace puts the device's
  clock there), this one with the trace's resolution, some 40 reads of the device's event times that a call
  without a trace does not make; ``hpu cpu`` and ``numpy.sort`` for scale.

Every probe is timed after the idle pause of :func:`bench_common.shuffled_rounds` (``--pause-ms``) and back to back.

    python experiments/bench_latency.py --device gpu --json results/h100/bench_latency.json
"""

from __future__ import annotations

import argparse
import functools
import time
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl

import hpu
from bench_common import add_runtime_arguments, command_line, shuffled_rounds, utc_now, write_json
from hpu.core.util import host_description

COMPLETE = cl.command_execution_status.COMPLETE


def opencl_probes(rt: hpu.Runtime, nbytes: int) -> dict[str, Callable[[], Any]]:
    """The OpenCL and pool probes on ``rt``'s context, each a call that returns once its work is done."""
    ctx, dev = rt.context, rt.device
    q, q2 = cl.CommandQueue(ctx, dev), cl.CommandQueue(ctx, dev)
    host, back = np.zeros(max(1, nbytes // 4), np.int32), np.zeros(max(1, nbytes // 4), np.int32)
    d = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, host.nbytes)
    knl = cl.Program(ctx, "__kernel void touch(__global int *a) { a[get_global_id(0)] += 1; }").build().touch

    def copies(ready: Callable[[], list], setter: Callable[[list], None] = lambda u: None,
               polled: bool = False) -> Callable[[], None]:
        def run() -> None:
            wait = ready()
            up = cl.enqueue_copy(q, d, host, wait_for=wait or None, is_blocking=False)
            q.flush()
            setter(wait)
            down = cl.enqueue_copy(q, back, d, is_blocking=False)
            if polled:
                q.flush()
                while down.command_execution_status != COMPLETE:
                    pass
            cl.wait_for_events([down])
            del up  # kept until done: pyopencl waits for a freed copy's event
        return run

    def set_here(wait: list) -> None:
        wait[0].set_status(COMPLETE)

    def set_in_pool(wait: list) -> None:
        rt.pool.submit(wait[0].set_status, COMPLETE)

    def two_queues() -> None:
        up = cl.enqueue_copy(q2, d, host, is_blocking=False)
        q2.flush()
        k = knl(q, (1,), None, d, wait_for=[up])
        down = cl.enqueue_copy(q, back, d, wait_for=[k], is_blocking=False)
        cl.wait_for_events([down])
        del up

    def kernel() -> None:
        knl(q, (1,), None, d).wait()

    def pool(k: int) -> Callable[[], None]:
        def run() -> None:
            for f in [rt.pool.submit(int) for _ in range(k)]:
                f.result()
        return run

    return {"copies": copies(list),
            "copies, polled": copies(list, polled=True),
            "copies behind a user event": copies(lambda: [cl.UserEvent(ctx)], set_here),
            "copies behind a user event set by a pool task": copies(lambda: [cl.UserEvent(ctx)], set_in_pool),
            "copy up on a second queue": two_queues,
            "kernel": kernel,
            "pool task": pool(1),
            "8 pool tasks": pool(8)}


def sort_probes(rt: hpu.Runtime, logs: list[int]) -> tuple[dict[str, Callable[[], Any]], dict[str, Callable]]:
    """hpu's device sort at ``2**k`` keys for ``k`` in ``logs`` (and the CPU's and numpy's at the smallest), and
    for each device sort a call that checks its result against ``numpy.sort`` and returns its resolved trace (timed
    apart: resolving a trace and the check cost host time)."""
    rng = np.random.default_rng(0)
    keys = {k: rng.integers(0, 2**31 - 1, 2**k, dtype=np.int32) for k in logs}
    runs: dict[str, Callable[[], Any]] = {}
    traced: dict[str, Callable] = {}
    for k in logs:
        def traced_run(a: np.ndarray = keys[k], ref: np.ndarray = np.sort(keys[k])) -> Any:
            t0 = time.perf_counter()
            r, tr = hpu.hybrid_mergesort(a, strategy="gpu", runtime=rt, return_trace=True)
            t1 = time.perf_counter()
            if not np.array_equal(r, ref):
                raise SystemExit(f"wrong result of the device sort of {a.size} keys")
            return tr, t0, t1
        runs[f"hpu gpu 2^{k}"] = functools.partial(hpu.hybrid_mergesort, keys[k], strategy="gpu", runtime=rt)
        traced[f"hpu gpu 2^{k}"] = traced_run
    small = keys[min(logs)]
    runs[f"hpu cpu 2^{min(logs)}"] = lambda: hpu.hybrid_mergesort(small, strategy="cpu", runtime=rt)
    runs[f"numpy.sort 2^{min(logs)}"] = lambda: np.sort(small)
    return runs, traced


def trace_marks(traces: list) -> dict[str, float]:
    """The medians (ms) of ``traces`` (each ``(trace, the call's entry, its return)`` on the caller's clock): first
    staging start, last copy-down end and wall by the trace; from the call's entry to its first staging start and
    from its last copy down's end to its return."""
    if not traces:
        return {}
    first = [min((e.start for e in t.events if e.kind == "stage"), default=np.nan) for t, _, _ in traces]
    last = [max((e.end for e in t.events if e.kind == "d2h"), default=np.nan) for t, _, _ in traces]
    spans = {"stage from": first, "d2h to": last, "wall": [t.wall for t, _, _ in traces],
             "call entry to staging": [t.start + f - t0 for (t, t0, _), f in zip(traces, first)],
             "last copy to return": [t1 - t.start - end for (t, _, t1), end in zip(traces, last)]}
    medians = {k: 1e3 * float(np.nanmedian(v)) if not np.all(np.isnan(v)) else None for k, v in spans.items()}
    return {k: v for k, v in medians.items() if v is not None}  # JSON has no NaN


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_runtime_arguments(ap)
    ap.add_argument("--bytes", type=int, default=4, help="bytes each probe's copies move (default 4)")
    ap.add_argument("--logs", default="10,16,20", help="comma-separated log2 sizes of hpu's device sort")
    ap.add_argument("--repeats", type=int, default=21, help="timed calls of each probe in each mode")
    ap.add_argument("--pause-ms", type=float, default=20.0, help="idle pause before each call (default 20)")
    args = ap.parse_args(argv)
    rt = hpu.Runtime(args.device, profile=args.profile, threads=args.threads)
    if not rt.has_device:
        raise SystemExit("no OpenCL device")
    sorts, traced = sort_probes(rt, [int(s) for s in args.logs.split(",")])
    runs = {**opencl_probes(rt, args.bytes), **sorts}
    for f in runs.values():  # builds, first touches
        f()
    order = np.random.default_rng(1)
    modes = {"after pauses": args.pause_ms / 1e3, "back to back": 0.0}
    samples = {mode: shuffled_rounds(runs, args.repeats, order, pause=p) for mode, p in modes.items()}
    traces = {name: [] for name in traced}
    for _ in range(args.repeats):
        for name, f in traced.items():
            time.sleep(args.pause_ms / 1e3)
            traces[name].append(f())
    meta = {"date": utc_now(), "command": command_line("bench_latency.py", argv), "device": rt.device.name,
            "host": host_description(), "threads": rt.threads, "repeats": args.repeats, "pause_ms": args.pause_ms,
            "pyopencl": cl.VERSION_TEXT, "hpu": hpu.__version__}
    print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
    print(f"{'probe':48s} {'after pauses us':>16s} {'back to back us':>16s}   hpu's trace after pauses (ms)")
    rows = []
    for name in runs:
        med = {mode: 1e6 * float(np.median(samples[mode][name])) for mode in modes}
        marks = trace_marks(traces.get(name, []))
        rows.append({"probe": name, **{f"{mode} us": v for mode, v in med.items()},
                     **{f"trace {k} ms": v for k, v in marks.items()}})
        print(f"{name:48s} {med['after pauses']:16.1f} {med['back to back']:16.1f}   "
              + ", ".join(f"{k} {v:.3f}" for k, v in marks.items()))
    rt.close()
    if args.json:
        print(f"wrote {write_json(args.json, {'meta': meta, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
