"""Beyond the paper: Gantt charts of single hybrid mergesort runs from their traces, with the model's predicted times.

Sorts n = 2^--log-n uniform random int32 in [0, 2n) (paper 6.4) once per
--strategies entry (default: advanced and basic, at the model's choice for the
runtime's profile; the paper's mode, except the fast mode's splits across
units, "keyrange" and "exchange"; ``--devices all`` for several devices) and
draws each run's trace: one row per CPU thread, the device's command queue
and the bus; colour = recursion level (0 = root),
red/orange = copies to/from the device, hatched = layout changes (paper
6.3).  Lines mark where the model expected the device share back and the
run to finish (calibrated profiles: seconds).  The run shown is the fastest
of --repeats rounds, after one warm-up run.

Writes gantt.json (the traces, events in seconds since the start) and
gantt.{png,svg}.
"""

from __future__ import annotations

import sys

import numpy as np

import hpu
import sweep_common as common
from hpu import plots

STRATEGIES = ("advanced", "basic", "gpu", "cpu", "keyrange", "exchange")
FAST_ONLY = ("keyrange", "exchange")


def plot(data: dict, traces: list[hpu.Trace]):
    """One Gantt panel per run, on a common time axis."""
    runs = data["runs"]
    units = max(len({e.unit for e in tr.events}) for tr in traces)
    fig, axes = common.plt.subplots(len(runs), 1, figsize=(11, 1.2 + (0.28 * units + 0.9) * len(runs)),
                                    squeeze=False, sharex=True)
    for ax, run, tr in zip(axes[:, 0], runs, traces):
        plots.gantt(tr, ax=ax)
        if tr.split is not None and data["predicted_in_seconds"]:
            plots.mark_split(ax, tr.split)
            ax.legend(fontsize=7, loc="upper right")
        ax.set_title(f"{run['strategy']}: alpha = {tr.alpha:.3f}, transfer level {tr.transfer_level} of {tr.depth}, "
                     f"wall {run['seconds'] * 1e3:.1f} ms (numpy.sort: {data['numpy_seconds'] * 1e3:.1f} ms); "
                     "red: copy to the device, orange: back", fontsize=8)
        ax.set_xlabel("")
    axes[-1, 0].set_xlabel("time since the start of the run (ms)")
    return common.finish(fig, f"Gantt chart of hybrid mergesort runs, n = 2^{data['log_n']}", data["meta"])


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; return the exit status."""
    ap = common.parser(__doc__, measured=True)
    ap.add_argument("--log-n", type=int, default=None, help="n = 2^LOG_N keys (default 22; 14 with --quick)")
    ap.add_argument("--strategies", default="advanced,basic",
                    help=f"comma-separated, from {', '.join(STRATEGIES)} (default advanced,basic)")
    args = common.parse(ap, argv, "sweep_gantt.py")
    strategies = [s for s in args.strategies.split(",") if s]
    unknown = set(strategies) - set(STRATEGIES)
    if unknown or not strategies:
        ap.error(f"unknown strategies {', '.join(sorted(unknown))}; choose from {', '.join(STRATEGIES)}")
    log_n = args.log_n or (14 if args.quick else 22)
    n = 1 << log_n
    reps = common.repeats(args)
    with common.open_runtime(args) as rt:
        a = common.paper_input(n, args.seed)
        ref = np.sort(a)
        runs = {"numpy": lambda: np.sort(a)}
        runs.update({s: common.sorter(a, ref, rt, mode="fast" if s in FAST_ONLY else "paper", strategy=s)
                     for s in strategies})
        for s in strategies:
            runs[s]()  # warm-up: kernel build, page faults
        with common.progress(args, reps * len(runs), f"Gantt, n = 2^{log_n}") as bar:
            best = common.best_of_rounds(runs, reps, bar)
        t_np = best["numpy"][0]
        out, traces = [], []
        for s in strategies:
            t, tr = best[s]
            sp = tr.split
            out.append({
                "strategy": s, "seconds": t, "trace": tr.to_dict(),
                "busy_seconds": {u: tr.busy(u) for u in ("cpu", "device", "bus")},
                "predicted": None if sp is None else {
                    "device_back_seconds": sp.predicted_gpu_time + sp.predicted_transfer_time,
                    "finish_seconds": sp.predicted_time},
            })
            traces.append(tr)
        data = {"sweep": "gantt", "reproduces": "beyond the paper", "meta": common.meta(args, rt), "log_n": log_n,
                "n": n, "numpy_seconds": t_np, "predicted_in_seconds": rt.profile.cpu_op_seconds != 1.0, "runs": out}
    for tr in traces:
        print(tr.summary())
    common.report(common.write(args.out, "gantt", data, {"gantt": plot(data, traces)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
