"""PFSP: Taillard's generator, makespan, move numbering, deltas with and without prefix sharing on the CPU and the
device, NEH, search."""

import csv
from importlib import resources
from itertools import permutations

import numpy as np
import pytest
from conftest import deltas_match_brute_force, reference_search, same_trajectories

from hpu.tabu import evaluate_neighbourhood, tabu_search, tabu_search_many
from hpu.tabu.engine import ADMISSIBLE, Evaluator
from hpu.tabu.pfsp import PFSP, taillard_processing_times

NEIGHBOURHOODS = ("insertion", "swap")


# -- independent references -------------------------------------------------------------


def makespan(p, pi):
    """The completion-time recurrence cell by cell, in plain Python."""
    m = len(p)
    c = [[0] * len(pi) for _ in range(m)]
    for k, job in enumerate(pi):
        for i in range(m):
            c[i][k] = int(p[i][job]) + max(c[i][k - 1] if k else 0, c[i - 1][k] if i else 0)
    return c[-1][-1]


def naive_neh(p):
    """NEH with every insertion position evaluated from scratch (ties: first job, first position)."""
    totals = [sum(int(p[i][j]) for i in range(len(p))) for j in range(len(p[0]))]
    order = sorted(range(len(totals)), key=lambda j: (-totals[j], j))
    seq = [order[0]]
    for j in order[1:]:
        values = [makespan(p, seq[:t] + [j] + seq[t:]) for t in range(len(seq) + 1)]
        t = values.index(min(values))
        seq.insert(t, j)
    return seq


def brute_force_deltas(q, pi):
    base = makespan(q.processing_times, pi)
    return np.array([makespan(q.processing_times, q.apply_move(pi, m)) - base for m in range(q.num_moves)])


def taillard_double(seed, jobs, machines):
    """Taillard's ``unif`` (EJOR 64, 1993) as his code computes it, in double precision."""
    out = []
    for _ in range(machines * jobs):
        k = seed // 127773
        seed = 16807 * (seed % 127773) - k * 2836
        if seed < 0:
            seed += 2147483647
        out.append(1 + int(seed / 2147483647 * 99))
    return np.array(out).reshape(machines, jobs)


def random_pfsp(rng, machines, jobs, neighbourhood, high=20, **kw):
    return PFSP(rng.integers(0, high, (machines, jobs)), neighbourhood=neighbourhood, **kw)


def without_prefix_sharing(q):
    """The same instance, every move evaluated from column 0."""
    return PFSP(q.processing_times, neighbourhood=q.neighbourhood, name=q.name, prefix_sharing=False)


SMALL = [(1, 2), (1, 5), (3, 2), (2, 3), (4, 7), (5, 9), (3, 12)]


# -- Taillard's instances -----------------------------------------------------------------


def test_ta001_machine_1_is_the_check_row():
    ta = PFSP.taillard("ta001")
    assert ta.processing_times.shape == (5, 20) and ta.processing_times.dtype == np.int64
    assert ta.processing_times[0].tolist() == [54, 83, 15, 71, 77, 36, 53, 38, 27, 87,
                                               76, 91, 14, 29, 12, 77, 32, 87, 68, 94]
    assert (ta.jobs, ta.machines, ta.n, ta.name) == (20, 5, 20, "ta001")


def test_every_instance_equals_taillards_double_precision_generator():
    res = resources.files("hpu.tabu") / "data" / "taillard_pfsp_seeds.csv"
    with res.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["instance"] for r in rows] == [f"ta{k:03d}" for k in range(1, 121)]
    for r in rows:
        jobs, machines, seed = int(r["jobs"]), int(r["machines"]), int(r["time_seed"])
        p = taillard_processing_times(seed, jobs, machines)
        np.testing.assert_array_equal(p, taillard_double(seed, jobs, machines), err_msg=r["instance"])
        assert p.min() >= 1 and p.max() <= 99


@pytest.mark.parametrize("name, shape", [("ta031", (5, 50)), ("ta061", (5, 100)), ("TA111", (20, 500)),
                                         ("ta120", (20, 500))])
def test_instance_shapes(name, shape):
    assert PFSP.taillard(name).processing_times.shape == shape


@pytest.mark.parametrize("name", ["ta000", "ta121", "tai001", ""])
def test_unknown_instance(name):
    with pytest.raises(ValueError, match="PFSP: unknown Taillard instance"):
        PFSP.taillard(name)


def test_makespan_and_completion_times_follow_the_recurrence():
    rng = np.random.default_rng(0)
    for machines, jobs in SMALL:
        q = random_pfsp(rng, machines, jobs, "insertion")
        pi = q.random_solution(rng)
        c = q.completion_times(pi)
        assert c.shape == (machines, jobs)
        assert q.objective(pi) == makespan(q.processing_times, pi) == c[-1, -1]
    q = PFSP([[2, 3], [4, 1]])
    np.testing.assert_array_equal(q.completion_times([1, 0]), [[3, 5], [4, 9]])


# -- neighbourhoods ----------------------------------------------------------------------


@pytest.mark.parametrize("n", range(2, 9))
def test_move_numbering_is_a_bijection_onto_the_distinct_moves(n):
    q_swap = PFSP(np.ones((1, n), dtype=int), neighbourhood="swap")
    assert [q_swap.move(k) for k in range(q_swap.num_moves)] == [(i, j) for i in range(n) for j in range(i + 1, n)]
    q_ins = PFSP(np.ones((1, n), dtype=int))
    distinct = {(a, b) for a in range(n) for b in range(n) if b != a and b != a - 1}
    listed = [q_ins.move(k) for k in range(q_ins.num_moves)]
    assert q_ins.num_moves == (n - 1) ** 2 == len(distinct) == len(set(listed))
    assert set(listed) == distinct


@pytest.mark.parametrize("n", range(2, 8))
def test_moves_give_distinct_neighbours(n):
    pi = np.random.default_rng(n).permutation(n)
    for nb in NEIGHBOURHOODS:
        q = PFSP(np.ones((2, n), dtype=int), neighbourhood=nb)
        children = {tuple(q.apply_move(pi, k)) for k in range(q.num_moves)}
        assert len(children) == q.num_moves and tuple(pi) not in children
    # Leaving out the redundant insertions loses no neighbour: the children of every (from, to).
    every = set()
    for a, b in permutations(range(n), 2):
        rest = [j for k, j in enumerate(pi) if k != a]
        every.add(tuple(rest[:b] + [pi[a]] + rest[b:]))
    q = PFSP(np.ones((2, n), dtype=int))
    assert {tuple(q.apply_move(pi, k)) for k in range(q.num_moves)} == every


def test_move_index_errors():
    q = PFSP(np.ones((2, 4), dtype=int))
    with pytest.raises(ValueError, match=r"PFSP: move index out of range \[0, 9\)"):
        q.move(9)
    with pytest.raises(ValueError, match="out of range"):
        q.move(-1)
    with pytest.raises(TypeError, match="must be an integer"):
        q.move(1.0)


@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
def test_cpu_deltas_equal_full_recomputation(nb):
    rng = np.random.default_rng(1)
    for machines, jobs in SMALL:
        q = random_pfsp(rng, machines, jobs, nb, high=int(rng.choice([2, 20])))  # high=2: many zeros and ties
        deltas_match_brute_force(q, rng, brute_force_deltas, 3)


@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
def test_cpu_deltas_of_any_range_and_a_walk(nb):
    """Blocks that start anywhere, and the prefix rebuild after each applied move."""
    rng = np.random.default_rng(2)
    q = random_pfsp(rng, 4, 10, nb)
    pi = q.random_solution(rng)
    st = q.state(pi)
    for _ in range(25):
        ref = brute_force_deltas(q, pi)
        lo, hi = sorted(rng.integers(0, q.num_moves + 1, 2))
        np.testing.assert_array_equal(st.deltas(lo, hi)[0], ref[lo:hi])
        k = int(rng.integers(q.num_moves))
        st.apply(k, int(ref[k]))
        pi = q.apply_move(pi, k)
        np.testing.assert_array_equal(st.solution, pi)
        assert st.value == makespan(q.processing_times, pi)


DEVICE_CASES = [(1, 2), (3, 2), (2, 5), (4, 7), (5, 13)]


@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
def test_device_deltas_equal_full_recomputation(rt, nb):
    rng = np.random.default_rng(3)
    for machines, jobs in DEVICE_CASES:
        q = random_pfsp(rng, machines, jobs, nb)
        deltas_match_brute_force(q, rng, brute_force_deltas, 2, unit="device", runtime=rt)


@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
def test_device_uses_long_cells_when_completion_times_exceed_int32(rt, nb):
    rng = np.random.default_rng(4)
    q = PFSP(rng.integers(2**28, 2**29, (4, 6)), neighbourhood=nb)
    assert q.state(q.random_solution(rng)).defines()["CELL_T"] == "long"
    pi = q.random_solution(rng)
    np.testing.assert_array_equal(evaluate_neighbourhood(q, pi, unit="device", runtime=rt)[0],
                                  brute_force_deltas(q, pi))


@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
@pytest.mark.parametrize("machines, jobs, high", [(3, 9, 20), (5, 12, 3), (2, 8, 2**30)])
def test_device_trajectories_equal_the_cpu_ones(rt, nb, machines, jobs, high):
    """Every iteration's deltas come from the device's table rebuilt along anti-diagonals."""
    q = random_pfsp(np.random.default_rng(machines * jobs), machines, jobs, nb, high=high)
    start = q.random_solution(np.random.default_rng(5))
    kw = dict(iterations=80, tenure=4, initial=start, runtime=rt, seed=6)
    ref = tabu_search(q, strategy="cpu", cpu_chunks=1, **kw)
    same_trajectories(tabu_search, q, ref, (dict(strategy="gpu", transfer_level=0), dict(strategy="gpu", transfer_level=20),
                                            dict(strategy="hybrid", alpha=0.4, transfer_level=1, cpu_chunks=2)), **kw)
    pi = start
    for k, value in zip(ref.moves, ref.history):
        pi = q.apply_move(pi, int(k))
        assert makespan(q.processing_times, pi) == value


@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
def test_device_table_after_random_moves_with_fewer_work_items_than_machines(rt, nb):
    """Moves anywhere in the permutation; the rebuild's work-items each take several machines of a diagonal."""
    rng = np.random.default_rng(7)
    q = random_pfsp(rng, 5, 9, nb)
    pi = q.random_solution(rng)
    with Evaluator(q.state(pi), rt, cpu_moves=0, groups=3, work_group_size=2, on_device_error="raise") as ev:
        assert ev.state.apply_range(2) == ((2,), (2,))
        for it in range(1, 30):
            ref = brute_force_deltas(q, pi)
            best = int(np.argmin(ref))
            assert ev.evaluate(it, np.iinfo(np.int64).max) == (ADMISSIBLE, ref[best], best)
            k = int(rng.integers(q.num_moves))
            ev.apply(k, int(ref[k]), 0)
            pi = q.apply_move(pi, k)
            assert ev.state.value == makespan(q.processing_times, pi)


@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
def test_one_machine_runs_on_the_device(rt, nb):
    """One machine: every makespan is the total time; the device's kernels build (PoCL aborted on ``MACHINES`` 1)
    and every path takes the brute-force reference's trajectory."""
    q = random_pfsp(np.random.default_rng(21), 1, 6, nb, tabu_attribute="move")
    pi = q.random_solution(np.random.default_rng(22))
    np.testing.assert_array_equal(evaluate_neighbourhood(q, pi, unit="device", runtime=rt)[0], brute_force_deltas(q, pi))
    ref_moves, ref_history, ref_best = reference_search(q, iterations=12, tenure=3, seed=23)
    assert ref_best == int(q.processing_times.sum())
    for split in (dict(strategy="gpu", transfer_level=0, block_iterations=1), dict(strategy="gpu", block_iterations=4),
                  dict(strategy="hybrid", alpha=0.5, transfer_level=1, cpu_chunks=1)):
        res = tabu_search(q, iterations=12, tenure=3, seed=23, runtime=rt, on_device_error="raise", **split)
        np.testing.assert_array_equal(res.moves, ref_moves, err_msg=str(split))
        np.testing.assert_array_equal(res.history, ref_history, err_msg=str(split))
        assert res.best_value == ref_best == makespan(q.processing_times, res.best_solution)
    (many,) = tabu_search_many(q, [23], iterations=12, tenure=3, strategy="gpu", runtime=rt, on_device_error="raise")
    np.testing.assert_array_equal(many.moves, ref_moves)


# -- prefix sharing off: the whole table from column 0 (Czapinski and Barnes, seed 003's table 2) --------------


@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
def test_cpu_deltas_without_prefix_sharing_are_the_same(nb):
    rng = np.random.default_rng(8)
    for machines, jobs in SMALL:
        q = random_pfsp(rng, machines, jobs, nb, high=int(rng.choice([2, 20])))
        full = without_prefix_sharing(q)
        assert q.prefix_sharing and not full.prefix_sharing
        for _ in range(3):
            pi = q.random_solution(rng)
            ref = brute_force_deltas(q, pi)
            np.testing.assert_array_equal(evaluate_neighbourhood(full, pi)[0], ref)
            np.testing.assert_array_equal(evaluate_neighbourhood(q, pi)[0], ref)
            lo, hi = sorted(rng.integers(0, q.num_moves + 1, 2))
            np.testing.assert_array_equal(full.state(pi).deltas(lo, hi)[0], ref[lo:hi])


@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
def test_device_deltas_without_prefix_sharing_are_the_same(rt, nb):
    rng = np.random.default_rng(9)
    for machines, jobs in DEVICE_CASES:
        q = random_pfsp(rng, machines, jobs, nb)
        full = without_prefix_sharing(q)
        assert full.state(q.random_solution(rng)).defines()["PREFIX_SHARING"] == 0
        assert q.state(q.random_solution(rng)).defines()["PREFIX_SHARING"] == 1
        for _ in range(2):
            pi = q.random_solution(rng)
            ref = brute_force_deltas(q, pi)
            np.testing.assert_array_equal(evaluate_neighbourhood(full, pi, unit="device", runtime=rt)[0], ref)
            np.testing.assert_array_equal(evaluate_neighbourhood(q, pi, unit="device", runtime=rt)[0], ref)


@pytest.mark.parametrize("tie_break", ["random", "index"])
@pytest.mark.parametrize("attribute", PFSP.TABU_ATTRIBUTES)
@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
def test_trajectory_equals_the_brute_force_reference(rt, nb, attribute, tie_break):
    """Few distinct times (many equal makespans): the tabu attributes and the tie-break decide most moves."""
    q = random_pfsp(np.random.default_rng(13), 3, 8, nb, high=3, tabu_attribute=attribute)
    assert q.tabu_attribute == attribute
    ref_moves, ref_history, ref_best = reference_search(q, iterations=60, tenure=5, seed=14, tie_break=tie_break)
    for split in (dict(strategy="cpu", cpu_chunks=2), dict(strategy="gpu", transfer_level=0),
                  dict(strategy="hybrid", alpha=0.4, transfer_level=2, cpu_chunks=1)):
        res = tabu_search(q, iterations=60, tenure=5, seed=14, runtime=rt, tie_break=tie_break, **split)
        assert res.tabu_attribute == attribute
        np.testing.assert_array_equal(res.moves, ref_moves, err_msg=str(split))
        np.testing.assert_array_equal(res.history, ref_history, err_msg=str(split))
        assert res.best_value == ref_best


@pytest.mark.parametrize("nb", NEIGHBOURHOODS)
def test_tabu_search_without_prefix_sharing_takes_the_same_trajectory(rt, nb):
    q = random_pfsp(np.random.default_rng(10), 4, 10, nb)
    full = without_prefix_sharing(q)
    start = q.random_solution(np.random.default_rng(11))
    kw = dict(iterations=40, tenure=4, initial=start, runtime=rt, seed=12)
    ref = tabu_search(q, strategy="cpu", cpu_chunks=1, **kw)
    same_trajectories(tabu_search, full, ref, (dict(strategy="cpu", cpu_chunks=1), dict(strategy="gpu", transfer_level=0),
                                               dict(strategy="hybrid", alpha=0.4, transfer_level=1, cpu_chunks=2)), **kw)


def test_prefix_sharing_option():
    ta = PFSP.taillard("ta001", prefix_sharing=False, neighbourhood="swap")
    assert not ta.prefix_sharing and PFSP.taillard("ta001").prefix_sharing
    assert "no prefix sharing" in repr(ta) and "prefix" not in repr(PFSP.taillard("ta001"))
    for bad in (0, 1, "False", None):
        with pytest.raises(TypeError, match="PFSP: prefix_sharing must be a bool"):
            PFSP([[1, 2]], prefix_sharing=bad)


# -- NEH and the search --------------------------------------------------------------------


def test_neh_on_ta001_is_1286():
    ta = PFSP.taillard("ta001")
    pi = ta.neh()
    assert sorted(pi.tolist()) == list(range(20)) and pi.dtype == np.int64
    assert ta.objective(pi) == 1286  # the value reported in the literature
    assert pi.tolist() == naive_neh(ta.processing_times)


def test_neh_equals_the_naive_heuristic_on_random_instances():
    rng = np.random.default_rng(6)
    for machines, jobs in SMALL + [(6, 15)]:
        for high in (3, 50):  # high=3: ties in totals and in insertion makespans
            q = random_pfsp(rng, machines, jobs, "insertion", high=high)
            assert q.neh().tolist() == naive_neh(q.processing_times)


def test_tabu_search_reaches_the_ta001_optimum_from_neh():
    ta = PFSP.taillard("ta001")
    res = tabu_search(ta, iterations=10000, tenure=50, initial=ta.neh(), seed=0, strategy="cpu", cpu_chunks=1)
    assert res.best_value == 1278  # Taillard's optimum
    assert ta.objective(res.best_solution) == 1278


def test_short_tenure_with_the_standard_attribute_reaches_ta001_within_one_percent():
    """Issue 15's measure: 10 random starts, tenure 7, (job, position) attribute, 10,000 iterations at most.

    With the move-index attribute and lowest-index ties the same searches stall at 1297 and above
    (experiments/bench_tabu_attributes.py).
    """
    ta = PFSP.taillard("ta001")
    assert ta.tabu_attribute == "job-position"
    bound = 1278 * 101 // 100  # within 1% of Taillard's optimum
    results = [tabu_search(ta, iterations=10_000, tenure=7, seed=s, strategy="cpu", cpu_chunks=1, target=bound)
               for s in range(10)]
    assert sum(r.best_value <= bound for r in results) >= 8
    for r in results:
        assert ta.objective(r.best_solution) == r.best_value and r.tabu_attribute == "job-position"


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "times, message",
    [
        ([1, 2, 3], r"2-D array \(machines, jobs\), got shape \(3,\)"),
        (np.ones((2, 2, 2), dtype=int), "2-D array"),
        ([[1, 2], [3]], r"\(machines, jobs\) array"),
        ([[5]], "at least 1 machine and 2 jobs"),
        (np.ones((0, 4), dtype=int), "at least 1 machine and 2 jobs"),
        ([[1, -2], [3, 4]], "non-negative, found -2"),
        ([[1, 2.5], [3, 4]], "must hold integers"),
        ([[1, np.nan], [3, 4]], "must hold integers"),
        ([["a", "b"], ["c", "d"]], "must hold integers"),
        ([[True, False], [True, True]], "must hold integers"),
        ([[2**61, 2**61], [2**61, 1]], "too large"),
    ],
)
def test_bad_instances(times, message):
    with pytest.raises(ValueError, match="PFSP: .*" + message):
        PFSP(times)


def test_bad_arguments_and_solutions():
    with pytest.raises(ValueError, match=r"PFSP: neighbourhood must be one of \('insertion', 'swap'\)"):
        PFSP([[1, 2]], neighbourhood="2-opt")
    with pytest.raises(ValueError, match="PFSP: neighbourhood"):
        PFSP.taillard("ta001", neighbourhood="exchange")
    with pytest.raises(ValueError, match=r"PFSP: tabu_attribute must be one of \('job-position', 'move'\)"):
        PFSP.taillard("ta001", tabu_attribute="job")
    with pytest.raises(ValueError, match="time seed"):
        taillard_processing_times(0, 5, 5)
    with pytest.raises(ValueError, match="jobs must be an integer"):
        taillard_processing_times(1, 0, 5)
    with pytest.raises(ValueError, match="jobs must be an integer"):  # 3.5 jobs were 3
        taillard_processing_times(1, 3.5, 3)
    q = PFSP(np.ones((2, 4), dtype=int))
    for bad, message in [([0, 1, 1, 3], "not a permutation of the jobs 0..3"),
                         ([0, 1, 2], r"got shape \(3,\)"),
                         ([0.0, 1.0, 2.0, 3.0], "not a permutation"),
                         ([[0, 1, 2, 3]], "got shape")]:
        with pytest.raises(ValueError, match="PFSP: .*" + message):
            q.objective(bad)
        with pytest.raises(ValueError, match="PFSP"):
            tabu_search(q, iterations=2, tenure=1, initial=bad, strategy="cpu", cpu_chunks=1)


def test_cache_key_names_the_neighbourhood_size_and_evaluation():
    assert PFSP.taillard("ta001").cache_key == "insertion-m5-n20-i32-prefix"
    assert PFSP.taillard("ta031", neighbourhood="swap").cache_key == "swap-m5-n50-i32-prefix"
    assert PFSP.taillard("ta031", prefix_sharing=False).cache_key == "insertion-m5-n50-i32-full"
    assert PFSP([[2**31, 1]]).cache_key == "insertion-m1-n2-i64-prefix"
    assert PFSP.kind == "pfsp"
