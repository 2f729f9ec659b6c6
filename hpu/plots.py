"""Figures: calibration fits (paper figs. 5 and 6), Gantt charts of traces and the model's predictions on them.

Uses matplotlib's object API with the non-interactive Agg backend when no
backend is set; every function returns the figure (or the paths written).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
    matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .core.model import Split  # noqa: E402
from .core.profile import Profile  # noqa: E402
from .core.trace import Trace  # noqa: E402

__all__ = ["calibration_figures", "plot_g_fit", "plot_gamma", "plot_p_fit", "plot_transfers", "gantt", "mark_split",
           "tabu_gantt"]


def _axes(ax):
    return (ax.figure, ax) if ax is not None else plt.subplots(figsize=(6, 4))


def _finish(fig, ax, profile: Profile, title: str, xlabel: str, ylabel: str, legend_size: float | None = None):
    """Label the axes, add the legend and a title naming the profile's device and host; return ``fig``."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=legend_size)
    ax.set_title(f"{title}\n{profile.device or profile.name} / {profile.host or ''}".strip(" /"), fontsize=9)
    return fig


def plot_g_fit(profile: Profile, ax=None):
    """Kernel time vs work-items with the fitted knee ``g`` (paper fig. 5). Returns the figure."""
    m = profile.measurements["g"]
    fig, ax = _axes(ax)
    w, t = np.array(m["work_items"]), np.array(m["seconds"])
    ax.loglog(w, t * 1e3, "o", label="measured")
    x = np.geomspace(w.min(), w.max(), 200)
    ax.loglog(x, np.maximum(m["t_min"] * (x / m["g"]) ** -m["slope"], m["t_min"]) * 1e3, "-", label="two-segment fit")
    ax.axvline(m["g"], color="k", ls=":", label=f"g = {m['g']:.0f}")
    return _finish(fig, ax, profile, f"Elementwise sum of 2 x {m['elements']} floats, contiguous segments",
                   "work-items", "time (ms)")


def plot_gamma(profile: Profile, ax=None):
    """CPU / one-work-item combine time ratio vs size, with the fitted gamma (paper fig. 6). Returns the figure."""
    m = profile.measurements.get("combine") or profile.measurements["merge"]  # "merge" in profiles before 2026-11-24
    fig, ax = _axes(ax)
    ax.semilogx(m["sizes"], 1 / np.array(m["ratio"]), "o-", label="device time / CPU time")
    ax.axhline(1 / profile.gamma, color="k", ls=":", label=f"1/gamma = {1 / profile.gamma:.1f}")
    return _finish(fig, ax, profile, "One work-item combine vs one CPU thread", "combined elements",
                   "time ratio (one work-item / one core)")


def plot_p_fit(profile: Profile, ax=None):
    """Thread-pool speed-up of the CPU combine step with the fitted plateau ``p``. Returns the figure."""
    m = profile.measurements["p"]
    fig, ax = _axes(ax)
    k = np.array(m["threads"])
    ax.plot(k, m["speedup"], "o", label="measured")
    x = np.linspace(1, k.max(), 100)
    ax.plot(x, np.minimum(m["efficiency"] * x, m["p"]), "-", label=f"fit, p = {m['p']:.2f}")
    return _finish(fig, ax, profile, "CPU combine scaling", "threads", "speed-up over one thread")


def plot_transfers(profile: Profile, ax=None):
    """Copy time vs bytes, each direction and host memory kind, with the affine fits. Returns the figure."""
    m = profile.measurements["transfer"]
    fig, ax = _axes(ax)
    b = np.array(m["bytes"])
    for key in ("pageable_h2d", "pageable_d2h", "pinned_h2d", "pinned_d2h"):
        f = m[key]
        line, = ax.loglog(b, np.array(f["seconds"]) * 1e3, "o", ms=3)
        ax.loglog(b, (f["latency"] + f["seconds_per_byte"] * b) * 1e3, "-", color=line.get_color(),
                  label=f"{key.replace('_', ' ')}: {f['bandwidth'] / 1e9:.1f} GB/s, {f['latency'] * 1e6:.0f} us")
    return _finish(fig, ax, profile, "Host-device copies: t = lambda + delta w", "bytes", "time (ms)", 7)


def calibration_figures(profile: Profile, out_dir: str | Path) -> list[Path]:
    """Write PNG figures of every fit present in ``profile.measurements`` to ``out_dir``; return the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, fn in (("g", plot_g_fit), ("combine", plot_gamma), ("p", plot_p_fit), ("transfer", plot_transfers)):
        m = profile.measurements.get(key) or (profile.measurements.get("merge") if key == "combine" else None)
        if not m or (key == "combine" and "ratio" not in m):
            continue
        fig = fn(profile)
        path = out_dir / f"calibration_{key}.png"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def gantt(trace: Trace, ax=None, title: str = ""):
    """Gantt chart of a run: one row per CPU thread, the device and the bus; colour = recursion level.

    Copies have no recursion level (level -1): red host to device, orange back, grey within the host (staging).

    Returns the figure.
    """
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(9, 3.5))
    trace.resolve()  # a fast-mode trace reads its device and bus times only now
    units = sorted({e.unit for e in trace.events}, key=lambda u: (u != "bus", u != "device", u))
    cmap = plt.get_cmap("viridis")
    depth = max(trace.depth, 1)
    for row, u in enumerate(units):
        for e in (e for e in trace.events if e.unit == u):
            if e.kind in ("h2d", "d2h"):
                color, hatch = ("tab:red" if e.kind == "h2d" else "tab:orange"), None
            elif e.level < 0:  # a host copy: not on the level scale (it would be drawn as the root)
                color, hatch = "tab:grey", None
            else:
                color, hatch = cmap(e.level / depth), ("//" if e.kind in ("layout", "fallback") else None)
            ax.barh(row, max(e.duration, 1e-6) * 1e3, left=e.start * 1e3, color=color, hatch=hatch,
                    edgecolor="none")
    ax.set_yticks(range(len(units)), units, fontsize=7)
    ax.set_xlabel("time since start (ms)")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, depth))
    fig.colorbar(sm, ax=ax, label="recursion level (0 = root)")
    ax.set_title(title or f"{trace.strategy}: n = {trace.n}, alpha = {trace.alpha:.3f}, "
                 f"transfer level = {trace.transfer_level}, wall = {trace.wall * 1e3:.1f} ms "
                 "(red: host to device, orange: back, grey: host copies)", fontsize=9)
    return fig


#: Colours of a tabu trace's steps (:attr:`hpu.tabu.TabuResult.trace`).
TABU_KIND_COLORS = {"evaluate": "tab:blue", "select": "tab:purple", "block": "tab:cyan", "apply": "tab:green",
                    "combine": "tab:olive", "h2d": "tab:red", "d2h": "tab:orange"}


def tabu_gantt(trace: Trace, ax=None, title: str = ""):
    """Gantt chart of tabu-search iterations (``tabu_search(..., trace=True)``): one row per thread, the device
    and the bus; colour = the step (:data:`TABU_KIND_COLORS`).  Returns the figure."""
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(9, 2.5))
    trace.resolve()
    units = sorted({e.unit for e in trace.events}, key=lambda u: (u == "bus", u == "device", u != "cpu:MainThread", u))
    for row, u in enumerate(units):
        for e in (e for e in trace.events if e.unit == u):
            ax.barh(row, max(e.duration, 1e-7) * 1e3, left=e.start * 1e3, color=TABU_KIND_COLORS.get(e.kind, "grey"),
                    edgecolor="none")
    ax.set_yticks(range(len(units)), units, fontsize=7)
    ax.set_xlabel("time since the first iteration began (ms)")
    kinds = [k for k in TABU_KIND_COLORS if any(e.kind == k for e in trace.events)]
    ax.legend(handles=[matplotlib.patches.Patch(color=TABU_KIND_COLORS[k], label=k) for k in kinds], fontsize=7,
              loc="upper right", ncol=max(len(kinds), 1))
    ax.set_title(title or f"{trace.strategy}: {trace.n} moves, alpha = {trace.alpha:.3f}, transfer level = "
                 f"{trace.transfer_level}, wall = {trace.wall * 1e3:.2f} ms", fontsize=9)
    return fig


def mark_split(ax, split: Split) -> None:
    """Mark a split's predicted times on a Gantt chart drawn by :func:`gantt` (time axis in ms).

    A dashed line where the model expects the device share back on the host
    (``predicted_gpu_time + predicted_transfer_time``; for ``"advanced"``
    the time ``T_g`` that paper section 5.2.1 makes equal to the CPU share's
    ``T_c``), drawn when the device has work, and a solid line at the
    predicted finish (``predicted_time``).  The lines are labelled for the
    legend.  Only meaningful for a calibrated profile, whose predicted times
    are seconds (the paper's profiles count operations).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The Gantt chart's axes.
    split : Split
        The split that ran (``Trace.split``).
    """
    if split.predicted_gpu_time > 0:
        t = (split.predicted_gpu_time + split.predicted_transfer_time) * 1e3
        ax.axvline(t, color="k", ls="--", lw=1, label=f"model: device share back ({t:.3g} ms)")
    t = split.predicted_time * 1e3
    ax.axvline(t, color="k", ls="-", lw=1.3, label=f"model: finish ({t:.3g} ms)")
