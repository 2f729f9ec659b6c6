"""Time per tabu iteration with the iterations resident on the device, against the host loop and one numpy core.

For each instance it runs the same search (same seed, device alone, the
model's transfer level, and transfer level 0: one work-group, so that a block
is one launch that loops over its iterations) with ``block_iterations`` K = 1
(the host loop: a round trip per iteration) and K = 4 .. 256 (K iterations
per round trip), in
shuffled rounds after a warm-up search per K (kernel builds are not timed),
checks that every K takes the host loop's trajectory, and reports the median
time per iteration, the best K measured, the default K
(``hpu.tabu.DEFAULT_BLOCK_ITERATIONS``) and the ratio to one numpy core
(``strategy="cpu"`` on a one-thread runtime, fewer iterations).

    python experiments/bench_tabu_resident.py --device nvidia --json experiments/results/h100/bench_tabu_resident.json
    python experiments/bench_tabu_resident.py --instances tai12a --iterations 200 --rounds 2   # a quick check
"""

from __future__ import annotations

import argparse
import platform
import statistics
from pathlib import Path

import numpy as np

import hpu
from hpu.tabu import DEFAULT_BLOCK_ITERATIONS, PFSP, PPP, QAP, tabu_search

from bench_common import command_line, shuffled_rounds, utc_now, write_json

DATA = Path(__file__).parent / "data" / "qaplib"
BLOCKS = (1, 4, 16, 32, 64, 256)


def instance(name: str):
    """tai*/nug*: QAPLIB files; ta0xx: Taillard's flow shops (insertion); pppM-N-K: a permuted perceptron."""
    if name.startswith("ta") and name[2:].isdigit():
        return PFSP.taillard(name)
    if name.startswith("ppp"):
        m, n, k = (int(v) for v in name[3:].split("-"))
        return PPP.generate(m, n, 1, hamming=k)
    return QAP.from_qaplib(DATA / f"{name}.dat")


def bench(name: str, args: argparse.Namespace, rt: hpu.Runtime, one: hpu.Runtime) -> dict:
    problem = instance(name)
    kw = dict(iterations=args.iterations, tenure=args.tenure, seed=1, runtime=rt, strategy="gpu")
    default_k = min(DEFAULT_BLOCK_ITERATIONS, args.iterations)
    blocks = sorted({k for k in BLOCKS if k <= args.iterations} | {default_k})  # the default is always timed
    runs = {(k, level): (lambda k=k, level=level: tabu_search(problem, block_iterations=k, transfer_level=level, **kw))
            for k in blocks for level in (None, 0)}
    ref = runs[1, None]()
    for k, run in runs.items():  # warm-up (kernel builds) and the trajectory check
        res = run()
        assert np.array_equal(res.moves, ref.moves), f"{name}: K={k} left the host loop's trajectory"
    keys = {f"{k}/{lv}": (k, lv) for k, lv in runs}  # shuffled_rounds shuffles its keys as strings
    samples = shuffled_rounds({s: runs[key] for s, key in keys.items()}, args.rounds, np.random.default_rng(0),
                              pause=0.05)
    per_it = {keys[s]: statistics.median(v) / args.iterations for s, v in samples.items()}
    model_level = ref.split.transfer_level
    cpu_iters = max(args.iterations // 20, 5)
    cpu = tabu_search(problem, iterations=cpu_iters, tenure=args.tenure, seed=1, runtime=one, strategy="cpu")
    cpu_it = cpu.wall_time / cpu.iterations
    best_k, best_level = min(per_it, key=per_it.get)
    row = dict(instance=name, moves=problem.num_moves, model_transfer_level=model_level,
               ms_per_iteration={f"K={k},level={model_level if lv is None else lv}": v * 1e3
                                 for (k, lv), v in per_it.items()},
               best_k=best_k, best_level=model_level if best_level is None else 0, default_k=default_k,
               numpy_one_core_ms=cpu_it * 1e3, ratio_default_vs_numpy=cpu_it / per_it[default_k, None],
               ratio_best_vs_numpy=cpu_it / per_it[best_k, best_level],
               ratio_host_loop_vs_numpy=cpu_it / per_it[1, None])
    for lv in (None, 0):
        print(f"{name:>12} level {model_level if lv is None else 0:>2} "
              + " ".join(f"{per_it[k, lv] * 1e3:8.4f}" for k in blocks), flush=True)
    print(f"{'':>12} best K={best_k} level {row['best_level']}: x{row['ratio_best_vs_numpy']:.0f} numpy 1 core "
          f"({cpu_it * 1e3:.3f} ms); default K={default_k}: x{row['ratio_default_vs_numpy']:.0f}; host loop "
          f"x{row['ratio_host_loop_vs_numpy']:.0f}", flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", default="tai30a,tai60a,tai100a,ta001,ta031,ppp101-117-2")
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--tenure", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    with hpu.Runtime(args.device) as rt, hpu.Runtime(None, threads=1) as one:
        print(f"device: {rt.device_name}; ms per iteration for K = {[k for k in BLOCKS if k <= args.iterations]}")
        rows = [bench(name, args, rt, one) for name in args.instances.split(",")]
        if args.json:
            write_json(args.json, dict(date=utc_now(), command=command_line("bench_tabu_resident.py", argv),
                                       device=rt.device_name, host=platform.processor() or platform.machine(),
                                       python=platform.python_version(), hpu=hpu.__version__, rows=rows))


if __name__ == "__main__":
    main()
