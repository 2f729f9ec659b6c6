"""HW/SW partitioning (problem P): generator, costs, 2-flip deltas and feasibility against brute force."""

import math

import numpy as np
import pytest

import hpu
from hpu.tabu import HWSWPartitioning, evaluate_neighbourhood


@pytest.fixture(scope="module")
def rt():
    with hpu.Runtime() as r:
        yield r


def brute_force(pb, x):
    """Objective change and feasibility of every 2-flip, from full objectives."""
    h0 = pb.objective(x)
    neigh = [pb.apply_move(x, m) for m in range(pb.num_moves)]
    delta = np.array([pb.objective(y) - h0 for y in neigh])
    feasible = np.array([pb.load(y) <= pb.limit for y in neigh])
    return delta, feasible


def states(pb, rng, count):
    """Random partitions, and partitions near all-hardware so that both feasible and infeasible moves occur."""
    out = [pb.random_solution(rng) for _ in range(count)]
    for _ in range(count):
        x = np.zeros(pb.n, dtype=np.int64)
        x[rng.choice(pb.n, size=min(pb.n, int(rng.integers(0, 4))), replace=False)] = 1
        out.append(x)
    return out


INSTANCES = [
    dict(n=2, edges=1, ccr=1.0, constraint="high"),
    dict(n=5, edges=0, ccr=1.0, constraint="high"),
    dict(n=9, edges=20, ccr=0.1, constraint="low"),
    dict(n=12, edges=10, ccr=10.0, constraint="high"),
    dict(n=16, edges=40, ccr=1.0, constraint=400),
]


def test_generator_follows_section_4_1():
    pb = HWSWPartitioning.random(1000, edges=3000, ccr=0.1, constraint="low", seed=1)
    s = pb.software
    assert s.min() >= 1 and s.max() <= 100 and len(np.unique(s)) == 100
    assert pb.hardware.min() >= 1 and abs(pb.hardware.mean() / s.mean() - 1) < 0.05  # mean k s, k = 1
    assert pb.communication.min() >= 0 and pb.communication.max() <= round(2 * 0.1 * s.max())
    assert len(pb.edges) == 3000 and len({tuple(e) for e in pb.edges.tolist()}) == 3000
    assert 0 <= pb.limit <= s.sum() / 2
    high = HWSWPartitioning.random(1000, ccr=10, constraint="high", seed=1)
    assert high.software.sum() / 2 <= high.limit <= high.software.sum()
    assert len(high.edges) == 2000
    assert abs(high.communication.mean() - 10 * high.software.max()) < 0.1 * 10 * high.software.max()
    again = HWSWPartitioning.random(1000, edges=3000, ccr=0.1, constraint="low", seed=1)
    np.testing.assert_array_equal(again.hardware, pb.hardware)
    np.testing.assert_array_equal(again.edges, pb.edges)


def test_costs_follow_equations_1_to_4():
    pb = HWSWPartitioning([3, 5, 7], [10, 20, 30], [[0, 1], [2, 1]], [4, 6], 12)
    x = np.array([1, 0, 1])  # tasks 0 and 2 in software
    assert pb.objective(x) == 20
    assert pb.software_cost(x) == 10
    assert pb.communication_cost(x) == 10
    assert pb.load(x) == 20 and not pb.feasible(x)
    assert pb.feasible([0, 0, 0]) and pb.objective([0, 0, 0]) == 60
    np.testing.assert_array_equal(pb.apply_move(x, 0), [0, 1, 1])
    np.testing.assert_array_equal(x, [1, 0, 1])


@pytest.mark.parametrize("params", INSTANCES, ids=str)
def test_cpu_delta_and_feasibility_of_every_move_equal_brute_force(params):
    rng = np.random.default_rng(params["n"])
    pb = HWSWPartitioning.random(seed=params["n"], **params)
    for x in states(pb, rng, 4):
        delta, feasible = evaluate_neighbourhood(pb, x)
        ref_delta, ref_feasible = brute_force(pb, x)
        np.testing.assert_array_equal(delta, ref_delta)
        np.testing.assert_array_equal(feasible, ref_feasible)


@pytest.mark.parametrize("params", INSTANCES, ids=str)
def test_device_delta_and_feasibility_of_every_move_equal_brute_force(rt, params):
    rng = np.random.default_rng(params["n"] + 1)
    pb = HWSWPartitioning.random(seed=params["n"], **params)
    mixed = False
    for x in states(pb, rng, 3):
        delta, feasible = evaluate_neighbourhood(pb, x, unit="device", runtime=rt)
        ref_delta, ref_feasible = brute_force(pb, x)
        np.testing.assert_array_equal(delta, ref_delta)
        np.testing.assert_array_equal(feasible, ref_feasible)
        mixed |= 0 < ref_feasible.sum() < len(ref_feasible)
    assert mixed or pb.n <= 5


def test_state_follows_a_walk():
    rng = np.random.default_rng(2)
    pb = HWSWPartitioning.random(30, edges=80, seed=2)
    x = pb.random_solution(rng)
    st = pb.state(x)
    for _ in range(60):
        m = int(rng.integers(pb.num_moves))
        d, _ = st.deltas(0, pb.num_moves)
        st.apply(m, int(d[m]))
        x = pb.apply_move(x, m)
        assert (st.value, st.load) == (pb.objective(x), pb.load(x))
        np.testing.assert_array_equal(st.solution, x)


def test_restart_is_all_hardware_plus_two_flips():
    pb = HWSWPartitioning.random(20, seed=3)
    x = pb.restart(np.random.default_rng(0))
    assert x.sum() == 2
    # the all-hardware partition is a feasible neighbour
    _, feasible = evaluate_neighbourhood(pb, x)
    i, j = np.flatnonzero(x)
    assert feasible[pb.num_moves - (pb.n - i) * (pb.n - i - 1) // 2 + (j - i - 1)]


def test_moves_keep_the_parity_and_a_start_of_the_other_reaches_its_optimum():
    """As documented: every 2-flip keeps the parity of the number of tasks in software (and a restart makes it even),
    so a partition of the other parity is found from a start of that parity (brute force over all 2^12)."""
    pb = HWSWPartitioning.random(12, seed=1, constraint="high")
    rng = np.random.default_rng(4)
    x = pb.random_solution(rng)
    for index in rng.integers(0, pb.num_moves, 50):
        assert (pb.apply_move(x, int(index)).sum() - x.sum()) % 2 == 0
    best = {0: math.inf, 1: math.inf}  # per parity: the least hardware cost of a feasible partition
    for bits in range(1 << pb.n):
        part = np.array([(bits >> u) & 1 for u in range(pb.n)], dtype=np.int64)
        if pb.feasible(part):
            best[int(part.sum()) % 2] = min(best[int(part.sum()) % 2], pb.objective(part))
    odd = np.zeros(pb.n, dtype=np.int64)
    odd[0] = 1
    res = hpu.tabu.tabu_search(pb, iterations=200, tenure=5, seed=0, initial=odd, strategy="cpu")
    assert res.best_solution.sum() % 2 == 1 and res.best_value == best[1]


@pytest.mark.parametrize(
    "args, message",
    [
        (([5], [1], [], [], 3), "n >= 2"),
        (([1, -2], [1, 1], [], [], 3), "software costs must be non-negative"),
        (([1, 2], [1, 1.5], [], [], 3), "hardware costs must hold integers"),
        (([1, 2], [1, 1], [[0, 2]], [1], 3), r"edge endpoints must lie in \[0, 2\)"),
        (([1, 2], [1, 1], [[1, 1]], [1], 3), "two different tasks"),
        (([1, 2, 3], [1, 1, 1], [[0, 1], [1, 0]], [1, 1], 3), "duplicate edge"),
        (([1, 2], [1, 1], [[0, 1]], [1, 2], 3), r"communication costs must have shape \(1,\)"),
        (([1, 2], [1, 1], [], [], -1), "R must be an integer >= 0"),
        (([1, 2], [1, 1], [], [], 5.9), "R must be an integer >= 0"),
        (([1, 2, 3], [1, 1, 1], [[0.7, 1.2]], [1], 3), "edge endpoints must be integers"),
        (([1, 2, 3], [1, 1, 1], [[0, 1, 2], [1, 2, 0]], [1, 1, 1], 3), r"edges must have shape \(m, 2\)"),
        (([1e30, 2], [1, 1], [], [], 3), r"software costs must be non-negative integers below 2\*\*62"),
    ],
)
def test_bad_instances(args, message):
    with pytest.raises(ValueError, match=message):
        HWSWPartitioning(*args)


def test_bad_generator_arguments_and_solutions():
    with pytest.raises(ValueError, match="constraint"):
        HWSWPartitioning.random(10, constraint="medium")
    with pytest.raises(ValueError, match="edges must lie"):
        HWSWPartitioning.random(4, edges=7)
    with pytest.raises(ValueError, match="ccr"):
        HWSWPartitioning.random(4, edges=2, ccr=-1)
    pb = HWSWPartitioning.random(4, seed=0)
    with pytest.raises(ValueError, match="only 0 .hardware. and 1"):
        pb.objective([0, 1, 2, 0])
    with pytest.raises(ValueError, match="vector of 4"):
        pb.objective([0, 1])


@pytest.mark.parametrize("kw, message", [
    (dict(n=5.9), "number of tasks n must be an integer >= 2, got 5.9"),
    (dict(n="6"), "number of tasks n must be an integer >= 2"),
    (dict(n=True), "number of tasks n must be an integer >= 2"),
    (dict(n=5, edges=2.5), r"edges must lie in \[0, 10\] for n = 5 \(an integer\), got 2.5"),
    (dict(n=5, edges=True), "edges must lie"),
    (dict(n=5, constraint=7.5), r"constraint \(the limit R\) must be an integer >= 0, got 7.5"),
    (dict(n=5, constraint=True), r"constraint \(the limit R\) must be an integer"),
    (dict(n=5, k=math.inf), "k must be finite and >= 0"),
    (dict(n=5, ccr=math.inf), "ccr must be finite and >= 0"),
])
def test_generator_refuses_what_it_would_truncate(kw, message):
    """A float n, edges or R was truncated (5.9 tasks gave 5) and a bool taken as 1; an infinite ratio was blamed
    on the costs it produced."""
    with pytest.raises(ValueError, match=message):
        HWSWPartitioning.random(seed=1, **kw)
    pb = HWSWPartitioning.random(np.int64(5), edges=np.int32(3), constraint=np.int64(7), seed=1)
    assert (pb.n, len(pb.edges), pb.limit) == (5, 3, 7)
