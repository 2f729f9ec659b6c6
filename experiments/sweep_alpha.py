"""Measured speed-up versus alpha for several transfer levels at a fixed n (paper fig. 7), with the model's optimum marked.

Sorts n = 2^--log-n uniform random int32 in [0, 2n) (paper 6.4) with the
paper-faithful advanced hybrid mergesort, forcing each (transfer level,
alpha) of a grid; the speed-up is over numpy.sort on one core, timed in the
same run.  Default levels: the model's transfer level and two either side.
The executed alpha is the requested one rounded to whole subproblems at the
transfer level (2^level of them); alphas that round alike run once.

Marked: the model's optimum (alpha*, level ceil(y*)) for the runtime's profile
(transfer costs included, as hybrid_mergesort chooses), and the model's
predicted speed-up at each alpha when y follows y(alpha) (calibrated profiles
only: they give seconds).  Beyond the paper, a second panel shows the
measured ratio of the device share's time to the CPU share's time (the model
makes them equal, paper 5.2.1).

Writes alpha.json and fig7_alpha.{png,svg}.
"""

from __future__ import annotations

import sys

import numpy as np

import hpu
import sweep_common as common

ALPHAS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
QUICK_ALPHAS = (0.1, 0.3, 0.5, 0.7, 0.9)


def model_curve(n: int, profile: hpu.Profile, numpy_seconds: float, points: int = 120) -> dict | None:
    """The model's predicted time and speed-up over numpy.sort versus alpha (y = y(alpha)); None if uncalibrated."""
    if profile.cpu_op_seconds == 1.0:  # profile in operations (the paper's): no seconds to compare
        return None
    grid = np.linspace(0.01, 0.99, points)
    rec = hpu.mergesort_spec().recurrence
    t = [hpu.advanced_split(rec, n, profile, data_bytes=4.0 * n, alpha=float(a)).predicted_time for a in grid]
    return {"alpha": grid.tolist(), "predicted_seconds": t, "speedup": [numpy_seconds / v for v in t]}


def plot(data: dict):
    """Paper fig. 7 (left) and the measured device/CPU time ratio (right) versus alpha."""
    fig, (ax, ax_r) = common.plt.subplots(1, 2, figsize=(13, 4.6))
    mo = data["model"]
    cmap = common.plt.get_cmap("viridis")
    levels = data["levels"]
    for k, lv in enumerate(levels):
        rows = sorted((r for r in data["rows"] if r["level"] == lv), key=lambda r: r["alpha_executed"])
        x = [r["alpha_executed"] for r in rows]
        is_model = lv == mo["transfer_level"]
        style = dict(color=cmap(k / max(len(levels) - 1, 1)), lw=2.6 if is_model else 1.3, marker="o", ms=4)
        label = f"level {lv}" + (" (model's level)" if is_model else "")
        ax.plot(x, [r["speedup"] for r in rows], label=label, **style)
        ax_r.plot(x, [r["phases"]["ratio"] if r["phases"]["ratio"] else np.nan for r in rows], label=label, **style)
    if data["model_curve"]:
        c = data["model_curve"]
        ax.plot(c["alpha"], c["speedup"], "--", color="tab:green", label="model prediction (y = y(alpha))")
    ax.axvline(mo["alpha"], color="tab:green", ls=":", lw=1.5,
               label=f"model optimum alpha* = {mo['alpha']:.3f}, y* = {mo['y']:.2f}")
    ax.axhline(data["numpy_seconds"] / data["cpu_seconds"], color="0.5", ls="-.", lw=1,
               label="hpu CPU only (all threads)")
    ax.set_xlabel("alpha (CPU fraction of the subproblems at the transfer level, as executed)")
    ax.set_ylabel(f"speed-up over {common.BASELINE}")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax_r.axhline(1.0, color="k", lw=1)
    ax_r.axvline(mo["alpha"], color="tab:green", ls=":", lw=1.5)
    ax_r.set_yscale("log")
    common.plain_log_ticks(ax_r)
    ax_r.set_xlabel("alpha (as executed)")
    ax_r.set_ylabel("device share time / CPU share time (measured)")
    ax_r.set_title("Beyond the paper: the model makes the two equal (ratio 1)", fontsize=8)
    ax_r.grid(alpha=0.3, which="both")
    return common.finish(fig, f"Paper fig. 7: advanced hybrid mergesort, n = 2^{data['log_n']}, "
                         f"best of {data['meta']['repeats']} rounds", data["meta"])


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; return the exit status."""
    ap = common.parser(__doc__, measured=True)
    ap.add_argument("--log-n", type=int, default=None, help="n = 2^LOG_N keys (default 24, as in the paper; 14 with --quick)")
    ap.add_argument("--levels", type=lambda s: [int(v) for v in s.split(",")], default=None,
                    help="comma-separated transfer levels (default: the model's level +- --span)")
    ap.add_argument("--span", type=int, default=None, help="levels either side of the model's (default 2; 1 with --quick)")
    ap.add_argument("--alphas", type=common.floats, default=None,
                    help=f"comma-separated alphas (default {','.join(map(str, ALPHAS))}; fewer with --quick); "
                         "the model's alpha* is added")
    args = common.parse(ap, argv, "sweep_alpha.py")
    log_n = args.log_n or (14 if args.quick else 24)
    n = 1 << log_n
    reps = common.repeats(args)
    with common.open_runtime(args) as rt:
        split = common.model_choice(n, rt.profile)
        span = args.span if args.span is not None else (1 if args.quick else 2)
        levels = args.levels or common.default_levels(split.transfer_level, log_n, span)
        alphas = sorted({*(args.alphas or (QUICK_ALPHAS if args.quick else ALPHAS)), round(split.alpha, 4)})
        a = common.paper_input(n, args.seed)
        configs = [(lv, alpha) for lv in levels for alpha in common.distinct_alphas(alphas, lv)]
        ref = np.sort(a)
        common.sorter(a, ref, rt, strategy="advanced")()  # warm-up: kernel build, page faults
        runs = {"numpy": lambda: np.sort(a), "cpu": common.sorter(a, ref, rt, strategy="cpu")}
        runs.update({c: common.sorter(a, ref, rt, strategy="advanced", alpha=c[1], transfer_level=c[0]) for c in configs})
        with common.progress(args, reps * len(runs), f"fig. 7, n = 2^{log_n}") as bar:
            best = common.best_of_rounds(runs, reps, bar)
        t_np, t_cpu = best["numpy"][0], best["cpu"][0]
        rows = []
        for lv, alpha in configs:
            t, tr = best[lv, alpha]
            rows.append({"level": lv, "alpha": alpha, "alpha_executed": tr.alpha, "seconds": t, "speedup": t_np / t,
                         "predicted_seconds": common.model_choice(n, rt.profile, alpha=alpha).predicted_time,
                         "phases": common.phase_times(tr)})
        data = {
            "sweep": "alpha",
            "reproduces": "paper fig. 7",
            "meta": common.meta(args, rt),
            "log_n": log_n,
            "n": n,
            "numpy_seconds": t_np,
            "cpu_seconds": t_cpu,
            "model": {"alpha": split.alpha, "y": split.y, "transfer_level": split.transfer_level, "case": split.case,
                      "gpu_share": split.gpu_work_fraction, "predicted_seconds": split.predicted_time},
            "model_curve": model_curve(n, rt.profile, t_np),
            "levels": levels,
            "alphas": alphas,
            "rows": rows,
        }
    top = min(rows, key=lambda r: r["seconds"])
    print(f"n = 2^{log_n}: numpy.sort {t_np * 1e3:.1f} ms; model alpha* = {split.alpha:.3f} level {split.transfer_level}; "
          f"best measured alpha = {top['alpha_executed']:.3f} level {top['level']}: {top['seconds'] * 1e3:.1f} ms "
          f"(speed-up {top['speedup']:.2f})")
    common.report(common.write(args.out, "alpha", data, {"fig7_alpha": plot(data)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
