"""Benchmark hpu.argsort, hpu.sort_by_key and hpu.sort (numpy's signatures) against numpy on one core and GPU libraries.

Host arrays in, host arrays out.  Three parts (``--parts``), each timed side
by side in one run: every configuration's variants run in shuffled rounds,
each call after the same idle pause (``hpu.core.calibrate.IDLE_PAUSE``, as in
``bench_mergesort.py``), and each median is reported.

- ``argsort``: for n = 2^min-log .. 2^max-log and each key dtype of
  ``--dtypes`` (uniform random int32 in [0, 2n) as the other benchmarks;
  floats standard normal): ``numpy.argsort(kind="stable")`` (the baseline),
  ``numpy.argsort`` (default quicksort), ``numpy.sort`` (for scale), all on
  one core; ``hpu.argsort(a, runtime=rt)``, also from a copy of ``a`` in
  hpu's pinned memory (``hpu.Runtime.empty_pinned``: not staged); where importable,
  ``cupy.argsort`` from pageable host arrays (copy to the GPU, argsort, copy
  back) and from pinned host arrays (input and output in pinned memory), and
  ``torch.sort(stable=True)`` (values and indices back to numpy, pageable).
- ``kv``: the same keys carrying random int64 values: ``hpu.sort_by_key``
  (also from pinned copies) against numpy (``p = argsort(keys, kind="stable"); keys[p], values[p]``) on
  one core, and the cupy / torch equivalents where importable.
- ``rows``: 2^rows-log rows of 2^cols-log float32 (standard normal):
  ``hpu.sort(X)`` (axis -1), from a pinned copy, forced to the CPU, to the device alone, and with
  CPU shares of the rows (``--row-alphas``) forced beside the device's,
  against ``numpy.sort(X, axis=-1)`` (stable, the baseline, and default kind)
  on one core, and ``cupy.sort`` / ``torch.sort`` pageable where importable; then a line of ``hpu.sort`` against
  ``numpy.sort``'s default kind (issue 16's yardstick).

``--no-gpu-libs`` leaves cupy and torch out (so that no other CUDA context's work runs between hpu's calls: in
the same rounds it adds to hpu's calls, ``device_run.sh model-rounds`` for the sort).

Each variant is timed in shuffled rounds, every call after an idle pause (the first call of a program that does
other work between sorts), or with ``--back-to-back`` in a run of calls one after another (steady state).
Every result is checked once per configuration (the untimed warm-up call)
against numpy's stable result: hpu's with ``np.array_equal`` (a mismatch is
printed loudly, recorded as ``"correct": false``, not timed, and the script
exits 1); the other libraries' as sorts (``"stable"`` says whether they also
equal the stable result).  Ratios are numpy-stable-time / variant-time (above
1: faster than numpy's stable sort on one core).  Once a variant's median
exceeds ``--slow`` seconds it is skipped at larger n; when that is the
baseline, later ratios use its n log n extrapolation (marked ``~`` and
``"baseline_estimated": true``).  Sizes whose rough host-memory need exceeds
``--max-gib`` are skipped.  hpu's planned path is printed beside its rows:
rows no longer than a work-group's tile sorted one work-group a row on the
device (``hpu.sorting.rows_on_device``), 32-bit keys packed with their index
(and row) on the device (``hpu.sorting.packs_on_device``), or packed on the
host into uint32/uint64 and sorted by ``hpu.hybrid_mergesort`` (64-bit keys
take two such passes).

    python experiments/bench_argsort.py [--min-log 20] [--max-log 28] [--dtypes int32,float64]
        [--parts argsort,kv,rows] [--rows-log 14 --cols-log 10] [--back-to-back] [--slow 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyopencl as cl

import hpu
from bench_common import add_runtime_arguments, command_line, shuffled_rounds, timings, utc_now, write_json
from hpu.core.streaming import streaming_available
from hpu.core.util import host_description
from hpu.sorting import packs_on_device, planned_strategy, rows_on_device
from hpu.sorting.keys import key_bits, packed_bits

PARTS = ("argsort", "kv", "rows")
SMALL_ROUNDS, SMALL_SECONDS = 49, 0.02  # more rounds (at most 49) while the baseline takes under 20 ms
GIB = 1 << 30

# -- variants and configurations -------------------------------------------------


@dataclass
class Variant:
    """One timed callable; ``check(result, ref)`` -> (a correct sort, equal to numpy's stable result)."""

    name: str
    run: Callable[[], Any]
    check: Callable[[Any, dict], tuple[bool, bool]]
    strict: bool = False  # hpu's: must equal numpy's stable result exactly, else it is wrong
    default: bool = False  # hpu's default strategy: the configuration's planned strategy is printed beside it


@dataclass
class Config:
    """One (part, dtype, size): the numpy-stable baseline (its first result is the reference) and the others."""

    part: str
    dtype: str
    n: int
    label: str
    baseline: Variant
    reference: Callable[[Any], dict]
    variants: list[Variant]
    planned: str | None = None
    extra: dict = field(default_factory=dict)


def make_keys(dtype: np.dtype, n: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform random integers in [0, 2n) (clipped to the dtype) or standard normal floats."""
    if dtype.kind in "iu":
        return rng.integers(0, min(2 * n, int(np.iinfo(dtype).max) + 1), n).astype(dtype)
    return rng.standard_normal(n).astype(dtype)


def perm_check(a: np.ndarray) -> Callable[[np.ndarray, dict], tuple[bool, bool]]:
    """Check an argsort result ``p``: ``a[p]`` sorted, and ``p`` equal to the stable argsort."""
    def check(p: np.ndarray, ref: dict) -> tuple[bool, bool]:
        exact = bool(np.array_equal(p, ref["perm"]))
        return exact or bool(p.shape == a.shape and np.array_equal(a[p], ref["keys"])), exact
    return check


def values_check(res: np.ndarray, ref: dict) -> tuple[bool, bool]:
    """Check sorted keys (1-D or rows) against numpy's."""
    ok = bool(np.array_equal(res, ref["keys"]))
    return ok, ok


def pair_check(perm: Callable[[np.ndarray, dict], tuple[bool, bool]]) -> Callable[[tuple, dict], tuple[bool, bool]]:
    """Check (sorted values, indices), as torch.sort returns them."""
    def check(res: tuple, ref: dict) -> tuple[bool, bool]:
        ok, exact = perm(res[1], ref)
        vals = bool(np.array_equal(res[0], ref["keys"]))
        return ok and vals, exact and vals
    return check


def kv_check(res: tuple, ref: dict) -> tuple[bool, bool]:
    """Check (sorted keys, carried values): keys sorted; values as the stable sort carries them."""
    keys = bool(np.array_equal(res[0], ref["keys"]))
    return keys, keys and bool(np.array_equal(res[1], ref["values"]))


def argsort_planned(n: int, dtype: np.dtype, rt: hpu.Runtime, values: tuple = ()) -> str:
    """How hpu.argsort (or, with ``values``' dtypes, hpu.sort_by_key) runs: packed on the device, or the strategy
    of its sort of (key, index) integers packed on the host, their dtype and passes."""
    if packs_on_device(n, dtype, rt, value_dtypes=values):
        return "gpu (packed on the device)"
    width = key_bits(dtype)
    packed = np.dtype(np.uint32 if packed_bits(min(width, 32), n) <= 32 else np.uint64)
    passes = " x2 passes" if width == 64 else ""
    return f"{planned_strategy(n, packed, rt)} ({packed.name}{passes})"


def rows_planned(r: int, m: int, dtype: np.dtype, rt: hpu.Runtime) -> str:
    """How hpu.sort (strategy "auto") orders ``r`` rows of ``m``: one work-group a row on the device, one segmented
    sort packed on the device, or CPU row blocks."""
    if rows_on_device(r, m, dtype, rt):
        return "gpu (one work-group a row)"
    on_device = packs_on_device(r * m, dtype, rt, rows=r, gather=True)
    return "gpu (segmented, packed on the device)" if on_device else "cpu row blocks"


def pinned_copy(rt: hpu.Runtime, a: np.ndarray) -> np.ndarray | None:
    """``a`` copied into ``rt``'s pinned host memory (``Runtime.empty_pinned``), or None where it would not lie there
    (no device, or the pool has no room): hpu's sorts read such an input without staging it."""
    p = rt.empty_pinned(a.shape, a.dtype)
    if not rt.host_pool.is_pinned(p):
        return None
    p[...] = a
    return p


def argsort_config(a: np.ndarray, rt: hpu.Runtime, gpu: dict) -> Config:
    """numpy's argsorts and sort, hpu.argsort and the GPU libraries' argsort of ``a``."""
    check = perm_check(a)
    base = Variant("np.argsort stable", lambda: np.argsort(a, kind="stable"), check)
    variants = [
        Variant("np.argsort quick", lambda: np.argsort(a), check),
        Variant("np.sort", lambda: np.sort(a), values_check),
        Variant("hpu.argsort", lambda: hpu.argsort(a, runtime=rt), check, strict=True, default=True),
        Variant("hpu.argsort cpu", lambda: hpu.argsort(a, runtime=rt, strategy="cpu"), check, strict=True),
    ]
    pa = pinned_copy(rt, a)
    if pa is not None:
        variants.append(Variant("hpu.argsort pinned", lambda: hpu.argsort(pa, runtime=rt), check, strict=True))
    if "cupy" in gpu:
        variants += cupy_argsort_variants(gpu["cupy"], a, check)
    if "torch" in gpu:
        tc = gpu["torch"]
        variants.append(Variant("torch.sort pageable", lambda: torch_sort(tc, a), pair_check(check)))
    return Config("argsort", a.dtype.name, a.size, str(a.size), base, lambda p: {"perm": p, "keys": a[p]},
                  variants, argsort_planned(a.size, a.dtype, rt))


def numpy_kv(k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The key-value sort in numpy: the stable argsort of the keys and two gathers."""
    p = np.argsort(k, kind="stable")
    return k[p], v[p]


def kv_config(k: np.ndarray, v: np.ndarray, rt: hpu.Runtime, gpu: dict) -> Config:
    """numpy's and hpu's key-value sort of (``k``, ``v``), and the GPU libraries' where importable."""
    base = Variant("np stable kv", lambda: numpy_kv(k, v), kv_check)
    variants = [Variant("hpu.sort_by_key", lambda: hpu.sort_by_key(k, v, runtime=rt), kv_check, strict=True,
                        default=True)]
    pk, pv = pinned_copy(rt, k), pinned_copy(rt, v)
    if pk is not None and pv is not None:
        variants.append(Variant("hpu.sort_by_key pinned", lambda: hpu.sort_by_key(pk, pv, runtime=rt), kv_check,
                                strict=True))
    if "cupy" in gpu:
        cp = gpu["cupy"]
        variants.append(Variant("cupy kv pageable", lambda: cupy_kv(cp, k, v), kv_check))
    if "torch" in gpu:
        tc = gpu["torch"]
        variants.append(Variant("torch kv pageable", lambda: torch_kv(tc, k, v), kv_check))
    return Config("kv", k.dtype.name, k.size, str(k.size), base, lambda r: {"keys": r[0], "values": r[1]},
                  variants, argsort_planned(k.size, k.dtype, rt, (v.dtype,)), {"values_dtype": v.dtype.name})


def rows_config(x: np.ndarray, rt: hpu.Runtime, gpu: dict, alphas: list[float]) -> Config:
    """numpy's and hpu's sort of every row of ``x``, and the GPU libraries' where importable."""
    r, m = x.shape
    base = Variant("np.sort stable", lambda: np.sort(x, axis=-1, kind="stable"), values_check)
    variants = [
        Variant("np.sort", lambda: np.sort(x, axis=-1), values_check),
        Variant("hpu.sort", lambda: hpu.sort(x, runtime=rt), values_check, strict=True, default=True),
        Variant("hpu.sort cpu", lambda: hpu.sort(x, runtime=rt, strategy="cpu"), values_check, strict=True),
    ]
    px = pinned_copy(rt, x)
    if px is not None:
        variants.append(Variant("hpu.sort pinned", lambda: hpu.sort(px, runtime=rt), values_check, strict=True))
    if rt.has_device:
        variants.append(Variant("hpu.sort gpu", lambda: hpu.sort(x, runtime=rt, strategy="gpu"), values_check,
                                strict=True))
        for a in alphas:  # forced CPU shares of the rows, beside the model's
            variants.append(Variant(f"hpu.sort alpha={a}", lambda a=a: hpu.sort(x, runtime=rt, alpha=a),
                                    values_check, strict=True))
    if "cupy" in gpu:
        cp = gpu["cupy"]
        variants.append(Variant("cupy.sort pageable", lambda: cp.asnumpy(cp.sort(cp.asarray(x), axis=-1)),
                                values_check))
    if "torch" in gpu:
        tc = gpu["torch"]
        variants.append(Variant("torch.sort pageable", lambda: torch_sort(tc, x)[0], values_check))
    return Config("rows", x.dtype.name, x.size, f"{r}x{m}", base, lambda s: {"keys": s}, variants,
                  rows_planned(r, m, x.dtype, rt), {"rows": r, "cols": m})


# -- GPU libraries (optional) ------------------------------------------------------


def gpu_libraries() -> dict[str, Any]:
    """cupy and torch modules that import and see a CUDA GPU; {} without them."""
    libs: dict[str, Any] = {}
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            libs["cupy"] = cupy
    except Exception:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            libs["torch"] = torch
    except Exception:
        pass
    return libs


def gpu_facts(gpu: dict[str, Any]) -> dict:
    """Versions and GPU names of the importable GPU libraries, for the JSON."""
    facts: dict = {}
    if "cupy" in gpu:
        cp = gpu["cupy"]
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        facts["cupy"] = {"version": cp.__version__, "gpu": props["name"].decode(errors="replace")}
    if "torch" in gpu:
        tc = gpu["torch"]
        facts["torch"] = {"version": tc.__version__, "gpu": tc.cuda.get_device_name(0)}
    return facts


def release_gpu(gpu: dict[str, Any]) -> None:
    """Hand cached GPU and pinned host memory back between configurations."""
    gc.collect()
    if "cupy" in gpu:
        gpu["cupy"].get_default_memory_pool().free_all_blocks()
        gpu["cupy"].get_default_pinned_memory_pool().free_all_blocks()
    if "torch" in gpu:
        gpu["torch"].cuda.empty_cache()


def pinned_empty(cp: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A numpy array in pinned (page-locked) host memory."""
    dtype = np.dtype(dtype)
    try:
        import cupyx

        return cupyx.empty_pinned(shape, dtype)
    except (ImportError, AttributeError):
        count = int(np.prod(shape))
        return np.frombuffer(cp.cuda.alloc_pinned_memory(count * dtype.itemsize), dtype, count).reshape(shape)


def cupy_argsort_variants(cp: Any, a: np.ndarray, check: Callable) -> list[Variant]:
    """cupy.argsort host to host: from a pageable numpy array, and between pinned host buffers."""
    def pageable() -> np.ndarray:
        return cp.asnumpy(cp.argsort(cp.asarray(a)))  # a synchronous copy back

    pin_in = pinned_empty(cp, a.shape, a.dtype)
    pin_in[...] = a
    pin_out = pinned_empty(cp, a.shape, np.int64)
    stream = cp.cuda.Stream(non_blocking=True)

    def pinned() -> np.ndarray:
        with stream:
            x = cp.empty(a.shape, a.dtype)
            x.set(pin_in, stream=stream)
            cp.argsort(x).get(out=pin_out, stream=stream)
        stream.synchronize()
        return pin_out

    return [Variant("cupy.argsort pageable", pageable, check), Variant("cupy.argsort pinned", pinned, check)]


def cupy_kv(cp: Any, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Key-value sort in cupy, pageable host arrays in and out."""
    kd, vd = cp.asarray(k), cp.asarray(v)
    p = cp.argsort(kd)
    return cp.asnumpy(kd[p]), cp.asnumpy(vd[p])


def torch_sort(tc: Any, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """torch.sort(stable=True) along the last axis, pageable: values and indices back as numpy."""
    vals, idx = tc.sort(tc.from_numpy(a).to("cuda"), dim=-1, stable=True)
    return vals.cpu().numpy(), idx.cpu().numpy()


def torch_kv(tc: Any, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Key-value sort in torch (stable), pageable host arrays in and out."""
    keys, idx = tc.sort(tc.from_numpy(k).to("cuda"), stable=True)
    return keys.cpu().numpy(), tc.from_numpy(v).to("cuda")[idx].cpu().numpy()


# -- running a configuration ---------------------------------------------------------


@dataclass
class State:
    """What carries over between sizes: variants skipped, the last baseline times, rows, wrong results."""

    slow: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (part, dtype, name) -> why
    baseline: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)  # (part, dtype) -> (n, s)
    rows: list[dict] = field(default_factory=list)
    wrong: int = 0


def warm_up(cfg: Config, v: Variant, ref: dict) -> dict:
    """Run ``v`` once (untimed) and check it: {"correct", "stable", "warm_seconds"} or {"error"}."""
    t0 = time.perf_counter()
    try:
        res = v.run()
    except Exception as e:  # an OOM of a GPU library, say; hpu's failures are wrong results
        return {"correct": False if v.strict else None, "error": f"{type(e).__name__}: {e}"}
    warm = time.perf_counter() - t0
    ok, exact = v.check(res, ref)
    del res
    return {"correct": exact if v.strict else ok, "stable": exact, "warm_seconds": warm}


def report_wrong(cfg: Config, v: Variant, verdict: dict, state: State) -> None:
    """Print a wrong hpu result loudly (stdout and stderr) and record it, untimed."""
    state.wrong += 1
    why = verdict.get("error", "differs from numpy's stable result")
    msg = f"!!! WRONG RESULT: {v.name} {cfg.dtype} {cfg.label}: {why} (not timed)"
    print(msg, flush=True)
    print(msg, file=sys.stderr, flush=True)
    state.rows.append({"part": cfg.part, "dtype": cfg.dtype, "n": cfg.n, "size": cfg.label, "variant": v.name,
                       "seconds": None, "correct": False, "planned": cfg.planned, **cfg.extra, **verdict})


def reference(cfg: Config, state: State) -> tuple[dict, dict | None]:
    """numpy's stable result (the baseline's warm-up) and the baseline's verdict (None when skipped as slow)."""
    t0 = time.perf_counter()
    res = cfg.baseline.run()
    warm = time.perf_counter() - t0
    ref = cfg.reference(res)
    del res
    skipped = (cfg.part, cfg.dtype, cfg.baseline.name) in state.slow
    return ref, None if skipped else {"correct": True, "stable": True, "warm_seconds": warm}


def checked_variants(cfg: Config, state: State) -> dict[str, tuple[Variant, dict]]:
    """Warm up and check every variant not skipped; the ones to time, with their verdicts."""
    ref, base = reference(cfg, state)
    timed = {cfg.baseline.name: (cfg.baseline, base)} if base else {}
    for v in cfg.variants:
        key = (cfg.part, cfg.dtype, v.name)
        if key in state.slow:
            continue
        verdict = warm_up(cfg, v, ref)
        if v.strict and not verdict["correct"]:
            report_wrong(cfg, v, verdict, state)
        elif "error" in verdict:
            print(f"# {v.name} {cfg.dtype} {cfg.label}: {verdict['error']}; skipped from here on", flush=True)
            state.slow[key] = "error"
        else:
            timed[v.name] = (v, verdict)
    return timed


def baseline_seconds(cfg: Config, samples: dict[str, list[float]], state: State) -> tuple[float | None, bool]:
    """The baseline's median, or its n log n extrapolation from the last size it ran at (estimated: True)."""
    key = (cfg.part, cfg.dtype)
    if cfg.baseline.name in samples:
        t = float(np.median(samples[cfg.baseline.name]))
        state.baseline[key] = (cfg.n, t)
        return t, False
    if key not in state.baseline:
        return None, False
    n0, t0 = state.baseline[key]
    return t0 * cfg.n * math.log2(cfg.n) / (n0 * math.log2(n0)), True


def run_config(cfg: Config, args: argparse.Namespace, state: State, seed: int) -> None:
    """Check, time in shuffled rounds, print and record every variant of ``cfg``."""
    timed = checked_variants(cfg, state)
    base = timed.get(cfg.baseline.name, (None, None))[1]
    warm = base["warm_seconds"] if base else math.inf
    rounds = max(args.repeats, min(SMALL_ROUNDS, int(SMALL_SECONDS / max(warm, 1e-9))))
    if args.back_to_back:  # steady state: each variant's calls one after another
        samples = {k: timings(v.run, rounds) for k, (v, _) in timed.items()}
    else:
        samples = shuffled_rounds({k: v.run for k, (v, _) in timed.items()}, rounds, np.random.default_rng(seed))
    t_base, estimated = baseline_seconds(cfg, samples, state)
    for name, (v, verdict) in timed.items():
        t = float(np.median(samples[name]))
        ratio = t_base / t if t_base else None
        planned = cfg.planned if v.default else None
        mark = "~" if estimated and ratio else " "
        print(f"{cfg.part:<7} {cfg.dtype:>8} {cfg.label:>10} {name:<22} {t * 1e3:10.2f} "
              f"{mark}{ratio if ratio else float('nan'):8.3f} {'ok' if verdict['correct'] else 'BAD':>4}"
              f"{'' if verdict['stable'] else ' (unstable)'}{f'  [{planned}]' if planned else ''}", flush=True)
        state.rows.append({"part": cfg.part, "dtype": cfg.dtype, "n": cfg.n, "size": cfg.label, "variant": name,
                           "seconds": t, "samples": samples[name], "rounds": rounds,
                           "baseline_seconds": t_base, "baseline_estimated": estimated,
                           "speedup_vs_numpy_stable": ratio, "correct": verdict["correct"],
                           "stable": verdict["stable"], "planned": planned, **cfg.extra})
        if t > args.slow and (cfg.part, cfg.dtype, name) not in state.slow:
            state.slow[(cfg.part, cfg.dtype, name)] = "slow"
            print(f"# {name} {cfg.dtype}: {t:.3g} s > --slow {args.slow:g} s: skipped at larger n", flush=True)


def print_rows_ratio(state: State) -> None:
    """Print the default ``hpu.sort`` of the rows against ``np.sort(axis=-1)`` of numpy's default kind (issue 16's
    yardstick, where the table's ratios are to the stable kind), from the rows part's medians just recorded."""
    t = {r["variant"]: r["seconds"] for r in state.rows if r["part"] == "rows" and r.get("seconds")}
    if "hpu.sort" in t and "np.sort" in t:
        print(f"# rows: hpu.sort {t['hpu.sort'] * 1e3:.2f} ms, {t['np.sort'] / t['hpu.sort']:.1f}x np.sort's "
              f"{t['np.sort'] * 1e3:.2f} ms (numpy's default kind, one core)", flush=True)


# -- sizes, memory and the command line -----------------------------------------------


def host_bytes(part: str, n: int, itemsize: int) -> int:
    """A rough peak of host memory for one configuration (inputs, numpy's reference, hpu's buffers)."""
    if part == "argsort":
        return n * (3 * itemsize + 8 * 8)
    if part == "kv":
        return n * (4 * itemsize + 12 * 8)
    return n * 8 * itemsize


def available_gib() -> float:
    """MemAvailable of /proc/meminfo (all physical memory where there is none), in GiB."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / GIB
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


def fits(part: str, n: int, dtype: np.dtype, args: argparse.Namespace) -> bool:
    """Whether a configuration's rough memory need is under ``--max-gib`` (a skip is printed)."""
    need = host_bytes(part, n, dtype.itemsize) / GIB
    if need <= args.max_gib:
        return True
    print(f"# {part} {dtype.name} n={n}: skipped, needs ~{need:.3g} GiB > --max-gib {args.max_gib:.3g}", flush=True)
    return False


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-log", type=int, default=20, help="smallest n = 2^min-log (default 20)")
    ap.add_argument("--max-log", type=int, default=28, help="largest n = 2^max-log (default 28)")
    ap.add_argument("--dtypes", default="int32,float64", help="comma-separated key dtypes (default int32,float64)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    add_runtime_arguments(ap)
    rows = ap.add_argument_group("rows part")
    rows.add_argument("--rows-log", type=int, default=14, help="2^rows-log rows (default 14)")
    rows.add_argument("--cols-log", type=int, default=10, help="2^cols-log float32 a row (default 10)")
    rows.add_argument("--row-alphas", type=lambda v: [float(a) for a in v.split(",") if a], default=[0.05, 0.1, 0.2],
                      help="comma-separated CPU shares of the rows forced beside the device's (default 0.05,0.1,0.2)")
    timing = ap.add_argument_group("timing")
    timing.add_argument("--repeats", type=int, default=3,
                        help="timed rounds (more for sorts under 20 ms); the median is reported (default 3)")
    timing.add_argument("--back-to-back", action="store_true",
                        help="time each variant's calls one after another (steady state), after one untimed call, "
                             "rather than in shuffled rounds, each call after an idle pause (the default)")
    timing.add_argument("--slow", type=float, default=20.0,
                        help="skip a variant at larger n once its median took longer than this many seconds "
                             "(default 20)")
    timing.add_argument("--max-gib", type=float, default=None,
                        help="skip sizes whose rough host-memory need exceeds this (default 90%% of available memory)")
    timing.add_argument("--seed", type=int, default=0, help="random seed of the keys (default 0)")
    timing.add_argument("--no-gpu-libs", action="store_true",
                        help="leave out cupy's and torch's baselines (their CUDA contexts' work between hpu's calls)")
    args = ap.parse_args(argv)
    args.dtypes = [np.dtype(d) for d in args.dtypes.split(",") if d]
    args.parts = [p for p in args.parts.split(",") if p]
    if set(args.parts) - set(PARTS):
        ap.error(f"--parts: unknown {sorted(set(args.parts) - set(PARTS))}; choose from {','.join(PARTS)}")
    if args.repeats < 1 or args.min_log < 1 or args.max_log < args.min_log:
        ap.error("need --repeats >= 1 and 1 <= --min-log <= --max-log")
    if args.max_gib is None:
        args.max_gib = 0.9 * available_gib()
    return args


def machine_meta(rt: hpu.Runtime, args: argparse.Namespace, argv: list[str] | None, gpu: dict) -> dict:
    """Date, command, device, host, threads, profile, versions; printed as the table's header."""
    meta = {
        "date": utc_now(),
        "command": command_line("bench_argsort.py", argv),
        "device": rt.device_name,
        "host": host_description(),
        "cores": os.cpu_count(),
        "threads": rt.threads,
        "profile": rt.profile.name,
        "calibrated": rt.calibrated,
        "numpy": np.__version__,
        "streaming copies": streaming_available(),
        "pyopencl": cl.VERSION_TEXT,
        "python": platform.python_version(),
        "hpu": hpu.__version__,
        "baseline": "numpy stable (argsort kind='stable' / sort kind='stable'), one core",
        "timing": "back to back" if args.back_to_back else "shuffled rounds after idle pauses",
        **gpu_facts(gpu),
    }
    print("# " + "  ".join(f"{k}: {v}" for k, v in meta.items()))
    if not gpu:
        print("# no cupy / torch with CUDA: GPU-library rows skipped")
    print(f"{'part':<7} {'dtype':>8} {'n':>10} {'variant':<22} {'time ms':>10} {'vs stable':>9} {'ok':>4}"
          "  [hpu's planned strategy]", flush=True)
    return meta


def run_1d_parts(args: argparse.Namespace, rt: hpu.Runtime, gpu: dict, state: State) -> None:
    """The argsort and key-value parts, size by size and dtype by dtype (arrays freed between them)."""
    rng = np.random.default_rng(args.seed)
    for lg in range(args.min_log, args.max_log + 1):
        n = 1 << lg
        for dt in args.dtypes:
            keys = make_keys(dt, n, rng)
            if "argsort" in args.parts and fits("argsort", n, dt, args):
                run_config(argsort_config(keys, rt, gpu), args, state, seed=lg)
                release_gpu(gpu)
            if "kv" in args.parts and fits("kv", n, dt, args):
                values = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, n, dtype=np.int64)
                run_config(kv_config(keys, values, rt, gpu), args, state, seed=lg)
                del values
                release_gpu(gpu)
            del keys
            gc.collect()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    gpu = {} if args.no_gpu_libs else gpu_libraries()
    state = State()
    with hpu.Runtime(args.device, profile=args.profile, threads=args.threads) as rt:
        meta = machine_meta(rt, args, argv, gpu)
        run_1d_parts(args, rt, gpu, state)
        if "rows" in args.parts:
            x = np.random.default_rng(args.seed).standard_normal((1 << args.rows_log, 1 << args.cols_log),
                                                                  dtype=np.float32)
            if fits("rows", x.size, x.dtype, args):
                run_config(rows_config(x, rt, gpu, args.row_alphas), args, state, seed=args.rows_log)
                print_rows_ratio(state)
            del x
            release_gpu(gpu)
    if state.wrong:
        print(f"!!! {state.wrong} WRONG hpu RESULT(S): see the rows marked correct=false", file=sys.stderr)
    if args.json:
        print(f"wrote {write_json(args.json, {'meta': meta, 'rows': state.rows})}")
    return 1 if state.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
