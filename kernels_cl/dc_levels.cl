/* Level kernels of the breadth-first divide-and-conquer transformer (host: hpu/dc/spec.py).
 *
 * López-Ortiz, Salinger and Suderman 2014, section 4.2, algorithm 3: one
 * work-item per subproblem K of a level with M subproblems of S elements each
 * (children of CS = S / B elements).  The host puts before this file: the
 * element type T, B (children per subproblem), LEAF, IS_FLOAT, DC_NAME, the
 * spec's preamble, and the spec's snippets wrapped as
 *     void dc_combine(src, dst, K, M, S, CS)              children contiguous
 *     void dc_combine_interleaved(src, dst, K, M, S, CS)  paper 6.3 layout
 *     void dc_base(x, K, S)                               (with HAS_BASE)
 * Kernel names are DC_NAME pasted with the variant: mergesort_combine, ...
 */

#define DC_CAT2(a, b) a##_##b
#define DC_CAT(a, b) DC_CAT2(a, b)
#define DC_KERNEL(variant) DC_CAT(DC_NAME, variant)

__kernel void DC_KERNEL(combine)(__global const T *restrict src, __global T *restrict dst, ulong M, ulong S)
{
    const ulong K = get_global_id(0);
    if (K < M) dc_combine(src, dst, K, M, S, S / B);
}

/* Reads the children in the interleaved layout of M * B segments, writes in that of M (paper 6.3: coalesced). */
__kernel void DC_KERNEL(combine_interleaved)(__global const T *restrict src, __global T *restrict dst, ulong M,
                                             ulong S)
{
    const ulong K = get_global_id(0);
    if (K < M) dc_combine_interleaved(src, dst, K, M, S, S / B);
}

#if HAS_BASE
__kernel void DC_KERNEL(base)(__global T *x, ulong M, ulong S)
{
    const ulong K = get_global_id(0);
    if (K < M) dc_base(x, K, S);
}
#endif

/* Layout changes: element j of segment k at k * S + j (contiguous) <-> j * M + k (interleaved). */
__kernel void interleave(__global const T *restrict src, __global T *restrict dst, ulong M, ulong S)
{
    const ulong g = get_global_id(0);
    if (g >= M * S) return;
    const ulong k = g / S, j = g % S;
    dst[j * M + k] = src[g];
}

__kernel void deinterleave(__global const T *restrict src, __global T *restrict dst, ulong M, ulong S)
{
    const ulong g = get_global_id(0);
    if (g >= M * S) return;
    const ulong k = g / S, j = g % S;
    dst[g] = src[j * M + k];
}
