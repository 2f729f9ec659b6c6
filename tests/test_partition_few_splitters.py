"""The compiled partition's few-splitter path (at most three splitters: each key compared with every splitter,
``hpu/sorting/_partition.c``'s ``small_*``) against brute force, numpy's path and the table path: every dtype the
compiled partition takes, one to three splitters, equal keys, NaN payloads, -0.0, infinities, integer extremes,
positions past 2^31 and near 2^62, counts added to, empty and one-key blocks, and the fallbacks."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpu.sorting import cpu
from hpu.sorting.cpu import bucket_ids, choose_splitters

DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float32, np.float64]
STARTS = [0, 1, 37, (1 << 31) + 5, (1 << 32) - 3, (1 << 62) - 1000]
#: A position past every block here (2^63 - 1 itself overflows numpy's path: ``p + 1 - start``)
FAR = (1 << 62) + (1 << 40)

needs_native = pytest.mark.skipif(not cpu.native_partition(), reason="the compiled partition was not built here")


def _nans(dt: np.dtype) -> np.ndarray:
    """Quiet, signalling, payload-carrying and negative NaNs."""
    if dt == np.float32:
        bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC12345], np.uint32)
    else:
        bits = np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0xFFF0000000000001,
                         0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 0x7FF8000012345678], np.uint64)
    v = bits.view(dt)
    assert np.isnan(v).all()
    return v


def _specials(dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        fi = np.finfo(dt)
        vals = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, fi.max, -fi.max, fi.tiny, -fi.tiny, fi.smallest_subnormal,
                -fi.smallest_subnormal, 0.5, -2.5]
        return np.concatenate([np.array(vals, dt), _nans(dt)])
    ii = np.iinfo(dt)
    vals = {ii.min, ii.min + 1, ii.max, ii.max - 1, 0, 1, 2, (ii.max >> 1), (ii.max >> 1) + 1}
    if ii.min < 0:
        vals |= {-1, -2}
    return np.array(sorted(vals), dt)


def _after(x: np.ndarray, px: np.ndarray, s, p: int) -> np.ndarray:
    """Whether each pair (x, px) sorts after (s, p) in numpy's order (NaN last and level, -0.0 == +0.0)."""
    if x.dtype.kind == "f":
        xn, sn = np.isnan(x), bool(np.isnan(s))
        with np.errstate(invalid="ignore"):
            gt = (xn & (not sn)) | (~xn & (not sn) & (x > s))
            eq = (xn & sn) | (~xn & (not sn) & (x == s))
    else:
        gt, eq = x > s, x == s
    return gt | (eq & (px > p))


def _brute(x: np.ndarray, start: int, keys: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The number of splitters each pair (x[i], start + i) sorts after."""
    px = np.int64(start) + np.arange(x.shape[0], dtype=np.int64)
    got = np.zeros(x.shape[0], np.int64)
    for s, p in zip(keys, pos):
        got += _after(x, px, s, int(p))
    return got


def _order_key(v, kind: str):
    if kind == "f":
        return (1, 0.0) if np.isnan(v) else (0, float(v))  # float(-0.0) == 0.0
    return (0, int(v))


def _sorted_splitters(keys: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs in (key in numpy's order, position) order."""
    order = sorted(range(keys.size), key=lambda j: (_order_key(keys[j], keys.dtype.kind), int(pos[j])))
    return keys[order].copy(), np.asarray(pos, np.int64)[order].copy()


@contextlib.contextmanager
def _spy(monkeypatch):
    """Counts the calls of the compiled path."""
    calls = []
    real = cpu._native_bucket_ids

    def spy(*args, **kwargs):
        calls.append(args[2].size)
        return real(*args, **kwargs)

    with monkeypatch.context() as mp:
        mp.setattr(cpu, "_native_bucket_ids", spy)
        yield calls


def _numpy_ids(monkeypatch, x, start, keys, pos, **kw):
    with monkeypatch.context() as mp:
        mp.setattr(cpu, "native_partition", lambda dtype=None: False)
        return bucket_ids(x, start, keys, pos, **kw)


def _check(monkeypatch, x, start, keys, pos, *, native=True):
    """Compiled (asserting it ran when ``native``) and numpy against brute force, counts included."""
    want = _brute(x, start, keys, pos)
    k = keys.size + 1
    base = np.arange(100, 100 + k, dtype=np.int64) * 1000003  # counts added to, not overwritten
    counts = base.copy()
    with _spy(monkeypatch) as calls:
        got = bucket_ids(x, start, keys, pos, counts=counts)
    assert len(calls) == (1 if native else 0)
    ctx = (x.dtype, start, keys, pos, x)
    assert np.array_equal(got, want), ctx
    assert np.array_equal(counts, base + np.bincount(want, minlength=k)), ctx
    counts2 = base.copy()
    ref = _numpy_ids(monkeypatch, x, start, keys, pos, counts=counts2)
    assert np.array_equal(ref, want), ctx
    assert np.array_equal(counts2, counts), ctx
    return want


@needs_native
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_special_values_one_to_three_splitters(monkeypatch, dtype):
    rng = np.random.default_rng(sum(map(ord, np.dtype(dtype).name)))
    sv = _specials(dtype)
    for m in (0, 1, 2, 7, 17, 33, 64, 129, 300):  # the vectorized loop's remainders
        x = sv[rng.integers(0, sv.size, m)] if m else np.empty(0, dtype)
        for nsplit in (1, 2, 3):
            for _ in range(6):
                start = int(rng.choice(STARTS))
                keys = sv[rng.integers(0, sv.size, nsplit)]
                if rng.random() < 0.3:
                    keys[:] = keys[0]  # level splitters
                # positions around the block (ties by position decide), before it and after it
                pos = start + rng.integers(-3, max(m, 1) + 3, nsplit)
                pos = np.where(rng.random(nsplit) < 0.15, rng.choice([0, FAR], nsplit), pos)
                pos = np.maximum(pos, 0).astype(np.int64)
                keys, pos = _sorted_splitters(keys, pos)
                _check(monkeypatch, x, start, keys, pos)


@needs_native
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_few_distinct_keys_against_stable_argsort_ranks(monkeypatch, dtype):
    """The existing test's reference: each pair's rank in the stable argsort order against the splitters'."""
    rng = np.random.default_rng(3)
    dt = np.dtype(dtype)
    sv = _specials(dt)
    arrays = [np.full(500, sv[0], dt), np.full(500, sv[-1], dt), np.full(1, sv[1], dt),
              rng.integers(0, 2, 700).astype(dt), sv[rng.integers(0, 3, 900)], sv[rng.integers(0, sv.size, 1000)]]
    if dt.kind == "f":
        arrays.append(_nans(dt)[rng.integers(0, 7, 400)])  # NaN only, every payload level
        arrays.append(np.array([0.0, -0.0], dt)[rng.integers(0, 2, 400)])
    fracs = [[0.5], [0.0], [1.0], [0.2, 0.5], [0.5, 0.5], [0.0, 1.0], [0.25, 0.5, 0.75], [0.0, 0.0, 0.0],
             [1.0, 1.0, 1.0], [0.1, 0.1, 0.9], [0.0, 0.5, 1.0]]
    for a in arrays:
        rank = np.empty(a.size, np.int64)
        rank[np.argsort(a, kind="stable")] = np.arange(a.size)
        for fr in fracs:
            keys, pos = choose_splitters(a, fr, sample=min(a.size, 97), seed=int(rng.integers(1 << 30)))
            want = (rank[:, None] > rank[pos][None, :]).sum(axis=1)
            for s in sorted({0, 1, a.size // 3, a.size - 1, a.size}):
                got = _check(monkeypatch, a[s:], s, keys, pos)
                assert np.array_equal(got, want[s:])


@needs_native
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_few_splitter_path_agrees_with_the_table_path(monkeypatch, dtype):
    """Splitters that no pair sorts after (the largest key at the largest position) appended: four to six
    splitters take the table; the buckets of the first ones must not change."""
    rng = np.random.default_rng(5)
    dt = np.dtype(dtype)
    sv = _specials(dt)
    top = _nans(dt)[0] if dt.kind == "f" else np.iinfo(dt).max
    for start in STARTS:
        x = sv[rng.integers(0, sv.size, 2000)]
        for nsplit in (1, 2, 3):
            keys, pos = _sorted_splitters(sv[rng.integers(0, sv.size, nsplit)],
                                          start + rng.integers(0, 2000, nsplit))
            small = bucket_ids(x, start, keys, pos)
            big_keys = np.concatenate([keys, np.full(3, top, dt)])
            big_pos = np.concatenate([pos, np.full(3, (1 << 63) - 1, np.int64)])
            with _spy(monkeypatch) as calls:
                table = bucket_ids(x, start, big_keys, big_pos)
            assert calls == [nsplit + 3]
            assert np.array_equal(small, table)
            assert np.array_equal(small, _brute(x, start, keys, pos))


@needs_native
def test_out_longer_than_the_keys_and_the_fallbacks(monkeypatch):
    rng = np.random.default_rng(11)
    a = rng.integers(-3, 3, 301).astype(np.int32)
    keys, pos = _sorted_splitters(np.array([-1, 0, 0], np.int32), np.array([5, 10, 200], np.int64))
    want = _brute(a, 1000, keys, pos)
    out = np.full(400, 77, np.uint8)
    with _spy(monkeypatch) as calls:
        got = bucket_ids(a, 1000, keys, pos, out=out)
    assert calls == [3] and np.array_equal(got, want) and np.shares_memory(got, out)
    assert np.array_equal(out[:301], want) and np.all(out[301:] == 77)
    with pytest.raises(ValueError, match="out holds"):
        bucket_ids(a, 1000, keys, pos, out=np.empty(300, np.uint8))
    # each takes numpy's way, with the same answer
    b = np.repeat(a, 2)[::2]  # non-contiguous keys
    assert np.array_equal(b, a)
    _check(monkeypatch, b, 1000, keys, pos, native=False)
    for x, k in ((a.astype(np.int64), keys), (a, keys.astype(np.int64)), (a.astype(">i4"), keys.astype(">i4")),
                 (a.astype(np.float16), keys.astype(np.float16))):
        with _spy(monkeypatch) as calls:
            got = bucket_ids(x, 1000, k, pos)
        assert calls == ([3] if x.dtype == k.dtype == np.int64 else [])
        assert np.array_equal(got, want)
    for o in (np.zeros(301, np.uint16), np.zeros(602, np.uint8)[::2]):  # wider or strided out
        with _spy(monkeypatch) as calls:
            got = bucket_ids(a, 1000, keys, pos, out=o)
        assert calls == [] and np.array_equal(got, want) and np.shares_memory(got, o)
    # splitters given non-contiguous or as another integer type: still compiled
    with _spy(monkeypatch) as calls:
        got = bucket_ids(a, 1000, np.repeat(keys, 2)[::2], pos.astype(np.int32))
    assert calls == [3] and np.array_equal(got, want)


@needs_native
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_empty_and_one_key(monkeypatch, dtype):
    sv = _specials(dtype)
    for nsplit in (1, 2, 3):
        keys, pos = _sorted_splitters(sv[:nsplit][::-1].copy(), np.arange(nsplit, dtype=np.int64) * 2)
        for start in (0, 1, 2, 3, 4, (1 << 62)):
            got = _check(monkeypatch, np.empty(0, dtype), start, keys, pos)
            assert got.size == 0
            for v in sv:
                _check(monkeypatch, np.array([v], dtype), start, keys, pos)


_FLOAT_DTYPES = [np.float32, np.float64]


@st.composite
def _cases(draw):
    dt = np.dtype(draw(st.sampled_from(DTYPES)))
    sv = _specials(dt)
    m = draw(st.integers(0, 80))
    if dt.kind == "f":
        elem = st.one_of(st.floats(width=8 * dt.itemsize, allow_nan=True, allow_infinity=True),
                         st.sampled_from(list(sv)))
    else:
        ii = np.iinfo(dt)
        elem = st.one_of(st.integers(int(ii.min), int(ii.max)), st.sampled_from([int(v) for v in sv]),
                         st.integers(-2, 2).filter(lambda v: ii.min <= v))
    x = np.array(draw(st.lists(elem, min_size=m, max_size=m)), dtype=dt) if m else np.empty(0, dt)
    nsplit = draw(st.integers(1, 3))
    if m and draw(st.booleans()):  # splitter keys from the block itself: ties
        keys = x[draw(st.lists(st.integers(0, m - 1), min_size=nsplit, max_size=nsplit))]
    else:
        keys = np.array(draw(st.lists(elem, min_size=nsplit, max_size=nsplit)), dtype=dt)
    start = draw(st.one_of(st.integers(0, 100), st.sampled_from(STARTS), st.integers(0, (1 << 62))))
    pos = np.array(draw(st.lists(st.one_of(st.integers(max(0, start - 3), start + m + 3), st.integers(0, FAR)),
                                 min_size=nsplit, max_size=nsplit)), np.int64)
    keys, pos = _sorted_splitters(keys, pos)
    return x, start, keys, pos


@needs_native
@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(_cases())
def test_random_blocks_hypothesis(monkeypatch, case):
    x, start, keys, pos = case
    _check(monkeypatch, x, start, keys, pos)


@needs_native
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_compiled_function_adds_to_counts_and_writes_only_m_ids(dtype):
    """``hpu_bucket_counts`` itself (the wrapper hands it a zeroed tally): counts added to, ids past m untouched."""
    fn = cpu._partition_library()[0]
    rng = np.random.default_rng(13)
    dt = np.dtype(dtype)
    sv = _specials(dt)
    for m in (0, 1, 5, 10007):
        x = sv[rng.integers(0, sv.size, m)]
        for nsplit in (1, 2, 3):
            start = int(rng.choice(STARTS))
            keys, pos = _sorted_splitters(sv[rng.integers(0, sv.size, nsplit)], start + rng.integers(0, m + 1, nsplit))
            want = _brute(x, start, keys, pos)
            ids = np.full(m + 16, 0xEE, np.uint8)
            base = np.array([5, -7, 11, 1 << 40][: nsplit + 1], np.int64)
            counts = base.copy()
            rc = fn(dt.kind.encode(), dt.itemsize, x.ctypes.data, m, start, keys.ctypes.data, pos.ctypes.data, nsplit,
                    ids.ctypes.data, counts.ctypes.data)
            assert rc == 0
            assert np.array_equal(ids[:m], want) and np.all(ids[m:] == 0xEE)
            assert np.array_equal(counts, base + np.bincount(want, minlength=nsplit + 1))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("length", [1, 3])
def test_counts_of_the_wrong_length_are_refused_on_both_paths(monkeypatch, compiled, length):
    """``counts`` holds one entry a bucket (two for one splitter): shorter or longer is a ValueError, not keys
    dropped silently (the compiled path) or a broadcast error (the numpy path)."""
    if compiled and not cpu.native_partition():
        pytest.skip("the compiled partition was not built here")
    if not compiled:
        monkeypatch.setattr(cpu, "native_partition", lambda dtype=None: False)
    x = np.array([1, 5, 9, 5, 2], np.int32)
    counts = np.zeros(length, np.int64)
    with pytest.raises(ValueError, match="counts"):
        bucket_ids(x, 0, np.array([5], np.int32), np.array([1], np.int64), counts=counts)
    assert not counts.any()
