"""Search quality of the tabu attributes and tie-breaks: Taillard's ta001 from random starts.

For each tenure, tabu attribute (``"job-position"``, the default, and
``"move"``) and tie-break (``"random"``, the default, and ``"index"``) it runs
``--starts`` searches of ``--iterations`` iterations from the random starts of
seeds ``0 .. starts - 1`` (CPU strategy, one range: the trajectory does not
depend on the unit) and reports how many end within ``--within`` of the optimum
(1278 for ta001; Taillard, "Benchmarks for basic scheduling problems", EJOR 64,
1993), the best values and the first iteration at which each search got there.

    python experiments/bench_tabu_attributes.py                       # ta001, tenures 7, 10, 20
    python experiments/bench_tabu_attributes.py --tenures 7 --starts 3 --iterations 2000
    python experiments/bench_tabu_attributes.py --json experiments/results/cpu-only/bench_tabu_attributes.json
"""

from __future__ import annotations

import argparse
import itertools
import platform
from pathlib import Path

import numpy as np

import hpu
from hpu.tabu import PFSP, tabu_search

from bench_common import command_line, utc_now, write_json

OPTIMA = {"ta001": 1278, "ta002": 1359, "ta011": 1582, "ta031": 2724}  # Taillard 1993, table 1 (proven optima)


def run(instance: str, tenure: int, attribute: str, tie_break: str, starts: int, iterations: int,
        within: float, runtime: hpu.Runtime) -> dict:
    """One row: ``starts`` searches of one configuration."""
    pb = PFSP.taillard(instance, tabu_attribute=attribute)
    optimum = OPTIMA[instance]
    best, first = [], []
    for seed in range(starts):
        r = tabu_search(pb, iterations=iterations, tenure=tenure, seed=seed, strategy="cpu", cpu_chunks=1,
                        tie_break=tie_break, runtime=runtime)
        best.append(int(r.best_value))
        reached = np.flatnonzero(r.history == r.best_value)
        first.append(int(reached[0]) + 1 if reached.size else 0)
    hits = sum(b <= optimum * (1 + within) for b in best)
    return dict(instance=instance, tenure=tenure, tabu_attribute=attribute, tie_break=tie_break,
                within=hits, starts=starts, optimum_hits=sum(b == optimum for b in best),
                best=best, first_iteration_of_best=first)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instance", default="ta001", choices=sorted(OPTIMA))
    ap.add_argument("--tenures", default="7,10,20", help="comma-separated tabu tenures")
    ap.add_argument("--starts", type=int, default=10, help="random starts (seeds 0 .. starts - 1)")
    ap.add_argument("--iterations", type=int, default=10_000)
    ap.add_argument("--within", type=float, default=0.01, help="relative gap to the optimum counted as a hit")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    with hpu.Runtime(device=None) as rt:
        print(f"{args.instance}, {args.starts} starts x {args.iterations} iterations; "
              f"hits: best <= {1 + args.within:g} x {OPTIMA[args.instance]}")
        print(f"{'tenure':>6} {'attribute':>13} {'ties':>7} {'hits':>6} {'optima':>6}  best values")
        for tenure, attribute, tie in itertools.product(
                [int(t) for t in args.tenures.split(",")], PFSP.TABU_ATTRIBUTES, ("random", "index")):
            row = run(args.instance, tenure, attribute, tie, args.starts, args.iterations, args.within, rt)
            rows.append(row)
            print(f"{tenure:>6} {attribute:>13} {tie:>7} {row['within']:>3}/{args.starts:<2} "
                  f"{row['optimum_hits']:>6}  {row['best']}", flush=True)
    if args.json:
        write_json(args.json, dict(date=utc_now(), command=command_line("bench_tabu_attributes.py", argv),
                                   host=platform.processor() or platform.machine(),
                                   python=platform.python_version(), hpu=hpu.__version__, rows=rows))


if __name__ == "__main__":
    main()
