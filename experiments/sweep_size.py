"""Measured and predicted speed-up versus n with the device/CPU time ratio (paper fig. 8), and the best measured alpha and level versus the model's (fig. 10).

For each n = 2^--min-log .. 2^--max-log (uniform random int32 in [0, 2n),
paper 6.4), times the paper-faithful advanced hybrid mergesort at the model's
choice and over a grid of (transfer level, alpha) around it (levels: the
model's +- --span; alphas: --alphas plus alpha*), and keeps the best, as the
paper does for its figs. 8 and 10.  Speed-ups are over numpy.sort on one
core, timed in the same run.  The model's speed-up is numpy.sort's measured
time over the model's predicted time (calibrated profiles give seconds).
The device/CPU ratio is the device share's time (copies included) over the
CPU share's time below the transfer level, both measured from the trace.
For reference, hpu's CPU-only, device-only and basic-split runs are timed
too (device-only up to 2^--gpu-max-log: it is slow, the top levels starve
the device).  Fig. 10 also shows the optimum the model gives with the
paper's HPU1 profile.

Writes size.json, fig8_size.{png,svg} and fig10_best.{png,svg}.
"""

from __future__ import annotations

import sys

import numpy as np

import hpu
import sweep_common as common

ALPHAS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7)
QUICK_ALPHAS = (0.1, 0.3, 0.6)
REFERENCE = ("cpu", "gpu", "basic")


def grid_configs(split: hpu.Split, log_n: int, alphas: list[float], span: int) -> list[tuple[int, float]]:
    """The (transfer level, alpha) grid at one n: levels ``ceil(y*) +- span``, ``alphas`` plus alpha*, distinct splits."""
    alphas = sorted({*alphas, round(split.alpha, 4)})
    return [(lv, a) for lv in common.default_levels(split.transfer_level, log_n, span)
            for a in common.distinct_alphas(alphas, lv)]


def measure_n(rt: hpu.Runtime, log_n: int, split: hpu.Split, configs: list[tuple[int, float]], args, bar) -> dict:
    """All runs at one n, in interleaved rounds: numpy.sort, the model's choice, the grid and the reference strategies."""
    n = 1 << log_n
    hpu1 = hpu.advanced_split(hpu.mergesort_spec().recurrence, n, hpu.reference_profile("hpu1"))
    a = common.paper_input(n, args.seed)
    ref = np.sort(a)
    runs = {"numpy": lambda: np.sort(a),
            "model": common.sorter(a, ref, rt, strategy="advanced", alpha=split.alpha,
                                   transfer_level=split.transfer_level)}
    runs.update({c: common.sorter(a, ref, rt, strategy="advanced", alpha=c[1], transfer_level=c[0]) for c in configs})
    runs.update({s: common.sorter(a, ref, rt, strategy=s) for s in REFERENCE
                 if s != "gpu" or log_n <= args.gpu_max_log})
    best = common.best_of_rounds(runs, common.repeats(args), bar)
    t_model, tr = best["model"]
    grid = []
    for lv, alpha in configs:
        t, tr_g = best[lv, alpha]
        grid.append({"level": lv, "alpha": alpha, "alpha_executed": tr_g.alpha, "seconds": t,
                     "phases": common.phase_times(tr_g)})
    top = min(grid, key=lambda r: r["seconds"]) if grid else None
    if top is None or t_model < top["seconds"]:  # the model's choice is a grid point too
        top = {"level": split.transfer_level, "alpha": split.alpha, "alpha_executed": tr.alpha, "seconds": t_model,
               "phases": common.phase_times(tr)}
    return {
        "log_n": log_n,
        "n": n,
        "numpy_seconds": best["numpy"][0],
        "model": {"alpha": split.alpha, "y": split.y, "transfer_level": split.transfer_level, "case": split.case,
                  "gpu_share": split.gpu_work_fraction, "predicted_seconds": split.predicted_time,
                  "predicted_speedup_ops": split.predicted_speedup},
        "hpu1_model": {"alpha": hpu1.alpha, "y": hpu1.y, "transfer_level": hpu1.transfer_level},
        "at_model": {"seconds": t_model, "alpha_executed": tr.alpha, "phases": common.phase_times(tr)},
        "best": top,
        "grid": grid,
        "reference_seconds": {s: best[s][0] if s in best else None for s in REFERENCE},
    }


def plot_speedup(data: dict):
    """Paper fig. 8: speed-ups versus n (left) and the device/CPU time ratio (right)."""
    rows = data["rows"]
    x = [r["log_n"] for r in rows]
    t_np = np.array([r["numpy_seconds"] for r in rows])
    fig, (ax, ax_r) = common.plt.subplots(1, 2, figsize=(13, 4.6))
    ax.plot(x, t_np / [r["best"]["seconds"] for r in rows], "o-", color="tab:red", lw=2,
            label="measured, best (level, alpha) of the grid")
    ax.plot(x, t_np / [r["at_model"]["seconds"] for r in rows], "x--", color="tab:red",
            label="measured, at the model's (level, alpha)")
    if data["predicted_in_seconds"]:
        ax.plot(x, t_np / [r["model"]["predicted_seconds"] for r in rows], "s-", color="tab:green",
                label="model prediction")
    for s, style, label in (("cpu", ("v-.", "0.4"), "hpu CPU only (all threads)"),
                            ("gpu", ("^:", "tab:purple"), "hpu device only (paper's scheme)"),
                            ("basic", ("d:", "tab:brown"), "hpu basic split (paper 5.1)")):
        y = [t_np[i] / r["reference_seconds"][s] if r["reference_seconds"][s] else np.nan for i, r in enumerate(rows)]
        ax.plot(x, y, style[0], color=style[1], ms=4, lw=1, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    common.plain_log_ticks(ax)
    ax.set_xlabel("log2 n (keys)")
    ax.set_ylabel(f"speed-up over {common.BASELINE}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
    for a in (ax, ax_r):
        a.xaxis.set_major_locator(common.matplotlib.ticker.MaxNLocator(integer=True))
    for key, style, label in (("best", "o-", "at the best (level, alpha)"), ("at_model", "x--", "at the model's choice")):
        ax_r.plot(x, [r[key]["phases"]["ratio"] or np.nan for r in rows], style, color="tab:blue", label=label)
    ax_r.axhline(1.0, color="k", lw=1)
    ax_r.set_yscale("log")
    common.plain_log_ticks(ax_r)
    ax_r.set_xlabel("log2 n (keys)")
    ax_r.set_ylabel("device share time / CPU share time (measured)")
    ax_r.set_title("Paper fig. 8's blue line: the model makes the two equal (ratio 1)", fontsize=8)
    ax_r.legend(fontsize=7)
    ax_r.grid(alpha=0.3, which="both")
    return common.finish(fig, f"Paper fig. 8: hybrid mergesort speed-up versus n, best of {data['meta']['repeats']} "
                         "rounds", data["meta"])


def plot_best(data: dict):
    """Paper fig. 10: best measured alpha (left) and transfer level (right) versus n, with the model's."""
    rows = data["rows"]
    x = np.array([r["log_n"] for r in rows])
    fig, (ax_a, ax_y) = common.plt.subplots(1, 2, figsize=(12, 4.4))
    ax_a.plot(x, [r["best"]["alpha_executed"] for r in rows], "o", color="tab:red", ms=7, label="best measured")
    ax_a.plot(x, [r["model"]["alpha"] for r in rows], "s", color="tab:green", mfc="none", ms=8,
              label=f"model ({data['meta']['profile']['name']})")
    ax_a.plot(x, [r["hpu1_model"]["alpha"] for r in rows], "x", color="0.5", label="model, paper's HPU1 profile")
    ax_a.set_xlabel("log2 n (keys)")
    ax_a.set_ylabel("alpha (CPU fraction at the transfer level)")
    ax_a.set_ylim(-0.02, 1.02)
    ax_y.plot(x, [r["best"]["level"] for r in rows], "o", color="tab:red", ms=7, label="best measured level")
    ax_y.plot(x, [r["model"]["y"] for r in rows], "s", color="tab:green", mfc="none", ms=8,
              label="model y (the executor uses ceil(y))")
    ax_y.plot(x, [r["hpu1_model"]["y"] for r in rows], "x", color="0.5", label="model y, paper's HPU1 profile")
    ax_y.set_xlabel("log2 n (keys)")
    ax_y.set_ylabel("transfer level y (0 = root)")
    for ax in (ax_a, ax_y):
        ax.xaxis.set_major_locator(common.matplotlib.ticker.MaxNLocator(integer=True))
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    return common.finish(fig, "Paper fig. 10: the (alpha, level) with the smallest measured time versus the model's",
                         data["meta"])


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; return the exit status."""
    ap = common.parser(__doc__, measured=True)
    ap.add_argument("--min-log", type=int, default=None, help="smallest n = 2^MIN_LOG (default 16; 10 with --quick)")
    ap.add_argument("--max-log", type=int, default=None, help="largest n = 2^MAX_LOG (default 24; 13 with --quick)")
    ap.add_argument("--span", type=int, default=None, help="grid levels either side of the model's (default 2; 1 with --quick)")
    ap.add_argument("--alphas", type=common.floats, default=None,
                    help=f"comma-separated grid alphas (default {','.join(map(str, ALPHAS))}; fewer with --quick); "
                         "the model's alpha* is added")
    ap.add_argument("--gpu-max-log", type=int, default=24, help="largest log2 n for the device-only reference (default 24)")
    args = common.parse(ap, argv, "sweep_size.py")
    lo, hi = args.min_log or (10 if args.quick else 16), args.max_log or (13 if args.quick else 24)
    span = args.span if args.span is not None else (1 if args.quick else 2)
    alphas = list(args.alphas or (QUICK_ALPHAS if args.quick else ALPHAS))
    with common.open_runtime(args) as rt:
        splits = {lg: common.model_choice(1 << lg, rt.profile) for lg in range(lo, hi + 1)}
        configs = {lg: grid_configs(s, lg, alphas, span) for lg, s in splits.items()}
        total = common.repeats(args) * sum(2 + len(REFERENCE) - (lg > args.gpu_max_log) + len(c)
                                           for lg, c in configs.items())
        rows = []
        with common.progress(args, total, f"figs. 8 and 10, n = 2^{lo}..2^{hi}") as bar:
            a = common.paper_input(1 << lo, args.seed)
            common.sorter(a, np.sort(a), rt, strategy="advanced")()  # warm-up: kernel build
            for lg in range(lo, hi + 1):
                rows.append(measure_n(rt, lg, splits[lg], configs[lg], args, bar))
        data = {
            "sweep": "size",
            "reproduces": "paper figs. 8 and 10",
            "meta": common.meta(args, rt),
            "predicted_in_seconds": rt.profile.cpu_op_seconds != 1.0,
            "alphas": alphas,
            "span": span,
            "rows": rows,
        }
    for r in rows:
        b, m = r["best"], r["model"]
        print(f"n = 2^{r['log_n']:>2}: numpy {r['numpy_seconds'] * 1e3:8.2f} ms  best {b['seconds'] * 1e3:8.2f} ms "
              f"(alpha {b['alpha_executed']:.3f}, level {b['level']:>2})  model's choice {r['at_model']['seconds'] * 1e3:8.2f} ms "
              f"(alpha {m['alpha']:.3f}, level {m['transfer_level']:>2}), predicted {m['predicted_seconds'] * 1e3:8.2f} ms")
    common.report(common.write(args.out, "size", data, {"fig8_size": plot_speedup(data), "fig10_best": plot_best(data)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
