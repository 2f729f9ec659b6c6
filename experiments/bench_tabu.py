"""Benchmark the tabu-search neighbourhood evaluation: CPU (1 and p threads), device, hybrid, and the model's split.

For each instance it measures the time per tabu iteration and the moves
evaluated per second of

* ``cpu-1``: vectorised numpy on one thread;
* ``cpu-p``: the same on p threads (the runtime's pool, one range per thread);
* ``gpu``: the fused evaluate-and-reduce kernel alone (transfer level chosen by the model);
* ``hybrid``: the split the model chooses (CPU share alpha, CPU ranges, transfer level);

and the speed-up over one CPU thread, as the papers report them.  Problems:

* ``qap`` (issue 5): QAP tai30a ... tai100a, 2-swap (Luong et al., IEEE TC 2013, table 2);
* ``hwsw`` (issue 5): HW/SW partitioning with 1,000 to 4,000 tasks, 2-flip (Hou et al. 2019, table 2);
* ``pfsp``: Taillard's flow shops of 20 to 500 jobs, insertion moves, with the device's time without
  prefix sharing too (``gpu-full``; the prefix-sharing speed-up is what Wu et al., table 2, report);
* ``ppp``: permuted perceptron instances of Luong et al. (tables 3 and 4: Hamming distances 1 and 2);
* ``ea``: the hybrid evolutionary algorithm on tai30a ... tai60a (Luong et al., CEC 2010, table I):
  one generation of ``--ea-population`` offspring, local searches run concurrently.

For QAP and HW/SW it then sweeps forced splits (alpha in 0, 0.01, 0.02, 0.05,
0.1, 0.2, 0.5 times every sensible transfer level) and checks that the
model's choice is within 10% of the best forced one and that the hybrid is
at most 10% slower than the faster single unit.  Because the best of some
forty noisy medians is biased low (the winner's curse), both checks use a
confirmation round: the model's split, the best forced split and the faster
single unit timed again, side by side, with twice the repeats.

    python experiments/bench_tabu.py                      # QAP and HW/SW instances
    python experiments/bench_tabu.py --quick              # a small subset, short runs
    python experiments/bench_tabu.py --problems pfsp,ppp,ea
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
from hpu.tabu import PFSP, PPP, QAP, HWSWPartitioning, calibrate, hybrid_ea, tabu_search, transfer_levels

DATA = Path(__file__).parent / "data" / "qaplib"
PROBLEMS = {
    "qap": ["tai30a", "tai35a", "tai40a", "tai50a", "tai60a", "tai80a", "tai100a"],
    "hwsw": ["hwsw1000", "hwsw2000", "hwsw3000", "hwsw4000"],
    "pfsp": ["ta001", "ta031", "ta061", "ta081", "ta091", "ta111"],
    "ppp": [f"ppp{s}-h{k}" for k in (1, 2) for s in ("73-73", "101-117", "201-217", "401-417", "801-817", "1301-1317")],
    "ea": ["ea-tai30a", "ea-tai40a", "ea-tai50a", "ea-tai60a"],
}
QUICK_INSTANCES = ["tai30a", "tai100a", "hwsw1000"]
ALPHAS = [0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
TOLERANCE = 1.10
#: The papers' speed-ups of their GPU version over one CPU core, for the table (Tesla M2050 where several GPUs).
PAPER = {
    # Luong, Melab, Talbi, IEEE TC 2013, table 3 (Hamming 1) and table 4 (Hamming 2), "GPU" column, Tesla M2050.
    **{f"ppp{s}-h1": v for s, v in zip(("73-73", "101-117", "201-217", "401-417", "801-817", "1301-1317"),
                                       (0.6, 1.1, 2.1, 3.4, 6.3, 11.2))},
    **{f"ppp{s}-h2": v for s, v in zip(("73-73", "101-117", "201-217", "401-417", "801-817", "1301-1317"),
                                       (11.7, 21.1, 28.7, 37.4, 63.2, 69.2))},
    # Luong, Melab, Talbi, CEC 2010, table I, "GPU" column (hybrid EA on a GTX 280).
    "ea-tai30a": 5.2, "ea-tai35a": 5.6, "ea-tai40a": 5.9, "ea-tai50a": 6.2, "ea-tai60a": 6.4,
}


def problem_of(name: str) -> str:
    """The problem an instance name belongs to (``qap``, ``hwsw``, ``pfsp``, ``ppp`` or ``ea``)."""
    if name.startswith("hwsw"):
        return "hwsw"
    if name.startswith("ppp"):
        return "ppp"
    if name.startswith("ea-"):
        return "ea"
    if name.startswith("ta") and name[2:].isdigit():
        return "pfsp"
    return "qap"


def load_instance(name: str, **kw):
    """An instance by name.

    ``taiNa`` etc.: a QAPLIB file; ``hwswN``: random HW/SW partitioning, N tasks, 2N edges, CCR 1, R low,
    seed N; ``taNNN``: Taillard's flow shop, insertion moves; ``pppM-N-hK``: a planted permuted perceptron
    instance (seed 0) with the Hamming-K neighbourhood; ``ea-X``: instance X (for the hybrid EA).
    """
    kind = problem_of(name)
    if kind == "hwsw":
        n = int(name[4:])
        return HWSWPartitioning.random(n, ccr=1.0, constraint="low", seed=n)
    if kind == "pfsp":
        return PFSP.taillard(name, **kw)
    if kind == "ppp":
        size, k = name[3:].split("-h")
        m, n = (int(v) for v in size.split("-"))
        return PPP.generate(m, n, seed=0, hamming=int(k))
    if kind == "ea":
        return load_instance(name[3:])
    return QAP.from_qaplib(DATA / f"{name}.dat")


def check_name(name: str) -> bool:
    kind = problem_of(name)
    if kind == "hwsw":
        return name[4:].isdigit()
    if kind in ("pfsp", "ppp"):
        try:
            load_instance(name)
        except (ValueError, KeyError):
            return False
        return True
    return (DATA / f"{name[3:] if kind == 'ea' else name}.dat").exists()


def measure(problem, configs: list[dict], args, desc: str, repeats: int | None = None) -> list[tuple[float, object]]:
    """Median seconds per iteration of each configuration, and a result of it.

    A configuration is ``tabu_search`` keyword arguments.  Each run is at most ``args.iterations``
    iterations or ``args.budget`` seconds, all from seed 0 (the same trajectory).  The repeats go
    round robin over the configurations, so that a drift of the machine's speed hits all alike.
    HW/SW runs start after a restart (all hardware plus two flips), so that the first timed
    iteration does not restart.
    """
    tenure = min(problem.num_moves - 1, max(problem.n // 2, 1))
    repeats = args.repeats if repeats is None else repeats
    initial = problem.restart(np.random.default_rng(0)) if isinstance(problem, HWSWPartitioning) else None
    runs = [dict(tenure=tenure, seed=0, initial=initial, **c) for c in configs]
    for run in runs:  # warm-up: kernel builds, caches
        tabu_search(problem, iterations=2, **run)
    times: list[list[float]] = [[] for _ in runs]
    last = [None] * len(runs)
    steps = [(r, k) for r in range(repeats) for k in range(len(runs))]
    for _, k in tqdm(steps, desc=desc, leave=False, disable=not args.progress):
        last[k] = tabu_search(problem, iterations=args.iterations, time_limit=args.budget, **runs[k])
        times[k].append(last[k].time_per_iteration)
    return [(float(np.median(t)), res) for t, res in zip(times, last)]


def _unit_row(N: int, t: float, res, base: float) -> dict:
    return {"seconds_per_iteration": t, "moves_per_second": N / t, "speedup_vs_cpu1": base / t,
            "alpha": res.split.alpha, "cpu_chunks": res.split.cpu_chunks, "transfer_level": res.split.transfer_level,
            "predicted_seconds": res.split.predicted_time}


def _same_split(a: dict, b: dict) -> bool:
    return abs(a["alpha"] - b["alpha"]) < 1e-9 and a["transfer_level"] == b["transfer_level"] and (
        a["alpha"] == 0 or a["cpu_chunks"] == b["cpu_chunks"])


def bench_instance(name: str, args) -> dict:
    problem = load_instance(name)
    kind = problem_of(name)
    N = problem.num_moves
    out: dict = {"instance": name, "problem": kind, "n": problem.n, "moves": N}
    sweep_splits = kind in ("qap", "hwsw")
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
        if rtp.has_device and sweep_splits:
            forced = [(a, t) for a in ALPHAS for t in transfer_levels(N - round(a * N), cp.work_group_size)]
        configs = list(units.values()) + [dict(runtime=rtp, costs=cp, strategy="hybrid", alpha=a, transfer_level=t)
                                          for a, t in forced]
        timed = measure(problem, configs, args, desc=name)
        base = timed[0][0]
        out["units"] = {u: _unit_row(N, t, r, base) for u, (t, r) in zip(units, timed)}
        if kind == "pfsp" and rtp.has_device:  # the device without prefix sharing (seed 003's baseline)
            full = load_instance(name, prefix_sharing=False)
            gpu = out["units"]["gpu"]
            (t, r), = measure(full, [dict(runtime=rtp, strategy="gpu", transfer_level=gpu["transfer_level"])], args,
                              desc=name + " full")
            out["units"]["gpu-full"] = _unit_row(N, t, r, base)
            out["prefix_sharing_speedup"] = t / gpu["seconds_per_iteration"]
        singles = {u: d for u, d in out["units"].items() if u not in ("hybrid", "cpu-1", "gpu-full")}
        hybrid = out["units"]["hybrid"]["seconds_per_iteration"]
        out["hybrid_vs_best_single"] = hybrid / min(d["seconds_per_iteration"] for d in singles.values())
        if forced:
            sweep = [
                {"alpha": a, "transfer_level": t, "cpu_chunks": r.split.cpu_chunks, "seconds_per_iteration": sec,
                 "predicted_seconds": r.split.predicted_time}
                for (a, t), (sec, r) in zip(forced, timed[len(units):])
            ]
            out["sweep"] = sweep
            best = min(sweep, key=lambda s: s["seconds_per_iteration"])
            out["best_forced"] = best
            out["model_vs_best_forced"] = hybrid / best["seconds_per_iteration"]
            # Confirmation round: the model's split, the best forced split and the faster single unit, side by side.
            single = min(singles, key=lambda u: singles[u]["seconds_per_iteration"])
            again = measure(problem, [units["hybrid"], dict(runtime=rtp, costs=cp, strategy="hybrid",
                                                            alpha=best["alpha"], transfer_level=best["transfer_level"]),
                                      units[single]], args, desc=name + " confirm", repeats=2 * args.repeats)
            (t_h, _), (t_b, _), (t_s, _) = again
            out["confirm"] = {
                "repeats": 2 * args.repeats, "model_seconds": t_h, "best_forced_seconds": t_b, "single_unit": single,
                "single_seconds": t_s, "model_is_best_forced": _same_split(out["units"]["hybrid"], best),
                "model_is_single": _same_split(out["units"]["hybrid"], singles[single]),
                "model_vs_best_forced": t_h / t_b, "hybrid_vs_best_single": t_h / t_s,
            }
    return out


def bench_ea(name: str, args) -> dict:
    """Seconds per generation of the hybrid EA with each unit, and the ratio to one CPU thread."""
    problem = load_instance(name)
    kw = dict(population=args.ea_population, generations=1, ils_iterations=1, ls_iterations=args.ea_iterations,
              seed=0)
    out: dict = {"instance": name, "problem": "ea", "n": problem.n, "moves": problem.num_moves, "settings": kw}
    with hpu.Runtime(args.device, threads=1) as rt1, hpu.Runtime(args.device, threads=args.threads) as rtp:
        p = rtp.threads
        units = {"cpu-1": dict(runtime=rt1, strategy="cpu", concurrency=1),
                 f"cpu-{p}": dict(runtime=rtp, strategy="cpu")}
        if rtp.has_device:
            units["gpu"] = dict(runtime=rtp, strategy="gpu")
        units["hybrid"] = dict(runtime=rtp, strategy="hybrid")
        for u in units.values():  # warm-up: calibration, kernel builds
            hybrid_ea(problem, **{**kw, "ls_iterations": 2}, **u)
        times: dict[str, list[float]] = {u: [] for u in units}
        last = {}
        for _ in range(args.repeats):
            for u, c in units.items():
                last[u] = hybrid_ea(problem, **kw, **c)
                times[u].append(last[u].wall_time)
        base = float(np.median(times["cpu-1"]))
        out["units"] = {u: {"seconds_per_generation": float(np.median(t)), "speedup_vs_cpu1": base / float(np.median(t)),
                            "moves_per_second": last[u].moves_per_second, "concurrency": last[u].concurrency,
                            "alpha": last[u].split.alpha, "best_value": last[u].best_value}
                        for u, t in times.items()}
    return out


def print_tables(results: list[dict], p: int) -> None:
    search = [r for r in results if r["problem"] != "ea"]
    if search:
        print("\nTime per tabu iteration (ms) x speed-up over one CPU thread; throughput in million moves per second;"
              " paper: the paper's GPU speed-up over one core")
        units = ["cpu-1", f"cpu-{p}", "gpu", "hybrid"]
        head = (f"{'instance':<16}{'moves':>10}" + "".join(f"{u:>22}" for u in units)
                + f"{'hybrid Mmoves/s':>17}{'paper':>8}")
        print(head)
        print("-" * len(head))
        for r in search:
            line = f"{r['instance']:<16}{r['moves']:>10}"
            for u in units:
                d = r["units"].get(u)
                line += f"{d['seconds_per_iteration'] * 1e3:>13.3f} x{d['speedup_vs_cpu1']:<7.2f}" if d else f"{'-':>22}"
            line += f"{r['units']['hybrid']['moves_per_second'] / 1e6:>17.2f}"
            line += f"{'x%g' % PAPER[r['instance']]:>8}" if r["instance"] in PAPER else f"{'':>8}"
            if "prefix_sharing_speedup" in r:
                line += f"   prefix sharing on the device: x{r['prefix_sharing_speedup']:.2f}"
            print(line)
    ea = [r for r in results if r["problem"] == "ea"]
    if ea:
        print("\nHybrid EA: seconds per generation x speed-up over one CPU thread (paper: CEC 2010 table I, GPU)")
        units = ["cpu-1", f"cpu-{p}", "gpu", "hybrid"]
        print(f"{'instance':<16}" + "".join(f"{u:>20}" for u in units) + f"{'paper':>8}")
        for r in ea:
            line = f"{r['instance']:<16}"
            for u in units:
                d = r["units"].get(u)
                line += f"{d['seconds_per_generation']:>11.3f} x{d['speedup_vs_cpu1']:<7.2f}" if d else f"{'-':>20}"
            print(line + (f"{'x%g' % PAPER[r['instance']]:>8}" if r["instance"] in PAPER else ""))
    swept = [r for r in search if "confirm" in r]
    if not swept:
        return
    print("\nThe model's split against the best forced split (alpha in "
          f"{', '.join(map(str, ALPHAS))}; every sensible transfer level); o, omega: the measured fixed cost of "
          "using both units and their overlap (CPU share on one thread / in the pool).  Ratios from the confirmation round (side by side, twice the repeats);"
          " 'same': the model chose that very split")
    head = (f"{'instance':<10}{'o ms':>7}{'omega':>12}{'model a':>9}{'ranges':>7}{'level':>6}{'pred ms':>9}{'meas ms':>9}"
            f"{'best a':>8}{'level':>6}{'best ms':>9}{'model/best':>16}{'hybrid/single':>19}")
    print(head)
    print("-" * len(head))
    for r in swept:
        h, b, c, k = r["units"]["hybrid"], r["best_forced"], r["costs"], r["confirm"]
        omega = f"{c['overlap']:.2f}/{c.get('pool_overlap', c['overlap']):.2f}"
        line = (f"{r['instance']:<10}{c['hybrid_seconds'] * 1e3:>7.3f}{omega:>12}{h['alpha']:>9.3f}"
                f"{h['cpu_chunks']:>7}{h['transfer_level']:>6}{h['predicted_seconds'] * 1e3:>9.3f}"
                f"{h['seconds_per_iteration'] * 1e3:>9.3f}{b['alpha']:>8.2f}{b['transfer_level']:>6}"
                f"{b['seconds_per_iteration'] * 1e3:>9.3f}")
        for ratio, same in ((k["model_vs_best_forced"], k["model_is_best_forced"]),
                            (k["hybrid_vs_best_single"], k["model_is_single"])):
            ok = "same" if same else ("ok" if ratio <= TOLERANCE else "FAIL")
            line += f"{ratio:>12.2f} {ok:<5}"
        print(line)


def failures(results: list[dict]) -> list[str]:
    """Instances whose confirmed model checks fail (neither within 10% nor the very same split)."""
    bad = []
    for r in results:
        k = r.get("confirm")
        if k and ((k["model_vs_best_forced"] > TOLERANCE and not k["model_is_best_forced"])
                  or (k["hybrid_vs_best_single"] > TOLERANCE and not k["model_is_single"])):
            bad.append(r["instance"])
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="qap,hwsw", help="comma-separated: " + ", ".join(PROBLEMS)
                    + " (default qap,hwsw)")
    ap.add_argument("--instances", help="comma-separated names instead (e.g. tai30a, hwsw1000, ta001, ppp73-73-h2, "
                    "ea-tai30a; hwswN: any N)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_INSTANCES)}, short runs")
    ap.add_argument("--device", help="OpenCL device (as hpu.Runtime accepts; default: PYOPENCL_CTX, else a GPU)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads p (default: all cores)")
    ap.add_argument("--json", type=Path, help="also write the results to this JSON file")
    ap.add_argument("--budget", type=float, default=None, help="seconds per measurement run (default 0.2; quick 0.1)")
    ap.add_argument("--iterations", type=int, default=200, help="at most this many iterations per run")
    ap.add_argument("--repeats", type=int, default=None, help="runs per measurement, median taken (default 3; quick 1)")
    ap.add_argument("--ea-population", type=int, default=8, help="hybrid EA: population and offspring (default 8)")
    ap.add_argument("--ea-iterations", type=int, default=100, help="hybrid EA: tabu iterations per local search")
    ap.add_argument("--recalibrate", action="store_true", help="measure the tabu costs again instead of the cache")
    ap.add_argument("--progress", action="store_true", help="show a progress bar per instance")
    args = ap.parse_args(argv)
    if args.instances:
        names = [s.strip() for s in args.instances.split(",") if s.strip()]
    elif args.quick:
        names = QUICK_INSTANCES
    else:
        unknown = [k for k in args.problems.split(",") if k not in PROBLEMS]
        if unknown:
            ap.error(f"unknown problem(s) {', '.join(unknown)}")
        names = [name for k in args.problems.split(",") for name in PROBLEMS[k]]
    for name in names:
        if not check_name(name):
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
    meta = {"device": device, "threads": p, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "python": platform.python_version(), "hpu": hpu.__version__,
            "argv": list(sys.argv[1:] if argv is None else argv)}
    results = []
    for name in names:
        t0 = time.perf_counter()
        results.append(bench_ea(name, args) if problem_of(name) == "ea" else bench_instance(name, args))
        print(f"  {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        if args.json:  # after each instance, so that an interrupted run keeps what it measured
            args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2, default=float))
    print_tables(results, p)
    failed = failures(results)
    if failed:
        print(f"\nmodel checks failed on: {', '.join(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
