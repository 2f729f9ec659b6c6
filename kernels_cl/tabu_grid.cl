/* One search's block of iterations over several work-groups (the grid of
 * tabu_run_group, GRID_GROUPS > 1), compiled first (hpu.tabu.engine.program_source).
 *
 * At transfer level 0 one work-group runs a whole block, on one compute unit.
 * With GRID_GROUPS work-groups, all resident at once, work-group g (its rank)
 * owns the moves m with m mod GRID_GROUPS = g: it evaluates them, reduces
 * them to its best, and keeps their values up to date; the work-groups hand
 * their bests over through global memory and wait for each other once an
 * iteration (grid_arrive), then every work-item of every work-group takes the
 * same move (the combine of tabu_reduce.cl is associative and commutative) and
 * each work-group applies it to its own copy of the solution.  A barrier
 * across work-groups needs them all resident at once: the engine asks for a
 * grid only on NVIDIA GPUs (hpu.tabu.engine.grid_shape), with at most one
 * work-group a compute unit, and there the fences are PTX (PTX_FENCE:
 * membar.gl, ordered for the whole device; the volatile loads that follow
 * bypass L1).
 *
 * OpenCL does not promise that the work-groups of a launch run at once: a
 * work-group that waits GRID_PATIENCE polls of the counter in vain sets the
 * grid's failure flag (read every 1024th poll, so that a wait that ends
 * soon reads the counter alone), every work-group that sees it stops, and the host
 * reads the flag after the launch and takes the block as a device failure
 * (hpu.tabu.engine: the CPU goes on from the block's start), never as a
 * result.
 *
 * The grid buffer (the kernel's `grid`, longs; GRID_SLOTS from the engine):
 * grid[0] the arrival counter (its low int) and the failure flag (its high
 * int), zeroed by the host before each launch, grid[GRID_SLOTS ..] the bests
 * (delta, key) of every work-group, two sets (an iteration's and the
 * next's), then each work-group's GRID_SCRATCH_BYTES of the problem's own
 * (GRID_SCRATCH(type, g)).
 */

#ifndef GRID_GROUPS
#define GRID_GROUPS 1
#endif

#if GRID_GROUPS > 1
#if PTX_FENCE  /* an NVIDIA GPU: a fence for the whole device */
#define GRID_FENCE() __asm__ volatile("membar.gl;" ::: "memory")
#else
#define GRID_FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)
#endif
#define GRID_RANK ((ulong)get_group_id(0))
#define GRID_LEADER (get_group_id(0) == 0)
#define GRID_KERNEL_PARAMS , __global long *grid
#define GRID_ENTER __local int grid_ok;
#define GRID_PARAMS , __global long *grid, __local int *grid_ok
#define GRID_ARGS , grid, &grid_ok
#define GRID_PATIENCE (1 << 24)
#define GRID_SCRATCH(type, g) \
    ((__global type *)((__global uchar *)(grid + GRID_SLOTS + 4 * GRID_GROUPS) + (g) * GRID_SCRATCH_BYTES))

/* Work-item 0 of each work-group: count this work-group's arrival at the
 * step-th barrier of the launch (from 0) and wait for every other's; 1 when
 * all arrived, 0 when the grid failed (this work-group gave up waiting, or
 * saw another's flag). */
static inline int grid_arrive(__global long *grid, const int step)
{
    volatile __global int *counter = (volatile __global int *)grid, *failed = counter + 1;
    GRID_FENCE();
    atomic_inc(counter);
    for (int polls = 1; atomic_add(counter, 0) < GRID_GROUPS * (step + 1); polls++)
        if (polls % 1024 == 0 && (atomic_add(failed, 0) || polls >= GRID_PATIENCE)) {  /* the flag now and then */
            atomic_xchg(failed, 1);
            return 0;
        }
    GRID_FENCE();
    return 1;
}
#else
#define GRID_RANK ((ulong)0)
#define GRID_LEADER 1
#define GRID_KERNEL_PARAMS
#define GRID_ENTER
#define GRID_PARAMS
#define GRID_ARGS
#endif
