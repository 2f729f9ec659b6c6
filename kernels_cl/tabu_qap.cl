/* Quadratic assignment problem, 2-swap neighbourhood (used with tabu_reduce.cl).
 *
 * f(p) = sum_ij A[i][j] B[p(i)][p(j)].  The device keeps A, the permuted
 * distance matrix Bp[i][j] = B[p(i)][p(j)] (row-major, n x n), p itself
 * (perm) and the delta of every move, D[m] (Taillard's matrix of move
 * values): a move is evaluated in O(1), and taking a move updates D in O(1)
 * per move disjoint from it and O(n) for the 2n - 3 moves that share a
 * facility with it.  Swapping the assignment of r and s swaps rows r, s and
 * columns r, s of Bp and entries r, s of perm.
 *
 * With TABU_BY_ATTRIBUTE the tabu status is per (facility, location) pair,
 * tabu_until[facility * n + location] (Taillard's robust tabu search): a
 * swap is tabu when both facilities would return to locations still tabu.
 *
 * pairs[m] = r << 16 | s is move m's pair (tabu_pairs.cl's numbering, n < 2^16;
 * hpu.tabu.pairs.packed_pairs), read where the kernels need a move's pair
 * every iteration: one load in place of pair_from_index's square root and
 * integer corrections.
 *
 * Requires MAT_T (int when every entry has |x| < 2^30, else long) and
 * SYMMETRIC (1 when A and B are both symmetric).
 */

#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable

#define MOVE_BY_INDEX 1
#if GROUP_LOCAL_D
/* The group build (hpu.tabu.engine.program_source) of an instance whose move
 * values fit in int and, with perm, in local memory: tabu_run_group (and
 * each work-group of tabu_run_batch) keeps D (as int) and perm there for its
 * whole block (both change every iteration, and global memory would take
 * each read after a write through L2), read in from D_global and
 * perm_global at the start and written back at the end.
 * In a grid (tabu_grid.cl) work-group g keeps the values of its own moves
 * only (move m in D[m / GRID_GROUPS]), its own copy of perm, and its own copy
 * of Bp in its GRID_SCRATCH (Bp_global copied in at the start; work-group 0's
 * copied back at the end); shared_own lists the moves of apply_move's O(n)
 * update that are its own. */
#define D_PARAM __local int *D
#define PERM_PARAM __local int *perm
#define D_ADD(p, v) atomic_add(p, (int)(v))
#define D_SLOT(m) ((m) / GRID_GROUPS)
#define OWN_MOVES ((NUM_MOVES + GRID_GROUPS - 1) / GRID_GROUPS)
#if GRID_GROUPS > 1
#define BP_GROUP_PARAM __global MAT_T *Bp_global
#define BP_ENTER \
    __global MAT_T *Bp = GRID_SCRATCH(MAT_T, GRID_RANK); \
    for (ulong k_ = get_local_id(0); k_ < FACILITIES * FACILITIES; k_ += WG) \
        Bp[k_] = Bp_global[k_]; \
    __local uint shared_own[2 * FACILITIES]; \
    if (get_local_id(0) == 0) \
        shared_own[0] = 0;
#define BP_LEAVE \
    if (GRID_LEADER) \
        for (ulong k_ = get_local_id(0); k_ < FACILITIES * FACILITIES; k_ += WG) \
            Bp_global[k_] = Bp[k_];
#define SHARED_PARAM , __local uint *shared_own
#define SHARED_ARG , shared_own
#else
#define BP_GROUP_PARAM __global MAT_T *Bp
#define BP_ENTER
#define BP_LEAVE
#endif
#define PROBLEM_GROUP_PARAMS , __global MAT_T *A, BP_GROUP_PARAM, __global int *perm_global, \
    __global long *D_global, __global const uint *pairs
#define PROBLEM_GROUP_ENTER \
    __local int D[OWN_MOVES]; \
    __local int perm[FACILITIES]; \
    for (ulong m_ = GRID_RANK + get_local_id(0) * GRID_GROUPS; m_ < NUM_MOVES; m_ += WG * GRID_GROUPS) \
        D[D_SLOT(m_)] = (int)D_global[m_]; \
    for (ulong k_ = get_local_id(0); k_ < FACILITIES; k_ += WG) \
        perm[k_] = perm_global[k_]; \
    BP_ENTER \
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
#define PROBLEM_GROUP_LEAVE \
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE); \
    for (ulong m_ = GRID_RANK + get_local_id(0) * GRID_GROUPS; m_ < NUM_MOVES; m_ += WG * GRID_GROUPS) \
        D_global[m_] = D[D_SLOT(m_)]; \
    if (GRID_LEADER) \
        for (ulong k_ = get_local_id(0); k_ < FACILITIES; k_ += WG) \
            perm_global[k_] = perm[k_]; \
    BP_LEAVE
#else
#define D_PARAM __global long *D
#define PERM_PARAM __global int *perm
#define D_ADD(p, v) atom_add(p, v)
#define D_SLOT(m) (m)
#endif
#ifndef SHARED_PARAM
#define SHARED_PARAM
#define SHARED_ARG
#endif
#define PROBLEM_PARAMS , __global MAT_T *A, __global MAT_T *Bp, PERM_PARAM, D_PARAM, __global const uint *pairs \
    SHARED_PARAM
#define PROBLEM_ARGS , A, Bp, perm, D, pairs SHARED_ARG
#define PROBLEM_BATCH_PARAMS , __global MAT_T *A, __global MAT_T *Bp_all, __global int *perm_all, __global long *D_all, \
    __global const uint *pairs
#if GROUP_LOCAL_D  /* search s's slices as PROBLEM_GROUP_ENTER reads them */
#define PROBLEM_BATCH_SELECT(s) __global MAT_T *Bp = Bp_all + (s) * n * n; \
    __global int *perm_global = perm_all + (s) * n; __global long *D_global = D_all + (s) * (n * (n - 1) / 2);
#else
#define PROBLEM_BATCH_SELECT(s) __global MAT_T *Bp = Bp_all + (s) * n * n; __global int *perm = perm_all + (s) * n; \
    __global long *D = D_all + (s) * (n * (n - 1) / 2);
#endif
#define SOLUTION perm
#define MOVE_PARAMS(n, m, i, j) (*(i) = pairs[m] >> 16, *(j) = pairs[m] & 0xFFFF)

#if TABU_BY_ATTRIBUTE
static inline int move_tabu(const ulong n, const ulong m, __global const int *tabu_until, const int iteration
                            PROBLEM_PARAMS)
{
    const uint r = pairs[m] >> 16, s = pairs[m] & 0xFFFF;
    return tabu_until[r * n + perm[s]] > iteration && tabu_until[s * n + perm[r]] > iteration;
}
#endif

/* Change of f when r and s swap locations: the O(n) formula Delta(p, r, s)
 * of Taillard, "Robust taboo search for the quadratic assignment problem",
 * Parallel Computing 17, 1991 (general, asymmetric case):
 *   (a_rr - a_ss)(b'_ss - b'_rr) + (a_rs - a_sr)(b'_sr - b'_rs)
 *   + sum_{k != r, s} (a_rk - a_sk)(b'_sk - b'_rk) + (a_kr - a_ks)(b'_ks - b'_kr)
 * with b'_uv = Bp[u][v].  For symmetric A and B the second term vanishes and
 * the two halves of the sum are equal; the sum then reads columns r and s
 * (a_kr for a_rk), so that work-items taking moves (r, s) of consecutive s
 * read consecutive addresses.  The sum runs over every k, less its k = r and
 * k = s terms (no branch in the loop). */
static inline long delta_sum(const ulong n, const uint r, const uint s, const ulong k0, const ulong k1
                             PROBLEM_PARAMS)
{
    long d = 0;
    for (ulong k = k0; k < k1; k++) {
#if SYMMETRIC
        d += (long)(A[k * n + r] - A[k * n + s]) * (long)(Bp[k * n + s] - Bp[k * n + r]);
#else
        d += (long)(A[r * n + k] - A[s * n + k]) * (long)(Bp[s * n + k] - Bp[r * n + k]);
        d += (long)(A[k * n + r] - A[k * n + s]) * (long)(Bp[k * n + s] - Bp[k * n + r]);
#endif
    }
#if SYMMETRIC
    d *= 2;
#endif
    return d;
}

/* The terms of Delta(p, r, s) outside the sum over k (delta_sum over [0, n) is the rest). */
static inline long delta_rest(const ulong n, const uint r, const uint s PROBLEM_PARAMS)
{
    __global const MAT_T *ar = A + r * n, *as = A + s * n;
    __global const MAT_T *br = Bp + r * n, *bs = Bp + s * n;
    long d = -((long)(ar[r] - as[r]) * (long)(bs[r] - br[r]) + (long)(ar[s] - as[s]) * (long)(bs[s] - br[s]));
#if SYMMETRIC
    d *= 2;
#else
    d -= (long)(A[r * n + r] - A[r * n + s]) * (long)(Bp[r * n + s] - Bp[r * n + r])
       + (long)(A[s * n + r] - A[s * n + s]) * (long)(Bp[s * n + s] - Bp[s * n + r]);
    d += (long)(ar[s] - as[r]) * (long)(bs[r] - br[s]);
#endif
    return d + (long)(ar[r] - as[s]) * (long)(bs[s] - br[r]);
}

static inline long move_delta(const ulong n, const uint r, const uint s PROBLEM_PARAMS)
{
    return delta_sum(n, r, s, 0, n PROBLEM_ARGS) + delta_rest(n, r, s PROBLEM_ARGS);
}

/* Move m's delta: read from D (every move is feasible). */
static inline int move_eval(const ulong n, const ulong m, long *delta PROBLEM_PARAMS)
{
    *delta = D[D_SLOT(m)];
    return 1;
}

/* Index and pair (u, v) of the a-th of the 2n - 3 moves that share a facility with (r, s) (see apply_move). */
static inline ulong shared_move(const ulong n, const uint r, const uint s, const ulong a, uint *u, uint *v)
{
    *u = r;
    *v = s;
    if (a < 2 * n - 4) {
        const uint f = a < n - 2 ? r : s;
        uint w = (uint)(a < n - 2 ? a : a - (n - 2));
        w += (w >= r) + (w + 1 >= s && w >= r);
        *u = min(f, w);
        *v = max(f, w);
    }
    return pair_index(n, *u, *v);
}

#if GRID_GROUPS > 1
#define OWN_SHARED(b) shared_own[1 + (b)]
#else
#define OWN_SHARED(b) (b)
#endif

/* Apply move (r, s) in place, in one work-group: mark its attributes tabu
 * until iteration `until` (the move, or (r, p(r)) and (s, p(s))), swap
 * perm[r] and perm[s], and swap rows and columns r, s of Bp (the work-items
 * take k in [0, n) in turn; the elements each k touches are disjoint); then,
 * with the new Bp, bring D up to date: a move (u, v) that shares a facility
 * with (r, s) by move_delta, any other by Taillard's O(1) update (1991,
 * section 3; the host's O(n) evaluation is the tests' reference):
 *   D[u, v] += (a_ru - a_rv + a_sv - a_su)(b'_su - b'_sv + b'_rv - b'_ru)
 *            + (a_ur - a_vr + a_vs - a_us)(b'_us - b'_vs + b'_vr - b'_ur)
 * with b' the permuted distances after the swap (the two terms are equal
 * when A and B are symmetric). */
static inline void apply_move(const ulong n, const uint r, const uint s, const ulong move, const int until,
                              __global int *tabu_until PROBLEM_PARAMS)
{
    MAT_T t;
    for (ulong k = get_local_id(0); k < n; k += WG) {
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
    const ulong moves = 2 * n - 3;
#if GRID_GROUPS > 1
    /* The shared moves this work-group owns, listed (in any order) in shared_own[1 ..]. */
    for (ulong a = get_local_id(0); a < moves; a += WG) {
        uint u, v;
        if (shared_move(n, r, s, a, &u, &v) % GRID_GROUPS == GRID_RANK)
            shared_own[1 + atomic_inc(shared_own)] = (uint)a;
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    const ulong own = shared_own[0];
#else
    barrier(CLK_GLOBAL_MEM_FENCE);
    const ulong own = moves;
#endif
    __global const MAT_T *ar = A + r * n, *as = A + s * n, *br = Bp + r * n, *bs = Bp + s * n;
    for (ulong m = GRID_RANK + get_local_id(0) * GRID_GROUPS; m < n * (n - 1) / 2; m += WG * GRID_GROUPS) {
        const uint u = pairs[m] >> 16, v = pairs[m] & 0xFFFF;
        if (u == r || u == s || v == r || v == s)
            continue;
        long d = (long)(ar[u] - ar[v] + as[v] - as[u]) * (long)(bs[u] - bs[v] + br[v] - br[u]);
#if SYMMETRIC
        d *= 2;
#else
        d += (long)(A[u * n + r] - A[v * n + r] + A[v * n + s] - A[u * n + s])
           * (long)(Bp[u * n + s] - Bp[v * n + s] + Bp[v * n + r] - Bp[u * n + r]);
#endif
        D[D_SLOT(m)] += d;
    }
    /* The 2n - 3 moves that share a facility with (r, s): move a < n - 2 is
     * (r, w), a < 2n - 4 (s, w), w the (a mod (n - 2))-th facility other than
     * r and s; a = 2n - 4 is (r, s) itself (in a grid, the `own` of them this
     * work-group owns: b-th shared_own[1 + b]).  Where the work-group has at
     * least two work-items a move, each move's sum over k is cut into `parts`
     * slices of work-items of their own: work-item t takes slice t div own of
     * move t mod own, so that consecutive work-items read consecutive columns;
     * slice 0 stores its sum with delta_rest, the others add theirs after a
     * barrier (atomically). */
    const ulong parts = own ? max(WG / own, (ulong)1) : 0;
    const ulong b = own ? get_local_id(0) % own : 0, part = own ? get_local_id(0) / own : 0;
    ulong idx = 0;
    long d = 0;
    uint u, v;
    if (parts == 1) {
        for (ulong c = get_local_id(0); c < own; c += WG) {
            idx = shared_move(n, r, s, OWN_SHARED(c), &u, &v);
            D[D_SLOT(idx)] = move_delta(n, u, v PROBLEM_ARGS);
        }
    } else if (part < parts) {
        idx = shared_move(n, r, s, OWN_SHARED(b), &u, &v);
        d = delta_sum(n, u, v, part * n / parts, (part + 1) * n / parts PROBLEM_ARGS);
        if (part == 0)
            D[D_SLOT(idx)] = d + delta_rest(n, u, v PROBLEM_ARGS);
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
#if GRID_GROUPS > 1
    if (get_local_id(0) == 0)
        shared_own[0] = 0;  /* the next iteration's list; no work-item reads it before the barriers between */
#endif
    if (parts > 1 && part < parts && part != 0)
        D_ADD(D + D_SLOT(idx), d);
}
