"""Helpers shared by the ``experiments/sweep_*.py`` scripts (not a sweep itself).

Every sweep has the same command line (``--out``, ``--machine``, ``--quick``,
``--no-progress``; ``--profile`` where an HPU profile applies; ``--device`` and
``--threads`` for measured sweeps, and ``--repeats`` and ``--seed`` for those
that time sorts of random inputs), writes one JSON file of results
with the machine facts under ``"meta"``, and one PNG and one SVG per figure,
all into ``--out``.  Figures carry the machine in their title.

Measured sweeps follow the paper's experiment (section 6.4): uniform random
int32 in ``[0, 2n)``, the paper-faithful hybrid mergesort
(``hpu.hybrid_mergesort(..., mode="paper")``), and speed-ups over
``numpy.sort`` on one core measured in the same run (numpy's sort is
single-threaded).  A time is the best of ``--repeats`` rounds, each round
running every configuration once.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib

if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

import hpu  # noqa: E402
from hpu.core.util import host_description  # noqa: E402

#: Text used in figures and JSON for the speed-up baseline.
BASELINE = "numpy.sort on one core, same run"


def parser(doc: str, *, measured: bool, timed: bool = True, with_profile: bool = True, profile_help: str = "",
           many_profiles: bool = False) -> argparse.ArgumentParser:
    """The common command line.

    ``doc`` is the script's module docstring (first line: the description);
    ``measured`` adds ``--device`` and ``--threads``, and with ``timed``
    also ``--repeats`` and ``--seed``; ``with_profile`` adds ``--profile``, whose help ends
    with ``profile_help`` (its default) and which ``many_profiles`` makes
    repeatable (a list).
    """
    first, _, rest = doc.strip().partition("\n")
    ap = argparse.ArgumentParser(description=first, epilog=rest.strip() or None,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory for the JSON and figures")
    if with_profile:
        if not profile_help and measured:
            profile_help = "default: the runtime's own (this device's calibrated profile, else rough defaults)"
        ap.add_argument("--profile", default=None, action="append" if many_profiles else "store",
                        help="HPU profile: a JSON path or a shipped name (hpu1, hpu2, h100)"
                             + ("; repeatable" if many_profiles else "") + (f"; {profile_help}" if profile_help else ""))
    ap.add_argument("--machine", default=platform.node() or "local",
                    help="machine label for titles and JSON (default: the host name)")
    ap.add_argument("--quick", action="store_true", help="small sizes: seconds on a 2-core CPU-only machine")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    if measured:
        ap.add_argument("--device", default=None,
                        help="OpenCL device ('gpu', 'cpu', 'P:D', a name substring; default: hpu's choice)")
        ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
        ap.add_argument("--devices", default=None,
                        help="several devices in one HPU: 'all' or a comma-separated list (instead of --device)")
    if measured and timed:
        ap.add_argument("--repeats", type=int, default=None,
                        help="timed rounds, each running every point once; the best is kept (default 2; 1 with --quick)")
        ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    return ap


def parse(ap: argparse.ArgumentParser, argv: list[str] | None, script: str) -> argparse.Namespace:
    """Parse ``argv`` (default ``sys.argv[1:]``); the command line is kept as ``args.command`` for the JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    args.command = " ".join(["python", f"experiments/{script}", *argv])
    return args


def repeats(args: argparse.Namespace) -> int:
    """``--repeats``, or its default (2; 1 with ``--quick``)."""
    return args.repeats if args.repeats is not None else (1 if args.quick else 2)


def load_profile(spec: str | Path) -> hpu.Profile:
    """A profile from a JSON path or a shipped name (``"hpu1"``, ``"hpu2"``, ``"h100"``)."""
    p = Path(spec)
    if p.suffix == ".json" or p.exists():
        return hpu.Profile.load(p)
    return hpu.reference_profile(str(spec))


def profile_label(profile: hpu.Profile) -> str:
    """Short label of a profile: its name, else its device."""
    return profile.name or profile.device or "profile"


def open_runtime(args: argparse.Namespace) -> hpu.Runtime:
    """The runtime a measured sweep uses (``--device`` or ``--devices``, ``--threads``, ``--profile``); it must have a
    device.

    Raises
    ------
    SystemExit
        In CPU-only mode: the hybrid sweeps need an OpenCL device (PoCL will do).
    """
    devices = getattr(args, "devices", None)
    devices = None if devices is None else devices if devices == "all" else devices.split(",")
    rt = hpu.Runtime(args.device, devices=devices, profile=args.profile, threads=args.threads)
    if not rt.has_device:
        rt.close()
        raise SystemExit("this sweep needs an OpenCL device (on a CPU-only machine install pocl-opencl-icd)")
    return rt


def meta(args: argparse.Namespace, rt: hpu.Runtime | None = None, profile: hpu.Profile | None = None) -> dict:
    """Machine facts, versions, the command and the profile's fitted values."""
    import pyopencl as cl

    profile = profile if profile is not None else (rt.profile if rt is not None else None)
    d: dict[str, Any] = {
        "machine": args.machine,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": args.command,
        "host": host_description(),
        "quick": bool(args.quick),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pyopencl": cl.VERSION_TEXT,
        "hpu": hpu.__version__,
    }
    if rt is not None:
        d.update(device=rt.device_name, threads=rt.threads)
        if hasattr(args, "seed"):
            d.update(repeats=repeats(args), seed=args.seed, baseline=BASELINE)
    if profile is not None:
        d["profile"] = {"name": profile_label(profile), "device": profile.device,
                        **{k: getattr(profile, k) for k in ("p", "g", "gamma", "cpu_op_seconds", "h2d_latency",
                                                            "h2d_seconds_per_byte", "d2h_latency",
                                                            "d2h_seconds_per_byte", "launch_seconds")}}
    return d


def title(text: str, m: dict) -> str:
    """A figure title: ``text`` then the machine, device and thread count from :func:`meta`."""
    where = m["machine"]
    if "device" in m:
        where += f": {m['device']}" + (f", {m['threads']} CPU threads" if m.get("threads") else "")
    else:
        where += " (model only, nothing measured)"
    return f"{text}\n{where}"


def finish(fig, text: str, m: dict):
    """Give ``fig`` the suptitle :func:`title` makes of ``text`` and ``m``, lay it out tightly, and return it."""
    fig.suptitle(title(text, m), fontsize=9)
    fig.tight_layout()
    return fig


def plain_log_ticks(ax, which: str = "y") -> None:
    """Label a log axis with plain numbers (0.1, 0.2, 0.5, 1, 2, 5) instead of powers of ten."""
    fmt = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    axis = ax.yaxis if which == "y" else ax.xaxis
    axis.set_major_formatter(fmt)
    axis.set_minor_locator(matplotlib.ticker.LogLocator(subs=(2.0, 5.0)))
    axis.set_minor_formatter(fmt)


def progress(args: argparse.Namespace, total: int, desc: str, unit: str = "run") -> tqdm:
    """A tqdm progress bar (off with ``--no-progress``)."""
    return tqdm(total=total, desc=desc, unit=unit, disable=args.no_progress, leave=False)


def paper_input(n: int, seed: int) -> np.ndarray:
    """Uniform random int32 in ``[0, 2n)`` (paper 6.4), from ``numpy.random.default_rng((seed, n))``."""
    return np.random.default_rng((seed, n)).integers(0, 2 * n, n, dtype=np.int32)


def sorter(a: np.ndarray, ref: np.ndarray, rt: hpu.Runtime, mode: str = "paper", **kw: Any):
    """A callable running ``hybrid_mergesort`` on ``a`` in ``mode`` (the paper's by default; keywords ``kw``);
    returns the trace.

    Every result is checked against ``ref``; the callable raises
    ``RuntimeError`` if a run sorts wrongly or its device share fell back to
    the CPU.  It returns a :class:`Timed`: the check is not part of the time
    :func:`best_of_rounds` keeps.
    """

    def run() -> Timed:
        t0 = time.perf_counter()
        out, tr = hpu.hybrid_mergesort(a, mode=mode, runtime=rt, return_trace=True, **kw)
        seconds = time.perf_counter() - t0
        if not np.array_equal(out, ref):
            raise RuntimeError(f"hybrid_mergesort sorted wrongly ({kw})")
        if tr.fallback:
            raise RuntimeError(f"the device share fell back to the CPU ({kw}): {tr.fallback}")
        return Timed(seconds, tr)

    return run


class Timed(NamedTuple):
    """A value and the seconds that produced it, for :func:`best_of_rounds` (which then keeps these seconds)."""

    seconds: float
    value: Any


def best_of_rounds(runs: dict, reps: int, bar: tqdm | None = None) -> dict:
    """Time every callable of ``runs`` once per round for ``reps`` rounds; keep each one's fastest run.

    Rounds interleave the configurations, so that a slow spell of a shared
    machine hits all of them alike instead of one.

    Returns
    -------
    dict
        Per key of ``runs``: ``(seconds, value)``, the smallest wall time
        and the return value of that run (for a callable that returns a
        :class:`Timed`, its own seconds and value).
    """
    best = {k: (math.inf, None) for k in runs}
    for _ in range(reps):
        for k, fn in runs.items():
            t = time.perf_counter()
            v = fn()
            dt = time.perf_counter() - t
            if isinstance(v, Timed):
                dt, v = v
            if dt < best[k][0]:
                best[k] = (dt, v)
            if bar is not None:
                bar.update()
    return best


def floats(text: str) -> list[float]:
    """Comma-separated numbers."""
    return [float(v) for v in text.split(",") if v.strip()]


def default_levels(model_level: int, log_n: int, span: int) -> list[int]:
    """The model's level and ``span`` levels either side, within ``[1, log_n - 1]``."""
    return [lv for lv in range(model_level - span, model_level + span + 1) if 1 <= lv <= log_n - 1]


def distinct_alphas(alphas: list[float], level: int) -> list[float]:
    """``alphas`` less those that run the same split at ``level`` (the executor rounds to whole subproblems)."""
    total, seen, out = 2**level, set(), []
    for a in alphas:
        k = min(total, max(0, int(round(a * total))))
        if k not in seen:
            seen.add(k)
            out.append(a)
    return out


def model_choice(n: int, profile: hpu.Profile, itemsize: int = 4, alpha: float | None = None) -> hpu.Split:
    """The advanced split ``hybrid_mergesort`` chooses for ``n`` keys (transfer costs included); with ``alpha``,
    the one it predicts for that CPU share (at the model's transfer level for it)."""
    return hpu.advanced_split(hpu.mergesort_spec().recurrence, n, profile, data_bytes=n * itemsize, alpha=alpha)


def phase_times(tr: hpu.Trace) -> dict:
    """Measured phase durations (s) of an advanced run (paper 5.2 and fig. 8's blue line).

    ``gpu``: from the first copy to the device until the device share is back
    (last device-to-host copy); ``cpu``: from the CPU's first merge until it
    finished its share below the transfer level (levels >= ``transfer_level``),
    the time during which the CPU works next to the device; ``ratio``:
    ``gpu / cpu`` (``None`` when a unit had no work).
    """
    dev = [e for e in tr.events if e.unit in ("device", "bus")]
    cpu = [e for e in tr.events if e.unit.startswith("cpu") and e.level >= tr.transfer_level]
    t_gpu = max(e.end for e in dev) - min(e.start for e in dev) if dev else None
    t_cpu = max(e.end for e in cpu) - min(e.start for e in cpu) if cpu else None
    ratio = t_gpu / t_cpu if t_gpu and t_cpu else None
    return {"gpu": t_gpu, "cpu": t_cpu, "ratio": ratio}


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars and arrays as Python values and non-finite floats as ``None`` (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write(out: Path, stem: str, data: dict, figures: dict[str, Any]) -> list[Path]:
    """Write ``<stem>.json`` and ``<name>.png`` / ``<name>.svg`` per figure into ``out``; close the figures.

    Returns the paths written.
    """
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.json"
    path.write_text(json.dumps(jsonable(data), indent=1, allow_nan=False) + "\n")
    paths = [path]
    for name, fig in figures.items():
        for ext in ("png", "svg"):
            p = out / f"{name}.{ext}"
            fig.savefig(p, dpi=120, bbox_inches="tight", metadata={"Date": None} if ext == "svg" else None)
            paths.append(p)
        plt.close(fig)
    return paths


def report(paths: list[Path]) -> None:
    """Print the paths a sweep wrote."""
    for p in paths:
        print(f"wrote {p}")
