"""Benchmark the default runtime: calls without ``runtime=`` against an explicit runtime, and the uncalibrated default.

Two measurements, each side by side in one run, on uniform random int32 in [0, 2n) (the paper's input):

calls
    ``--calls`` calls (default 1000) of ``hpu.hybrid_mergesort(a)`` with no runtime (the default runtime) against
    the same calls on one explicit ``hpu.Runtime()`` made once on the same (default) device, at n = 2^16, in
    interleaved rounds (each round runs a block of calls of every variant, in shuffled order, back to back).  Each
    is run twice: results dropped at once ("recycled": their memory goes back to the runtime's host pool) and the
    last ``--keep`` results kept alive.  numpy.sort (stable, one thread) runs in the same rounds as a yardstick.
    Also timed: the process's first call, which creates the default runtime, and ``hpu.Runtime()`` plus its first
    call, once, then ``--first-repeats`` times on fresh runtimes (the default reset by ``set_default_runtime(None)``).
    Target (the issue): default within 1.5x of explicit.
uncalibrated
    With no calibrated profile, the default (``hpu.hybrid_mergesort(a)``, strategy "auto") against every forced
    strategy on the same default runtime (``"cpu"`` on all threads, ``"gpu"``, ``"basic"``, ``"advanced"`` at the
    ``--splits`` alpha:level pairs) and numpy.sort stable on one thread, at each n of ``--sizes``; medians of
    shuffled interleaved rounds, each call after the same idle pause.  Target: default within 15% of the best
    (medians; the ratio of the minima is printed beside it as a check on noise).

``HPU_PROFILE_DIR`` is pointed at a fresh empty directory before hpu is imported, so no cached profile is found
(``--use-cached-profile`` keeps the user's profiles, for the calls part only).

    python experiments/bench_default_runtime.py [--machine cpu-only] [--calls 1000] [--sizes 16,18,20,22] [--out PATH]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench_common import command_line, shuffled_rounds, utc_now

ROOT = Path(__file__).resolve().parents[1]
MAX_ROUNDS = 200  # cap of the extra rounds that small sorts get (see _rounds)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machine", default="cpu-only", help="machine name for the default --out (default cpu-only)")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON results (default experiments/results/<machine>/default_runtime.json)")
    ap.add_argument("--parts", default="calls,uncalibrated", help="comma-separated: calls, uncalibrated")
    ap.add_argument("--calls", type=int, default=1000, help="calls per variant in the calls part (default 1000)")
    ap.add_argument("--calls-log", type=int, default=16, help="n = 2^calls-log in the calls part (default 16)")
    ap.add_argument("--call-rounds", type=int, default=20,
                    help="interleaved rounds the calls are spread over (default 20)")
    ap.add_argument("--first-repeats", type=int, default=9,
                    help="first calls on fresh runtimes timed after the process's first (default 9)")
    ap.add_argument("--keep", type=int, default=64, help="results kept alive in the 'kept' variants (default 64)")
    ap.add_argument("--sizes", default="16,18,20,22", help="log2 n of the uncalibrated part (default 16,18,20,22)")
    ap.add_argument("--splits", default="0.25:0,0.5:0,0.75:0",
                    help="forced advanced splits alpha:transfer_level (default 0.25:0,0.5:0,0.75:0)")
    ap.add_argument("--rounds", type=int, default=15, help="least timed rounds per size (default 15)")
    ap.add_argument("--target-seconds", type=float, default=0.1,
                    help="small sorts get more rounds, up to this many seconds of the default per size (default 0.1)")
    ap.add_argument("--pause", type=float, default=None,
                    help="idle pause before each call of the uncalibrated part (default hpu's IDLE_PAUSE)")
    ap.add_argument("--use-cached-profile", action="store_true",
                    help="keep HPU_PROFILE_DIR as it is (calls part only)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    if set(args.parts) - {"calls", "uncalibrated"}:
        ap.error(f"unknown part in --parts {args.parts}")
    if args.use_cached_profile and "uncalibrated" in args.parts:
        ap.error("--use-cached-profile needs --parts calls (the uncalibrated part needs no cached profile)")
    if min(args.calls, args.call_rounds, args.rounds, args.keep, args.first_repeats) < 1:
        ap.error("--calls, --call-rounds, --rounds, --keep and --first-repeats must be >= 1")
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.splits = [(float(a), int(y)) for a, y in (s.split(":") for s in args.splits.split(",") if s)]
    if args.out is None:
        args.out = ROOT / "experiments" / "results" / args.machine / "default_runtime.json"
    return args


def machine_meta(argv: list[str] | None, profile_dir: str | None) -> dict:
    """Host, date, command and versions (no runtime is made here: the calls part times the first one)."""
    import hpu
    from hpu.core.util import host_description

    try:
        import pyopencl as cl
        pyopencl_version = cl.VERSION_TEXT
    except Exception as e:  # recorded, not fatal: CPU-only mode runs without it
        pyopencl_version = f"not importable: {e}"
    return {
        "date": utc_now(),
        "command": command_line("bench_default_runtime.py", argv),
        "host": host_description(),
        "hpu_profile_dir": profile_dir or os.environ.get("HPU_PROFILE_DIR"),
        "hpu": hpu.__version__,
        "numpy": np.__version__,
        "pyopencl": pyopencl_version,
        "python": platform.python_version(),
    }


def runtime_meta() -> dict:
    """The default runtime's device, threads and profile (makes the default runtime if there is none yet)."""
    import hpu

    rt = hpu.default_runtime()
    return {"device": rt.device_name, "has_device": rt.has_device,
            "device_shares_host_cores": rt.device_shares_host_cores, "threads": rt.threads,
            "profile": rt.profile.name, "calibrated": rt.calibrated}


def first_calls(a: np.ndarray, repeats: int) -> dict:
    """Seconds of the first default call (it creates the default runtime) and of Runtime() plus its first call.

    The lazy imports and the OpenCL platform's start-up run before, untimed, so both sides pay the same; the
    first default call still makes the process's first context, so :func:`fresh_first_calls` then times
    ``repeats`` more first calls of each kind.
    Returns the timings and the explicit runtime (left open for the steady-state calls).
    """
    import hpu

    t0 = time.perf_counter()
    sort = hpu.hybrid_mergesort  # imports the sort, the runtime module and pyopencl
    t_import = time.perf_counter() - t0
    hpu.list_devices()  # the OpenCL platform's start-up, shared by both runtimes
    t0 = time.perf_counter()
    sort(a)
    t_default_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    rt = hpu.Runtime()
    t_create = time.perf_counter() - t0
    t0 = time.perf_counter()
    sort(a, runtime=rt)
    t_explicit_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    sort(a)
    t_default_second = time.perf_counter() - t0
    t0 = time.perf_counter()
    sort(a, runtime=rt)
    t_explicit_second = time.perf_counter() - t0
    fresh = fresh_first_calls(a, repeats)
    default = hpu.default_runtime()
    if (default.device_name, default.calibrated) != (rt.device_name, rt.calibrated):
        raise SystemExit(f"the explicit runtime differs from the default: {rt!r} vs {default!r}")
    return {
        "import_seconds": t_import,
        "default_first_call_seconds": t_default_first,
        "explicit_runtime_create_seconds": t_create,
        "explicit_first_call_seconds": t_explicit_first,
        "explicit_create_plus_first_call_seconds": t_create + t_explicit_first,
        "default_second_call_seconds": t_default_second,
        "fresh_runtime_first_calls": fresh,
        "explicit_second_call_seconds": t_explicit_second,
        "runtime": rt,
    }


def fresh_first_calls(a: np.ndarray, repeats: int) -> dict:
    """Seconds of first calls on fresh runtimes, alternately: default (reset by ``hpu.set_default_runtime(None)``)
    and ``hpu.Runtime()`` plus a call on it; lists of ``repeats`` each, and their medians."""
    import hpu

    default_first, explicit_first = [], []
    for _ in range(repeats):
        prev = hpu.set_default_runtime(None)  # the next call without runtime= makes a new default
        if prev is not None:
            prev.close()
        t0 = time.perf_counter()
        hpu.hybrid_mergesort(a)
        default_first.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with hpu.Runtime() as rt:
            hpu.hybrid_mergesort(a, runtime=rt)
            explicit_first.append(time.perf_counter() - t0)
    return {"default_first_call_seconds": default_first, "explicit_create_plus_first_call_seconds": explicit_first,
            "default_median_seconds": float(np.median(default_first)),
            "explicit_median_seconds": float(np.median(explicit_first))}


def call_variants(a: np.ndarray, rt, keep: int) -> dict[str, Callable[[], None]]:
    """One call of each variant of the calls part (a closure each; 'kept' ones hold their last ``keep`` results)."""
    import hpu

    sort = hpu.hybrid_mergesort
    kept_default: collections.deque = collections.deque(maxlen=keep)
    kept_explicit: collections.deque = collections.deque(maxlen=keep)

    def default_recycled() -> None:
        sort(a)  # the result is dropped at once: its memory goes back to the pool

    def explicit_recycled() -> None:
        sort(a, runtime=rt)

    def numpy_stable() -> None:
        np.sort(a, kind="stable")

    return {
        "default, recycled": default_recycled,
        "explicit, recycled": explicit_recycled,
        f"default, kept {keep}": lambda: kept_default.append(sort(a)),
        f"explicit, kept {keep}": lambda: kept_explicit.append(sort(a, runtime=rt)),
        "numpy stable (1 thread)": numpy_stable,
    }


def bench_calls(args: argparse.Namespace) -> dict:
    """The calls part: default vs explicit runtime, ``args.calls`` calls each, in interleaved rounds."""
    n = 1 << args.calls_log
    a = np.random.default_rng(args.seed).integers(0, 2 * n, n).astype(np.int32)
    first = first_calls(a, args.first_repeats)
    rt = first.pop("runtime")
    try:
        runs = call_variants(a, rt, args.keep)
        for fn in runs.values():  # warm-up: fill the kept lists' first entries, the pools, the caches
            fn()
        order = np.random.default_rng(args.seed + 1)
        samples: dict[str, list[float]] = {name: [] for name in runs}
        per_round = [args.calls // args.call_rounds + (r < args.calls % args.call_rounds)
                     for r in range(args.call_rounds)]
        for block in per_round:
            for name in order.permutation(list(runs)):
                fn, times = runs[name], samples[name]
                for _ in range(block):
                    t0 = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - t0)
    finally:
        rt.close()
    stats = {name: _stats(ts) for name, ts in samples.items()}
    ratios = {}
    for kind in ("recycled", f"kept {args.keep}"):
        d, e = stats[f"default, {kind}"], stats[f"explicit, {kind}"]
        ratios[kind] = {"total": d["total_seconds"] / e["total_seconds"],
                        "median": d["median_seconds"] / e["median_seconds"]}
    return {"n": n, "dtype": "int32", "calls": args.calls, "rounds": args.call_rounds, "keep": args.keep,
            "first": first, "stats": stats, "ratio_default_over_explicit": ratios,
            "within_1_5x": all(r["total"] <= 1.5 for r in ratios.values()), "samples": samples}


def _stats(times: list[float]) -> dict:
    t = np.asarray(times)
    return {"calls": int(t.size), "total_seconds": float(t.sum()), "median_seconds": float(np.median(t)),
            "p10_seconds": float(np.percentile(t, 10)), "p90_seconds": float(np.percentile(t, 90)),
            "max_seconds": float(t.max())}


def strategy_variants(a: np.ndarray, splits: list[tuple[float, int]]) -> dict[str, Callable[[], np.ndarray]]:
    """The uncalibrated part's variants: the default, each forced strategy (default runtime), numpy on one thread."""
    import hpu

    sort = hpu.hybrid_mergesort
    runs: dict[str, Callable[[], np.ndarray]] = {
        "default (auto)": lambda: sort(a),
        "cpu (all threads)": lambda: sort(a, strategy="cpu"),
        "numpy stable (1 thread)": lambda: np.sort(a, kind="stable"),
    }
    if hpu.default_runtime().has_device:
        runs["gpu"] = lambda: sort(a, strategy="gpu")
        runs["basic"] = lambda: sort(a, strategy="basic")
        for alpha, y in splits:
            runs[f"advanced a={alpha:g} y={y}"] = (
                lambda alpha=alpha, y=y: sort(a, strategy="advanced", alpha=alpha, transfer_level=y))
    return runs


def bench_size(lg: int, args: argparse.Namespace, pause: float) -> dict:
    """One size of the uncalibrated part: medians of shuffled rounds of every variant, each after ``pause``."""
    import hpu

    n = 1 << lg
    a = np.random.default_rng(args.seed + lg).integers(0, 2 * n, n).astype(np.int32)
    ref = np.sort(a, kind="stable")
    _, trace = hpu.hybrid_mergesort(a, return_trace=True)
    runs, failed = {}, {}
    for name, fn in strategy_variants(a, args.splits).items():
        try:
            out = fn()  # warm-up (kernel builds, pools) and check
        except Exception as e:  # a forced strategy that does not run here is reported, not fatal
            failed[name] = f"{type(e).__name__}: {e}"
            continue
        if not np.array_equal(out, ref):
            raise SystemExit(f"wrong result: {name}, n = 2^{lg}")
        runs[name] = fn
    t0 = time.perf_counter()
    runs["default (auto)"]()
    rounds = max(args.rounds, min(MAX_ROUNDS, int(args.target_seconds / max(time.perf_counter() - t0, 1e-9))))
    samples = shuffled_rounds(runs, rounds, np.random.default_rng(args.seed + 100 + lg), pause)
    medians = {name: float(np.median(ts)) for name, ts in samples.items()}
    mins = {name: float(np.min(ts)) for name, ts in samples.items()}
    strategies = [k for k in medians if k != "default (auto)" and not k.startswith("numpy")]  # numpy: the yardstick
    forced = {k: medians[k] for k in strategies}
    best = min(forced, key=forced.get)
    ratio = medians["default (auto)"] / forced[best]
    best_min = min(forced, key=mins.get)
    return {"n": n, "dtype": "int32", "rounds": rounds, "default_chose": trace.strategy, "default_alpha": trace.alpha,
            "medians_seconds": medians, "best_forced": best, "best_forced_seconds": forced[best],
            "ratio_default_over_best": ratio, "within_15_percent": ratio <= 1.15, "mins_seconds": mins,
            "best_forced_by_min": best_min, "ratio_default_over_best_min": mins["default (auto)"] / mins[best_min],
            "failed": failed, "samples": samples}


def print_calls(res: dict) -> None:
    f = res["first"]
    fr = f["fresh_runtime_first_calls"]
    print(f"# calls: n = {res['n']} int32, {res['calls']} calls per variant in {res['rounds']} interleaved rounds")
    print(f"# first call (creates the default runtime): {f['default_first_call_seconds'] * 1e3:.1f} ms; "
          f"hpu.Runtime(): {f['explicit_runtime_create_seconds'] * 1e3:.1f} ms + first call "
          f"{f['explicit_first_call_seconds'] * 1e3:.1f} ms; second calls: default "
          f"{f['default_second_call_seconds'] * 1e3:.2f} ms, explicit {f['explicit_second_call_seconds'] * 1e3:.2f} ms"
          f"; fresh runtimes, medians of {len(fr['default_first_call_seconds'])}: default first call "
          f"{fr['default_median_seconds'] * 1e3:.2f} ms, Runtime() + first call "
          f"{fr['explicit_median_seconds'] * 1e3:.2f} ms"
          f" (lazy import of hybrid_mergesort before: {f['import_seconds'] * 1e3:.0f} ms)")
    print(f"{'variant':>24} {'total s':>9} {'median ms':>10} {'p10 ms':>8} {'p90 ms':>8} {'max ms':>8}")
    for name, s in res["stats"].items():
        print(f"{name:>24} {s['total_seconds']:9.3f} {s['median_seconds'] * 1e3:10.3f} {s['p10_seconds'] * 1e3:8.3f}"
              f" {s['p90_seconds'] * 1e3:8.3f} {s['max_seconds'] * 1e3:8.2f}")
    for kind, r in res["ratio_default_over_explicit"].items():
        print(f"# default / explicit, {kind}: total x{r['total']:.3f}, median x{r['median']:.3f}")
    print(f"# within 1.5x: {'yes' if res['within_1_5x'] else 'NO'}", flush=True)


def print_size(res: dict) -> None:
    t_def = res["medians_seconds"]["default (auto)"]
    print(f"# n = {res['n']}: {res['rounds']} rounds; the default ran as {res['default_chose']!r} "
          f"(CPU share {res['default_alpha']:.2f})")
    for name, t in sorted(res["medians_seconds"].items(), key=lambda kv: kv[1]):
        print(f"{res['n']:>10} {name:>24} {t * 1e3:10.3f} {t / t_def:9.3f}")
    for name, err in res["failed"].items():
        print(f"{res['n']:>10} {name:>24}  did not run: {err}")
    print(f"{res['n']:>10} {'default / best':>24} {res['ratio_default_over_best']:10.3f}  (best: {res['best_forced']};"
          f" within 15%: {'yes' if res['within_15_percent'] else 'NO'})", flush=True)


def bench_uncalibrated(args: argparse.Namespace) -> list[dict]:
    import hpu
    from hpu.core.calibrate import IDLE_PAUSE

    if hpu.default_runtime().calibrated:
        raise SystemExit("the default runtime found a calibrated profile; the uncalibrated part needs none")
    pause = IDLE_PAUSE if args.pause is None else args.pause
    print(f"# uncalibrated default vs forced strategies (medians, {pause * 1e3:.0f} ms idle pause before each call)")
    print(f"{'n':>10} {'variant':>24} {'median ms':>10} {'/ default':>9}")
    results = []
    for lg in args.sizes:
        results.append(bench_size(lg, args, pause))
        print_size(results[-1])
    return results


def print_summary(sizes: list[dict]) -> None:
    print(f"{'n':>10} {'default ms':>11} {'best forced':>24} {'best ms':>9} {'default/best':>13} {'within 15%':>11}"
          f" {'(of minima)':>12}")
    for r in sizes:
        print(f"{r['n']:>10} {r['medians_seconds']['default (auto)'] * 1e3:11.3f} {r['best_forced']:>24} "
              f"{r['best_forced_seconds'] * 1e3:9.3f} {r['ratio_default_over_best']:13.3f} "
              f"{'yes' if r['within_15_percent'] else 'NO':>11} {r['ratio_default_over_best_min']:12.3f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hpu-profiles-") as empty:
        profile_dir = None
        if not args.use_cached_profile:  # before hpu is imported and any runtime made: no cached profile found
            os.environ["HPU_PROFILE_DIR"] = profile_dir = empty
        import hpu

        meta = machine_meta(argv, profile_dir)
        print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
        out = {"meta": meta}
        if "calls" in args.parts:
            out["calls"] = bench_calls(args)  # first: it times the call that makes the default runtime
        meta.update(runtime_meta())
        print("# " + "  ".join(f"{k}: {v}" for k, v in runtime_meta().items()))
        if "calls" in args.parts:
            print_calls(out["calls"])
        if "uncalibrated" in args.parts:
            out["uncalibrated"] = bench_uncalibrated(args)
            print("# summary: the uncalibrated default against the best forced strategy")
            print_summary(out["uncalibrated"])
        if profile_dir is not None:
            meta["profile_dir_left_empty"] = not os.listdir(profile_dir)
        hpu.default_runtime().close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
