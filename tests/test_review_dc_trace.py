"""The D&C transformer and trace review's findings: inputs that overflowed, changed or failed obscurely."""

import dataclasses
import json

import numpy as np
import pytest

import hpu
from hpu import DCSpec, Plan, array_sum_spec, execute, mergesort_spec


@pytest.mark.parametrize("kind", [np.int16, np.int32, np.int64])
def test_numpy_integer_branching_and_leaf_size_plan_as_python_ints(kind):
    """``b**depth`` of a numpy int32 branching wrapped to 0 and plan() looped for ever (int16: OverflowError);
    the spec now holds Python ints and plans as with ``branching=2``."""
    spec = DCSpec("x", "", lambda s: None, branching=kind(2), leaf_size=kind(3))
    assert type(spec.branching) is int and type(spec.leaf_size) is int
    ref = DCSpec("x", "", lambda s: None, branching=2, leaf_size=3)
    for n in (40_000, 1_500_000_000):
        assert spec.plan(n, np.int32).depth == ref.plan(n, np.int32).depth
        assert spec.plan(n, np.int32).padded_n == 3 * 2 ** ref.plan(n, np.int32).depth >= n


def test_numpy_integer_branching_runs_on_the_device(runtime):
    """The device copy's size came from a numpy int16 product that wrapped (INVALID_VALUE, then the CPU redid it)."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    spec = dataclasses.replace(mergesort_spec(), branching=np.int16(2))
    a = np.random.default_rng(0).random(1 << 14)
    out, tr = execute(spec.plan(a.size, a.dtype), a, runtime, strategy="gpu", on_device_error="raise")
    assert np.array_equal(out[: a.size], np.sort(a)) and not tr.fallback


def test_a_snippet_the_compiler_refuses_keeps_the_context(runtime):
    """A spec whose OpenCL C does not compile fails its device share without rebuilding the context (which threw
    away every compiled program): the CPU redoes it, or DeviceFailure, not fatal, names the build failure."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    bad = DCSpec("badsum", "OUT(0) = IN(0, 0) + IN(1, 0) +;", array_sum_spec().combine_np, combine_exponent=0)
    plan, a = bad.plan(100, np.int64), np.arange(100, dtype=np.int64)
    context = runtime.context
    out, tr = execute(plan, a, runtime, strategy="gpu")
    assert out[0] == a.sum() and "BUILD_PROGRAM_FAILURE" in tr.fallback
    with pytest.raises(hpu.DeviceFailure, match="BUILD_PROGRAM_FAILURE") as e:
        execute(plan, a, runtime, strategy="gpu", on_device_error="raise")
    assert not e.value.fatal
    assert runtime.context is context and runtime.has_device


@pytest.mark.parametrize("dtype, plan_dtype", [(np.int64, np.float64), (np.uint64, np.float64),
                                               (np.int32, np.float32)])
def test_integers_a_float_plan_would_round_are_refused(cpu_runtime, dtype, plan_dtype):
    """numpy calls int64 -> float64 safe, but 2**53 + 1 came back as 2**53: a TypeError as int32 -> float32."""
    x = np.array([2**53 + 1 if np.dtype(dtype).itemsize == 8 else 2**24 + 1, 3], dtype)
    with pytest.raises(TypeError, match="unchanged"):
        execute(mergesort_spec().plan(2, plan_dtype), x, cpu_runtime, strategy="cpu")


def test_integers_a_float_plan_holds_exactly_are_taken(cpu_runtime):
    x = np.array([2**31 - 1, -(2**31), 5], np.int32)
    out, _ = execute(mergesort_spec().plan(3, np.float64), x, cpu_runtime, strategy="cpu")
    assert np.array_equal(out[:3], np.sort(x).astype(np.float64))


@pytest.mark.parametrize("args, error, match", [
    ((array_sum_spec(), 10, np.dtype(np.int32), 2), ValueError, "fewer than n"),
    ((array_sum_spec(), 10, np.dtype(np.int32), -1), ValueError, "depth"),
    ((array_sum_spec(), 0, np.dtype(np.int32), 0), ValueError, "n"),
    ((array_sum_spec(), 10, None, 4), TypeError, "dtype"),
    ((array_sum_spec(), 10, np.dtype(np.complex64), 4), TypeError, "complex"),
    (("array_sum", 10, np.dtype(np.int32), 4), TypeError, "DCSpec"),
])
def test_a_plan_built_directly_is_checked(args, error, match):
    """hpu.Plan is public: too shallow a depth gave numpy's broadcast error at execute, a dtype string an
    AttributeError, a negative depth a TypeError from deep inside."""
    with pytest.raises(error, match=match):
        Plan(*args)


def test_a_plan_built_directly_runs_as_the_spec_plans(cpu_runtime):
    spec = array_sum_spec()
    plan = Plan(spec, 10, "int64", 4)
    assert plan == spec.plan(10, np.int64)
    out, _ = execute(plan, np.arange(10), cpu_runtime, strategy="cpu")
    assert out[0] == 45


def test_padded_refuses_values_the_plans_dtype_would_change():
    """Plan.padded cast floats into an integer plan silently (2.7 became 2)."""
    plan = array_sum_spec().plan(3, np.int32)
    with pytest.raises(TypeError, match="would change"):
        plan.padded(np.array([2.7, 1.0, 0.5]))
    assert np.array_equal(plan.padded(np.array([1, 2, 3], np.int64)), [1, 2, 3, 0])


def test_execute_refuses_a_split_that_is_not_a_split(cpu_runtime):
    """Any object was recorded, and Trace.to_dict then failed in dataclasses.asdict."""
    plan = array_sum_spec().plan(8, np.int64)
    with pytest.raises(TypeError, match="split"):
        execute(plan, np.arange(8), cpu_runtime, strategy="cpu", split={"alpha": 0.5})


def test_a_trace_to_dict_round_trips_through_json(cpu_runtime):
    """The split as its fields; a trace rebuilt from that dict gives the same dict again."""
    split = hpu.advanced_split(hpu.Recurrence(2, 2, 1), 8, hpu.Profile(p=2, g=16, gamma=0.5))
    _, tr = execute(array_sum_spec().plan(8, np.int64), np.arange(8), cpu_runtime, strategy="cpu", split=split)
    d = json.loads(json.dumps(tr.to_dict()))
    assert d["split"] == json.loads(json.dumps(dataclasses.asdict(split)))
    again = hpu.Trace(**{**d, "events": [hpu.TraceEvent(**e) for e in d["events"]]})
    assert json.loads(json.dumps(again.to_dict())) == d
