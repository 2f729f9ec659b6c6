"""Beyond the paper: tabu-search speed-ups per instance (CPU threads, device, hybrid) and the model's split against the best forced one.

Runs experiments/bench_tabu.py (QAPLIB 2-swap and HW/SW partitioning 2-flip
neighbourhoods; see its --help) into OUT/bench_tabu.json, or reads existing
outputs with --from-json (their instances together), and plots, per
instance, the speed-up of each unit over vectorised numpy on one CPU thread
(time per tabu iteration) with the hybrid's speed-up as the model predicted
it, and the time of the model's split over the best of the forced splits
bench_tabu sweeps (alpha times transfer level).  The tabu split has its own cost model, calibrated per
problem by hpu.tabu.calibrate, so this sweep takes no HPU profile.

Writes bench_tabu.json (bench_tabu's own output, unless --from-json), tabu.json
(the per-instance table plotted, with the sources) and fig_tabu.{png,svg}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import bench_tabu
import sweep_common as common

INSTANCES = "tai30a,tai50a,tai100a,hwsw1000,hwsw4000"
QUICK_INSTANCES = "tai12a,hwsw200"


def table(bench: dict) -> list[dict]:
    """Per instance: moves, speed-up over one CPU thread per unit, the hybrid's predicted speed-up and split checks."""
    rows = []
    for r in bench["results"]:
        units = r["units"]
        base = units["cpu-1"]["seconds_per_iteration"]
        h = units["hybrid"]
        rows.append({
            "instance": r["instance"],
            "moves": r["moves"],
            "seconds_per_iteration": {u: d["seconds_per_iteration"] for u, d in units.items()},
            "speedup": {u: base / d["seconds_per_iteration"] for u, d in units.items()},
            "hybrid_predicted_speedup": base / h["predicted_seconds"] if h.get("predicted_seconds") else None,
            "hybrid_split": {k: h[k] for k in ("alpha", "cpu_chunks", "transfer_level")},
            # bench_tabu's confirmation round where it has one (side by side, free of the winner's curse)
            "model_vs_best_forced": r.get("confirm", r).get("model_vs_best_forced"),
            "hybrid_vs_best_single": r.get("confirm", r)["hybrid_vs_best_single"],
        })
    return rows


def moves(m: int) -> str:
    """A move count for a tick label: 435, 4950, 500k, 8.0M."""
    return f"{m}" if m < 10_000 else f"{m / 1e3:.0f}k" if m < 1_000_000 else f"{m / 1e6:.1f}M"


def plot(data: dict):
    """Speed-ups per instance and unit (left); the model's split over the best forced split (right)."""
    rows = data["instances"]
    names = [r["instance"] for r in rows]
    units = [u for u in dict.fromkeys(u for r in rows for u in r["speedup"]) if u != "cpu-1"]
    x = np.arange(len(rows))
    width = 0.8 / max(len(units), 1)
    fig, (ax, ax_m) = common.plt.subplots(1, 2, figsize=(max(13.0, 4 + 1.3 * len(rows)), 4.8),
                                          gridspec_kw={"width_ratios": [2, 1]})
    for k, u in enumerate(units):
        y = [r["speedup"].get(u, np.nan) for r in rows]
        ax.bar(x + (k - (len(units) - 1) / 2) * width, y, width, label=u)
    k = units.index("hybrid") if "hybrid" in units else 0
    ax.plot(x + (k - (len(units) - 1) / 2) * width, [r["hybrid_predicted_speedup"] or np.nan for r in rows], "k*",
            ms=10, label="hybrid, model prediction")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    common.plain_log_ticks(ax)
    ax.set_xticks(x, [f"{r['instance']}\n{moves(r['moves'])} moves" for r in rows], fontsize=7)
    ax.set_ylabel("speed-up over numpy on one CPU thread\n(time per tabu iteration)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y", which="both")
    ratio = [r["model_vs_best_forced"] if r["model_vs_best_forced"] is not None else np.nan for r in rows]
    ax_m.bar(x, ratio, 0.6, color="tab:green", label="model's split / best forced split")
    ax_m.axhline(1.0, color="k", lw=0.8)
    ax_m.axhline(1.1, color="tab:red", ls="--", lw=1, label="10% tolerance (bench_tabu's check)")
    ax_m.set_xticks(x, names, fontsize=7, rotation=45, ha="right")
    ax_m.set_ylabel("time ratio (1 = the model found the best split)")
    ax_m.legend(fontsize=7)
    ax_m.grid(alpha=0.3, axis="y")
    return common.finish(fig, "Tabu search: neighbourhood evaluation per iteration, hybrid split by the model",
                         data["meta"])


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; return the exit status."""
    ap = common.parser(__doc__, measured=True, timed=False, with_profile=False)
    ap.add_argument("--repeats", type=int, default=1, help="bench_tabu runs per measurement, median taken (default 1)")
    ap.add_argument("--instances", default=None,
                    help=f"comma-separated instances for bench_tabu (default {INSTANCES}; {QUICK_INSTANCES} with --quick)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds per bench_tabu measurement (default 0.2; 0.05 with --quick)")
    ap.add_argument("--from-json", type=Path, action="append", default=None, metavar="PATH",
                    help="plot this bench_tabu.py --json output instead of running it (repeatable: the "
                         "instances of all files, from one machine)")
    args = common.parse(ap, argv, "sweep_tabu.py")
    args.out.mkdir(parents=True, exist_ok=True)
    raw = args.out / "bench_tabu.json"
    if args.from_json:
        benches = [json.loads(p.read_text()) for p in args.from_json]
        if len({b["meta"]["device"] for b in benches}) > 1:
            ap.error("the --from-json files come from different devices")
        bench = {"meta": {**benches[0]["meta"], "sources": [str(p) for p in args.from_json]},
                 "results": [r for b in benches for r in b["results"]]}
        written = []
    else:
        bench_argv = ["--instances", args.instances or (QUICK_INSTANCES if args.quick else INSTANCES),
                      "--budget", str(args.budget or (0.05 if args.quick else 0.2)),
                      "--repeats", str(args.repeats),
                      "--iterations", "20" if args.quick else "200", "--json", str(raw)]
        bench_argv += [f"--device={args.device}"] * (args.device is not None)
        bench_argv += [f"--threads={args.threads}"] * (args.threads is not None)
        bench_argv += ["--progress"] * (not args.no_progress)
        if bench_tabu.main(bench_argv) != 0:
            return 1
        bench = json.loads(raw.read_text())
        written = [raw]
    m = common.meta(args)
    m.update(device=bench["meta"]["device"], threads=bench["meta"]["threads"], repeats=args.repeats,
             bench_tabu=bench["meta"])
    data = {"sweep": "tabu", "reproduces": "beyond the paper", "meta": m, "instances": table(bench)}
    common.report(written + common.write(args.out, "tabu", data, {"fig_tabu": plot(data)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
