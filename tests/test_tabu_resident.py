"""Tabu iterations resident on the device (block_iterations): the host loop's trajectory, stop rules, errors."""

from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

from hpu.tabu import PFSP, PPP, QAP, HWSWPartitioning, tabu_search
import hpu
import hpu.tabu.engine as engine
from hpu.tabu.engine import GROUP_MAX_WORK_GROUP_SIZE, grid_shape, group_work_group_size, warp_shuffle

DATA = Path(__file__).parents[1] / "experiments/data/qaplib"
GPU = dict(strategy="gpu", transfer_level=2)


PROBLEMS = {
    "qap": lambda: QAP.from_qaplib(DATA / "tai12a.dat"),
    "qap-move-attribute": lambda: QAP.from_qaplib(DATA / "tai12a.dat", tabu_attribute="move"),
    "qap-wide-group": lambda: QAP.from_qaplib(DATA / "tai40a.dat"),  # 780 moves: level 0 in a larger work-group
    "qap-asymmetric": lambda: _asymmetric_qap(14),  # the general delta formula of the move values
    "qap-wide-values": lambda: _asymmetric_qap(14, 2**14),  # move values past int: level 0 keeps them in global memory
    "hwsw": lambda: HWSWPartitioning.random(30, edges=60, ccr=1.0, constraint="low", seed=4),
    "pfsp-insertion": lambda: PFSP.taillard("ta001"),
    "pfsp-swap": lambda: PFSP.taillard("ta001", neighbourhood="swap"),
    "ppp-1": lambda: PPP.generate(15, 13, 7, hamming=1),
    "ppp-2": lambda: PPP.generate(15, 13, 7, hamming=2),
    "ppp-3": lambda: PPP.generate(15, 13, 7, hamming=3),
}


def _asymmetric_qap(n: int, high: int = 9) -> QAP:
    rng = np.random.default_rng(5)
    return QAP(rng.integers(-6, high, (n, n)), rng.integers(0, high, (n, n)))


def same(a, b) -> None:
    np.testing.assert_array_equal(a.moves, b.moves)
    np.testing.assert_array_equal(a.history, b.history)
    assert (a.best_value, a.iterations, a.stop, a.restarts) == (b.best_value, b.iterations, b.stop, b.restarts)
    np.testing.assert_array_equal(a.best_solution, b.best_solution)


@pytest.mark.parametrize("level", [2, 0], ids=["two-kernels", "one-work-group"])
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_resident_blocks_take_the_host_loops_trajectory(rt, name, level):
    """Transfer level 0: one work-group, a block is one launch looping over its iterations."""
    problem = PROBLEMS[name]()
    kw = dict(iterations=500, tenure=7, seed=3, runtime=rt, strategy="gpu", transfer_level=level)
    host = tabu_search(problem, block_iterations=1, **kw)
    assert host.block_iterations == 1
    for k in (7, 64):
        res = tabu_search(problem, block_iterations=k, **kw)
        assert res.block_iterations == k and res.fallback == ""
        same(res, host)
    if name == "hwsw":
        assert host.restarts > 0  # a block halted on "no feasible move" and the host restarted it


@pytest.mark.parametrize("level", [2, 0], ids=["two-kernels", "one-work-group"])
def test_resident_kernels_are_made_in_the_set_up(rt, level, monkeypatch):
    """A search's resident kernels are built (and the one-work-group kernel launched once, for a device that compiles
    at a first launch) before its iterations start: set-up time, not the first block's (``TabuResult.setup_time``);
    the trajectory is the host loop's."""
    import hpu.tabu.search as search

    order = []
    make, run = engine.Evaluator._resident_kernels, search._run
    monkeypatch.setattr(engine.Evaluator, "_resident_kernels",
                        lambda self, capacity: (order.append("kernels"), make(self, capacity))[1])
    monkeypatch.setattr(search, "_run", lambda *a, **k: (order.append("iterations"), run(*a, **k))[1])
    problem = PROBLEMS["qap"]()
    kw = dict(iterations=100, tenure=7, seed=2, runtime=rt, strategy="gpu", transfer_level=level)
    res = tabu_search(problem, block_iterations=16, **kw)
    assert order[:2] == ["kernels", "iterations"] and res.fallback == ""
    same(res, tabu_search(problem, block_iterations=1, **kw))


@pytest.mark.parametrize("level", [2, 0], ids=["two-kernels", "one-work-group"])
@pytest.mark.parametrize("rule", [dict(target=241696 + 2000), dict(max_no_improve=40)])
def test_stop_rules_hit_the_exact_iteration_inside_a_block(rt, rule, level):
    problem = PROBLEMS["qap"]()
    kw = dict(iterations=2000, tenure=7, seed=1, runtime=rt, strategy="gpu", transfer_level=level, **rule)
    host = tabu_search(problem, block_iterations=1, **kw)
    res = tabu_search(problem, block_iterations=32, **kw)
    assert host.stop in ("target", "no_improvement") and host.iterations < 2000
    assert host.iterations % 32  # the stop falls inside a block, not at its end
    same(res, host)


def test_time_limit_is_checked_between_blocks(rt):
    problem = PROBLEMS["qap"]()
    res = tabu_search(problem, iterations=100_000, tenure=7, seed=1, runtime=rt, block_iterations=16,
                      time_limit=0.2, **GPU)
    assert res.stop == "time_limit" and res.iterations % 16 == 0 and 0 < res.iterations < 100_000
    host = tabu_search(problem, iterations=res.iterations, tenure=7, seed=1, runtime=rt, block_iterations=1, **GPU)
    np.testing.assert_array_equal(res.moves, host.moves)


def test_a_cpu_share_runs_the_host_loop(rt):
    problem = PROBLEMS["qap"]()
    kw = dict(iterations=50, tenure=7, seed=2, runtime=rt)
    hybrid = tabu_search(problem, strategy="hybrid", alpha=0.5, transfer_level=1, cpu_chunks=1, block_iterations=10,
                         **kw)
    assert hybrid.block_iterations == 1
    same(hybrid, tabu_search(problem, block_iterations=10, **GPU, **kw))
    assert tabu_search(problem, strategy="cpu", **kw).block_iterations == 1


@pytest.mark.parametrize("k, message", [(0, r"block_iterations must be an integer >= 1"),
                                        (2.5, "block_iterations must be an integer"),
                                        (51, r"block_iterations \(51\) exceeds the iteration budget \(iterations=50\)")])
def test_bad_block_iterations(k, message):
    with pytest.raises(ValueError, match=message):
        tabu_search(PROBLEMS["qap"](), iterations=50, tenure=3, strategy="cpu", block_iterations=k)


class _Device:
    def __init__(self, most: int):
        self.max_work_group_size = most


@pytest.mark.parametrize("most, moves, fused, size", [
    (4096, 66, 128, 128),  # never below the fused kernel's
    (4096, 780, 128, 256),  # a work-item per 4 moves, rounded up to a power of two
    (4096, 4950, 128, GROUP_MAX_WORK_GROUP_SIZE),  # at most the cap
    (768, 4950, 128, 512),  # the device's maximum, as a power of two
    (64, 4950, 64, 64),
])
def test_level_0_work_group_size(most, moves, fused, size):
    assert group_work_group_size(_Device(most), moves, fused) == size


class _GPU:
    """What grid_shape and warp_shuffle read of a device."""

    def __init__(self, nvidia: bool = True, units: int = 132, most: int = 1024, warp: int = 32):
        self.type, self.max_compute_units, self.max_work_group_size = cl.device_type.GPU, units, most
        self.extensions = "cl_khr_fp64 cl_nv_device_attribute_query" if nvidia else "cl_khr_fp64"
        self.warp_size_nv = warp


@pytest.mark.parametrize("device, moves, shape", [
    (_GPU(), 4950, (32, 256)),  # tai100a: 4950 / 256 = 19.3 work-items of 256 a move, rounded up to a power of two
    (_GPU(), 4097, (32, 256)),  # just past one work-group's 4 moves a work-item at 1024
    (_GPU(), 4096, (1, 0)),  # one work-group takes it
    (_GPU(), 1770, (1, 0)),  # tai60a
    (_GPU(), 100_000, (32, 256)),  # at most GRID_MAX_GROUPS
    (_GPU(units=12), 4950, (12, 256)),  # at most the compute units: all resident at once
    (_GPU(most=512), 2500, (16, 256)),  # past 4 moves a work-item of the device's largest work-group
    (_GPU(most=128), 4950, (1, 0)),  # work-groups smaller than a grid's
    (_GPU(nvidia=False), 4950, (1, 0)),  # the fences are PTX
    (None, 4950, (1, 0)),
])
def test_grid_shape(device, moves, shape):
    assert grid_shape(device, moves) == shape


def test_warp_shuffle_only_on_nvidia_gpus_of_32_lanes(rt):
    assert warp_shuffle(_GPU(), 1024) and warp_shuffle(_GPU(), 32)
    assert not warp_shuffle(_GPU(), 16) and not warp_shuffle(_GPU(nvidia=False), 1024)
    assert not warp_shuffle(_GPU(warp=64), 1024) and not warp_shuffle(None, 1024)
    if not rt.device.type & cl.device_type.GPU:
        assert not warp_shuffle(rt.device, 1024)


def _force_grid(monkeypatch, groups: int, launch_at_most: int | None = None) -> list[tuple[int, int]]:
    """grid_shape forced to ``groups`` work-groups of 64 work-items; each launch of tabu_run_group recorded as
    (work-groups, work-items), at most ``launch_at_most`` work-groups of it launched (None: all)."""
    monkeypatch.setattr(engine, "grid_shape", lambda device, moves: (groups, 64))
    real, launches = cl.enqueue_nd_range_kernel, []

    def spy(queue, kernel, global_size, local_size=None, *args, **kwargs):
        if kernel.function_name == "tabu_run_group":
            launches.append((global_size[0] // local_size[0], local_size[0]))
            if launch_at_most is not None:
                global_size = (min(global_size[0], launch_at_most * local_size[0]),)
        return real(queue, kernel, global_size, local_size, *args, **kwargs)

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", spy)
    return launches


@pytest.mark.parametrize("name", ["qap", "qap-move-attribute", "qap-asymmetric", "qap-wide-group"])
def test_a_grid_of_work_groups_takes_the_host_loops_trajectory(rt, name, monkeypatch):
    """Level 0 in a grid of two work-groups (each its own moves, one exchange an iteration: tabu_grid.cl), forced
    on any device of two or more compute units, where both are resident at once."""
    if rt.device.max_compute_units < 2:
        pytest.skip("a grid of two work-groups needs two compute units")
    problem = PROBLEMS[name]()
    kw = dict(iterations=500, tenure=7, seed=3, runtime=rt, strategy="gpu", transfer_level=0)
    host = tabu_search(problem, block_iterations=1, **kw)
    launches = _force_grid(monkeypatch, 2)
    for k in (7, 64):
        res = tabu_search(problem, block_iterations=k, **kw)
        assert res.fallback == "" and res.split.transfer_level == 0
        same(res, host)
    assert set(launches) == {(2, 64)}  # every block in the grid


@pytest.mark.parametrize("name", ["qap-wide-values", "pfsp-insertion", "ppp-2"])
def test_a_problem_that_does_not_run_in_a_grid_keeps_one_work_group(rt, name, monkeypatch):
    """A grid asked for (grid_shape forced) where the problem's group build has none (move values past int, or
    another problem's file): every block in one work-group, on the host loop's trajectory."""
    problem = PROBLEMS[name]()
    kw = dict(iterations=200, tenure=7, seed=3, runtime=rt, strategy="gpu", transfer_level=0)
    host = tabu_search(problem, block_iterations=1, **kw)
    launches = _force_grid(monkeypatch, 2)
    res = tabu_search(problem, block_iterations=64, **kw)
    assert res.fallback == "" and res.split.transfer_level == 0
    same(res, host)
    assert {groups for groups, _ in launches} == {1}


def test_program_source_refuses_a_group_build_it_cannot_make(rt):
    state = PROBLEMS["qap"]().state(np.arange(12))
    with pytest.raises(ValueError, match="needs the device"):
        engine.program_source(state, 64, None, group=True)
    with pytest.raises(ValueError, match="is a group build"):
        engine.program_source(state, 64, rt.device, grid=2)
    with pytest.raises(ValueError, match="does not run in a grid"):
        engine.program_source(PROBLEMS["pfsp-insertion"]().state(np.arange(20)), 64, rt.device, group=True, grid=2)
    assert "#define GRID_GROUPS 2" in engine.program_source(state, 64, rt.device, group=True, grid=2)


def test_a_grid_whose_work_groups_do_not_all_run_is_a_device_failure(fresh, monkeypatch):
    """A grid of three work-groups launched as two (as if the third never ran at once with them): the two give up
    waiting (GRID_PATIENCE), the host reads the grid's flag and the CPU goes on from the block's start (or
    DeviceFailure with "raise"); the runtime's later searches take one work-group."""
    problem, rt = PROBLEMS["qap"](), fresh
    kw = dict(iterations=100, tenure=7, seed=3, runtime=rt, strategy="gpu", transfer_level=0)
    host = tabu_search(problem, block_iterations=1, **kw)
    launches = _force_grid(monkeypatch, 3, launch_at_most=2)
    res = tabu_search(problem, block_iterations=50, **kw)
    assert "did not all run at once" in res.fallback and (3, 64) in launches
    same(res, host)
    launches.clear()
    res = tabu_search(problem, block_iterations=50, **kw)  # the runtime: one work-group from now on
    assert res.fallback == "" and launches and all(groups == 1 for groups, _ in launches)
    same(res, host)


def test_a_grid_that_fails_raises_device_failure_when_asked(fresh, monkeypatch):
    problem = PROBLEMS["qap"]()
    launches = _force_grid(monkeypatch, 3, launch_at_most=2)
    with pytest.raises(hpu.DeviceFailure, match="did not all run at once"):
        tabu_search(problem, iterations=100, tenure=7, seed=3, runtime=fresh, strategy="gpu", transfer_level=0,
                    block_iterations=50, on_device_error="raise")
    assert (3, 64) in launches


def test_the_wide_group_instance_takes_a_larger_work_group():
    assert group_work_group_size(_Device(4096), PROBLEMS["qap-wide-group"]().num_moves, 128) > 128


def test_a_work_group_the_device_refuses_falls_back_to_the_fused_kernels(fresh, monkeypatch):
    """The level-0 work-group is tried by a launch (once per lease); one the device refuses is not used, and the
    searches are right."""
    problem, rt = PROBLEMS["qap-wide-group"](), fresh
    kw = dict(iterations=200, tenure=7, seed=3, runtime=rt, strategy="gpu", transfer_level=0)
    host = tabu_search(problem, block_iterations=1, **kw)
    real, sizes = cl.enqueue_nd_range_kernel, []

    def refuse_wide_groups(queue, kernel, global_size, local_size=None, *args, **kwargs):
        if kernel.function_name == "tabu_run_group":
            sizes.append(local_size[0])
            if local_size[0] > 128:
                raise cl.LogicError("clEnqueueNDRangeKernel: INVALID_WORK_GROUP_SIZE (refused by the test)")
        return real(queue, kernel, global_size, local_size, *args, **kwargs)

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", refuse_wide_groups)
    res = tabu_search(problem, block_iterations=64, **kw)
    assert sizes[0] == group_work_group_size(rt.device, problem.num_moves, 128) > 128  # tried first, refused
    assert set(sizes[1:]) == {128} and len(sizes) > 2  # then every block in the fused kernel's 128
    assert res.fallback == "" and res.split.transfer_level == 0
    same(res, host)
    sizes.clear()
    same(tabu_search(problem, block_iterations=64, **kw), host)  # the same lease: no second trial
    assert set(sizes) == {128} and len(sizes) == 4  # 200 iterations in blocks of 64

