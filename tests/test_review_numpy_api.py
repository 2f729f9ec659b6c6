"""hpu.sort, hpu.argsort and hpu.sort_by_key take numpy's arguments as numpy takes them, and fail as numpy fails.

Each case is checked against numpy itself: the same result bit for bit, or an exception of numpy's type.  Axes
given by ``__index__`` (0-d integer arrays, numpy integers, a class of one's own), ``kind`` values that are no
string (numpy's ``TypeError``) or bytes that are no UTF-8 (numpy's ``ValueError``), and inputs numpy cannot make
an array of (numpy's own exception, not a ``TypeError`` of hpu's).  Sizes stay small: the PoCL device is slow;
``strategy="cpu"`` (and ``"gpu"`` where there is a device) takes the hybrid paths that ``"auto"`` leaves to numpy
for inputs this small.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import same_bits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hpu

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
FUNCTIONS = [(hpu.sort, np.sort), (hpu.argsort, np.argsort)]


class Index:
    """An axis of a class of one's own: an integer through ``__index__`` alone, as numpy takes it."""

    def __init__(self, value: int):
        self.value = value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"Index({self.value})"


class FailingArray:
    """An array-like whose conversion raises ``error`` (numpy lets it through unchanged)."""

    def __init__(self, error: BaseException):
        self.error = error

    def __array__(self, dtype=None, copy=None):
        raise self.error


def strategies(runtime) -> list[str]:
    return ["auto", "cpu", "gpu"] if runtime.has_device else ["auto", "cpu"]


def data(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """float64 with ties, -0.0 and NaN: a wrong axis or an unstable order shows in the bits."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 3, shape).astype(np.float64)
    a[rng.random(shape) < 0.15] = -0.0
    a[rng.random(shape) < 0.1] = np.nan
    return a


def outcome(fn, *args, **kwargs):
    """``("ok", contiguous result)`` or ``("raised", exception type)``."""
    try:
        return "ok", np.ascontiguousarray(fn(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - numpy's exception type is the reference
        return "raised", type(e)


def assert_as_numpy(hpu_fn, np_fn, a, runtime, strategy: str, **kwargs) -> None:
    """``hpu_fn`` and ``np_fn`` with ``kwargs`` agree: both raise exceptions of one type, or hpu returns the dtype,
    shape and bits of numpy's stable result (``kind="stable"`` in place of any ``kind``: hpu's is always stable)."""
    want = outcome(np_fn, a, **kwargs)
    if want[0] == "ok":
        want = outcome(np_fn, a, **{**kwargs, "kind": "stable"})
    got = outcome(hpu_fn, a, runtime=runtime, strategy=strategy, **kwargs)
    assert got[0] == want[0], (hpu_fn.__name__, strategy, kwargs, got, want)
    if want[0] == "raised":
        assert got[1] is want[1], (hpu_fn.__name__, strategy, kwargs, got[1], want[1])
    else:
        assert same_bits(got[1], want[1]), (hpu_fn.__name__, strategy, kwargs)


# -- axis: anything numpy takes ------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [np.array(1), np.array(-1, np.int8), np.array(0, np.uint64), Index(0), Index(-2)],
                         ids=repr)
def test_axis_by_index_as_numpy_takes_it(runtime, axis):
    """numpy takes any ``__index__`` as an axis (a 0-d integer array, say, from a computation); hpu raised
    ``TypeError("axis must be an integer or None")`` for all but int and numpy's integer scalars."""
    for shape in [(4, 7), (3, 4, 5)]:
        a = data(shape, seed=len(shape))
        for strategy in strategies(runtime):
            for hpu_fn, np_fn in FUNCTIONS:
                assert_as_numpy(hpu_fn, np_fn, a, runtime, strategy, axis=axis)


@pytest.mark.parametrize("axis", [np.True_, np.array(True), np.array([1]), 1.0, np.float64(0), "1", Index(5)],
                         ids=repr)
def test_axes_numpy_refuses_still_raise_its_errors(runtime, axis):
    """No integer, no axis: ``TypeError``; an ``__index__`` out of range: ``AxisError`` (numpy's types)."""
    a = data((4, 7), seed=1)
    for hpu_fn, np_fn in FUNCTIONS:
        assert_as_numpy(hpu_fn, np_fn, a, runtime, "auto", axis=axis)


def test_python_bool_axis_is_refused(runtime):
    """numpy's argsort refuses ``axis=True`` (its sort takes it as 1): hpu refuses it for both."""
    a = data((4, 7), seed=2)
    with pytest.raises(TypeError):
        np.argsort(a, axis=True)
    for hpu_fn, _ in FUNCTIONS:
        with pytest.raises(TypeError, match="axis"):
            hpu_fn(a, axis=True, runtime=runtime)


@SETTINGS
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=3), axis=st.integers(-4, 3),
       wrap=st.sampled_from([int, np.int16, np.array, lambda x: np.array(x, np.int8), Index]),
       seed=st.integers(0, 2**16), strategy=st.sampled_from(["auto", "cpu", "gpu"]))
def test_random_shapes_and_axes_of_every_integer_kind(runtime, shape, axis, wrap, seed, strategy):
    if strategy not in strategies(runtime):
        strategy = "cpu"
    a = data(tuple(shape), seed)
    for hpu_fn, np_fn in FUNCTIONS:
        assert_as_numpy(hpu_fn, np_fn, a, runtime, strategy, axis=wrap(axis))


# -- kind: numpy's TypeError and ValueError --------------------------------------------------------------------


@pytest.mark.parametrize("kind", [0, 5, 1.0, ["stable"], ("q",), bytearray(b"stable"), object()], ids=repr)
def test_kind_that_is_no_string_raises_type_error_as_numpy(runtime, kind):
    """numpy: ``TypeError("sort kind must be str, not int")``; hpu raised ``ValueError``."""
    a = data((3, 5), seed=3)
    with pytest.raises(TypeError):
        np.sort(a, kind=kind)
    for hpu_fn, _ in FUNCTIONS:
        with pytest.raises(TypeError, match="kind"):
            hpu_fn(a, kind=kind, runtime=runtime)
    with pytest.raises(TypeError, match="kind"):
        hpu.sort(a, None, kind, runtime=runtime)


@pytest.mark.parametrize("kind, numpy_takes", [(b"q\xff", False), (b"M\xfe\xbf", False), (b"\xff", False),
                                               (b"s\xc3\xa9", True), (b"Stable", True)], ids=repr)
def test_bytes_kind_is_read_as_utf8_as_numpy(runtime, kind, numpy_takes):
    """numpy decodes a bytes ``kind`` as UTF-8 and refuses bytes that are none (``ValueError``); hpu read them as
    latin-1 and took any whose first byte was a kind's letter."""
    a = data((3, 5), seed=4)
    for strategy in strategies(runtime):
        for hpu_fn, np_fn in FUNCTIONS:
            assert outcome(np_fn, a, kind=kind)[0] == ("ok" if numpy_takes else "raised")
            assert_as_numpy(hpu_fn, np_fn, a, runtime, strategy, kind=kind)


@SETTINGS
@given(kind=st.one_of(st.none(), st.integers(), st.floats(), st.binary(max_size=4),
                      st.text(st.characters(exclude_categories=["Cs"]), max_size=4),
                      st.text(alphabet="qmhsQMHSx\u00e9 ", max_size=3)))
def test_random_kinds_as_numpy(runtime, kind):
    """Any ``kind``: numpy's stable result where numpy takes it, numpy's exception type where it does not."""
    a = data((3, 6), seed=5)
    for hpu_fn, np_fn in FUNCTIONS:
        assert_as_numpy(hpu_fn, np_fn, a, runtime, "auto", kind=kind)


# -- inputs numpy cannot make an array of ----------------------------------------------------------------------


@pytest.mark.parametrize("a", [[[1, 2], [3]], [1, [2, 3]], [[1.0], [2.0, np.nan]], FailingArray(RuntimeError("x")),
                               FailingArray(MemoryError()), FailingArray(ValueError("x"))],
                         ids=["ragged", "ragged-scalar", "ragged-float", "RuntimeError", "MemoryError", "ValueError"])
def test_inputs_numpy_cannot_convert_raise_numpys_exception(runtime, a):
    """numpy's exception as numpy raises it (a ragged list: ``ValueError``); hpu.sort turned every one into a
    ``TypeError`` (a ``MemoryError`` too), while hpu.argsort let them through: the two disagreed."""
    for hpu_fn, np_fn in FUNCTIONS:
        for strategy in ("auto", "cpu"):
            for axis in (-1, None):
                assert_as_numpy(hpu_fn, np_fn, a, runtime, strategy, axis=axis)
    with pytest.raises(Exception) as want:  # noqa: PT011 - the type is numpy's, compared below
        np.asarray(a)
    with pytest.raises(want.type):
        hpu.sort_by_key(a, np.arange(2), runtime=runtime)
