"""Key-range split (a sample sort over the CPU and several devices): equal to numpy's stable sort bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import same_bits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hpu
import hpu.sorting.device as sort_device
from hpu.sorting import cpu
from hpu.core.model import equal_finish_shares
from hpu.sorting.costs import fast_cost, keyrange_split, partition_cost
from hpu.sorting.cpu import native_partition
from hpu.sorting.exchange import exchange_sort
from hpu.sorting.keyrange import KeyRangePlan, bucket_ids, choose_splitters, keyrange_sort, partition

cl = pytest.importorskip("pyopencl")

DTYPES = [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64]


def _input(rng: np.random.Generator, dtype: type, n: int, kind: str) -> np.ndarray:
    dt = np.dtype(dtype)
    if kind == "equal":
        return np.full(n, 7, dt)
    if kind == "few":
        return rng.integers(0, 3, n).astype(dt)
    if dt.kind == "f":
        a = rng.standard_normal(n).astype(dt)
        if kind == "special" and n:
            a[rng.integers(0, n, max(1, n // 7))] = np.nan
            a[rng.integers(0, n, max(1, n // 9))] = -0.0
            a[rng.integers(0, n, max(1, n // 9))] = 0.0
            a[rng.integers(0, n, max(1, n // 50))] = -np.inf
        return a
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)


@pytest.fixture(scope="module")
def units(runtime):
    """One HPU of the test device named twice (two contexts on one device) and a cap of 1 MiB per device."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    with hpu.Runtime(devices=[runtime.device, runtime.device], profile=runtime.profile, threads=2,
                     device_memory_limit=1 << 20) as rt:
        yield rt


def _shares(draw_fractions: list[float], k: int) -> tuple[float, ...]:
    w = np.asarray(draw_fractions[:k], dtype=float)
    if w.sum() == 0:
        w[0] = 1.0
    return tuple(w / w.sum())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(DTYPES), n=st.one_of(st.integers(0, 3), st.integers(0, 120_000)),
       kind=st.sampled_from(["random", "special", "equal", "few"]),
       weights=st.lists(st.sampled_from([0.0, 0.1, 0.3, 1.0]), min_size=3, max_size=3), seed=st.integers(0, 2**16))
def test_forced_shares_over_the_cpu_and_two_devices_equal_numpy(units, dtype, n, kind, weights, seed):
    a = _input(np.random.default_rng(seed), dtype, n, kind)
    before = a.copy()
    out, tr = keyrange_sort(a, units, _shares(weights, 3))
    assert tr.strategy == "keyrange" and tr.fallback == ""
    assert same_bits(out, np.sort(before, kind="stable"))
    assert same_bits(a, before)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("kind", ["random", "special", "equal", "few"])
def test_one_to_four_units_with_device_pieces(runtime, k, kind):
    """1-4 units (the CPU and 0-3 devices), each device capped at 256 KiB: its range goes through in pieces."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = _input(np.random.default_rng(k), np.float64, 150_001, kind)
    devices = [runtime.device] * max(k - 1, 1)
    with hpu.Runtime(devices=devices, profile=runtime.profile, threads=2, device_memory_limit=256 << 10) as rt:
        shares = (1.0,) if k == 1 else tuple([0.1] + [0.9 / (k - 1)] * (k - 1))
        shares = shares + (0.0,) * (1 + len(rt.units) - len(shares))
        out, tr = keyrange_sort(a, rt, shares)
        tr.resolve()
    assert same_bits(out, np.sort(a, kind="stable"))
    device_runs = [e for e in tr.events if e.unit.startswith("device") and e.kind == "sort"]
    assert (len(device_runs) > k - 1) if k > 1 else not device_runs  # more runs than devices: pieces
    cpu_runs = [e for e in tr.events if e.unit.startswith("cpu") and e.kind == "sort"]
    assert cpu_runs and sum(e.nbytes for e in cpu_runs + device_runs) == a.nbytes  # every key sorted once


def test_a_capped_device_sorts_in_pieces_not_on_the_cpu(fresh):
    rt = hpu.Runtime(fresh.device, profile=fresh.profile, threads=2, device_memory_limit=1 << 20)
    with rt:
        a = np.random.default_rng(5).integers(-(2**31), 2**31 - 1, 400_000, dtype=np.int64)
        out, tr = hpu.hybrid_mergesort(a, strategy="gpu", runtime=rt, return_trace=True)
        assert same_bits(out, np.sort(a, kind="stable"))
        assert tr.strategy == "keyrange" and tr.alpha == 0.0  # the CPU sorted nothing
        sorts = [e for e in tr.events if e.unit == "device" and e.kind == "sort"]
        assert len(sorts) >= 400_000 * 8 // ((1 << 20) // 3)  # at least as many pieces as the cap forces


def test_without_a_cap_the_position_split_still_runs(fresh):
    a = np.random.default_rng(6).standard_normal(100_000)
    out, tr = hpu.hybrid_mergesort(a, strategy="gpu", runtime=fresh, return_trace=True)
    assert tr.strategy == "gpu" and same_bits(out, np.sort(a, kind="stable"))


@pytest.mark.parametrize("on_error", ["fallback", "raise"])
def test_a_device_lost_mid_sort_has_its_range_redone(units, monkeypatch, on_error):
    from test_faults import _fault_once

    a = _input(np.random.default_rng(8), np.float32, 200_000, "special")
    before = a.copy()
    calls = _fault_once(monkeypatch, sort_device.DeviceSorter, "sort", after=3)
    if on_error == "raise":
        with pytest.raises(hpu.DeviceFailure, match="-9999"):
            hpu.hybrid_mergesort(a, shares=(0.2, 0.4, 0.4), runtime=units, on_device_error="raise")
    else:
        out, tr = hpu.hybrid_mergesort(a, shares=(0.2, 0.4, 0.4), runtime=units, return_trace=True)
        assert same_bits(out, np.sort(a, kind="stable")) and "-9999" in tr.fallback
    assert len(calls) >= 4 and same_bits(a, before)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("k", [1, 2, 4, 5, 300])
def test_partition_puts_each_key_in_its_bucket_in_input_order(runtime, monkeypatch, compiled, k):
    """Against a stable argsort of the bucket numbers; gather (a failed unit's redo) gives each bucket back."""
    if compiled and not native_partition():
        pytest.skip("the compiled partition was not built here")
    if not compiled:
        monkeypatch.setattr(cpu, "native_partition", lambda dtype=None: False)
    a = _input(np.random.default_rng(k), np.float64, 50_000, "special")
    keys, pos = choose_splitters(a, np.arange(1, k) / k)
    out = np.empty_like(a)
    bounds, blocks, counts, ids = partition(a, keys, pos, out, runtime, block=4096)
    # Each key's bucket by brute force (not bucket_ids, which partition uses): how many splitters its
    # (key, position) pair follows in numpy's stable order.
    rank = np.empty(a.size, np.int64)
    rank[np.argsort(a, kind="stable")] = np.arange(a.size)
    want = (rank[:, None] > rank[pos][None, :]).sum(axis=1)
    assert np.array_equal(bucket_ids(a, 0, keys, pos), want)
    assert same_bits(out, a[np.argsort(want, kind="stable")]) and np.array_equal(ids, want)
    assert bounds.tolist() == [0, *np.cumsum(np.bincount(want, minlength=k)).tolist()]
    assert blocks.size == 14 and counts.sum(axis=0).tolist() == np.bincount(want, minlength=k).tolist()
    plan, again = KeyRangePlan(bounds, [0] * k, blocks, counts, ids), np.empty_like(a)
    for b in range(k):
        plan.gather(a, b, again)
    assert same_bits(again, out)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int8, np.uint16, np.int64, np.uint64])
def test_splitters_break_ties_by_position_and_bucket_ids_agree_with_brute_force(monkeypatch, compiled, dtype):
    if compiled and not native_partition():
        pytest.skip("the compiled partition was not built here")
    if not compiled:
        monkeypatch.setattr(cpu, "native_partition", lambda dtype=None: False)
    rng = np.random.default_rng(9)
    a = rng.integers(0, 4, 5000).astype(dtype)
    if a.dtype.kind == "f":
        a[::17] = np.nan
        a[::23] = -0.0
    else:
        a[::19] = np.iinfo(dtype).max  # the largest key: the last entry of the compiled search's table
    for fractions in ([0.5], [0.2, 0.5], [0.25, 0.5, 0.75], list(np.linspace(0.02, 0.98, 40))):  # few splitters,
        # each compared (compiled: no table), then the table's compare and binary-search paths
        keys, pos = choose_splitters(a, fractions, sample=700)
        rank = np.empty(a.size, np.int64)
        rank[np.argsort(a, kind="stable")] = np.arange(a.size)  # each (key, position) pair's place in the order
        cut = rank[pos]
        want = (rank[:, None] > cut[None, :]).sum(axis=1)
        for start in (0, 1234):
            got = bucket_ids(a[start:], start, keys, pos)
            assert np.array_equal(got, want[start:])
        assert np.all(np.diff(cut) >= 0)  # splitters in order


def test_choose_splitters_rejects_bad_fractions():
    with pytest.raises(ValueError, match="non-decreasing"):
        choose_splitters(np.arange(10), [0.6, 0.4])
    with pytest.raises(ValueError, match="at least one key"):
        choose_splitters(np.arange(0), [0.5])


def test_bad_shares_are_refused(fresh):
    a = np.arange(1000, dtype=np.int32)
    with pytest.raises(ValueError, match="summing to 1"):
        hpu.hybrid_mergesort(a, shares=(0.5, 0.2), runtime=fresh)
    with pytest.raises(ValueError, match="summing to 1"):
        hpu.hybrid_mergesort(a, shares=(0.5, 0.25, 0.25), runtime=fresh)
    with pytest.raises(ValueError, match="keyrange"):
        hpu.hybrid_mergesort(a, shares=(0.5, 0.5), strategy="gpu", runtime=fresh)
    with pytest.raises(ValueError, match="not both"):  # shares silently overrode alpha, or alpha shares
        hpu.hybrid_mergesort(a, shares=(0.5, 0.5), alpha=0.3, strategy="keyrange", runtime=fresh)
    with pytest.raises(ValueError, match="fast-mode"):
        hpu.hybrid_mergesort(a, strategy="keyrange", mode="paper", runtime=fresh)
    for n in (0, 1, 1000):  # on every path, the shortest included
        with pytest.raises(ValueError, match="summing to 1"):
            hpu.hybrid_mergesort(a[:n], shares=(-1.0, 2.0), runtime=fresh)
        with pytest.raises(ValueError, match="summing to 1"):
            hpu.hybrid_mergesort(a[:n], shares=(float("nan"), 1.0), runtime=fresh)
    with pytest.raises(ValueError, match="transfer_level"):
        hpu.hybrid_mergesort(a[:1], transfer_level=99, runtime=fresh)
    with hpu.Runtime("none", threads=1) as cpu_only:  # no device ("none": None takes the default device if any)
        assert not cpu_only.has_device
        for bad in ((-5.0, 9.0, 1.0), (0.5, 0.5)):  # one share only: the CPU's
            with pytest.raises(ValueError, match=r"1 non-negative fractions .* summing to 1"):
                hpu.hybrid_mergesort(a, shares=bad, runtime=cpu_only)
        shuffled = np.random.default_rng(1).permutation(a)
        assert same_bits(hpu.hybrid_mergesort(shuffled, shares=(1.0,), runtime=cpu_only), np.sort(shuffled))


def test_shares_summing_to_one_within_the_tolerance_and_device_dtypes(runtime):
    """Shares a rounding away from 1 are scaled (the splitters' fractions passed 1 and raised); a dtype the devices
    do not sort is a ValueError before any work (int16 failed in a device thread, after the partition); an exchange
    sort refuses a CPU share however much memory the devices have."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(3).integers(-1000, 1000, 20_000).astype(np.int32)
    with hpu.Runtime(devices=[runtime.device] * 2, profile=runtime.profile, threads=2) as rt:
        out, _ = keyrange_sort(a, rt, (0.5000005, 0.5, 1e-7))
        assert same_bits(out, np.sort(a, kind="stable"))
        for sort, sh in ((keyrange_sort, (0.2, 0.4, 0.4)), (exchange_sort, (0.0, 0.5, 0.5))):
            with pytest.raises(ValueError, match="cannot sort int16"):
                sort(a.astype(np.int16), rt, sh)
    with hpu.Runtime(runtime.device, profile=runtime.profile, threads=2, device_memory_limit=1 << 16) as rt:
        with pytest.raises(ValueError, match="no share"):
            hpu.hybrid_mergesort(a, strategy="exchange", shares=(0.3, 0.7), runtime=rt)


@pytest.mark.parametrize("dtype", [">i4", ">f8", "<u8"])
def test_keys_in_the_other_byte_order(fresh, dtype):
    """The kernels read native keys: a device share of the other byte order is refused by keyrange_sort (it used to
    sort the swapped bytes), while hpu.sort and hybrid_mergesort, which convert first, sort them right (hpu.sort in
    the input's byte order, as numpy, hybrid_mergesort in the host's)."""
    dt = np.dtype(dtype)
    a = np.random.default_rng(7).integers(0, 1000, 20_000).astype(dt)
    want = np.sort(a, kind="stable")
    assert fresh.supports(dt) == (dt.isnative and fresh.supports(dt.newbyteorder("=")))
    if not dt.isnative:
        with pytest.raises(ValueError, match=str(dt)):
            keyrange_sort(a, fresh, shares=(0.5, 0.5))
    assert same_bits(hpu.sort(a, runtime=fresh, strategy="keyrange", alpha=0.5), want)
    got = hpu.hybrid_mergesort(a, runtime=fresh, shares=(0.5, 0.5))
    assert got.dtype == dt.newbyteorder("=") and np.array_equal(got, want)  # in the host's byte order


def test_runtime_devices_arguments(runtime):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    with pytest.raises(ValueError, match="not both"):
        hpu.Runtime(runtime.device, devices="all")
    with pytest.raises(ValueError, match="empty"):
        hpu.Runtime(devices=[])
    for one in (runtime.device, 5):  # one device, not a sequence of them
        with pytest.raises(TypeError, match="devices must be 'all' or a sequence"):
            hpu.Runtime(devices=one)
    with pytest.raises(ValueError, match="device_memory_limit"):
        hpu.Runtime(device_memory_limit=0)
    with hpu.Runtime(devices="all", profile=runtime.profile, threads=1) as rt:
        assert rt.units and rt.units[0] is rt and all(p.has_device for p in rt.peers)
    with hpu.Runtime(devices=[runtime.device] * 3, profile=runtime.profile, threads=1,
                     device_memory_limit=12345) as rt:
        assert len(rt.units) == 3 and rt.device_memory_bytes == 12345 == rt.peers[1].device_memory_bytes
        assert all(p.pool is rt.pool for p in rt.peers)  # one HPU, one thread pool
    assert rt.closed and all(p.closed for p in rt.peers)


def test_equal_finish_shares_against_brute_force():
    rates = [1.0, 3.0, 6.0]
    costs = [lambda m, r=r: m / r for r in rates]
    got = equal_finish_shares(1000, costs)
    assert got.counts == (100, 300, 600) and got.predicted_time == pytest.approx(100.0)
    # A fixed cost: the brute-force best integer division of 60 items over two units.
    fixed = [lambda m: m * 1.0, lambda m: np.where(m > 0, 20.0 + m / 4.0, 0.0)]
    got = equal_finish_shares(60, fixed)
    brute = min(max(float(fixed[0](np.array([float(i)]))[0]), float(fixed[1](np.array([60.0 - i]))[0]))
                for i in range(61))
    assert got.predicted_time == pytest.approx(brute, abs=1.0)
    assert sum(got.counts) == 60
    with pytest.raises(ValueError, match="at least one unit"):
        equal_finish_shares(10, [])


@pytest.mark.parametrize("k", [2, 3, 5, 9, 12])
@pytest.mark.parametrize("seed", range(4))
def test_equal_finish_shares_finds_the_best_set_of_units(k, seed):
    """Units of fixed cost c_i and rate r_i (T_i(m) = c_i + m / r_i for m > 0): against the exact optimum over every
    subset U of units, T = (n + sum r_i c_i) / sum r_i where every unit of U starts before T; any number of units
    (more than 8: an 8-GPU host's devices and the CPU)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(10, 100_000))
    c, r = rng.uniform(0, 50, k), rng.uniform(0.5, 100, k)
    costs = [lambda m, c=ci, r=ri: np.where(np.asarray(m, float) > 0, c + np.asarray(m, float) / r, 0.0)
             for ci, ri in zip(c, r)]
    best = math.inf
    for mask in range(1, 1 << k):
        used = [i for i in range(k) if mask >> i & 1]
        t = (n + sum(r[i] * c[i] for i in used)) / sum(r[i] for i in used)
        if all(c[i] <= t for i in used):
            best = min(best, t)
    got = equal_finish_shares(n, costs)
    assert sum(got.counts) == n and min(got.counts) >= 0
    assert best - 1e-9 <= got.predicted_time <= best + 1.0 / r.min() + 1e-6  # whole items: one more at most


def test_an_eight_device_host_is_planned_and_sorted(runtime):
    """Eight devices and the CPU: nine units (the model took at most eight, so "auto" and "keyrange" raised)."""
    h100 = hpu.reference_profile("h100")
    split = keyrange_split(1e8, h100, [h100] * 8)
    assert sum(split.shares) == pytest.approx(1.0) and math.isfinite(split.predicted_time)
    assert sum(s > 0 for s in split.shares[1:]) >= 2  # identical devices share the keys
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(8).standard_normal(100_000)
    with hpu.Runtime(devices=[runtime.device] * 8, profile=runtime.profile, threads=2) as rt:
        for strategy in ("keyrange", "auto"):
            assert same_bits(hpu.hybrid_mergesort(a, strategy=strategy, runtime=rt), np.sort(a, kind="stable"))


@pytest.mark.parametrize("n, k", [(100, 8), (7, 4), (5, 3), (1000, 3)])
def test_equal_finish_shares_rounds_to_the_best_integer_division(n, k):
    """Identical linear units: the remainder goes one item a unit, so the time is ceil(n / k) (the whole remainder to
    one unit took 16 for 100 items over 8)."""
    got = equal_finish_shares(n, [lambda m: np.asarray(m, float)] * k)
    assert sum(got.counts) == n and got.predicted_time == -(-n // k)


def test_keyrange_split_gives_the_faster_device_the_larger_share():
    fast = hpu.Profile(p=16, g=1 << 14, gamma=0.1, cpu_op_seconds=1e-9)
    from hpu.core.costs import CostCurves

    sizes = [1 << 16, 1 << 20, 1 << 24]
    def curves(dev_scale: float) -> CostCurves:
        return CostCurves.measured(sizes, {"cpu_sort": [s * 4e-9 for s in sizes],
                                           "device_sort": [s * 1e-10 * dev_scale for s in sizes],
                                           "transfer": [1e-4 + s * 3e-10 * dev_scale for s in sizes],
                                           "partition": [s * 2e-10 for s in sizes]})
    cpu_prof = fast.replace(curves={"sort": curves(1.0).to_dict()})
    slow_prof = fast.replace(curves={"sort": curves(2.0).to_dict()})
    sp = keyrange_split(1 << 24, cpu_prof, [cpu_prof, slow_prof])
    assert sp.strategy == "keyrange" and sum(sp.shares) == pytest.approx(1.0)
    assert sp.shares[1] > sp.shares[2] > sp.shares[0]
    # The two devices' predicted times match: they finish together.
    n = 1 << 24
    t1 = (1e-4 + 4e-10 * sp.shares[1] * n)
    t2 = (1e-4 + 8e-10 * sp.shares[2] * n)
    assert t1 == pytest.approx(t2, rel=0.02)


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
def test_the_partition_costs_a_pass_a_bucket_or_one_pass_compiled(monkeypatch, compiled):
    """partition_cost with numpy's partition: the two-bucket curve, plus half the four-bucket curve's excess a
    bucket beyond two, the buckets clipped to [2, 8]; with the compiled one the larger curve for any count; a
    profile without the four-bucket curve pays two buckets' cost.  keyrange_split charges the buckets of the units
    with keys."""
    from hpu.core.costs import CostCurves
    from hpu.sorting import costs

    monkeypatch.setattr(costs, "native_partition", lambda dtype=None: compiled)
    sizes = [1 << 16, 1 << 20, 1 << 24]
    base = {"cpu_sort": [s * 4e-9 for s in sizes], "device_sort": [s * 1e-10 for s in sizes],
            "transfer": [1e-4 + s * 3e-10 for s in sizes], "partition": [s * 2e-10 for s in sizes]}
    prof = hpu.Profile(p=16, g=1 << 14, gamma=0.1, cpu_op_seconds=1e-9)
    two = prof.replace(curves={"sort": CostCurves.measured(sizes, base).to_dict()})
    four = prof.replace(curves={"sort": CostCurves.measured(sizes, {**base, "partition4": [s * 6e-10 for s in sizes]})
                                .to_dict()})
    n = 1 << 20
    p2, p4 = n * 2e-10, n * 6e-10
    for b, want in ((1, p2), (2, p2), (3, (p2 + p4) / 2), (4, p4), (8, p2 + 3 * (p4 - p2)), (40, p2 + 3 * (p4 - p2))):
        assert partition_cost(four, n, b) == pytest.approx(p4 if compiled else want, rel=1e-6)
        assert partition_cost(two, n, b) == pytest.approx(p2, rel=1e-6)
    with_two, with_four = (keyrange_split(1 << 24, pr, [pr, pr]) for pr in (two, four))
    assert np.count_nonzero(with_four.shares) == 3
    extra = fast_cost(four, "partition4", 1 << 24) - fast_cost(four, "partition", 1 << 24)
    want = extra if compiled else extra / 2  # three buckets: the larger curve, or half the excess of a fourth
    assert with_four.predicted_time - with_two.predicted_time == pytest.approx(want, rel=1e-6)


def test_eight_threads_share_one_several_device_runtime(units):
    """Concurrent key-range sorts on one runtime of two devices: every result right, no lease or buffer shared."""
    from concurrent.futures import ThreadPoolExecutor

    def one(seed: int) -> bool:
        rng = np.random.default_rng(seed)
        a = _input(rng, DTYPES[seed % len(DTYPES)], int(rng.integers(1000, 150_000)), ["random", "special"][seed % 2])
        out = hpu.hybrid_mergesort(a, shares=(0.2, 0.5, 0.3), runtime=units)
        return same_bits(out, np.sort(a, kind="stable"))

    with ThreadPoolExecutor(8) as ex:
        assert all(ex.map(one, range(24)))


def test_a_sort_from_a_pool_task_on_the_peers_alone_does_not_deadlock(runtime):
    """Called from the only worker of the pool, with only the peer devices taking part: their feeders' staging
    tasks must run on the feeders (the worker is waiting for them)."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(11).standard_normal(200_000)
    rt = hpu.Runtime(devices=[runtime.device] * 3, profile=runtime.profile, threads=1)
    task = rt.pool.submit(lambda: hpu.hybrid_mergesort(a, shares=(0.0, 0.0, 0.5, 0.5), runtime=rt))
    try:
        assert same_bits(task.result(timeout=120), np.sort(a, kind="stable"))  # a deadlock fails, not hangs
    finally:
        if task.done():
            rt.close()


def test_keyrange_sort_refuses_what_is_not_a_1d_array(fresh):
    for bad in (np.zeros((3, 4), np.int32), np.int32(5), [3, 1, 2]):
        with pytest.raises(ValueError, match="keyrange_sort sorts a 1-D numpy array"):
            keyrange_sort(bad, fresh, (1.0,) + (0.0,) * len(fresh.units))  # the CPU and each unit
