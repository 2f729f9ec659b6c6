"""hpu.sort, hpu.argsort and hpu.sort_by_key against numpy's stable results (issue 16).

Property tests: hypothesis draws the dtype, the shape, the kind of input and a
seed; numpy's generator makes the array (fast also at 10^5 elements, and
hypothesis still shrinks the drawn parameters).  Every result must equal
``numpy.sort / numpy.argsort(kind="stable")`` bit for bit, under every
strategy and forced split, and the input must be left as it was.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import same_bits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hpu
from hpu.sorting.keys import to_unsigned

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64", "datetime64[ns]", "datetime64[D]", "timedelta64[s]", ">i4", ">f8"]
INPUTS = ["random", "few-unique", "all-equal", "specials", "sorted", "reversed"]
SPLITS = [dict(strategy="auto"), dict(strategy="cpu"), dict(strategy="gpu"), dict(strategy="basic"),
          dict(strategy="advanced"), dict(strategy="advanced", alpha=0.3, transfer_level=0),
          dict(strategy="advanced", alpha=0.7, transfer_level=1), dict(strategy="keyrange", alpha=0.4)]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make(dtype: str, shape: tuple[int, ...], kind: str, seed: int) -> np.ndarray:
    """An array of ``shape`` and ``dtype``: random bits, few distinct values, one value, special values, or ordered."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    size = int(np.prod(shape))
    bits = rng.integers(0, 256, size * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape).copy()
    if dt.kind == "b":
        bits = rng.random(shape) < 0.5
    if kind == "few-unique" and size:
        bits = bits.reshape(-1)[rng.integers(0, min(size, 3), size)].reshape(shape)
    elif kind == "all-equal" and size:
        bits = np.full(shape, bits.reshape(-1)[0], dtype=bits.dtype)
    elif kind == "specials" and size:
        bits = bits.copy()
        special = _specials(dt)
        mask = rng.random(shape) < 0.4
        bits[mask] = special[rng.integers(0, len(special), int(mask.sum()))]
    elif kind == "sorted":
        bits = np.sort(bits, axis=-1)
    elif kind == "reversed":
        bits = np.sort(bits, axis=-1)[..., ::-1].copy()
    return bits


def _specials(dt: np.dtype) -> np.ndarray:
    if dt.kind == "f":
        nan_bits = {2: [0x7E01, 0xFE00], 4: [0x7FC00001, 0xFFC00000], 8: [0x7FF8000000000001, 0xFFF8000000000000]}
        payload_nans = np.array(nan_bits[dt.itemsize], dtype=f"u{dt.itemsize}").view(dt.newbyteorder("="))
        base = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.0], dtype=dt)
        return np.concatenate([base, payload_nans.astype(dt)])
    if dt.kind in "Mm":  # NaT (the int64 minimum), the extremes and values around 0
        i64 = np.iinfo(np.int64)
        return np.array([i64.min, i64.min + 1, -1, 0, 1, i64.max], dtype=np.int64).view(dt)
    if dt.kind == "b":
        return np.array([True, False])
    info = np.iinfo(dt)
    return np.array([info.min, info.max, 0, 1], dtype=dt)


def check_sort_and_argsort(a: np.ndarray, axis: int | None, runtime, **split) -> None:
    before = a.copy()
    out = hpu.sort(a, axis=axis, runtime=runtime, **split)
    assert same_bits(out, np.sort(a, axis=axis, kind="stable")), split
    perm = hpu.argsort(a, axis=axis, runtime=runtime, **split)
    ref = np.argsort(a, axis=axis, kind="stable")
    assert perm.dtype == ref.dtype and perm.shape == ref.shape and np.array_equal(perm, ref), split
    assert same_bits(a, before), "input modified"


def lengths() -> st.SearchStrategy[int]:
    """0 to 10^5, most of them small, some near powers of two."""
    return st.one_of(st.integers(0, 40), st.integers(41, 5000), st.integers(5001, 100_000),
                     st.sampled_from([255, 256, 257, 4095, 4096, 65537]))


@SETTINGS
@given(dtype=st.sampled_from(DTYPES), n=lengths(), kind=st.sampled_from(INPUTS), seed=st.integers(0, 2**32 - 1),
       split=st.sampled_from(SPLITS))
def test_one_dimensional(runtime, dtype, n, kind, seed, split):
    a = make(dtype, (n,), kind, seed)
    if n < 4:
        split = {k: v for k, v in split.items() if k != "transfer_level"}
    check_sort_and_argsort(a, -1, runtime, **split)


@SETTINGS
@given(dtype=st.sampled_from(DTYPES), rows=st.integers(0, 6), cols=st.integers(0, 5000),
       kind=st.sampled_from(INPUTS), seed=st.integers(0, 2**32 - 1),
       split=st.sampled_from([s for s in SPLITS if "transfer_level" not in s]))
def test_rows(runtime, dtype, rows, cols, kind, seed, split):
    check_sort_and_argsort(make(dtype, (rows, cols), kind, seed), -1, runtime, **split)


@SETTINGS
@given(dtype=st.sampled_from(DTYPES), n=lengths(), kind=st.sampled_from(INPUTS), seed=st.integers(0, 2**32 - 1),
       split=st.sampled_from([s for s in SPLITS if "transfer_level" not in s]))
def test_sort_by_key(runtime, dtype, n, kind, seed, split):
    keys = make(dtype, (n,), kind, seed)
    rng = np.random.default_rng(seed)
    records = np.zeros(n, dtype=[("id", "i4"), ("w", "f8"), ("tag", "S3")])
    records["id"] = np.arange(n)
    records["w"] = rng.random(n)
    values = (rng.integers(0, 1 << 40, n), records, rng.random(n).astype(np.float16))
    before = [keys.copy(), *(v.copy() for v in values)]
    sk, sv = hpu.sort_by_key(keys, values, runtime=runtime, **split)
    order = np.argsort(keys, kind="stable")
    assert same_bits(sk, np.sort(keys, kind="stable"))
    assert isinstance(sv, tuple) and len(sv) == 3
    for got, v in zip(sv, values):
        assert same_bits(got, v[order])
    for old, now in zip(before, [keys, *values]):
        assert same_bits(old, now)


@pytest.mark.parametrize("split", SPLITS[:5])
def test_sort_by_key_carries_large_structured_values(runtime, split):
    """Values past the pool's minimum size, with padding and with fields out of memory order."""
    n = 1 << 18
    rng = np.random.default_rng(4)
    keys = rng.integers(0, 1000, n).astype(np.int32)
    aligned = np.zeros(n, dtype=np.dtype([("a", "i1"), ("b", "f8")], align=True))
    aligned["a"], aligned["b"] = rng.integers(-100, 100, n), rng.random(n)
    swapped = np.zeros(n, dtype=np.dtype({"names": ["b", "a"], "formats": ["f8", "i4"], "offsets": [8, 0]}))
    swapped["a"], swapped["b"] = np.arange(n), rng.random(n)
    sk, (sa, ss) = hpu.sort_by_key(keys, (aligned, swapped), runtime=runtime, **split)
    order = np.argsort(keys, kind="stable")
    assert same_bits(sk, keys[order])
    assert sa.dtype == aligned.dtype and same_bits(sa, aligned[order])
    assert ss.dtype == swapped.dtype and same_bits(ss, swapped[order])


@pytest.mark.parametrize("n", [1 << 17, 1000])
@pytest.mark.parametrize("split", SPLITS[:5])
def test_sort_by_key_keeps_the_padding_of_structured_values(runtime, split, n):
    """Every byte of each value moves, the padding between fields too (numpy's field-wise copies skip it); also
    below hpu.sorting.api.SMALL_MAX, where numpy alone sorts."""
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 50, n).astype(np.int32)
    dt = np.dtype([("a", "i1"), ("b", "f8")], align=True)
    values = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).view(dt)  # random padding bytes
    _, got = hpu.sort_by_key(keys, values, runtime=runtime, **split)
    want = values.view(np.dtype((np.void, dt.itemsize)))[np.argsort(keys, kind="stable")]
    assert got.dtype == dt and np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("split", SPLITS[:3])
def test_sort_by_key_carries_structured_values_holding_objects(runtime, split):
    """Records with a Python object field (no raw-byte view of them exists) move as numpy's gather moves them."""
    keys = np.array([3.0, 1.0, np.nan, 1.0, -0.0, 0.0])
    values = np.array([(i, f"v{i}") for i in range(6)], dtype=[("n", "i4"), ("s", "O")])
    before = values.copy()
    sk, sv = hpu.sort_by_key(keys, values, runtime=runtime, **split)
    order = np.argsort(keys, kind="stable")
    assert same_bits(sk, keys[order])
    assert sv.dtype == values.dtype and sv.tolist() == values[order].tolist()
    assert before.tolist() == values.tolist()


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3, None])
@pytest.mark.parametrize("dtype", ["int16", "float32", "datetime64[s]", "uint64"])
def test_any_axis(runtime, axis, dtype):
    a = make(dtype, (7, 33, 5), "specials", 3)
    for split in SPLITS[:5]:
        check_sort_and_argsort(a, axis, runtime, **split)


def test_kind_is_accepted_and_always_stable(runtime):
    a = make("float64", (3000,), "specials", 7)
    for kind in hpu.sorting.api.KINDS:
        assert np.array_equal(hpu.argsort(a, kind=kind, runtime=runtime), np.argsort(a, kind="stable"))


def test_cpu_only_runtime_and_default_runtime(cpu_runtime):
    a = make("int32", (2, 5000), "few-unique", 1)
    check_sort_and_argsort(a, -1, cpu_runtime)
    assert np.array_equal(hpu.argsort(a[0]), np.argsort(a[0], kind="stable"))


def test_scalars_and_lists(runtime):
    assert same_bits(hpu.sort([3, 1, 2], runtime=runtime), np.array([1, 2, 3]))
    assert same_bits(hpu.sort([3, 1.5, 2], runtime=runtime), np.array([1.5, 2, 3]))
    assert same_bits(hpu.sort(np.float32(2.0), axis=None, runtime=runtime), np.array([2.0], np.float32))
    keys, vals = hpu.sort_by_key([2, 1, 2], [10, 20, 30], runtime=runtime)
    assert same_bits(keys, np.array([1, 2, 2])) and same_bits(vals, np.array([20, 10, 30]))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_unsigned_keys_follow_numpy_order_on_every_special(dtype):
    """The key map (independent of the sort): equal keys exactly for numpy-equal values, order as numpy's."""
    s = _specials(np.dtype(dtype))
    k = to_unsigned(s)
    for i in range(s.size):
        for j in range(s.size):
            numpy_less = np.argsort(np.array([s[j], s[i]]), kind="stable")[0] == 1  # s[i] strictly first
            equal = (s[i] == s[j]) or (np.isnan(s[i]) and np.isnan(s[j]))
            assert (k[i] == k[j]) == equal
            assert (k[i] < k[j]) == (numpy_less and not equal)


@pytest.mark.parametrize("call", [
    lambda: hpu.sort(np.zeros(3, np.complex64)),
    lambda: hpu.argsort(np.array(["a", "b"])),
    lambda: hpu.argsort(np.array([object(), object()])),
    lambda: hpu.sort(np.zeros(3, dtype=[("a", "i4")])),
    lambda: hpu.sort_by_key(np.zeros(2, np.complex128), np.zeros(2)),
])
def test_unsupported_dtypes_raise_type_error(call):
    with pytest.raises(TypeError, match="unsupported dtype"):
        call()


@pytest.mark.parametrize("call, match", [
    (lambda: hpu.sort(np.zeros((2, 3)), axis=2), "axis 2 is out of bounds"),
    (lambda: hpu.argsort(np.zeros(3), axis=-2), "out of bounds"),
    (lambda: hpu.sort(np.float64(1.0)), "out of bounds"),
    (lambda: hpu.sort(np.zeros(3), kind="bogo"), "kind must be one of"),
    (lambda: hpu.sort(np.zeros(3), strategy="fastest"), "strategy"),
    (lambda: hpu.sort(np.zeros((3, 4), np.int8), alpha=5.0), r"alpha must lie in \[0, 1\]"),
    (lambda: hpu.sort(np.zeros((3, 4)), transfer_level=-1, strategy="gpu"), "transfer_level must be an integer"),
    (lambda: hpu.argsort(np.zeros(1, np.float32), transfer_level=1.5), "transfer_level must be an integer"),
    (lambda: hpu.sort(np.zeros(9, np.int8), transfer_level="2"), "transfer_level must be an integer"),
    (lambda: hpu.hybrid_mergesort(np.zeros(1), on_device_error="bogus"), "on_device_error"),
    (lambda: hpu.hybrid_mergesort(np.zeros(1), transfer_level=-3), "transfer_level must be an integer"),
    (lambda: hpu.sort_by_key(np.zeros(3), np.zeros(4)), "values has 4 elements but keys has 3"),
    (lambda: hpu.sort_by_key(np.zeros(3), (np.zeros(3), np.zeros(2))), r"values\[1\] has 2 elements"),
    (lambda: hpu.sort_by_key(np.zeros(3), np.zeros((3, 2))), "one-dimensional"),
    (lambda: hpu.sort_by_key(np.zeros((3, 2)), np.zeros(3)), "1-D keys"),
    (lambda: hpu.sort_by_key(np.float64(1.0), np.zeros(1)), "1-D keys"),
])
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("call, match", [
    (lambda: hpu.sort(np.zeros(3), alpha="x"), "alpha must be a real number"),
    (lambda: hpu.hybrid_mergesort(np.arange(10.0), options="x"), "options must be an hpu.PipelineOptions"),
    (lambda: hpu.hybrid_mergesort(np.zeros(1), runtime="x"), "runtime must be an hpu.Runtime"),
])
def test_bad_argument_types_raise_type_error(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_bad_shares_are_named(runtime):
    """``shares`` of hybrid_mergesort that are no sequence of real numbers, or a scalar: an error naming shares."""
    x, k = np.arange(50.0)[::-1], 1 + len(runtime.units)
    for bad in ("ab", {0.5, 0.25}, [True] + [False] * (k - 1), (v for v in [1.0] + [0.0] * (k - 1))):
        with pytest.raises(TypeError, match="shares must be a sequence of real numbers"):
            hpu.hybrid_mergesort(x, runtime=runtime, shares=bad)
    with pytest.raises(ValueError, match=f"shares must be {k} non-negative fractions"):
        hpu.hybrid_mergesort(x, runtime=runtime, shares=1.0)
    assert same_bits(hpu.hybrid_mergesort(x, runtime=runtime, shares=np.array([1.0] + [0.0] * (k - 1))), np.sort(x))


@pytest.mark.parametrize("a", [np.zeros(100), np.zeros(100, np.int8), np.zeros((4, 25)), np.zeros((25, 4), np.int16)])
def test_transfer_level_past_the_depth_is_refused_on_every_path(runtime, a):
    """``transfer_level`` beyond ``ceil(log2 n)`` for the call's n keys is a ValueError, whether a hybrid sort of the
    keys runs (1-D float64) or not (numpy's radix sort of int8 keys, the CPU's row sorts); within it, numpy's result."""
    for call in (hpu.sort, hpu.argsort):
        with pytest.raises(ValueError, match=r"transfer_level must lie in \[0, 7\] for n=100"):
            call(a, runtime=runtime, transfer_level=8)
        assert same_bits(call(a, runtime=runtime, transfer_level=7), getattr(np, call.__name__)(a, kind="stable"))
    if a.ndim == 1:
        with pytest.raises(ValueError, match=r"transfer_level must lie in \[0, 7\]"):
            hpu.sort_by_key(a, a, runtime=runtime, transfer_level=8)


@pytest.mark.parametrize("kind", [None, "quicksort", "Q", "heap", "mergesort", "STABLE", b"stable", b"q",
                                  np.bytes_(b"s"), np.str_("m")])
def test_every_kind_numpy_takes_gives_the_stable_result(runtime, kind):
    a = np.array([[2.0, -0.0, np.nan, 0.0, 1.0], [0.0, 0.0, -0.0, 3.0, -1.0]])
    assert same_bits(hpu.sort(a, kind=kind, runtime=runtime), np.sort(a, kind="stable"))
    assert same_bits(hpu.argsort(a, kind=kind, runtime=runtime), np.argsort(a, kind="stable"))
    np.sort(a, kind=kind)  # numpy takes it too
    for bad in ("", "radix", b"x"):
        with pytest.raises(ValueError, match="kind must be one of"):
            hpu.sort(a, kind=bad, runtime=runtime)


def test_argsort_takes_a_scalar_as_one_element_as_numpy_does(runtime):
    for axis in (-1, 0, None):
        assert same_bits(hpu.argsort(np.array(5), axis=axis, runtime=runtime),
                         np.argsort(np.array(5), axis=axis, kind="stable"))
    with pytest.raises(np.exceptions.AxisError):
        hpu.argsort(np.array(5), axis=1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m", [9, 12, 17, 26, 57, 333])
@pytest.mark.parametrize("strategy", ["auto", "cpu"])
def test_rows_keep_negative_zeros_without_nans(runtime, dtype, m, strategy):
    """Rows holding -0.0 and no NaN: numpy's SIMD sort may write -0.0 as +0.0, so the CPU's row sorts find such rows
    by their input bits and sort them stably."""
    a = np.tile(np.array([1.0, 0.0, -0.0], dtype), (5, m // 3 + 1))[:, :m].copy()
    a[1] = np.abs(a[1])  # a row without -0.0
    for axis in (-1, 0):
        assert same_bits(hpu.sort(a, axis=axis, runtime=runtime, strategy=strategy),
                         np.sort(a, axis=axis, kind="stable"))


def test_axis_error_is_numpys():
    with pytest.raises(np.exceptions.AxisError):
        hpu.argsort(np.zeros((2, 2)), axis=5)


@pytest.fixture(scope="module")
def wide_runtime():
    """A runtime with 8 threads, so that arrays above 2^19 elements are cut into 8 pool tasks."""
    with hpu.Runtime(threads=8, profile=hpu.Profile(p=2, g=64, gamma=0.5, cpu_op_seconds=3e-9)) as rt:
        yield rt


@pytest.mark.parametrize("dtype", ["int64", "float64", "float32", "datetime64[ms]"])
@pytest.mark.parametrize("strategy", ["cpu", "gpu"])
def test_many_pool_tasks(wide_runtime, dtype, strategy):
    """Blocks of columns (one long row) and of rows: pack's offsets, the chunked gathers, both 64-bit passes."""
    long_row = ((1 << 19) + 3,)
    for shape, kind in [(long_row, "specials"), (long_row, "few-unique"), ((24, 40_000), "random")]:
        check_sort_and_argsort(make(dtype, shape, kind, 5), -1, wide_runtime, strategy=strategy)
    keys = make(dtype, long_row, "few-unique", 6)
    values = np.arange(keys.size) * 3
    sk, sv = hpu.sort_by_key(keys, values, runtime=wide_runtime, strategy=strategy)
    assert same_bits(sv, values[np.argsort(keys, kind="stable")])


@pytest.mark.parametrize("view", ["strided", "reversed", "fortran", "readonly", "scalar"])
def test_memory_layouts(runtime, view):
    base = make("float32", (40, 60), "specials", 9)
    a = {"strided": base[::2, ::3], "reversed": base[::-1, ::-1], "fortran": np.asfortranarray(base),
         "readonly": base.copy(), "scalar": base[3, 4]}[view]
    if view == "readonly":
        a.flags.writeable = False
    for axis in ([None] if view == "scalar" else [0, -1, None]):
        out = hpu.sort(a, axis=axis, runtime=runtime)
        assert same_bits(np.ascontiguousarray(out), np.ascontiguousarray(np.sort(a, axis=axis, kind="stable")))
        assert np.array_equal(hpu.argsort(a, axis=axis, runtime=runtime), np.argsort(a, axis=axis, kind="stable"))


@pytest.mark.parametrize("fixture", ["cpu_runtime", "runtime"])
def test_calls_from_pool_workers_do_not_deadlock(request, fixture):
    """Every pool worker sorting on its own runtime (hpu.WorkerPool runs their pool work on them): no deadlock."""
    rt = request.getfixturevalue(fixture)
    a = make("float64", (1 << 20,), "random", 2)
    calls = [(hpu.argsort, {}, np.argsort(a, kind="stable")), (hpu.sort, {}, np.sort(a, kind="stable")),
             (hpu.hybrid_mergesort, {"strategy": "advanced", "alpha": 0.5}, np.sort(a, kind="stable"))]
    for fn, kw, ref in calls:
        futures = [rt.pool.submit(fn, a, runtime=rt, **kw) for _ in range(rt.threads)]
        for f in futures:
            assert same_bits(f.result(timeout=300), ref)


def test_closed_runtime_raises():
    rt = hpu.Runtime("none", profile=hpu.Profile(p=2, g=1, gamma=1))
    rt.close()
    for call in (hpu.argsort, hpu.sort, lambda a, runtime: hpu.sort_by_key(a, a, runtime=runtime)):
        for n in (10, 10**4):  # numpy alone sorts the small one (hpu.sorting.api.SMALL_MAX)
            with pytest.raises(hpu.RuntimeClosedError, match="is closed"):
                call(np.arange(n), runtime=rt)


def test_numpy_kind_spellings(runtime):
    a = make("int16", (500,), "few-unique", 4)
    for kind in ["Q", "STABLE", "s", "merge", "heap"]:
        assert np.array_equal(hpu.argsort(a, kind=kind, runtime=runtime), np.argsort(a, kind="stable"))


def test_masked_arrays_are_refused(runtime):
    with pytest.raises(TypeError, match="masked arrays"):
        hpu.sort(np.ma.array([3.0, 1.0, 2.0], mask=[0, 1, 0]), runtime=runtime)
    with pytest.raises(TypeError, match="masked"):
        hpu.sort_by_key(np.ma.array([3.0, 1.0, 2.0], mask=[0, 1, 0]), np.arange(3), runtime=runtime)
    for values in (np.ma.array([3, 1, 2], mask=[0, 1, 0]), (np.arange(3), np.ma.array([3, 1, 2], mask=[0, 1, 0]))):
        with pytest.raises(TypeError, match=r"masked values(\[1\])? are not supported"):
            hpu.sort_by_key(np.array([3.0, 1.0, 2.0]), values, runtime=runtime)


@pytest.mark.parametrize("strategy", ["auto", "gpu"])
def test_bool_views_of_other_bytes_keep_them(runtime, strategy):
    a = np.array([2, 1, 0, 1, 255, 0] * 50, np.uint8).view(bool)
    assert same_bits(hpu.sort(a, runtime=runtime, strategy=strategy), np.sort(a, kind="stable"))
    assert np.array_equal(hpu.argsort(a, runtime=runtime, strategy=strategy), np.argsort(a, kind="stable"))


def test_fortran_order_is_kept_as_numpy_keeps_it(runtime):
    a = np.asfortranarray(make("int32", (30, 40), "random", 1))
    out = hpu.sort(a, axis=0, runtime=runtime)
    ref = np.sort(a, axis=0, kind="stable")
    assert out.flags.f_contiguous == ref.flags.f_contiguous and np.array_equal(out, ref)


@pytest.mark.parametrize("view", ["transposed", "reversed-F", "strided", "3-D F"])
def test_memory_order_of_any_layout_is_numpys(runtime, view):
    """numpy sorts a copy in the input's memory order ("K"): so does hpu.sort, whatever the view."""
    base = make("float64", (4, 6, 10), "random", 2)
    a = {"transposed": base.transpose(1, 0, 2), "reversed-F": base.reshape(-1)[::-1].reshape(4, 6, 10).T,
         "strided": base[:, ::2], "3-D F": np.asfortranarray(base)}[view]
    for axis in (-1, 0, 1):
        out, ref = hpu.sort(a, axis=axis, runtime=runtime), np.sort(a, axis=axis, kind="stable")
        assert out.strides == ref.strides and same_bits(np.ascontiguousarray(out), np.ascontiguousarray(ref)), axis


# -- the device packing path (hpu.sorting.pipeline.fast_keyed_sort) ---------------------------------------------


def _keyed_values(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    records = np.zeros(n, dtype=[("id", "<i2"), ("w", "<f8"), ("tag", "S3")])  # 13 bytes: gathered byte by byte
    records["id"] = np.arange(n)
    return [rng.integers(0, 1 << 60, n), records, rng.random(n).astype(np.float32), rng.integers(0, 9, n, np.uint8),
            rng.integers(0, 9, (2 * n,), np.int16)[::2]]  # a strided view


@pytest.mark.parametrize("dtype", ["int32", "uint32", "float32", "int64", "uint64", "float64", "datetime64[ns]",
                                   "timedelta64[s]"])
@pytest.mark.parametrize("n", [2, 3, 1000, 70_001])
@pytest.mark.parametrize("chunk_bytes", [4 << 10, 4 << 20, 1000, 6000])  # the last two: not multiples of alignment
@pytest.mark.parametrize("sort_waves, device_sort", [(True, "merge"), (False, "merge"), (False, "radix"),
                                                     (True, "tile-radix")])
def test_keyed_sort_on_the_device(fresh, dtype, n, chunk_bytes, sort_waves, device_sort):
    """Packing, sorting (the merge sort or the GPU's radix sort in waves, the merge sort without, the CPU's radix
    sort), unpacking and gathering on the device equal numpy bit for bit."""
    from hpu.sorting.pipeline import fast_keyed_sort

    opts = hpu.PipelineOptions(chunk_bytes=chunk_bytes, sort_waves=sort_waves, device_sort=device_sort)
    for kind in ["specials", "few-unique", "random"]:
        keys = make(dtype, (n,), kind, n)
        values = _keyed_values(n, n)
        before = [keys.copy(), *(v.copy() for v in values)]
        order = np.argsort(keys, kind="stable")
        (perm,), trace = fast_keyed_sort(keys, values, fresh, redo=None, options=opts,
                                         on_device_error="raise")
        assert perm.dtype == np.int64 and np.array_equal(perm, order) and trace.fallback == ""
        out, _ = fast_keyed_sort(keys, values, fresh, gather=True, redo=None, options=opts,
                                 on_device_error="raise")
        for got, want in zip(out, [keys, *values]):
            assert same_bits(got, want[order])
        for old, now in zip(before, [keys, *values]):
            assert same_bits(old, np.ascontiguousarray(now))


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64", "datetime64[ms]"])
@pytest.mark.parametrize("shape", [(1000, 1), (300, 7), (6, 5000), (3, 65_537)])
def test_keyed_row_sort_on_the_device(fresh, dtype, shape):
    """Rows packed with their row number (a segmented sort), waves cutting rows: each row as numpy sorts it."""
    from hpu.sorting.pipeline import fast_keyed_sort

    opts = hpu.PipelineOptions(chunk_bytes=4 << 10)
    rows = make(dtype, shape, "specials", shape[1])
    flat = rows.reshape(-1)
    (perm,), _ = fast_keyed_sort(flat, [], fresh, row_length=shape[1], redo=None, options=opts,
                                 on_device_error="raise")
    assert np.array_equal(perm.reshape(shape), np.argsort(rows, axis=-1, kind="stable"))
    (out,), _ = fast_keyed_sort(flat, [], fresh, gather=True, row_length=shape[1], redo=None,
                                options=opts, on_device_error="raise")
    assert same_bits(out.reshape(shape), np.sort(rows, axis=-1, kind="stable"))
    check_sort_and_argsort(rows, -1, fresh, strategy="gpu")


class _SlowSlices(np.ndarray):
    """An array whose slices take a while to read: its staging ends long after the keys are sorted."""

    reads: list[slice] = []

    def __getitem__(self, item):
        if isinstance(item, slice):
            _SlowSlices.reads.append(item)
            time.sleep(0.02)
        return super().__getitem__(item)


def test_keyed_gathers_wait_for_the_values_copies(fresh):
    """The values' copies run on the copy queue while the device sorts: each gather waits for its array's copies.
    Staged by the Python pool's tasks, which slice each piece as they copy it (the compiled stager reads the
    arrays by address, slicing none)."""
    from hpu.sorting.pipeline import fast_keyed_sort

    keys = make("int32", (100_000,), "random", 4)
    for seed in range(2):
        values = np.random.default_rng(seed).integers(0, 1 << 60, keys.size).view(_SlowSlices)
        _SlowSlices.reads.clear()
        out, _ = fast_keyed_sort(keys, [values], fresh, gather=True, redo=None, on_device_error="raise",
                                 options=hpu.PipelineOptions(chunk_bytes=32 << 10, native_staging=False))
        assert len(_SlowSlices.reads) > 1  # the values were staged through the slow slices, piece by piece
        assert np.array_equal(out[1], values.view(np.ndarray)[np.argsort(keys, kind="stable")])


def test_failed_key_value_staging_raises_and_leaves_inputs(fresh, monkeypatch):
    """A staging copy that fails (a piece of the keys, then of the values): the sort raises, no device copy waits
    forever, the inputs are untouched, and the next sort is right.  Staged by the Python pool's tasks, whose copies
    can fail (the compiled stager's cannot)."""
    import hpu.sorting.pipeline as fm
    from hpu.sorting.pipeline import fast_keyed_sort

    rng = np.random.default_rng(9)
    keys, values = rng.integers(0, 1000, 50_000).astype(np.int32), rng.integers(0, 1 << 60, 50_000)
    before, real = (keys.copy(), values.copy()), np.copyto
    opts = hpu.PipelineOptions(chunk_bytes=16 << 10, native_staging=False)
    order = np.argsort(keys, kind="stable")
    for failing in (keys, values):
        seen = []

        def copyto(dst, src, *args, **kw):  # the second piece staged from the failing array
            if isinstance(src, np.ndarray) and np.shares_memory(src, failing):
                seen.append(1)
                if len(seen) == 2:
                    raise MemoryError("injected: staging failed")
            return real(dst, src, *args, **kw)

        monkeypatch.setattr(fm.np, "copyto", copyto)  # numpy's own: every caller's, until restored below
        with pytest.raises(hpu.DeviceFailure, match="injected"):
            fast_keyed_sort(keys, [values], fresh, gather=True, redo=None, options=opts, on_device_error="raise")
        monkeypatch.setattr(fm.np, "copyto", real)
        assert len(seen) >= 2
        assert same_bits(keys, before[0]) and same_bits(values, before[1])
        out, _ = fast_keyed_sort(keys, [values], fresh, gather=True, redo=None, options=opts,
                                 on_device_error="raise")
        assert same_bits(out[0], keys[order]) and same_bits(out[1], values[order])


def test_key_value_staging_pieces_ramp_up():
    """Key-value staging: the keys' pieces grow from a fraction of the chunk to the chunk (so that tasks finish
    one after another), every piece starts on the alignment, and the pieces cover the array in order."""
    from hpu.sorting.pipeline import _ramp_pieces

    for n, length, align, tasks in [(10_000, 512, 16, 8), (100, 64, 16, 8), (5, 64, 16, 8), (10_000, 512, 16, 1)]:
        pieces = _ramp_pieces(n, length, align, tasks)
        assert pieces[0][0] == 0 and pieces[-1][1] == n
        assert all(a < b == c for (a, b), (c, _) in zip(pieces, pieces[1:]))
        assert all(a % align == 0 for a, _ in pieces)
        sizes = [b - a for a, b in pieces[:-1]]
        assert sizes[:tasks - 1] == sorted(sizes[:tasks - 1]) and all(x == length for x in sizes[tasks - 1:])
    assert [b - a for a, b in _ramp_pieces(10_000, 512, 16, 8)[:8]] == [64, 128, 192, 256, 320, 384, 448, 512]
    assert _ramp_pieces(0, 512, 16, 8) == []


def test_key_value_results_share_one_pool_block(fresh):
    """An argsort leaves one pinned block of its int64 result's size; the key-value sorts after it must not take
    their own keys' block for a result the caller keeps and put the values in plain memory."""
    from hpu.sorting.pipeline import fast_keyed_sort

    n = 1 << 20
    rng = np.random.default_rng(6)
    keys, values = rng.integers(0, n, n).astype(np.int32), rng.integers(0, 1 << 60, n)
    opts = hpu.PipelineOptions(result_memory="plain")  # where no free pinned block fits and one is leased
    (perm,), _ = fast_keyed_sort(keys, [], fresh, redo=None, on_device_error="raise", options=opts)
    assert fresh.host_pool.is_pinned(perm)
    del perm
    order = np.argsort(keys, kind="stable")
    for _ in range(2):
        (sk, sv), _ = fast_keyed_sort(keys, [values], fresh, gather=True, redo=None, on_device_error="raise",
                                      options=opts)
        assert fresh.host_pool.is_pinned(sk) and fresh.host_pool.is_pinned(sv)
        assert np.array_equal(sk, keys[order]) and np.array_equal(sv, values[order])
        del sk, sv


def test_packs_on_device_checks_rows():
    with pytest.raises(ValueError, match="rows must divide"):
        hpu.sorting.packs_on_device(10, np.int32, rows=3)


@pytest.mark.parametrize("device_sort_seconds, on_device", [(0.1, True), (0.25, False)])
def test_rows_go_to_the_device_where_the_model_predicts_it_faster(runtime, device_sort_seconds, on_device):
    """Rows of m: the device's transfers (4-byte keys) and packed 64-bit sort against the CPU's whole sort scaled by
    log2(m) / log2(n).  Here n = 2^20 rows of m = 2^10 (CPU: 1 s x 10 / 20 = 0.5 s) against 0.1 s + 2 x 0.1 s
    (device) or 0.1 s + 2 x 0.25 s: the device, then the CPU, though a 1-D sort of n keys would go to the device
    in both cases (0.2 s + 0.2 s or 0.5 s against 1 s)."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    sizes = [1 << 10, 1 << 20]
    curves = {"sizes": sizes, "cpu_sort": [1e-3, 1.0], "device_sort": [1e-4, device_sort_seconds],
              "transfer": [1e-4, 0.1], "merge2": [1e-4, 0.1], "merge16": [1e-4, 0.2]}
    with hpu.Runtime(runtime.device, profile=hpu.Profile(p=2, g=1, gamma=1, curves={"sort": curves}),
                     threads=2) as rt:
        n, rows = 1 << 20, 1 << 10
        assert hpu.sorting.packs_on_device(n, np.float32, rt, rows=rows, gather=True) is on_device
        assert hpu.sorting.planned_strategy(n, np.float32, rt) == "gpu"
        assert hpu.sorting.packs_on_device(n, np.float32, rt, rows=rows, gather=True, strategy="gpu")
        assert not hpu.sorting.packs_on_device(n, np.float32, rt, rows=rows, gather=True, strategy="cpu")


def test_keyed_row_length_is_checked(fresh):
    from hpu.sorting.pipeline import fast_keyed_sort

    for m in [0, 7, 1 << 40]:
        with pytest.raises(ValueError, match="row_length"):
            fast_keyed_sort(np.zeros(100, np.int32), [], fresh, row_length=m, redo=None)


def test_api_uses_the_device_packing_with_the_gpu_strategy(fresh, monkeypatch):
    import hpu.sorting.api as api

    calls = []
    real = api.fast_keyed_sort
    monkeypatch.setattr(api, "fast_keyed_sort", lambda *a, **k: calls.append(1) or real(*a, **k))
    keys = make("float32", (5000,), "specials", 3)
    values = np.arange(5000)
    assert np.array_equal(hpu.argsort(keys, runtime=fresh, strategy="gpu"), np.argsort(keys, kind="stable"))
    sk, sv = hpu.sort_by_key(keys, values, runtime=fresh, strategy="gpu")
    assert same_bits(sk, np.sort(keys, kind="stable")) and same_bits(sv, values[np.argsort(keys, kind="stable")])
    assert len(calls) == 2
    # Host paths: a forced CPU share, 16-bit keys, big-endian keys.
    order = np.argsort(keys, kind="stable")
    assert np.array_equal(hpu.argsort(keys, runtime=fresh, strategy="advanced", alpha=0.5), order)
    halves = keys.view(np.int16)
    assert np.array_equal(hpu.argsort(halves, runtime=fresh, strategy="gpu"), np.argsort(halves, kind="stable"))
    big = keys.astype(">f4")
    sk, sv = hpu.sort_by_key(big, values, runtime=fresh, strategy="gpu")
    assert same_bits(sk, np.sort(big, kind="stable")) and same_bits(sv, values[np.argsort(big, kind="stable")])
    assert len(calls) == 2
    # Object values: the device argsorts, the host gathers.
    sk, sv = hpu.sort_by_key(keys, values.astype(object), runtime=fresh, strategy="gpu")
    assert len(calls) == 3 and np.array_equal(sv, values[np.argsort(keys, kind="stable")])


@pytest.mark.parametrize("on_error", ["fallback", "raise"])
def test_keyed_sort_device_fault(fresh, monkeypatch, on_error):
    """A device failure mid-sort: the CPU redoes it (right result, the failure in the trace) or DeviceFailure."""
    import pyopencl as cl

    from hpu.sorting.device import DeviceSorter
    from hpu.sorting.pipeline import fast_keyed_sort

    real = DeviceSorter.sort

    def faulty(self, *a, **k):
        real(self, *a, **k)
        raise cl.LogicError("clEnqueueNDRangeKernel failed: <unknown error -9999>")

    monkeypatch.setattr(DeviceSorter, "sort", faulty)
    keys = make("int32", (50_000,), "few-unique", 8)
    before, order = keys.copy(), np.argsort(keys, kind="stable")
    redo = lambda: [np.argsort(keys, kind="stable")]  # noqa: E731
    if on_error == "raise":
        with pytest.raises(hpu.DeviceFailure, match="-9999"):
            fast_keyed_sort(keys, [], fresh, redo=redo, on_device_error="raise")
    else:
        (perm,), trace = fast_keyed_sort(keys, [], fresh, redo=redo)
        assert np.array_equal(perm, order) and "-9999" in trace.fallback
        monkeypatch.setattr(DeviceSorter, "sort", real)
        got = hpu.argsort(keys, runtime=fresh, strategy="gpu", on_device_error="raise")
        assert np.array_equal(got, order)
    assert same_bits(keys, before)
