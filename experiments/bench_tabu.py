"""Benchmark the tabu-search neighbourhood evaluation: CPU (1 and p threads), device, hybrid, and the model's split.

For each instance (QAP tai30a ... tai100a, 2-swap; HW/SW partitioning with
1,000 to 4,000 tasks, 2-flip) it measures the time per tabu iteration and the
moves evaluated per second of

* ``cpu-1``: vectorised numpy on one thread;
* ``cpu-p``: the same on p threads (the runtime's pool, one range per thread);
* ``gpu``: the fused evaluate-and-reduce kernel alone (transfer level chosen by the model);
* ``hybrid``: the split the model chooses (CPU share alpha, CPU ranges, transfer level);

and the speed-up over one CPU thread, as Luong et al. (IEEE TC 2013,
table 2) and Hou et al. (Front. Comput. Sci. 2019, table 2) report them.  It
then sweeps forced splits (alpha in 0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5 times
every sensible transfer level) and checks that the model's choice is within
10% of the best forced one and that the hybrid is at most 10% slower than the
faster single unit.

    python experiments/bench_tabu.py                      # all instances
    python experiments/bench_tabu.py --quick              # a small subset, short runs
    python experiments/bench_tabu.py --instances tai100a,hwsw4000 --device nvidia --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import hpu
from hpu.tabu import QAP, HWSWPartitioning, calibrate, tabu_search, transfer_levels

DATA = Path(__file__).parent / "data" / "qaplib"
QAP_INSTANCES = ["tai30a", "tai35a", "tai40a", "tai50a", "tai60a", "tai80a", "tai100a"]
HWSW_INSTANCES = ["hwsw1000", "hwsw2000", "hwsw3000", "hwsw4000"]
QUICK_INSTANCES = ["tai30a", "tai100a", "hwsw1000"]
ALPHAS = [0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
TOLERANCE = 1.10


def load_instance(name: str):
    """A QAPLIB instance by name, or ``hwswN``: random HW/SW partitioning, N tasks, 2N edges, CCR 1, R low, seed N."""
    if name.startswith("hwsw"):
        n = int(name[4:])
        return HWSWPartitioning.random(n, ccr=1.0, constraint="low", seed=n)
    return QAP.from_qaplib(DATA / f"{name}.dat")


def measure(problem, configs: list[dict], args, desc: str) -> list[tuple[float, object]]:
    """Median seconds per iteration of each configuration, and a result of it.

    A configuration is ``tabu_search`` keyword arguments.  Each run is at most ``args.iterations``
    iterations or ``args.budget`` seconds, all from seed 0 (the same trajectory).  The repeats go
    round robin over the configurations, so that a drift of the machine's speed hits all alike.
    HW/SW runs start after a restart (all hardware plus two flips), so that the first timed
    iteration does not restart.
    """
    tenure = min(problem.num_moves - 1, max(problem.n // 2, 1))
    initial = problem.restart(np.random.default_rng(0)) if isinstance(problem, HWSWPartitioning) else None
    runs = [dict(tenure=tenure, seed=0, initial=initial, **c) for c in configs]
    for run in runs:  # warm-up: kernel builds, caches
        tabu_search(problem, iterations=2, **run)
    times: list[list[float]] = [[] for _ in runs]
    last = [None] * len(runs)
    steps = [(r, k) for r in range(args.repeats) for k in range(len(runs))]
    for _, k in tqdm(steps, desc=desc, leave=False, disable=not args.progress):
        last[k] = tabu_search(problem, iterations=args.iterations, time_limit=args.budget, **runs[k])
        times[k].append(last[k].time_per_iteration)
    return [(float(np.median(t)), res) for t, res in zip(times, last)]


def bench_instance(name: str, args) -> dict:
    problem = load_instance(name)
    N = problem.num_moves
    out: dict = {"instance": name, "n": problem.n, "moves": N}
    with hpu.Runtime(args.device, threads=1) as rt1, hpu.Runtime(args.device, threads=args.threads) as rtp:
        p = rtp.threads
        cp = calibrate(problem, rtp, force=args.recalibrate)
        out["costs"] = {k: v for k, v in dataclasses.asdict(cp).items() if k != "measurements"}
        units = {"cpu-1": dict(runtime=rt1, strategy="cpu", cpu_chunks=1),
                 f"cpu-{p}": dict(runtime=rtp, costs=cp, strategy="cpu", cpu_chunks=p)}
        if rtp.has_device:
            units["gpu"] = dict(runtime=rtp, costs=cp, strategy="gpu")
        units["hybrid"] = dict(runtime=rtp, costs=cp, strategy="hybrid")
        forced = []
        if rtp.has_device:
            forced = [(a, t) for a in ALPHAS for t in transfer_levels(N - round(a * N), cp.work_group_size)]
        configs = list(units.values()) + [dict(runtime=rtp, costs=cp, strategy="hybrid", alpha=a, transfer_level=t)
                                          for a, t in forced]
        timed = measure(problem, configs, args, desc=name)
        base = timed[0][0]
        out["units"] = {
            u: {
                "seconds_per_iteration": t,
                "moves_per_second": N / t,
                "speedup_vs_cpu1": base / t,
                "alpha": r.split.alpha,
                "cpu_chunks": r.split.cpu_chunks,
                "transfer_level": r.split.transfer_level,
                "predicted_seconds": r.split.predicted_time,
            }
            for u, (t, r) in zip(units, timed)
        }
        sweep = [
            {"alpha": a, "transfer_level": t, "cpu_chunks": r.split.cpu_chunks, "seconds_per_iteration": sec,
             "predicted_seconds": r.split.predicted_time}
            for (a, t), (sec, r) in zip(forced, timed[len(units):])
        ]
        out["sweep"] = sweep
        hybrid = out["units"]["hybrid"]["seconds_per_iteration"]
        out["hybrid_vs_best_single"] = hybrid / min(d["seconds_per_iteration"] for u, d in out["units"].items()
                                                     if u != "hybrid")
        if sweep:
            best = min(sweep, key=lambda s: s["seconds_per_iteration"])
            out["best_forced"] = best
            out["model_vs_best_forced"] = hybrid / best["seconds_per_iteration"]
    return out


def print_tables(results: list[dict], p: int) -> None:
    print("\nTime per tabu iteration (ms) x speed-up over one CPU thread; throughput in million moves per second")
    units = ["cpu-1", f"cpu-{p}", "gpu", "hybrid"]
    head = f"{'instance':<10}{'moves':>10}" + "".join(f"{u:>22}" for u in units) + f"{'hybrid Mmoves/s':>17}"
    print(head)
    print("-" * len(head))
    for r in results:
        line = f"{r['instance']:<10}{r['moves']:>10}"
        for u in units:
            d = r["units"].get(u)
            line += f"{d['seconds_per_iteration'] * 1e3:>13.3f} x{d['speedup_vs_cpu1']:<7.2f}" if d else f"{'-':>22}"
        line += f"{r['units']['hybrid']['moves_per_second'] / 1e6:>17.2f}"
        print(line)
    print("\nThe model's split against the best forced split (alpha in "
          f"{', '.join(map(str, ALPHAS))}; every sensible transfer level); o, omega: the measured fixed cost of "
          "using both units and their overlap")
    head = (f"{'instance':<10}{'o ms':>7}{'omega':>6}{'model a':>9}{'ranges':>7}{'level':>6}{'pred ms':>9}{'meas ms':>9}"
            f"{'best a':>8}{'level':>6}{'best ms':>9}{'model/best':>11}{'hybrid/single':>14}")
    print(head)
    print("-" * len(head))
    for r in results:
        h = r["units"]["hybrid"]
        b = r.get("best_forced")
        c = r["costs"]
        line = (f"{r['instance']:<10}{c['hybrid_seconds'] * 1e3:>7.3f}{c['overlap']:>6.2f}{h['alpha']:>9.3f}{h['cpu_chunks']:>7}{h['transfer_level']:>6}"
                f"{h['predicted_seconds'] * 1e3:>9.3f}{h['seconds_per_iteration'] * 1e3:>9.3f}")
        if b:
            ok = "ok" if r["model_vs_best_forced"] <= TOLERANCE else "FAIL"
            line += (f"{b['alpha']:>8.2f}{b['transfer_level']:>6}{b['seconds_per_iteration'] * 1e3:>9.3f}"
                     f"{r['model_vs_best_forced']:>8.2f} {ok:<3}")
        else:
            line += f"{'-':>8}{'-':>6}{'-':>9}{'-':>11}"
        ok = "ok" if r["hybrid_vs_best_single"] <= TOLERANCE else "FAIL"
        line += f"{r['hybrid_vs_best_single']:>10.2f} {ok}"
        print(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", help="comma-separated names: " + ", ".join(QAP_INSTANCES + HWSW_INSTANCES)
                    + " (hwswN: any N)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_INSTANCES)}, short runs")
    ap.add_argument("--device", help="OpenCL device (as hpu.Runtime accepts; default: PYOPENCL_CTX, else a GPU)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads p (default: all cores)")
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    ap.add_argument("--budget", type=float, default=None, help="seconds per measurement run (default 0.2; quick 0.1)")
    ap.add_argument("--iterations", type=int, default=200, help="at most this many iterations per run")
    ap.add_argument("--repeats", type=int, default=None, help="runs per measurement, median taken (default 3; quick 1)")
    ap.add_argument("--recalibrate", action="store_true", help="measure the tabu costs again instead of the cache")
    ap.add_argument("--progress", action="store_true", help="show a progress bar per instance")
    args = ap.parse_args(argv)
    if args.instances:
        names = [s.strip() for s in args.instances.split(",") if s.strip()]
    else:
        names = QUICK_INSTANCES if args.quick else QAP_INSTANCES + HWSW_INSTANCES
    for name in names:
        if not (name.startswith("hwsw") and name[4:].isdigit()) and not (DATA / f"{name}.dat").exists():
            ap.error(f"unknown instance {name!r}")
    args.budget = args.budget or (0.1 if args.quick else 0.2)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.quick:
        args.iterations = min(args.iterations, 50)

    with hpu.Runtime(args.device, threads=args.threads) as rt:
        p, device = rt.threads, rt.device_name
    host = platform.processor() or platform.machine()
    print(f"hpu {hpu.__version__}; device: {device}; CPU threads p = {p}; host: {host} ({os.cpu_count()} cores); "
          f"python {platform.python_version()}", flush=True)
    results = []
    for name in names:
        t0 = time.perf_counter()
        results.append(bench_instance(name, args))
        print(f"  {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    print_tables(results, p)
    if args.json:
        meta = {"device": device, "threads": p, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "python": platform.python_version(), "hpu": hpu.__version__,
                "argv": list(sys.argv[1:] if argv is None else argv)}
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2, default=float))
    failed = [r["instance"] for r in results
              if r["hybrid_vs_best_single"] > TOLERANCE or r.get("model_vs_best_forced", 1.0) > TOLERANCE]
    if failed:
        print(f"\nmodel checks failed on: {', '.join(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
