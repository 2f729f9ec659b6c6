"""Where a device-only fast sort spends its time: staging, the two DMA directions and the device sort.

For each n, sorts uniform random int32 host to host with ``strategy="gpu"``
several times and prints, from the best run's trace (milliseconds since the
call began): the span of the CPU staging copies, of the host-to-device and
device-to-host copies, of the device sort, and the wall time; also each
phase's rate in GB/s, with the transfer chunk size varied, and with the
device sorting each staging wave on arrival or the whole array after the
last copy (``hpu.PipelineOptions(chunk_bytes=..., sort_waves=...)``, passed
as ``options=``); then each device step of that run.

    python experiments/bench_pipeline.py [--device gpu] [--min-log 22] [--max-log 25] [--chunks-mib 2,4,8]
        [--waves on,off] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import hpu
from bench_common import command_line, utc_now, write_json
from hpu.core.util import host_description


def spans(trace: hpu.Trace) -> dict[str, float]:
    """Start and end (ms) of each phase of one run's trace."""
    out: dict[str, float] = {"wall": trace.wall * 1e3}
    phases = {"stage": lambda e: e.unit.startswith("cpu") and e.kind == "stage",
              "h2d": lambda e: e.unit == "bus" and e.kind == "h2d",
              "sort": lambda e: e.unit == "device",
              "d2h": lambda e: e.unit == "bus" and e.kind == "d2h"}
    for name, match in phases.items():
        ev = [e for e in trace.events if match(e)]
        if ev:
            out[f"{name}_start"] = min(e.start for e in ev) * 1e3
            out[f"{name}_end"] = max(e.end for e in ev) * 1e3
    return out


def best_trace(a: np.ndarray, ref: np.ndarray, rt: hpu.Runtime, options: hpu.PipelineOptions,
               repeats: int) -> hpu.Trace:
    """The trace of the fastest of ``repeats + 1`` device-only sorts of ``a`` (each checked against ``ref``)."""
    best = None
    for _ in range(repeats + 1):
        out, tr = hpu.hybrid_mergesort(a, strategy="gpu", runtime=rt, return_trace=True, options=options)
        if not np.array_equal(out, ref):
            raise SystemExit(f"wrong result at n = {a.size} with {options}")
        del out
        if best is None or tr.wall < best.wall:
            best = tr
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="OpenCL device (default: hpu's choice)")
    ap.add_argument("--min-log", type=int, default=22)
    ap.add_argument("--max-log", type=int, default=25)
    ap.add_argument("--chunks-mib", default="2,4,8", help="comma-separated transfer chunk sizes to try (MiB)")
    ap.add_argument("--waves", default="on,off",
                    help="PipelineOptions.sort_waves settings to compare (default on,off)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    rng = np.random.default_rng(0)
    with hpu.Runtime(args.device, profile="hpu1") as rt:
        meta = {"date": utc_now(), "command": command_line("bench_pipeline.py", argv),
                "device": rt.device_name, "host": host_description(), "threads": rt.threads}
        print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
        print(f"{'n':>10} {'chunk':>6} {'waves':>5} {'wall':>7} {'stage':>13} {'h2d':>13} {'sort':>13} {'d2h':>13}   ms (start-end)")
        for lg in range(args.min_log, args.max_log + 1):
            n = 1 << lg
            a = rng.integers(0, 2 * n, n).astype(np.int32)
            ref = np.sort(a)
            for mib, waves in ((float(x), w) for x in args.chunks_mib.split(",") for w in args.waves.split(",")):
                options = hpu.PipelineOptions(chunk_bytes=int(mib * (1 << 20)), sort_waves=waves == "on")
                best = best_trace(a, ref, rt, options, args.repeats)
                s = spans(best)
                steps = [(e.kind, e.start * 1e3, e.end * 1e3) for e in best.events if e.unit == "device"]
                rows.append({"n": n, "chunk_bytes": options.chunk_bytes, "waves": options.sort_waves, **s,
                             "device_steps": steps})
                cells = [f"{s.get(p + '_start', float('nan')):6.2f}-{s.get(p + '_end', float('nan')):6.2f}"
                         for p in ("stage", "h2d", "sort", "d2h")]
                print(f"{n:>10} {mib:6.1f} {waves:>5} {s['wall']:7.2f} " + " ".join(cells) + "   device: "
                      + ", ".join(f"{k} {a:.2f}-{b:.2f}" for k, a, b in steps), flush=True)
    if args.json:
        write_json(args.json, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
