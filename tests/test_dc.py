"""The breadth-first transformer: shipped specs and a user-defined one, through the public API only."""

import numpy as np
import pytest
from conftest import same_bits

import hpu
from hpu import DCSpec, array_sum_spec, execute

STRATEGY_ARGS = [
    ("cpu", {}),
    ("gpu", {}),
    ("basic", {"transfer_level": 3}),
    ("advanced", {"transfer_level": 4, "alpha": 0.25}),
    ("advanced", {"transfer_level": 0, "alpha": 0.0}),
]


def _run(spec, a, runtime, strategy, kw):
    if strategy != "cpu" and not runtime.has_device:
        pytest.skip("no OpenCL device")
    plan = spec.plan(len(a), a.dtype)
    out, trace = execute(plan, a, runtime, strategy=strategy, **kw)
    return out, trace


@pytest.mark.parametrize("strategy, kw", STRATEGY_ARGS)
@pytest.mark.parametrize("n", [1, 2, 1000, 4096, 12345])
def test_array_sum(runtime, strategy, kw, n):
    # Paper algorithms 4 and 5: the sum ends up in element 0.
    a = np.random.default_rng(n).integers(-(10**6), 10**6, n).astype(np.int64)
    plan = array_sum_spec().plan(n, a.dtype)
    kw = {k: (min(v, plan.depth) if k == "transfer_level" else v) for k, v in kw.items()}
    out, _ = _run(array_sum_spec(), a, runtime, strategy, kw)
    assert out[0] == a.sum()


def _max4_spec():
    # A user-defined spec: 4-way maximum, base case squares each leaf of 4 and keeps the largest square.
    return DCSpec(
        name="max4",
        branching=4,
        leaf_size=4,
        combine_exponent=0.0,
        combine_cl="""
            T m = IN(0, 0);
            for (ulong c = 1; c < B; ++c) m = max(m, IN(c, 0));
            OUT(0) = m;
        """,
        combine_np=lambda seg: seg.__setitem__((slice(None), 0), seg[:, :: seg.shape[1] // 4].max(axis=1)),
        base_cl="""
            T m = X(0) * X(0);
            for (ulong j = 1; j < LEAF; ++j) m = max(m, X(j) * X(j));
            X(0) = m;
        """,
        base_np=lambda leaves: leaves.__setitem__((slice(None), 0), (leaves * leaves).max(axis=1)),
        pad=lambda dt: 0,
    )


@pytest.mark.parametrize("strategy, kw", STRATEGY_ARGS)
@pytest.mark.parametrize("n", [3, 64, 1000, 70_000])
def test_user_defined_spec(runtime, strategy, kw, n):
    a = np.random.default_rng(n).integers(-3000, 3000, n).astype(np.int64)
    spec = _max4_spec()
    plan = spec.plan(n, a.dtype)
    assert plan.padded_n == 4 * 4**plan.depth >= n
    kw = {k: (min(v, plan.depth) if k == "transfer_level" else v) for k, v in kw.items()}
    out, trace = _run(spec, a, runtime, strategy, kw)
    assert out[0] == (a * a).max()
    if strategy == "gpu" and plan.depth > 0:
        assert any(e.kind == "base" for e in trace.events if e.unit == "device")


def test_plan_levels_and_recurrence():
    plan = hpu.mergesort_spec().plan(1000, np.float32)
    assert plan.depth == 10 and plan.padded_n == 1024
    assert [lv.index for lv in plan.levels] == list(range(9, -1, -1))
    assert plan.level(3).count == 8 and plan.level(3).size == 128
    assert hpu.mergesort_spec().recurrence.total_work(1024) == pytest.approx(1024 * 11)
    padded = plan.padded(np.ones(1000, np.float32))
    assert padded.shape == (1024,) and np.isnan(padded[1000:]).all()
    with pytest.raises(ValueError, match="level"):
        plan.level(11)


def test_spec_validation():
    with pytest.raises(ValueError, match="branching"):
        DCSpec("x", "", lambda s: None, branching=1)
    with pytest.raises(ValueError, match="base case"):
        DCSpec("x", "", lambda s: None, base_cl="X(0) = 1;")
    with pytest.raises(ValueError, match="identifier"):
        DCSpec("not valid", "", lambda s: None)
    for taken in ("dc", "B", "LEAF", "kernel", "__x"):  # names the generated OpenCL source could not build with
        with pytest.raises(ValueError, match="taken"):
            DCSpec(taken, "", lambda s: None)
    with pytest.raises(TypeError, match="unsupported dtype"):
        array_sum_spec().plan(10, np.complex64)
    for n in (0, 2.5, True):
        with pytest.raises(ValueError, match="n must be an integer"):
            array_sum_spec().plan(n, np.int32)
    assert array_sum_spec().plan(np.int64(10), np.int32).n == 10


def test_execute_validation(runtime, cpu_runtime):
    plan = array_sum_spec().plan(100, np.int64)
    a = np.arange(100, dtype=np.int64)
    with pytest.raises(ValueError, match="strategy"):
        execute(plan, a, runtime, strategy="magic")
    with pytest.raises(ValueError, match="transfer_level"):
        execute(plan, a, runtime, strategy="basic")
    with pytest.raises(ValueError, match="transfer_level must lie"):
        execute(plan, a, runtime, strategy="basic", transfer_level=99)
    with pytest.raises(ValueError, match="CPU-only"):
        execute(plan, a, cpu_runtime, strategy="gpu")
    out, _ = execute(plan, a, cpu_runtime, strategy="cpu")
    assert out[0] == a.sum() and same_bits(a, np.arange(100, dtype=np.int64))
    for data in (a[:1], np.int64(5), a.reshape(10, 10)):  # numpy would broadcast or reshape these silently
        with pytest.raises(ValueError, match="shape"):
            execute(plan, data, cpu_runtime, strategy="cpu")
    with pytest.raises(TypeError, match="unchanged"):
        execute(plan, a.astype(np.float64), cpu_runtime, strategy="cpu")
    with pytest.raises(TypeError, match="alpha"):
        execute(plan, a, runtime, strategy="advanced", alpha="0.5", transfer_level=2)
    with pytest.raises(ValueError, match="transfer_level must be an integer"):
        execute(plan, a, runtime, strategy="basic", transfer_level=1.9)
    out, _ = execute(plan, a.astype(np.int32), cpu_runtime, strategy="cpu")  # a narrower integer fits
    assert out[0] == a.sum()


def test_transfer_at_the_leaves_moves_nothing(runtime):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = np.arange(1000, dtype=np.int64)
    plan = array_sum_spec().plan(len(a), a.dtype)
    out, trace = execute(plan, a, runtime, strategy="basic", transfer_level=plan.depth)
    assert out[0] == a.sum()
    assert trace.events and all(e.unit.startswith("cpu") for e in trace.events)  # recorded, all on the CPU
    # The control: one level higher the device takes part, and the trace shows its copies.
    out, trace = execute(plan, a, runtime, strategy="basic", transfer_level=plan.depth - 1)
    assert out[0] == a.sum()
    assert {"h2d", "d2h"} <= {e.kind for e in trace.events if e.unit == "bus"}
    assert any(e.unit == "device" for e in trace.events)


def test_execute_rejects_a_plan_or_runtime_of_the_wrong_type(cpu_runtime):
    a = np.arange(10, dtype=np.int64)
    plan = array_sum_spec().plan(10, a.dtype)
    with pytest.raises(TypeError, match="plan must be an hpu.Plan"):
        execute(array_sum_spec(), a, cpu_runtime, strategy="cpu")  # was an AttributeError
    with pytest.raises(TypeError, match="runtime must be an hpu.Runtime"):
        execute(plan, a, "cpu", strategy="cpu")
    with hpu.using_runtime(cpu_runtime):  # None: the default runtime, as in every other entry point
        out, _ = execute(plan, a, None, strategy="cpu")
    assert out[0] == a.sum()


@pytest.mark.parametrize("field, value, error", [
    ("name", 5, TypeError), ("name", None, TypeError), ("combine_cl", None, TypeError),
    ("combine_np", None, TypeError), ("pad", 0, TypeError), ("preamble", None, TypeError),
    ("combine_exponent", "1", TypeError), ("combine_exponent", float("nan"), ValueError),
    ("leaf_size", True, ValueError),
])
def test_dcspec_rejects_fields_of_the_wrong_kind_when_made(field, value, error):
    # name=5 raised AttributeError; the others were accepted and failed only when planned or executed.
    kw = dict(name="s", combine_cl="OUT(0) = IN(0, 0);", combine_np=lambda seg: None)
    with pytest.raises(error, match=field):
        DCSpec(**{**kw, field: value})
