/* HW/SW partitioning (problem P of Hou et al., Front. Comput. Sci. 2019,
 * section 2), 2-flip neighbourhood (used with tabu_reduce.cl).
 *
 * x[u] = 1: task u in software, 0: in hardware.  Minimise the hardware cost
 * H(x) = sum_u h_u (1 - x_u) subject to S(x) + C(x) <= R (equations 1-5).
 * Per-node state kept on the device and updated in place:
 *   dh[u] = h_u (2 x_u - 1)                      change of H when u alone flips;
 *   dl[u] = s_u (1 - 2 x_u) + sum_{v adj u} c_uv (1 - 2 |x_u - x_v|)
 *                                                change of S + C when u alone flips.
 * The graph is in CSR form (adj_ptr, adj_node sorted per row, adj_cost).
 */

#define PROBLEM_PARAMS , __global int *x, __global long *dh, __global long *dl, \
    __global const long *sw, __global const long *hw, __global const int *adj_ptr, \
    __global const int *adj_node, __global const long *adj_cost, __global long *slack
#define PROBLEM_ARGS , x, dh, dl, sw, hw, adj_ptr, adj_node, adj_cost, slack
#define PROBLEM_BATCH_PARAMS , __global int *x_all, __global long *dh_all, __global long *dl_all, \
    __global const long *sw, __global const long *hw, __global const int *adj_ptr, \
    __global const int *adj_node, __global const long *adj_cost, __global long *slack_all
#define PROBLEM_BATCH_SELECT(s) __global int *x = x_all + (s) * n; __global long *dh = dh_all + (s) * n; \
    __global long *dl = dl_all + (s) * n; __global long *slack = slack_all + (s);
#define SOLUTION x

/* Change of S + C when i and j flip: dl[i] + dl[j], less twice the edge
 * (i, j)'s term, whose cut state does not change. */
static inline long load_change(const uint i, const uint j PROBLEM_PARAMS)
{
    long c = 0;
    for (int e = adj_ptr[i]; e < adj_ptr[i + 1]; e++) {
        const int v = adj_node[e];
        if (v >= (int)j) {
            if (v == (int)j)
                c = adj_cost[e];
            break;
        }
    }
    const long cut = x[i] != x[j];
    return dl[i] + dl[j] - 2 * c * (1 - 2 * cut);
}

/* Flipping i and j changes H by dh[i] + dh[j]; the neighbour is feasible when
 * the change of S + C is at most slack[0] = R - S(x) - C(x) (the feasibility
 * filter of section 3.2). */
static inline int move_delta(const ulong n, const uint i, const uint j, long *delta PROBLEM_PARAMS)
{
    *delta = dh[i] + dh[j];
    return load_change(i, j PROBLEM_ARGS) <= slack[0];
}

/* Apply move (i, j) in place, in one work-group: take its load change off
 * the slack, flip x[i] and x[j], mark the move tabu until iteration `until`, then recompute dh and dl of i, j and
 * their neighbours (a node listed twice gets the same value twice). */
static inline void apply_move(const ulong n, const uint i, const uint j, const ulong move, const int until,
                              __global int *tabu_until PROBLEM_PARAMS)
{
    const uint lid = get_local_id(0);
    if (lid == 0) {
        slack[0] -= load_change(i, j PROBLEM_ARGS);
        x[i] ^= 1;
        x[j] ^= 1;
        tabu_until[move] = until;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    const int di = adj_ptr[i + 1] - adj_ptr[i];
    const int dj = adj_ptr[j + 1] - adj_ptr[j];
    for (int t = lid; t < 2 + di + dj; t += get_local_size(0)) {
        const int u = t == 0 ? (int)i : t == 1 ? (int)j
                    : t < 2 + di ? adj_node[adj_ptr[i] + t - 2] : adj_node[adj_ptr[j] + t - 2 - di];
        const int xu = x[u];
        long g = 0;
        for (int e = adj_ptr[u]; e < adj_ptr[u + 1]; e++)
            g += adj_cost[e] * (1 - 2 * (xu != x[adj_node[e]]));
        dl[u] = sw[u] * (1 - 2 * xu) + g;
        dh[u] = hw[u] * (2 * xu - 1);
    }
}
