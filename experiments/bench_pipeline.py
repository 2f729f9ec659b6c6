"""Where a device-only fast sort spends its time: staging, the two DMA directions and the device sort.

For each n, sorts uniform random int32 host to host with ``strategy="gpu"``
several times and prints, from the best run's trace (milliseconds since the
call began): the span of the CPU staging copies, of the host-to-device and
device-to-host copies, of the device sort, and the wall time; also each
phase's rate in GB/s, with the transfer chunk size varied, and with the
device sorting each staging wave on arrival (``hpu.fastmode.SORT_WAVES``)
or the whole array after the last copy; then each device step of that run.

    python experiments/bench_pipeline.py [--device gpu] [--min-log 22] [--max-log 25] [--chunks-mib 2,4,8]
        [--waves on,off] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

import hpu
import hpu.fastmode as fm
from hpu.calibrate import host_description


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="OpenCL device (default: hpu's choice)")
    ap.add_argument("--min-log", type=int, default=22)
    ap.add_argument("--max-log", type=int, default=25)
    ap.add_argument("--chunks-mib", default="2,4,8", help="comma-separated transfer chunk sizes to try (MiB)")
    ap.add_argument("--waves", default="on,off", help="SORT_WAVES settings to compare (default on,off)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    rng = np.random.default_rng(0)
    default_chunk, default_waves = fm.CHUNK_BYTES, fm.SORT_WAVES
    with hpu.Runtime(args.device, profile="hpu1") as rt:
        meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": "python experiments/bench_pipeline.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                "device": rt.device_name, "host": host_description(), "threads": rt.threads}
        print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
        print(f"{'n':>10} {'chunk':>6} {'waves':>5} {'wall':>7} {'stage':>13} {'h2d':>13} {'sort':>13} {'d2h':>13}   ms (start-end)")
        for lg in range(args.min_log, args.max_log + 1):
            n = 1 << lg
            a = rng.integers(0, 2 * n, n).astype(np.int32)
            ref = np.sort(a)
            for mib, waves in ((float(x), w) for x in args.chunks_mib.split(",") for w in args.waves.split(",")):
                fm.CHUNK_BYTES = int(mib * (1 << 20))
                fm.SORT_WAVES = waves == "on"
                best = None
                for _ in range(args.repeats + 1):
                    out, tr = hpu.hybrid_mergesort(a, strategy="gpu", runtime=rt, return_trace=True)
                    if not np.array_equal(out, ref):
                        raise SystemExit(f"wrong result at n = 2^{lg}")
                    del out
                    if best is None or tr.wall < best.wall:
                        best = tr
                s = spans(best)
                steps = [(e.kind, e.start * 1e3, e.end * 1e3) for e in best.events if e.unit == "device"]
                rows.append({"n": n, "chunk_bytes": fm.CHUNK_BYTES, "waves": fm.SORT_WAVES, **s, "device_steps": steps})
                cells = [f"{s.get(p + '_start', float('nan')):6.2f}-{s.get(p + '_end', float('nan')):6.2f}"
                         for p in ("stage", "h2d", "sort", "d2h")]
                print(f"{n:>10} {mib:6.1f} {waves:>5} {s['wall']:7.2f} " + " ".join(cells) + "   device: "
                      + ", ".join(f"{k} {a:.2f}-{b:.2f}" for k, a, b in steps), flush=True)
    fm.CHUNK_BYTES, fm.SORT_WAVES = default_chunk, default_waves
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
