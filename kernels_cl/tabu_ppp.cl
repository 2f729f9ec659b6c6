/* Permuted perceptron problem, Hamming-K neighbourhood (used with tabu_reduce.cl).
 *
 * Luong, Melab, Talbi, IEEE TC 62(1) 2013, section 6.2: A is an
 * m x n matrix of +-1, S a multiset of m non-negative integers; find a +-1
 * vector V with {(AV)_j} = S.  Fitness (Knudsen and Meier, Eurocrypt 1999,
 * as in the paper's implementation in ParadisEO-GPU):
 *   f(V) = PENALTY_WEIGHT * sum_j (|Y_j| - Y_j) + sum_{v=1..n} |H_Y(v) - H_S(v)|,   Y = AV,
 * with H_X(v) the number of entries of X equal to v.  A move flips K
 * positions c_1 < ... < c_K of V, numbered lexicographically (section 4.6.1
 * and hpu/tabu/hamming.py).
 *
 * Y_j has the parity of n, so row j sits in bin b_j = (Y_j + n) / 2 in [0, n];
 * bin b holds the value 2 b - n, positive from FIRST_POS = n / 2 + 1 on.
 * Device state, updated in place by apply_move:
 *   A[j n + c]  (char)  the matrix, row-major (read only);
 *   V[c]                the current vector;
 *   Y[j]                AV;
 *   order[t]            the rows sorted by bin (ascending);
 *   count[b]            the number of rows in bin b (all bins);
 *   target[b]           H_S(2 b - n) for positive bins, 0 for the others (read only);
 *   cursor[b]           scratch of apply_move's counting sort.
 * Requires ROWS (max(m, 2)), HAMMING_K (1, 2 or 3), FIRST_POS, NBINS (n + 1)
 * and PENALTY_WEIGHT.  PoCL's compiler fails an assertion building apply_move
 * with ROWS 1, so hpu/tabu/ppp.py (_PPPState.defines and device_arrays) gives
 * a one-row instance (m = 1) a row of zeros after its row: in A, Y (0), order
 * and count (bin n / 2).  Its Y stays 0, in a bin below FIRST_POS, so it
 * changes no penalty and no histogram term.
 */

#define MOVE_BY_INDEX 1
#define MOVE_PARAMS(n, m, i, j) (*(i) = 0, *(j) = 0) /* apply_move decodes the move itself */
#define PROBLEM_PARAMS , __global const char *A, __global int *V, __global int *Y, __global int *order, \
    __global int *count, __global const int *target, __global int *cursor
#define PROBLEM_ARGS , A, V, Y, order, count, target, cursor
#define PROBLEM_BATCH_PARAMS , __global const char *A, __global int *V_all, __global int *Y_all, \
    __global int *order_all, __global int *count_all, __global const int *target, __global int *cursor_all
#define PROBLEM_BATCH_SELECT(s) __global int *V = V_all + (s) * n; __global int *Y = Y_all + (s) * ROWS; \
    __global int *order = order_all + (s) * ROWS; __global int *count = count_all + (s) * NBINS; \
    __global int *cursor = cursor_all + (s) * NBINS;
#define SOLUTION V

#define RING 8 /* at most 2 HAMMING_K + 1 <= 7 bins are live at once in move_eval */

/* C(a, 3) and C(a, 2) in 64 bits. */
static inline ulong comb3(const ulong a) { return a * (a - 1) * (a - 2) / 6; }
static inline ulong comb2(const ulong a) { return a * (a - 1) / 2; }

/* The K positions flipped by move idx: lexicographic unranking (hamming.py).
 * From the end, rest = C(n, K) - 1 - idx; each position is n - 1 - a with a
 * the largest integer such that C(a, r) <= rest (r = K, K - 1, ..., 1).  A
 * float root gives the first guess, integer comparisons make it exact. */
static inline void subset_from_index(const ulong n, const ulong idx, uint *c)
{
#if HAMMING_K == 1
    c[0] = (uint)idx;
#elif HAMMING_K == 2
    pair_from_index(n, idx, c, c + 1);
#else
    ulong rest = comb3(n) - 1 - idx;
    ulong a = (ulong)cbrt((float)(6 * rest)) + 1;
    while (a > 2 && comb3(a) > rest) a--;
    while (comb3(a + 1) <= rest) a++;
    rest -= comb3(a);
    c[0] = (uint)(n - 1 - a);
    a = (ulong)sqrt((float)(2 * rest)) + 1;
    while (a > 1 && comb2(a) > rest) a--;
    while (comb2(a + 1) <= rest) a++;
    rest -= comb2(a);
    c[1] = (uint)(n - 1 - a);
    c[2] = (uint)(n - 1 - rest);
#endif
}

/* |y| - y, the penalty of one row (twice its negative part). */
static inline int penalty(const int y) { return y < 0 ? -2 * y : 0; }

/* Histogram change of bin f held in the ring: |H'(f) - H_S(f)| - |H(f) - H_S(f)|. */
static inline long flush_bin(const int f, int *ring, __global const int *count, __global const int *target)
{
    const int c = ring[f & (RING - 1)];
    if (c == 0)
        return 0;
    ring[f & (RING - 1)] = 0;
    if (f < FIRST_POS)
        return 0;
    const int e = count[f] - target[f];
    return (long)abs(e + c) - (long)abs(e);  /* abs(int) is a uint in OpenCL C */
}

/* Fitness change of move mi in O(m K).  Flipping the K positions moves row j
 * from bin b_j to b_j - s_j, s_j = sum_k A[j][c_k] V[c_k] (Y_j changes by
 * -2 s_j).  Rows are visited in bin order; a ring of RING counters holds the
 * net change of the bins a visited row can still reach (within K of the
 * current bin), and a bin's histogram term is settled as soon as no later
 * row can reach it.  Every PPP neighbour is feasible. */
static inline int move_eval(const ulong n, const ulong mi, long *delta PROBLEM_PARAMS)
{
    uint c[HAMMING_K];
    int v[HAMMING_K];
    subset_from_index(n, mi, c);
    for (int k = 0; k < HAMMING_K; k++)
        v[k] = V[c[k]];
    int ring[RING] = {0};
    long pen = 0, hist = 0;
    int prev = (Y[order[0]] + (int)n) >> 1;
    for (uint t = 0; t < ROWS; t++) {
        const uint j = (uint)order[t];
        const int y = Y[j];
        const int b = (y + (int)n) >> 1;
        if (b != prev) {
            const int last = min(b - HAMMING_K - 1, prev + HAMMING_K);
            for (int f = prev - HAMMING_K; f <= last; f++)
                hist += flush_bin(f, ring, count, target);
            prev = b;
        }
        __global const char *row = A + (ulong)j * n;
        int s = 0;
        for (int k = 0; k < HAMMING_K; k++)
            s += row[c[k]] * v[k];
        if (s != 0) {
            ring[b & (RING - 1)]--;
            ring[(b - s) & (RING - 1)]++;
            pen += penalty(y - 2 * s) - penalty(y);
        }
    }
    for (int f = prev - HAMMING_K; f <= prev + HAMMING_K; f++)
        hist += flush_bin(f, ring, count, target);
    *delta = PENALTY_WEIGHT * pen + hist;
    return 1;
}

/* Apply move `move` in place, in one work-group: Y, then the bin counts and
 * the row order (a counting sort), then V; mark the move tabu until
 * iteration `until`.  i and j are unused: the kernel decodes `move` itself. */
static inline void apply_move(const ulong n, const uint i, const uint j, const ulong move, const int until,
                              __global int *tabu_until PROBLEM_PARAMS)
{
    const uint lid = get_local_id(0), size = get_local_size(0);
    uint c[HAMMING_K];
    int v[HAMMING_K];
    subset_from_index(n, move, c);
    for (int k = 0; k < HAMMING_K; k++)
        v[k] = V[c[k]];
    for (uint r = lid; r < ROWS; r += size) {
        __global const char *row = A + (ulong)r * n;
        int s = 0;
        for (int k = 0; k < HAMMING_K; k++)
            s += row[c[k]] * v[k];
        Y[r] -= 2 * s;
    }
    for (uint b = lid; b < NBINS; b += size)
        count[b] = 0;
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (uint r = lid; r < ROWS; r += size)
        atomic_inc(count + ((Y[r] + (int)n) >> 1));
    barrier(CLK_GLOBAL_MEM_FENCE);
    if (lid == 0) {
        int start = 0;
        for (uint b = 0; b < NBINS; b++) {
            cursor[b] = start;
            start += count[b];
        }
        for (int k = 0; k < HAMMING_K; k++)
            V[c[k]] = -v[k];
        tabu_until[move] = until;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (uint r = lid; r < ROWS; r += size)
        order[atomic_inc(cursor + ((Y[r] + (int)n) >> 1))] = (int)r;
}
