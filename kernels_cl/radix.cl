/* Stable LSD radix sort for CPU OpenCL devices (PoCL and the like).
 *
 * A CPU runs a work-group as a loop over its work-items, so the kernels here
 * give each work-item a whole chunk of the keys and a sequential loop, as a
 * CPU radix sort does: work-groups of one work-item, an NDRange of T chunks
 * (a few per compute unit).  Pass `shift` (digit d = bits [shift, shift +
 * digit_bits) of the key's order-preserving image):
 *   radix_count:   chunk t counts its digits: counts[d * T + t];
 *   radix_offsets: one work-item turns the counts into exclusive prefix sums
 *                  in (digit, chunk) order: where chunk t's keys of digit d go;
 *   radix_scatter: chunk t walks its keys in order and writes each at the
 *                  next slot of its digit.
 * Keys of one digit keep their order within a chunk, and chunks are placed in
 * chunk order, so each pass is stable and ceil(bits / digit_bits) passes sort
 * (least significant digit first).  The keys move unchanged; only the digit is
 * taken from their image, so floats keep their bits (-0.0, NaN payloads).
 *
 * Order (numpy's): integers by value; floats by value with -0.0 == +0.0 and
 * every NaN after every number, all NaNs equal.  Image: unsigned keys as
 * they are; signed keys with the sign bit flipped; floats canonicalised
 * (NaN -> all ones, -0.0 -> +0.0), then negatives bit-flipped and the sign
 * bit set on the others (the usual order-preserving float-to-integer map).
 *
 * Source: the LSD radix sort of Knuth, The Art of Computer Programming vol. 3
 * (section 5.2.5), with per-chunk counts and offsets as in Zagha and Blelloch,
 * "Radix sort for vector multiprocessors", Supercomputing 1991.
 *
 * Macros set by the host:
 *   KEY_T       key type: int, uint, long, ulong, float or double
 *   ORDER_T     unsigned integer type of the same size (uint or ulong)
 *   KEY_KIND    0 unsigned, 1 signed, 2 float
 *   AS_ORDER    as_uint or as_ulong: a float's bits as ORDER_T
 *   KEY_FP64    1 when KEY_T is double
 *   RADIX_BITS  the largest digit width: each chunk keeps 2^RADIX_BITS counters
 */

#if KEY_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define MAX_BINS (1u << RADIX_BITS)
#define TOP_BIT ((ORDER_T)1 << (8 * sizeof(ORDER_T) - 1))

static inline ORDER_T image(KEY_T k)
{
#if KEY_KIND == 0
    return k;
#elif KEY_KIND == 1
    return (ORDER_T)k ^ TOP_BIT;
#else
    if (k != k)
        return (ORDER_T)0 - 1;
    const ORDER_T u = k == 0 ? 0 : AS_ORDER(k);
    return (u & TOP_BIT) ? ~u : u | TOP_BIT;
#endif
}

/* Chunk t of T: keys [lo, hi) of n. */
#define CHUNK(n, t, T, lo, hi)                         \
    const uint chunk = ((n) + (T) - 1) / (T);          \
    const uint lo = min((n), (t) * chunk);             \
    const uint hi = min((n), lo + chunk);

__kernel void radix_count(__global const KEY_T *keys, const uint n, const uint shift, const uint bins,
                          __global uint *counts)
{
    const uint t = get_global_id(0), T = get_global_size(0);
    CHUNK(n, t, T, lo, hi)
    uint c[MAX_BINS];
    for (uint b = 0; b < bins; b++)
        c[b] = 0;
    for (uint i = lo; i < hi; i++)
        c[(image(keys[i]) >> shift) & (bins - 1)]++;
    for (uint b = 0; b < bins; b++)
        counts[b * T + t] = c[b];
}

__kernel void radix_offsets(__global uint *counts, const uint m)
{
    uint sum = 0;
    for (uint i = 0; i < m; i++) {
        const uint c = counts[i];
        counts[i] = sum;
        sum += c;
    }
}

__kernel void radix_scatter(__global const KEY_T *keys, __global KEY_T *out, const uint n, const uint shift,
                            const uint bins, __global const uint *offsets)
{
    const uint t = get_global_id(0), T = get_global_size(0);
    CHUNK(n, t, T, lo, hi)
    uint o[MAX_BINS];
    for (uint b = 0; b < bins; b++)
        o[b] = offsets[b * T + t];
    for (uint i = lo; i < hi; i++) {
        const KEY_T k = keys[i];
        out[o[(image(k) >> shift) & (bins - 1)]++] = k;
    }
}
