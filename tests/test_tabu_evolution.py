"""Hybrid EA (Luong, Melab and Talbi, CEC 2010): crossover, determinism across strategies and concurrency, quality."""

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hpu
from hpu.tabu import QAP, HWSWPartitioning
from hpu.tabu.evolution import EvolutionResult, crossover, hybrid_ea, paper_tenure

DATA = Path(__file__).parents[1] / "experiments/data/qaplib"


@pytest.fixture(scope="module")
def rt():
    with hpu.Runtime() as r:
        yield r


@pytest.fixture(scope="module")
def tai12a():
    return QAP.from_qaplib(DATA / "tai12a.dat")


@pytest.fixture(scope="module")
def tai20a():
    return QAP.from_qaplib(DATA / "tai20a.dat")


def same_run(a: EvolutionResult, b: EvolutionResult) -> bool:
    return (
        a.best_value == b.best_value
        and np.array_equal(a.best_solution, b.best_solution)
        and np.array_equal(a.history, b.history)
        and np.array_equal(a.population, b.population)
        and np.array_equal(a.values, b.values)
        and a.ls_iterations == b.ls_iterations
    )


# -- crossover -------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 40).flatmap(lambda n: st.tuples(st.permutations(range(n)), st.permutations(range(n)))),
       st.integers(0, 2**32 - 1))
def test_crossover_child_is_a_permutation_keeping_the_common_attributes(parents, seed):
    p1, p2 = (np.array(p, dtype=np.int64) for p in parents)
    child = crossover(p1, p2, np.random.default_rng(seed))
    assert sorted(child.tolist()) == list(range(p1.size))
    common = p1 == p2
    assert np.array_equal(child[common], p1[common])
    assert sorted(child[~common].tolist()) == sorted(p1[~common].tolist())
    QAP(np.ones((p1.size, p1.size), int), np.ones((p1.size, p1.size), int)).check_solution(child)


def test_crossover_fills_the_other_positions_at_random():
    p1 = np.array([0, 1, 2, 3, 4, 5])
    p2 = np.array([0, 2, 3, 1, 4, 5])  # agree on positions 0, 4, 5; values 1, 2, 3 are free
    seen = {tuple(crossover(p1, p2, np.random.default_rng(s))[1:4]) for s in range(200)}
    assert seen == set(itertools.permutations([1, 2, 3]))


def test_crossover_of_identical_parents_is_a_copy():
    p = np.array([3, 1, 0, 2])
    child = crossover(p, p, np.random.default_rng(0))
    assert np.array_equal(child, p) and child is not p


def test_crossover_rejects_parents_of_different_shapes():
    with pytest.raises(ValueError, match="parents"):
        crossover(np.arange(4), np.arange(5), np.random.default_rng(0))


# -- the algorithm ---------------------------------------------------------------------


def test_paper_tenure():
    assert paper_tenure(435) == 40  # 2 floor(sqrt(N)), tai30a's 2-swap neighbourhood
    assert paper_tenure(66) == 16
    assert paper_tenure(1) == 0  # capped below N


def test_reaches_the_best_known_value_of_tai12a(tai12a, rt):
    best_known = tai12a.read_solution(DATA / "tai12a.sln").value
    assert best_known == 224416
    res = hybrid_ea(tai12a, population=4, generations=3, ls_iterations=300, strategy="cpu", seed=0, runtime=rt)
    assert res.best_value == best_known
    assert tai12a.objective(res.best_solution) == res.best_value
    assert res.history.shape == (4,) and np.all(np.diff(res.history) <= 0)
    assert res.history[-1] == res.best_value and res.stop == "generations" and res.generations == 3
    assert res.population.shape == (4, 12) and np.all(np.diff(res.values) >= 0)
    assert [tai12a.objective(p) for p in res.population] == res.values.tolist()
    assert res.local_searches == 3 * 4 * 3  # generations x offspring (= mu) x ILS iterations
    assert res.ls_iterations == res.local_searches * 300
    assert res.concurrency == 4 and res.split.strategy == "cpu"


def test_same_seed_same_result_for_any_concurrency(tai20a, rt):
    kw = dict(population=4, generations=3, offspring=5, ls_iterations=40, seed=7, strategy="cpu", runtime=rt)
    one = hybrid_ea(tai20a, concurrency=1, **kw)
    assert one.concurrency == 1
    for c in (3, None):
        assert same_run(one, hybrid_ea(tai20a, concurrency=c, **kw))
    assert np.all(np.diff(one.history) <= 0) and one.history[0] > one.history[-1]
    other = hybrid_ea(tai20a, concurrency=1, **{**kw, "seed": 8})
    assert not np.array_equal(one.history, other.history)


def test_same_seed_same_result_on_every_unit(tai20a, rt):
    if not rt.has_device:
        pytest.skip("no OpenCL device")
    kw = dict(population=3, generations=2, offspring=4, ils_iterations=2, ls_iterations=30, seed=11, runtime=rt)
    cpu = hybrid_ea(tai20a, strategy="cpu", concurrency=1, **kw)
    gpu = hybrid_ea(tai20a, strategy="gpu", concurrency=4, **kw)
    assert gpu.split.cpu_moves == 0 and gpu.device_time > 0
    assert same_run(cpu, gpu)
    assert same_run(cpu, hybrid_ea(tai20a, strategy="hybrid", concurrency=2, **kw))
    many = hybrid_ea(tai20a, strategy="many", **kw)  # each ILS step's searches batched by tabu_search_many
    assert same_run(cpu, many) and many.concurrency == 4 and many.local_searches == cpu.local_searches == 16


def test_time_limit_ends_after_the_running_generation(tai20a, rt):
    res = hybrid_ea(tai20a, population=3, generations=50, ls_iterations=10**6, time_limit=0.05, strategy="cpu",
                    seed=1, concurrency=2, runtime=rt)
    assert res.stop == "time_limit" and res.generations == 1 and res.history.shape == (2,)
    assert res.ls_iterations < 3 * 3 * 10**6
    assert tai20a.objective(res.best_solution) == res.best_value


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(population=1), "population"),
        (dict(generations=0), "generations"),
        (dict(offspring=0), "offspring"),
        (dict(tournament=0), "tournament"),
        (dict(ils_iterations=0), "ils_iterations"),
        (dict(ls_iterations=-5), "ls_iterations"),
        (dict(ls_iterations=2.5), "ls_iterations"),
        (dict(perturbation=0), "perturbation"),
        (dict(concurrency=0), "concurrency"),
        (dict(tenure=-1), "tenure"),
        (dict(tenure=66), "tenure"),
        (dict(time_limit=0), "time_limit"),
        (dict(strategy="fpga"), "strategy"),
    ],
)
def test_bad_arguments_raise(tai12a, kwargs, match):
    with pytest.raises(ValueError, match=match):
        hybrid_ea(tai12a, **kwargs)


def test_needs_a_permutation_problem(rt):
    pb = HWSWPartitioning.random(8, seed=0)
    with pytest.raises(ValueError, match="permutation"):
        hybrid_ea(pb, generations=1, ls_iterations=5, strategy="cpu", runtime=rt)


def test_initial_population_is_used_and_kept(tai12a, rt):
    rng = np.random.default_rng(3)
    given = np.stack([rng.permutation(12) for _ in range(4)])
    before = given.copy()
    res = hybrid_ea(tai12a, population=4, generations=1, ls_iterations=20, strategy="cpu", seed=1, runtime=rt,
                    initial_population=given)
    assert res.history[0] == min(tai12a.objective(p) for p in given)  # the given individuals, not random ones
    assert np.array_equal(given, before)
    with pytest.raises(ValueError, match="initial_population"):
        hybrid_ea(tai12a, population=4, generations=1, initial_population=given[:3], runtime=rt)
    with pytest.raises(ValueError, match="permutation"):
        hybrid_ea(tai12a, population=4, generations=1, initial_population=np.zeros((4, 12), int), runtime=rt)


def test_time_limit_cutting_the_last_generation_is_reported(tai20a, rt):
    # One generation only: the time limit stops its searches (as tabu_search reports), so stop says so too.
    res = hybrid_ea(tai20a, population=3, generations=1, ls_iterations=10**6, time_limit=0.05, strategy="cpu",
                    seed=1, concurrency=1, runtime=rt)
    assert res.generations == 1 and res.local_searches < 3 * 3 and res.ls_iterations < 10**6
    assert res.stop == "time_limit"
    full = hybrid_ea(tai20a, population=3, generations=1, ls_iterations=5, time_limit=60, strategy="cpu", seed=1,
                     runtime=rt)
    assert full.stop == "generations" and full.local_searches == 3 * 3
