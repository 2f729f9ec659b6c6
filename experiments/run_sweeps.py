"""Run every sweep for one machine, in sequence, into one results directory.

    python experiments/run_sweeps.py --machine NAME --out experiments/results/NAME [--quick]

Order: calibration (paper figs. 5, 6; without --profile it calibrates this
machine and saves OUT/profile.json, which the later sweeps then use), model
(figs. 3, 4: the paper's HPU1 and HPU2 and this machine's profile), alpha
(fig. 7), size (figs. 8, 10), gantt (traces), tabu (speed-ups per QAPLIB
instance, when experiments/bench_tabu.py is present) and tabu_gantt (where a
tabu iteration's time goes).  A failing sweep is
reported and the others still run; the exit status is then 1.  Writes
OUT/run_sweeps.json with each sweep's command, status and run time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import traceback
from pathlib import Path

import sweep_alpha
import sweep_calibration
import sweep_gantt
import sweep_model
import sweep_size
import sweep_tabu
import sweep_tabu_gantt

#: name -> module with main(argv)
SWEEPS = {
    "calibration": sweep_calibration,
    "model": sweep_model,
    "alpha": sweep_alpha,
    "size": sweep_size,
    "gantt": sweep_gantt,
    "tabu": sweep_tabu,
    "tabu_gantt": sweep_tabu_gantt,
}


def plan(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """The (sweep, argv) pairs to run, in order."""
    common = ["--out", str(args.out), "--machine", args.machine]
    common += ["--quick"] * args.quick + ["--no-progress"] * args.no_progress
    device = (["--device", args.device] if args.device is not None else [])
    device += ["--threads", str(args.threads)] if args.threads is not None else []
    own = args.out / "profile.json"
    profile = args.profile or (str(own) if own.exists() or "calibration" in args.only else None)
    with_profile = ["--profile", profile] if profile else []
    timed = common + device + with_profile + ["--seed", str(args.seed)]
    timed += ["--repeats", str(args.repeats)] if args.repeats is not None else []
    runs = {
        "calibration": common + device + (["--profile", args.profile] if args.profile else []),
        "model": common + ["--profile", "hpu1", "--profile", "hpu2"] + with_profile,
        "alpha": timed,
        "size": timed,
        "gantt": timed,
        "tabu": common + device,
        "tabu_gantt": common + device,
    }
    return [(name, runs[name]) for name in SWEEPS if name in args.only]


def main(argv: list[str] | None = None) -> int:
    """Run the sweeps; return 0 if all succeeded, else 1."""
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0], epilog="\n".join(__doc__.strip().splitlines()[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--machine", required=True, help="machine label for titles and JSON, e.g. h100 or cpu-only")
    ap.add_argument("--out", type=Path, required=True, metavar="DIR", help="results directory")
    ap.add_argument("--quick", action="store_true", help="every sweep at its small --quick sizes")
    ap.add_argument("--profile", default=None,
                    help="use this profile (JSON path or shipped name) instead of calibrating; the calibration "
                         "sweep then plots its stored measurements")
    ap.add_argument("--device", default=None, help="OpenCL device (default: hpu's choice)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs of the alpha, size and gantt sweeps")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed runs per point for the alpha, size and gantt sweeps, the best kept (default: theirs)")
    ap.add_argument("--only", type=lambda s: [v for v in s.split(",") if v], default=list(SWEEPS),
                    help=f"comma-separated subset of {','.join(SWEEPS)} (default: all)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    unknown = set(args.only) - set(SWEEPS)
    if unknown:
        ap.error(f"unknown sweeps {', '.join(sorted(unknown))}; choose from {', '.join(SWEEPS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"machine": args.machine,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "command": " ".join(["python experiments/run_sweeps.py", *(sys.argv[1:] if argv is None else argv)]),
               "sweeps": []}
    t_all = time.perf_counter()
    for name, sweep_argv in plan(args):
        print(f"== {name}: python experiments/{SWEEPS[name].__name__}.py {' '.join(sweep_argv)}", flush=True)
        t = time.perf_counter()
        try:
            status = "ok" if SWEEPS[name].main(sweep_argv) == 0 else "failed"
        except (Exception, SystemExit) as e:
            traceback.print_exc()
            status = f"failed: {type(e).__name__}: {e}"
        dt = time.perf_counter() - t
        print(f"== {name}: {status} in {dt:.1f} s", flush=True)
        summary["sweeps"].append({"name": name, "argv": sweep_argv, "status": status, "seconds": dt})
    summary["seconds"] = time.perf_counter() - t_all
    (args.out / "run_sweeps.json").write_text(json.dumps(summary, indent=1) + "\n")
    failed = [s["name"] for s in summary["sweeps"] if s["status"] != "ok"]
    print(f"all sweeps in {summary['seconds']:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
