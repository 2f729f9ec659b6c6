"""Many threads share one Runtime: every sort equals numpy's stable sort bit for bit (every argsort numpy's stable
argsort), every tabu trajectory the single-threaded one.

Also a script for the benchmark machines::

    python tests/test_stress.py --threads 16 --calls 100 [--device gpu]

prints the calls made, the wrong results (0 expected) and the wall time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import hpu
from hpu.tabu import QAP, tabu_search

DATA = Path(__file__).parents[1] / "experiments/data/qaplib"
DTYPES = (np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64)
TABU = [dict(strategy="cpu"), dict(strategy="gpu"), dict(strategy="hybrid", alpha=0.5, transfer_level=0,
                                                        cpu_chunks=1)]


def _keys(rng: np.random.Generator, max_log: int) -> np.ndarray:
    """Log-uniform length in [0, 2**max_log], one of the six dtypes, with duplicates (and NaN, -0.0 for floats)."""
    n = int(2 ** rng.uniform(0, max_log)) if rng.random() > 0.05 else int(rng.integers(0, 2))
    dt = np.dtype(DTYPES[rng.integers(len(DTYPES))])
    if dt.kind == "f":
        a = rng.standard_normal(n).astype(dt)
        a[rng.random(n) < 0.01] = np.nan
        a[rng.random(n) < 0.01] = -0.0
        return a
    return rng.integers(0, max(2, n // 4), n).astype(dt)


def _tabu_reference(runtime: hpu.Runtime) -> tuple[QAP, dict[int, np.ndarray]]:
    qap = QAP.from_qaplib(DATA / "tai12a.dat")
    return qap, {seed: tabu_search(qap, iterations=40, tenure=8, seed=seed, strategy="cpu", runtime=runtime).moves
                 for seed in range(4)}


def _worker(runtime: hpu.Runtime, seed: int, calls: int, max_log: int, tabu: tuple[QAP, dict]) -> list[str]:
    """``calls`` calls on the shared runtime; returns a description of each wrong result."""
    rng = np.random.default_rng(seed)
    qap, ref = tabu
    wrong = []
    for i in range(calls):
        if i % 10 == 9:
            s = int(rng.integers(len(ref)))
            kw = TABU[int(rng.integers(len(TABU)))] if runtime.has_device else TABU[0]
            moves = tabu_search(qap, iterations=40, tenure=8, seed=s, runtime=runtime, **kw).moves
            if not np.array_equal(moves, ref[s]):
                wrong.append(f"thread {seed} call {i}: tabu {kw} seed {s} took other moves")
            continue
        a = _keys(rng, max_log)
        before = a.copy()
        if i % 10 == 4:  # the numpy-style argsort on the same runtime
            if not np.array_equal(hpu.argsort(a, runtime=runtime), np.argsort(before, kind="stable")):
                wrong.append(f"thread {seed} call {i}: argsort of {a.size} {a.dtype} differs")
            continue
        strategy = str(rng.choice(["auto", "cpu", "gpu", "advanced"])) if runtime.has_device else "cpu"
        out = hpu.hybrid_mergesort(a, strategy=strategy, runtime=runtime)
        exp = np.sort(before, kind="stable")
        if out.dtype != exp.dtype or not np.array_equal(out.view(np.uint8), exp.view(np.uint8)):
            wrong.append(f"thread {seed} call {i}: sort of {a.size} {a.dtype} ({strategy}) differs")
        if not np.array_equal(a.view(np.uint8), before.view(np.uint8)):
            wrong.append(f"thread {seed} call {i}: input modified")
    return wrong


def stress(runtime: hpu.Runtime, threads: int, calls: int, max_log: int = 20) -> list[str]:
    """``threads`` threads make ``calls`` calls each on ``runtime``; returns the wrong results (empty when all right)."""
    tabu = _tabu_reference(runtime)
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        futures = [ex.submit(_worker, runtime, seed, calls, max_log, tabu) for seed in range(threads)]
        return [w for f in futures for w in f.result()]


@pytest.mark.slow
def test_sixteen_threads_share_one_runtime(runtime):
    assert stress(runtime, threads=16, calls=100, max_log=20) == []


def test_threads_share_the_default_runtime():
    """Calls without runtime= from many threads get one default runtime, made once."""
    seen = []

    def call(seed: int) -> bool:
        a = np.random.default_rng(seed).integers(0, 100, 5000).astype(np.int64)
        seen.append(id(hpu.default_runtime()))
        return np.array_equal(hpu.hybrid_mergesort(a), np.sort(a, kind="stable"))

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        assert all(ex.map(call, range(32)))
    assert len(set(seen)) == 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Stress one shared hpu.Runtime from many threads.")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--calls", type=int, default=100, help="calls per thread (every tenth a short tabu search)")
    ap.add_argument("--max-log", type=int, default=20, help="largest sort is 2**max_log keys")
    ap.add_argument("--device", default=None, help="OpenCL device (default: hpu's default choice)")
    args = ap.parse_args(argv)
    with hpu.Runtime(args.device) as rt:
        t = time.perf_counter()
        wrong = stress(rt, args.threads, args.calls, args.max_log)
        wall = time.perf_counter() - t
    print(f"device: {rt.device_name}; calibrated profile: {rt.calibrated}; threads: {args.threads}; "
          f"calls: {args.threads * args.calls}; wrong results: {len(wrong)}; wall: {wall:.1f} s")
    for w in wrong[:20]:
        print("  " + w)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
