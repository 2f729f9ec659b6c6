/* Quadratic assignment problem, 2-swap neighbourhood (used with tabu_reduce.cl).
 *
 * f(p) = sum_ij A[i][j] B[p(i)][p(j)].  The device keeps A, the permuted
 * distance matrix Bp[i][j] = B[p(i)][p(j)] (row-major, n x n) and p itself
 * (perm); swapping the assignment of r and s swaps rows r, s and columns r, s
 * of Bp and entries r, s of perm.
 *
 * With TABU_BY_ATTRIBUTE the tabu status is per (facility, location) pair,
 * tabu_until[facility * n + location] (Taillard's robust tabu search): a
 * swap is tabu when both facilities would return to locations still tabu.
 *
 * Requires MAT_T (int when every entry has |x| < 2^30, else long) and
 * SYMMETRIC (1 when A and B are both symmetric).
 */

#define PROBLEM_PARAMS , __global MAT_T *A, __global MAT_T *Bp, __global int *perm
#define PROBLEM_ARGS , A, Bp, perm
#define PROBLEM_BATCH_PARAMS , __global MAT_T *A, __global MAT_T *Bp_all, __global int *perm_all
#define PROBLEM_BATCH_SELECT(s) __global MAT_T *Bp = Bp_all + (s) * n * n; __global int *perm = perm_all + (s) * n;
#define SOLUTION perm

#if TABU_BY_ATTRIBUTE
static inline int move_tabu(const ulong n, const ulong m, __global const int *tabu_until, const int iteration
                            PROBLEM_PARAMS)
{
    uint r, s;
    pair_from_index(n, m, &r, &s);
    return tabu_until[r * n + perm[s]] > iteration && tabu_until[s * n + perm[r]] > iteration;
}
#endif

/* Change of f when r and s swap locations: the O(n) formula Delta(p, r, s)
 * of Taillard, "Robust taboo search for the quadratic assignment problem",
 * Parallel Computing 17, 1991 (general, asymmetric case):
 *   (a_rr - a_ss)(b'_ss - b'_rr) + (a_rs - a_sr)(b'_sr - b'_rs)
 *   + sum_{k != r, s} (a_rk - a_sk)(b'_sk - b'_rk) + (a_kr - a_ks)(b'_ks - b'_kr)
 * with b'_uv = Bp[u][v].  For symmetric A and B the second term vanishes and
 * the two halves of the sum are equal. */
static inline int move_delta(const ulong n, const uint r, const uint s, long *delta PROBLEM_PARAMS)
{
    __global const MAT_T *ar = A + r * n, *as = A + s * n;
    __global const MAT_T *br = Bp + r * n, *bs = Bp + s * n;
    long d = 0;
    for (uint k = 0; k < n; k++) {
        if (k == r || k == s)
            continue;
        d += (long)(ar[k] - as[k]) * (long)(bs[k] - br[k]);
#if !SYMMETRIC
        d += (long)(A[k * n + r] - A[k * n + s]) * (long)(Bp[k * n + s] - Bp[k * n + r]);
#endif
    }
#if SYMMETRIC
    d *= 2;
#else
    d += (long)(ar[s] - as[r]) * (long)(bs[r] - br[s]);
#endif
    d += (long)(ar[r] - as[s]) * (long)(bs[s] - br[r]);
    *delta = d;
    return 1;
}

/* Apply move (r, s) in place, in one work-group: mark its attributes tabu
 * until iteration `until` (the move, or (r, p(r)) and (s, p(s))), swap
 * perm[r] and perm[s], and swap rows and columns r, s of Bp.  The work-items
 * take k in [0, n) in turn; the elements each k touches are disjoint. */
static inline void apply_move(const ulong n, const uint r, const uint s, const ulong move, const int until,
                              __global int *tabu_until PROBLEM_PARAMS)
{
    MAT_T t;
    for (ulong k = get_local_id(0); k < n; k += get_local_size(0)) {
        if (k == r) {
#if TABU_BY_ATTRIBUTE
            tabu_until[r * n + perm[r]] = until;
            tabu_until[s * n + perm[s]] = until;
#else
            tabu_until[move] = until;
#endif
            const int pr = perm[r];
            perm[r] = perm[s];
            perm[s] = pr;
            t = Bp[r * n + r]; Bp[r * n + r] = Bp[s * n + s]; Bp[s * n + s] = t;
            t = Bp[r * n + s]; Bp[r * n + s] = Bp[s * n + r]; Bp[s * n + r] = t;
        } else if (k != s) {
            t = Bp[r * n + k]; Bp[r * n + k] = Bp[s * n + k]; Bp[s * n + k] = t;
            t = Bp[k * n + r]; Bp[k * n + r] = Bp[k * n + s]; Bp[k * n + s] = t;
        }
    }
}
