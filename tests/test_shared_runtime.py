"""One hpu.Runtime shared by many threads, and the lazily made default runtime.

What the project promises for a shared runtime: every result right (bit for bit numpy's stable sort or argsort),
inputs never modified, results from the recycled host pool never handed out again while the caller still holds
them (the whole array or only a view of it), results in pinned memory usable as inputs, a closed runtime refusing
new calls with RuntimeClosedError while calls that were running end right, and no deadlock.

tests/test_stress.py, tests/test_hostmem.py and tests/test_faults.py cover one function at a time or a single
thread; these mix every sort entry point, dtype and size on many threads at once, keep every result (or only a
view of it) alive and check it again after the other threads' calls, race close() against calls of every kind,
and race the default runtime's creation and hpu.using_runtime blocks; close() from a pool task, close() during calls
that run searches on executors of their own, the first calls of two sort functions in two threads at once, and
0- and 1-element calls on a closed runtime.
"""

from __future__ import annotations

import concurrent.futures
import gc
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import same_bits

import hpu
import hpu.sorting  # noqa: F401  imported here, before any thread: its first import from several threads at once
# is a bug of its own (test_first_use_of_two_sort_functions_from_two_threads_at_once), which would make the
# thread tests below fail now and then when one of them is the process's first sort
from hpu.core.hostmem import MIN_POOLED_BYTES

ROOT = Path(__file__).parents[1]
QAPLIB = ROOT / "experiments/data/qaplib"
PROFILE = hpu.Profile(p=2, g=64, gamma=0.5, cpu_op_seconds=3e-9)  # uncalibrated: "auto" keeps to the CPU
POOLED_INT32 = MIN_POOLED_BYTES // 4 + 3  # an int32 result the host pool serves (at least MIN_POOLED_BYTES)
DTYPES = ("int32", "uint32", "int64", "uint64", "float32", "float64", "float16", "int16", "bool", "M8[s]")
JOIN = 120  # seconds a worker thread may take before the test calls it a deadlock


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """:func:`same_bits` of any two arrays, strided views included."""
    return same_bits(np.ascontiguousarray(a), np.ascontiguousarray(b))


@pytest.fixture
def shared(runtime):
    """A runtime of its own on the test device (or CPU-only without one): 2 CPU threads, 2 idle leases kept, so that
    16 threads make and drop leases; closed at the end."""
    rt = hpu.Runtime(runtime.device if runtime.has_device else "none", profile=PROFILE, threads=2, max_idle_leases=2)
    try:
        yield rt
    finally:
        rt.close()


def _strategies(rt: hpu.Runtime) -> list[str]:
    return ["auto", "cpu", "gpu", "advanced", "keyrange"] if rt.has_device else ["auto", "cpu"]


def _keys(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        a = (rng.standard_normal(n) * 100).astype(dt)
        a[rng.random(n) < 0.01] = np.nan
        a[rng.random(n) < 0.01] = -0.0
        return a
    if dt.kind == "b":
        return rng.random(n) < 0.5
    if dt.kind == "M":
        return rng.integers(-1000, 1000, n).astype(dt)
    return rng.integers(0, max(2, n // 4), n).astype(dt)


def _one_call(rt: hpu.Runtime, rng: np.random.Generator, strategies: list[str]) -> tuple[str, list, list]:
    """A random call on ``rt``: (what, results, expected) with the expected values computed from a copy first."""
    dtype = DTYPES[rng.integers(len(DTYPES))]
    n = int(rng.choice([0, 1, 2, 17, 1000, 1 << 15, POOLED_INT32]))
    a = _keys(rng, n, dtype)
    before = a.copy()
    strategy = strategies[rng.integers(len(strategies))]
    kind = int(rng.integers(5))
    what = f"{['sort', 'argsort', 'sort_by_key', 'hybrid_mergesort', 'rows'][kind]} of {n} {dtype} ({strategy})"
    order = np.argsort(before, kind="stable")
    if kind == 0:
        got, exp = [hpu.sort(a, strategy=strategy, runtime=rt)], [before[order]]
    elif kind == 1:
        got, exp = [hpu.argsort(a, strategy=strategy, runtime=rt)], [order]
    elif kind == 2:
        ids, weights = np.arange(n)[::-1].copy(), rng.standard_normal(n).astype(np.float32)
        k, (v1, v2) = hpu.sort_by_key(a, (ids, weights), strategy=strategy, runtime=rt)
        got, exp = [k, v1, v2], [before[order], ids[order], weights[order]]
    elif kind == 3 and before.dtype.name in ("int32", "uint32", "int64", "uint64", "float32", "float64"):
        got, exp = [hpu.hybrid_mergesort(a, strategy=strategy, runtime=rt)], [before[order]]
    else:  # rows of 64 keys, sorted along the last axis
        m = 64
        rows = a[: n - n % m].reshape(-1, m)
        got, exp = [hpu.sort(rows, strategy=strategy, runtime=rt)], [np.sort(rows.copy(), axis=-1, kind="stable")]
    assert same_bits(a, before), f"{what}: input modified"
    return what, got, exp


def _run_threads(target, count: int, *args) -> list[BaseException]:
    """``target(i, *args)`` on ``count`` threads started together; their exceptions; fails on a thread that hangs."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count, timeout=JOIN)

    def run(i: int) -> None:
        try:
            barrier.wait()
            target(i, *args)
        except BaseException as e:  # reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + JOIN
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread did not end: deadlock"
    return errors


# -- many threads, one runtime -------------------------------------------------------------------------------------


def test_sixteen_threads_mixed_calls_keep_every_result_right(shared, frozen_heap):
    """16 threads, every entry point, dtype and size at once on one runtime; each thread keeps all its results and
    checks them again after each of its calls (another thread's call must never write into a result still held),
    and every result is checked once more after all threads end, after a collection and after close()."""
    kept: list[tuple[str, list, list]] = []
    lock = threading.Lock()
    strategies = _strategies(shared)

    def worker(i: int) -> None:
        rng = np.random.default_rng(1000 + i)
        mine = []
        for c in range(8):
            what, got, exp = _one_call(shared, rng, strategies)
            for g, e in zip(got, exp):
                assert same_bits(g, e), f"thread {i} call {c}: {what} is wrong"
            mine.append((what, got, exp))
            if c % 3 == 2:
                gc.collect()
            for w, gs, es in mine:
                assert all(same_bits(g, e) for g, e in zip(gs, es)), f"thread {i}: a kept {w} was overwritten"
        with lock:
            kept.extend(mine)

    errors = _run_threads(worker, 16)
    assert not errors, errors[:3]
    gc.collect()
    for what, gs, es in kept:
        assert all(same_bits(g, e) for g, e in zip(gs, es)), f"{what} was overwritten after the threads ended"
    shared.close()  # results outlive the runtime (their blocks are freed when they are)
    for what, gs, es in kept:
        assert all(same_bits(g, e) for g, e in zip(gs, es)), f"{what} changed when the runtime closed"
    del kept
    gc.collect()


def test_results_held_only_through_views_are_never_recycled(shared):
    """Workers of a concurrent.futures pool keep only small views of their pooled results (every base array
    dropped at once); a second round of calls of the same sizes (which recycles every free block) must not
    write into the memory those views still hold."""
    strategies = _strategies(shared)
    rng0 = np.random.default_rng(7)
    inputs = [_keys(rng0, POOLED_INT32 + int(rng0.integers(0, 5000)), dt)
              for dt in ("int32", "float32", "int64", "float64") for _ in range(3)]

    def views(k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        a = inputs[k]
        s = strategies[k % len(strategies)]
        order = np.argsort(a, kind="stable")
        out = hpu.sort(a, strategy=s, runtime=shared)
        perm = hpu.argsort(a, strategy=s, runtime=shared)
        keys, vals = hpu.sort_by_key(a, np.arange(a.size), strategy=s, runtime=shared)
        held = [(out[5:9], a[order][5:9]), (out[-3:][::-1], a[order][-3:][::-1]), (perm[100:140:7], order[100:140:7]),
                (vals[-10:], order[-10:]), (keys.reshape(-1)[1:4], a[order][1:4]),
                (out.view(np.uint8)[:16], a[order].view(np.uint8)[:16])]
        return [(v, e.copy()) for v, e in held]  # out, perm, keys and vals go: only the views hold their blocks

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        held = [v for vs in ex.map(views, range(len(inputs)), timeout=JOIN) for v in vs]
        gc.collect()
        assert all(_same(v, e) for v, e in held)
        again = [v for vs in ex.map(views, range(len(inputs)), timeout=JOIN) for v in vs]
    gc.collect()
    for v, e in held + again:
        assert _same(v, e), "a block was handed out again while a view of its result was alive"
    assert shared.host_pool.total_bytes > 0  # the results did come from the pool


def test_results_passed_back_in_as_inputs(shared):
    """Results (pinned pooled memory when the device sorted them alone) passed back in as inputs, by 8 threads at
    once: the sorts read them (the DMA engine directly) and never write into them; results right."""
    strategies = _strategies(shared)

    def worker(i: int) -> None:
        rng = np.random.default_rng(50 + i)
        dt = ("int32", "float32", "int64", "float64")[i % 4]
        a = _keys(rng, POOLED_INT32 + 64 * int(rng.integers(0, 64)), dt)
        s = strategies[i % len(strategies)]
        first = hpu.hybrid_mergesort(a[::-1].copy(), strategy=s, runtime=shared)  # sorted, maybe pinned
        snap = first.copy()
        rev = hpu.sort(first[::-1], strategy=s, runtime=shared)  # a strided view of a result
        perm = hpu.argsort(first, strategy=s, runtime=shared)
        keys, (vals, same) = hpu.sort_by_key(first, (perm, first), strategy=s, runtime=shared)
        rows = hpu.sort(first[: first.size // 64 * 64].reshape(-1, 64), strategy=s, runtime=shared)
        again = hpu.hybrid_mergesort(first, strategy="gpu" if shared.has_device else "cpu", runtime=shared)
        assert same_bits(first, snap), f"thread {i}: an input in pooled memory was modified"
        order = np.argsort(snap, kind="stable")
        assert same_bits(rev, np.sort(snap[::-1], kind="stable"))
        assert same_bits(perm, order) and same_bits(keys, snap[order]) and same_bits(same, snap[order])
        assert same_bits(vals, order[order])
        assert same_bits(rows, np.sort(snap[: snap.size // 64 * 64].reshape(-1, 64), axis=-1, kind="stable"))
        assert same_bits(again, np.sort(snap, kind="stable"))

    errors = _run_threads(worker, 8)
    assert not errors, errors[:3]


def test_garbage_collection_during_calls(shared, frozen_heap):
    """A thread collecting garbage all the time, a low collection threshold, and results held only by reference
    cycles (freed by whichever thread collects, possibly one inside the pool or a lease): no deadlock, all right."""
    strategies = _strategies(shared)
    stop = threading.Event()

    class Holder:
        pass

    def collector() -> None:
        while not stop.is_set():
            gc.collect()
            time.sleep(0.002)

    def worker(i: int) -> None:
        rng = np.random.default_rng(300 + i)
        for c in range(6):
            h = Holder()
            h.me = h
            h.what, h.got, h.exp = _one_call(shared, rng, strategies)
            assert all(same_bits(g, e) for g, e in zip(h.got, h.exp)), h.what
            del h

    threshold = gc.get_threshold()
    col = threading.Thread(target=collector, daemon=True)
    try:
        gc.set_threshold(7, 3, 3)
        col.start()
        errors = _run_threads(worker, 8)
    finally:
        stop.set()
        gc.set_threshold(*threshold)
        col.join(timeout=30)
    assert not errors, errors[:3]
    gc.collect()


# -- close() -------------------------------------------------------------------------------------------------------


def test_close_racing_with_calls_of_every_kind(runtime):
    """8 threads call every entry point in a loop while close() comes at a different moment each round: each call
    is right or raises RuntimeClosedError (nothing else), no thread and no close() hangs, every thread is refused
    in the end, and results kept stay right after close() and are freed without harm."""
    for rnd in range(3):
        rt = hpu.Runtime(runtime.device if runtime.has_device else "none", profile=PROFILE, threads=2)
        strategies = _strategies(rt)
        kept: list[tuple[str, list, list]] = []
        refused: list[int] = []

        def loop(i: int) -> None:
            rng = np.random.default_rng(rnd * 100 + i)
            try:
                while True:
                    what, got, exp = _one_call(rt, rng, strategies)
                    assert all(same_bits(g, e) for g, e in zip(got, exp)), what
                    kept.append((what, got, exp))
            except hpu.RuntimeClosedError as e:
                assert "closed" in str(e)
                refused.append(i)

        errors: list[BaseException] = []

        def guarded(i: int) -> None:
            try:
                loop(i)
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=guarded, args=(i,), daemon=True) for i in range(8)]
        for t in threads:
            t.start()
        time.sleep((0.05, 0.4, 1.0)[rnd])
        closer = threading.Thread(target=rt.close, daemon=True)
        closer.start()
        closer.join(timeout=JOIN)
        assert not closer.is_alive(), "close() hung"
        for t in threads:
            t.join(timeout=JOIN)
        assert not any(t.is_alive() for t in threads), "a call hung after close()"
        assert not errors, errors[:3]
        assert sorted(refused) == list(range(8))
        with pytest.raises(hpu.RuntimeClosedError, match="closed"):
            hpu.sort(np.arange(100)[::-1], runtime=rt)
        for what, gs, es in kept:
            assert all(same_bits(g, e) for g, e in zip(gs, es)), f"{what} changed after close()"
        del kept
        gc.collect()


@pytest.mark.parametrize("call", ["sort", "argsort", "sort_by_key", "rows", "paper", "execute", "empty_rows"])
def test_every_entry_point_refuses_a_closed_runtime(runtime, call):
    rt = hpu.Runtime(runtime.device if runtime.has_device else "none", profile=PROFILE, threads=1)
    a = np.random.default_rng(0).integers(0, 100, 4096).astype(np.int32)
    rt.close()
    calls = {
        "sort": lambda: hpu.sort(a, runtime=rt),
        "argsort": lambda: hpu.argsort(a, runtime=rt),
        "sort_by_key": lambda: hpu.sort_by_key(a, np.arange(a.size), runtime=rt),
        "rows": lambda: hpu.sort(a.reshape(64, 64), runtime=rt),
        "paper": lambda: hpu.hybrid_mergesort(a, mode="paper", strategy="cpu", runtime=rt),
        "execute": lambda: hpu.execute(hpu.array_sum_spec().plan(a.size, np.int32), a, rt, strategy="cpu"),
        "empty_rows": lambda: hpu.sort(np.zeros((0, 5)), runtime=rt),
    }
    with pytest.raises(hpu.RuntimeClosedError, match="closed"):
        calls[call]()


@pytest.mark.parametrize("call", ["hybrid_mergesort-1", "hybrid_mergesort-0", "argsort-0"])
def test_tiny_calls_on_a_closed_runtime_are_refused_too(call):
    """A closed runtime refuses 0- and 1-element calls as it refuses others (they returned before asking it)."""
    rt = hpu.Runtime("none", profile=PROFILE, threads=1)
    rt.close()
    fn, n = call.rsplit("-", 1)
    with pytest.raises(hpu.RuntimeClosedError, match="closed"):
        getattr(hpu, fn)(np.arange(int(n), dtype=np.float64), runtime=rt)


@pytest.mark.parametrize("entry", ["tabu_search_many", "hybrid_ea"])
def test_close_waits_for_a_running_multi_search_call(entry):
    """tabu_search_many and hybrid_ea run their searches on executors of their own: close() from another thread
    waits for them and the call ends right (their searches were refused once close() began)."""
    from hpu.tabu import QAP, hybrid_ea, tabu_search_many

    qap = QAP.from_qaplib(QAPLIB / "tai12a.dat")
    rt = hpu.Runtime("none", profile=PROFILE, threads=2)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            if entry == "tabu_search_many":
                outcome["value"] = tabu_search_many(qap, seeds=range(300), iterations=100, tenure=8, runtime=rt,
                                                    strategy="cpu")
            else:
                outcome["value"] = hybrid_ea(qap, population=4, generations=60, ls_iterations=50, seed=1, runtime=rt,
                                             strategy="cpu", concurrency=4)
        except BaseException as e:
            outcome["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not rt._active and t.is_alive() and time.monotonic() < deadline:  # the call has begun
        time.sleep(0.001)
    time.sleep(0.2)
    assert t.is_alive(), "the call ended before close(): make it longer"
    rt.close()  # must wait for the running call, which must end right
    t.join(timeout=JOIN)
    assert not t.is_alive()
    assert "error" not in outcome, repr(outcome.get("error"))
    assert outcome["value"] is not None


_CLOSE_FROM_POOL = textwrap.dedent("""
    import threading, time, numpy as np, hpu
    rt = hpu.Runtime(profile=hpu.Profile(p=2, g=64, gamma=0.5, cpu_op_seconds=3e-9), threads=1)
    a = np.random.default_rng(0).integers(0, 1000, 1 << 16).astype(np.int32)
    assert np.array_equal(hpu.hybrid_mergesort(a, strategy="gpu", runtime=rt), np.sort(a))  # kernels built
    # A task of the runtime's own pool closes it (supported: see Runtime.close) a moment after another thread's
    # sort has begun; the sort's staging tasks queue behind it on the pool's only worker.
    closing = rt.pool.submit(lambda: (time.sleep(0.3), rt.close()))
    out = hpu.hybrid_mergesort(a, strategy="gpu", runtime=rt)
    assert np.array_equal(out, np.sort(a))
    closing.result(timeout=30)
    try:  # closed, and released by the sort's thread as its call ended
        hpu.hybrid_mergesort(a, runtime=rt)
    except hpu.RuntimeClosedError:
        print("OK")
""")


def test_close_from_a_pool_task_while_another_thread_sorts_does_not_deadlock(runtime):
    if not runtime.has_device:
        pytest.skip("the device share's staging tasks need an OpenCL device")
    try:
        proc = subprocess.run([sys.executable, "-c", _CLOSE_FROM_POOL], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)  # a few seconds with a cold kernel cache
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: the sort and close() from a pool task waited for each other (killed after 120 s)")
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-2000:]


_FIRST_IMPORTS = textwrap.dedent("""
    import importlib.machinery, sys, threading, time
    import numpy as np
    import hpu

    class SlowInit:  # hpu.sorting's __init__ starts 0.3 s late (a cold disk, a .pyc compiled): a wider window
        def __init__(self, inner): self.inner = inner
        def create_module(self, spec): return self.inner.create_module(spec)
        def exec_module(self, module):
            time.sleep(0.3)
            self.inner.exec_module(module)

    class Finder:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name != "hpu.sorting":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            spec.loader = SlowInit(spec.loader)
            return spec

    sys.meta_path.insert(0, Finder)
    rt = hpu.Runtime("none", threads=1)
    errors = []

    def first_use(name, delay):
        time.sleep(delay)
        try:
            a = np.arange(10)[::-1]
            out = getattr(hpu, name)(a, runtime=rt)
            assert np.array_equal(out, np.argsort(a) if name == "argsort" else np.sort(a))
        except BaseException as e:
            errors.append(f"{name}: {e!r}")

    ts = [threading.Thread(target=first_use, args=(name, delay))
          for name, delay in ((sys.argv[1], 0.0), (sys.argv[2], 0.1))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not any(t.is_alive() for t in ts), "hung"
    print(errors or "OK")
""")


def _first_uses(first: str, second: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _FIRST_IMPORTS, first, second], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_first_use_of_one_sort_function_from_two_threads_at_once():
    """The control of the test below: the same slow import, both threads asking for hybrid_mergesort: right."""
    proc = _first_uses("hybrid_mergesort", "hybrid_mergesort")
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stdout + proc.stderr[-2000:]


def test_first_use_of_two_sort_functions_from_two_threads_at_once():
    """hybrid_mergesort and argsort first used by two threads at once (a slow import of hpu.sorting makes them
    meet): both right; Python's import deadlock detection failed both calls before hpu's lazy imports were made
    one at a time."""
    proc = _first_uses("hybrid_mergesort", "argsort")
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stdout + proc.stderr[-2000:]


# -- the default runtime --------------------------------------------------------------------------------------------


@pytest.fixture
def no_default():
    """No default runtime at the start (the previous one set aside, restored after); the ones made here closed."""
    prev = hpu.set_default_runtime(None)
    try:
        yield
    finally:
        made = hpu.set_default_runtime(prev)
        if made is not None and made is not prev:
            made.close()


def test_calls_that_numpy_alone_sorts_do_not_make_the_default_runtime(no_default):
    """Inputs of at most hpu.sorting.api.SMALL_MAX elements with the default strategy are numpy's to sort: no
    OpenCL context is made for them; the first larger call makes the default runtime."""
    from hpu.sorting.api import SMALL_MAX

    a = np.array([3.0, -0.0, np.nan, 0.0, 1.0, 3.0] * (SMALL_MAX // 6))
    order = np.argsort(a, kind="stable")
    assert same_bits(hpu.sort(a), a[order]) and same_bits(hpu.argsort(a), order)
    assert same_bits(hpu.sort_by_key(a, np.arange(a.size))[1], order)
    assert hpu.set_default_runtime(None) is None  # none was made
    big = np.tile(a, 2)
    assert same_bits(hpu.sort(big), big[np.argsort(big, kind="stable")])
    made = hpu.set_default_runtime(None)
    assert made is not None  # the larger call made it (the fixture closes it)
    hpu.set_default_runtime(made)


def test_a_call_with_its_own_runtime_does_not_wait_for_the_default_one_being_made(no_default, runtime, monkeypatch):
    """While one thread makes the default runtime (held here until the other call is done), a call given its own
    runtime on another thread runs to the end: no lock shared between calls is held while the default is made."""
    import hpu.core.runtime as core

    made, release, real = threading.Event(), threading.Event(), core.default_runtime

    def slow_default():
        made.set()
        release.wait(JOIN)
        return real()

    monkeypatch.setattr(core, "default_runtime", slow_default)
    a = np.random.default_rng(0).integers(0, 1000, 1 << 16, dtype=np.int32)
    first, other = threading.Thread(target=hpu.sort, args=(a,)), concurrent.futures.ThreadPoolExecutor(1)
    first.start()
    try:
        assert made.wait(JOIN)
        done = other.submit(hpu.sort, a, runtime=runtime)
        assert same_bits(done.result(timeout=JOIN), np.sort(a, kind="stable"))
    finally:
        release.set()
        first.join(JOIN)
        other.shutdown()


def test_sixteen_threads_racing_to_make_the_default_runtime_make_one(no_default):
    """16 threads ask for the default runtime at the same moment (none exists): one is made; then calls without
    runtime= from a concurrent.futures pool all use it and are right."""
    got: list[hpu.Runtime] = []
    errors = _run_threads(lambda i: got.append(hpu.default_runtime()), 16)
    assert not errors, errors[:3]
    assert len(got) == 16 and len({id(r) for r in got}) == 1 and not got[0].closed

    def call(seed: int) -> bool:
        rng = np.random.default_rng(seed)
        a = _keys(rng, int(rng.choice([3, 5000, 1 << 15])), ("int32", "float64", "int64")[seed % 3])
        order = np.argsort(a, kind="stable")
        assert hpu.default_runtime() is got[0]
        k, v = hpu.sort_by_key(a, np.arange(a.size))
        return same_bits(hpu.sort(a), a[order]) and same_bits(hpu.argsort(a), order) and same_bits(v, order) \
            and same_bits(k, a[order])

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        assert all(ex.map(call, range(24), timeout=JOIN))
    assert hpu.default_runtime() is got[0]


def test_calls_without_runtime_while_the_default_is_closed(no_default):
    """Threads sort without runtime= while another closes the default runtime over and over: every call is right or
    (the default it resolved was closed under it) raises RuntimeClosedError; afterwards a fresh default is made."""
    stop = threading.Event()
    closed: list[hpu.Runtime] = []
    outcomes: list[str] = []

    def closer(_: int) -> None:
        for _ in range(5):
            time.sleep(0.05)
            rt = hpu.default_runtime()
            rt.close()
            closed.append(rt)
        stop.set()

    def caller(i: int) -> None:
        rng = np.random.default_rng(700 + i)
        while not stop.is_set():
            a = _keys(rng, int(rng.choice([10, 4000, 1 << 14])), ("int32", "float32", "uint64")[i % 3])
            try:
                out = hpu.sort(a) if i % 2 else hpu.argsort(a)
            except hpu.RuntimeClosedError:
                outcomes.append("refused")
                continue
            exp = np.sort(a, kind="stable") if i % 2 else np.argsort(a, kind="stable")
            assert same_bits(out, exp)
            outcomes.append("right")

    errors = _run_threads(lambda i: closer(i) if i == 0 else caller(i), 7)
    assert not errors, errors[:3]
    assert "right" in outcomes and len(closed) == 5 and all(r.closed for r in closed)
    fresh = hpu.default_runtime()
    assert not fresh.closed and all(fresh is not r for r in closed)
    assert same_bits(hpu.sort(np.arange(50)[::-1]), np.arange(50))


def test_using_runtime_blocks_of_many_threads_nest_and_restore(no_default):
    """8 threads open and close hpu.using_runtime blocks (nested up to 3 deep) in random interleavings: while any
    block is open the default is the runtime of the latest-begun open block, a call without runtime= inside a
    block runs on a runtime (right result), and once every block has ended the default is the one from before."""
    base = hpu.Runtime("none", profile=PROFILE, threads=1)
    mine = [hpu.Runtime("none", profile=PROFILE, threads=1) for _ in range(8)]
    hpu.set_default_runtime(base)
    log_lock = threading.Lock()
    open_blocks: list[tuple[int, hpu.Runtime]] = []  # (order begun, runtime), under log_lock with the block itself
    counter = iter(range(10**9))
    bad: list[str] = []

    def check(where: str) -> None:
        with log_lock:
            want = open_blocks[-1][1] if open_blocks else base
            now = hpu.default_runtime()
            if now is not want:
                bad.append(where)

    def block(rt: hpu.Runtime, rng: np.random.Generator, depth: int) -> None:
        # Opening and logging under one lock keeps the log in the order the blocks began.
        with log_lock:
            cm = hpu.using_runtime(rt)
            cm.__enter__()
            entry = (next(counter), rt)
            open_blocks.append(entry)
        try:
            time.sleep(float(rng.uniform(0, 0.003)))
            check("inside")
            a = rng.integers(0, 50, 300)
            assert same_bits(hpu.sort(a), np.sort(a, kind="stable"))
            if depth < 3 and rng.random() < 0.5:
                block(mine[int(rng.integers(len(mine)))], rng, depth + 1)
        finally:
            with log_lock:
                open_blocks.remove(entry)
                cm.__exit__(None, None, None)
        check("after")

    def worker(i: int) -> None:
        rng = np.random.default_rng(900 + i)
        for _ in range(25):
            block(mine[i], rng, 1)

    try:
        errors = _run_threads(worker, 8)
        assert not errors, errors[:3]
        assert not bad, bad[:5]
        assert hpu.default_runtime() is base
    finally:
        for r in [base, *mine]:
            r.close()


def test_a_helper_thread_joins_a_running_call_and_close_waits_for_it():
    """Runtime.helping(): refused on a closed runtime with no call running; a helper of a running call runs calls
    after close() has begun, and close() returns only once the helper has ended."""
    rt = hpu.Runtime("none", profile=PROFILE, threads=1)
    a = np.arange(1000, 0, -1).astype(np.int64)
    began, ended = threading.Event(), []

    def helper() -> None:
        with rt.helping():
            began.set()
            time.sleep(0.3)  # close() begins meanwhile
            ended.append(np.array_equal(hpu.hybrid_mergesort(a, runtime=rt), np.sort(a)))

    with rt.call():
        t = threading.Thread(target=helper, daemon=True)
        t.start()
        assert began.wait(JOIN)
    closer = threading.Thread(target=rt.close, daemon=True)
    closer.start()
    closer.join(timeout=JOIN)
    t.join(timeout=JOIN)
    assert not closer.is_alive() and not t.is_alive() and ended == [True]
    with pytest.raises(hpu.RuntimeClosedError, match="closed"):
        with rt.helping():
            pass
