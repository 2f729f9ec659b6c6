"""The move index <-> pair mapping (hpu.tabu.pairs, kernels_cl/tabu_pairs.cl) is an exact bijection."""

import numpy as np
import pyopencl as cl
import pytest

import hpu
from hpu.core.kernels import kernel_source
from hpu.tabu import num_pairs, pair_block, pair_from_index, pair_index

LARGE_N = [1000, 4097, 9999, 10_000]


def _row_major_pairs(n):
    return np.triu_indices(n, 1)


@pytest.mark.parametrize("n", range(2, 301))
def test_numpy_mapping_is_the_row_major_upper_triangle(n):
    i, j = _row_major_pairs(n)
    idx = np.arange(num_pairs(n))
    gi, gj = pair_from_index(n, idx)
    np.testing.assert_array_equal(gi, i)
    np.testing.assert_array_equal(gj, j)
    np.testing.assert_array_equal(pair_index(n, i, j), idx)
    assert [pair_from_index(n, int(k)) for k in idx[:: max(1, len(idx) // 50)]] == [
        (int(a), int(b)) for a, b in zip(i[:: max(1, len(idx) // 50)], j[:: max(1, len(idx) // 50)])
    ]


@pytest.mark.parametrize("n", LARGE_N)
def test_numpy_mapping_is_a_bijection_for_large_n(n):
    total = num_pairs(n)
    step = 1 << 22
    seen_rows = np.zeros(n, dtype=np.int64)
    for lo in range(0, total, step):
        idx = np.arange(lo, min(lo + step, total), dtype=np.int64)
        i, j = pair_from_index(n, idx)
        assert np.all((0 <= i) & (i < j) & (j < n))
        np.testing.assert_array_equal(pair_index(n, i, j), idx)  # injective: f(g(k)) = k
        seen_rows += np.bincount(i, minlength=n)
    # |pairs| = |indices| and g is injective, so g is a bijection; rows have n - 1 - i pairs each.
    np.testing.assert_array_equal(seen_rows, n - 1 - np.arange(n))


@pytest.mark.parametrize("n", [2, 3, 17, 1000, 10_000])
def test_pair_block_matches_the_mapping(n):
    total = num_pairs(n)
    rng = np.random.default_rng(n)
    for lo, hi in [(0, total), (0, 1), (total - 1, total), (5 % total, 5 % total)] + [
        tuple(sorted(rng.integers(0, total + 1, 2))) for _ in range(20)
    ]:
        if hi - lo > 1 << 20:
            hi = lo + (1 << 20)
        i, j = pair_block(n, lo, hi)
        ei, ej = pair_from_index(n, np.arange(lo, hi))
        np.testing.assert_array_equal(i, ei)
        np.testing.assert_array_equal(j, ej)


def test_scalar_mapping_is_exact_where_float_square_roots_are_not():
    # Near the end of a huge neighbourhood 8k + 1 is not representable in float32 (nor, for
    # n ~ 1e8, in float64); the scalar path uses math.isqrt.
    for n in (10_000, 100_003, 10**8 + 7):
        total = num_pairs(n)
        for idx in (0, 1, total // 2, total - n, total - 2, total - 1):
            i, j = pair_from_index(n, idx)
            assert 0 <= i < j < n
            # The row-major rank in exact integers (rows 0..i-1 hold n-1, n-2, ... pairs): independent of the module.
            assert i * (2 * n - i - 1) // 2 + (j - i - 1) == idx
            assert pair_index(n, i, j) == idx
        assert pair_from_index(n, total - 1) == (n - 2, n - 1) and pair_from_index(n, total - 2) == (n - 3, n - 1)


def test_bad_mapping_arguments():
    with pytest.raises(ValueError, match="n >= 2"):
        num_pairs(1)
    with pytest.raises(ValueError, match="out of range"):
        pair_from_index(5, 10)
    with pytest.raises(ValueError, match="out of range"):
        pair_from_index(5, np.array([0, -1]))
    with pytest.raises(ValueError, match="0 <= i < j < n"):
        pair_index(5, 3, 3)
    with pytest.raises(ValueError, match="inside"):
        pair_block(5, 3, 11)
    with pytest.raises(TypeError, match="n must be an integer, got 4.0"):
        num_pairs(4.0)


_CHECK_KERNEL = """
__kernel void check_pairs(const ulong n, const ulong lo, const ulong hi, __global uint *bad,
                          __global uint *rows)
{
    const ulong m = lo + get_global_id(0);
    if (m >= hi) return;
    uint i, j;
    pair_from_index(n, m, &i, &j);
    if (!(i < j && j < n) || pair_index(n, i, j) != m) atomic_inc(bad);
    else atomic_inc(rows + i);
}

__kernel void write_pairs(const ulong n, const ulong total, __global uint *pi, __global uint *pj)
{
    const ulong m = get_global_id(0);
    if (m >= total) return;
    uint i, j;
    pair_from_index(n, m, &i, &j);
    pi[m] = i;
    pj[m] = j;
}
"""


@pytest.fixture(scope="module")
def rt():
    with hpu.Runtime() as r:
        yield r


@pytest.mark.parametrize("n", list(range(2, 65)) + LARGE_N)
def test_opencl_mapping_is_a_bijection(rt, n):
    prg = rt.build(kernel_source("tabu_pairs") + _CHECK_KERNEL)
    knl = cl.Kernel(prg, "check_pairs")
    mf = cl.mem_flags
    bad = np.zeros(1, dtype=np.uint32)
    rows = np.zeros(n, dtype=np.uint32)
    bad_d = cl.Buffer(rt.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=bad)
    rows_d = cl.Buffer(rt.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=rows)
    total = num_pairs(n)
    step = 1 << 24
    for lo in range(0, total, step):
        hi = min(lo + step, total)
        size = -(-(hi - lo) // 256) * 256
        knl(rt.queue, (size,), (256,), np.uint64(n), np.uint64(lo), np.uint64(hi), bad_d, rows_d)
    cl.enqueue_copy(rt.queue, bad, bad_d)
    cl.enqueue_copy(rt.queue, rows, rows_d)
    assert bad[0] == 0
    np.testing.assert_array_equal(rows, n - 1 - np.arange(n))
    if total <= 1 << 20:  # the device's pairs are the host's (numpy's row-major upper triangle), move by move
        pi, pj = np.empty(total, np.uint32), np.empty(total, np.uint32)
        pi_d, pj_d = (cl.Buffer(rt.context, mf.WRITE_ONLY, x.nbytes) for x in (pi, pj))
        cl.Kernel(prg, "write_pairs")(rt.queue, (-(-total // 256) * 256,), (256,), np.uint64(n), np.uint64(total),
                                      pi_d, pj_d)
        cl.enqueue_copy(rt.queue, pi, pi_d)
        cl.enqueue_copy(rt.queue, pj, pj_d)
        i, j = _row_major_pairs(n)
        np.testing.assert_array_equal(pi, i)
        np.testing.assert_array_equal(pj, j)


@pytest.mark.parametrize("n", [2, 3, 17, 100])
def test_packed_pairs_hold_each_moves_pair(n):
    from hpu.tabu.pairs import packed_pairs

    table = packed_pairs(n)
    i, j = pair_from_index(n, np.arange(num_pairs(n)))
    assert table.dtype == np.uint32 and not table.flags.writeable
    np.testing.assert_array_equal(table >> 16, i)
    np.testing.assert_array_equal(table & 0xFFFF, j)
    with pytest.raises(ValueError, match="65536"):
        packed_pairs(1 << 16)


@pytest.mark.parametrize("n", [2, 3, 17, 100])
def test_all_pairs_are_each_moves_pair(n):
    from hpu.tabu.pairs import all_pairs

    i, j = all_pairs(n)
    ri, rj = pair_from_index(n, np.arange(num_pairs(n)))
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_array_equal(j, rj)
    assert not i.flags.writeable and not j.flags.writeable and all_pairs(n)[0] is i  # cached, read-only


def test_indices_that_are_not_integers_are_refused():
    """A float index was truncated (2.9 taken as move 2) and a bool taken as 0 or 1."""
    from hpu.tabu import PPP
    from hpu.tabu.hamming import subset_from_index, subset_index

    for bad in (1.7, True, np.array([0.5, 1.0]), [True, False]):
        with pytest.raises(TypeError, match="integers"):
            pair_from_index(5, bad)
        with pytest.raises(TypeError, match="integers"):
            subset_from_index(6, 2, bad)
    with pytest.raises(TypeError, match="integers"):
        pair_index(5, 0.5, 1.9)
    with pytest.raises(TypeError, match="integers"):
        subset_index(6, 0, 2.5)
    ppp = PPP(np.ones((3, 5), dtype=np.int64), np.ones(3, dtype=np.int64))
    with pytest.raises(TypeError, match="integers"):
        ppp.move(2.9)
    i, j = pair_from_index(5, np.array([0, 9], dtype=np.uint16))  # integers of any width still work
    assert i.tolist() == [0, 3] and j.tolist() == [1, 4]
    assert pair_index(5, np.int32(0), 1) == 0 and subset_from_index(6, 2, np.uint8(0)) == (0, 1)
