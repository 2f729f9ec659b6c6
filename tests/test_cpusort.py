"""The CPU share of fast mode against numpy.sort(kind="stable")."""

import concurrent.futures

import numpy as np
import pytest
from conftest import same_bits
from hypothesis import given, settings
from hypothesis import strategies as st

from hpu.sorting import cpu as cpusort
from hpu.sorting.cpu import (multiway_merge, native_partition, parallel_sort, sample_sort, scatter, stable_partition,
                              stable_sort_inplace)

DTYPES = [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64]
#: What the compiled partition handles beyond the six (the sample sort takes them too).
SMALL_INTS = [np.int8, np.uint8, np.int16, np.uint16]


@pytest.fixture(scope="module")
def pool():
    with concurrent.futures.ThreadPoolExecutor(4) as p:
        yield p


@pytest.fixture(scope="module")
def compiled():
    if not native_partition():
        pytest.skip("the compiled partition was not built here")


@pytest.fixture
def no_compiled(monkeypatch):
    """hpu as where no C compiler was found at install: the compiled partition reported missing."""
    monkeypatch.setattr(cpusort, "native_partition", lambda dtype=None: False)


@pytest.fixture(scope="module", autouse=True)
def small_chunks():
    # Small inputs must take the parallel path here, as large ones do in production.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpusort, "SERIAL_CUTOFF", 512)
        yield


def _data(kind, n, dtype, rng):
    dt = np.dtype(dtype)
    if kind == "equal":
        return np.full(n, 3, dtype=dt)
    if kind == "few":
        return rng.integers(0, 3, n).astype(dt)
    if dt.kind == "f":
        a = rng.standard_normal(n).astype(dt)
        mask = rng.random(n) < 0.4
        a[mask] = rng.choice(np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf], dtype=dt), mask.sum())
        a[rng.random(n) < 0.05] = np.array(np.uint32(0x7FC00001)).view(np.float32) if dt == np.float32 else np.nan
        return a
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)


@pytest.mark.parametrize("method", ["auto", "psrs"])
@settings(max_examples=80, deadline=None)
@given(dtype=st.sampled_from(DTYPES + SMALL_INTS), n=st.integers(0, 200_000),
       kind=st.sampled_from(["rand", "equal", "few"]), threads=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_parallel_sort_equals_numpy_stable(pool, method, dtype, n, kind, threads, seed):
    a = _data(kind, n, dtype, np.random.default_rng(seed))
    before = a.copy()
    assert same_bits(parallel_sort(a, pool, threads, method=method), np.sort(a, kind="stable"))
    assert same_bits(a, before)
    parallel_sort(a, pool, threads, out=a, method=method)  # in place, as the key-range split sorts its buckets
    assert same_bits(a, np.sort(before, kind="stable"))


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(DTYPES + SMALL_INTS), n=st.integers(0, 100_000), kind=st.sampled_from(["rand", "few"]),
       buckets=st.sampled_from([None, 2, 3, 17, 255, 256]), threads=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_sample_sort_any_buckets_and_in_place(compiled, pool, dtype, n, kind, buckets, threads, seed):
    a = _data(kind, n, dtype, np.random.default_rng(seed))
    want = np.sort(a, kind="stable")
    assert same_bits(sample_sort(a, pool, threads, buckets=buckets, seed=seed), want)
    x = a.copy()  # in place, with a scratch array of the keys' dtype, then of too few bytes
    for scratch in (np.empty(n, dtype), np.empty(n // 2, np.uint8)):
        x[:] = a
        assert sample_sort(x, pool, threads, out=x, scratch=scratch, buckets=buckets) is x and same_bits(x, want)


def test_sample_sort_refuses_what_it_cannot_sort(compiled, pool):
    for dtype in (np.float16, np.bool_, "datetime64[s]"):
        with pytest.raises(TypeError, match="does not handle"):
            sample_sort(np.zeros(10, dtype), pool, 2)
    with pytest.raises(ValueError, match="method must be"):
        parallel_sort(np.zeros(10), pool, 2, method="radix")


def test_without_the_compiled_partition_numpy_sorts_and_partitions(no_compiled, pool):
    """The numpy paths (PSRS, compress/argsort grouping) give the same results; the sample sort says why not."""
    rng = np.random.default_rng(5)
    a = _data("rand", 50_000, np.float64, rng)
    assert same_bits(parallel_sort(a, pool, 3), np.sort(a, kind="stable"))
    ids = rng.integers(0, 5, a.size).astype(np.uint8)
    out, counts = stable_partition(a, ids, 5)
    assert same_bits(out, a[np.argsort(ids, kind="stable")]) and counts.tolist() == np.bincount(ids).tolist()
    with pytest.raises(RuntimeError, match="not built"):
        sample_sort(a, pool, 2)


def test_what_the_compiled_partition_does_not_take_goes_numpy_s_way(compiled, pool):
    """Objects, 3- and 12-byte elements, big-endian keys, a short bucket-number buffer: numpy's way or a clear
    error, never the compiled code on bytes it misreads."""
    from hpu.sorting.cpu import bucket_ids, choose_splitters

    ids = np.array([2, 0, 1, 0, 2, 1] * 50, np.uint8)
    for x in (np.array([object(), "a", 3, None, 2.5, b"x"] * 50, dtype=object),
              np.array([b"abc", b"de", b"f", b"gh", b"ijk", b""] * 50, dtype="S3"),
              np.zeros(300, dtype=[("a", "i4"), ("b", "f4"), ("c", "i2"), ("d", "i2")])[["a", "b", "c"]]):
        x = np.ascontiguousarray(x) if x.dtype.kind != "O" else x
        out, counts = stable_partition(x, ids, 3)
        assert out.tolist() == x[np.argsort(ids, kind="stable")].tolist() and counts.tolist() == [100, 100, 100]
    with pytest.raises(TypeError, match="Python objects"):
        scatter(np.zeros(6, object), ids[:6], np.array([0, 2, 4], np.int64), np.zeros(6, object))
    big = np.random.default_rng(2).integers(-1000, 1000, 4000).astype(">i4")
    assert not native_partition(big.dtype)
    assert np.array_equal(parallel_sort(big, pool, 2), np.sort(big, kind="stable"))
    keys, pos = choose_splitters(big.astype(np.int32), [0.5])
    with pytest.raises(ValueError, match="bucket numbers"):
        bucket_ids(big.astype(np.int32), 0, keys, pos, out=np.empty(10, np.uint8))


def test_the_pipeline_asks_psrs_for_keys_the_sample_sort_does_not_take(monkeypatch):
    import hpu
    from hpu.sorting import PipelineOptions, pipeline

    monkeypatch.setattr(pipeline, "cpu_sort_method", lambda profile, n, itemsize: "sample")
    with hpu.Runtime("none", threads=2) as rt:
        for dtype, want in ((np.int32, "sample" if native_partition() else "psrs"), (np.float16, "psrs"),
                            (np.bool_, "psrs"), (">i8", "psrs")):
            assert pipeline.cpu_method(rt, 1 << 20, np.dtype(dtype)) == want
            assert pipeline.cpu_method(rt, 1 << 20, np.dtype(dtype), PipelineOptions(cpu_sort="psrs")) == "psrs"


def test_scatter_refuses_offsets_that_do_not_fit(compiled):
    x = np.arange(10, dtype=np.int32)
    ids = np.array([0, 1] * 5, np.uint8)
    out = np.full(10, -1, np.int32)
    offsets = np.array([0, 5], np.int64)
    scatter(x, ids, offsets, out)
    assert out.tolist() == [0, 2, 4, 6, 8, 1, 3, 5, 7, 9] and offsets.tolist() == [5, 10]
    with pytest.raises(ValueError, match="past the offsets"):
        scatter(x, ids, np.array([0], np.int64), out)  # bucket 1 has no offset
    with pytest.raises(ValueError, match="past the offsets"):
        scatter(x, ids, np.array([0, 6], np.int64), out)  # bucket 1 would run off the end
    with pytest.raises(ValueError, match="not 3"):
        scatter(np.zeros(4, "S3"), np.zeros(4, np.uint8), np.zeros(1, np.int64), np.zeros(4, "S3"))
    with pytest.raises(ValueError, match="contiguous"):
        scatter(x[::2], ids[:5], np.array([0, 5], np.int64), out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stable_sort_inplace_keeps_zero_and_nan_order(dtype):
    nan2 = np.array(np.uint64(0x7FF8000000000001)).view(np.float64).astype(dtype)
    a = np.array([0.0, -np.nan, -0.0, 1.0, np.nan, 0.0, nan2, -0.0, -1.0] * 30, dtype=dtype)
    x = a.copy()
    stable_sort_inplace(x)
    assert same_bits(x, np.sort(a, kind="stable"))


@pytest.mark.parametrize("k", [2, 3, 16])
def test_multiway_merge_ties_go_to_earlier_runs(pool, k):
    rng = np.random.default_rng(k)
    # Equal keys that differ in bits (+0.0 / -0.0) reveal which run each came from.
    a = rng.choice(np.array([0.0, -0.0, 1.0, np.nan], dtype=np.float64), 50_000)
    runs = [np.sort(c, kind="stable") for c in np.array_split(a, k)]
    for buckets in (None, 1, 7, 64):
        out = np.empty_like(a)
        multiway_merge(runs, out, pool, 4, buckets=buckets)
        assert same_bits(out, np.sort(a, kind="stable"))


def test_multiway_merge_rejects_wrong_output_size(pool):
    with pytest.raises(ValueError, match="out has"):
        multiway_merge([np.arange(3), np.arange(4)], np.empty(6), pool, 2)


@pytest.mark.parametrize("method", ["auto", "scatter", "compress", "argsort"])
@pytest.mark.parametrize("k", [1, 2, 3, 6, 7, 12, 300])
def test_stable_partition_equals_a_stable_argsort(method, k):
    """Against numpy's stable argsort of the bucket numbers: every bucket in input order, empty buckets too."""
    rng = np.random.default_rng(k)
    x = rng.standard_normal(5000)
    ids = rng.integers(0, max(1, k // 2), 5000).astype(np.uint16)  # the upper half of the buckets stays empty
    before = x.copy()
    if method == "scatter" and (k > 256 or not native_partition()):
        with pytest.raises((ValueError, RuntimeError), match="at most 256 buckets|not built"):
            stable_partition(x, ids, k, method=method)
        return
    out, counts = stable_partition(x, ids, k, method=method)
    np.testing.assert_array_equal(out, x[np.argsort(ids, kind="stable")])
    np.testing.assert_array_equal(counts, np.bincount(ids, minlength=k))
    np.testing.assert_array_equal(x, before)


def test_stable_partition_bad_input():
    x = np.arange(4)
    with pytest.raises(ValueError, match="method"):
        stable_partition(x, np.zeros(4, np.uint8), 2, method="radix")
    with pytest.raises(ValueError, match="k >= 1"):
        stable_partition(x, np.zeros(4, np.uint8), 0)
    with pytest.raises(ValueError, match="one bucket number a key"):
        stable_partition(x, np.zeros(3, np.uint8), 2)


def test_the_profile_picks_the_cpu_sort_it_measured_faster():
    """cpu_sort_method: PSRS where its curve lies below the sample sort's, the sample sort elsewhere, "auto"
    without the PSRS curve;
    fast_cost charges the faster of the two, and n log n past the largest size measured."""
    import hpu
    from hpu.core.costs import CostCurves
    from hpu.sorting.costs import cpu_sort_method, fast_cost

    sizes = [1 << 16, 1 << 20, 1 << 24]
    sample = [1e-3, 2e-3, 40e-3]  # the sample sort: slower at 2^16, faster above
    psrs = [1e-4, 3e-3, 60e-3]
    prof = hpu.Profile(p=16, g=1 << 14, gamma=0.1, cpu_op_seconds=1e-9)
    both = prof.replace(curves={"sort": CostCurves.measured(sizes, {"cpu_sort": sample, "cpu_sort_psrs": psrs})
                                .to_dict()})
    only = prof.replace(curves={"sort": CostCurves.measured(sizes, {"cpu_sort": sample}).to_dict()})
    assert [cpu_sort_method(both, n) for n in sizes] == ["psrs", "sample", "sample"]
    assert [cpu_sort_method(p, 1 << 16) for p in (only, prof)] == ["auto", "auto"]
    assert [float(fast_cost(both, "cpu_sort", n)) for n in sizes] == pytest.approx([1e-4, 2e-3, 40e-3])
    # Past 2^24 a sort's curve grows as n log n: the curve's own extrapolation times log2(n) / 24.
    linear = CostCurves.measured(sizes, {"cpu_sort": sample}).cost("cpu_sort", 1 << 28)
    assert fast_cost(only, "cpu_sort", 1 << 28) == pytest.approx(linear * 28 / 24)
    assert fast_cost(only, "cpu_sort", [1 << 20, 1 << 28]) == pytest.approx([2e-3, linear * 28 / 24])


@pytest.mark.parametrize("method", ["auto", "sample", "psrs"])
def test_each_cpu_sort_option_sorts_right(method):
    import hpu
    from hpu.sorting import PipelineOptions

    if method == "sample" and not native_partition():
        pytest.skip("the compiled partition was not built here")
    rng = np.random.default_rng(3)
    a = _data("rand", 300_000, np.float32, rng)
    with hpu.Runtime("none", threads=3) as rt:
        got = hpu.hybrid_mergesort(a, strategy="cpu", runtime=rt, options=PipelineOptions(cpu_sort=method))
    assert same_bits(got, np.sort(a, kind="stable"))
    with pytest.raises(ValueError, match="cpu_sort must be"):
        PipelineOptions(cpu_sort="quick")


def _brute_buckets(x, start, keys, positions):
    """Each key's bucket by definition: the splitters its (key, position) pair sorts after, in np.sort's order."""
    order = np.argsort(np.concatenate([keys, x]), kind="stable")  # splitter keys first among equals
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    k = keys.size
    ids = np.zeros(x.size, np.int64)
    for j in range(k):  # a pair sorts after a splitter with an equal key when its position is greater
        after = rank[k:] > rank[j]
        level = np.array([np.array_equal(np.array([v]).view(np.uint8), np.array([keys[j]]).view(np.uint8))
                          or (np.isnan(v) and np.isnan(keys[j])) for v in x])
        ids += np.where(level, np.arange(start, start + x.size) > positions[j], after)
    return ids


@pytest.mark.parametrize("dtype", ["datetime64[s]", "timedelta64[ms]"])
def test_bucket_ids_put_nat_last(dtype):
    """NaT sorts last (numpy's order), level with other NaTs: it is after every splitter but a NaT one."""
    from hpu.sorting.cpu import bucket_ids

    x = np.array([-1, 5, 7, -1, 3, 9, 5, -1], np.int64).astype(dtype)
    x[[0, 3, 7]] = np.array("NaT", dtype)
    for keys, positions in [(x[[6]], np.array([6])), (x[[4, 3]], np.array([4, 3])), (x[[1, 0]], np.array([1, 0]))]:
        got = bucket_ids(x, 0, keys, positions)
        assert list(got) == list(_brute_buckets(x, 0, keys, positions)), (keys, positions)


def test_bucket_ids_default_type_holds_every_bucket():
    """More than 65,535 splitters: the default bucket numbers are wide enough (no wrap-around)."""
    from hpu.sorting.cpu import bucket_ids

    keys = np.arange(70_000, dtype=np.int64)
    got = bucket_ids(np.array([69_999, 69_998, 5], np.int64), 10**6, keys, np.zeros(70_000, np.int64))
    assert list(got) == [70_000, 69_999, 6]


def test_bucket_ids_take_the_last_position_as_a_splitter():
    """A splitter at position 2**63 - 1 (after every key level with it) on numpy's way and the compiled one: keys
    level with it go before it, as by definition (no position + 1 wrapping around)."""
    from hpu.sorting.cpu import bucket_ids

    x = np.array([5, 3, 5, 7, 5], np.int64)
    keys, positions = np.array([5], np.int64), np.array([2**63 - 1], np.int64)
    want = list(_brute_buckets(x, 0, keys, positions))
    assert want == [0, 0, 0, 1, 0]
    for out in (None, np.empty(x.size, np.uint16)):  # uint16 bucket numbers: numpy's way
        assert list(bucket_ids(x, 0, keys, positions, out=out)) == want


def test_a_failed_task_raises_only_once_the_others_have_ended(compiled, pool, monkeypatch):
    """partition_by_splitters raises a task's error only after every other task has stopped writing into its
    outputs (which the caller may hand back to a pool)."""
    import time

    from hpu.sorting.cpu import choose_splitters, partition_by_splitters

    real = cpusort.bucket_ids

    def flaky(x, start, *a, **k):
        if start == 0:
            raise MemoryError("planted")
        time.sleep(0.3)
        return real(x, start, *a, **k)

    monkeypatch.setattr(cpusort, "bucket_ids", flaky)
    a = np.arange(4000, dtype=np.int32)[::-1].copy()
    keys, pos = choose_splitters(a, [0.5])
    ids, out = np.full(4000, 255, np.uint8), np.empty_like(a)
    with pytest.raises(MemoryError, match="planted"):
        partition_by_splitters(a, keys, pos, out, ids, pool, 2, block=2000)
    assert (ids[2000:] < 2).all()  # the other task had written its bucket numbers before the call raised


def test_sample_sort_keeps_to_its_threads(compiled, monkeypatch):
    """The sample sort's bucket sorts run on at most ``threads`` of the pool's workers."""
    import threading

    names = set()
    real = cpusort.stable_sort_inplace

    def noted(x):
        names.add(threading.current_thread().name)
        real(x)

    monkeypatch.setattr(cpusort, "stable_sort_inplace", noted)
    a = np.random.default_rng(3).integers(0, 1 << 30, 100_000).astype(np.int32)
    with concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="w") as p:
        for threads in (1, 2):
            names.clear()
            assert same_bits(sample_sort(a, p, threads, buckets=16), np.sort(a, kind="stable"))
            assert 1 <= len(names) <= threads, names


def test_psrs_ignores_scratch_it_cannot_hold_the_keys_in(pool):
    """A scratch array of another dtype (as the sample sort's bucket numbers use) is not where PSRS puts its runs."""
    a = np.random.default_rng(9).integers(-2**31, 2**31, 5000).astype(np.int32)
    for scratch in (np.zeros(5000, np.uint8), np.zeros(5000, np.int64), np.zeros((5000, 1), np.int32)):
        assert same_bits(parallel_sort(a, pool, 4, scratch=scratch, method="psrs"), np.sort(a, kind="stable"))
