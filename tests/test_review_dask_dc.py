"""Review of hpu.dask and the breadth-first transformer (hpu.dc): bad input refused clearly, and a spec named after
an OpenCL builtin runs on the device."""

import numpy as np
import pytest

from hpu import DCSpec, array_sum_spec, execute


def _max_spec(name):
    return DCSpec(name, "OUT(0) = max(IN(0, 0), IN(1, 0));",
                  lambda seg: seg.__setitem__((slice(None), 0), seg[:, :: seg.shape[1] // 2].max(axis=1)),
                  combine_exponent=0.0, pad=lambda dt: np.iinfo(dt).min)


@pytest.mark.parametrize("name", ["max", "min", "INT_MAX", "NAN"])
def test_a_spec_named_after_an_opencl_builtin_or_macro_runs_on_the_device(runtime, name):
    """PoCL defines builtins as macros ("#define max _cl_max"): the kernel was named _cl_max_combine, so every device
    share failed with INVALID_KERNEL_NAME (NAN, INT_MAX: the source did not build), the context was rebuilt and the
    CPU redid the share, or DeviceFailure with on_device_error="raise"."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(0).integers(-1000, 1000, 1000).astype(np.int32)
    plan = _max_spec(name).plan(a.size, a.dtype)
    for strategy, kw in [("gpu", {}), ("advanced", {"transfer_level": 3, "alpha": 0.5})]:
        out, trace = execute(plan, a, runtime, strategy=strategy, on_device_error="raise", **kw)
        assert out[0] == a.max() and not trace.fallback
        assert any(e.unit == "device" and e.kind == "combine" for e in trace.events)


def test_advanced_without_alpha_is_a_clear_error(cpu_runtime, runtime):
    """alpha=None with "advanced" raised "unsupported operand type(s) for *: 'NoneType' and 'int'"."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    plan = array_sum_spec().plan(100, np.int64)
    with pytest.raises(ValueError, match="needs an alpha"):
        execute(plan, np.arange(100), runtime, strategy="advanced", transfer_level=2, alpha=None)
    out, _ = execute(plan, np.arange(100), runtime, strategy="basic", transfer_level=2, alpha=None)  # unused there
    assert out[0] == 4950


@pytest.mark.parametrize("level", [2.5, True, "1", None])
def test_plan_level_takes_only_integers(level):
    """Plan.level(2.5) returned Level(index=2.5, count=5.66, size=22.0); level(True) the level 1."""
    plan = array_sum_spec().plan(100, np.int64)
    with pytest.raises(ValueError, match="level must lie in"):
        plan.level(level)
    assert plan.level(np.int64(2)) == plan.level(2)


@pytest.mark.parametrize("bad", [np.int64(3), np.arange(1), np.arange(100).reshape(10, 10), np.arange(99)])
def test_padded_refuses_data_of_another_shape(bad):
    """Plan.padded broadcast a scalar or one element over the n elements silently."""
    plan = array_sum_spec().plan(100, np.int64)
    with pytest.raises(ValueError, match="shape"):
        plan.padded(bad)
    assert np.array_equal(plan.padded(list(range(100)))[:100], np.arange(100))


def test_a_client_of_the_wrong_type_is_a_type_error():
    """client="tcp://..." raised AttributeError: 'str' object has no attribute 'run' (or 'nthreads')."""
    pytest.importorskip("distributed")
    import dask.array as da

    import hpu.dask
    from hpu.tabu import QAP

    with pytest.raises(TypeError, match="client must be a dask.distributed Client"):
        hpu.dask.sort(da.arange(10), client="tcp://127.0.0.1:8786")
    qap = QAP(np.ones((4, 4), np.int64), np.ones((4, 4), np.int64))
    with pytest.raises(TypeError, match="client must be"):
        hpu.dask.tabu_search_many(qap, [0], client=object(), iterations=2, tenure=1)
    with pytest.raises(TypeError, match="client must be"):
        hpu.dask.hybrid_ea_islands(qap, client=5, epochs=1)


def test_plan_without_a_dtype_is_a_type_error():
    """plan(n, None) planned float64 (numpy's default dtype) silently."""
    with pytest.raises(TypeError, match="dtype must be given"):
        array_sum_spec().plan(10, None)


@pytest.mark.parametrize("bad", ["no", 1, None])
def test_coalesced_must_be_a_bool(bad):
    """DCSpec took any value as coalesced, and the executor read its truth."""
    spec = array_sum_spec()
    with pytest.raises(TypeError, match="coalesced must be a bool"):
        DCSpec(spec.name, spec.combine_cl, spec.combine_np, coalesced=bad)
    assert DCSpec(spec.name, spec.combine_cl, spec.combine_np, coalesced=np.bool_(False)).coalesced is False
