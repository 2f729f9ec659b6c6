"""The HPU model against the paper (sections 5.1, 5.2.1, 5.2.2) and its own closed forms."""

import dataclasses
import json
import os
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hpu
from hpu import Profile, ProfileError, Recurrence, advanced_split, basic_split, reference_profile
from hpu.core.model import level_sum
from hpu.core.profile import PROFILE_SCHEMA_VERSION
from hpu.sorting.costs import mergesort_closed_forms

MERGESORT = Recurrence(a=2, b=2, f=1)
HPU1 = Profile(p=4, g=2**12, gamma=1 / 160)


def test_paper_worked_example():
    # Paper 5.2.2: mergesort, p=4, g=2^12, gamma=1/160, n=2^24 -> alpha* ~ 0.16, y ~ 10, GPU ~ 52% of the work.
    s = advanced_split(MERGESORT, 2**24, HPU1)
    assert s.alpha == pytest.approx(0.16, abs=0.005)
    assert s.transfer_level == 10
    assert 9 < s.y <= 10
    assert s.gpu_work_fraction == pytest.approx(0.52, abs=0.005)
    assert s.case == "iii"  # "the GPU is both saturated and non-saturated" (paper 5.2.2)


@pytest.mark.parametrize("n", [2**11, 2**16, 2**24])
@pytest.mark.parametrize("alpha", [0.002, 0.05, 0.16, 0.3, 0.6, 0.9])
def test_general_sums_match_mergesort_closed_forms(n, alpha):
    cf = mergesort_closed_forms(n, HPU1, alpha)
    s = advanced_split(MERGESORT, n, HPU1, alpha=alpha)
    L = math.log2(n)
    if 0 <= cf["y"] <= L:
        assert s.case == cf["case"]
        assert s.y == pytest.approx(cf["y"], abs=1e-6)
        assert s.gpu_work_fraction == pytest.approx(cf["W_g"] / cf["total"], rel=1e-9)
    else:  # the closed form leaves the tree; the split clips y to it
        assert s.y == pytest.approx(min(max(cf["y"], 0.0), L))


def test_all_three_cases_are_exercised():
    cases = {advanced_split(MERGESORT, n, HPU1, alpha=a).case for n in (2**11, 2**24) for a in (0.05, 0.3)}
    assert cases == {"i", "ii", "iii"}


def test_f_exponent_equals_callable():
    a = advanced_split(Recurrence(2, 2, 1), 2**20, HPU1)
    b = advanced_split(Recurrence(2, 2, lambda n: n), 2**20, HPU1)
    assert a.alpha == pytest.approx(b.alpha, rel=1e-6)
    assert a.y == pytest.approx(b.y, rel=1e-9)


def test_total_work_of_mergesort():
    # n log n merges plus n leaves: n (log2 n + 1) (paper 5.2.2).
    assert MERGESORT.total_work(2**20) == pytest.approx(2**20 * 21)


def test_level_sum_integer_limits_is_plain_sum():
    rec = Recurrence(3, 2, lambda n: n * math.log(n + 1))
    n = 2**10
    explicit = sum(rec.level_work(n, i) for i in range(2, 10))
    assert level_sum(lambda i: rec.level_work(n, i), 2, 10) == pytest.approx(explicit)


def test_level_sum_geometric_fraction_is_exact():
    # h(i) = 3 * 2^i has the indefinite sum F(i) = 3 * 2^i, so the sum over [0.5, 4) is F(4) - F(0.5).
    h = lambda i: 3 * 2.0**i  # noqa: E731
    assert level_sum(h, 0.5, 4) == pytest.approx(3 * (2**4 - 2**0.5))
    assert level_sum(h, 4, 4) == 0.0


def test_basic_split_level():
    # Paper 5.1: transfer at level log_a(p/gamma) = log2(640) = 9.32.
    n = 2**24
    s = basic_split(MERGESORT, n, HPU1)
    assert s.y == pytest.approx(math.log2(640))
    assert s.transfer_level == 10
    # The device does levels 10..23 and the n leaves: 15 of the n (log2 n + 1) = 25 n operations.
    assert s.gpu_work_fraction == pytest.approx(15 / 25)
    # Level by level (brute force): level i's n operations on min(p, 2^i) cores, or on min(g, 2^i) work-items at
    # gamma times a core's speed; the CPU's levels follow the device's.
    p, g, gamma = HPU1.p, HPU1.g, HPU1.gamma
    cpu = sum(n / min(p, 2**i) for i in range(10))
    gpu = sum(n / min(g, 2**i) / gamma for i in range(10, 25))
    assert s.predicted_cpu_time == pytest.approx(cpu) and s.predicted_gpu_time == pytest.approx(gpu)
    assert s.predicted_time == pytest.approx(cpu + gpu)


def test_basic_split_all_cpu_when_gpu_is_weak():
    weak = Profile(p=8, g=10, gamma=0.5)  # gamma * g = 5 < p
    s = basic_split(MERGESORT, 2**20, weak)
    assert s.gpu_work_fraction == 0
    assert s.transfer_level == 20


def test_transfer_cost_lowers_device_work():
    prof = HPU1.replace(h2d_latency=1e3, d2h_latency=1e3, h2d_seconds_per_byte=0.5, d2h_seconds_per_byte=0.5)
    free = advanced_split(MERGESORT, 2**20, prof)
    paid = advanced_split(MERGESORT, 2**20, prof, data_bytes=4 * 2**20)
    assert paid.gpu_work_fraction < free.gpu_work_fraction
    assert paid.predicted_transfer_time > 0 and free.predicted_transfer_time == 0
    # With data_bytes=None the transfer terms are ignored: the paper's result.
    assert advanced_split(MERGESORT, 2**24, prof).alpha == pytest.approx(advanced_split(MERGESORT, 2**24, HPU1).alpha)


def test_predicted_times_in_seconds():
    prof = HPU1.replace(cpu_op_seconds=2e-9)
    s1 = advanced_split(MERGESORT, 2**22, HPU1)
    s2 = advanced_split(MERGESORT, 2**22, prof)
    assert s2.predicted_time == pytest.approx(2e-9 * s1.predicted_time)
    assert s2.predicted_speedup == pytest.approx(s1.predicted_speedup)


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(1, 64),
    g=st.floats(1, 1e6),
    inv_gamma=st.floats(1, 500),
    logn=st.integers(4, 30),
)
def test_advanced_split_is_well_formed(p, g, inv_gamma, logn):
    s = advanced_split(MERGESORT, 2.0**logn, Profile(p=p, g=g, gamma=1 / inv_gamma))
    assert 0 <= s.alpha <= 1
    assert 0 <= s.y <= logn
    assert 0 <= s.transfer_level <= logn
    assert -1e-9 <= s.gpu_work_fraction <= 1 + 1e-9
    assert s.predicted_time > 0 and s.predicted_speedup > 0
    # The chosen split is never predicted slower than the CPU alone (the device may not help at all).
    assert s.predicted_time <= advanced_split(MERGESORT, 2.0**logn, Profile(p=p, g=g, gamma=1 / inv_gamma),
                                              alpha=1.0).predicted_time * (1 + 1e-12)


def test_advanced_split_keeps_the_cpu_alone_where_the_device_cannot_help():
    weak = Profile(p=16, g=4, gamma=1 / 160)
    assert advanced_split(MERGESORT, 2**20, weak).alpha == 1.0
    slow_bus = HPU1.replace(cpu_op_seconds=1e-9, h2d_latency=1.0, d2h_latency=1.0)
    assert advanced_split(MERGESORT, 2**20, slow_bus, data_bytes=4 * 2**20).alpha == 1.0
    assert advanced_split(MERGESORT, 2**24, HPU1).alpha < 1.0  # the paper's example keeps its device share


def test_advanced_split_forced_alpha_is_kept_and_alpha_zero_is_priced_level_by_level():
    """A forced alpha is predicted as asked, even for trees too small to split; with alpha = 0 the device runs
    every level, and a level of fewer than g subproblems leaves work-items idle (brute force over the levels)."""
    assert advanced_split(MERGESORT, 4, HPU1, alpha=0.0).alpha == 0.0
    n = 2**24
    s = advanced_split(MERGESORT, n, HPU1, alpha=0.0)
    levels = sum(n / 2**i * max(1.0, 2**i / HPU1.g) / HPU1.gamma for i in range(24)) + n / HPU1.g / HPU1.gamma
    assert s.predicted_time == pytest.approx(levels, rel=1e-9)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(p=0, g=10, gamma=0.5), "p must"),
        (dict(p=-1, g=10, gamma=0.5), "p must"),
        (dict(p=4, g=0, gamma=0.5), "g must"),
        (dict(p=4, g=10, gamma=0), "gamma must"),
        (dict(p=4, g=10, gamma=1.5), "gamma must lie in"),
        (dict(p=4, g=10, gamma=float("nan")), "gamma must"),
        (dict(p=4, g=10, gamma=0.5, h2d_latency=-1), "h2d_latency"),
        (dict(p=10**400, g=10, gamma=0.5), "p must be finite"),
    ],
)
def test_profile_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Profile(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(p="16", g=10, gamma=0.5), dict(p=4, g=10, gamma=True),
                                    dict(p=4, g=10, gamma=0.5, cpu_op_seconds=" 1e-9 ")])
def test_profile_rejects_numbers_given_as_other_types(kwargs):
    with pytest.raises(TypeError, match="real number"):
        Profile(**kwargs)


@pytest.mark.parametrize("a, b, match", [(0, 2, "a must"), (-1, 2, "a must"), (2, 1, "b must"), (2, 0.5, "b must")])
def test_recurrence_rejects_bad_values(a, b, match):
    with pytest.raises(ValueError, match=match):
        Recurrence(a, b, 1)


@pytest.mark.parametrize("n", [0, -5, float("nan")])
def test_splits_reject_bad_n(n):
    with pytest.raises(ValueError, match="n must"):
        advanced_split(MERGESORT, n, HPU1)
    with pytest.raises(ValueError, match="n must"):
        basic_split(MERGESORT, n, HPU1)


def test_forced_alpha_out_of_range():
    with pytest.raises(ValueError, match="alpha"):
        advanced_split(MERGESORT, 2**10, HPU1, alpha=1.5)


def test_profile_roundtrip(tmp_path):
    prof = HPU1.replace(name="x", measurements={"g": {"work_items": [1, 2]}}, provenance={"date": "today"})
    path = prof.save(tmp_path / "sub" / "p.json")
    assert Profile.load(path) == prof
    assert json.loads(path.read_text())["schema_version"] == PROFILE_SCHEMA_VERSION
    assert not list(path.parent.glob("*.tmp"))


def test_a_saved_profile_has_the_permissions_of_an_ordinary_file(tmp_path):
    """Readable by others as any new file is (the umask applies), not private like a temporary file; saving again
    keeps the file's own permissions."""
    umask = os.umask(0o022)
    try:
        path = HPU1.save(tmp_path / "p.json")
        assert path.stat().st_mode & 0o777 == 0o644
        path.chmod(0o640)
        HPU1.replace(name="again").save(path)
        assert path.stat().st_mode & 0o777 == 0o640 and Profile.load(path).name == "again"
    finally:
        os.umask(umask)


def test_profile_load_errors(tmp_path):
    with pytest.raises(ProfileError, match="not found"):
        Profile.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProfileError, match="corrupt"):
        Profile.load(bad)
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**HPU1.to_dict(), "schema_version": PROFILE_SCHEMA_VERSION + 1}))
    with pytest.raises(ProfileError, match="newer"):
        Profile.load(newer)
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({**HPU1.to_dict(), "gamma": 7}))
    with pytest.raises(ProfileError, match="gamma"):
        Profile.load(invalid)
    missing = tmp_path / "missing_field.json"
    missing.write_text(json.dumps({"schema_version": 1, "p": 4}))
    with pytest.raises(ProfileError, match="missing field"):
        Profile.load(missing)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(ProfileError, match="corrupt"):
        Profile.load(binary)
    for curves in (None, [1, 2]):
        odd = tmp_path / "odd_curves.json"
        odd.write_text(json.dumps({**HPU1.to_dict(), "curves": curves}))
        with pytest.raises(ProfileError, match="curves must be a dict"):
            Profile.load(odd)
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({**HPU1.to_dict(), "p": 10**400}))
    with pytest.raises(ProfileError, match="finite"):
        Profile.load(huge)
    broken = tmp_path / "broken_curves.json"  # read when loaded, not at the first call that needs them
    broken.write_text(json.dumps({**HPU1.to_dict(), "curves": {"sort": {"sizes": [5], "steps": {}}}}))
    with pytest.raises(ProfileError, match="sort"):
        Profile.load(broken)


def test_a_corrupt_cached_profile_leaves_the_runtime_uncalibrated(tmp_path, monkeypatch, caplog):
    """A cached profile that cannot be read: the runtime warns and runs uncalibrated rather than failing."""
    import hpu.core.runtime as core_runtime

    path = tmp_path / "cached.json"
    path.write_bytes(b"\xff\xfe\x00 not text")
    monkeypatch.setattr(core_runtime, "default_profile_path", lambda device: path)
    with caplog.at_level("WARNING", logger="hpu"), hpu.Runtime() as rt:
        assert not rt.calibrated
    assert "corrupt" in caplog.text


@pytest.mark.parametrize("itemsize", [0, -4, 2.5, True])
def test_cost_curves_need_a_positive_integer_itemsize(itemsize):
    from hpu.core.costs import CostCurves

    with pytest.raises(ValueError, match="itemsize"):
        CostCurves((1, 2), {"a": (1.0, 2.0)}, itemsize)
    curves = CostCurves((1, 2), {"a": (1.0, 2.0)}, 4)
    with pytest.raises(ValueError, match="itemsize"):
        curves.cost("a", 10, itemsize)
    with pytest.raises(ValueError, match="NaN"):
        curves.cost("a", float("nan"))
    assert curves.cost("a", 2, 8) == pytest.approx(4.0)  # twice the bytes, twice the time


def test_reference_profiles_match_paper_table_2():
    h1, h2 = reference_profile("hpu1"), reference_profile("HPU2")
    assert (h1.p, h1.g, round(1 / h1.gamma)) == (4, 4096, 160)
    assert (h2.p, h2.g, round(1 / h2.gamma)) == (4, 1200, 65)
    with pytest.raises(ProfileError, match="no shipped profile"):
        reference_profile("hpu9")


def test_split_is_printable():
    text = str(advanced_split(MERGESORT, 2**16, HPU1))
    assert "alpha" in text and "transfer_level" in text
    assert np.isfinite(advanced_split(MERGESORT, 2**16, HPU1).predicted_time)


def test_forced_alpha_extremes():
    all_gpu = advanced_split(MERGESORT, 2**12, HPU1, alpha=0.0)
    assert all_gpu.gpu_work_fraction == 1 and all_gpu.transfer_level == 0
    all_cpu = advanced_split(MERGESORT, 2**12, HPU1, alpha=1.0)
    assert all_cpu.gpu_work_fraction == 0 and all_cpu.transfer_level == 12


_SIZES = 2.0 ** np.arange(12, 27, 2)
FAST = {
    "sizes": _SIZES.tolist(),
    "cpu_sort": (1e-4 + 1e-9 * _SIZES * np.log2(_SIZES)).tolist(),
    "device_sort": (5e-4 + 1e-11 * _SIZES * np.log2(_SIZES)).tolist(),
    "transfer": (2e-4 + 4e-10 * _SIZES).tolist(),
    "merge2": (1e-4 + 1e-10 * _SIZES).tolist(),
    "merge16": (2e-4 + 3e-10 * _SIZES).tolist(),
}


def test_fast_cost_interpolates_the_measured_curve():
    from hpu.sorting.costs import fast_cost

    prof = HPU1.replace(curves={"sort": FAST})
    for i, n in enumerate(_SIZES):
        assert fast_cost(prof, "cpu_sort", n) == pytest.approx(FAST["cpu_sort"][i])
    mid = fast_cost(prof, "transfer", 2.0**15)  # between 2^14 and 2^16: geometric mean in log-log
    assert mid == pytest.approx(np.sqrt(FAST["transfer"][1] * FAST["transfer"][2]))
    assert fast_cost(prof, "transfer", 2.0**28) > FAST["transfer"][-1]  # extrapolated upwards
    assert fast_cost(prof, "transfer", 0) == 0.0
    assert fast_cost(prof, "transfer", 2.0**20, itemsize=8) == pytest.approx(2 * fast_cost(prof, "transfer", 2.0**20))


def test_cost_curves_never_predict_a_larger_input_cheaper():
    """A noisy measurement (a quick calibration's transfer: 1.17, 1.97, 1.29, 2.35 ms at 2^14 ... 2^20) is raised to
    the largest time at a smaller size, so the cost never falls as n grows; the stored measurements stay as they
    were."""
    from hpu.core.costs import CostCurves

    sizes = [1 << 14, 1 << 16, 1 << 18, 1 << 20]
    measured = [1.167e-3, 1.974e-3, 1.293e-3, 2.352e-3]
    curves = CostCurves(sizes, {"transfer": measured})
    n = np.unique(np.geomspace(1, 1 << 24, 400).astype(np.int64))
    cost = curves.cost("transfer", n)
    assert np.all(np.diff(cost) >= 0)
    assert curves.cost("transfer", 1 << 18) == pytest.approx(1.974e-3)  # the larger time before it
    assert curves.cost("transfer", 1 << 20) == pytest.approx(2.352e-3) and curves.to_dict()["transfer"] == measured


def test_cost_curves_grow_at_least_linearly_beyond_the_largest_size():
    """A last segment still paying fixed costs (time doubling slower than n) is not extrapolated at its slope:
    above the largest measured size the time grows at least in proportion to n; a steeper slope is kept."""
    from hpu.core.costs import CostCurves

    sizes = [1 << 20, 1 << 22, 1 << 24]
    curves = CostCurves(sizes, {"sublinear": [1e-3, 2e-3, 4e-3], "nlogn": [s * 24e-10 for s in (20, 22 * 4, 24 * 16)]})
    last = sizes[-1]
    assert curves.cost("sublinear", 4 * last) == pytest.approx(4 * 4e-3)  # the last slope, 0.5, would give 8e-3
    steeper = curves.cost("nlogn", 4 * last) / curves.cost("nlogn", last)
    assert steeper == pytest.approx(24 * 16 / (22 * 4))  # the last segment's own ratio over a factor of 4
    assert curves.cost("sublinear", last // 4) == pytest.approx(2e-3)  # interpolation below is unchanged


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-7, 1.0), min_size=3, max_size=3), st.one_of(st.integers(-5, 1 << 40),
       st.floats(0.0, 2.0**40)), st.sampled_from([None, 1, 8]))
def test_cost_of_one_size_equals_the_arrays(seconds, n, itemsize):
    """A size given alone (int or float) costs what the same size costs in an array (the two paths of
    CostCurves.cost: below, between and above the measured sizes, zero at n <= 0), to within rounding."""
    from hpu.core.costs import CostCurves

    curves = CostCurves([1 << 10, 1 << 14, 1 << 20], {"step": seconds}, 4)
    alone, within = curves.cost("step", n, itemsize), curves.cost("step", np.array([n, 1 << 12]), itemsize)[0]
    assert isinstance(alone, float) and alone == pytest.approx(float(within), rel=1e-12, abs=0.0)
    assert (alone == 0.0) == (n <= 0)


def test_cost_of_an_unknown_step_or_nan_raises():
    import pickle

    from hpu.core.costs import CostCurves

    curves = CostCurves([1, 2], {"a": (1.0, 2.0)})
    assert curves.cost("a", 2) == 2.0
    again = pickle.loads(pickle.dumps(curves))  # its cached knots travel, or are made again (an older pickle's)
    again.__dict__.pop("_knot_cache", None)
    assert again == curves and again.cost("a", 4) == curves.cost("a", 4) == 4.0
    for n in (3, np.array([3])):
        with pytest.raises(KeyError):
            curves.cost("b", n)
    for n in (float("nan"), np.float64("nan"), np.array([1.0, np.nan])):
        for name in ("a", "b"):  # NaN first, whatever the name
            with pytest.raises(ValueError, match="NaN"):
                curves.cost(name, n)


def _capped_profile():
    parts = {"partition": (1e-4 + 2e-10 * _SIZES).tolist(), "partition4": (1e-4 + 3e-10 * _SIZES).tolist()}
    return HPU1.replace(curves={"sort": {**FAST, **parts}})


@pytest.mark.parametrize("ranges", [1, 3, 4, 7])
def test_a_device_share_larger_than_a_run_is_predicted_as_key_ranges(ranges):
    """keyrange_split with ``capacity``: a device share of ``m`` keys costs ``k`` runs of ``m / k`` keys one after
    another, ``k = ceil(m / (PIECE_FILL capacity))``, and each run is one more bucket of the partition (checked
    against the same sum of the curves taken by hand)."""
    from hpu.sorting.costs import PIECE_FILL, fast_cost, fast_split, keyrange_split, partition_cost

    prof, n = _capped_profile(), 2.0**24
    cap = n / (PIECE_FILL * ranges) * 1.0001  # n keys fit in exactly `ranges` runs
    split = keyrange_split(n, prof, [prof], capacity=[cap], shares=(0.0, 1.0))
    per = n / ranges
    want = partition_cost(prof, n, ranges) + ranges * (fast_cost(prof, "transfer", per) +
                                                      fast_cost(prof, "device_sort", per))
    assert split.shares == (0.0, 1.0)
    assert split.predicted_time == pytest.approx(want, rel=1e-6)
    forced = fast_split(n, prof, strategy="gpu", capacity=[n / ranges])  # a position split the device cannot hold
    if ranges == 1:
        assert forced.strategy == "gpu" and forced == fast_split(n, prof, strategy="gpu")
    else:
        assert forced.strategy == "keyrange" and forced.shares == (0.0, 1.0)
        assert forced.predicted_time == pytest.approx(
            keyrange_split(n, prof, [prof], capacity=[n / ranges], shares=(0.0, 1.0)).predicted_time)


def test_a_capacity_above_every_share_changes_no_prediction():
    from hpu.sorting.costs import fast_split

    prof = _capped_profile()
    for n in (2**14, 2**20, 2**24):
        for strategy in ("auto", "gpu", "advanced", "keyrange"):
            assert fast_split(n, prof, strategy=strategy, capacity=[2.0 * n]) == fast_split(n, prof, strategy=strategy)


def test_fast_split_picks_the_lowest_prediction():
    from hpu.sorting.costs import _fast_time, fast_split

    prof = HPU1.replace(curves={"sort": FAST})
    for n in (2**12, 2**16, 2**20, 2**24):
        best = fast_split(n, prof)
        forced = [fast_split(n, prof, strategy=s) for s in ("cpu", "gpu", "basic", "advanced")]
        assert best.predicted_time <= min(f.predicted_time for f in forced) + 1e-15
        assert best.predicted_time == pytest.approx(_fast_time(prof, n, best.alpha, best.transfer_level)[3])
    # Small inputs stay on the CPU (device latency), large ones use the device.
    assert fast_split(2**12, prof).strategy == "cpu"
    assert fast_split(2**24, prof).gpu_work_fraction > 0.5
    assert fast_split(2**24, prof, device=False).strategy == "cpu"


def test_fast_split_on_shared_cores_adds_the_shares():
    from hpu.sorting.costs import _fast_time, fast_split

    prof = HPU1.replace(curves={"sort": FAST})
    for n in (2**16, 2**20, 2**24):
        for s in ("advanced", "basic", "gpu"):
            sp = fast_split(n, prof, strategy=s, shared_cores=True)
            cpu, dev, final, total = _fast_time(prof, n, sp.alpha, sp.transfer_level)
            assert sp.predicted_time == pytest.approx(float(cpu + dev + final))
            assert sp.predicted_time >= float(total) - 1e-15  # never faster than with cores of its own
    # A device as fast as the CPU: with cores of its own about half the work each wins; on shared cores
    # sharing the work gains nothing, and (nearly) all of it goes to one unit.
    even = HPU1.replace(curves={"sort": {**FAST, "device_sort": FAST["cpu_sort"], "transfer": [1e-9] * len(_SIZES)}})
    own, shared = fast_split(2**24, even), fast_split(2**24, even, shared_cores=True)
    assert own.strategy == "advanced" and abs(own.alpha - 0.5) < 0.1
    assert abs(shared.alpha - 0.5) > 0.4 and shared.predicted_time > own.predicted_time


def test_fast_split_one_cpu_thread_where_it_is_measured_faster():
    from hpu.sorting.costs import fast_split

    # One thread 20% faster than the pool up to 2^18 keys, twice as slow above (a crossover).
    one = [t * (0.8 if n <= 2**18 else 2.0) for n, t in zip(_SIZES, FAST["cpu_sort"])]
    prof = HPU1.replace(curves={"sort": {**FAST, "cpu_sort_1": one}})
    small, large = fast_split(2**14, prof, strategy="cpu"), fast_split(2**24, prof, strategy="cpu")
    assert (small.cpu_threads, large.cpu_threads) == (1, 0)
    assert small.predicted_time == pytest.approx(one[1])  # 2^14 is a measured size
    assert fast_split(2**14, prof, device=False).cpu_threads == 1
    assert fast_split(2**24, prof).strategy != "cpu"  # the device candidates still compete
    # Without the curve (one thread, or an older profile) only the pool is considered.
    assert fast_split(2**14, HPU1.replace(curves={"sort": FAST}), strategy="cpu").cpu_threads == 0


def test_fast_split_needs_calibration():
    from hpu.sorting.costs import fast_split

    with pytest.raises(ValueError, match="fast-mode cost"):
        fast_split(2**20, HPU1)


def test_fast_split_speedup_is_over_mergesort_on_one_core():
    from hpu.sorting.costs import fast_split

    prof = HPU1.replace(curves={"sort": FAST}, cpu_op_seconds=2e-9)
    s = fast_split(2**20, prof)
    assert s.case == "fast"
    assert s.predicted_speedup == pytest.approx(2**20 * 21 * 2e-9 / s.predicted_time)


def test_one_subproblem_a_level_stays_on_the_cpu():
    """a = 1 (binary search's recurrence): the basic split keeps every level on the CPU (it divided by log a = 0)."""
    s = basic_split(Recurrence(1, 2, 0), 1024, HPU1)
    assert s.transfer_level == 10 and s.gpu_work_fraction == 0.0
    assert s.predicted_time == pytest.approx(11.0)  # ten levels and the leaf, one operation each
    assert advanced_split(Recurrence(1, 2, 0), 1024, HPU1).alpha == 1.0


@pytest.mark.parametrize("split", [basic_split, advanced_split])
def test_splits_reject_bad_data_bytes(split):
    # A negative or NaN size was ignored (no transfer charged); a string failed deep inside with a bare TypeError.
    prof = HPU1.replace(h2d_latency=1e-3, d2h_latency=1e-3)
    for bad in (-5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="data_bytes"):
            split(MERGESORT, 2**20, prof, data_bytes=bad)
    with pytest.raises(TypeError, match="data_bytes"):
        split(MERGESORT, 2**20, prof, data_bytes="1e6")


@pytest.mark.parametrize("split", [basic_split, advanced_split])
def test_splits_of_a_problem_without_work_predict_no_time(split):
    # n = 1 with leaf_cost = 0: one-core time and predicted time are both 0 (was a ZeroDivisionError).
    s = split(Recurrence(2, 2, 0, leaf_cost=0), 1, HPU1)
    assert (s.predicted_time, s.gpu_work_fraction, s.predicted_speedup) == (0.0, 0.0, 1.0)


@pytest.mark.parametrize("split", [basic_split, advanced_split])
def test_splits_reject_n_of_the_wrong_type_or_past_the_float_range(split):
    with pytest.raises(ValueError, match="n must"):
        split(MERGESORT, 2**1100, HPU1)  # was an OverflowError
    for bad in (True, "1024"):
        with pytest.raises(TypeError, match="n must be a number"):
            split(MERGESORT, bad, HPU1)
    with pytest.raises(ValueError, match="float range"):
        split(Recurrence(2, 2, 400), 2**20, HPU1)  # n**400 overflows (was an OverflowError)


def test_advanced_split_with_one_subproblem_a_level_cannot_share_it():
    # a = 1: log_a is 0, and a forced alpha strictly inside (0, 1) divided by it (ZeroDivisionError).
    with pytest.raises(ValueError, match="alpha must be 0 or 1"):
        advanced_split(Recurrence(1, 2, 1), 2**20, HPU1, alpha=0.3)
    assert advanced_split(Recurrence(1, 2, 1), 2**20, HPU1, alpha=1.0).gpu_work_fraction == 0.0


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(a=0.5, b=2), ValueError, "a must be >= 1"),
    (dict(a=2, b="2"), TypeError, "b must be a real number"),
    (dict(a=2, b=True), TypeError, "b must be a real number"),
    (dict(a=2, b=2, f=None), TypeError, "f must be a callable or a real exponent"),
    (dict(a=2, b=2, f="1"), TypeError, "f must be a callable or a real exponent"),
])
def test_recurrence_rejects_values_of_the_wrong_kind(kwargs, error, match):
    with pytest.raises(error, match=match):
        Recurrence(**kwargs)


@pytest.mark.parametrize("f, error", [(lambda n: -1.0, ValueError), (lambda n: float("nan"), ValueError),
                                      (lambda n: None, TypeError)])
@pytest.mark.parametrize("split", [basic_split, advanced_split])
def test_splits_reject_a_bad_cost_function(split, f, error):
    # A negative cost gave negative predicted times; NaN and None failed in scipy or float() without naming f.
    with pytest.raises(error, match=r"f\("):
        split(Recurrence(2, 2, f), 2**20, HPU1)


def test_advanced_split_charges_the_cpu_share_above_the_device_level():
    # A fast device reaches level y above the CPU share's level lc = log2(p/alpha) (y < lc); the CPU must then
    # still combine its own share from lc up to y (alpha * 2**i < p subproblems: one merge of n/2**i a level)
    # before the levels above y.  Mergesort, by hand: T_c = alpha/p (n + n (L - lc)) (paper 5.2.1), then
    # levels [0, y) whole (a level of 2**i merges of n/2**i on p cores: n/2**i max(1, 2**i/p); a partial level
    # weighted by its fraction) and levels [y, lc) of the CPU share.
    n, L, p, alpha = 2**20, 20, 4, 1 / 16  # lc = log2(4 * 16) = 6
    prof = Profile(p=p, g=2**16, gamma=1.0)
    s = advanced_split(MERGESORT, n, prof, alpha=alpha)
    lc = 6
    assert 3 < s.y < 4 and s.predicted_transfer_time == 0
    t_c = alpha / p * (n + n * (L - lc))
    top = sum(n / 2**i * max(1, 2**i / p) for i in range(3)) + (s.y - 3) * n / 8 * max(1, 8 / p)
    cpu_share = (4 - s.y) * n / 8 + sum(n / 2**i for i in range(4, lc))  # alpha * 2**i < p: one merge a level
    assert math.isclose(s.predicted_cpu_time, t_c + top + cpu_share, rel_tol=1e-9)
    assert math.isclose(s.predicted_time, max(t_c, s.predicted_gpu_time) + top + cpu_share, rel_tol=1e-9)


def test_reference_profile_rejects_a_name_that_is_not_a_string():
    with pytest.raises(TypeError, match="name must be a string"):
        reference_profile(None)  # was an AttributeError
    assert reference_profile("HPU1") == reference_profile("hpu1")


def test_a_split_prints_every_field_and_what_its_zeros_and_speedup_mean():
    s = advanced_split(Recurrence(2, 2, 1), 2**24, reference_profile("hpu1"))
    lines = str(s).splitlines()
    assert [line.split(":")[0].strip() for line in lines] == [f.name for f in dataclasses.fields(s)]
    assert f"predicted_speedup: {s.predicted_speedup!r} (over the model's one-core time)" in str(s)
    assert "cpu_threads: 0 (all of the runtime's)" in str(s)
    one = str(dataclasses.replace(s, cpu_threads=1))
    assert "cpu_threads: 1\n" in one and "all of the runtime's" not in one
