"""Model only: y(alpha) and the device's work share versus alpha (paper fig. 3), and the work division at the optimum (fig. 4).

For mergesort (a = b = 2, f(n) = n) at n = 2^--log-n, for each --profile
(default: the paper's HPU1 and HPU2), sweeps the CPU fraction alpha of the
advanced split (paper 5.2.1) and records the level y(alpha) the device
reaches while the CPU share keeps p cores busy, and the device's share of the
total work W_g(alpha) / W.  The paper's worked example (5.2.2): HPU1 at
n = 2^24 has its optimum at alpha* ~ 0.16, y ~ 10, share ~ 52%.

Beyond the paper: for calibrated profiles (with transfer costs) a second,
dashed curve charges the copies of the device share (lambda + delta w, each
way) to the device's time budget, as hybrid_mergesort does.

No OpenCL is needed.  Writes model.json, fig3_model_alpha.{png,svg} and
fig4_work_division.{png,svg}.
"""

from __future__ import annotations

import sys

import numpy as np

import hpu
import sweep_common as common

RECURRENCE = hpu.Recurrence(a=2, b=2, f=1)  # mergesort (paper 5.2.2)


def sweep_profile(profile: hpu.Profile, n: int, points: int, transfers: bool) -> dict:
    """y(alpha), the device's work share and the case of paper 5.2.1 over an alpha grid, and the optimum.

    Parameters
    ----------
    profile : hpu.Profile
    n : int
        Keys to sort.
    points : int
        Grid points in alpha (the optimum is added).
    transfers : bool
        Charge the device share's copies (4-byte keys) to its time budget.

    Returns
    -------
    dict
        ``alpha``, ``y`` (levels), ``gpu_share`` (fraction of the total work),
        ``case`` (lists of equal length), and ``optimum`` (``alpha``, ``y``,
        ``transfer_level``, ``gpu_share``, ``case``, ``predicted_speedup``
        over one core in the model's operations).
    """
    data_bytes = 4.0 * n if transfers else None
    best = hpu.advanced_split(RECURRENCE, n, profile, data_bytes=data_bytes)
    grid = np.unique(np.concatenate([np.linspace(0.002, 0.998, points), [best.alpha]]))
    splits = [hpu.advanced_split(RECURRENCE, n, profile, data_bytes=data_bytes, alpha=float(a)) for a in grid]
    return {
        "alpha": grid.tolist(),
        "y": [s.y for s in splits],
        "gpu_share": [s.gpu_work_fraction for s in splits],
        "case": [s.case for s in splits],
        "optimum": {"alpha": best.alpha, "y": best.y, "transfer_level": best.transfer_level,
                    "gpu_share": best.gpu_work_fraction, "case": best.case,
                    "predicted_speedup": best.predicted_speedup},
    }


def has_transfer_costs(profile: hpu.Profile) -> bool:
    """True for calibrated profiles: transfer costs and CPU seconds per operation are known."""
    return profile.h2d_seconds_per_byte > 0 and profile.cpu_op_seconds != 1.0


def plot_alpha(data: dict):
    """Paper fig. 3: (left) the level y the device reaches and (right) its work share (%) versus alpha."""
    fig, (ax_y, ax_w) = common.plt.subplots(1, 2, figsize=(13, 4.2))
    for k, prof in enumerate(data["profiles"]):
        color = f"C{k}"
        for key, ls, suffix in (("paper", "-", ""), ("with_transfers", "--", ", with transfers")):
            c = prof[key]
            if c is None:
                continue
            o = c["optimum"]
            label = (f"{prof['name']}{suffix}\n  alpha* = {o['alpha']:.3f}, y = {o['y']:.2f}, "
                     f"device {100 * o['gpu_share']:.1f}%")
            ax_y.plot(c["alpha"], c["y"], ls, color=color, label=label)
            ax_w.plot(c["alpha"], 100 * np.array(c["gpu_share"]), ls, color=color, label=label)
            ax_y.plot(o["alpha"], o["y"], "*", color=color, ms=11)
            ax_w.plot(o["alpha"], 100 * o["gpu_share"], "*", color=color, ms=11)
    ax_y.set_xlabel("alpha (CPU fraction of the subproblems)")
    ax_y.set_ylabel("level y reached by the device (0 = root)")
    ax_y.invert_yaxis()
    ax_w.set_xlabel("alpha (CPU fraction of the subproblems)")
    ax_w.set_ylabel("device work / total work (%)")
    ax_y.grid(alpha=0.3)
    ax_w.grid(alpha=0.3)
    ax_w.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return common.finish(fig, f"Paper fig. 3, advanced split for mergesort, n = 2^{data['log_n']} "
                         "(stars: optimum alpha*)", data["meta"])


def plot_division(data: dict):
    """Paper fig. 4: the recursion tree's work split at alpha*, level by level, one panel per profile."""
    profs = data["profiles"]
    fig, axes = common.plt.subplots(1, len(profs), figsize=(3.6 * len(profs), 5.4), squeeze=False)
    depth = data["log_n"]
    for ax, prof in zip(axes[0], profs):
        o = prof["paper"]["optimum"]
        a, y = o["alpha"], o["y"]
        ax.fill_betweenx([0, depth + 1], 0, 100, color="tab:blue", alpha=0.85, label="CPU")
        ax.fill_betweenx([y, depth + 1], 100 * a, 100, color="tab:cyan", label="device")
        lc = np.log2(prof["p"] / a)
        ax.axhline(lc, color="k", ls=":", lw=1, label=f"CPU share has p tasks: log2(p/alpha) = {lc:.2f}")
        ax.axhline(y, color="tab:red", lw=1.2, label=f"transfer level y = {y:.2f}")
        ax.set_ylim(depth + 1, 0)
        ax.set_xlim(0, 100)
        ax.set_xlabel("share of the level's work (%)")
        ax.set_ylabel("recursion level (0 = root, leaves at the bottom)")
        ax.set_title(f"{prof['name']}\nalpha* = {a:.3f}, device work {100 * o['gpu_share']:.1f}%", fontsize=8)
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    return common.finish(fig, f"Paper fig. 4, advanced work division for mergesort at alpha*, n = 2^{depth}",
                         data["meta"])


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; return the exit status."""
    ap = common.parser(__doc__, measured=False, many_profiles=True, profile_help="default: hpu1 and hpu2 (the paper's)")
    ap.add_argument("--log-n", type=int, default=24, help="n = 2^LOG_N keys (default 24, as in the paper)")
    ap.add_argument("--points", type=int, default=None, help="alpha grid points (default 400; 60 with --quick)")
    args = common.parse(ap, argv, "sweep_model.py")
    names = args.profile or ["hpu1", "hpu2"]
    points = args.points or (60 if args.quick else 400)
    n = 1 << args.log_n
    profiles = []
    with common.progress(args, len(names), "model", unit="profile") as bar:
        for name in names:
            prof = common.load_profile(name)
            profiles.append({
                "name": common.profile_label(prof),
                "source": str(name),
                "p": prof.p, "g": prof.g, "gamma": prof.gamma,
                "paper": sweep_profile(prof, n, points, transfers=False),
                "with_transfers": sweep_profile(prof, n, points, transfers=True) if has_transfer_costs(prof) else None,
            })
            bar.update()
    data = {"sweep": "model", "reproduces": "paper figs. 3 and 4", "meta": common.meta(args), "log_n": args.log_n,
            "n": n, "recurrence": repr(RECURRENCE), "profiles": profiles}
    for prof in profiles:
        o = prof["paper"]["optimum"]
        print(f"{prof['name']}: alpha* = {o['alpha']:.4f}  y = {o['y']:.3f}  device work = {100 * o['gpu_share']:.1f}%"
              f"  case {o['case']}")
    common.report(common.write(args.out, "model", data,
                               {"fig3_model_alpha": plot_alpha(data), "fig4_work_division": plot_division(data)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
