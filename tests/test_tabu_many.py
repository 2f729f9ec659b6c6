"""Many searches at once (tabu_search_many): each equals the search run alone, the model's division, errors."""

from __future__ import annotations

import concurrent.futures
import math
import time

import numpy as np
import pytest

import hpu
from hpu.tabu import ManyCosts, calibrate_many, plan_many, tabu_search, tabu_search_many
from conftest import reference_search
from test_tabu_resident import PROBLEMS, same


def alone(problem, seed, **kw):
    """The reference: the search run by itself with the host loop on the CPU."""
    return tabu_search(problem, seed=seed, strategy="cpu", **kw)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_every_search_takes_the_trajectory_it_takes_alone(rt, name):
    problem = PROBLEMS[name]()
    kw = dict(iterations=300, tenure=7, runtime=rt)
    res = tabu_search_many(problem, range(5), device_searches=3, block_iterations=64, **kw)
    assert [r.split.strategy for r in res] == ["gpu"] * 3 + ["cpu"] * 2
    for seed, r in enumerate(res):
        same(r, alone(problem, seed, **kw))
        assert r.fallback == ""
    if name == "hwsw":
        assert sum(r.restarts for r in res[:3]) > 0  # the batch restarted searches on the device


@pytest.mark.parametrize("rule", [dict(target=241696 + 2500), dict(max_no_improve=30)])
def test_searches_stop_at_their_own_iteration(rt, rule):
    problem = PROBLEMS["qap"]()
    kw = dict(iterations=1500, tenure=7, runtime=rt, **rule)
    res = tabu_search_many(problem, range(6), strategy="gpu", block_iterations=32, **kw)
    refs = [alone(problem, seed, **kw) for seed in range(6)]
    assert len({r.iterations for r in refs}) > 1 and all(r.stop != "iterations" for r in refs)
    for r, ref in zip(res, refs):
        same(r, ref)


def test_the_device_batch_keeps_room_only_for_the_trajectories_it_takes(rt, monkeypatch):
    """Room for each trajectory grows as the searches go: a budget of 2^31 iterations with an early stop runs (it
    asked for two 16 GiB arrays up front), and a trajectory longer than the first room is kept whole."""
    import hpu.tabu.many as many

    monkeypatch.setattr(many, "_TRAIL_START", 40)
    problem = PROBLEMS["qap"]()
    for kw in (dict(iterations=2**31 - 20, max_no_improve=5), dict(iterations=150)):
        kw.update(tenure=7, runtime=rt)
        res = tabu_search_many(problem, range(2), device_searches=2, block_iterations=16, **kw)
        for seed, r in enumerate(res):
            same(r, alone(problem, seed, **kw))


@pytest.mark.parametrize("device_searches", [3, 1])
def test_initials_tie_break_and_generator_seeds(rt, device_searches):
    """A Generator seed is drawn from as tabu_search draws from it, whichever unit runs the search."""
    problem = PROBLEMS["hwsw"]()  # restarts draw from the generator too
    initials = [None, problem.random_solution(np.random.default_rng(2)), None]
    gens = [np.random.default_rng(11), np.random.default_rng(12), np.random.default_rng(13)]
    kw = dict(iterations=150, tenure=5, runtime=rt)
    res = tabu_search_many(problem, gens, initials=initials, device_searches=device_searches, **kw)
    for r, gen, init, i in zip(res, gens, initials, range(3)):
        ref_gen = np.random.default_rng(11 + i)
        same(r, alone(problem, ref_gen, initial=init, **kw))
        assert gen.bit_generator.state == ref_gen.bit_generator.state
    assert sum(r.restarts for r in res) > 0
    ties = tabu_search_many(problem, range(2), device_searches=1, tie_break="index", **kw)
    for seed, r in enumerate(ties):
        same(r, alone(problem, seed, tie_break="index", **kw))
        assert r.tie_break == "index"


def test_strategies_and_the_model(rt):
    problem = PROBLEMS["qap"]()
    kw = dict(iterations=100, tenure=7, runtime=rt)
    refs = [alone(problem, seed, **kw) for seed in range(4)]
    for strategy, units in (("cpu", {"cpu"}), ("gpu", {"gpu"})):
        res = tabu_search_many(problem, range(4), strategy=strategy, **kw)
        assert {r.split.strategy for r in res} == units
        for r, ref in zip(res, refs):
            same(r, ref)
    costs = calibrate_many(problem, rt, tenure=7, block_iterations=32, max_batch=8)
    assert costs is calibrate_many(problem, rt, tenure=7, block_iterations=32, max_batch=8)  # kept by the runtime
    assert costs.batch_sizes[0] == 1 and all(t > 0 for t in costs.batch_iteration_seconds)
    assert 1 <= costs.cpu_parallelism <= costs.threads and costs.shared_cores == rt.device_shares_host_cores
    for r, ref in zip(tabu_search_many(problem, range(4), costs=costs, **kw), refs):
        same(r, ref)


def test_a_first_launch_that_compiles_is_not_timed(fresh, monkeypatch):
    """A device that compiles the kernel at its first launch (PoCL) made the first timed batch take longer than the
    calibration's limit: no larger batch was timed, and every batch went to the CPU.  The first launch is untimed."""
    import hpu.tabu.many as many

    launches, real = [], many._DeviceBatch._launches

    def first_compiles(self, t0):
        if not launches:
            time.sleep(2 * many._CALIBRATION_SECONDS)
        launches.append(len(self.states))
        return real(self, t0)

    monkeypatch.setattr(many._DeviceBatch, "_launches", first_compiles)
    problem = PROBLEMS["qap"]()
    costs = calibrate_many(problem, fresh, tenure=7, block_iterations=16, max_batch=4)
    assert costs.batch_sizes == (1, 2, 4) and launches[0] == 1
    assert max(costs.batch_iteration_seconds) * 16 < many._CALIBRATION_SECONDS


def brute_force(searches, iterations, costs):
    """Every division timed with the cost formulas written out, independently of ManyCosts' methods."""
    best = None
    for d in range(searches + 1):
        c = searches - d
        t_cpu = iterations * costs.cpu_iteration_seconds * max(math.ceil(c / costs.threads), c / costs.cpu_parallelism)
        if d == 0:
            t_dev = 0.0
        elif d <= costs.batch_sizes[-1]:
            t_dev = iterations * float(np.interp(d, costs.batch_sizes, costs.batch_iteration_seconds))
        else:
            t_dev = iterations * costs.batch_iteration_seconds[-1] * d / costs.batch_sizes[-1]
        if costs.shared_cores and 0 < d < searches:
            continue
        if best is None or max(t_dev, t_cpu) < best[1]:
            best = (d, max(t_dev, t_cpu))
    return best


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("searches", [1, 7, 64, 300])
def test_plan_many_is_the_fastest_division(searches, shared):
    costs = ManyCosts(batch_sizes=(1, 2, 4, 8, 16, 32),
                      batch_iteration_seconds=(1e-5, 1e-5, 1.1e-5, 1.3e-5, 2e-5, 4e-5),
                      block_iterations=32, cpu_iteration_seconds=2e-4, threads=4, cpu_parallelism=3.0,
                      shared_cores=shared)
    d, t = brute_force(searches, 1000, costs)
    split = plan_many(searches, 1000, costs)
    assert split.predicted_time == pytest.approx(t)
    assert split.device_searches == d and split.cpu_searches == searches - d
    if shared:
        assert d in (0, searches)


def test_plan_many_gives_the_cpu_searches_when_it_is_faster():
    costs = ManyCosts((1, 2), (1e-3, 2e-3), 32, 1e-4, 8, 8.0)
    assert plan_many(8, 10, costs).device_searches == 0
    assert plan_many(8, 10, costs, strategy="gpu").device_searches == 8
    assert plan_many(8, 10, costs, device_searches=3).cpu_searches == 5
    assert plan_many(8, 10, None, has_device=False).device_searches == 0


@pytest.mark.parametrize("searches, iterations, name", [(-1, 10, "searches"), (0, 10, "searches"),
                                                        (2.5, 10, "searches"), (True, 10, "searches"),
                                                        (4, -10, "iterations"), (4, 0, "iterations"),
                                                        (4, 10.0, "iterations")])
def test_plan_many_refuses_counts_that_are_not_positive_integers(searches, iterations, name):
    """Else a division of -1 or 2.5 searches, or negative predicted seconds, came back."""
    costs = ManyCosts((1, 2), (1e-3, 1.5e-3), 32, 1e-3, 2, 1.8)
    for kw in (dict(costs=costs), dict(costs=None, strategy="gpu")):
        with pytest.raises(ValueError, match=f"{name} must be an integer >= 1"):
            plan_many(searches, iterations, **kw)


def test_threads_share_a_runtime(rt):
    problem = PROBLEMS["pfsp-insertion"]()
    kw = dict(iterations=80, tenure=7, runtime=rt)
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        runs = list(ex.map(lambda k: tabu_search_many(problem, range(k, k + 3), device_searches=2, **kw), range(3)))
    for k, res in enumerate(runs):
        for seed, r in zip(range(k, k + 3), res):
            same(r, alone(problem, seed, **kw))


@pytest.mark.parametrize("on_device_error", ["fallback", "raise"])
def test_a_device_lost_mid_batch(monkeypatch, on_device_error):
    cl = pytest.importorskip("pyopencl")
    from hpu.tabu import many

    rt = hpu.Runtime()
    if not rt.has_device:
        pytest.skip("no OpenCL device")
    problem = PROBLEMS["qap"]()
    kw = dict(iterations=200, tenure=7)
    real, calls = cl.enqueue_nd_range_kernel, []

    def faulty(queue, *args, **kwargs):
        calls.append(1)
        if len(calls) > 2:
            raise cl.LogicError("clEnqueueNDRangeKernel failed: <unknown error -9999>")
        return real(queue, *args, **kwargs)

    monkeypatch.setattr(many.cl, "enqueue_nd_range_kernel", faulty)
    with rt:
        if on_device_error == "raise":
            with pytest.raises(hpu.DeviceFailure, match="-9999"):
                tabu_search_many(problem, range(3), strategy="gpu", block_iterations=16, runtime=rt,
                                 on_device_error="raise", **kw)
            return
        res = tabu_search_many(problem, range(3), strategy="gpu", block_iterations=16, runtime=rt, **kw)
    assert len(calls) == 3
    for seed, r in enumerate(res):
        same(r, alone(problem, seed, **kw))
        assert "-9999" in r.fallback


GEN = np.random.default_rng(0)


@pytest.mark.parametrize("kw, error, message", [
    (dict(seeds=[]), ValueError, "at least one seed"),
    (dict(seeds=None), TypeError, "seeds must be a sequence of seeds"),  # was list(None)'s message
    (dict(seeds="ab"), TypeError, "seeds must be a sequence of seeds"),  # not its characters as seeds
    (dict(seeds=3), TypeError, "seeds must be a sequence of seeds"),
    (dict(seeds=[GEN, GEN]), ValueError, "the same numpy Generator more than once"),
    (dict(initials=[None]), ValueError, "initials has 1 entries for 2 seeds"),
    (dict(strategy="both"), ValueError, "strategy must be one of"),
    (dict(device_searches=3), ValueError, "device_searches"),
    (dict(block_iterations=51), ValueError, "block_iterations"),
    (dict(tie_break="first"), ValueError, "tie_break"),
    (dict(tenure=-1), ValueError, "tenure"),
    (dict(on_device_error="ignore"), ValueError, "on_device_error"),
])
def test_bad_arguments(kw, error, message):
    args = dict(seeds=[0, 1], iterations=50, tenure=3, strategy="cpu") | kw
    with pytest.raises(error, match=message):
        tabu_search_many(PROBLEMS["qap"](), args.pop("seeds"), **args)


def test_a_cpu_only_runtime():
    problem = PROBLEMS["qap"]()
    with hpu.Runtime("none") as cpu:
        res = tabu_search_many(problem, range(3), iterations=40, tenure=5, runtime=cpu)
        assert {r.split.strategy for r in res} == {"cpu"}
        for seed, r in enumerate(res):  # each search as the brute-force reference takes it
            moves, history, best = reference_search(problem, iterations=40, tenure=5, seed=seed)
            np.testing.assert_array_equal(r.moves, moves)
            np.testing.assert_array_equal(r.history, history)
            assert r.best_value == best == problem.objective(r.best_solution)
        with pytest.raises(hpu.NoDeviceError):
            tabu_search_many(problem, range(3), iterations=40, tenure=5, runtime=cpu, strategy="gpu")
