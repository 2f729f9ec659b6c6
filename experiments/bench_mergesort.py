"""Benchmark hybrid_mergesort: every strategy, numpy.sort on one core, baselines, and the model's prediction.

Times each strategy side by side in one run on uniform random int32 in
[0, 2n) (the paper's input, section 6.4), for n = 2^min .. 2^max, and prints
a table of times and ratios to numpy.sort (one core, default kind), with the
machine and versions.  Host array in, host array out.  The strategies and
numpy.sort run in shuffled rounds, each call after the same idle pause
(``hpu.calibrate.IDLE_PAUSE``), and each median is reported.  When importable,
cupy.sort host to host (pageable and pinned host buffers) is timed too.
``--variants`` adds other key distributions and dtypes at one size.

    python experiments/bench_mergesort.py [--mode fast|paper] [--min-log 16] [--max-log 26] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

import hpu
from hpu.calibrate import IDLE_PAUSE, host_description
from hpu.mergesort import hybrid_mergesort

STRATEGIES = ("cpu", "gpu", "basic", "advanced", "auto")
SMALL_ROUNDS, SMALL_SECONDS = 49, 0.02  # at most 49 rounds, as many as numpy.sort takes to fill 20 ms


def _cupy_baselines(a: np.ndarray, repeats: int) -> dict:
    """cupy.sort host to host: pageable (plain numpy) and pinned host buffers; {} without cupy."""
    try:
        import cupy as cp
    except Exception:
        return {}
    out: dict = {}
    d = cp.asarray(a)
    cp.sort(d)
    cp.cuda.Device().synchronize()

    def pageable():
        cp.asnumpy(cp.sort(cp.asarray(a)))

    mem_in = cp.cuda.alloc_pinned_memory(a.nbytes)
    mem_out = cp.cuda.alloc_pinned_memory(a.nbytes)
    pin_in = np.frombuffer(mem_in, a.dtype, a.size)
    pin_out = np.frombuffer(mem_out, a.dtype, a.size)
    pin_in[:] = a
    stream = cp.cuda.Stream(non_blocking=True)

    def pinned():
        with stream:
            x = cp.empty_like(d)
            x.set(pin_in, stream=stream)
            y = cp.sort(x)
            y.get(out=pin_out, stream=stream)
        stream.synchronize()

    out["cupy_pageable"] = _time(pageable, repeats)
    out["cupy_pinned"] = _time(pinned, repeats)
    assert np.array_equal(pin_out, np.sort(a))

    def resident():
        cp.sort(d)
        cp.cuda.Device().synchronize()

    out["cupy_device_resident"] = _time(resident, repeats)
    return out


def _variants(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Other inputs at one size: sorted, reversed, few unique, Zipf keys, and other dtypes."""
    u = rng.integers(0, 2 * n, n)
    return {
        "int32 sorted": np.sort(u).astype(np.int32),
        "int32 reversed": np.sort(u)[::-1].astype(np.int32),
        "int32 few-unique": rng.integers(0, 16, n).astype(np.int32),
        "int32 zipf": np.minimum(rng.zipf(1.5, n), 2**31 - 1).astype(np.int32),
        "int64 uniform": u.astype(np.int64),
        "float32 normal": rng.standard_normal(n).astype(np.float32),
        "float64 normal": rng.standard_normal(n),
    }


def _time(fn, repeats: int) -> float:
    fn()  # warm-up (kernel builds, page faults)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-log", type=int, default=16, help="smallest n = 2^min-log (default 16)")
    ap.add_argument("--max-log", type=int, default=26, help="largest n = 2^max-log (default 26)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed runs per point (more for sub-millisecond sorts); the median is reported")
    ap.add_argument("--mode", default="fast", choices=("fast", "paper"), help="hybrid_mergesort mode (default fast)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated strategies")
    ap.add_argument("--variants", type=int, default=None, metavar="LOG",
                    help="also time the default strategy on other distributions and dtypes at n = 2^LOG")
    ap.add_argument("--slow", type=float, default=20.0,
                    help="skip a strategy at larger n once one run took longer than this many seconds")
    ap.add_argument("--device", default=None, help="OpenCL device (default: hpu's choice)")
    ap.add_argument("--profile", default=None, help="profile (default: this device's calibrated profile)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows and machine facts as JSON")
    args = ap.parse_args(argv)
    strategies = [s for s in args.strategies.split(",") if s]
    rng = np.random.default_rng(0)
    rows = []
    slow: set[str] = set()
    with hpu.Runtime(args.device, profile=args.profile, threads=args.threads) as rt:
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python experiments/bench_mergesort.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "device": rt.device_name,
            "host": host_description(),
            "threads": rt.threads,
            "profile": rt.profile.name,
            "profile_values": {k: getattr(rt.profile, k) for k in ("p", "g", "gamma", "cpu_op_seconds")},
            "numpy": np.__version__,
            "pyopencl": cl.VERSION_TEXT,
            "python": platform.python_version(),
            "hpu": hpu.__version__,
            "mode": args.mode,
        }
        print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items() if k != "profile_values"))
        print(f"# profile: p={rt.profile.p:.2f} g={rt.profile.g:.0f} 1/gamma={1 / rt.profile.gamma:.1f}")
        head = f"{'n':>10} {'strategy':>9} {'time ms':>10} {'pred ms':>9} {'numpy ms':>9} {'vs numpy':>9} {'alpha':>6} {'y':>3}"
        print(head)
        for lg in range(args.min_log, args.max_log + 1):
            n = 1 << lg
            a = rng.integers(0, 2 * n, n).astype(np.int32)
            ref = np.sort(a, kind="stable")
            np.sort(a)  # warm-up; numpy.sort is then timed in the same shuffled rounds as the strategies
            todo = [s for s in strategies if s not in slow]
            traces = {}
            for s in todo:  # warm-up and check each strategy once
                out, traces[s] = hybrid_mergesort(a, strategy=s, mode=args.mode, runtime=rt, return_trace=True)
                if not np.array_equal(out, ref):
                    raise SystemExit(f"wrong result: strategy {s}, n = 2^{lg}")
            runs = {s: (lambda s=s: hybrid_mergesort(a, strategy=s, mode=args.mode, runtime=rt)) for s in todo}
            runs["numpy"] = lambda: np.sort(a)
            samples: dict[str, list[float]] = {s: [] for s in runs}
            order = np.random.default_rng(lg)
            # Sub-millisecond sorts scatter by 10-20%: more rounds there (numpy's warm-up time as the yardstick).
            t0 = time.perf_counter()
            np.sort(a)
            rounds = max(args.repeats, min(SMALL_ROUNDS, int(SMALL_SECONDS / max(time.perf_counter() - t0, 1e-9))))
            for _ in range(rounds):  # rounds in shuffled order, so that noise and after-effects
                for s in order.permutation(list(runs)):  # (an OpenCL CPU device still spinning) hit all alike
                    time.sleep(IDLE_PAUSE)
                    t0 = time.perf_counter()
                    runs[s]()
                    samples[s].append(time.perf_counter() - t0)
            t_np = float(np.median(samples["numpy"]))
            for name, t in _cupy_baselines(a, args.repeats).items():
                rows.append({"n": n, "strategy": name, "seconds": t, "numpy_seconds": t_np, "speedup_vs_numpy": t_np / t})
                print(f"{n:>10} {name:>9} {t * 1e3:10.2f} {'':>9} {t_np * 1e3:9.2f} {t_np / t:9.3f}", flush=True)
            for s in todo:
                tr = traces[s]
                t = float(np.median(samples[s]))
                if t > args.slow:
                    slow.add(s)
                pred = tr.split.predicted_time if tr.split is not None else None
                row = {"n": n, "strategy": s, "chosen": tr.strategy, "seconds": t, "numpy_seconds": t_np,
                       "numpy_samples": samples["numpy"],
                       "predicted_seconds": pred, "samples": samples[s],
                       "alpha": tr.alpha, "transfer_level": tr.transfer_level, "speedup_vs_numpy": t_np / t,
                       "cpu_threads": getattr(tr.split, "cpu_threads", None),
                       "device_busy": tr.busy("device"), "cpu_busy": tr.busy("cpu"), "bus_busy": tr.busy("bus")}
                rows.append(row)
                print(f"{n:>10} {s:>9} {t * 1e3:10.2f} {pred * 1e3 if pred else float('nan'):9.2f} "
                      f"{t_np * 1e3:9.2f} {t_np / t:9.3f} {tr.alpha:6.3f} {tr.transfer_level:>3}"
                      + (f"  ({tr.strategy})" if s == "auto" else ""), flush=True)
        variants = []
        if args.variants:
            n = 1 << args.variants
            print(f"# other inputs at n = 2^{args.variants}, strategy auto")
            for name, a in _variants(n, rng).items():
                ref = np.sort(a, kind="stable")
                out, tr = hybrid_mergesort(a, mode=args.mode, runtime=rt, return_trace=True)
                if not np.array_equal(out.view(np.uint8), ref.view(np.uint8)):
                    raise SystemExit(f"wrong result: {name}")
                t = _time(lambda: hybrid_mergesort(a, mode=args.mode, runtime=rt), args.repeats)
                t_np = _time(lambda: np.sort(a), args.repeats)
                variants.append({"n": n, "input": name, "seconds": t, "numpy_seconds": t_np, "chosen": tr.strategy,
                                 "alpha": tr.alpha, "transfer_level": tr.transfer_level})
                print(f"{name:>18} {t * 1e3:10.2f} ms  numpy {t_np * 1e3:9.2f} ms  x{t_np / t:7.2f}  ({tr.strategy})",
                      flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "rows": rows, "variants": variants}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
