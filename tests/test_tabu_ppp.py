"""Permuted perceptron problem: k-subset unranking, generator, Hamming-1/2/3 deltas on CPU and device, search."""

import itertools
import math

import numpy as np
import pyopencl as cl
import pytest
from conftest import reference_search, walk_and_check

import hpu
from hpu.core.kernels import kernel_source
from hpu.tabu import evaluate_neighbourhood, pair_from_index, tabu_search
from hpu.tabu.hamming import num_subsets, subset_block, subset_from_index, subset_index
from hpu.tabu.ppp import PAPER_SIZES, PPP


@pytest.fixture(scope="module")
def rt():
    with hpu.Runtime() as r:
        if not r.has_device:
            pytest.skip("no OpenCL device")
        yield r


# -- references -------------------------------------------------------------------------


def reference_objective(A, S, v):
    """Knudsen-Meier fitness from its definition: 30 sum(|Y| - Y) + sum_{x=1..n} |#{Y = x} - #{S = x}|."""
    y = [sum(int(a) * int(b) for a, b in zip(row, v)) for row in A]
    n = len(v)
    hist = sum(abs(y.count(x) - list(S).count(x)) for x in range(1, n + 1))
    return 30 * sum(abs(t) - t for t in y) + hist


def lex_rank(n, subset):
    """Rank of an increasing subset among all subsets of its size in lexicographic order, by counting."""
    k, rank, lo = len(subset), 0, 0
    for t, c in enumerate(subset):
        rank += sum(math.comb(n - 1 - a, k - 1 - t) for a in range(lo, c))  # subsets with a smaller t-th element
        lo = c + 1
    return rank


def brute_force_deltas(pb, v):
    base = pb.objective(v)
    return np.array([pb.objective(pb.apply_move(v, i)) - base for i in range(pb.num_moves)])


def random_instance(rng, m, n, k):
    """A PPP(A, S) with any valid multiset S (usually no solution): exercises every bin, zero included for even n."""
    a = rng.choice([-1, 1], size=(m, n))
    s = rng.choice(np.arange(n % 2, n + 1, 2), size=m)
    return PPP(a, s, hamming=k)


# -- unranking ----------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3])
def test_unranking_is_the_lexicographic_bijection(k):
    for n in range(k, 26):
        combos = np.array(list(itertools.combinations(range(n), k)))
        idx = np.arange(len(combos))
        assert num_subsets(n, k) == len(combos)
        np.testing.assert_array_equal(np.stack(subset_from_index(n, k, idx), axis=1), combos)
        np.testing.assert_array_equal(subset_index(n, *combos.T), idx)
        assert [subset_from_index(n, k, int(i)) for i in idx] == [tuple(map(int, c)) for c in combos]
        assert [subset_index(n, *map(int, c)) for c in combos] == list(idx)
        for lo, hi in [(0, len(combos)), (len(combos) - 1, len(combos)), (len(combos) // 3, len(combos) // 2)]:
            np.testing.assert_array_equal(np.stack(subset_block(n, k, lo, hi), axis=1), combos[lo:hi])


def test_pairs_are_numbered_as_in_the_papers_proposition_2():
    for n in (2, 7, 40):
        idx = np.arange(num_subsets(n, 2))
        for mine, paper in zip(subset_from_index(n, 2, idx), pair_from_index(n, idx)):
            np.testing.assert_array_equal(mine, paper)


def _spot_indices(n, k):
    """First, last and random indices, and those on both sides of every change of c_1 (and of c_2 in row 0)."""
    total = math.comb(n, k)
    rng = np.random.default_rng(n + k)
    firsts = [lex_rank(n, (i,) + tuple(range(i + 1, i + k))) for i in sorted({0, 1, 2, n // 2, n - k - 1, n - k})]
    if k == 3:
        firsts += [lex_rank(n, (0, j, j + 1)) for j in (1, 2, n // 3, n - 3, n - 2)]
    spots = {0, 1, total // 2, total - 2, total - 1, *rng.integers(0, total, 40).tolist()}
    spots |= {f + d for f in firsts for d in (-1, 0, 1) if 0 <= f + d < total}
    return sorted(spots)


@pytest.mark.parametrize("n, k", [(10_000, 3), (10_000, 2), (1317, 3), (18_000, 3)])
def test_unranking_is_exact_for_large_n(n, k):
    spots = _spot_indices(n, k)
    vector = np.stack(subset_from_index(n, k, np.array(spots)), axis=1)
    for idx, vec in zip(spots, vector):
        subset = subset_from_index(n, k, idx)
        assert tuple(vec) == subset
        assert all(0 <= a < b < n for a, b in zip(subset, subset[1:])) and 0 <= subset[0] and subset[-1] < n
        assert lex_rank(n, subset) == idx
        assert subset_index(n, *subset) == idx
    assert subset_from_index(n, k, math.comb(n, k) - 1) == tuple(range(n - k, n))


@pytest.mark.parametrize("n, k", [(3_000_000, 3), (3_500_000, 3), (3_500_000_000, 2)])
def test_vector_ranking_is_exact_wherever_the_indices_fit_int64(n, k):
    # C(n, k) < 2**63, but a (a - 1) (a - 2) (k = 3) or a (a - 1) (k = 2) does not fit int64: the vector paths
    # must agree with the scalar ones (Python integers, exact) and the bijection must hold.
    total = math.comb(n, k)
    assert total < 2**63
    spots = [0, 1, 2, total // 3, total // 2, total - 3, total - 2, total - 1]
    subsets = [subset_from_index(n, k, i) for i in spots]
    assert [subset_index(n, *s) for s in subsets] == spots
    np.testing.assert_array_equal(subset_index(n, *(np.array(c) for c in zip(*subsets))), spots)
    np.testing.assert_array_equal(np.stack(subset_from_index(n, k, np.array(spots)), axis=1), subsets)


_CHECK_KERNEL = """
__kernel void unrank(const ulong n, __global const ulong *idx, __global uint *out)
{
    const size_t g = get_global_id(0);
    uint c[HAMMING_K];
    subset_from_index(n, idx[g], c);
    for (int k = 0; k < HAMMING_K; k++)
        out[g * HAMMING_K + k] = c[k];
}
"""


def _device_unrank(rt, n, k, idx):
    head = f"#define ROWS 1\n#define HAMMING_K {k}\n#define FIRST_POS 1\n#define NBINS 2\n#define PENALTY_WEIGHT 30\n"
    prg = rt.build(head + kernel_source("tabu_pairs") + kernel_source("tabu_ppp") + _CHECK_KERNEL)
    idx = np.ascontiguousarray(idx, dtype=np.uint64)
    out = np.empty(idx.size * k, dtype=np.uint32)
    mf = cl.mem_flags
    idx_d = cl.Buffer(rt.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=idx)
    out_d = cl.Buffer(rt.context, mf.WRITE_ONLY, size=out.nbytes)
    cl.Kernel(prg, "unrank")(rt.queue, (idx.size,), None, np.uint64(n), idx_d, out_d)
    cl.enqueue_copy(rt.queue, out, out_d)
    return out.reshape(-1, k)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_device_unranking_equals_the_host(rt, k):
    for n in (k, k + 1, 9, 30):
        combos = np.array(list(itertools.combinations(range(n), k)))
        np.testing.assert_array_equal(_device_unrank(rt, n, k, np.arange(len(combos))), combos)
    for n in (1317, 10_000):
        spots = _spot_indices(n, k) if k > 1 else [0, 1, n // 2, n - 1]
        np.testing.assert_array_equal(_device_unrank(rt, n, k, spots), np.stack(subset_from_index(n, k, spots), 1))


# -- instances ------------------------------------------------------------------------------


def test_generated_instance_has_its_planted_solution():
    pb = PPP.generate(37, 41, 5, hamming=2)
    v = pb.planted
    assert pb.A.dtype == np.int8 and pb.A.shape == (37, 41) and set(np.unique(pb.A)) == {-1, 1}
    y = pb.A.astype(int) @ v
    assert (y >= 0).all()
    np.testing.assert_array_equal(np.sort(y), pb.S)
    assert pb.objective(v) == 0 == reference_objective(pb.A, pb.S, v)
    assert pb.histogram.sum() == 37 and pb.histogram[1::2].sum() == 37  # n odd: every value odd, none zero
    again = PPP.generate(37, 41, 5, hamming=2)
    np.testing.assert_array_equal(again.A, pb.A)
    np.testing.assert_array_equal(again.S, pb.S)
    np.testing.assert_array_equal(again.planted, v)
    assert not np.array_equal(PPP.generate(37, 41, 6).A, pb.A)
    assert (pb.kind, pb.cache_key, pb.num_moves, pb.name) == ("ppp-h2", "m37-n41", 41 * 40 // 2, "ppp37-41")
    assert pb.move(0) == (0, 1) and pb.move(pb.num_moves - 1) == (39, 40)
    assert pb.move_index(3, 7) == lex_rank(41, (3, 7)) and pb.move(pb.move_index(3, 7)) == (3, 7)


def test_generator_with_even_n_keeps_zero_rows():
    pb = PPP.generate(60, 8, 1)
    y = pb.A.astype(int) @ pb.planted
    assert (y == 0).any() and (y >= 0).all()
    assert pb.objective(pb.planted) == 0


def test_the_papers_sizes_construct():
    for m, n in PAPER_SIZES:
        pb = PPP.generate(m, n, 2013, hamming=1)
        assert (pb.m, pb.n, pb.num_moves) == (m, n, n)
        assert pb.objective(pb.planted) == 0
        assert pb.solution_parity == np.count_nonzero(pb.planted == -1) % 2
    assert PPP.generate(1301, 1317, 0, hamming=3).num_moves == math.comb(1317, 3)


def test_objective_against_the_definition_and_the_start_parity():
    rng = np.random.default_rng(3)
    for m, n in [(5, 7), (6, 6), (11, 4), (1, 1)]:
        pb = random_instance(rng, m, n, 1)
        for _ in range(5):
            v = rng.choice([-1, 1], size=n)
            assert pb.objective(v) == reference_objective(pb.A, pb.S, v)
    pb = PPP.generate(21, 30, 4)
    for seed in range(20):
        v = pb.random_solution(np.random.default_rng(seed))
        assert np.count_nonzero(v == -1) % 2 == pb.solution_parity
    assert PPP.generate(20, 30, 4).solution_parity is None  # even m: not known, starts uniform


def test_inputs_are_never_mutated():
    pb = PPP.generate(9, 7, 2, hamming=3)
    v = pb.random_solution(np.random.default_rng(0))
    keep = v.copy()
    w = pb.apply_move(v, 5)
    np.testing.assert_array_equal(v, keep)
    assert np.count_nonzero(w != v) == 3
    with pytest.raises(ValueError):
        pb.planted[0] = 1


# -- deltas -------------------------------------------------------------------------------


SMALL = [(5, 7), (9, 8), (13, 11), (4, 4), (1, 3), (16, 5)]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_cpu_and_device_deltas_equal_brute_force(rt, k):
    rng = np.random.default_rng(10 + k)
    for m, n in SMALL:
        for pb in (PPP.generate(m, n, int(rng.integers(1 << 30)), hamming=k), random_instance(rng, m, n, k)):
            starts = [pb.random_solution(rng) for _ in range(2)] + [pb.planted if pb.planted is not None else -pb.A[0]]
            for v in starts:
                ref = brute_force_deltas(pb, v)
                delta, feasible = evaluate_neighbourhood(pb, v)
                np.testing.assert_array_equal(delta, ref)
                delta, feasible = evaluate_neighbourhood(pb, v, unit="device", runtime=rt)
                np.testing.assert_array_equal(delta, ref)
                assert feasible.all()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_state_follows_a_walk(k):
    rng = np.random.default_rng(k)
    pb = random_instance(rng, 12, 10, k)
    v = pb.random_solution(rng)
    walk_and_check(pb, pb.state(v), v, rng, 40, brute_force_deltas)


SPLITS = [
    dict(strategy="cpu", cpu_chunks=1),
    dict(strategy="gpu", transfer_level=0),
    dict(strategy="gpu", transfer_level=20),  # one move per work-group
    dict(strategy="hybrid", alpha=0.4, transfer_level=1, cpu_chunks=2),
]


@pytest.mark.parametrize("k, tenure", [(1, 3), (2, 12), (3, 40)])
def test_trajectories_equal_the_reference_on_every_unit(rt, k, tenure):
    pb = PPP.generate(15, 13, 7, hamming=k)
    ref_moves, _, ref_best = reference_search(pb, iterations=50, tenure=tenure, seed=3)
    for kw in SPLITS:
        res = tabu_search(pb, iterations=50, tenure=tenure, seed=3, runtime=rt, **kw)
        np.testing.assert_array_equal(res.moves, ref_moves, err_msg=str(kw))
        assert res.best_value == ref_best == pb.objective(res.best_solution)


def test_device_follows_a_longer_search_on_a_larger_instance(rt):
    pb = PPP.generate(101, 117, 1, hamming=2)
    runs = [tabu_search(pb, iterations=60, tenure=300, seed=1, runtime=rt, **kw) for kw in SPLITS[:2] + SPLITS[3:]]
    for r in runs[1:]:
        np.testing.assert_array_equal(r.moves, runs[0].moves)
        np.testing.assert_array_equal(r.history, runs[0].history)


# -- search ---------------------------------------------------------------------------------

# The 73-73 instance of the tests; Hamming-2, tenure 700 (of 2628 moves).  Seeds 0-9 reach fitness 0 at
# iterations 1297, 1188, 869, 2649, 6171, 742, 1361, 3919, 2483, 1082: 10 of 10 within 7000 iterations,
# 8 of 10 within 3000 (the report gives other instances).  Here seeds 0-4 with 2700 iterations: 4 of 5 expected.
SEARCH = dict(hamming=2, tenure=700, iterations=2700, seeds=range(5))


@pytest.mark.slow
def test_tabu_search_solves_the_73_73_instance_from_most_random_starts():
    pb = PPP.generate(73, 73, 2013, hamming=SEARCH["hamming"])
    solved = 0
    with hpu.Runtime("none") as cpu:
        for seed in SEARCH["seeds"]:
            res = tabu_search(pb, iterations=SEARCH["iterations"], tenure=SEARCH["tenure"], seed=seed,
                              strategy="cpu", cpu_chunks=1, runtime=cpu, target=0)
            assert res.best_value == pb.objective(res.best_solution)
            assert (res.stop == "target") == (res.best_value == 0)
            if res.best_value == 0:
                solved += 1
                y = pb.A.astype(int) @ res.best_solution
                np.testing.assert_array_equal(np.sort(y), pb.S)
    assert solved > len(SEARCH["seeds"]) // 2


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "A, S, hamming, message",
    [
        ([[1, 0], [1, -1]], [0, 2], 1, r"every entry \+1 or -1"),
        ([[1, 2], [1, -1]], [0, 2], 1, r"every entry \+1 or -1"),
        (np.ones((2, 2), dtype=bool), [0, 2], 1, r"every entry \+1 or -1"),
        ([1, -1, 1], [1], 1, "2-D matrix"),
        (np.ones((0, 3)), [], 1, "non-empty"),
        ([["a", "b"]], [0], 1, r"every entry \+1 or -1"),
        ([[1, -1], [1, 1]], [0], 1, r"m = 2 values"),
        ([[1, -1], [1, 1]], [0, 2, 2], 1, r"m = 2 values"),
        ([[1, -1], [1, 1]], [[0, 2]], 1, r"m = 2 values"),
        ([[1, -1], [1, 1]], [0, -2], 1, r"values in \[0, n = 2\]"),
        ([[1, -1], [1, 1]], [0, 4], 1, r"values in \[0, n = 2\]"),
        ([[1, -1], [1, 1]], [0, 1], 1, "parity of n = 2"),
        ([[1, -1], [1, 1]], [0, 1.5], 1, "integers"),
        ([[1, -1], [1, 1]], [0, 2], 0, "hamming must be 1, 2 or 3"),
        ([[1, -1], [1, 1]], [0, 2], 4, "hamming must be 1, 2 or 3"),
        ([[1, -1], [1, 1]], [0, 2], 1.0, "hamming must be 1, 2 or 3"),
        ([[1, -1], [1, 1]], [0, 2], True, "hamming must be 1, 2 or 3"),
        ([[1, -1], [1, 1]], [0, 2], 3, r"n >= 3 columns"),
    ],
)
def test_malformed_instances(A, S, hamming, message):
    with pytest.raises(ValueError, match=message):
        PPP(A, S, hamming=hamming)


def test_too_large_a_neighbourhood():
    with pytest.raises(ValueError, match=r"2\*\*40"):
        PPP(np.ones((1, 20_000), dtype=np.int8), [20_000], hamming=3)


def test_bad_arguments():
    pb = PPP.generate(5, 6, 0, hamming=2)
    for bad in ([1, -1, 1], [1, 0, 1, -1, 1, 1], [1.0, -1.0, 1.0, 1.0, 1.0, 1.0], np.ones((2, 3), int), ["1"] * 6):
        with pytest.raises(ValueError, match="PPP solution"):
            pb.objective(bad)
        with pytest.raises(ValueError, match="PPP solution"):
            tabu_search(pb, iterations=1, tenure=1, initial=bad, strategy="cpu")
    with pytest.raises(ValueError, match="out of range"):
        pb.move(pb.num_moves)
    with pytest.raises(ValueError, match="out of range"):
        pb.apply_move(pb.planted, -1)
    with pytest.raises(ValueError, match="flips 2 positions"):
        pb.move_index(1)
    with pytest.raises(ValueError, match="0 <= c_1 < ... < c_k < n"):
        pb.move_index(3, 3)
    for m, n in [(0, 5), (5, -1), (2.5, 5), (True, 5)]:
        with pytest.raises(ValueError, match="positive integer"):
            PPP.generate(m, n, 0)
    with pytest.raises(ValueError, match="hamming"):
        PPP.generate(5, 5, 0, hamming=5)
    with pytest.raises(ValueError, match="k must be 1, 2 or 3"):
        num_subsets(5, 4)
    with pytest.raises(ValueError, match="n >= 3"):
        subset_from_index(2, 3, 0)
    with pytest.raises(ValueError, match="inside"):
        subset_block(6, 3, 5, 21)
    with pytest.raises(TypeError):
        num_subsets(5.0, 2)
