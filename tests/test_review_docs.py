"""The documentation review's findings: behaviour that differed from what the docstrings promise."""

import numpy as np
import pytest

import hpu


@pytest.fixture(scope="module")
def calibrated():
    """A runtime on the default device with the committed CPU-only profile: the model's splits are known."""
    with hpu.Runtime(profile="cpu-only-2core-pocl") as rt:
        yield rt


@pytest.mark.parametrize("kw", [dict(strategy="advanced", alpha=0.5, transfer_level=2), dict(shares=(0.5, 0.5)),
                                dict(strategy="gpu", transfer_level=1),
                                dict(mode="paper", strategy="advanced", alpha=0.5, transfer_level=10),
                                dict(mode="paper", strategy="basic", transfer_level=3)])
def test_a_forced_split_is_not_recorded_as_the_models(calibrated, kw):
    """Trace.split is None where the caller forced what the split chooses: its fields were the model's choice while
    the sort ran the forced values (a split of alpha 0.996 and level 0 for a run at 0.5 and 2)."""
    if not calibrated.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(1).random(1 << 16)
    out, tr = hpu.hybrid_mergesort(a, runtime=calibrated, return_trace=True, **kw)
    assert np.array_equal(out, np.sort(a, kind="stable"))
    assert tr.split is None


@pytest.mark.parametrize("kw, strategy", [(dict(), None), (dict(strategy="gpu"), "gpu"),
                                          (dict(mode="paper", strategy="advanced"), "advanced"),
                                          (dict(mode="paper", strategy="advanced", alpha=0.5), "advanced")])
def test_the_models_split_is_recorded_where_it_runs(calibrated, kw, strategy):
    """The model's choice, or its split for a forced strategy (paper mode's advanced split with a forced alpha
    predicted at that alpha), is what runs: the trace's alpha and level are the split's."""
    if not calibrated.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(2).random(1 << 16)
    _, tr = hpu.hybrid_mergesort(a, runtime=calibrated, return_trace=True, **kw)
    assert tr.split is not None and tr.split.strategy == (strategy or tr.strategy)
    assert tr.split.transfer_level == tr.transfer_level
    if "alpha" in kw:
        assert tr.split.alpha == kw["alpha"] == tr.alpha


@pytest.mark.parametrize("split", [hpu.basic_split, hpu.advanced_split])
@pytest.mark.parametrize("n", [1e306, 1e308])
def test_model_sums_past_the_float_range_are_a_value_error(split, n):
    """Sums that overflow to inf or nan without an OverflowError are the documented ValueError, not a split of
    infinite time or nan work fractions."""
    with pytest.raises(ValueError, match="float range"):
        split(hpu.Recurrence(2, 2, 1), n, hpu.Profile(p=4, g=2**12, gamma=1 / 160))


def test_model_sums_in_range_stay_finite():
    """The check refuses nothing the model can sum: 2^60 mergesort keys are predicted (the reference)."""
    s = hpu.advanced_split(hpu.Recurrence(2, 2, 1), 2**60, hpu.Profile(p=4, g=2**12, gamma=1 / 160))
    assert np.isfinite(s.predicted_time) and 0 <= s.gpu_work_fraction <= 1


@pytest.mark.parametrize("name", ["sort_waves", "stream_copies", "native_staging"])
@pytest.mark.parametrize("value", ["no", 0, 1, None])
def test_pipeline_option_flags_must_be_bools(name, value):
    """A flag given "no" read as true; 0 and 1 are refused as the other integer options refuse bools."""
    with pytest.raises(TypeError, match=name):
        hpu.PipelineOptions(**{name: value})


def test_pipeline_option_flags_take_numpy_bools():
    opts = hpu.PipelineOptions(sort_waves=np.bool_(False), stream_copies=np.True_)
    assert opts.sort_waves is False and opts.stream_copies is True


@pytest.mark.parametrize("bad", ["x", None, 3.0])
def test_fast_split_names_a_profile_of_the_wrong_type(bad):
    """As basic_split and advanced_split do (was: AttributeError from inside)."""
    with pytest.raises(TypeError, match="profile"):
        hpu.fast_split(1024, bad)
    with pytest.raises(TypeError, match=r"devices\[1\]"):
        hpu.fast_split(1024, hpu.reference_profile("cpu-only-2core-pocl"),
                       devices=[hpu.reference_profile("cpu-only-2core-pocl"), bad])
