"""The sort model of today against a committed benchmark: predicted and measured time of every strategy it measured.

Reads a ``bench_mergesort.py`` JSON and the profile calibrated on that machine
(a device's profile serves every device of a several-device run: they have
one name), predicts each measured strategy of hybrid_mergesort's fast mode
with the current model (:func:`hpu.sorting.costs.fast_split`; ``exchange``
at the shares the run had, and ``keyrange``, over as many devices as the
run had) and prints the
predictions, the measured medians, their ratio and the strategy ``auto``
would take now.  No device needed: a model that changed after a run is
checked against that run's measurements.

    python experiments/model_vs_measured.py results/h100x2/bench_two_gpu.json results/h100x2/profile.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import hpu
from hpu.sorting.costs import exchange_split, fast_split

STRATEGIES = ("cpu", "gpu", "basic", "advanced", "keyrange", "exchange")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", type=Path, help="bench_mergesort.py --json output")
    ap.add_argument("profile", type=Path, help="the profile calibrated on that machine")
    args = ap.parse_args(argv)
    data = json.loads(args.bench.read_text())
    prof = hpu.Profile.load(args.profile)
    devices = [prof] * max(1, len(data["meta"].get("devices", [None])))
    print(f"# {args.bench} ({data['meta']['date']}), {len(devices)} device(s); profile {args.profile}")
    print(f"{'n':>10} {'strategy':>9} {'measured ms':>12} {'predicted ms':>13} {'pred/meas':>10}  auto now")
    for row in data["rows"]:
        if row["strategy"] not in STRATEGIES:
            continue
        n = row["n"]
        if row["strategy"] == "exchange" and row.get("shares"):  # at the shares that run had
            split = exchange_split(n, devices, shares=row["shares"][1:])
        else:
            split = fast_split(n, prof, strategy=row["strategy"], devices=devices)
        auto = fast_split(n, prof, devices=devices).strategy
        print(f"{n:>10} {row['strategy']:>9} {row['seconds'] * 1e3:12.2f} {split.predicted_time * 1e3:13.2f} "
              f"{split.predicted_time / row['seconds']:10.2f}  {auto}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
