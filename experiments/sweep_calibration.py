"""Calibration views: kernel time versus work-items with the fitted g (paper fig. 5) and the merge-time ratio 1/gamma versus size (fig. 6).

Beyond the paper: the thread pool's merge scaling with the fitted p, and the
host-device copy times with the fitted lambda + delta w (paper 3.2 defines
that cost but never measures it).

Without --profile, calibrates this machine now as python -m hpu.calibrate does
(hpu.core.calibrate.calibrate with the paper's merge and the sort's cost
curves; with --quick its quick sizes) and also saves the profile as
profile.json in --out, for the other sweeps' --profile.  With --profile, plots that profile's stored
measurements (it must be a calibrated one, e.g. h100).  The paper's fitted
values (HPU1: g = 4096, 1/gamma = 160; HPU2: g = 1200, 1/gamma = 65) are
printed on the figures for comparison; its raw measurements are not public.

Writes calibration.json, fig5_g, fig6_gamma, calib_p and
calib_transfers (.png and .svg; named apart from the calibration_*.png
that python -m hpu.calibrate --plot writes).
"""

from __future__ import annotations

import sys

import hpu
import sweep_common as common
from hpu import plots
from hpu.core.calibrate import calibrate, format_profile
from hpu.sorting.calibrate import MERGE_BENCHMARK, measure_costs

PAPER = {name: {"g": hpu.reference_profile(name).g, "inv_gamma": 1 / hpu.reference_profile(name).gamma}
         for name in ("hpu1", "hpu2")}

#: measurement key -> (figure name, plot function, title prefix, note on the paper's values)
#: ("combine" is the merge of paper fig. 6; profiles calibrated before 2026-11-24 store it as "merge")
VIEWS = {
    "g": ("fig5_g", plots.plot_g_fit, "Paper fig. 5",
          "paper (2^24 floats): g = {hpu1[g]:.0f} (HPU1), {hpu2[g]:.0f} (HPU2)"),
    "combine": ("fig6_gamma", plots.plot_gamma, "Paper fig. 6",
              "paper: 1/gamma = {hpu1[inv_gamma]:.0f} (HPU1), {hpu2[inv_gamma]:.0f} (HPU2)"),
    "p": ("calib_p", plots.plot_p_fit, "Beyond the paper", "paper: p = 4 cores, not fitted"),
    "transfer": ("calib_transfers", plots.plot_transfers, "Beyond the paper",
                 "paper: copy cost lambda + delta w defined (3.2), not measured"),
}


def figures(profile: hpu.Profile, m: dict) -> dict:
    """The calibration figures of ``profile.measurements`` that exist, titled with the machine, paper values noted."""
    out = {}
    for key, (name, fn, prefix, note) in VIEWS.items():
        meas = profile.measurements.get(key) or (profile.measurements.get("merge") if key == "combine" else None)
        if not meas or (key == "combine" and "ratio" not in meas):
            continue
        fig = fn(profile)
        ax = fig.axes[0]
        ax.set_title(common.title(f"{prefix}: {ax.get_title().splitlines()[0]}", m), fontsize=9)
        ax.text(0.02, 0.02, note.format(**PAPER), transform=ax.transAxes, fontsize=7, color="0.3")
        out[name] = fig
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; return the exit status."""
    ap = common.parser(__doc__, measured=True, timed=False,
                       profile_help="plot its stored measurements instead of calibrating now")
    args = common.parse(ap, argv, "sweep_calibration.py")
    if args.profile:
        profile = common.load_profile(args.profile)
        if not profile.measurements:
            ap.error(f"profile {args.profile} has no stored measurements (calibrate with python -m hpu.calibrate)")
        m = common.meta(args, profile=profile)
        m.update(device=profile.device, threads=profile.provenance.get("threads"), source=str(args.profile))
        written = []
    else:
        # The runtime's profile plays no part in calibrating; a placeholder avoids the "uncalibrated" warning.
        with hpu.Runtime(args.device, threads=args.threads, profile=hpu.Profile(p=1, g=1, gamma=1)) as rt:
            profile = calibrate(rt, MERGE_BENCHMARK, curves={"sort": measure_costs}, quick=args.quick,
                                progress=not args.no_progress, command=args.command)
            m = common.meta(args, rt, profile)
        m["source"] = "calibrated by this sweep"
        written = [profile.save(args.out / "profile.json")]
    print(format_profile(profile))
    data = {
        "sweep": "calibration",
        "reproduces": "paper figs. 5 and 6",
        "meta": m,
        "fitted": {k: getattr(profile, k) for k in ("p", "g", "gamma", "cpu_op_seconds", "h2d_latency",
                                                    "h2d_seconds_per_byte", "d2h_latency", "d2h_seconds_per_byte",
                                                    "launch_seconds")},
        "paper": PAPER,
        "measurements": profile.measurements,
    }
    common.report(written + common.write(args.out, "calibration", data, figures(profile, m)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
