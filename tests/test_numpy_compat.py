"""hpu.sort, hpu.argsort and hpu.sort_by_key as drop-in replacements for numpy.sort / numpy.argsort.

Inputs a user could pass, each checked against numpy's stable result on the same input: 0-d arrays and
Python scalars, lists, empty arrays of every shape, every axis of 3-D and 4-D arrays (and ``axis=None``),
Fortran-ordered, strided, reversed, transposed, broadcast, unaligned and read-only views, record fields,
byte-swapped dtypes, np.memmap and other subclasses, float16/32/64 specials (NaN payloads, signalling NaNs,
-0.0, inf), datetime64/timedelta64 of several units with NaT, bool, every ``kind`` spelling numpy takes; the
input is never modified, the result never aliases it, and dtype, shape and bits equal numpy's (argsort:
``numpy.argsort(a, axis, kind="stable")``, intp).  Sizes stay small: the PoCL device is slow.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import same_bits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

import hpu

STRATEGIES = ["auto", "cpu", "gpu"]
DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
          "float64", "datetime64[ns]", "datetime64[D]", "datetime64[Y]", "timedelta64[s]", "timedelta64[ms]",
          ">i2", ">u2", ">i4", ">u8", ">f2", ">f4", ">f8", ">M8[s]", ">m8[h]"]
SETTINGS = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def strategies(runtime) -> list[str]:
    return STRATEGIES if runtime.has_device else ["auto", "cpu"]


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """conftest.same_bits for any layout (strided views included): equal dtype, shape and bytes."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return same_bits(a, b) if a.dtype.itemsize else (a.dtype == b.dtype and a.shape == b.shape)


def snapshot(a: np.ndarray) -> np.ndarray:
    """A copy of every byte of ``a`` (``a.copy()`` drops the padding of structured elements)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).copy() if a.dtype.itemsize and not a.dtype.hasobject else a.copy()


def significant_strides(a: np.ndarray) -> list[int]:
    """The strides of the axes longer than one (the others' strides mean nothing)."""
    return [s for s, n in zip(a.strides, a.shape) if n > 1]


def make(dtype, shape, seed: int, specials: bool = True) -> np.ndarray:
    """Few distinct values (many ties), with NaN/-0.0/inf or NaT mixed in."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dt.kind == "b":
        return (rng.random(n) < 0.5).reshape(shape)
    native = dt.newbyteorder("=")
    if dt.kind in "Mm":
        x = rng.integers(-20, 20, n).view(native)
        if specials:
            x[rng.random(n) < 0.2] = np.array("NaT", native)
    elif dt.kind == "f":
        x = rng.integers(-4, 4, n).astype(native)
        if specials:
            pick = rng.random(n)
            x[pick < 0.1] = np.nan
            x[(pick >= 0.1) & (pick < 0.25)] = -0.0
            x[(pick >= 0.25) & (pick < 0.3)] = np.inf
            x[(pick >= 0.3) & (pick < 0.35)] = -np.inf
    else:
        info = np.iinfo(native)
        x = rng.integers(max(info.min, -9), min(info.max, 9), n, endpoint=True).astype(native)
        if specials and n:
            x[rng.random(n) < 0.1] = info.min
            x[rng.random(n) < 0.1] = info.max
    return x.astype(dt).reshape(shape)


def check(a, axis, runtime, strategy: str = "auto", **kw) -> None:
    """hpu.sort and hpu.argsort of ``a`` against numpy's stable ones: the same exception type, or the same
    dtype, shape, bits (and, for sort, memory layout); the input unchanged and not aliased by the result."""
    before = snapshot(a) if isinstance(a, np.ndarray) else None
    for hpu_fn, np_fn in ((hpu.sort, np.sort), (hpu.argsort, np.argsort)):
        try:
            ref = np_fn(a, axis=axis, kind="stable")
        except Exception as e:  # noqa: BLE001 - numpy's exception type is the reference
            with pytest.raises(type(e)):
                hpu_fn(a, axis=axis, runtime=runtime, strategy=strategy, **kw)
            continue
        out = hpu_fn(a, axis=axis, runtime=runtime, strategy=strategy, **kw)
        assert type(out) is np.ndarray
        ref = np.asarray(ref)
        assert out.dtype == ref.dtype and out.shape == ref.shape, (hpu_fn.__name__, out.dtype, out.shape, ref.shape)
        assert same(out, ref), (hpu_fn.__name__, axis, strategy)
        if hpu_fn is hpu.sort and ref.size > 1:
            assert significant_strides(out) == significant_strides(ref), (axis, out.strides, ref.strides)
        if isinstance(a, np.ndarray):
            assert not np.shares_memory(out, a)
    if before is not None:
        assert np.array_equal(snapshot(a), before), "input modified"


# -- scalars, lists, empty arrays ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [np.array(5), 5, 3.5, True, np.float16(-0.0), np.array(np.nan),
                                   np.datetime64("NaT"), np.timedelta64(3, "s"), np.array(7, ">i4")],
                         ids=repr)
@pytest.mark.parametrize("axis", [-1, 0, 1, None])
def test_zero_dimensional_inputs_and_python_scalars(runtime, value, axis):
    """numpy: sort of a 0-d input needs axis=None (AxisError otherwise), argsort takes it as one element."""
    for strategy in strategies(runtime):
        check(value, axis, runtime, strategy)


@pytest.mark.parametrize("value", [[3, 1, 2], [3, 1.5, -0.0, 0.0, float("nan"), 2], [True, False, True],
                                   [[3, 1], [2, 0]], ((3, 1, 4), (1, 5, 9)), [2**63, 1, 2**64 - 1], [], [[]],
                                   range(10, 0, -1), [1, 2.5, True]], ids=repr)
def test_lists_tuples_and_nested_lists(runtime, value):
    for axis in (-1, 0, None):
        for strategy in strategies(runtime):
            check(value, axis, runtime, strategy)


@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (3, 0, 2), (0, 0), (2, 0, 0, 3)])
@pytest.mark.parametrize("dtype", ["int32", "float64", "float16", "bool", ">i8", "datetime64[s]"])
def test_empty_arrays_of_every_shape_and_axis(runtime, shape, dtype):
    a = np.zeros(shape, dtype)
    for axis in [*range(-a.ndim, a.ndim), None]:
        check(a, axis, runtime)
    check(a, -1, runtime, "cpu")
    check(a, 99, runtime)  # AxisError, as numpy's


# -- N-D arrays, every axis, every dtype ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_axis_of_three_and_four_dimensional_arrays(runtime, dtype):
    for shape in [(3, 4, 5), (2, 3, 4, 5), (4, 1, 6)]:
        a = make(dtype, shape, seed=len(shape))
        for axis in [*range(-a.ndim, a.ndim), None]:
            for strategy in strategies(runtime):
                check(a, axis, runtime, strategy)


VIEWS = ("unaligned", "record-field", "readonly")


def viewed(base: np.ndarray, layout: str) -> np.ndarray:
    """``base``'s values as an unaligned view, a field of a record array, or a read-only copy (``layout``)."""
    if layout == "unaligned":
        raw = np.zeros(base.nbytes + 1, np.uint8)
        raw[1:] = base.reshape(-1).view(np.uint8)
        a = raw[1:].view(base.dtype).reshape(base.shape)
        assert not a.flags.aligned
        return a
    if layout == "record-field":
        rec = np.zeros(base.shape, [("tag", "i1"), ("x", base.dtype)])
        rec["x"] = base
        return rec["x"]
    a = base.copy()
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("layout", ["fortran", "reversed", "strided", "transposed", "broadcast", "window",
                                    "unaligned", "record-field", "readonly", "reversed-fortran"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int16", "float16", ">f8", "datetime64[ms]"])
def test_memory_layouts_and_views(runtime, layout, dtype):
    base = make(dtype, (6, 40), seed=3)
    if layout == "fortran":
        a = np.asfortranarray(base)
    elif layout == "reversed":
        a = base[::-1, ::-1]
    elif layout == "strided":
        a = base[::2, 1::3]
    elif layout == "transposed":
        a = make(dtype, (3, 4, 5), seed=4).transpose(2, 0, 1)
    elif layout == "broadcast":
        a = np.broadcast_to(base[0], (5, 40))
    elif layout == "window":
        a = sliding_window_view(base[0], 7)
    elif layout in VIEWS:
        a = viewed(base, layout)
    else:
        a = base.reshape(-1)[::-1].reshape(base.shape).T
    for axis in (-1, 0, None):
        for strategy in strategies(runtime):
            check(a, axis, runtime, strategy)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_memmap_and_other_subclasses_give_numpys_values(runtime, tmp_path):
    """numpy keeps the subclass (np.memmap, np.matrix); hpu documents a plain ndarray: the values must match."""
    mm = np.memmap(tmp_path / "a.dat", dtype=">f4", mode="w+", shape=(6, 7))
    mm[:] = make("float32", (6, 7), seed=5)
    mm.flush()
    ro = np.memmap(tmp_path / "a.dat", dtype=">f4", mode="r", shape=(6, 7))

    class Sub(np.ndarray):
        pass

    for a in (mm, ro, make("int32", (4, 9), seed=6).view(Sub)):
        for axis in (-1, 0, None):
            for strategy in strategies(runtime):
                check(a, axis, runtime, strategy)
    m = np.matrix([[3, 1, 2], [0, 5, 4]])
    for axis in (-1, 0, None):  # numpy's matrix result of axis=None is (1, n): compare the values
        got, order = hpu.sort(m, axis=axis, runtime=runtime), hpu.argsort(m, axis=axis, runtime=runtime)
        assert type(got) is np.ndarray and type(order) is np.ndarray  # as documented: the base class
        assert np.array_equal(got.ravel(), np.asarray(np.sort(m, axis=axis, kind="stable")).ravel())
        assert np.array_equal(order.ravel(), np.asarray(np.argsort(m, axis=axis, kind="stable")).ravel())


# -- special values ------------------------------------------------------------------------------------------

_FLOAT_SPECIAL_BITS = {
    2: [0x7E01, 0xFE00, 0x7C01, 0xFC01, 0x7E00, 0x8000, 0x0000, 0x7C00, 0xFC00, 0x3C00, 0xBC00, 0x0001, 0x8001],
    4: [0x7F800001, 0xFF800001, 0x7FC00001, 0xFFC00000, 0x80000000, 0, 0x7F800000, 0xFF800000, 0x3F800000, 1],
    8: [0x7FF0000000000001, 0xFFF0000000000001, 0x7FF8000000000001, 0xFFF8000000000000, 0x8000000000000000, 0,
        0x7FF0000000000000, 0xFFF0000000000000, 0x3FF0000000000000, 1],
}


@pytest.mark.parametrize("dtype", ["<f2", ">f2", "<f4", ">f4", "<f8", ">f8"])
def test_float_specials_keep_every_bit(runtime, dtype):
    """Quiet and signalling NaNs of either sign and payload, -0.0/+0.0, inf, subnormals: NaNs last in input
    order, the zeros in input order, every bit as numpy leaves it."""
    dt = np.dtype(dtype)
    bits = np.array(_FLOAT_SPECIAL_BITS[dt.itemsize], f"u{dt.itemsize}")
    rng = np.random.default_rng(dt.itemsize)
    a = np.tile(bits, 24)[rng.permutation(24 * bits.size)].view(dt.newbyteorder("=")).astype(dt)
    for strategy in strategies(runtime):
        check(a, -1, runtime, strategy)
        check(a.reshape(8, -1), -1, runtime, strategy)
        check(a.reshape(8, -1), 0, runtime, strategy)
        check(a.reshape(4, 6, -1), 1, runtime, strategy)


@pytest.mark.parametrize("unit", ["Y", "M", "D", "h", "s", "ms", "us", "ns", "25s"])
@pytest.mark.parametrize("kind", ["M8", "m8"])
@pytest.mark.parametrize("order", ["<", ">"])
def test_datetime_and_timedelta_units_with_nat(runtime, unit, kind, order):
    dt = np.dtype(f"{order}{kind}[{unit}]")
    a = make(dt, (5, 60), seed=7)
    i64 = np.iinfo(np.int64)
    a[0, :4] = np.array([i64.min + 1, i64.max, -1, 0], np.int64).view(dt.newbyteorder("="))  # extremes next to NaT
    for axis in (-1, 0, None):
        for strategy in strategies(runtime):
            check(a, axis, runtime, strategy)


def test_bool_arrays(runtime):
    a = make("bool", (7, 50), seed=8)
    for axis in (-1, 0, None):
        for strategy in strategies(runtime):
            check(a, axis, runtime, strategy)
            check(a[:, ::-3], axis, runtime, strategy)


# -- kind, axis, dtype errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [None, "quicksort", "mergesort", "heapsort", "stable", "q", "m", "h", "s",
                                  "Quick", "MERGE", "Stable", "heap", b"stable", b"q", np.str_("mergesort")],
                         ids=repr)
def test_every_kind_numpy_takes_gives_the_stable_result(runtime, kind):
    a = make("float64", (6, 30), seed=9)
    np.sort(a, kind=kind)  # numpy takes it
    for strategy in strategies(runtime):
        assert same_bits(hpu.sort(a, kind=kind, runtime=runtime, strategy=strategy), np.sort(a, kind="stable"))
        assert same_bits(hpu.argsort(a, kind=kind, runtime=runtime, strategy=strategy),
                         np.argsort(a, kind="stable"))
        assert same_bits(hpu.sort(a, None, kind, runtime=runtime, strategy=strategy),
                         np.sort(a, None, kind="stable"))


@pytest.mark.parametrize("kind", ["", "x", "radix", "bogus", b""], ids=repr)
def test_kinds_numpy_refuses_raise_value_error(runtime, kind):
    a = np.arange(5)
    with pytest.raises(ValueError):
        np.sort(a, kind=kind)
    with pytest.raises(ValueError):
        hpu.sort(a, kind=kind, runtime=runtime)
    with pytest.raises(ValueError):
        hpu.argsort(a, kind=kind, runtime=runtime)


@pytest.mark.parametrize("axis", [2, -3, 5, -100])
def test_bad_axes_raise_numpys_axis_error(runtime, axis):
    a = np.zeros((2, 3))
    with pytest.raises(np.exceptions.AxisError):
        np.sort(a, axis=axis)
    for fn in (hpu.sort, hpu.argsort):
        with pytest.raises(np.exceptions.AxisError):
            fn(a, axis=axis, runtime=runtime)
        with pytest.raises(ValueError):  # AxisError is a ValueError, as numpy's
            fn(a, axis=axis, runtime=runtime)


@pytest.mark.parametrize("axis", [np.int64(-1), np.int8(0), np.uint8(1), np.intp(-2)], ids=repr)
def test_numpy_integer_axes(runtime, axis):
    check(make("int32", (4, 9), seed=10), axis, runtime)


@pytest.mark.parametrize("a", [np.array([1 + 2j, 0j]), np.array(["b", "a"]), np.array([b"b", b"a"]),
                               np.array([3, "a"], dtype=object), np.zeros(3, [("a", "i4")]), np.zeros(3, "V4"),
                               np.array([1.0, 0.0], np.longdouble), [2**70, 1], [None, 1]],
                         ids=lambda a: str(getattr(a, "dtype", a)))
def test_unsupported_dtypes_raise_type_error(runtime, a):
    for fn in (hpu.sort, hpu.argsort):
        with pytest.raises(TypeError):
            fn(a, runtime=runtime)
    with pytest.raises(TypeError):
        hpu.sort_by_key(a, np.arange(len(a)), runtime=runtime)


def test_masked_arrays_raise_type_error(runtime):
    for a in (np.ma.array([3.0, 1.0, 2.0], mask=[0, 1, 0]), np.ma.array([3, 1, 2]), np.ma.array(5, mask=True)):
        for fn in (hpu.sort, hpu.argsort):
            with pytest.raises(TypeError, match="masked"):
                fn(a, axis=None, runtime=runtime)


# -- random shapes (hypothesis) ------------------------------------------------------------------------------


@SETTINGS
@given(dtype=st.sampled_from(DTYPES), shape=st.lists(st.integers(0, 6), min_size=1, max_size=4),
       axis_pick=st.integers(0, 8), layout=st.sampled_from(["C", "F", "reversed", "swapped"]),
       seed=st.integers(0, 2**32 - 1), strategy=st.sampled_from(STRATEGIES))
def test_random_shapes_axes_and_layouts(runtime, dtype, shape, axis_pick, layout, seed, strategy):
    if strategy not in strategies(runtime):
        strategy = "cpu"
    a = make(dtype, tuple(shape), seed)
    a = {"C": a, "F": np.asfortranarray(a), "reversed": a[..., ::-1], "swapped": np.swapaxes(a, 0, -1)}[layout]
    axes = [None, *range(-a.ndim, a.ndim)]
    check(a, axes[axis_pick % len(axes)], runtime, strategy)


# -- sort_by_key ---------------------------------------------------------------------------------------------


def check_by_key(keys, values, runtime, strategy: str = "auto") -> None:
    """``(np.sort(keys, kind="stable"), v[np.argsort(keys, kind="stable")])`` bit for bit, inputs unchanged."""
    k = np.asarray(keys)
    many = isinstance(values, tuple)
    vals = [np.asarray(v) for v in (values if many else (values,))]
    before = [snapshot(x) for x in (k, *vals)]
    perm = np.argsort(k, kind="stable")
    sk, sv = hpu.sort_by_key(keys, values, runtime=runtime, strategy=strategy)
    assert same_bits(sk, np.sort(k, kind="stable")), strategy
    assert isinstance(sv, tuple) == many
    for got, v in zip(sv if many else (sv,), vals):
        ref = v[perm]
        assert got.dtype == ref.dtype and got.shape == ref.shape
        if v.dtype.hasobject:
            assert all(x is y for x, y in zip(got.tolist(), ref.tolist()))
        else:
            assert same(got, ref), strategy
        assert not np.shares_memory(got, v)
    assert not np.shares_memory(sk, k)
    for x, b in zip((k, *vals), before):
        assert x.dtype.hasobject or np.array_equal(snapshot(x), b), "input modified"


@pytest.mark.parametrize("dtype", DTYPES)
def test_sort_by_key_every_key_dtype(runtime, dtype):
    keys = make(dtype, (300,), seed=11)
    rng = np.random.default_rng(11)
    records = np.zeros(300, [("id", "<i2"), ("w", ">f8"), ("tag", "S3")])
    records["id"] = np.arange(300)
    values = (np.arange(300), rng.random(300).astype(np.float32), records, keys, np.arange(600, dtype=">i8")[::-2])
    for strategy in strategies(runtime):
        check_by_key(keys, values, runtime, strategy)
        check_by_key(keys, np.arange(300) * 7, runtime, strategy)


@pytest.mark.parametrize("layout", ["strided", "reversed", "unaligned", "record-field", "readonly", "broadcast"])
def test_sort_by_key_views_as_keys_and_values(runtime, layout):
    base = make("float64", (600,), seed=12)
    if layout == "strided":
        keys = base[::2]
    elif layout == "reversed":
        keys = base[::-1]
    elif layout in VIEWS:
        keys = viewed(base, layout)
    else:
        keys = np.broadcast_to(np.float64(1.5), (600,))
    for strategy in strategies(runtime):
        check_by_key(keys, (keys, np.arange(keys.size)[::-1], np.arange(2 * keys.size)[::2]), runtime, strategy)


def test_sort_by_key_structured_and_object_values(runtime):
    keys = make("int32", (200,), seed=13)
    padded = np.zeros(200, np.dtype([("a", "i1"), ("b", "f8")], align=True))
    padded.view(np.uint8)[:] = np.random.default_rng(13).integers(0, 256, padded.nbytes, dtype=np.uint8)
    objects = np.array([object() for _ in range(200)], dtype=object)
    for strategy in strategies(runtime):
        check_by_key(keys, (padded, objects, np.zeros(200, np.dtype([]))), runtime, strategy)
        check_by_key(keys, objects, runtime, strategy)


def test_sort_by_key_lists_scalars_and_small_sizes(runtime):
    for strategy in strategies(runtime):
        check_by_key([3, 1, 2, 1], [10, 20, 30, 40], runtime, strategy)
        check_by_key([3, 1, 2, 1], ["a", "b", "c", "d"], runtime, strategy)
        check_by_key(range(5, 0, -1), range(5), runtime, strategy)
        check_by_key(np.array([2.0]), np.array([7]), runtime, strategy)
        check_by_key(np.array([], np.float32), (np.array([], np.int8), np.array([], "S2")), runtime, strategy)
        check_by_key(np.array([1, 0]), (), runtime, strategy)


@pytest.mark.parametrize("keys, values", [
    (np.arange(5), np.arange(4)),  # shorter values
    (np.arange(5), np.arange(6)),  # longer values (numpy's fancy indexing would take them)
    (np.arange(5), (np.arange(5), np.arange(4))),
    (np.arange(5), np.zeros((5, 2))),  # values must be 1-D
    (np.arange(6).reshape(2, 3), np.arange(6)),  # keys must be 1-D
    (np.array(3), np.array(3)),
    (np.arange(3), 7),
], ids=["short", "long", "tuple", "2-D values", "2-D keys", "0-d keys", "scalar values"])
def test_sort_by_key_refuses_mismatched_shapes(runtime, keys, values):
    with pytest.raises(ValueError):
        hpu.sort_by_key(keys, values, runtime=runtime)


def test_sort_by_key_refuses_masked_values(runtime):
    with pytest.raises(TypeError, match="masked"):
        hpu.sort_by_key(np.arange(3), np.ma.array([1, 2, 3], mask=[0, 1, 0]), runtime=runtime)


@SETTINGS
@given(dtype=st.sampled_from(DTYPES), n=st.one_of(st.integers(0, 40), st.integers(41, 3000)),
       seed=st.integers(0, 2**32 - 1), strategy=st.sampled_from(STRATEGIES), specials=st.booleans())
def test_sort_by_key_random(runtime, dtype, n, seed, strategy, specials):
    if strategy not in strategies(runtime):
        strategy = "cpu"
    keys = make(dtype, (n,), seed, specials)
    check_by_key(keys, (np.arange(n), np.arange(n, dtype=np.float16), keys), runtime, strategy)


# -- numpy 2's signature -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", ["sort", "argsort"])
def test_stable_keyword_of_numpy_2(runtime, fn):
    a = np.array([3.0, 1.0, -0.0, 0.0, 1.0])
    out = getattr(hpu, fn)(a, stable=True, runtime=runtime)
    assert same_bits(out, getattr(np, fn)(a, stable=True))


@pytest.mark.parametrize("fn", ["sort", "argsort"])
def test_numpy_2_signature_order_and_stable_as_numpy_takes_them(runtime, fn):
    """The fourth positional argument (order) and stable= of any value, as numpy 2 takes them; kind with stable,
    and an order for an array without fields, the ValueError numpy raises."""
    a = np.array([[2.0, -0.0, 0.0, 1.0], [5.0, 5.0, -1.0, np.nan]])
    for stable in (None, False, True, 1):
        assert same_bits(getattr(hpu, fn)(a, -1, None, None, stable=stable, runtime=runtime),
                         getattr(np, fn)(a, -1, None, None, stable=stable))
    for call in (lambda f: f(a, kind="stable", stable=True), lambda f: f(a, 0, None, "x")):
        with pytest.raises(ValueError):
            call(getattr(np, fn))
        with pytest.raises(ValueError, match="stable|order"):
            call(lambda *x, **k: getattr(hpu, fn)(*x, runtime=runtime, **k))
