/* Permutation flow shop (PFSP), makespan, swap or insertion neighbourhood
 * (used with tabu_pairs.cl and tabu_reduce.cl; see hpu/tabu/pfsp.py).
 *
 * Wu, Wei, Lai and Li, "Avoiding duplicated computation to improve the
 * performance of PFSP on CUDA GPUs".  Completion times (section 2.2):
 *   C[i][k] = p[i][perm[k]] + max(C[i][k-1], C[i-1][k]),   C[-1][k] = C[i][-1] = 0,
 * makespan C[MACHINES-1][n-1].  The device keeps the parent's table and
 * evaluates each child from the parent's column f - 1, f its first changed
 * position (prefix sharing, section 3.2), or with PREFIX_SHARING 0 from
 * column 0 (the whole table: Czapinski and Barnes' method, the baseline of
 * section 4, table 2).
 *
 * Requires MACHINES (number of machines), CELL_T (int when every completion
 * time fits, else long), INSERTION (1: insertion moves, 0: swaps) and
 * PREFIX_SHARING (1: start at the first changed position, 0: at position 0).
 * Buffers, all position-major so that a column is contiguous:
 *   pt[j * MACHINES + i]     processing time of job j on machine i;
 *   perm[k]                  job at position k of the current permutation;
 *   table[k * MACHINES + i]  C[i][k] of the current permutation.
 *
 * With TABU_BY_ATTRIBUTE the tabu status is per (job, position) pair,
 * tabu_until[job * n + position]: a move is tabu when it puts any job it moves
 * at a position still tabu for that job; applying it marks the former
 * position of every job whose position changes.
 */

#define MOVE_BY_INDEX 1
#define MOVE_PARAMS(n, m, a, b) pfsp_move(n, m, a, b)
#define PROBLEM_PARAMS , __global const CELL_T *pt, __global int *perm, __global CELL_T *table
#define PROBLEM_ARGS , pt, perm, table
#define PROBLEM_BATCH_PARAMS , __global const CELL_T *pt, __global int *perm_all, __global CELL_T *table_all
#define PROBLEM_BATCH_SELECT(s) \
    __global int *perm = perm_all + (s) * n; __global CELL_T *table = table_all + (s) * n * MACHINES;
#define SOLUTION perm

/* Positions (a, b) of move m; same numbering as PFSP.move.
 * Swap: the pair a < b of tabu_pairs.cl.  Insertion: the job at a goes to b;
 * moves 0 .. n-2 are (0, 1) .. (0, n-1), then n - 2 moves per a >= 1, to
 * b = 0 .. n-1 without a and the redundant a - 1. */
static inline void pfsp_move(const ulong n, const ulong m, uint *a, uint *b)
{
#if INSERTION
    if (m < n - 1) {
        *a = 0;
        *b = (uint)m + 1;
        return;
    }
    const ulong r = m - (n - 1);
    const uint from = (uint)(r / (n - 2)) + 1;
    const uint t = (uint)(r % (n - 2));
    *a = from;
    *b = t < from - 1 ? t : t + 2;
#else
    pair_from_index(n, m, a, b);
#endif
}

/* Position of the parent that holds the child's job at position k. */
static inline uint pfsp_source(const uint k, const uint a, const uint b)
{
#if INSERTION
    if (k == b)
        return a;
    if (a <= k && k < b)
        return k + 1;
    if (b < k && k <= a)
        return k - 1;
    return k;
#else
    return k == a ? b : k == b ? a : k;
#endif
}

#if TABU_BY_ATTRIBUTE
static inline int move_tabu(const ulong n, const ulong m, __global const int *tabu_until, const int iteration
                            PROBLEM_PARAMS)
{
    uint a, b;
    pfsp_move(n, m, &a, &b);
    for (uint k = min(a, b); k <= max(a, b); k++) {
#if !INSERTION
        if (k != a && k != b)
            continue;
#endif
        if (tabu_until[perm[pfsp_source(k, a, b)] * n + k] > iteration)
            return 1;
    }
    return 0;
}
#endif

/* Makespan change of move m: start at position s (the first changed position
 * with PREFIX_SHARING, else 0) from the parent's column s - 1 (zeros for
 * s = 0), then one recurrence step per position s .. n-1 in a private column. */
static inline int move_eval(const ulong n, const ulong m, long *delta PROBLEM_PARAMS)
{
    uint a, b;
    pfsp_move(n, m, &a, &b);
    const uint start = PREFIX_SHARING ? min(a, b) : 0;
    CELL_T c[MACHINES];
    for (uint i = 0; i < MACHINES; i++)
        c[i] = start ? table[(start - 1) * MACHINES + i] : 0;
    for (uint k = start; k < n; k++) {
        __global const CELL_T *p = pt + perm[pfsp_source(k, a, b)] * MACHINES;
        CELL_T above = 0;
        for (uint i = 0; i < MACHINES; i++) {
            above = max(c[i], above) + p[i];
            c[i] = above;
        }
    }
    *delta = (long)c[MACHINES - 1] - (long)table[(n - 1) * MACHINES + MACHINES - 1];
    return 1;
}

/* Apply move (a, b), in one work-group: work-item 0 marks the move's
 * attributes tabu until iteration `until` (the move, or the (job, position)
 * pairs of the jobs at positions min(a, b) .. max(a, b) that change) and
 * moves the jobs of perm; then the work-group rebuilds
 * the table's columns min(a, b) .. n-1 along anti-diagonals d = k - min(a, b) + i,
 * one machine per work-item, with a barrier between diagonals (Wu et al.,
 * section 3.2, figure 5). */
static inline void apply_move(const ulong n, const uint a, const uint b, const ulong move, const int until,
                              __global int *tabu_until PROBLEM_PARAMS)
{
    const uint lid = get_local_id(0), size = get_local_size(0);
    const uint first = min(a, b), cols = (uint)n - first;
    if (lid == 0) {
#if TABU_BY_ATTRIBUTE
        for (uint k = first; k <= max(a, b); k++)
            if (INSERTION || k == a || k == b)
                tabu_until[perm[k] * n + k] = until;
#else
        tabu_until[move] = until;
#endif
        const int job = perm[a];
#if INSERTION
        if (a < b)
            for (uint k = a; k < b; k++)
                perm[k] = perm[k + 1];
        else
            for (uint k = a; k > b; k--)
                perm[k] = perm[k - 1];
#else
        perm[a] = perm[b];
#endif
        perm[b] = job;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (uint d = 0; d < cols + MACHINES - 1; d++) {
        for (uint i = lid; i <= d && i < MACHINES; i += size) {
            if (d - i >= cols)
                continue;
            const uint k = first + d - i;
            const CELL_T left = k ? table[(k - 1) * MACHINES + i] : 0;
            const CELL_T above = i ? table[k * MACHINES + i - 1] : 0;
            table[k * MACHINES + i] = max(left, above) + pt[perm[k] * MACHINES + i];
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}
