"""How often tabu search solves planted permuted-perceptron instances from random starts.

For each instance seed, runs ``--runs`` seeded tabu searches (CPU, one thread: the trajectory is the same on
every unit) and counts those that reach fitness 0, with the iteration at which each did.  The test suite's
instance is the 73-73 one of seed 2013 (Hamming 2, tenure 700).

    python experiments/ppp_search.py [--instances 2013,0,1,2,3] [--runs 10] [--iterations 7000] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import hpu
from hpu.tabu import PPP, tabu_search


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="73-73", help="m-n (default 73-73)")
    ap.add_argument("--instances", default="2013,0,1,2,3", help="comma-separated instance seeds")
    ap.add_argument("--runs", type=int, default=10, help="seeded searches per instance")
    ap.add_argument("--iterations", type=int, default=7000)
    ap.add_argument("--tenure", type=int, default=None,
                    help="tabu tenure (default 700, or the moves - 1 where there are fewer)")
    ap.add_argument("--hamming", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    m, n = (int(v) for v in args.size.split("-"))
    rows = []
    with hpu.Runtime("none", threads=1) as rt:
        for inst in (int(s) for s in args.instances.split(",")):
            pb = PPP.generate(m, n, inst, hamming=args.hamming)
            tenure = args.tenure if args.tenure is not None else min(700, pb.num_moves - 1)
            hits = []
            for seed in range(args.runs):
                res = tabu_search(pb, iterations=args.iterations, tenure=tenure, seed=seed, strategy="cpu",
                                  cpu_chunks=1, runtime=rt, target=0)
                hits.append(res.iterations if res.stop == "target" else None)
            solved = sum(h is not None for h in hits)
            rows.append({"instance_seed": inst, "solved": solved, "runs": args.runs, "first_zero_iteration": hits})
            print(f"instance {m}-{n} seed {inst}: {solved}/{args.runs} runs reach fitness 0 "
                  f"(iterations: {', '.join('-' if h is None else str(h) for h in hits)})", flush=True)
    if args.json:
        meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": "python experiments/ppp_search.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                "hpu": hpu.__version__}
        args.json.write_text(json.dumps({"meta": meta, "settings": vars(args) | {"json": str(args.json)},
                                         "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
