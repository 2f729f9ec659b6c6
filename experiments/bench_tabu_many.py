"""Many independent tabu searches at once (``hpu.tabu.tabu_search_many``) against the same searches one after another.

For each instance, ``--searches`` searches (seeds 0, 1, ...) of
``--iterations`` iterations run

- one after another on the device (``tabu_search(strategy="gpu")``, iterations
  resident on it at the model's K and level: the best single-search path), once,
  after a first search (timed apart) that builds the kernels and calibrates;
- with the model's division (``strategy="auto"``; its prediction beside the
  measurement) and with forced divisions (``device_searches`` = 0: the CPU's
  threads alone, 1/4, 1/2, 3/4, 7/8, 15/16 of the searches, all: the batch
  alone, and the model's), to compare the model's choice with the best forced one;
- and ``hybrid_ea`` (the paper's configuration, ``--ea-generations`` generations,
  ``--iterations`` per tabu search) with its searches on threads, a lease each
  (``strategy="gpu"``), against each ILS step's searches batched (``"many"``).

Every run's results are checked against the one-after-another run's (same
trajectories).  The first batch of each kind is a warm-up (kernel build,
the model's calibration), reported separately as the first call; the rest
are medians of ``--rounds`` shuffled rounds.

    python experiments/bench_tabu_many.py --device gpu --json experiments/results/h100/bench_tabu_many.json
    python experiments/bench_tabu_many.py --instances tai12a --searches 8 --iterations 100 --rounds 1  # quick
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import hpu
from hpu.tabu import calibrate_many, hybrid_ea, plan_many, tabu_search, tabu_search_many

from bench_common import command_line, shuffled_rounds, utc_now, write_json
from bench_tabu_resident import instance


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _check(name: str, label: str, results: list, reference: list) -> None:
    for r, ref in zip(results, reference):
        if not (np.array_equal(r.moves, ref.moves) and r.best_value == ref.best_value):
            raise AssertionError(f"{name}: {label} left the trajectory of the search run alone")


def bench(name: str, args: argparse.Namespace, rt: hpu.Runtime) -> dict:
    problem = instance(name)
    S, kw = args.searches, dict(iterations=args.iterations, tenure=args.tenure, runtime=rt)
    seeds = list(range(S))
    first_one_s, _ = _timed(lambda: tabu_search(problem, seed=0, strategy="gpu", **kw))  # builds, calibrates
    one_by_one_s, reference = _timed(lambda: [tabu_search(problem, seed=s, strategy="gpu", **kw) for s in seeds])
    print(f"{name:>10} {S} searches x {args.iterations} it one after another on the device: {one_by_one_s:.3f} s "
          f"(after a first search of {first_one_s:.3f} s: kernel builds, the model's calibration)", flush=True)
    first_auto_s, auto = _timed(lambda: tabu_search_many(problem, seeds, **kw))  # builds and calibrates
    _check(name, "auto (first call)", auto, reference)
    costs = calibrate_many(problem, rt, tenure=args.tenure, block_iterations=auto[0].block_iterations)
    split = plan_many(S, args.iterations, costs)
    print(f"{'':>10} first call (auto, calibration included) {first_auto_s:.3f} s; the model: "
          f"{split.device_searches} on the device, predicted {split.predicted_time:.3f} s", flush=True)
    forced = sorted({0, S, split.device_searches} | {S * k // 16 for k in (4, 8, 12, 14, 15)})
    runs = {"auto": lambda: tabu_search_many(problem, seeds, **kw)}
    runs |= {f"d={d}": (lambda d=d: tabu_search_many(problem, seeds, device_searches=d, **kw)) for d in forced}
    for label, run in runs.items():  # warm-up and the trajectory check
        _check(name, label, run(), reference)
    samples = shuffled_rounds(runs, args.rounds, np.random.default_rng(0), pause=0.05)
    med = {label: statistics.median(v) for label, v in samples.items()}
    gpu, cpu = med[f"d={S}"], med["d=0"]
    best_forced = min((f"d={d}" for d in forced), key=med.get)
    row = dict(instance=name, moves=problem.num_moves, searches=S, iterations=args.iterations,
               one_by_one_device_s=one_by_one_s, first_search_s=first_one_s, first_call_auto_s=first_auto_s,
               seconds=med,
               batch_vs_one_by_one=gpu / one_by_one_s,
               model=dict(device_searches=split.device_searches, predicted_s=split.predicted_time,
                          predicted_device_s=split.predicted_device_time, predicted_cpu_s=split.predicted_cpu_time),
               best_forced=best_forced, auto_vs_best_forced=med["auto"] / med[best_forced],
               auto_vs_faster_unit=med["auto"] / min(gpu, cpu),
               costs=dict(batch_sizes=costs.batch_sizes, batch_ms_per_iteration=[t * 1e3 for t in
                                                                                  costs.batch_iteration_seconds],
                          cpu_ms_per_iteration=costs.cpu_iteration_seconds * 1e3, threads=costs.threads,
                          cpu_parallelism=costs.cpu_parallelism, shared_cores=costs.shared_cores))
    print(f"{'':>10} batch (d={S}) {gpu:.3f} s = {row['batch_vs_one_by_one']:.4f} of one after another; CPU threads "
          f"alone (d=0) {cpu:.3f} s; auto {med['auto']:.3f} s (x{row['auto_vs_faster_unit']:.2f} the faster unit, "
          f"x{row['auto_vs_best_forced']:.2f} the best forced, {best_forced})", flush=True)
    print(f"{'':>10} forced: " + ", ".join(f"d={d} {med[f'd={d}']:.3f}" for d in forced), flush=True)
    if args.ea_generations:
        row["hybrid_ea"] = _bench_ea(problem, args, rt)
    return row


def _bench_ea(problem, args: argparse.Namespace, rt: hpu.Runtime) -> dict:
    """hybrid_ea with its searches on threads with a lease each (strategy "gpu") against tabu_search_many ("many")."""
    kw = dict(generations=args.ea_generations, ls_iterations=args.iterations, seed=1, runtime=rt)
    seconds = {}
    for strategy in ("gpu", "many"):
        hybrid_ea(problem, strategy=strategy, **{**kw, "generations": 1})  # warm-up
        seconds[strategy], res = _timed(lambda strategy=strategy: hybrid_ea(problem, strategy=strategy, **kw))
        seconds[f"{strategy} best"] = res.best_value
    assert seconds["gpu best"] == seconds["many best"], "hybrid_ea: 'many' left the result of 'gpu'"
    print(f"{'':>10} hybrid_ea, {args.ea_generations} generations of 10 children x 3 searches of {args.iterations} "
          f"it: searches on threads {seconds['gpu']:.3f} s, batched {seconds['many']:.3f} s "
          f"(x{seconds['gpu'] / seconds['many']:.1f})", flush=True)
    return seconds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", default="tai30a")
    ap.add_argument("--searches", type=int, default=64)
    ap.add_argument("--iterations", type=int, default=500)
    ap.add_argument("--tenure", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ea-generations", type=int, default=2,
                    help="hybrid_ea generations timed with strategy 'gpu' and 'many' (0: none)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    with hpu.Runtime(args.device) as rt:
        print(f"device: {rt.device_name}; CPU threads {rt.threads}")
        rows = [bench(name, args, rt) for name in args.instances.split(",")]
        if args.json:
            write_json(args.json, dict(date=utc_now(), command=command_line("bench_tabu_many.py", argv),
                                       device=rt.device_name, host=platform.processor() or platform.machine(),
                                       python=platform.python_version(), hpu=hpu.__version__, rows=rows))


if __name__ == "__main__":
    main()
