"""Tabu search: trajectories against a brute-force reference, identical across splits, quality, the split model."""

import bisect
import dataclasses
import importlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

import hpu
import hpu.plots
from hpu.tabu import (
    QAP,
    HWSWPartitioning,
    PPP,
    TabuCosts,
    calibrate,
    costs_path,
    evaluate_neighbourhood,
    pair_block,
    pair_from_index,
    pair_index,
    plan_split,
    tabu_search,
    tie_hash,
    transfer_levels,
)
from hpu.core.costs import ProfileError
from hpu.tabu.engine import Evaluator
from hpu.tabu.split import BLOCK_OVERHEAD, MAX_BLOCK_ITERATIONS, SIMPLER_MARGIN

from conftest import reference_search, reference_tie

DATA = Path(__file__).parents[1] / "experiments/data/qaplib"
tabu_calibrate = importlib.import_module("hpu.tabu.calibrate")  # the module (hpu.tabu.calibrate is the function)


@pytest.fixture(scope="module")
def rt():
    with hpu.Runtime() as r:
        yield r


def tied_qap(n, seed):
    """Small entries: many equal deltas, so ties must break by move index everywhere."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, (n, n))
    b = rng.integers(0, 3, (n, n))
    return QAP(a + a.T, b + b.T)


SPLITS = [
    dict(strategy="cpu", cpu_chunks=1),
    dict(strategy="cpu", cpu_chunks=3),
    dict(strategy="gpu", transfer_level=0),
    dict(strategy="gpu", transfer_level=3),
    dict(strategy="gpu", transfer_level=20),  # one move per work-group
    dict(strategy="hybrid", alpha=0.3, transfer_level=1, cpu_chunks=2),
    dict(strategy="hybrid", alpha=0.9, transfer_level=0, cpu_chunks=1),
]


def _qap_move_attribute():
    q = tied_qap(8, 1)
    return QAP(q.flow, q.distance, tabu_attribute="move")


@pytest.mark.parametrize("tie_break", ["random", "index"])
@pytest.mark.parametrize(
    "problem, tenure",
    [
        (tied_qap(8, 1), 5),
        (_qap_move_attribute(), 5),
        (QAP(np.random.default_rng(2).integers(0, 9, (7, 7)), np.random.default_rng(3).integers(0, 9, (7, 7))), 3),
        (HWSWPartitioning.random(9, edges=14, ccr=1.0, constraint="low", seed=4), 6),
        (HWSWPartitioning.random(10, edges=20, ccr=0.1, constraint="high", seed=5), 4),
    ],
    ids=["qap-ties", "qap-ties-move-attribute", "qap-asymmetric", "hwsw-low", "hwsw-high"],
)
def test_trajectory_equals_the_brute_force_reference_for_every_split(rt, problem, tenure, tie_break):
    ref_moves, ref_history, ref_best = reference_search(problem, iterations=60, tenure=tenure, seed=9,
                                                        tie_break=tie_break)
    for kw in SPLITS:
        res = tabu_search(problem, iterations=60, tenure=tenure, seed=9, runtime=rt, tie_break=tie_break, **kw)
        assert (res.tabu_attribute, res.tie_break) == (problem.tabu_attribute, tie_break)
        np.testing.assert_array_equal(res.moves, ref_moves, err_msg=str(kw))
        np.testing.assert_array_equal(res.history, ref_history, err_msg=str(kw))
        assert res.best_value == ref_best
        assert problem.objective(res.best_solution) == res.best_value
        assert problem.feasible(res.best_solution)


def test_hwsw_search_restarts_and_stays_feasible(rt):
    pb = HWSWPartitioning.random(60, ccr=1.0, constraint="low", seed=8)
    runs = [tabu_search(pb, iterations=80, tenure=30, seed=3, runtime=rt, **kw) for kw in SPLITS]
    assert runs[0].restarts >= 1  # the random start has no feasible neighbour
    for r in runs[1:]:
        np.testing.assert_array_equal(r.moves, runs[0].moves)
        np.testing.assert_array_equal(r.history, runs[0].history)
        assert r.restarts == runs[0].restarts
    assert pb.feasible(runs[0].best_solution) and pb.objective(runs[0].best_solution) == runs[0].best_value


def test_identical_trajectories_on_a_qaplib_instance(rt):
    q = QAP.from_qaplib(DATA / "tai20a.dat")
    runs = [tabu_search(q, iterations=150, tenure=10, seed=4, runtime=rt, **kw) for kw in SPLITS]
    for r in runs[1:]:
        np.testing.assert_array_equal(r.moves, runs[0].moves)
    assert runs[0].history.min() == runs[0].best_value == q.objective(runs[0].best_solution)


def test_tai30a_reaches_two_percent_of_the_best_known_value():
    q = QAP.from_qaplib(DATA / "tai30a.dat")
    res = tabu_search(q, iterations=10_000, tenure=15, seed=0, strategy="cpu", cpu_chunks=1)
    assert res.iterations == 10_000 and res.stop == "iterations"
    assert q.objective(res.best_solution) == res.best_value
    assert res.best_value <= 1.02 * 1818146


def test_stopping_rules(rt):
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    res = tabu_search(q, iterations=10_000, tenure=5, seed=1, strategy="cpu", cpu_chunks=1, max_no_improve=25)
    assert res.stop == "no_improvement" and res.iterations < 10_000
    assert len(res.history) == len(res.moves) == res.iterations
    best_at = int(np.argmin(res.history)) + 1
    assert res.iterations - best_at == 25
    res = tabu_search(q, iterations=10**7, tenure=5, seed=1, strategy="gpu", transfer_level=0, runtime=rt,
                      time_limit=0.2)
    assert res.stop == "time_limit" and res.wall_time >= 0.2 and res.iterations < 10**7
    assert res.device_time > 0 and res.cpu_time == 0 and res.moves_per_second > 0
    # Every iteration done: the search stopped for its iterations, whatever the clock says by then.
    res = tabu_search(q, iterations=1, tenure=5, seed=1, strategy="cpu", time_limit=1e-12)
    assert res.iterations == 1 and res.stop == "iterations"
    res = tabu_search(q, iterations=3, tenure=5, seed=1, strategy="cpu", time_limit=1e-12)
    assert res.iterations == 1 and res.stop == "time_limit"  # the clock is checked after every iteration


def test_stop_at_target():
    """The run stops at the first iteration reaching the target, on the very trajectory of the full run."""
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    full = tabu_search(q, iterations=400, tenure=5, seed=2, strategy="cpu", cpu_chunks=1)
    target = int(np.sort(np.unique(full.history))[3])  # reached somewhere along the way, not at once
    first = int(np.argmax(full.history <= target)) + 1
    res = tabu_search(q, iterations=400, tenure=5, seed=2, strategy="cpu", cpu_chunks=1, target=target)
    assert res.stop == "target" and res.iterations == first and res.best_value <= target
    np.testing.assert_array_equal(res.moves, full.moves[:first])
    assert q.objective(res.best_solution) == res.best_value
    unreachable = tabu_search(q, iterations=50, tenure=5, seed=2, strategy="cpu", cpu_chunks=1, target=0)
    assert unreachable.stop == "iterations" and unreachable.iterations == 50


def test_stops_past_the_int_ranges_agree_on_every_path(rt):
    """A target beyond int64 or a max_no_improve beyond int32 is valid; the device's resident blocks took them as
    C integers and raised OverflowError where the host loop ran."""
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    runs = [dict(strategy="cpu", cpu_chunks=1), dict(strategy="gpu", transfer_level=0, block_iterations=1),
            dict(strategy="gpu", transfer_level=0, block_iterations=4)]
    for stops, stop in [(dict(target=2**63), "target"), (dict(target=-2**63 - 1), "iterations"),
                        (dict(max_no_improve=2**31), "iterations")]:
        results = [tabu_search(q, iterations=8, tenure=3, seed=0, runtime=rt, **stops, **kw) for kw in runs]
        assert {r.stop for r in results} == {stop}, stops
        assert len({r.iterations for r in results}) == 1 and len({r.best_value for r in results}) == 1


def test_a_cpu_search_leaves_the_device_alone(fresh, monkeypatch, tmp_path):
    """strategy="cpu" chooses its CPU ranges from the CPU's costs: the device is not calibrated (a device failure
    there made a CPU search raise, and PoCL's compiler aborts on some kernels), and nothing half-measured is saved."""
    tabu_calibrate = importlib.import_module("hpu.tabu.calibrate")  # hpu.tabu.calibrate is also the function

    def no_device(*args, **kw):
        raise AssertionError("the device was measured")

    monkeypatch.setattr(tabu_calibrate, "_measure_device", no_device)
    monkeypatch.setenv("HPU_PROFILE_DIR", str(tmp_path))
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    res = tabu_search(q, iterations=20, tenure=5, seed=3, strategy="cpu", runtime=fresh, on_device_error="raise")
    ref = tabu_search(q, iterations=20, tenure=5, seed=3, strategy="cpu", cpu_chunks=1, runtime=fresh)
    assert res.split.alpha == 1.0 and np.array_equal(res.moves, ref.moves)
    assert not costs_path(q, fresh).exists()
    with pytest.raises(ValueError, match="units"):
        calibrate(q, fresh, units="gpu")


def test_initial_solution_and_input_untouched():
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    start = q.read_solution(DATA / "tai12a.sln").permutation
    keep = start.copy()
    res = tabu_search(q, iterations=5, tenure=3, initial=start, strategy="cpu", cpu_chunks=1)
    np.testing.assert_array_equal(start, keep)
    assert res.best_value == 224416  # the optimum is kept as the best


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(iterations=0, tenure=3), ValueError, "iterations must be an integer >= 1"),
        (dict(iterations=2.5, tenure=3), ValueError, "iterations must be an integer >= 1"),
        (dict(iterations=5, tenure=66), ValueError, r"tenure must be an integer in \[0, 66\)"),
        (dict(iterations=5, tenure=-1), ValueError, "tenure"),
        (dict(iterations=5, tenure=3, strategy="fpga"), ValueError, "strategy must be one of"),
        (dict(iterations=5, tenure=3, initial=[0] * 12), ValueError, "not a permutation"),
        (dict(iterations=5, tenure=3, time_limit=0), ValueError, "time_limit"),
        (dict(iterations=5, tenure=3, time_limit=float("nan")), ValueError, r"time_limit \(seconds\) must be finite"),
        (dict(iterations=5, tenure=3, time_limit=True), TypeError, "time_limit"),  # not 1 second
        (dict(iterations=5, tenure=3, time_limit="1"), TypeError, "time_limit"),
        (dict(iterations=5, tenure=3, strategy="gpu", transfer_level=1.5), ValueError,
         "transfer_level must be an integer"),
        (dict(iterations=5, tenure=3, strategy="cpu", cpu_chunks=1.9), ValueError, "cpu_chunks must be an integer"),
        (dict(iterations=5, tenure=3, max_no_improve=0), ValueError, "max_no_improve"),
        (dict(iterations=5, tenure=3, target=1.5), ValueError, "target must be an integer"),
        (dict(iterations=5, tenure=3, tie_break="first"), ValueError,
         r"tie_break must be one of \('random', 'index'\)"),
        (dict(iterations=5, tenure=3, strategy="cpu", alpha=0.5), ValueError, "alpha can only be forced"),
        (dict(iterations=5, tenure=3, strategy="hybrid", alpha=1.5, transfer_level=0, cpu_chunks=1),
         ValueError, r"alpha must lie in \[0, 1\]"),
    ],
)
def test_bad_arguments(rt, kwargs, error, message):
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    with pytest.raises(error, match=message):
        tabu_search(q, runtime=rt, **kwargs)


def test_bad_tabu_attribute():
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    assert q.tabu_attribute == "facility-location"
    with pytest.raises(ValueError, match=r"QAP: tabu_attribute must be one of \('facility-location', 'move'\)"):
        QAP(q.flow, q.distance, tabu_attribute="job-position")
    with pytest.raises(ValueError, match="HWSWPartitioning: tabu_attribute must be one of"):
        HWSWPartitioning.random(5, edges=4, ccr=1.0, constraint="low", seed=1)._set_tabu_attribute("facility-location")


@pytest.mark.parametrize("n", [3_500_000_000, 4_294_967_000])
def test_pairs_stay_exact_where_i_times_n_passes_int64(n):
    """Indices below 2**63 whose pair's ``i (n - 1)`` or ``i (i + 1)`` is not: pair_index gave negative indices and
    pair_from_index of an array looped forever; the reference is Python's exact integers."""
    total = n * (n - 1) // 2
    assert total < 2**63
    idx = [0, n - 1, total // 3, total - n, total - 1]
    def start(i):  # row i's first index, sum_{r < i} (n - 1 - r)
        return i * (n - 1) - i * (i - 1) // 2

    ref = [(i, k - start(i) + i + 1) for k in idx for i in [bisect.bisect_right(range(n - 1), k, key=start) - 1]]
    assert [pair_index(n, i, j) for i, j in ref] == idx
    np.testing.assert_array_equal(pair_index(n, np.array([i for i, _ in ref]), np.array([j for _, j in ref])), idx)
    assert [pair_from_index(n, k) for k in idx] == ref
    i, j = pair_from_index(n, np.array(idx))
    assert list(zip(i.tolist(), j.tolist())) == ref
    i, j = pair_block(n, total - 3, total)
    assert list(zip(i.tolist(), j.tolist())) == [(n - 3, n - 2), (n - 3, n - 1), (n - 2, n - 1)]


def test_tie_hash_equals_the_documented_formula():
    rng = np.random.default_rng(15)
    index = np.concatenate([np.arange(50), rng.integers(0, 2**40, 200), [2**40 - 1, 2**32, 2**32 - 1]])
    for iteration, seed in [(0, 0), (1, 7), (2**31 - 1, 2**32 - 1), (12345, int(rng.integers(2**32)))]:
        got = tie_hash(index, iteration, seed)
        assert got.dtype == np.int64 and got.min() >= 0 and got.max() < 2**21
        assert got.tolist() == [reference_tie(int(m), iteration, seed) for m in index]
    assert len(set(tie_hash(np.arange(4096), 3, 1).tolist())) > 3900  # spreads ties (few collisions in 2^21)


def test_gpu_strategy_needs_a_device():
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    with pytest.raises(ValueError, match="unit must be"):
        evaluate_neighbourhood(q, np.arange(12), unit="gpu")
    with hpu.Runtime("none") as cpu_only:
        with pytest.raises(hpu.NoDeviceError):
            evaluate_neighbourhood(q, np.arange(12), unit="device", runtime=cpu_only)
        with pytest.raises(hpu.NoDeviceError):
            tabu_search(q, iterations=3, tenure=2, strategy="gpu", transfer_level=0, runtime=cpu_only)
        res = tabu_search(q, iterations=3, tenure=2, strategy="hybrid", cpu_chunks=1, runtime=cpu_only)
        assert res.split.alpha == 1.0 and res.split.groups == 0


# -- the split model ------------------------------------------------------------------------


def costs(**kw):
    base = dict(kind="qap", key="k", threads=4, work_group_size=128, cpu_move_seconds=1e-8,
                cpu_call_seconds=0.0, pool_seconds=0.0, cpu_parallelism=4.0, device_fixed_seconds=0.0,
                device_move_seconds=1e-7, device_saturation=1000.0, partial_seconds=0.0)
    base.update(kw)
    return TabuCosts(**base)


def test_without_overheads_the_model_balances_as_the_paper():
    # HPU model, paper 5.2.1 with a negligible combine: alpha = p / (p + gamma g).
    c = costs(cpu_move_seconds=1e-9)
    s = plan_split(10**6, c)
    p, g, gamma = 4, 1000, c.gamma
    assert gamma == pytest.approx(0.01)
    assert s.alpha == pytest.approx(p / (p + gamma * g), abs=0.002)
    assert s.cpu_chunks == 4 and s.groups * 128 >= 1000
    assert s.predicted_time == pytest.approx(max(s.predicted_cpu_time, s.predicted_device_time))


def test_launch_costs_push_small_neighbourhoods_to_one_unit():
    slow_launch = costs(device_fixed_seconds=1e-3, pool_seconds=1e-4)
    s = plan_split(435, slow_launch)
    assert (s.alpha, s.cpu_chunks, s.groups, s.transfer_level) == (1.0, 1, 0, -1)
    fast_device = costs(cpu_call_seconds=1e-4, device_fixed_seconds=5e-5, device_move_seconds=1e-9)
    assert plan_split(435, fast_device).alpha == 0.0
    # The pool pays its dispatch cost only when the work is large enough.
    pooled = costs(pool_seconds=1e-4, device_fixed_seconds=1.0)
    assert plan_split(1000, pooled).cpu_chunks == 1
    assert plan_split(10**7, pooled).cpu_chunks == 4


def test_transfer_level_saturates_the_device_when_partials_cost():
    c = costs(cpu_move_seconds=1.0, device_saturation=4096.0, partial_seconds=1e-7, device_fixed_seconds=1e-5)
    s = plan_split(10**6, c, strategy="hybrid")
    assert s.alpha == 0.0 and s.groups == 4096 // 128 and s.transfer_level == 5
    assert s.depth == pytest.approx(math.log2(10**6))


def test_units_that_take_turns_add_instead_of_overlap():
    c = costs(overlap=0.0, pool_overlap=0.0, device_move_seconds=4e-7, device_saturation=100.0)
    s = plan_split(10**6, c)
    assert s.alpha in (0.0, 1.0)
    forced = plan_split(10**6, c, alpha=0.3, cpu_chunks=4)
    assert forced.predicted_time == pytest.approx(forced.predicted_cpu_time + forced.predicted_device_time)
    half = dataclasses.replace(c, pool_overlap=0.5)
    forced = plan_split(10**6, half, alpha=0.3, cpu_chunks=4)
    t_cpu, t_dev = forced.predicted_cpu_time, forced.predicted_device_time
    assert forced.predicted_time == pytest.approx(max(t_cpu, t_dev) + 0.5 * min(t_cpu, t_dev))
    one = plan_split(10**6, half, alpha=0.3, cpu_chunks=1)  # the calling thread's overlap is omega_1 = 0
    assert one.predicted_time == pytest.approx(one.predicted_cpu_time + one.predicted_device_time)


def test_units_that_contend_for_cores_are_never_split():
    # A CPU OpenCL device and the pool share the host's cores: the hybrid is slower than both in turn.
    c = costs(overlap=1.0, pool_overlap=-0.5, device_move_seconds=1e-8, device_saturation=100.0)
    forced = plan_split(10**6, c, alpha=0.3, cpu_chunks=4)
    t_cpu, t_dev = forced.predicted_cpu_time, forced.predicted_device_time
    assert forced.predicted_time == pytest.approx(max(t_cpu, t_dev) + 1.5 * min(t_cpu, t_dev))
    s = plan_split(10**6, c)
    assert s.cpu_chunks <= 1  # a hybrid, if any, keeps its CPU share off the pool


def test_a_device_on_the_host_cores_is_not_split_with_them():
    # Costs under which independent units would split (the paper's balance, as in the first test).
    c = costs(cpu_move_seconds=1e-9)
    assert 0 < plan_split(10**6, c).alpha < 1
    shared = dataclasses.replace(c, shared_cores=True)
    s = plan_split(10**6, shared)
    assert s.alpha in (0.0, 1.0)
    one_unit = min((plan_split(10**6, shared, strategy=u) for u in ("cpu", "gpu")), key=lambda x: x.predicted_time)
    assert one_unit.predicted_time <= s.predicted_time <= one_unit.predicted_time * (1 + SIMPLER_MARGIN)
    assert plan_split(10**6, shared, alpha=0.3).alpha == pytest.approx(0.3)  # forcing still splits


def test_a_tiny_cpu_share_pays_the_hybrid_overhead():
    # HW/SW on the H100 (bench_tabu, 2026-11-22): 1% on the CPU cost 0.1-0.3 ms more than the device alone.
    c = costs(cpu_move_seconds=1.3e-8, cpu_call_seconds=2e-5, threads=1, cpu_parallelism=1.0,
              device_fixed_seconds=2.5e-4, device_move_seconds=5.7e-7, device_saturation=46341.0)
    N = 8 * 10**6
    gpu = plan_split(N, c, strategy="gpu")
    tiny = plan_split(N, c, alpha=0.002, transfer_level=gpu.transfer_level)
    assert tiny.predicted_time < gpu.predicted_time  # the paper's free overlap: a sliver of CPU share never hurts
    c = dataclasses.replace(c, hybrid_seconds=1e-4)
    tiny = plan_split(N, c, alpha=0.002, transfer_level=gpu.transfer_level)
    assert tiny.predicted_time > plan_split(N, c, strategy="gpu").predicted_time
    assert tiny.predicted_time == pytest.approx(max(tiny.predicted_cpu_time, tiny.predicted_device_time) + 1e-4)
    s = plan_split(N, c)
    assert (s.alpha, s.cpu_chunks, s.transfer_level) == (0.0, 0, gpu.transfer_level)


def test_a_gain_within_the_margin_keeps_the_simpler_split():
    # gamma g = 100 against p = 4: the paper's alpha = 4 / 104 saves under 4%, not worth two units.
    c = costs()
    s, paper = plan_split(10**6, c), plan_split(10**6, c, alpha=4 / 104)
    assert s.alpha == 0.0
    assert paper.predicted_time < s.predicted_time <= paper.predicted_time * (1 + SIMPLER_MARGIN)


def test_the_measured_level_curve_overrides_the_fitted_formula():
    # The fitted g puts the best level at 7; the measured curve (as on the H100's HW/SW runs) at 9.
    c = costs(cpu_move_seconds=1.0, device_fixed_seconds=5e-5, device_saturation=2**14, partial_seconds=1e-8)
    N = 2**20
    assert plan_split(N, c).transfer_level == 7
    fitted = [c.predict(N, 0, 0, 2**t)[1] for t in transfer_levels(N, 128)]
    curve = list(fitted)
    curve[9] = min(fitted) * 0.9
    measured = dataclasses.replace(c, device_level_seconds=curve, device_level_moves=N)
    s = plan_split(N, measured)
    assert (s.alpha, s.transfer_level) == (0.0, 9)
    assert s.predicted_time == pytest.approx(curve[9])
    assert [measured.predict(N, 0, 0, 2**t)[1] for t in transfer_levels(N, 128)] == pytest.approx(curve)
    # Smaller device shares follow the formula, shifted by the measured residual of their level.
    shift = measured.predict(N, N // 8, 1, 2**9)[1] - c.predict(N, N // 8, 1, 2**9)[1]
    assert shift == pytest.approx(curve[9] - fitted[9])


def test_forced_choices_and_errors():
    c = costs()
    s = plan_split(1000, c, strategy="hybrid", alpha=0.25, transfer_level=2, cpu_chunks=3)
    assert (s.cpu_moves, s.cpu_chunks, s.transfer_level, s.groups, s.device_moves) == (250, 3, 2, 4, 750)
    assert plan_split(1000, c, strategy="gpu").alpha == 0.0
    assert plan_split(1000, c, strategy="cpu").groups == 0
    forced = plan_split(1000, None, strategy="gpu", transfer_level=2, work_group_size=64)
    assert forced.groups == 4 and math.isnan(forced.predicted_time)
    with pytest.raises(ValueError, match="needs calibrated costs"):
        plan_split(1000, None, strategy="hybrid", work_group_size=64)
    with pytest.raises(ValueError, match="needs an OpenCL device"):
        plan_split(1000, None, strategy="gpu", transfer_level=1)
    with pytest.raises(ValueError, match="transfer_level must be an integer >= 0"):
        plan_split(1000, c, transfer_level=-2)
    for bad in (dict(transfer_level=1.9), dict(transfer_level="3"), dict(cpu_chunks=2.7), dict(cpu_chunks=True)):
        with pytest.raises(ValueError, match="must be an integer"):  # truncated or converted before
            plan_split(1000, c, **bad)
    with pytest.raises(ValueError, match="num_moves must be an integer"):
        plan_split(10.9, c)
    with pytest.raises(TypeError, match="alpha must be a real number"):
        plan_split(1000, c, alpha="0.5")
    assert list(transfer_levels(1000, 128)) == [0, 1, 2, 3]
    assert list(transfer_levels(128, 128)) == [0] and list(transfer_levels(0, 128)) == []


def _smallest_block(o, s):
    """Brute force: the first power of two K whose round trip o / K is within BLOCK_OVERHEAD of s, else the cap."""
    k = 1
    while k < MAX_BLOCK_ITERATIONS and o / k > BLOCK_OVERHEAD * s:
        k *= 2
    return k


def test_the_model_plans_resident_blocks_from_their_measured_costs():
    levels, s, o = (0, 3, 5), (2e-5, 1e-5, 1e-5), (1e-4, 3e-4, 4e-3)
    c = costs(resident_levels=levels, resident_iteration_seconds=s, resident_block_seconds=o)
    per = {t: (_smallest_block(o[i], s[i]), s[i] + o[i] / _smallest_block(o[i], s[i])) for i, t in enumerate(levels)}
    assert per[0][0] == 128 and per[3][0] == 1024 and per[5][0] == 1024  # 100 and 600 rounded up; 8000 capped
    best = min(per, key=lambda t: per[t][1])
    assert best == 3 and c.plan_resident() == (3, 1024, pytest.approx(per[3][1]))
    assert c.plan_resident(0) == (0, 128, pytest.approx(per[0][1]))
    assert c.plan_resident(2) is None and costs().plan_resident() is None
    assert costs(resident_levels=(1,), resident_iteration_seconds=(1e-3,),
                 resident_block_seconds=(1e-5,)).plan_resident()[1] == 1  # a round trip within 5% of one iteration
    with pytest.raises(ValueError, match="differ in length"):
        costs(resident_levels=(0,), resident_iteration_seconds=(), resident_block_seconds=())


def test_tabu_search_takes_the_models_blocks_and_level(rt):
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    measured = calibrate(q, rt)
    assert 0 in measured.resident_levels and min(measured.resident_iteration_seconds) > 0
    assert min(measured.resident_block_seconds) >= 0 and measured.plan_resident() is not None
    c = dataclasses.replace(measured, resident_levels=(0, 2), resident_iteration_seconds=(1e-5, 1e-6),
                            resident_block_seconds=(1e-4, 1e-4))
    kw = dict(iterations=300, tenure=7, seed=2, runtime=rt, strategy="gpu", costs=c)
    host = tabu_search(q, block_iterations=1, **kw)
    res = tabu_search(q, **kw)  # level 2 with K = 1024 (1e-6 + 1e-4 / 1024 s per iteration), capped at 300
    assert (res.block_iterations, res.split.transfer_level, res.split.groups) == (300, 2, 4)
    assert res.split.predicted_time == pytest.approx(1e-6 + 1e-4 / 1024)
    at0 = tabu_search(q, transfer_level=0, **kw)  # 1e-4 / (0.05 * 1e-5) = 200 -> 256
    assert (at0.block_iterations, at0.split.transfer_level) == (256, 0)
    forced = tabu_search(q, block_iterations=16, **kw)
    assert (forced.block_iterations, forced.split.transfer_level) == (16, 2)
    for r in (res, at0, forced):
        np.testing.assert_array_equal(r.moves, host.moves)
        np.testing.assert_array_equal(r.best_solution, host.best_solution)


def test_calibration_stops_descending_the_levels_where_they_only_get_slower(rt, monkeypatch):
    """A fake device whose time grows with the moves per work-group: the lowest levels are not timed but fitted."""
    pb = PPP.generate(101, 117, 1, hamming=2)
    N = pb.num_moves
    with Evaluator(pb.state(pb.random_solution(np.random.default_rng(0))), rt, cpu_moves=N,
                   on_device_error="raise") as ev:
        ev.configure(N - 1, 1, 1)  # as _measure_device begins: the work-group size is set
        w = ev.work_group_size
        tau = 0.05 / math.ceil(N / 2 / w)  # level 1 takes 0.05 s + lambda: slow enough to stop there
        monkeypatch.setattr(tabu_calibrate, "_seconds", lambda fn, **kw: 1e-4 + tau * math.ceil(ev._chunk / w))
        fields, raw = tabu_calibrate._measure_device(ev, tabu_calibrate._Passes(ev), rt)
    levels = transfer_levels(N, w)
    timed = [g for nd, g in zip(raw["device_moves"], raw["groups"]) if nd == N]
    assert timed == [min(2**t, N) for t in reversed(levels)][:-1]  # from the top down to level 1
    curve = fields["device_level_seconds"]
    assert len(curve) == len(levels) and curve[1] == pytest.approx(1e-4 + tau * math.ceil(N / 2 / w))  # timed
    fitted = costs(**{k: fields[k] for k in ("work_group_size", "device_fixed_seconds", "device_move_seconds",
                                             "device_saturation", "partial_seconds")})
    assert curve[0] == pytest.approx(fitted.predict(N, 0, 1, 1)[1]) and curve[0] > curve[1]  # level 0: the fit


@pytest.mark.parametrize("curve, levels, blocks", [
    ((1e-3, 2e-3), [0], [4, 64]),  # level 0 the fastest
    ((2e-3, 1e-3), [0, 1], [4, 64]),  # level 0 cheap to time
    ((1.0, 1e-3), [1], [4, 64]),  # level 0 slow and slower than level 1 by more than a round trip
    ((1.0, 0.5), [1], [1, 4]),  # every level slow: short blocks
    ((1.0, 1.0 - 1e-5), [0, 1], [1, 4]),  # level 0 slow but within a round trip of the fastest
])
def test_resident_calibration_times_level_0_where_it_can_win(rt, curve, levels, blocks):
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    c = costs(device_fixed_seconds=1e-4, device_level_seconds=curve, device_level_moves=q.num_moves)
    with Evaluator(q.state(q.random_solution(np.random.default_rng(0))), rt, cpu_moves=0,
                   on_device_error="raise") as ev:
        fields, raw = tabu_calibrate._measure_resident(ev, c)
    assert fields["resident_levels"] == levels and sorted(raw) == [f"level{t}" for t in levels]
    assert all(raw[f"level{t}"]["iterations"] == blocks for t in levels)


@pytest.mark.parametrize("kw, device_kinds", [
    (dict(strategy="gpu", transfer_level=2, block_iterations=1), {"evaluate": 6, "apply": 6}),  # the host loop
    (dict(strategy="gpu", transfer_level=2, block_iterations=3), {"evaluate": 6, "select": 6}),  # two kernels
    (dict(strategy="gpu", transfer_level=0, block_iterations=3), {"block": 2}),  # one launch a block
    (dict(strategy="cpu"), {}),
], ids=["host-loop", "resident", "resident-level-0", "cpu"])
def test_trace_records_every_step_on_the_host_clock(rt, kw, device_kinds):
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    args = dict(iterations=6, tenure=5, seed=1, runtime=rt, **kw)
    plain, res = tabu_search(q, **args), tabu_search(q, trace=True, **args)
    assert plain.trace is None and res.moves.tolist() == plain.moves.tolist()
    tr = res.trace
    kinds = {(e.unit, e.kind): 0 for e in tr.events}
    for e in tr.events:
        kinds[e.unit, e.kind] += 1
    assert {k: v for (u, k), v in kinds.items() if u == "device"} == device_kinds
    host = {k: v for (u, k), v in kinds.items() if u.startswith("cpu:")}
    assert host == ({} if device_kinds.keys() - {"evaluate", "apply"} else
                    {"combine": 6, "apply": 6, **({"evaluate": 6} if kw["strategy"] == "cpu" else {})})
    assert tr.n == q.num_moves and tr.transfer_level == res.split.transfer_level
    assert [e for e in tr.events if not 0 <= e.start <= e.end <= tr.wall] == []
    device = sorted((e for e in tr.events if e.unit != "bus" and not e.unit.startswith("cpu:")), key=lambda e: e.start)
    assert all(a.end <= b.start for a, b in zip(device, device[1:]))  # one in-order command queue
    assert hpu.plots.tabu_gantt(tr).axes[0].get_yticks().size == len({e.unit for e in tr.events})


def test_calibration_is_cached_and_drives_the_default_split(rt, tmp_path, monkeypatch):
    monkeypatch.setenv("HPU_PROFILE_DIR", str(tmp_path))
    pb = HWSWPartitioning.random(150, seed=6)
    c = calibrate(pb, rt)
    path = costs_path(pb, rt)
    assert path.parent.parent == tmp_path and path.exists()
    assert c.kind == "hwsw" and c.has_device and c.threads == rt.threads
    assert c.cpu_move_seconds > 0 and c.device_move_seconds > 0 and c.device_fixed_seconds > 0
    assert 1 <= c.cpu_parallelism <= rt.threads and c.gamma > 0
    assert TabuCosts.load(path) == c
    res = tabu_search(pb, iterations=20, tenure=10, seed=1, runtime=rt)  # uses the cached costs
    assert res.split.predicted_time > 0 and 0 <= res.split.alpha <= 1
    assert res.split == plan_split(pb.num_moves, c)
    assert calibrate(pb, rt) is c  # the runtime keeps the costs: measured (or loaded) once
    forced = calibrate(pb, rt, force=True)
    assert forced is not c and calibrate(pb, rt) is forced and TabuCosts.load(path) == forced
    path.write_text("{corrupt")
    assert calibrate(pb, rt, cache=False).kind == "hwsw"
    with pytest.raises(ProfileError, match="corrupt"):
        TabuCosts.load(path)


def test_costs_files_are_versioned_and_every_bad_one_is_a_profile_error(tmp_path):
    c = costs(device_level_seconds=[2e-4, 1e-4], device_level_moves=10**6, host_seconds=1e-6,
              measurements={"cpu": {"moves": [1, 4], "seconds": [1e-6, 3e-6]}})
    path = c.save(tmp_path / "costs.json")
    d = json.loads(path.read_text())
    assert (d["kind"], d["schema_version"], d["problem_kind"]) == ("tabu-costs", 5, "qap")
    assert TabuCosts.load(path) == c and c.to_dict()["kind"] == "qap"
    bad = {  # each file's content and the reason its error gives
        "missing": (None, "file not found"),
        "corrupt": ("{not json", "corrupt tabu-costs file"),
        "newer": ({**d, "schema_version": 6}, "schema version 6 is newer"),
        "older": ({**d, "schema_version": 4}, "schema version 4 is too old"),
        "resident fields of different lengths": ({**d, "resident_levels": [0, 1], "resident_block_seconds": [1e-4],
                                                  "resident_iteration_seconds": [1e-5]}, "differ in length"),
        "other kind": ({**d, "kind": "profile"}, "holds 'profile', not 'tabu-costs'"),
        "no problem kind": ({k: v for k, v in d.items() if k != "problem_kind"}, "without a 'problem_kind'"),
        "missing field": ({k: v for k, v in d.items() if k != "cpu_move_seconds"}, "cpu_move_seconds"),
        "not an object": ([1, 2], "expected a JSON object"),
    }
    for name, (content, reason) in bad.items():
        p = tmp_path / f"{name}.json"
        if content is not None:
            p.write_text(content if isinstance(content, str) else json.dumps(content))
        with pytest.raises(ProfileError, match=reason):
            TabuCosts.load(p)


def test_tie_hash_transfer_levels_and_plan_split_refuse_what_they_would_wrap_or_truncate():
    from hpu.tabu import plan_split, tie_hash, transfer_levels

    idx = np.arange(5)
    assert np.array_equal(tie_hash(idx.astype(np.int32), 3, 2**32 - 1), tie_hash(idx, 3, np.uint32(2**32 - 1)))
    for seed in (2**32, -1, 5.5, True):
        with pytest.raises(ValueError, match="seed must be an integer"):
            tie_hash(idx, 1, seed)
    with pytest.raises(ValueError, match="index must hold integer"):
        tie_hash(np.array([1.5]), 1, 5)
    assert transfer_levels(0, 0) == range(0) and transfer_levels(100, 8) == range(0, 5)  # ceil(100 / 8) = 13 items
    for moves, w, name in ((10.5, 4, "device_moves"), (True, 4, "device_moves"), (10, 2.5, "work_group_size"),
                           (10, 0, "work_group_size")):
        with pytest.raises(ValueError, match=f"{name} must be an integer"):
            transfer_levels(moves, w)
    for w in (-3, 2.5):
        with pytest.raises(ValueError, match="work_group_size must be an integer"):
            plan_split(10, strategy="gpu", transfer_level=0, work_group_size=w)
