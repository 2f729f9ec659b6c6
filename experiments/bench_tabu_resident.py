"""Time per tabu iteration with the iterations resident on the device, against the host loop and one numpy core.

For each instance it runs the same search (same seed, device alone) with
``block_iterations`` K = 1 (the host loop: a round trip per iteration) and
K = 4 .. 1024 (K iterations per round trip), at the model's transfer level
and (unless ``--no-level0``) at transfer level 0 (one work-group, so that a
block is one launch that loops over its iterations), and the model's own
choice of K and level
(``tabu_search`` without ``block_iterations``: ``TabuCosts.plan_resident``),
in shuffled rounds after a warm-up search each (kernel builds and the
calibration are not timed); it checks that every run takes the host loop's
trajectory, and reports the median time per iteration, the measured best K
and level beside the model's, and the ratios to one numpy core
(``strategy="cpu"`` on a one-thread runtime, fewer iterations).  Two times
per iteration: the whole call over the iterations (its setup, the move
values made and the buffers filled, included), and the search's own
(``TabuResult.time_per_iteration``: setup excluded, as numpy's is measured).

    python experiments/bench_tabu_resident.py --device gpu --json experiments/results/h100/bench_tabu_resident.json
    python experiments/bench_tabu_resident.py --instances tai12a --iterations 200 --rounds 2   # a quick check
    python experiments/bench_tabu_resident.py --device gpu --instances ta111 --iterations 256 --no-level0
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
BLOCKS = (1, 4, 16, 64, 256, 1024)


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
    levels = (None, 0) if args.level0 else (None,)
    runs = {(k, level): (lambda k=k, level=level: tabu_search(problem, block_iterations=k, transfer_level=level, **kw))
            for k in blocks for level in levels}
    runs[0, None] = lambda: tabu_search(problem, **kw)  # K = 0 stands for the model's K (and level)
    loop: dict = {}  # (K, level) -> the searches' own seconds per iteration (setup excluded)

    def kept(key, run):
        def call():
            res = run()
            loop.setdefault(key, []).append(res.time_per_iteration)
            return res
        return call

    runs = {key: kept(key, run) for key, run in runs.items()}
    ref = runs[1, None]()
    used = {}  # (K, level asked) -> level used (the model's: the host loop's at K = 1, the resident blocks' above)
    for key, run in runs.items():  # warm-up (kernel builds) and the trajectory check
        res = run()
        assert np.array_equal(res.moves, ref.moves), f"{name}: K={key[0]} left the host loop's trajectory"
        used[key] = res.split.transfer_level
    loop.clear()  # the warm-up's
    keys = {f"{k}/{lv}": (k, lv) for k, lv in runs}  # shuffled_rounds shuffles its keys as strings
    samples = shuffled_rounds({s: runs[key] for s, key in keys.items()}, args.rounds, np.random.default_rng(0),
                              pause=0.05)
    per_it = {keys[s]: statistics.median(v) / args.iterations for s, v in samples.items()}
    model = per_it.pop((0, None))
    loop_it = {key: statistics.median(v) for key, v in loop.items()}
    model_loop = loop_it.pop((0, None))
    best_loop = min(loop_it, key=loop_it.get)
    chosen = runs[0, None]()
    cpu_iters = max(args.iterations // 20, 5)
    cpu = tabu_search(problem, iterations=cpu_iters, tenure=args.tenure, seed=1, runtime=one, strategy="cpu")
    cpu_it = cpu.wall_time / cpu.iterations
    best_k, best_level = min(per_it, key=per_it.get)
    row = dict(instance=name, moves=problem.num_moves, host_loop_model_level=ref.split.transfer_level,
               ms_per_iteration={f"K={k},level={used[k, lv]}{'' if lv == 0 else ' (model)'}": v * 1e3
                                 for (k, lv), v in per_it.items()},
               best_k=best_k, best_level=used[best_k, best_level], default_k=default_k,
               model_k=chosen.block_iterations, model_level=chosen.split.transfer_level,
               model_ms_per_iteration=model * 1e3, model_predicted_ms_per_iteration=chosen.split.predicted_time * 1e3,
               ratio_model_vs_numpy=cpu_it / model, model_vs_best=model / per_it[best_k, best_level],
               numpy_one_core_ms=cpu_it * 1e3, ratio_default_vs_numpy=cpu_it / per_it[default_k, None],
               ratio_best_vs_numpy=cpu_it / per_it[best_k, best_level],
               ratio_host_loop_vs_numpy=cpu_it / per_it[1, None],
               loop_ms_per_iteration={f"K={k},level={used[k, lv]}{'' if lv == 0 else ' (model)'}": v * 1e3
                                      for (k, lv), v in loop_it.items()},
               model_loop_ms_per_iteration=model_loop * 1e3, ratio_model_loop_vs_numpy=cpu_it / model_loop,
               best_loop_k=best_loop[0], best_loop_level=used[best_loop],
               ratio_best_loop_vs_numpy=cpu_it / loop_it[best_loop])
    for lv in levels:
        print(f"{name:>12} level {'model' if lv is None else 0:>5} "
              + " ".join(f"{per_it[k, lv] * 1e3:8.4f}" for k in blocks)
              + ("  (levels " + ",".join(str(used[k, lv]) for k in blocks) + ")" if lv is None else ""), flush=True)
    print(f"{'':>12} best K={best_k} level {row['best_level']}: x{row['ratio_best_vs_numpy']:.0f} numpy 1 core "
          f"({cpu_it * 1e3:.3f} ms); default K={default_k}: x{row['ratio_default_vs_numpy']:.0f}; host loop "
          f"x{row['ratio_host_loop_vs_numpy']:.0f}", flush=True)
    print(f"{'':>12} model: K={row['model_k']} level {row['model_level']}, {model * 1e3:.4f} ms (predicted "
          f"{row['model_predicted_ms_per_iteration']:.4f}), x{row['model_vs_best']:.2f} the best measured, "
          f"x{row['ratio_model_vs_numpy']:.0f} numpy 1 core", flush=True)
    print(f"{'':>12} the searches' own time (setup excluded, as numpy's): model {model_loop * 1e3:.4f} ms, "
          f"x{row['ratio_model_loop_vs_numpy']:.0f} numpy 1 core; best K={best_loop[0]} level {used[best_loop]} "
          f"{loop_it[best_loop] * 1e3:.4f} ms, x{row['ratio_best_loop_vs_numpy']:.0f}", flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", default="tai30a,tai60a,tai100a,ta001,ta031,ppp101-117-2")
    ap.add_argument("--iterations", type=int, default=2048)
    ap.add_argument("--tenure", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-level0", dest="level0", action="store_false",
                    help="time the model's level only (one work-group is hopeless on large neighbourhoods)")
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
