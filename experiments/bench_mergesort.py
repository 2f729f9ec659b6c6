"""Benchmark hybrid_mergesort: every strategy, numpy.sort on one core, baselines, and the model's prediction.

Times each strategy side by side in one run on uniform random int32 in
[0, 2n) (the paper's input, section 6.4), for n = 2^min .. 2^max, and prints
a table of times and ratios to numpy.sort (one core, default kind), with the
machine and versions.  Host array in, host array out.  The strategies and
numpy.sort run in shuffled rounds, each call after the same idle pause
(``hpu.core.calibrate.IDLE_PAUSE``; ``--back-to-back``: each one's calls one after another instead, the
steady state), and each median is reported.  When importable,
cupy.sort host to host (pageable and pinned host buffers) is timed too
(``--no-cupy``: not, so that no other GPU context's work runs between hpu's calls; ``--numpy-apart``: numpy.sort
in rounds of its own, so that no call follows seconds of it at large n).
``--variants`` adds other key distributions and dtypes at one size.
A strategy ``keyrange@A`` is the key-range split with the CPU's share forced
to ``A`` (``hybrid_mergesort(strategy="keyrange", alpha=A)``); a strategy
``S+pinned`` is ``S`` on a copy of the input in hpu's pinned memory
(``hpu.Runtime.empty_pinned``: not staged; cupy's pinned baseline's match); ``S/tasks=K`` is ``S`` with at
most ``K`` staging tasks a device (``hpu.PipelineOptions(staging_tasks=K)``; the default is 8);
``--device-memory-limit`` caps the device memory hpu may use (larger device
shares are sorted in pieces); ``--devices all`` makes one HPU of every GPU
(``exchange`` and ``keyrange`` then use them all, ``gpu`` the first alone).

After the table, for each n where the default and another strategy ran: the default against the fastest
(``--summary JSON`` prints that alone from an earlier run's ``--json`` output).

    python experiments/bench_mergesort.py [--mode fast|paper] [--min-log 16] [--max-log 26] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

import hpu
from bench_common import add_runtime_arguments, command_line, shuffled_rounds, timings, utc_now, write_json
from hpu.core.streaming import streaming_available
from hpu.core.util import host_description

STRATEGIES = ("cpu", "gpu", "basic", "advanced", "auto")
SMALL_ROUNDS, SMALL_SECONDS = 49, 0.02  # at most 49 rounds, as many as numpy.sort takes to fill 20 ms


def _cupy_baselines(a: np.ndarray) -> dict:
    """cupy.sort host to host, pageable (plain numpy) and pinned host buffers, and device-resident: name -> a call,
    each warmed up (and the pinned one checked); {} without cupy.  Timed with the strategies, in the same rounds."""
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

    def resident():
        cp.sort(d)
        cp.cuda.Device().synchronize()

    out = {"cupy_pageable": pageable, "cupy_pinned": pinned, "cupy_device_resident": resident}
    for fn in out.values():
        fn()
    assert np.array_equal(pin_out, np.sort(a))
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
    """Median seconds of ``repeats`` calls of ``fn`` after a warm-up call."""
    return float(np.median(timings(fn, repeats)))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-log", type=int, default=16, help="smallest n = 2^min-log (default 16)")
    ap.add_argument("--max-log", type=int, default=26, help="largest n = 2^max-log (default 26)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed runs per point (more for sub-millisecond sorts); the median is reported")
    ap.add_argument("--mode", default="fast", choices=("fast", "paper"), help="hybrid_mergesort mode (default fast)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated strategies")
    ap.add_argument("--variants", type=int, default=None, metavar="LOG",
                    help="also time the default strategy on other distributions and dtypes at n = 2^LOG")
    ap.add_argument("--device-memory-limit", type=int, default=None, metavar="BYTES",
                    help="hpu.Runtime(device_memory_limit=...): device memory hpu may use (default: 80%% of it)")
    ap.add_argument("--devices", default=None,
                    help="several devices in one HPU: 'all' or a comma-separated list (instead of --device); "
                         "'gpu' then sorts on the first alone")
    ap.add_argument("--slow", type=float, default=20.0,
                    help="skip a strategy at larger n once its median run took longer than this many seconds")
    ap.add_argument("--back-to-back", action="store_true",
                    help="time each strategy's calls one after another (steady state), after one untimed call, "
                         "rather than in shuffled rounds after idle pauses (the default)")
    ap.add_argument("--no-cupy", action="store_true",
                    help="leave out cupy's baselines (their CUDA context's work between hpu's calls)")
    ap.add_argument("--summary", type=Path, default=None, metavar="JSON",
                    help="only print the default against the fastest strategy of an earlier run's --json output")
    ap.add_argument("--numpy-apart", action="store_true",
                    help="time numpy.sort in rounds of its own after the others' (so that no call comes after "
                         "seconds of numpy.sort at large n, the GPU idle meanwhile)")
    add_runtime_arguments(ap)
    args = ap.parse_args(argv)
    args.strategies = [s for s in args.strategies.split(",") if s]
    return args


def machine_meta(rt: hpu.Runtime, args: argparse.Namespace, argv: list[str] | None) -> dict:
    """Date, command, device, host, threads, profile and versions; printed as the table's header."""
    meta = {
        "date": utc_now(),
        "command": command_line("bench_mergesort.py", argv),
        "device": rt.device_name,
        "devices": [u.device_name for u in rt.units],
        "host": host_description(),
        "threads": rt.threads,
        "profile": rt.profile.name,
        "profile_values": {k: getattr(rt.profile, k) for k in ("p", "g", "gamma", "cpu_op_seconds")},
        "numpy": np.__version__,
        "streaming copies": streaming_available(),
        "pyopencl": cl.VERSION_TEXT,
        "python": platform.python_version(),
        "hpu": hpu.__version__,
        "mode": args.mode,
        "timing": "back to back" if args.back_to_back else "shuffled rounds after idle pauses",
        "device_memory_limit": args.device_memory_limit,
    }
    print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items() if k != "profile_values"))
    print(f"# profile: p={rt.profile.p:.2f} g={rt.profile.g:.0f} 1/gamma={1 / rt.profile.gamma:.1f}")
    print(f"{'n':>10} {'strategy':>9} {'time ms':>10} {'pred ms':>9} {'numpy ms':>9} {'vs numpy':>9} {'alpha':>6} {'y':>3}")
    return meta


PINNED = "+pinned"  # a strategy name's suffix: the input copied into hpu's pinned memory first
TASKS = "/tasks="  # before it: the most staging tasks a device (hpu.PipelineOptions.staging_tasks)


def _strategy(name: str) -> dict:
    """hybrid_mergesort's keywords for a strategy name of the command line (``keyrange@A``: CPU share A;
    ``S/tasks=K``: at most K staging tasks a device, ``hpu.PipelineOptions(staging_tasks=K)``)."""
    name, _, tasks = name.removesuffix(PINNED).partition(TASKS)
    base, _, alpha = name.partition("@")
    return {"strategy": base, **({"alpha": float(alpha)} if alpha else {}),
            **({"options": hpu.PipelineOptions(staging_tasks=int(tasks))} if tasks else {})}


def _inputs(a: np.ndarray, strategies: list[str], rt: hpu.Runtime) -> dict[str, np.ndarray]:
    """Each strategy's input: ``a``, or for ``S+pinned`` one copy of it in ``rt``'s pinned memory."""
    pinned = None
    if any(s.endswith(PINNED) for s in strategies):
        pinned = rt.empty_pinned(a.shape, a.dtype)
        if not rt.host_pool.is_pinned(pinned):
            raise SystemExit(f"{PINNED}: no pinned memory for {a.nbytes} bytes (no device, or the host pool is full)")
        pinned[...] = a
    return {s: pinned if s.endswith(PINNED) else a for s in strategies}


def checked_traces(a: np.ndarray, strategies: list[str], mode: str, rt: hpu.Runtime) -> dict[str, hpu.Trace]:
    """Run each strategy once on ``a`` (warm-up), check its result against numpy's; return the traces."""
    ref = np.sort(a, kind="stable")
    traces, ins = {}, _inputs(a, strategies, rt)
    for s in strategies:
        out, traces[s] = hpu.hybrid_mergesort(ins[s], **_strategy(s), mode=mode, runtime=rt, return_trace=True)
        if not np.array_equal(out, ref):
            raise SystemExit(f"wrong result: strategy {s}, n = {a.size}")
    return traces


def time_strategies(a: np.ndarray, strategies: list[str], args: argparse.Namespace, rt: hpu.Runtime,
                    seed: int) -> dict[str, list[float]]:
    """Samples of each strategy, of numpy.sort and of cupy's baselines (where importable), timed in the same shuffled
    rounds (or each back to back)."""
    ins = _inputs(a, strategies, rt)
    runs = {s: (lambda s=s: hpu.hybrid_mergesort(ins[s], **_strategy(s), mode=args.mode, runtime=rt))
            for s in strategies}
    apart = {"numpy": lambda: np.sort(a)}
    runs.update({} if args.numpy_apart else apart)
    if not args.no_cupy:
        runs.update(_cupy_baselines(a))
    # Sub-millisecond sorts scatter by 10-20%: more rounds there (numpy's warm-up time as the yardstick).
    np.sort(a)
    t0 = time.perf_counter()
    np.sort(a)
    rounds = max(args.repeats, min(SMALL_ROUNDS, int(SMALL_SECONDS / max(time.perf_counter() - t0, 1e-9))))
    if args.back_to_back:
        return {k: timings(fn, rounds) for k, fn in {**runs, **apart}.items()}
    samples = shuffled_rounds(runs, rounds, np.random.default_rng(seed))
    if args.numpy_apart:
        samples.update(shuffled_rounds(apart, rounds, np.random.default_rng(seed)))
    return samples


def strategy_row(n: int, s: str, tr: hpu.Trace, samples: list[float], numpy_samples: list[float]) -> dict:
    """One row of the table (printed) and of the JSON: a strategy's median against numpy.sort's, and its split."""
    t, t_np = float(np.median(samples)), float(np.median(numpy_samples))
    pred = tr.split.predicted_time if tr.split is not None else None
    print(f"{n:>10} {s:>9} {t * 1e3:10.2f} {pred * 1e3 if pred else float('nan'):9.2f} "
          f"{t_np * 1e3:9.2f} {t_np / t:9.3f} {tr.alpha:6.3f} {tr.transfer_level:>3}"
          + (f"  ({tr.strategy})" if s == "auto" else "")
          + (f"  shares {', '.join(f'{v:.3f}' for v in tr.split.shares)}" if getattr(tr.split, "shares", ()) else ""),
          flush=True)
    return {"n": n, "strategy": s, "chosen": tr.strategy, "seconds": t, "numpy_seconds": t_np,
            "numpy_samples": numpy_samples, "predicted_seconds": pred, "samples": samples,
            "alpha": tr.alpha, "transfer_level": tr.transfer_level, "speedup_vs_numpy": t_np / t,
            "cpu_threads": getattr(tr.split, "cpu_threads", None), "shares": list(getattr(tr.split, "shares", ())),
            "device_busy": tr.busy("device"), "cpu_busy": tr.busy("cpu"), "bus_busy": tr.busy("bus")}


def bench_size(lg: int, a: np.ndarray, strategies: list[str], args: argparse.Namespace, rt: hpu.Runtime) -> list[dict]:
    """The rows of one size: cupy's baselines (where importable), then every strategy."""
    n = 1 << lg
    traces = checked_traces(a, strategies, args.mode, rt)
    samples = time_strategies(a, strategies, args, rt, seed=lg)
    t_np = float(np.median(samples["numpy"]))
    rows = []
    for name in (k for k in samples if k.startswith("cupy_")):
        t = float(np.median(samples[name]))
        rows.append({"n": n, "strategy": name, "seconds": t, "numpy_seconds": t_np, "speedup_vs_numpy": t_np / t})
        print(f"{n:>10} {name:>9} {t * 1e3:10.2f} {'':>9} {t_np * 1e3:9.2f} {t_np / t:9.3f}", flush=True)
    return rows + [strategy_row(n, s, traces[s], samples[s], samples["numpy"]) for s in strategies]


def bench_variants(log_n: int, rng: np.random.Generator, args: argparse.Namespace, rt: hpu.Runtime) -> list[dict]:
    """The default strategy on other distributions and dtypes at n = 2^log_n."""
    n = 1 << log_n
    print(f"# other inputs at n = 2^{log_n}, strategy auto")
    variants = []
    for name, a in _variants(n, rng).items():
        ref = np.sort(a, kind="stable")
        out, tr = hpu.hybrid_mergesort(a, mode=args.mode, runtime=rt, return_trace=True)
        if not np.array_equal(out.view(np.uint8), ref.view(np.uint8)):
            raise SystemExit(f"wrong result: {name}")
        t = _time(lambda: hpu.hybrid_mergesort(a, mode=args.mode, runtime=rt), args.repeats)
        t_np = _time(lambda: np.sort(a), args.repeats)
        variants.append({"n": n, "input": name, "seconds": t, "numpy_seconds": t_np, "chosen": tr.strategy,
                         "alpha": tr.alpha, "transfer_level": tr.transfer_level})
        print(f"{name:>18} {t * 1e3:10.2f} ms  numpy {t_np * 1e3:9.2f} ms  x{t_np / t:7.2f}  ({tr.strategy})",
              flush=True)
    return variants


def print_default_vs_fastest(rows: list[dict]) -> None:
    """Print, for each n where ``auto`` and another of hpu's strategies were timed, the default's median against the
    fastest strategy's (the default's own included; cupy's baselines and the ``S+pinned`` runs, whose input is
    already in pinned memory, left out)."""
    by_n: dict[int, dict[str, float]] = {}
    for r in rows:
        if not r["strategy"].startswith("cupy_") and not r["strategy"].endswith(PINNED):
            by_n.setdefault(r["n"], {})[r["strategy"]] = r["seconds"]
    table = [(n, t) for n, t in sorted(by_n.items()) if "auto" in t and len(t) > 1]
    if not table:
        return
    print("# the default against the fastest strategy timed")
    print(f"{'n':>10} {'auto ms':>9} {'fastest':>14} {'ms':>9} {'auto/fastest':>12}")
    for n, t in table:
        best = min(t, key=t.get)
        print(f"{n:>10} {t['auto'] * 1e3:9.2f} {best:>14} {t[best] * 1e3:9.2f} {t['auto'] / t[best]:12.3f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.summary is not None:
        print(f"# {args.summary}")
        print_default_vs_fastest(json.loads(args.summary.read_text())["rows"])
        return 0
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    slow: set[str] = set()
    devices = None if args.devices is None else args.devices if args.devices == "all" else args.devices.split(",")
    with hpu.Runtime(args.device, devices=devices, profile=args.profile, threads=args.threads,
                     device_memory_limit=args.device_memory_limit) as rt:
        meta = machine_meta(rt, args, argv)
        for lg in range(args.min_log, args.max_log + 1):
            n = 1 << lg
            a = rng.integers(0, 2 * n, n).astype(np.int32)
            size_rows = bench_size(lg, a, [s for s in args.strategies if s not in slow], args, rt)
            slow.update(r["strategy"] for r in size_rows if r["strategy"] in args.strategies and r["seconds"] > args.slow)
            rows += size_rows
        variants = bench_variants(args.variants, rng, args, rt) if args.variants else []
    print_default_vs_fastest(rows)
    if args.json:
        print(f"wrote {write_json(args.json, {'meta': meta, 'rows': rows, 'variants': variants})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
