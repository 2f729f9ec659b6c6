/* Fused evaluation and reduction of a tabu-search neighbourhood.
 *
 * Hou, He, Zhou, Chen, "An efficient GPU-based parallel tabu search algorithm
 * for hardware/software co-design", Front. Comput. Sci. 2019,
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
 * and, for every neighbourhood,
 *   static inline void apply_move(ulong n, uint i, uint j, ulong move, int until,
 *                                 __global int *tabu_until PROBLEM_PARAMS)
 *                   run by one work-group: mark the move's tabu attributes
 *                   tabu until iteration `until`, then move to the neighbour;
 *   MOVE_PARAMS(n, m, &i, &j)  the (i, j) apply_move takes for move m (default:
 *                   the pair of tabu_pairs.cl);
 * and, for tabu_run_batch (many searches at once),
 *   PROBLEM_BATCH_PARAMS  PROBLEM_PARAMS with each search's own (read-write)
 *                   state stacked search after search (e.g. Bp_all for Bp);
 *   PROBLEM_BATCH_SELECT(s)  declarations of the PROBLEM_PARAMS names as
 *                   search s's slices of those (in the group build, of the
 *                   names PROBLEM_GROUP_ENTER reads, where the problem
 *                   file has one);
 *   SOLUTION        the array of n ints that holds the current solution;
 * and, optionally, for the group build (GROUP_BUILD 1: tabu_run_group and
 * tabu_run_batch, the kernels that run blocks of iterations in work-groups)
 *   PROBLEM_GROUP_PARAMS  tabu_run_group's parameters in place of
 *                   PROBLEM_PARAMS, and PROBLEM_GROUP_ENTER / _LEAVE, code
 *                   at the start and end of its block (and of each
 *                   search's in tabu_run_batch, after PROBLEM_BATCH_SELECT)
 *                   that declares the PROBLEM_PARAMS names in local memory
 *                   from those and writes them back (e.g. tabu_qap.cl's
 *                   move values); in
 *                   a grid (GRID_GROUPS > 1, tabu_grid.cl) work-group
 *                   GRID_RANK's own moves (m mod GRID_GROUPS = GRID_RANK)
 *                   only, in apply_move as well;
 * with WG (the work-group size, a power of two), TABU_BY_ATTRIBUTE and
 * WARP_SHUFFLE (1: reduce_local shuffles within warps; hpu.tabu.engine.warp_shuffle)
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

/* CLASS_SHIFT, TIE_SHIFT and HALT_NO_FEASIBLE_MOVE come from hpu.tabu.engine (defines). */
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

#ifndef MOVE_PARAMS
#define MOVE_PARAMS(n, m, i, j) pair_from_index(n, m, i, j)
#endif

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

#if WARP_SHUFFLE
#define REDUCE_SLOTS (WG / 32)  /* reduce_local's entries of local memory: one a warp */

/* v of the work-item whose lane is this one's xor `mask`, in the same warp
 * (NVIDIA's PTX shfl.sync.bfly, 32 lanes: the engine defines WARP_SHUFFLE
 * only for such devices and work-groups of whole warps). */
static inline long shuffle_xor(const long v, const int mask)
{
    uint lo = (uint)v, hi = (uint)((ulong)v >> 32);
    __asm__ volatile("shfl.sync.bfly.b32 %0, %0, %1, 0x1f, 0xffffffff;" : "+r"(lo) : "r"(mask));
    __asm__ volatile("shfl.sync.bfly.b32 %0, %0, %1, 0x1f, 0xffffffff;" : "+r"(hi) : "r"(mask));
    return (long)(((ulong)hi << 32) | lo);
}

/* The warp's minimum of its lanes' (bd, bk), in every lane (a butterfly: five exchanges, no barrier). */
static inline void warp_min(long *bd, long *bk)
{
    for (int mask = 16; mask > 0; mask >>= 1) {
        const long d = shuffle_xor(*bd, mask), k = shuffle_xor(*bk, mask);
        if (precedes(d, k, *bd, *bk)) {
            *bd = d;
            *bk = k;
        }
    }
}
#else
#define REDUCE_SLOTS WG  /* reduce_local's entries of local memory: one a work-item */
#endif

/* The work-group's minimum of the work-items' (bd, bk), returned to every
 * work-item in *out_delta, *out_key.  With WARP_SHUFFLE each warp reduces
 * its lanes (warp_min), lane 0 of each stores the warp's minimum, and after
 * one barrier every warp reduces those; else a tree in local memory (a
 * barrier a level).  best_delta and best_key hold REDUCE_SLOTS entries;
 * the caller puts a barrier between two calls. */
static inline void reduce_local(long bd, long bk, __local long *best_delta, __local long *best_key,
                                long *out_delta, long *out_key)
{
    const uint lid = get_local_id(0);
#if WARP_SHUFFLE
    warp_min(&bd, &bk);
    if ((lid & 31) == 0) {
        best_delta[lid >> 5] = bd;
        best_key[lid >> 5] = bk;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint lane = lid & 31;
    bd = lane < WG / 32 ? best_delta[lane] : LONG_MAX;
    bk = lane < WG / 32 ? best_key[lane] : EMPTY_KEY;
    warp_min(&bd, &bk);
#else
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
    bd = best_delta[0];
    bk = best_key[0];
#endif
    *out_delta = bd;
    *out_key = bk;
}

/* Chunk g's best move of [lo + g chunk, min(lo + (g + 1) chunk, hi)),
 * every stride-th move from its first (1: all), reduced in local memory
 * (reduce_local): its delta and key in *out_delta, *out_key of every
 * work-item.  A tabu move (move_tabu) is still admissible
 * when delta < aspiration (= best value found - current value). */
static inline void evaluate_chunk(const ulong n, const ulong group, const ulong lo, const ulong hi,
                                  const ulong chunk, const ulong stride, const long aspiration, const int iteration,
                                  const uint tie_seed, const uint tie_mask, __global const int *tabu_until,
                                  __local long *best_delta, __local long *best_key, long *out_delta,
                                  long *out_key PROBLEM_PARAMS)
{
    const uint lid = get_local_id(0);
    const ulong start = lo + group * chunk;
    const ulong end = min(start + chunk, hi);

    long bd = LONG_MAX, bk = EMPTY_KEY;
    for (ulong m = start + lid * stride; m < end; m += WG * stride) {
        long delta;
        const int feasible = move_eval(n, m, &delta PROBLEM_ARGS);
        if ((bk >> CLASS_SHIFT) == 0 && (!feasible || delta > bd))
            continue;  /* cannot precede an admissible move of smaller delta: no tabu test, no tie hash */
        const long cls = !feasible ? 2
            : (delta < aspiration || !move_tabu(n, m, tabu_until, iteration PROBLEM_ARGS)) ? 0 : 1;
        const long tie = tie_mask ? tie_hash(m, iteration, tie_seed) & tie_mask : 0;
        const long key = (cls << CLASS_SHIFT) | (tie << TIE_SHIFT) | (long)m;
        if (precedes(delta, key, bd, bk)) {
            bd = delta;
            bk = key;
        }
    }
    reduce_local(bd, bk, best_delta, best_key, out_delta, out_key);
}

/* Work-item 0 stores work-group g's best (bd, bk) in partial[2 g], partial[2 g + 1]. */
static inline void store_partial(const ulong group, const long bd, const long bk, __global long *partial)
{
    if (get_local_id(0) == 0) {
        partial[2 * group] = bd;
        partial[2 * group + 1] = bk;
    }
}

#if GRID_GROUPS > 1
/* The best of the grid's work-groups' bests (*bd, *bk) at the launch's
 * step-th iteration, returned to every work-item of every work-group: each
 * work-group's work-item 0 stores its own in the step's set of slots and
 * waits for the others (grid_arrive); then every work-item combines them
 * (with WARP_SHUFFLE, each lane reads one and each warp combines them).
 * Returns 0 to every work-item of a work-group whose wait failed (the grid's
 * flag set: the block's result is not used), else 1. */
static inline int grid_best(long *bd, long *bk, const int step, __global long *grid, __local int *grid_ok)
{
    volatile __global long *slot = grid + GRID_SLOTS + 2 * GRID_GROUPS * (step & 1);
    if (get_local_id(0) == 0) {
        slot[2 * get_group_id(0)] = *bd;
        slot[2 * get_group_id(0) + 1] = *bk;
        *grid_ok = grid_arrive(grid, step);
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (!*grid_ok)
        return 0;
#if WARP_SHUFFLE && GRID_GROUPS <= 32
    /* lane l reads work-group l mod GRID_GROUPS's best: one read of global memory a work-item, then the warp's
     * minimum (every warp holds every work-group's) */
    const uint h = get_local_id(0) % GRID_GROUPS;
    long d = slot[2 * h], k = slot[2 * h + 1];
    warp_min(&d, &k);
#else
    long d = LONG_MAX, k = EMPTY_KEY;
    for (uint h = 0; h < GRID_GROUPS; h++) {
        const long dh = slot[2 * h], kh = slot[2 * h + 1];
        if (precedes(dh, kh, d, k)) {
            d = dh;
            k = kh;
        }
    }
#endif
    *bd = d;
    *bk = k;
    return 1;
}
#endif

#if !GROUP_BUILD  /* the group build (hpu.tabu.engine.program_source) has tabu_run_group and tabu_run_batch */
/* One iteration's neighbourhood, aspiration given by the host. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void tabu_evaluate_reduce(const ulong n, const ulong lo, const ulong hi, const ulong chunk,
                          const long aspiration, const int iteration, const uint tie_seed, const uint tie_mask,
                          __global const int *tabu_until, __global long *partial
                          PROBLEM_PARAMS)
{
    __local long best_delta[REDUCE_SLOTS];
    __local long best_key[REDUCE_SLOTS];
    long bd, bk;
    evaluate_chunk(n, get_group_id(0), lo, hi, chunk, 1, aspiration, iteration, tie_seed, tie_mask, tabu_until,
                   best_delta, best_key, &bd, &bk PROBLEM_ARGS);
    store_partial(get_group_id(0), bd, bk, partial);
}

/* Apply move `move` (the host loop's apply, one work-group). */
__kernel void tabu_apply(const ulong n, const ulong move, const int until, __global int *tabu_until PROBLEM_PARAMS)
{
    uint i, j;
    MOVE_PARAMS(n, move, &i, &j);
    apply_move(n, i, j, move, until, tabu_until PROBLEM_ARGS);
}
#endif

/* Iterations resident on the device: tabu_evaluate_resident and tabu_select,
 * one pair per iteration, enqueued K iterations at a time, keep the search's
 * state in ctrl:
 *   ctrl[0] current value          ctrl[1] best value (LONG_MAX: none yet)
 *   ctrl[2] iteration of the last new best
 *   ctrl[3] halt: 0 running, 1 target reached, 2 max_no_improve reached,
 *           3 no feasible move (the host restarts)
 *   ctrl[4] the last iteration done
 * and the trajectory in trail[2 (iteration - first)] = move,
 * trail[2 (iteration - first) + 1] = value after it.  Once halted, both
 * kernels return at once, so the iterations enqueued after a stop do nothing. */
#define NO_TARGET LONG_MIN

/* The aspiration threshold: best value found - current value (LONG_MAX before any best). */
static inline long aspiration_of(const long value, const long best)
{
    return best == LONG_MAX ? LONG_MAX : best - value;
}

#if !GROUP_BUILD
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void tabu_evaluate_resident(const ulong n, const ulong hi, const ulong chunk, const int iteration, const uint tie_seed,
                            const uint tie_mask, __global const int *tabu_until, __global long *partial,
                            __global const long *ctrl PROBLEM_PARAMS)
{
    __local long best_delta[REDUCE_SLOTS];
    __local long best_key[REDUCE_SLOTS];
    long bd, bk;
    if (ctrl[3])
        return;
    evaluate_chunk(n, get_group_id(0), 0, hi, chunk, 1, aspiration_of(ctrl[0], ctrl[1]), iteration, tie_seed, tie_mask,
                   tabu_until, best_delta, best_key, &bd, &bk PROBLEM_ARGS);
    store_partial(get_group_id(0), bd, bk, partial);
}
#endif

/* Take the best move (delta bd, key bk) at `iteration` in c, a copy of
 * ctrl[0 .. 4]: its value, the best, the stop rules of hpu.tabu.tabu_search
 * (target, then max_no_improve; 0: none); returns the move, or -1 when no
 * move is feasible (c[3] = HALT_NO_FEASIBLE_MOVE). */
static inline long take_move_state(const long bd, const long bk, const int iteration, const long stop_target,
                                   const int max_no_improve, long *c)
{
    if ((bk >> CLASS_SHIFT) >= 2) {
        c[3] = HALT_NO_FEASIBLE_MOVE;
        return -1;
    }
    c[0] += bd;
    if (c[0] < c[1]) {
        c[1] = c[0];
        c[2] = iteration;
    }
    c[4] = iteration;
    c[3] = (stop_target != NO_TARGET && c[1] <= stop_target) ? 1
         : (max_no_improve > 0 && iteration - c[2] >= max_no_improve) ? 2 : 0;
    return bk & (((long)1 << TIE_SHIFT) - 1);
}

/* Work-item 0's record of a taken move: ctrl[0 .. 4] = c, and the move and its value in the trail. */
static inline void record_move(const long m, const int iteration, const int first, const long *c,
                               __global long *ctrl, __global long *trail)
{
    for (int k = 0; k < 5; k++)
        ctrl[k] = c[k];
    if (m >= 0) {
        trail[2 * (iteration - first)] = m;
        trail[2 * (iteration - first) + 1] = c[0];
    }
}

/* take_move_state on ctrl itself, recorded (work-item 0). */
static inline long take_move(const long bd, const long bk, const int iteration, const int first,
                             const long stop_target, const int max_no_improve, __global long *ctrl,
                             __global long *trail)
{
    long c[5] = {ctrl[0], ctrl[1], ctrl[2], ctrl[3], ctrl[4]};
    const long m = take_move_state(bd, bk, iteration, stop_target, max_no_improve, c);
    record_move(m, iteration, first, c, ctrl, trail);
    return m;
}

/* Work-item 0 takes the work-group's best move (delta bd, key bk: take_move),
 * then the work-group applies it; returns 0 when there is none (the search
 * halted). */
static inline int take_and_apply(const ulong n, const int iteration, const int first, const int tenure,
                                 const long stop_target, const int max_no_improve, __global long *ctrl,
                                 __global long *trail, __global int *tabu_until, const long bd, const long bk,
                                 __local long *chosen PROBLEM_PARAMS)
{
    if (get_local_id(0) == 0)
        *chosen = take_move(bd, bk, iteration, first, stop_target, max_no_improve, ctrl, trail);
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    const long m = *chosen;
    if (m < 0)
        return 0;
    uint i, j;
    MOVE_PARAMS(n, (ulong)m, &i, &j);
    apply_move(n, i, j, (ulong)m, iteration + tenure, tabu_until PROBLEM_ARGS);
    return 1;
}

/* After iteration `iteration`'s move: the work-group copies SOLUTION (the
 * problem file's solution array of n ints) to best when the move gave a new
 * best (last_best, ctrl[2], is the iteration). */
static inline void keep_best(const ulong n, const int iteration, const long last_best, __global int *best
                             PROBLEM_PARAMS)
{
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    if (last_best == iteration && GRID_LEADER)
        for (ulong k = get_local_id(0); k < n; k += WG)
            best[k] = SOLUTION[k];
}

#if !GROUP_BUILD
/* One work-group: reduce the groups' partial minima, take the move (its
 * value, the best, the stop rules of hpu.tabu.tabu_search: target, then
 * max_no_improve (0: none)), apply it, and keep the solution in best when it
 * is a new best. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void tabu_select(const ulong n, const uint groups, const int iteration, const int first, const int tenure,
                 const long stop_target, const int max_no_improve, __global const long *partial,
                 __global long *ctrl, __global long *trail, __global int *tabu_until, __global int *best
                 PROBLEM_PARAMS)
{
    __local long best_delta[REDUCE_SLOTS];
    __local long best_key[REDUCE_SLOTS];
    __local long chosen;
    const uint lid = get_local_id(0);
    if (ctrl[3])
        return;
    long bd = LONG_MAX, bk = EMPTY_KEY;
    for (uint g = lid; g < groups; g += WG)
        if (precedes(partial[2 * g], partial[2 * g + 1], bd, bk)) {
            bd = partial[2 * g];
            bk = partial[2 * g + 1];
        }
    reduce_local(bd, bk, best_delta, best_key, &bd, &bk);
    if (take_and_apply(n, iteration, first, tenure, stop_target, max_no_improve, ctrl, trail, tabu_until, bd, bk,
                       &chosen PROBLEM_ARGS))
        keep_best(n, iteration, ctrl[2], best PROBLEM_ARGS);
}
#endif

/* `steps` iterations of one search in one work-group (the neighbourhood in
 * one chunk), or in a grid (tabu_grid.cl: each work-group its own moves,
 * the bests combined by grid_best), with barriers between evaluation and
 * move, so that no launch separates iterations; the solution kept in best
 * after every move that gives a new best (keep_best).  Every work-item keeps a copy of ctrl[0 .. 4]
 * and takes the work-group's best move itself (take_move_state, the same
 * for all), so that no barrier and no read of global memory hand the move
 * over (in a grid, grid_best's one barrier and read of the work-groups'
 * bests); work-item 0 (of work-group 0 in a grid) records each
 * (record_move). */
static inline void run_iterations(const ulong n, const ulong hi, const int first, const int steps,
                                  const int tenure, const long stop_target, const int max_no_improve,
                                  const uint tie_seed, const uint tie_mask, __global long *ctrl,
                                  __global long *trail, __global int *tabu_until, __global int *best,
                                  __local long *best_delta, __local long *best_key GRID_PARAMS PROBLEM_PARAMS)
{
    long c[5] = {ctrl[0], ctrl[1], ctrl[2], ctrl[3], ctrl[4]};
    for (int iteration = first; iteration < first + steps; iteration++) {
        if (c[3])
            return;
        long bd, bk;
        evaluate_chunk(n, 0, GRID_RANK, hi, hi, GRID_GROUPS, aspiration_of(c[0], c[1]), iteration, tie_seed,
                       tie_mask, tabu_until, best_delta, best_key, &bd, &bk PROBLEM_ARGS);
#if GRID_GROUPS > 1
        if (!grid_best(&bd, &bk, iteration - first, grid, grid_ok))
            return;
#endif
        const long m = take_move_state(bd, bk, iteration, stop_target, max_no_improve, c);
        if (GRID_LEADER && get_local_id(0) == 0)
            record_move(m, iteration, first, c, ctrl, trail);
        if (m < 0)
            return;
        uint i, j;
        MOVE_PARAMS(n, (ulong)m, &i, &j);
        apply_move(n, i, j, (ulong)m, iteration + tenure, tabu_until PROBLEM_ARGS);
        keep_best(n, iteration, c[2], best PROBLEM_ARGS);
    }
}

#ifndef PROBLEM_GROUP_PARAMS  /* a problem file may keep state of its own in local memory for the block */
#define PROBLEM_GROUP_PARAMS PROBLEM_PARAMS
#define PROBLEM_GROUP_ENTER
#define PROBLEM_GROUP_LEAVE
#endif

/* A whole block of one search in one work-group, or in a grid of GRID_GROUPS
 * (tabu_grid.cl), by run_iterations; its best solution kept in best. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void tabu_run_group(const ulong n, const ulong hi, const int first, const int steps, const int tenure,
                    const long stop_target, const int max_no_improve, const uint tie_seed, const uint tie_mask,
                    __global long *ctrl, __global long *trail, __global int *tabu_until, __global int *best
                    GRID_KERNEL_PARAMS PROBLEM_GROUP_PARAMS)
{
    __local long best_delta[REDUCE_SLOTS];
    __local long best_key[REDUCE_SLOTS];
    GRID_ENTER
    PROBLEM_GROUP_ENTER
    run_iterations(n, hi, first, steps, tenure, stop_target, max_no_improve, tie_seed, tie_mask, ctrl,
                   trail, tabu_until, best, best_delta, best_key GRID_ARGS PROBLEM_ARGS);
    PROBLEM_GROUP_LEAVE
}

#if GRID_GROUPS == 1  /* a grid build (tabu_grid.cl) has tabu_run_group alone */
/* Many independent searches of one problem at once, work-group s running
 * search s (run_iterations) on its own slices of the buffers: ctrl_all[5 s ..],
 * trail_all[trail_stride s ..], tabu_all[attributes s ..],
 * best_all[n s ..], tie_seeds[s], and the problem's state as the problem file's
 * PROBLEM_BATCH_SELECT(s) slices it from the PROBLEM_BATCH_PARAMS (its
 * PROBLEM_PARAMS with each search's own state stacked search after search;
 * the problem's data shared).  Each search goes on from its own last
 * iteration (ctrl[4]) for up to `block` iterations, none past `last`; its
 * trail starts at its first iteration of the launch. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void tabu_run_batch(const ulong n, const ulong hi, const int block, const int last, const int tenure,
                    const long stop_target, const int max_no_improve, const uint tie_mask, const ulong attributes,
                    const ulong trail_stride, __global const uint *tie_seeds,
                    __global long *ctrl_all, __global long *trail_all, __global int *tabu_all,
                    __global int *best_all PROBLEM_BATCH_PARAMS)
{
    __local long best_delta[REDUCE_SLOTS];
    __local long best_key[REDUCE_SLOTS];
    const ulong s = get_group_id(0);
    __global long *ctrl = ctrl_all + 5 * s;
    const int first = (int)ctrl[4] + 1; /* read by every work-item before work-item 0 first writes it */
    PROBLEM_BATCH_SELECT(s)
    PROBLEM_GROUP_ENTER
    run_iterations(n, hi, first, min(block, last - first + 1), tenure, stop_target, max_no_improve, tie_seeds[s],
                   tie_mask, ctrl, trail_all + trail_stride * s, tabu_all + attributes * s,
                   best_all + n * s, best_delta, best_key PROBLEM_ARGS);
    PROBLEM_GROUP_LEAVE
}
#endif
