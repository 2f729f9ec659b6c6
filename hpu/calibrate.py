"""``python -m hpu.calibrate``: fit this machine's HPU profile and save it for later runs.

The core's microbenchmarks (:func:`hpu.core.calibrate.calibrate`: p, g,
gamma, lambda, delta, launch cost; López-Ortiz et al. 2014, section 6.4)
with the paper's merge as the combine step, and the sort's cost curves
(:func:`hpu.sorting.calibrate.measure_costs`).  Run with ``--help``.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import tempfile
from pathlib import Path

from .core.calibrate import calibrate, format_profile
from .core.profile import Profile
from .core.runtime import Runtime, default_profile_path
from .sorting.calibrate import DEFAULT_MAX_LOG, MERGE_BENCHMARK, QUICK_MAX_LOG, curve_sizes, measure_costs

__all__ = ["main"]


def main(argv: list[str] | None = None, prog: str = "python -m hpu.calibrate") -> int:
    """Command line entry point of ``python -m hpu.calibrate`` (and of ``hpu calibrate``, named ``prog`` in its
    messages); returns the exit status: 0 saved, 2 an existing profile without ``--force`` or an output that cannot
    be written, 130 interrupted.  A usage error (an unknown option or device, a bad ``--max-log`` or ``--threads``)
    raises :class:`SystemExit` with status 2, as argparse does."""
    ap = argparse.ArgumentParser(
        prog=prog,
        description="Measure this machine and fit the HPU model's profile (p, g, gamma, lambda, delta; "
                    "paper section 6.4). The profile is saved as JSON and used by later runs on the same device.",
    )
    ap.add_argument("--device", default=None,
                    help="OpenCL device: 'gpu', 'cpu', 'P:D' indices, a name substring, or 'none' for CPU only "
                         "(default: PYOPENCL_CTX, else a GPU, else a CPU OpenCL device)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where to save the profile (default: the user cache directory, one file per device; "
                         "HPU_PROFILE_DIR overrides the directory)")
    ap.add_argument("--quick", action="store_true", help="smaller measurements (under two minutes on 2 CPU cores)")
    ap.add_argument("--max-log", type=int, default=None, metavar="K",
                    help=f"the sort's cost curves up to 2^K keys (default {DEFAULT_MAX_LOG}, {QUICK_MAX_LOG} with "
                         "--quick; 18 to 31, 16 to 31 with --quick): past the largest size the model extrapolates, "
                         "so calibrate up to the largest arrays you sort (a size holds about ten copies of its int32 "
                         "keys in host memory at once, over 20 where the device is the CPU, PoCL, whose buffers "
                         "are host memory too: 6.2 GB at 2^26)")
    ap.add_argument("--plot", type=Path, default=None, metavar="DIR", help="also write PNG plots of the fits to DIR")
    ap.add_argument("--force", action="store_true", help="overwrite an existing profile")
    ap.add_argument("--threads", type=int, default=None, help="CPU thread-pool size (default: all cores)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    try:
        curve_sizes(args.quick, args.max_log)
    except ValueError as e:
        ap.error(str(e).replace("max_log", "--max-log"))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    try:
        rt = Runtime(args.device, threads=args.threads, profile=_placeholder())
    except ValueError as e:
        ap.error(str(e))
    with rt:
        out = args.out or default_profile_path(rt.device)
        if out.exists() and not args.force:
            print(f"error: {out} exists; pass --force to overwrite it or --out to save elsewhere", file=sys.stderr)
            return 2
        problem = _unwritable(out, directory=False) or (args.plot and _unwritable(args.plot, directory=True))
        if problem:  # found before the measurements, not after them
            print(f"error: {problem}", file=sys.stderr)
            return 2
        print(f"calibrating {rt.device_name} with {rt.threads} CPU threads" + (" (quick)" if args.quick else ""))
        try:
            sort_curves = functools.partial(measure_costs, max_log=args.max_log)
            prof = calibrate(rt, MERGE_BENCHMARK, curves={"sort": sort_curves}, quick=args.quick,
                             progress=not args.no_progress,
                             command="python -m hpu.calibrate " + " ".join(argv if argv is not None else sys.argv[1:]))
        except KeyboardInterrupt:
            print("\ninterrupted: nothing saved", file=sys.stderr)
            return 130
    prof.save(out)
    print(format_profile(prof))
    print(f"saved {out}")
    if args.plot:
        from .plots import calibration_figures

        for path in calibration_figures(prof, args.plot):
            print(f"wrote {path}")
    return 0


def _unwritable(path: Path, *, directory: bool) -> str:
    """Why ``path`` (a file, or with ``directory`` a folder, made if missing) cannot be written; "" if it can."""
    if path.is_dir() != directory and path.exists():
        return f"{path} is {'not ' if directory else ''}a directory"
    folder = path if directory else path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):  # what saving needs: a new file there
            pass
    except OSError as e:
        return f"cannot write in {folder}: {e.strerror or e}"
    return ""


def _placeholder() -> Profile:
    # The runtime's profile is irrelevant while calibrating; avoid the "uncalibrated" warning.
    return Profile(p=1, g=1, gamma=1, name="calibrating")


if __name__ == "__main__":
    sys.exit(main())
