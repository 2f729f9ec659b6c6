"""The CPU share of fast mode against numpy.sort(kind="stable")."""

import concurrent.futures

import numpy as np
import pytest
from conftest import same_bits
from hypothesis import given, settings
from hypothesis import strategies as st

from hpu.sorting import cpu as cpusort
from hpu.sorting.cpu import multiway_merge, parallel_sort, stable_partition, stable_sort_inplace

DTYPES = [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64]


@pytest.fixture(scope="module")
def pool():
    with concurrent.futures.ThreadPoolExecutor(4) as p:
        yield p


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


@settings(max_examples=80, deadline=None)
@given(dtype=st.sampled_from(DTYPES), n=st.integers(0, 200_000), kind=st.sampled_from(["rand", "equal", "few"]),
       threads=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_parallel_sort_equals_numpy_stable(pool, dtype, n, kind, threads, seed):
    a = _data(kind, n, dtype, np.random.default_rng(seed))
    before = a.copy()
    assert same_bits(parallel_sort(a, pool, threads), np.sort(a, kind="stable"))
    assert same_bits(a, before)


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


@pytest.mark.parametrize("method", ["auto", "compress", "argsort"])
@pytest.mark.parametrize("k", [1, 2, 3, 6, 7, 12, 300])
def test_stable_partition_equals_a_stable_argsort(method, k):
    """Against numpy's stable argsort of the bucket numbers: every bucket in input order, empty buckets too."""
    rng = np.random.default_rng(k)
    x = rng.standard_normal(5000)
    ids = rng.integers(0, max(1, k // 2), 5000).astype(np.uint16)  # the upper half of the buckets stays empty
    before = x.copy()
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
