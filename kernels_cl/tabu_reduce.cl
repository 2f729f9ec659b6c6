/* Fused evaluation and reduction of a tabu-search neighbourhood.
 *
 * Hou, He, Zhou, Chen, "An efficient GPU-based parallel tabu search algorithm
 * for hardware/software co-design", Front. Comput. Sci. 2019 (seeds/000),
 * sections 3.3 (kernel fusion) and 3.5 (tabu evaluation as a reduction): each
 * work-group evaluates a contiguous chunk of moves and reduces it in local
 * memory, so only one (delta, key) pair per work-group leaves the device.
 *
 * Compiled after tabu_pairs.cl and a problem file (tabu_qap.cl, tabu_hwsw.cl, ...)
 * that defines
 *   PROBLEM_PARAMS  the problem's kernel parameters, each preceded by a comma;
 *   PROBLEM_ARGS    the same names, each preceded by a comma;
 * and either, for a neighbourhood of pairs (move m is the pair of tabu_pairs.cl),
 *   static inline int move_delta(ulong n, uint i, uint j, long *delta PROBLEM_PARAMS)
 *                   the objective change of move (i, j); returns 1 when the
 *                   neighbour is feasible;
 * or, for any other neighbourhood, MOVE_BY_INDEX and
 *   static inline int move_eval(ulong n, ulong m, long *delta PROBLEM_PARAMS)
 *                   the same for move index m;
 * and with WG (the work-group size, a power of two) and TABU_BY_ATTRIBUTE
 * defined.  With TABU_BY_ATTRIBUTE 0 move m is tabu while tabu_until[m] >
 * iteration; with 1 the problem file defines
 *   static inline int move_tabu(ulong n, ulong m, __global const int *tabu_until,
 *                               int iteration PROBLEM_PARAMS)
 *                   whether move m is tabu under the problem's attributes.
 *
 * Order of moves: (class, delta, tie, index) lexicographically, where class
 * is 0 = admissible (feasible and not tabu, or tabu but better than the best
 * found: aspiration), 1 = feasible but tabu, 2 = infeasible, 3 = no move, and
 * tie = tie_hash(m, iteration, tie_seed) & tie_mask (tie_mask 0: the lowest
 * index wins ties).  This combine is associative and commutative, so any
 * split of [0, N) and any reduction tree give the same winner.  A key packs
 * class << 61 | tie << 40 | index.
 */

#define CLASS_SHIFT 61
#define TIE_SHIFT 40
#define EMPTY_KEY ((long)3 << CLASS_SHIFT)

/* 21-bit tie-break of move m at `iteration` (the same as hpu.tabu.engine.tie_hash):
 * the "lowbias32" finaliser of C. Wellons, "Prospecting for hash functions" (2018). */
static inline long tie_hash(const ulong m, const int iteration, const uint seed)
{
    uint x = (uint)m ^ (uint)(m >> 32) * 0x9E3779B9u;
    x ^= (uint)iteration * 0x85EBCA6Bu ^ seed;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return (long)(x >> 11);
}

#if !TABU_BY_ATTRIBUTE
static inline int move_tabu(const ulong n, const ulong m, __global const int *tabu_until, const int iteration
                            PROBLEM_PARAMS)
{
    return tabu_until[m] > iteration;
}
#endif

static inline int precedes(const long v1, const long k1, const long v2, const long k2)
{
    const long c1 = k1 >> CLASS_SHIFT, c2 = k2 >> CLASS_SHIFT;
    return c1 < c2 || (c1 == c2 && (v1 < v2 || (v1 == v2 && k1 < k2)));
}

#ifndef MOVE_BY_INDEX
static inline int move_eval(const ulong n, const ulong m, long *delta PROBLEM_PARAMS)
{
    uint i, j;
    pair_from_index(n, m, &i, &j);
    return move_delta(n, i, j, delta PROBLEM_ARGS);
}
#endif

/* Work-group g evaluates moves [lo + g chunk, min(lo + (g + 1) chunk, hi)).
 * A tabu move (move_tabu) is still admissible when delta < aspiration
 * (= best value found - current value).
 * partial[2 g] = the winner's delta, partial[2 g + 1] = its key.
 */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void tabu_evaluate_reduce(const ulong n, const ulong lo, const ulong hi, const ulong chunk,
                          const long aspiration, const int iteration, const uint tie_seed, const uint tie_mask,
                          __global const int *tabu_until, __global long *partial
                          PROBLEM_PARAMS)
{
    __local long best_delta[WG];
    __local long best_key[WG];
    const uint lid = get_local_id(0);
    const ulong group = get_group_id(0);
    const ulong start = lo + group * chunk;
    const ulong end = min(start + chunk, hi);

    long bd = LONG_MAX, bk = EMPTY_KEY;
    for (ulong m = start + lid; m < end; m += WG) {
        long delta;
        const int feasible = move_eval(n, m, &delta PROBLEM_ARGS);
        const long cls = !feasible ? 2
            : (delta < aspiration || !move_tabu(n, m, tabu_until, iteration PROBLEM_ARGS)) ? 0 : 1;
        const long tie = tie_mask ? tie_hash(m, iteration, tie_seed) & tie_mask : 0;
        const long key = (cls << CLASS_SHIFT) | (tie << TIE_SHIFT) | (long)m;
        if (precedes(delta, key, bd, bk)) {
            bd = delta;
            bk = key;
        }
    }
    best_delta[lid] = bd;
    best_key[lid] = bk;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (lid < s && precedes(best_delta[lid + s], best_key[lid + s], best_delta[lid], best_key[lid])) {
            best_delta[lid] = best_delta[lid + s];
            best_key[lid] = best_key[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        partial[2 * group] = best_delta[0];
        partial[2 * group + 1] = best_key[0];
    }
}
