/* Calibration microbenchmarks (paper, section 6.4).
 *
 * segment_add: elementwise sum of two arrays in which work-item w handles
 * the contiguous segment [w*per, min((w+1)*per, n)), as the paper used to
 * estimate g (fig. 5).
 * empty: an empty kernel, for the launch overhead.
 */
__kernel void segment_add(__global const float *restrict a, __global const float *restrict b,
                          __global float *restrict c, ulong n, ulong per)
{
    const ulong w = get_global_id(0);
    const ulong s = w * per;
    const ulong e = min(s + per, n);
    for (ulong i = s; i < e; ++i)
        c[i] = a[i] + b[i];
}

__kernel void empty(__global int *x)
{
}
