"""hpu.dask on a LocalCluster of 3 worker processes (issue 14): the sample sort equals numpy's stable sort, survives
a worker killed mid-sort, and tabu_search_many equals the searches run one by one."""

from __future__ import annotations

import os
import signal
import time
import types

import numpy as np
import pytest
from conftest import same_bits

pytest.importorskip("distributed")
import dask.array as da  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import hpu  # noqa: E402
import hpu.dask  # noqa: E402
from hpu.tabu import QAP  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as c:
        hpu.dask.register(c)
        yield c


def _qap(n: int, seed: int) -> QAP:
    rng = np.random.default_rng(seed)
    return QAP(rng.integers(0, 10, (n, n)), rng.integers(0, 10, (n, n)), name=f"random{n}")


def test_no_client_and_no_workers():
    """First in the module: no client is current yet (the module's cluster starts with the next test)."""
    with pytest.raises(ValueError, match="Client"):
        hpu.dask.sort(da.arange(10))
    with pytest.raises(ValueError, match="Client"):
        hpu.dask.tabu_search_many(_qap(6, 0), [0], iterations=5, tenure=2)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster, Client(cluster) as c:
        with pytest.raises(ValueError, match="no workers"):
            hpu.dask.sort(da.arange(10), client=c)
        with pytest.raises(ValueError, match="no workers"):
            hpu.dask.tabu_search_many(_qap(6, 0), [0], client=c, iterations=5, tenure=2)


def _keys(dtype: str, n: int, kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    a = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).view(dt).copy() if dt.kind != "b" else rng.random(n) < .5
    if dt.kind == "f" and n:
        a[rng.random(n) < 0.1] = np.nan
        a[rng.random(n) < 0.1] = -0.0
        a[rng.random(n) < 0.1] = 0.0
    if kind == "few-unique" and n:
        a = a[rng.integers(0, min(n, 3), n)]
    elif kind == "all-equal" and n:
        a = np.full(n, a[0])
    return a


def test_ten_million_int32(client):
    a = np.random.default_rng(0).integers(-2**31, 2**31, 10**7).astype(np.int32)
    y = hpu.dask.sort(da.from_array(a, chunks=10**6))
    assert isinstance(y, da.Array)  # lazy
    assert same_bits(y.compute(), np.sort(a, kind="stable"))


@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64", "uint64", "float32", "float64", "int16", "bool",
                                   "datetime64[ns]", "float16"])
@pytest.mark.parametrize("kind", ["random", "few-unique", "all-equal"])
def test_dtypes_and_splitters_worst_cases(client, dtype, kind):
    a = _keys(dtype, 60_001, kind, 1)
    for npartitions in [None, 1, 7]:
        out = hpu.dask.sort(da.from_array(a, chunks=9_000), npartitions=npartitions).compute()
        assert same_bits(out, np.sort(a, kind="stable")), npartitions


def test_byte_order_is_kept_in_every_block(client):
    """Each block keeps the input's byte order (numpy's concatenation, and so dask's, makes it native)."""
    a = _keys("int64", 5_000, "few-unique", 3).astype(">i8")
    for npartitions in [1, 3]:
        y = hpu.dask.sort(da.from_array(a, chunks=700), npartitions=npartitions)
        assert all(y.blocks[i].compute().dtype == a.dtype for i in range(y.numblocks[0]))
        assert np.array_equal(y.compute(), np.sort(a, kind="stable"))


@pytest.mark.parametrize("kind", ["random", "few", "special"])
def test_cutting_a_sorted_block_gives_the_partitions_pieces(fresh, kind):
    """A block sorted on the worker's device and cut by binary search: each piece holds what the numpy partition
    gives that range, sorted, for splitters whose keys occur in the block and positions fall inside it."""
    from hpu.dask import _sample, _splitters, partition_block

    rng = np.random.default_rng(len(kind))
    block = {"random": rng.standard_normal(50_000), "few": rng.integers(0, 3, 50_000).astype(np.float64),
             "special": np.where(rng.random(50_000) < 0.3, np.nan, rng.integers(-2, 3, 50_000) * 0.0)}[kind]
    offset = 70_000  # the block's place in the whole array
    splitters = _splitters([_sample(block, offset, 400, 7)], np.array([0.2, 0.3, 0.1, 0.4]))
    with hpu.using_runtime(fresh):
        cut = partition_block(block, offset, splitters, 4, method="sort")
        want = partition_block(block, offset, splitters, 4)  # an uncalibrated runtime: "auto" takes numpy
    assert len(cut) == len(want) == 4
    for c, w in zip(cut, want):
        assert same_bits(c, np.sort(w, kind="stable"))
    with pytest.raises(ValueError, match="method"):
        partition_block(block, offset, splitters, 4, method="radix")


@pytest.mark.parametrize("dtype", ["float64", "int32", ">i8", "datetime64[s]"])
@pytest.mark.parametrize("kind", ["random", "few", "special"])
def test_key_ranges_merged_from_sorted_pieces_equal_numpy(fresh, monkeypatch, dtype, kind):
    """Blocks sorted and cut, each key range merged from its sorted pieces (or, where the merge does not take the
    dtype, sorted again), the ranges one after another: numpy's stable sort of the whole array, bit for bit (the
    merge in several buckets, as for large ranges)."""
    import hpu.sorting.cpu
    from hpu.dask import _sample, _sort_range, _splitters, partition_block

    monkeypatch.setattr(hpu.sorting.cpu, "SERIAL_CUTOFF", 1024)

    rng = np.random.default_rng(len(kind) + len(dtype))
    n, blocks, parts = 60_000, 5, 4
    if dtype == "float64":
        a = {"random": rng.standard_normal(n), "few": rng.integers(0, 3, n) * 1.0,
             "special": np.where(rng.random(n) < 0.3, np.nan, rng.integers(-2, 3, n) * 0.0)}[kind]
        if kind == "special":  # NaNs of other signs and payloads too
            a[rng.random(n) < 0.1] = -np.nan
            a[rng.random(n) < 0.1] = np.array(0x7FF8000000000123, np.int64).view(np.float64)
    else:
        a = rng.integers(-5, 5 if kind == "few" else 1 << 20, n).astype(np.int64)
        a = (a.astype(">i8") if dtype == ">i8" else a.astype(dtype if dtype == "int32" else np.int64)
             if dtype != "datetime64[s]" else a.astype("datetime64[s]"))
        if dtype == "datetime64[s]" and kind == "special":
            a[rng.random(n) < 0.2] = np.datetime64("NaT")
    bounds = np.linspace(0, n, blocks + 1).astype(np.int64)
    splitters = _splitters([_sample(a[lo:hi], int(lo), 300, i) for i, (lo, hi) in enumerate(zip(bounds, bounds[1:]))],
                           np.array([0.1, 0.4, 0.3, 0.2]))
    with hpu.using_runtime(fresh):
        pieces = [partition_block(a[lo:hi], int(lo), splitters, parts, method="sort")
                  for lo, hi in zip(bounds, bounds[1:])]
        ranges = [_sort_range([(p[j], True) for p in pieces]) for j in range(parts)]
        again = [_sort_range([(p[j], False) for p in pieces]) for j in range(parts)]
    for got in (ranges, again):  # numpy's concatenation drops the byte order, as sort's graph restores it
        assert all(r.dtype == a.dtype for r in got)
        assert same_bits(np.concatenate(got).astype(a.dtype), np.sort(a, kind="stable"))


def test_local_groups_are_runs_of_one_worker_s_blocks_under_the_cap():
    holders = ["a", "a", "b", None, None, "b", "b", "b", "a"]
    assert hpu.dask.local_groups(holders, [10] * 9, 8) == [[0, 1], [2], [3], [4], [5, 6, 7], [8]]
    assert hpu.dask.local_groups(holders, [10] * 9, 8, cap_bytes=160) == [[0, 1], [2], [3], [4], [5, 6], [7], [8]]
    assert hpu.dask.local_groups(["a"], [10], 8, cap_bytes=1) == [[0]]  # one block exceeds the cap alone
    assert hpu.dask.local_groups([], [], 8) == []
    assert hpu.dask.local_groups(holders, [10] * 9, 8, consecutive=False) == [[0, 1, 8], [2, 5, 6, 7], [3], [4]]
    assert hpu.dask.local_groups(holders, [10] * 9, 8, cap_bytes=160,
                                 consecutive=False) == [[0, 1], [2, 5], [3], [4], [6, 7], [8]]


@pytest.mark.parametrize("method", ["sort", "numpy"])
@pytest.mark.parametrize("kind", ["random", "few", "special", "few int"])
def test_groups_of_blocks_cut_together_merge_to_numpy(fresh, monkeypatch, method, kind):
    """Blocks partitioned together (sorted together and cut, or each partitioned and joined): the key ranges merged
    from the groups' pieces are numpy's stable sort, bit for bit, also where the splitters fall among equal keys
    spread over several blocks of a group (few values; -0.0, 0.0 and NaNs); groups of blocks that are not
    consecutive for integers (whose equal keys are the same bits)."""
    import hpu.dask as hd

    monkeypatch.setattr(hd, "_partition_method", lambda n, dtype, parts: method)
    rng = np.random.default_rng(len(kind))
    n, parts = 60_000, 4
    a = {"random": rng.standard_normal(n), "few": rng.integers(0, 3, n) * 1.0, "few int": rng.integers(0, 3, n),
         "special": np.where(rng.random(n) < 0.3, np.nan, rng.integers(-2, 3, n) * 0.0)}[kind]
    bounds = np.linspace(0, n, 7).astype(np.int64)
    blocks = [a[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
    splitters = hd._splitters([hd._sample(b, int(lo), 300, i) for i, (b, lo) in enumerate(zip(blocks, bounds))],
                              np.array([0.1, 0.4, 0.3, 0.2]))
    with hpu.using_runtime(fresh):
        groups = ([0, 2, 5], [1, 3], [4]) if kind == "few int" else ([0, 1, 2], [3], [4, 5])
        pieces = [hd._partition([blocks[i] for i in g], [int(bounds[i]) for i in g], splitters, parts)
                  for g in groups]
        ranges = [hd._sort_range([p[j] for p in pieces]) for j in range(parts)]
    assert all(p[j][1] == (method == "sort") or p[j][0].shape[0] <= 1 for p in pieces for j in range(parts))
    assert same_bits(np.concatenate(ranges), np.sort(a, kind="stable"))


@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_a_persisted_array_is_partitioned_by_its_holders(client, dtype):
    """A persisted input: one partition task per run of consecutive blocks one worker holds (floats), per worker
    (integers; all on one worker: one task), and the result numpy's stable sort."""
    from distributed import get_task_stream, wait

    w0 = sorted(client.scheduler_info()["workers"])[0]
    for i, where in enumerate(([w0], None)):  # other keys each time: a graph seen before is answered from memory
        a = _keys(dtype, 120_000, "few-unique", 5 + i)
        x = da.from_array(a, chunks=10_000).persist(workers=where)
        wait(x)
        held = client.who_has(x)
        holders = [min(held[k]) for k in x.__dask_keys__()]
        runs = 1 + sum(h != g for h, g in zip(holders, holders[1:])) if dtype == "float64" else len(set(holders))
        with get_task_stream(client) as ts:
            y = hpu.dask.sort(x, npartitions=3).persist()
            wait(y)
        assert len({str(t["key"]) for t in ts.data if "_partition" in str(t["key"])}) == runs
        assert same_bits(y.compute(), np.sort(a, kind="stable"))


def test_a_worker_s_groups_fit_its_memory_limit_with_every_thread_busy(client, monkeypatch):
    """A worker partitions as many groups at once as it has threads: all of them together, not each, fit
    MEMORY_SHARE of the least memory limit (workers reporting 2 MB limits and 4 threads; int64 blocks of 16 kB all on
    one worker), unless all of the worker's blocks fit it as one group; the result is numpy's stable sort."""
    from distributed import wait

    limit, threads, foot = 2_000_000, 4, hpu.dask.SORT_FOOTPRINT
    w0 = sorted(client.scheduler_info()["workers"])[0]
    real_run, real_groups, made = client.run, hpu.dask.local_groups, []

    def small_limits(fn, *args, **kw):  # what the workers report of themselves: 2 MB limits, 4 threads
        out = real_run(fn, *args, **kw)
        if fn is hpu.dask._worker_facts:
            out = {w: (speed, limit, threads) for w, (speed, _, _) in out.items()}
        return out

    monkeypatch.setattr(client, "run", small_limits)
    monkeypatch.setattr(hpu.dask, "local_groups", lambda *args, **kw: made.append(real_groups(*args, **kw)) or made[-1])
    for n in (100_000, 20_000):  # 800 kB: 6 times more than 1 MB; 160 kB: 6 times fits
        a = np.random.default_rng(n).integers(0, 3, n)
        x = da.from_array(a, chunks=2_000).persist(workers=[w0])
        wait(x)
        y = hpu.dask.sort(x, client=client)
        biggest = max(len(g) for g in made[-1]) * 2_000 * a.itemsize
        if foot * a.nbytes <= hpu.dask.MEMORY_SHARE * limit:
            assert made[-1] == [list(range(n // 2_000))]  # the whole worker's keys fit at once
        else:
            assert biggest > 2_000 * a.itemsize  # blocks are still grouped
            assert threads * foot * biggest <= hpu.dask.MEMORY_SHARE * limit
        assert same_bits(y.compute(), np.sort(a, kind="stable"))


def test_benchmark_names_every_phase_of_a_sort(client, monkeypatch):
    """experiments/bench_dask.py attributes the task stream of a sort over several ranges to each of its phases
    (by task name: a renamed task would silently drop out of the table of where the time goes)."""
    import importlib
    from pathlib import Path

    from distributed import get_task_stream, wait

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "experiments"))
    bench = importlib.import_module("bench_dask")
    x = da.from_array(np.random.default_rng(3).integers(0, 1 << 40, 200_000), chunks=50_000)
    with get_task_stream(client) as ts:
        wait(hpu.dask.sort(x, npartitions=3).persist())
    tasks = {f: [t for t in ts.data if f in str(t["key"])] for f in ("_sample", "_splitters", "_partition",
                                                                     "sort_range")}  # hpu.dask's task functions
    for f, mine in tasks.items():
        assert mine, f"no {f} task in the stream"
        for task in mine:
            key = str(task["key"])
            assert any(m in key for marks in bench.PHASES.values() for m in marks), f"{key}: in no phase"


def test_workers_in_one_process_share_one_runtime():
    with LocalCluster(n_workers=2, processes=False, dashboard_address=":0") as cluster, Client(cluster) as c:
        hpu.dask.register(c, device="none")
        assert len(set(c.run(lambda: id(hpu.default_runtime())).values())) == 1
        a = np.arange(1000)[::-1].copy()
        assert same_bits(hpu.dask.sort(da.from_array(a, chunks=100), client=c).compute(), np.sort(a))
        rt = hpu.default_runtime()
    assert rt.closed  # closed once the last worker left


def test_the_plugin_takes_a_profile_for_its_workers(tmp_path):
    """A profile calibrated for the workers' thread count (the cached one is of all the host's threads) reaches
    each worker's runtime; a profile of another type is refused where the plugin is made."""
    path = hpu.Profile(p=1.5, g=1, gamma=1, name="one-thread workers", provenance={"threads": 1}).save(
        tmp_path / "workers.json")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as c:
        hpu.dask.register(c, device="none", profile=path)
        assert set(c.run(lambda: hpu.default_runtime().profile.name).values()) == {"one-thread workers"}
    with pytest.raises(TypeError, match="profile"):
        hpu.dask.HpuPlugin(profile=1.5)


@pytest.mark.parametrize("n", [0, 1, 2])
def test_tiny_arrays(client, n):
    a = np.arange(n, dtype=np.float64)[::-1].copy()
    assert same_bits(hpu.dask.sort(da.from_array(a)).compute(), np.sort(a))


def test_a_worker_killed_mid_sort(client):
    """Dask recomputes the dead worker's tasks (each a pure function): the result is still right."""
    a = np.random.default_rng(2).standard_normal(3 * 10**6)
    future = client.compute(hpu.dask.sort(da.from_array(a, chunks=10**5), npartitions=6))
    deadline = time.monotonic() + 60
    while not any(client.processing().values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    victim = sorted(client.scheduler_info()["workers"])[0]
    os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
    assert same_bits(future.result(timeout=300), np.sort(a, kind="stable"))
    client.wait_for_workers(3, timeout=120)


@pytest.mark.parametrize("workers,threads", [(1, 1), (3, 1), (2, 8)])
def test_default_partitions_fit_the_memory_limit(workers, threads):
    """One block per worker while a worker's sort of its share fits MEMORY_SHARE of the least limit; else the fewest
    blocks a worker (at least its threads, sorted at once) whose sorts at once fit (found by trying every count)."""
    limit, foot = 1 << 30, hpu.dask.SORT_FOOTPRINT
    budget = hpu.dask.MEMORY_SHARE * limit
    for nbytes in [0, 1 << 20, int(budget / foot) * workers, int(budget / foot) * workers + 8, 1 << 30, 5 << 30]:
        got = hpu.dask.default_partitions(nbytes, [limit] * workers + [None], [threads] * workers + [1])
        per = nbytes / (workers + 1)
        if foot * per <= budget:
            assert got == workers + 1, nbytes
        else:
            want = next(p for p in range(1, 1 << 20) if min(threads, p) * foot * per / p <= budget and p >= threads)
            assert got == (workers + 1) * want and got > workers + 1, nbytes
    assert hpu.dask.default_partitions(5 << 30, [None, 0, None], [8, 8, 8]) == 3  # no limits: one block a worker


def test_memory_limits_set_the_default_blocks(client, monkeypatch):
    """Workers whose memory limit is too small for one block each get more, smaller blocks; the result is right."""
    a = np.random.default_rng(5).random(300_000)
    real = client.run

    def small_limits(fn, *args, **kw):  # what the workers report of themselves, with 2 MB limits
        out = real(fn, *args, **kw)
        if fn is hpu.dask._worker_facts:
            out = {w: (speed, 2_000_000, threads) for w, (speed, _, threads) in out.items()}
        return out

    monkeypatch.setattr(client, "run", small_limits)
    speeds = list(client.run(hpu.dask.worker_speed, np.float64).values())
    want = hpu.dask.default_partitions(a.nbytes, [2_000_000] * 3, [1] * 3, speeds)
    y = hpu.dask.sort(da.from_array(a, chunks=50_000), client=client)
    assert want > 3 and y.numblocks[0] == want
    assert same_bits(y.compute(), np.sort(a, kind="stable"))


def test_key_ranges_follow_worker_speeds(client):
    """Each worker's speed (its hpu model) sets its key range's share; here forced to 3:1."""
    speeds = client.run(hpu.dask.worker_speed)
    assert len(speeds) == 3 and all(s > 0 for s in speeds.values())
    a = np.random.default_rng(4).random(400_000)
    owners = sorted(speeds)[:2]
    y = hpu.dask._sample_sort(da.from_array(a, chunks=50_000), 2, owners, np.array([0.75, 0.25]), 0)
    y.compute_chunk_sizes()
    assert abs(y.chunks[0][0] / a.size - 0.75) < 0.05
    assert same_bits(y.compute(), np.sort(a, kind="stable"))


def test_tabu_search_many_takes_any_iterable_and_repeats(client):
    """Seeds from an iterator (it gave no result); calls one after another with the same problem, whose data the
    scheduler may still be dropping from the call before ("lost dependencies" under a key from the contents)."""
    problem = _qap(8, 1)
    kw = dict(iterations=10, tenure=3, strategy="cpu")
    want = [r.best_value for r in hpu.dask.tabu_search_many(problem, [0, 1, 2], **kw)]
    assert [r.best_value for r in hpu.dask.tabu_search_many(problem, iter(range(3)), **kw)] == want
    for _ in range(10):
        assert [r.best_value for r in hpu.dask.tabu_search_many(problem, (s for s in range(3)), **kw)] == want


def test_default_partitions_size_the_fastest_worker_s_share():
    """A worker with 9 of 10 parts of the speed sorts 9/10 of the keys: its blocks must fit, not those of an equal
    share (they were twice the memory budget)."""
    limit, foot = 4_000_000, hpu.dask.SORT_FOOTPRINT
    nbytes = int(hpu.dask.MEMORY_SHARE * limit / foot * 1.5)  # an equal half fits; 9/10 does not
    assert hpu.dask.default_partitions(nbytes, [limit] * 2, [1] * 2) == 2
    got = hpu.dask.default_partitions(nbytes, [limit] * 2, [1] * 2, [9.0, 1.0])
    assert got > 2 and foot * nbytes * 0.9 / (got // 2) <= hpu.dask.MEMORY_SHARE * limit


def test_the_plugin_restores_the_default_runtime_and_counts_only_workers_it_set_up():
    """In-process workers: the process's default runtime comes back when they go, and a plugin whose set-up failed
    (distributed tears it down all the same) does not close the runtime of a later cluster's workers."""
    mine = hpu.Runtime("none", threads=1)
    before = hpu.set_default_runtime(mine)
    try:
        failed = hpu.dask.HpuPlugin(device="no-such-device")
        worker = types.SimpleNamespace(address="inproc://failed", state=types.SimpleNamespace(nthreads=1))
        with pytest.raises(ValueError, match="no-such-device"):
            failed.setup(worker)
        failed.teardown(worker)  # as distributed does after a failed set-up
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cl, \
                Client(cl) as c:
            hpu.dask.register(c, device="none")
            shared = hpu.default_runtime()
            assert shared is not mine
            first = next(iter(cl.workers.values()))
            first.plugins["hpu"].teardown(first)  # one worker gone, as when it is retired
            assert not shared.closed  # the other still uses it
            a = np.random.default_rng(2).random(10_000)
            assert same_bits(hpu.dask.sort(da.from_array(a, chunks=1000), npartitions=3, client=c).compute(),
                             np.sort(a, kind="stable"))
        assert shared.closed and hpu.default_runtime() is mine and not mine.closed
    finally:
        hpu.set_default_runtime(before)
        mine.close()


def test_tabu_search_many_equals_one_by_one(client):
    problem = _qap(12, 3)
    seeds = [0, 1, 2, 3, 4, 5]
    kw = dict(iterations=60, tenure=5, strategy="cpu")
    many = hpu.dask.tabu_search_many(problem, seeds, **kw)
    for s, got in zip(seeds, many):
        ref = hpu.tabu.tabu_search(problem, seed=s, **kw)
        assert got.best_value == ref.best_value
        assert np.array_equal(got.best_solution, ref.best_solution) and np.array_equal(got.moves, ref.moves)


def test_islands_equal_the_same_islands_in_one_process(client):
    """Islands on the workers give what the same epochs and migrations give run one by one (seeded, deterministic)."""
    problem = _qap(10, 5)
    kw = dict(population=4, generations=2, ls_iterations=30, ils_iterations=1, strategy="cpu")
    res = hpu.dask.hybrid_ea_islands(problem, islands=3, epochs=3, migrants=1, seed=7, **kw)
    local = hpu.dask.run_islands(problem, 3, 3, 1, 7, kw, lambda fn, *args: list(map(fn, *args)))
    assert res.best_value == local.best_value and np.array_equal(res.best_solution, local.best_solution)
    assert np.array_equal(res.history, local.history) and len(res.history) == 4
    assert np.all(np.diff(res.history) <= 0) and res.best_value == problem.objective(res.best_solution)
    for a, b in zip(res.islands, local.islands):
        assert np.array_equal(a.population, b.population)


def test_migration_moves_the_best_to_the_next_island():
    """With a stub epoch that returns its input population, migration alone changes the islands: a ring."""
    problem = _qap(6, 1)
    pops = [np.stack([np.roll(np.arange(6), i + j) for j in range(3)]) for i in range(3)]

    class Stub:
        def __init__(self, pop):
            self.population, self.history = pop, [0]
            self.best_value, self.best_solution = 0, pop[0]

    calls = []

    def mapper(fn, problems, populations, seeds, kws):
        calls.append([None if p is None else p.copy() for p in populations])
        return [Stub(pops[i] if p is None else p) for i, p in enumerate(populations)]

    hpu.dask.run_islands(problem, 3, 2, 1, 0, {}, mapper)
    second = calls[1]
    for i in range(3):
        assert np.array_equal(second[i][-1], pops[i - 1][0]) and np.array_equal(second[i][:-1], pops[i][:-1])


def test_bad_input_is_refused_before_any_task(client):
    with pytest.raises(ValueError, match="1-D"):
        hpu.dask.sort(da.zeros((4, 4)))
    with pytest.raises(TypeError, match="unsupported dtype"):
        hpu.dask.sort(da.zeros(4, dtype=complex))
    with pytest.raises(ValueError, match="chunk sizes"):
        x = da.from_array(np.arange(10))
        hpu.dask.sort(x[x > 3])
    with pytest.raises(ValueError, match="npartitions"):
        hpu.dask.sort(da.arange(10), npartitions=0)
    with pytest.raises(ValueError, match="seed"):  # raised on the workers at compute time before
        hpu.dask.sort(da.arange(10), seed=-1)
    for objects in (np.array([3, 1, 2], dtype=object), [1.0, None]):  # dask's NotImplementedError before
        with pytest.raises(TypeError, match="unsupported dtype"):
            hpu.dask.sort(objects)
    problem = _qap(6, 0)
    problem.unpicklable = lambda: None
    with pytest.raises(TypeError, match="pickled"):
        hpu.dask.tabu_search_many(problem, [0], iterations=5, tenure=2)
    with pytest.raises(TypeError, match="runtime"):
        hpu.dask.tabu_search_many(_qap(6, 0), [0], iterations=5, tenure=2, runtime=hpu.default_runtime())
    with pytest.raises(TypeError, match="pickled"):
        hpu.dask.hybrid_ea_islands(problem, epochs=1)
    with pytest.raises(TypeError, match="seeds must be a sequence of seeds"):
        hpu.dask.tabu_search_many(_qap(6, 0), None, iterations=5, tenure=2)
    for bad, message in [(dict(islands=0), "islands"), (dict(epochs=0), "epochs"),
                         (dict(migrants=4, population=4), "migrants"), (dict(migrants=-1), "migrants"),
                         (dict(population="x"), "population"), (dict(population=1), "population")]:
        with pytest.raises(ValueError, match=f"{message} must be an integer"):  # "x": Python's comparison error
            hpu.dask.hybrid_ea_islands(_qap(6, 0), **bad)


def test_one_block_keeps_a_datetime_byte_order(client):
    """The one-block path (``npartitions=1``, at most one key) keeps a non-native byte order too: numpy's pickle, which
    sends the input blocks to worker processes, makes datetime64 and timedelta64 native (float64 it keeps)."""
    a = np.random.default_rng(6).integers(-50, 50, 300).astype(">M8[s]")
    a[::7] = np.datetime64("NaT")
    for x, npartitions in [(a, 1), (a[:1], None), (a.astype(">m8[ms]"), 1)]:
        y = hpu.dask.sort(da.from_array(x, chunks=100), npartitions=npartitions)
        assert same_bits(y.compute(), np.sort(x, kind="stable")), (x.dtype, npartitions)


def test_more_partitions_than_keys(client):
    """At most one key range per key: a huge npartitions gives no flood of empty blocks (2**70 built forever)."""
    a = np.random.default_rng(7).integers(0, 5, 20)
    y = hpu.dask.sort(da.from_array(a, chunks=6), npartitions=1000)
    assert y.numblocks[0] == 20
    assert same_bits(y.compute(), np.sort(a, kind="stable"))
    assert same_bits(hpu.dask.sort(da.from_array(a, chunks=6), npartitions=2**70).compute(), np.sort(a, kind="stable"))
    assert same_bits(hpu.dask.sort(da.from_array(a[:0]), npartitions=2**70).compute(), a[:0])


def test_islands_take_a_seed_sequence(client):
    """A SeedSequence seed (as hybrid_ea takes) gives what its entropy gives, and is not spawned from."""
    problem = _qap(7, 2)
    kw = dict(population=3, generations=1, ls_iterations=10, ils_iterations=1, strategy="cpu")
    seq = np.random.SeedSequence(11)
    got = [hpu.dask.hybrid_ea_islands(problem, islands=2, epochs=2, seed=s, **kw) for s in (seq, seq, 11)]
    assert seq.n_children_spawned == 0
    for r in got[1:]:
        assert np.array_equal(r.history, got[0].history) and np.array_equal(r.best_solution, got[0].best_solution)


def test_arguments_set_per_run_are_refused_before_any_task():
    """seed= (tabu_search_many gives each search its own) and initial_population= (the islands' own): a TypeError
    before the cluster is asked for anything (here it has no workers); they failed on the workers before."""
    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster, Client(cluster) as c:
        with pytest.raises(TypeError, match="seed= of each run"):
            hpu.dask.tabu_search_many(_qap(6, 0), [0], client=c, iterations=5, tenure=2, seed=3)
        with pytest.raises(TypeError, match="initial_population= of each run"):
            hpu.dask.hybrid_ea_islands(_qap(6, 0), client=c, initial_population=None, population=3, generations=1)
