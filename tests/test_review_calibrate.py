"""Review of calibration and profile files as a user meets them: corrupt, hand-edited and foreign files."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import hpu
from hpu.core.costs import CostCurves, ProfileError
from hpu.core.runtime import default_profile_path
from hpu.sorting.costs import fast_split
from hpu.tabu import QAP, calibrate, costs_path, tabu_search

SIZES = [1 << 14, 1 << 16, 1 << 18]
REPO = Path(__file__).resolve().parents[1]


def _profile_dict(**sort_curves):
    """A calibrated-looking profile's JSON dict whose sort curves are ``sort_curves`` (each a list over SIZES)."""
    curves = {"sizes": SIZES, "itemsize": 4, **sort_curves}
    return {**hpu.Profile(p=2, g=1, gamma=1, cpu_op_seconds=3e-9, name="hand-edited").to_dict(),
            "curves": {"sort": curves}}


def _cpu_curves():
    return {k: [1e-4, 5e-4, 3e-3] for k in ("cpu_sort", "cpu_sort_1", "merge2", "merge16")}


@pytest.mark.parametrize("sizes", [[1 << 14, math.inf], [1 << 14, 10**400]])
def test_a_curve_size_past_the_float_range_is_a_profile_error_naming_the_file(tmp_path, sizes):
    """An infinite (JSON ``Infinity``) or huge size was an OverflowError: at load, or in every sort's model."""
    d = _profile_dict(cpu_sort=[1e-4, 1e-3])
    d["curves"]["sort"]["sizes"] = sizes
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ProfileError, match="edited.json") as e:
        hpu.Profile.load(path)
    assert "'sort' curves" in str(e.value)


def test_a_cached_profile_with_an_infinite_curve_size_is_ignored_not_fatal(tmp_path, monkeypatch, caplog):
    """The runtime ignores a bad cached profile with a warning; an OverflowError made ``hpu.Runtime()`` fail."""
    monkeypatch.setenv("HPU_PROFILE_DIR", str(tmp_path))
    d = _profile_dict(cpu_sort=[1e-4, 1e-3])
    d["curves"]["sort"]["sizes"] = [1 << 14, math.inf]
    default_profile_path(None).write_text(json.dumps(d))
    with hpu.Runtime("none") as rt:
        assert not rt.calibrated
    assert "ignoring the cached profile" in caplog.text and str(default_profile_path(None)) in caplog.text


def test_an_invalid_curve_is_reported_with_the_file_it_is_in(tmp_path):
    """The message named the profile's free-text ``name`` only, not the file to fix."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_profile_dict(cpu_sort=[1e-4, "fast", 1e-3])))
    with pytest.raises(ProfileError, match=str(path)):
        hpu.Profile.load(path)


@pytest.mark.parametrize("field, value", [("cpu_move_seconds", None), ("device_fixed_seconds", None),
                                          ("device_saturation", 0), ("cpu_move_seconds", -1.0),
                                          ("cpu_move_seconds", math.nan), ("overlap", 5.0), ("threads", "2")])
def test_a_hand_edited_tabu_costs_file_is_measured_again(tmp_path, monkeypatch, caplog, cpu_runtime, field, value):
    """A bad cost was a TypeError or ZeroDivisionError inside every search (or an absurd split), never refused."""
    monkeypatch.setenv("HPU_PROFILE_DIR", str(tmp_path))
    rng = np.random.default_rng(0)
    qap = QAP(rng.integers(0, 10, (12, 12)), rng.integers(0, 10, (12, 12)))
    good = calibrate(qap, cpu_runtime, cache=False)
    path = costs_path(qap, cpu_runtime)
    good.save(path)
    d = json.loads(path.read_text())
    d[field] = value
    path.write_text(json.dumps(d))
    res = tabu_search(qap, iterations=5, tenure=3, seed=0, runtime=cpu_runtime)
    assert res.iterations == 5
    assert "ignoring the cached tabu costs" in caplog.text and field in caplog.text
    again = hpu.tabu.split.TabuCosts.load(path)  # measured again and saved over the bad file
    assert again.cpu_move_seconds > 0 and math.isfinite(again.cpu_move_seconds) and -1 <= again.overlap <= 1


def test_a_profile_without_device_curves_on_a_device_runtime_sorts_rows(rt, tmp_path):
    """A profile calibrated with ``--device none`` (no device curves) given to a runtime with a device: the rows
    are sorted (it raised ValueError: rows_on_device and keyed_on_device asked for the device curves)."""
    path = tmp_path / "cpu-only.json"
    path.write_text(json.dumps(_profile_dict(**_cpu_curves())))
    rows = np.random.default_rng(0).random((256, 1024), dtype=np.float32)
    with hpu.Runtime(rt.device, profile=path) as rt2:
        assert np.array_equal(hpu.sort(rows, axis=-1, runtime=rt2), np.sort(rows, axis=-1))


@pytest.mark.parametrize("name", ["cpu_sort", "merge2", "merge16"])
def test_a_profile_missing_a_required_sort_curve_is_refused_naming_the_file_and_the_curve(tmp_path, name):
    """It loaded as calibrated and every default sort then raised ValueError.  Given as ``profile=`` it is refused as
    any invalid profile file is; the curve is needed indeed: the split of a profile built without it fails."""
    curves = _cpu_curves()
    del curves[name]
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(_profile_dict(**curves)))
    with pytest.raises(ProfileError, match=f"missing {name};") as e:
        hpu.Runtime("none", profile=path)
    assert str(path) in str(e.value) and "'sort' curves" in str(e.value)
    built = hpu.Profile(p=2, g=1, gamma=1, curves={"sort": {"sizes": SIZES, **curves}})
    with pytest.raises(ValueError, match=name):
        fast_split(1 << 16, built)


def test_a_cached_profile_missing_a_required_sort_curve_is_ignored_and_the_cpu_sorts(tmp_path, monkeypatch, caplog):
    """As other corrupt cached profiles: a warning naming the file and the curve, then the uncalibrated CPU sort."""
    monkeypatch.setenv("HPU_PROFILE_DIR", str(tmp_path))
    curves = _cpu_curves()
    del curves["merge16"]
    path = default_profile_path(None)
    path.write_text(json.dumps(_profile_dict(**curves)))
    a = np.random.default_rng(0).integers(0, 1 << 30, 1 << 16, dtype=np.int32)
    with hpu.Runtime("none") as rt:
        assert not rt.calibrated
        assert np.array_equal(hpu.sort(a, runtime=rt), np.sort(a))
    assert "ignoring the cached profile" in caplog.text and str(path) in caplog.text and "merge16" in caplog.text


def test_a_profile_with_only_the_cpu_sort_and_merge_curves_is_calibrated_and_sorts(tmp_path):
    """What a calibration without a device measures at least: no device curve, no partition, one thread's sort."""
    path = tmp_path / "minimal.json"
    path.write_text(json.dumps(_profile_dict(**{k: [1e-4, 5e-4, 3e-3] for k in ("cpu_sort", "merge2", "merge16")})))
    a = np.random.default_rng(1).standard_normal(1 << 16)
    with hpu.Runtime("none", profile=path) as rt:
        assert rt.calibrated
        assert np.array_equal(hpu.sort(a, runtime=rt), np.sort(a))


def test_a_profile_dir_under_the_home_directory_is_expanded(tmp_path, monkeypatch):
    """``HPU_PROFILE_DIR=~/profiles`` was a folder named ``~`` under the working directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HPU_PROFILE_DIR", "~/profiles")
    assert default_profile_path(None) == tmp_path / "profiles" / "cpu-only.json"
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "cpu-only.json").write_text(json.dumps(_profile_dict(**_cpu_curves())))
    with hpu.Runtime("none") as rt:
        assert rt.calibrated and rt.profile.name == "hand-edited"


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a": ' * 100_000], ids=["arrays", "objects"])
def test_a_deeply_nested_file_is_a_profile_error_not_a_recursion_error(tmp_path, monkeypatch, caplog, text):
    """JSON's parser recurses once per level: a RecursionError escaped the loaders and made ``hpu.Runtime()`` fail."""
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(ProfileError, match="deep.json"):
        hpu.Profile.load(path)
    with pytest.raises(ProfileError, match="deep.json"):
        hpu.tabu.split.TabuCosts.load(path)
    monkeypatch.setenv("HPU_PROFILE_DIR", str(tmp_path))
    path.rename(default_profile_path(None))
    with hpu.Runtime("none") as rt:
        assert not rt.calibrated
    assert "ignoring the cached profile" in caplog.text


@pytest.mark.parametrize("sizes, seconds, error, match", [
    ([16, 32], "12", TypeError, "'s' must be a sequence of numbers, got str"),  # read as the digits 1.0, 2.0
    ([16, 32], 1e-3, TypeError, "'s' must be a sequence of numbers, got float"),
    ([16, 32], ["1e-3", "2e-3"], TypeError, "'s' must be numbers, got str"),
    ([16, 32], [True, 1.0], TypeError, "'s' must be numbers, got bool"),
    ("12", [1e-3, 2e-3], TypeError, "sizes must be a sequence of numbers, got str"),
    (["16", "32"], [1e-3, 2e-3], TypeError, "sizes must be numbers, got str"),
    ([16.5, 32], [1e-3, 2e-3], ValueError, "sizes must be whole numbers of elements >= 1, got 16.5"),
    ([0, 32], [1e-3, 2e-3], ValueError, "sizes must be whole numbers of elements >= 1, got 0"),
    ([-16, 32], [1e-3, 2e-3], ValueError, "sizes must be whole numbers of elements >= 1, got -16"),
    ([16, 10**400], [1e-3, 2e-3], ValueError, "sizes must be whole numbers of elements >= 1, got inf"),
])
def test_cost_curves_refuse_strings_and_sizes_that_are_no_element_counts(sizes, seconds, error, match):
    """A string series was read character by character, a fractional size truncated (16.5 -> 16)."""
    with pytest.raises(error, match=match):
        CostCurves(sizes, {"s": seconds})


def test_cost_curves_take_whole_float_sizes_as_written_by_json():
    """``2.0 ** k`` sizes (numpy's, or JSON's ``16384.0``) are the integers, and the curve passes its knots."""
    c = CostCurves([16384.0, np.float64(65536.0)], {"s": [np.float32(1e-3), 4e-3]})
    assert c.sizes == (16384, 65536) and all(type(n) is int for n in c.sizes)
    assert c.cost("s", 1 << 14) == pytest.approx(1e-3) and c.cost("s", 1 << 16) == pytest.approx(4e-3)


def test_a_string_series_in_a_file_is_a_profile_error_naming_the_file_and_the_curve(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_profile_dict(cpu_sort="123", merge2=["1e-4", "5e-4", "3e-3"])))
    with pytest.raises(ProfileError, match="cpu_sort") as e:
        hpu.Profile.load(path)
    assert str(path) in str(e.value)


RECORDED = sorted([*REPO.glob("experiments/results/**/profile*.json"), *REPO.glob("models/*.json")])


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: str(p.relative_to(REPO)))
def test_the_profiles_of_the_repository_still_load(path):
    """The checks above refuse none of the calibrations on record (schema 1 and 2) nor the shipped profiles."""
    prof = hpu.Profile.load(path)
    curves = prof.cost_curves("sort")
    raw = json.loads(path.read_text())
    stored = raw.get("curves", {}).get("sort") if raw["schema_version"] > 1 else raw.get("fast")
    assert (curves is None) == (not stored)
    if curves is not None:
        assert list(curves.sizes) == stored["sizes"]


def test_cost_curves_never_predict_a_negative_or_zero_cost_outside_the_measured_sizes():
    """Extrapolation below and above the measured sizes, from a curve that falls (noise) at both ends."""
    c = CostCurves((1 << 14, 1 << 16, 1 << 18), {"s": (3e-3, 1e-5, 1e-6)})
    n = np.array([1, 2, 1 << 10, 1 << 14, 1 << 20, 1 << 40])
    t = c.cost("s", n)
    assert np.all(np.isfinite(t)) and np.all(t > 0) and np.all(np.diff(t) >= 0)


@pytest.mark.parametrize("field, value", [("device", "NVIDIA H100 80GB HBM3"), ("host", "Intel(R) Xeon(R) Gold"),
                                          ("threads", 64)])
def test_a_profile_file_of_another_machine_is_used_with_a_warning_naming_what_differs(tmp_path, caplog, field,
                                                                                        value):
    """A profile copied from another device, host or thread count: its costs are that machine's, so the runtime
    says so, naming the file and the field; a profile that matches this runtime in every field says nothing."""
    from hpu.core.util import host_description

    with hpu.Runtime("none", threads=2) as rt:
        here = {"device": rt.device_name, "host": host_description(), "threads": 2}
    d = _profile_dict(**_cpu_curves())
    d.update(device=here["device"], host=here["host"], provenance={"threads": here["threads"]})
    same = tmp_path / "here.json"
    same.write_text(json.dumps(d))
    if field == "threads":
        d["provenance"] = {"threads": value}
    else:
        d[field] = value
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps(d))
    with caplog.at_level("WARNING", logger="hpu"):
        hpu.Runtime("none", threads=2, profile=same).close()
        assert caplog.text == ""
        with hpu.Runtime("none", threads=2, profile=other) as rt:
            assert rt.calibrated  # used all the same
    assert "elsewhere.json" in caplog.text
    assert (f"{value} CPU threads" if field == "threads" else f"{field} {value!r}") in caplog.text
    assert (f"{here['threads']} CPU threads" if field == "threads" else f"{field} {here[field]!r}") in caplog.text


def test_a_shipped_reference_profile_is_used_without_a_warning(caplog):
    """The paper's machines' profiles (models/) are of other machines by design."""
    with caplog.at_level("WARNING", logger="hpu"):
        names = [p.stem for p in (REPO / "models").glob("*.json")]
        assert names
        for name in names:
            hpu.Runtime("none", threads=2, profile=name).close()
    assert caplog.text == ""
