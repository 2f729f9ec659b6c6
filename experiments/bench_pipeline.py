"""Where a device-only fast sort spends its time: staging, the two DMA directions and the device sort.

For each n, sorts uniform random int32 host to host with ``strategy="gpu"`` (``--part sort``; ``--part kv``: the
key-value sort of :func:`hpu.sorting.pipeline.fast_keyed_sort`, int32 keys with int64 values; ``--part rows``:
:func:`hpu.sorting.pipeline.fast_row_sort` of float32 rows of 1024 keys) several times and prints, from the best
run's trace (milliseconds since the call began): the span of the CPU staging copies, of the host-to-device and
device-to-host copies, of the device sort, and the wall time, beside the median wall time of the runs (by their
traces, and by the caller's clock around the whole call); with the transfer chunk size, the most staging tasks at
once and the pieces per sort wave varied, with the device sorting each staging wave on arrival or the whole array
after the last copy, with the host's copies by streaming stores or ``numpy.copyto``, with the pieces staged by hpu's
compiled stager or by its Python thread pool, and with the device's sort (``hpu.PipelineOptions(chunk_bytes=...,
staging_tasks=..., wave_pieces=..., staging_slices=..., last_wave=..., sort_waves=..., stream_copies=...,
native_staging=..., device_sort=...)``, passed as ``options=``), and with the input in pageable memory or in hpu's
pinned memory (``--memory``: not staged), with a share of the rows sorted by the CPU pool beside the device
(``--cpu-rows``, rows only), each call back to back or after an idle pause (``--pause-ms``), with Python's switch
interval set (``--switch-interval``); the settings in turn, call by call, so that each median is of calls
interleaved with the others'; then each device step of that run (``--pieces``: and below it each staged piece's copy
into pinned memory, by which thread, and its copy up). The host's ``GLIBC_TUNABLES`` are printed in the header.

    python experiments/bench_pipeline.py [--device gpu] [--part sort|kv|rows] [--min-log 22] [--max-log 25]
        [--chunks-mib 2,4,8] [--tasks auto,4,8] [--wave-pieces auto,2] [--slices auto,1] [--last-wave 0.5,0.25]
        [--waves on,off] [--streams on,off]
        [--native on,off] [--device-sorts auto,merge,tile-radix] [--memory pageable,pinned] [--cpu-rows 0,0.1]
        [--pause-ms 0] [--switch-interval SECONDS] [--pieces] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import hpu
from bench_common import command_line, utc_now, write_json
from hpu.core.streaming import streaming_available
from hpu.core.util import host_description
from hpu.sorting.device import ALGORITHMS
from hpu.sorting.pipeline import fast_keyed_sort, fast_row_sort

ROW = 1024  # keys per row of --part rows


def spans(trace: hpu.Trace) -> dict[str, float]:
    """Start and end (ms) of each phase of one run's trace."""
    trace.resolve()
    out: dict[str, float] = {"wall": trace.wall * 1e3}
    phases = {"stage": lambda e: e.unit.startswith("cpu") and e.kind == "stage",
              "h2d": lambda e: e.unit == "bus" and e.kind == "h2d",
              "sort": lambda e: e.unit == "device",
              "d2h": lambda e: e.unit == "bus" and e.kind == "d2h",
              "cpu": lambda e: e.unit == "cpu:pool" and e.kind == "sort"}
    for name, match in phases.items():
        ev = [e for e in trace.events if match(e)]
        if ev:
            out[f"{name}_start"] = min(e.start for e in ev) * 1e3
            out[f"{name}_end"] = max(e.end for e in ev) * 1e3
    return out


def piece_lines(trace: hpu.Trace) -> list[str]:
    """One line a staged piece of one run's trace, in staging order: the thread that staged it, its staging copy and
    its copy up (ms since the call began; pieces staged by no copy, such as pinned input, show the copy up alone)."""
    stage = [e for e in trace.events if e.unit.startswith("cpu") and e.kind == "stage"]
    h2d = [e for e in trace.events if e.unit.startswith("bus") and e.kind == "h2d"]
    lines = []
    for k in range(max(len(stage), len(h2d))):
        s = f"{stage[k].unit[4:]:>16} {stage[k].start * 1e3:6.2f}-{stage[k].end * 1e3:6.2f}" if k < len(stage) else ""
        u = f"{h2d[k].start * 1e3:6.2f}-{h2d[k].end * 1e3:6.2f}" if k < len(h2d) else ""
        lines.append(f"    piece {k:>3}  {s:>30}   up {u:>13}")
    return lines


def cpu_rows_into(block: np.ndarray, out: np.ndarray) -> None:
    """The CPU's sort of a block of rows, as ``hpu.sort``'s: 256 KiB of rows copied into ``out`` and sorted there
    by numpy's default sort at a time (the same bits as its stable sort for these keys, which hold no -0.0 or NaN)."""
    step = max(1, (256 << 10) // (block.shape[1] * block.itemsize))
    for i in range(0, block.shape[0], step):
        np.copyto(out[i:i + step], block[i:i + step])
        out[i:i + step].sort(axis=-1)


def run_part(part: str, a: np.ndarray, values: np.ndarray | None, rt: hpu.Runtime,
             options: hpu.PipelineOptions, cpu_share: float = 0.0) -> tuple[list[np.ndarray], hpu.Trace]:
    """One device-only call of ``part`` on ``a`` (and ``values``; rows: ``cpu_share`` of them sorted by the CPU
    pool beside the device): its results and trace."""
    if part == "kv":
        return fast_keyed_sort(a, [values], rt, gather=True, redo=None, on_device_error="raise", options=options)
    if part == "rows":
        out, tr = fast_row_sort(a, ROW, rt, sort_into=cpu_rows_into, cpu_rows=round(cpu_share * a.size / ROW),
                                on_device_error="raise", options=options)
        return [out], tr
    out, tr = hpu.hybrid_mergesort(a, strategy="gpu", runtime=rt, return_trace=True, options=options)
    return [out], tr


def setting(v: str) -> int | None:
    """A --tasks, --wave-pieces or --slices value: None for "auto" (the default)."""
    return None if v == "auto" else int(v)


def best_traces(part: str, ins: dict[str, tuple[np.ndarray, np.ndarray | None]], refs: list[np.ndarray],
                rt: hpu.Runtime, configs: list[tuple[hpu.PipelineOptions, str, float]],
                repeats: int, pause: float = 0.0) -> list[tuple[hpu.Trace, float, float]]:
    """For each of ``configs`` (options, the input's memory: a key of ``ins``, whose values are the keys and the values,
    and the CPU's share of rows): the trace of the fastest of ``repeats + 1`` device-only calls (each result checked
    against ``refs``), the median wall time (ms) of the last ``repeats`` (the first warms up) by their traces, and
    by the caller's clock around the whole call (the trace's wall starts once the call has checked its input and
    chosen its path, and ends before it returns), the settings called in turn in each round, each call ``pause``
    seconds after the one before (idle)."""
    best: list = [None] * len(configs)
    walls: list[list[float]] = [[] for _ in configs]
    calls: list[list[float]] = [[] for _ in configs]
    for _ in range(repeats + 1):
        for i, (opts, memory, share) in enumerate(configs):
            time.sleep(pause)
            t0 = time.perf_counter()
            outs, tr = run_part(part, *ins[memory], rt, opts, share)
            calls[i].append((time.perf_counter() - t0) * 1e3)
            if not all(np.array_equal(o, r) for o, r in zip(outs, refs)):
                raise SystemExit(f"wrong result of {part} at n = {ins[memory][0].size} from {memory} memory "
                                 f"with {opts}")
            del outs
            walls[i].append(tr.wall * 1e3)
            if best[i] is None or tr.wall < best[i].wall:
                best[i] = tr
    return [(b, float(np.median(w[1:] or w)), float(np.median(c[1:] or c))) for b, w, c in zip(best, walls, calls)]


def pinned_copy(rt: hpu.Runtime, a: np.ndarray | None) -> np.ndarray | None:
    """``a`` copied into ``rt``'s pinned memory (:meth:`hpu.Runtime.empty_pinned`: not staged by the pipeline)."""
    if a is None:
        return None
    out = rt.empty_pinned(a.shape, a.dtype)
    if not rt.host_pool.is_pinned(out):
        raise SystemExit(f"--memory pinned: no pinned memory for {a.nbytes} bytes")
    out[...] = a
    return out


def inputs(part: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None, list[np.ndarray]]:
    """The keys, the values (``kv``) and the reference results of ``part`` at ``n`` keys."""
    if part == "rows":
        a = rng.random(n, dtype=np.float32)
        return a, None, [np.sort(a.reshape(-1, ROW), axis=-1, kind="stable").ravel()]
    a = rng.integers(0, 2 * n, n).astype(np.int32)
    if part == "kv":
        v = rng.integers(-2**62, 2**62, n)
        perm = np.argsort(a, kind="stable")
        return a, v, [a[perm], v[perm]]
    return a, None, [np.sort(a)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked; ``memories``: the ``--memory`` values as a list."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="OpenCL device (default: hpu's choice)")
    ap.add_argument("--part", choices=("sort", "kv", "rows"), default="sort")
    ap.add_argument("--min-log", type=int, default=22)
    ap.add_argument("--max-log", type=int, default=25)
    ap.add_argument("--chunks-mib", default="2,4,8", help="comma-separated transfer chunk sizes to try (MiB)")
    ap.add_argument("--tasks", default="auto",
                    help="PipelineOptions.staging_tasks settings to compare (auto: the default, 8; default auto)")
    ap.add_argument("--wave-pieces", default="auto",
                    help="PipelineOptions.wave_pieces settings to compare (auto: the default; default auto)")
    ap.add_argument("--slices", default="auto",
                    help="PipelineOptions.staging_slices settings to compare (auto: the default; 1: a piece a thread; "
                         "default auto)")
    ap.add_argument("--last-wave", default="auto",
                    help="PipelineOptions.last_wave settings to compare (auto: the default; default auto)")
    ap.add_argument("--waves", default="on,off",
                    help="PipelineOptions.sort_waves settings to compare (default on,off)")
    ap.add_argument("--streams", default="on,off",
                    help="PipelineOptions.stream_copies settings to compare (default on,off)")
    ap.add_argument("--native", default="on",
                    help="PipelineOptions.native_staging settings to compare (default on)")
    ap.add_argument("--device-sorts", default="auto",
                    help="PipelineOptions.device_sort settings to compare (auto: the device's default; default auto)")
    ap.add_argument("--memory", default="pageable",
                    help="the inputs' memory to compare: pageable (numpy's) and pinned (hpu.Runtime.empty_pinned, "
                         "read by the DMA engine unstaged); default pageable")
    ap.add_argument("--cpu-rows", default="0",
                    help="comma-separated shares of the rows sorted by the CPU pool beside the device (--part rows)")
    ap.add_argument("--pause-ms", type=float, default=0.0,
                    help="idle milliseconds before each call (as between a program's calls; default 0: back to back)")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval for the run: seconds a thread waits for Python's global lock before "
                         "it asks the holder to drop it (default: Python's, 0.005)")
    ap.add_argument("--pieces", action="store_true",
                    help="print each staged piece of the fastest run: its staging copy (thread, ms) and its copy up")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.memories = args.memory.split(",")
    if not set(args.memories) <= {"pageable", "pinned"}:
        ap.error(f"--memory: pageable and/or pinned, got {args.memory!r}")
    if not set(args.device_sorts.split(",")) <= {"auto", *ALGORITHMS}:
        ap.error(f"--device-sorts: each of auto, {', '.join(ALGORITHMS)}, got {args.device_sorts!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    memories = args.memories
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    rows = []
    rng = np.random.default_rng(0)
    with hpu.Runtime(args.device, profile="hpu1") as rt:
        meta = {"part": args.part, "date": utc_now(), "command": command_line("bench_pipeline.py", argv),
                "device": rt.device_name, "host": host_description(), "threads": rt.threads,
                "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES", ""), "streaming": streaming_available(),
                "pause_ms": args.pause_ms, "switch_interval": sys.getswitchinterval()}
        print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
        print(f"{'n':>10} {'memory':>8} {'cpu':>4} {'chunk':>6} {'tasks':>5} {'wave':>4} {'slc':>4} {'last':>5} "
              f"{'algorithm':>10} "
              f"{'waves':>5} "
              f"{'strm':>4} {'ntv':>3} {'median':>7} {'call':>7} {'wall':>7} {'stage':>13} "
              f"{'h2d':>13} {'sort':>13} {'d2h':>13} {'cpu sort':>13}   ms (start-end of the fastest run)")
        configs = [(hpu.PipelineOptions(chunk_bytes=int(float(x) * (1 << 20)), sort_waves=w == "on",
                                        wave_pieces=setting(p), stream_copies=st == "on",
                                        staging_slices=setting(sl),
                                        **({} if lw == "auto" else {"last_wave": float(lw)}),
                                        native_staging=nt == "on", device_sort=None if ds == "auto" else ds,
                                        **({} if setting(k) is None else {"staging_tasks": setting(k)})), mem,
                    float(c))
                   for x in args.chunks_mib.split(",") for k in args.tasks.split(",")
                   for p in args.wave_pieces.split(",") for w in args.waves.split(",")
                   for sl in args.slices.split(",") for lw in args.last_wave.split(",")
                   for st in args.streams.split(",") for nt in args.native.split(",")
                   for ds in args.device_sorts.split(",") for mem in memories
                   for c in (args.cpu_rows.split(",") if args.part == "rows" else ["0"])]
        for lg in range(args.min_log, args.max_log + 1):
            n = 1 << lg
            a, values, refs = inputs(args.part, n, rng)
            ins = {"pageable": (a, values)}
            if "pinned" in memories:
                ins["pinned"] = (pinned_copy(rt, a), pinned_copy(rt, values))
            traces = best_traces(args.part, ins, refs, rt, configs, args.repeats, args.pause_ms / 1e3)
            for (options, memory, share), (best, median, call) in zip(configs, traces):
                wave, mib = options.wave_pieces, options.chunk_bytes / (1 << 20)
                s = spans(best)
                steps = [(e.kind, e.start * 1e3, e.end * 1e3) for e in best.events if e.unit == "device"]
                rows.append({"n": n, "chunk_bytes": options.chunk_bytes, "staging_tasks": options.staging_tasks,
                             "wave_pieces": wave, "staging_slices": options.staging_slices,
                             "last_wave": options.last_wave,
                             "waves": options.sort_waves,
                             "stream_copies": options.stream_copies,
                             "native_staging": options.native_staging, "device_sort": options.device_sort,
                             "memory": memory, "cpu_rows": share,
                             "median_wall": median, "median_call": call, **s, "device_steps": steps})
                cells = [f"{s.get(p + '_start', float('nan')):6.2f}-{s.get(p + '_end', float('nan')):6.2f}"
                         for p in ("stage", "h2d", "sort", "d2h", "cpu")]
                print(f"{n:>10} {memory:>8} {share:4.2f} {mib:6.1f} {options.staging_tasks:>5} {wave or 'auto':>4} "
                      f"{options.staging_slices or 'auto':>4} {options.last_wave:5.3f} "
                      f"{options.device_sort or 'auto':>10} "
                      f"{'on' if options.sort_waves else 'off':>5} {'on' if options.stream_copies else 'off':>4} "
                      f"{'on' if options.native_staging else 'off':>3} "
                      f"{median:7.2f} {call:7.2f} "
                      f"{s['wall']:7.2f} " + " ".join(cells) + "   device: "
                      + ", ".join(f"{k} {a:.2f}-{b:.2f}" for k, a, b in steps),
                      flush=True)
                if args.pieces:
                    print("\n".join(piece_lines(best)), flush=True)
    if args.json:
        write_json(args.json, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
