"""Tabu iterations resident on the device (block_iterations): the host loop's trajectory, stop rules, errors."""

from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

from hpu.tabu import PFSP, PPP, QAP, HWSWPartitioning, tabu_search
from hpu.tabu.engine import GROUP_MAX_WORK_GROUP_SIZE, group_work_group_size

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

