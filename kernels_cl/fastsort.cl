/* Stable device-resident merge sort ("fast mode", device half).
 *
 * Pipeline for n keys (host: hpu/sorting/device.py):
 *   1. leaf_sort: each work-group sorts one block of TILE = WG * ITEMS keys in
 *      local memory (register sort of ITEMS keys per work-item, then log2(WG)
 *      merge-path merges in local memory).  One launch for all blocks.  The
 *      same kernel sorts rows of at most TILE keys, one work-group a row.
 *   2. pass `level` (0, 1, ...) merges runs of w = TILE << level keys pairwise:
 *      partition_pass: one work-item per output tile finds, by a binary search
 *      along the merge-path diagonal (co-rank), how many of the tile's
 *      predecessors in its pair come from the left run;
 *      merge_pass: one work-group per output tile of TILE keys loads its
 *      slices of both runs into local memory, merges them (merge path again,
 *      per work-item) and stores the tile with coalesced writes.
 *   partition_ranges / merge_ranges do the same for two arbitrary sorted
 *   ranges (e.g. a CPU-sorted and a device-sorted part).
 *
 * Order: a strict weak order equal to numpy's.  Integers: "<".  Floats: "<",
 * with every NaN greater than every number and all NaNs equal; -0.0 == +0.0.
 * Every merge takes the left input first on ties and the register sort only
 * swaps strictly inverted neighbours, so the sort is stable.
 *
 * Sources: O. Green, R. McColl, D. A. Bader, "GPU merge path: a GPU merging
 * algorithm", ICS 2012; S. Odeh, O. Green, Z. Mwassi, O. Shmueli, Y. Birk,
 * "Merge path - parallel merging made simple", IPDPSW 2012; S. Baxter,
 * moderngpu "Mergesort" (NVIDIA Research, 2013) for the block-sort layout.
 *
 * Macros set by the host:
 *   KEY_T         key type: int, uint, long, ulong, float or double
 *   KEY_PAD       a key no key is less than (INT_MAX, ..., NAN): pads the last
 *                 leaf block; stability keeps the pads behind equal real keys
 *   KEY_IS_FLOAT  1 for float and double (NaN-aware order), else 0
 *   KEY_FP64      1 when KEY_T is double
 *   WG            work-group size of the tile kernels, a power of two
 *   ITEMS         keys per work-item (odd: the strided local-memory accesses
 *                 lid * ITEMS + k are then free of bank conflicts)
 */

#if KEY_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define TILE (WG * ITEMS)

/* Helpers take private arrays by pointer: inlined, those stay in registers. */
#define HELPER static inline __attribute__((always_inline))

HELPER bool key_less(KEY_T a, KEY_T b)
{
#if KEY_IS_FLOAT
    return a < b || (b != b && a == a); /* b is NaN, a is not */
#else
    return a < b;
#endif
}

/* Co-rank: the number of keys of a[0, na) among the first diag keys of the
 * stable merge of a and b (ties: a first).  Binary search on the merge-path
 * diagonal: a[mid] precedes b[diag - 1 - mid] unless b[...] < a[mid]. */
#define DEFINE_CO_RANK(NAME, AS, IDX)                                                   \
    HELPER IDX NAME(AS const KEY_T *a, IDX na, AS const KEY_T *b, IDX nb, IDX diag)     \
    {                                                                                   \
        IDX lo = max((IDX)0, diag - nb), hi = min(diag, na);                            \
        while (lo < hi) {                                                               \
            const IDX mid = (lo + hi) >> 1;                                             \
            if (key_less(b[diag - 1 - mid], a[mid]))                                    \
                hi = mid;                                                               \
            else                                                                        \
                lo = mid + 1;                                                           \
        }                                                                               \
        return lo;                                                                      \
    }

DEFINE_CO_RANK(co_rank_global, __global, long)
DEFINE_CO_RANK(co_rank_local, __local, int)

/* ITEMS consecutive outputs of the stable merge of s[ai, a_end) and
 * s[bi, b_end), from the merge-path point (ai, bi), into registers r.
 * Reads s only at indices <= ai + ITEMS and <= b_end; callers keep both
 * within TILE (the local arrays hold TILE + 1 keys). */
HELPER void merge_serial(__local const KEY_T *s, int ai, const int a_end, int bi, const int b_end,
                         KEY_T *r)
{
    KEY_T ak = s[ai], bk = s[bi];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const bool take_a = bi >= b_end || (ai < a_end && !key_less(bk, ak));
        r[k] = take_a ? ak : bk;
        ai += take_a;
        bi += !take_a;
        const KEY_T next = s[take_a ? ai : bi];
        ak = take_a ? next : ak;
        bk = take_a ? bk : next;
    }
}

HELPER void compare_swap(KEY_T *x, KEY_T *y)
{
    const KEY_T a = *x, b = *y;
    const bool swap = key_less(b, a);
    *x = swap ? b : a;
    *y = swap ? a : b;
}

/* Odd-even transposition sort of ITEMS registers (stable: only strictly
 * inverted neighbours swap). */
HELPER void sort_registers(KEY_T *r)
{
#pragma unroll
    for (int phase = 0; phase < (ITEMS + 1) / 2; ++phase) {
#pragma unroll
        for (int k = 0; k + 1 < ITEMS; k += 2)
            compare_swap(&r[k], &r[k + 1]);
#pragma unroll
        for (int k = 1; k + 1 < ITEMS; k += 2)
            compare_swap(&r[k], &r[k + 1]);
    }
}

HELPER void registers_to_local(__local KEY_T *s, const KEY_T *r)
{
    const int base = (int)get_local_id(0) * ITEMS;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
        s[base + k] = r[k];
}

/* Merge out[d0, d1) of one pair from a[i0, i1) and b[d0 - i0, d1 - i1)
 * through local memory s (TILE + 1 keys); d1 - d0 <= TILE. */
HELPER void merge_tile(__local KEY_T *s, __global const KEY_T *a, __global const KEY_T *b,
                       __global KEY_T *out, const long d0, const long d1, const long i0, const long i1)
{
    const int lid = (int)get_local_id(0);
    const int na = (int)(i1 - i0);
    const int total = (int)(d1 - d0);
    const long j0 = d0 - i0;
    for (int idx = lid; idx < total; idx += WG) {
        if (idx < na)
            s[idx] = a[i0 + idx];
        else
            s[idx] = b[j0 + (idx - na)];
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    const int diag = min(lid * ITEMS, total);
    const int i = co_rank_local(s, na, s + na, total - na, diag);
    KEY_T r[ITEMS];
    merge_serial(s, i, na, na + diag - i, total, r);
    barrier(CLK_LOCAL_MEM_FENCE);

    registers_to_local(s, r);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int idx = lid; idx < total; idx += WG)
        out[d0 + idx] = s[idx];
}

/* Sort each block src[b, min(b + block, n)), b = start + g * block, into the
 * same place of dst; block <= TILE.  The merge sort's leaves are blocks of
 * TILE from 0; rows of m <= TILE keys (a segmented sort) are blocks of m.
 * dst may be src (each work-group reads its whole block before it writes). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void leaf_sort(__global const KEY_T *src, __global KEY_T *dst, const long start, const long n, const int block)
{
    __local KEY_T s[TILE + 1];
    const int lid = (int)get_local_id(0);
    const long base = start + (long)get_group_id(0) * block;
    const int count = (int)min((long)block, n - base);
    for (int idx = lid; idx < TILE; idx += WG)
        s[idx] = idx < count ? src[base + idx] : KEY_PAD;
    barrier(CLK_LOCAL_MEM_FENCE);

    KEY_T r[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
        r[k] = s[lid * ITEMS + k];
    sort_registers(r);

    /* Runs of ITEMS * coop / 2 keys, merged by coop work-items per pair. */
    for (int coop = 2; coop <= WG; coop <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        registers_to_local(s, r);
        barrier(CLK_LOCAL_MEM_FENCE);
        const int run = (coop >> 1) * ITEMS;
        const int start = (lid & ~(coop - 1)) * ITEMS;
        const int diag = (lid & (coop - 1)) * ITEMS;
        const int i = co_rank_local(s + start, run, s + start + run, run, diag);
        merge_serial(s, start + i, start + run, start + run + diag - i, start + 2 * run, r);
    }

    barrier(CLK_LOCAL_MEM_FENCE);
    registers_to_local(s, r);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int idx = lid; idx < count; idx += WG)
        dst[base + idx] = s[idx];
}

/* Pair geometry of pass `level` (runs of w = TILE << level keys): the pair
 * holding output tile t starts at *pair; its left run has *na keys, the pair
 * *len keys (both ragged at the end of the data). */
HELPER void pass_pair(const long t, const long n, const int level, long *pair, long *na, long *len)
{
    const long w = (long)TILE << level;
    *pair = ((t >> (level + 1)) << (level + 1)) * TILE;
    *na = min(w, n - *pair);
    *len = min(2 * w, n - *pair);
}

/* part[t] = co-rank of output tile t's start within its pair (t < tiles). */
__kernel void partition_pass(__global const KEY_T *src, const long n, const int level,
                             __global long *part, const long tiles)
{
    const long t = (long)get_global_id(0);
    if (t >= tiles)
        return;
    long pair, na, len;
    pass_pair(t, n, level, &pair, &na, &len);
    part[t] = co_rank_global(src + pair, na, src + pair + na, len - na, t * TILE - pair);
}

/* Merge sorted runs src[k w, (k + 1) w), w = TILE << level, pairwise into
 * dst; one work-group per output tile.  No tile straddles two pairs. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void merge_pass(__global const KEY_T *restrict src, __global KEY_T *restrict dst, const long n,
                const int level, __global const long *part)
{
    __local KEY_T s[TILE + 1];
    const long t = (long)get_group_id(0);
    long pair, na, len;
    pass_pair(t, n, level, &pair, &na, &len);
    const long d0 = t * TILE - pair;
    const long d1 = min(d0 + TILE, len);
    const long i1 = d1 == len ? na : part[t + 1];
    merge_tile(s, src + pair, src + pair + na, dst + pair, d0, d1, part[t], i1);
}

/* part[t] = co-rank of output position t * TILE in the merge of a and b. */
__kernel void partition_ranges(__global const KEY_T *a, const long a_off, const long na,
                               __global const KEY_T *b, const long b_off, const long nb,
                               __global long *part, const long tiles)
{
    const long t = (long)get_global_id(0);
    if (t < tiles)
        part[t] = co_rank_global(a + a_off, na, b + b_off, nb, t * TILE);
}

/* out[out_off, out_off + na + nb) = stable merge of a[a_off, +na) and
 * b[b_off, +nb); one work-group per output tile.  out must not overlap the
 * inputs. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void merge_ranges(__global const KEY_T *a, const long a_off, const long na,
                  __global const KEY_T *b, const long b_off, const long nb,
                  __global KEY_T *out, const long out_off, __global const long *part)
{
    __local KEY_T s[TILE + 1];
    const long t = (long)get_group_id(0);
    const long d0 = t * TILE;
    const long d1 = min(d0 + TILE, na + nb);
    const long i1 = d1 == na + nb ? na : part[t + 1];
    merge_tile(s, a + a_off, b + b_off, out + out_off, d0, d1, part[t], i1);
}

/* Where each query key falls in the sorted s[0, n): bounds[2 j] is the
 * number of keys of s less than q[j], bounds[2 j + 1] the number not
 * greater than it (numpy's order); one work-item per bound.  The exchange
 * sort's cuts (hpu/sorting/exchange.py) come from these. */
__kernel void rank_bounds(__global const KEY_T *s, const long n, __global const KEY_T *q, const int m,
                          __global long *bounds)
{
    const int i = (int)get_global_id(0);
    if (i >= 2 * m)
        return;
    const KEY_T x = q[i >> 1];
    const bool upper = i & 1;
    long lo = 0, hi = n;
    while (lo < hi) {
        const long mid = (lo + hi) >> 1;
        if (upper ? !key_less(x, s[mid]) : key_less(s[mid], x))
            lo = mid + 1;
        else
            hi = mid;
    }
    bounds[i] = lo;
}
