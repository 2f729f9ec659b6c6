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

/* The same sort in a GPU's shape: every pass is three kinds of launch over
 * tiles of TILE consecutive keys, one work-group of RADIX_WG work-items each
 * (Satish, Harris and Garland, "Designing efficient sorting algorithms for
 * manycore GPUs", IPDPS 2009, section 4: per-tile counts, a scan, then a
 * scatter of each tile sorted locally so that its writes coalesce):
 *   radix_tile_count: tile g counts its digits: counts[d * G + g];
 *   radix_scan_blocks, radix_scan_sums: the exclusive prefix sums of the
 *                  counts in (digit, tile) order, as a scan of blocks of
 *                  SCAN_BLOCK counts and a scan of the blocks' sums;
 *   radix_tile_scatter: tile g sorts its keys by digit in local memory
 *                  (stable counting sorts on the digit's 4-bit halves, low
 *                  half first), then writes each at its digit's offset.
 * Digits are at most 8 bits.  Within a tile, work-item i holds the
 * RADIX_ITEMS consecutive keys from i * RADIX_ITEMS (odd, so that these
 * strided reads of local memory are free of bank conflicts).
 *
 * More macros: RADIX_WG (a power of two, at least 16), RADIX_ITEMS and SCAN_ITEMS (counts a work-item
 * scans; the host sizes the blocks' sums by it).
 */

#if defined(RADIX_WG) || defined(ONESWEEP_WG)
#ifdef RADIX_WG
#define SCAN_WG RADIX_WG
#else
#define SCAN_WG ONESWEEP_WG
#endif
/* Exclusive prefix sum of one value per work-item over the work-group of SCAN_WG (Hillis and Steele); *total gets
 * the sum.  tmp holds SCAN_WG counters; every work-item must call it. */
static uint group_scan(uint v, __local uint *tmp, uint *total)
{
    const uint lid = get_local_id(0), size = SCAN_WG;
    tmp[lid] = v;
    for (uint off = 1; off < size; off <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const uint add = lid >= off ? tmp[lid - off] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        tmp[lid] += add;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *total = tmp[size - 1];
    const uint r = tmp[lid] - v;
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
#endif

#ifdef RADIX_WG

#define TILE (RADIX_WG * RADIX_ITEMS)
#define TILE_BINS 256
#define SCAN_BLOCK (RADIX_WG * SCAN_ITEMS)
/* Counter f of a tile's (4 bits, work-item) counters, one word of padding after every 32: the scan's reads of 16
 * consecutive counters per work-item then fall in distinct banks (unpadded: 16 work-items on one bank). */
#define CNT(f) ((f) + ((f) >> 5))

__kernel __attribute__((reqd_work_group_size(RADIX_WG, 1, 1)))
void radix_tile_count(__global const KEY_T *keys, const uint n, const uint shift, const uint bins,
                      __global uint *counts)
{
    __local uint hist[TILE_BINS];
    const uint lid = get_local_id(0), g = get_group_id(0), G = get_num_groups(0);
    for (uint b = lid; b < bins; b += RADIX_WG)
        hist[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint lo = g * TILE, hi = min(n, lo + TILE);
    for (uint i = lo + lid; i < hi; i += RADIX_WG)
        atomic_inc(&hist[(image(keys[i]) >> shift) & (bins - 1)]);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint b = lid; b < bins; b += RADIX_WG)
        counts[b * G + g] = hist[b];
}

/* Exclusive scan of SCAN_ITEMS consecutive values per work-item, plus carry; returns the values' total. */
static uint scan_run(__global uint *v, const uint lo, const uint m, const uint carry, __local uint *tmp)
{
    uint mine[SCAN_ITEMS], sum = 0, total;
    const uint base = lo + get_local_id(0) * SCAN_ITEMS;
    for (uint j = 0; j < SCAN_ITEMS; j++) {
        mine[j] = base + j < m ? v[base + j] : 0;
        sum += mine[j];
    }
    uint run = group_scan(sum, tmp, &total) + carry;
    for (uint j = 0; j < SCAN_ITEMS; j++) {
        if (base + j < m)
            v[base + j] = run;
        run += mine[j];
    }
    return total;
}

__kernel __attribute__((reqd_work_group_size(RADIX_WG, 1, 1)))
void radix_scan_blocks(__global uint *counts, const uint m, __global uint *sums)
{
    __local uint tmp[RADIX_WG];
    const uint total = scan_run(counts, get_group_id(0) * SCAN_BLOCK, m, 0, tmp);
    if (get_local_id(0) == 0)
        sums[get_group_id(0)] = total;
}

__kernel __attribute__((reqd_work_group_size(RADIX_WG, 1, 1)))
void radix_scan_sums(__global uint *sums, const uint m)
{
    __local uint tmp[RADIX_WG];
    uint carry = 0;
    for (uint lo = 0; lo < m; lo += SCAN_BLOCK)
        carry += scan_run(sums, lo, m, carry, tmp);
}

#define DIGIT(k) ((image(k) >> shift) & (bins - 1))

__kernel __attribute__((reqd_work_group_size(RADIX_WG, 1, 1)))
void radix_tile_scatter(__global const KEY_T *keys, __global KEY_T *out, const uint n, const uint shift,
                        const uint bins, __global const uint *counts, __global const uint *sums)
{
    __local KEY_T tile[TILE];
    __local uint cnt[CNT(16 * RADIX_WG)];
    __local uint start[TILE_BINS], where[TILE_BINS], tmp[RADIX_WG];
    const uint lid = get_local_id(0), g = get_group_id(0), G = get_num_groups(0);
    const uint lo = g * TILE, len = min(n - lo, (uint)TILE);
    for (uint i = lid; i < len; i += RADIX_WG)
        tile[i] = keys[lo + i];
    for (uint b = lid; b < bins; b += RADIX_WG) {
        const uint c = b * G + g;
        where[b] = counts[c] + sums[c / SCAN_BLOCK];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint sub = 0; (1u << sub) < bins; sub += 4) {  /* a stable counting sort of the tile by 4 bits */
        KEY_T k[RADIX_ITEMS];
        uint slot[RADIX_ITEMS], mine[16], sum = 0, total;  /* slot: 4-bit digit << 16 | rank among its keys */
        for (uint c = 0; c < 16; c++)
            cnt[CNT(c * RADIX_WG + lid)] = 0;
        for (uint j = 0; j < RADIX_ITEMS; j++) {
            const uint i = lid * RADIX_ITEMS + j;
            if (i < len) {
                k[j] = tile[i];
                const uint nib = (DIGIT(k[j]) >> sub) & 15;
                slot[j] = nib << 16 | cnt[CNT(nib * RADIX_WG + lid)]++;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint c = 0; c < 16; c++) {  /* counts in (4 bits, work-item) order: each work-item scans 16 */
            mine[c] = cnt[CNT(lid * 16 + c)];
            sum += mine[c];
        }
        uint run = group_scan(sum, tmp, &total);
        for (uint c = 0; c < 16; c++) {
            cnt[CNT(lid * 16 + c)] = run;
            run += mine[c];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint j = 0; j < RADIX_ITEMS; j++)
            if (lid * RADIX_ITEMS + j < len)
                tile[cnt[CNT((slot[j] >> 16) * RADIX_WG + lid)] + (slot[j] & 0xffff)] = k[j];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (uint i = lid; i < len; i += RADIX_WG) {  /* where each digit's run starts in the sorted tile */
        const uint d = DIGIT(tile[i]);
        if (i == 0 || DIGIT(tile[i - 1]) != d)
            start[d] = i;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i = lid; i < len; i += RADIX_WG) {
        const KEY_T k = tile[i];
        const uint d = DIGIT(k);
        out[where[d] + i - start[d]] = k;
    }
}

#endif

/* The same sort in one pass over the keys a digit ("onesweep": Adinets and Merrill, "Onesweep: a faster least
 * significant digit radix sort for GPUs", 2022), for NVIDIA GPUs (inline PTX: warps of 32 and their ballots,
 * sm_70 on).  Before the passes, onesweep_count counts every pass's digits in one read of the keys and
 * onesweep_scan turns the counts into each digit's start.  Then each pass is one launch of onesweep_pass over tiles
 * of OS_TILE consecutive keys, one work-group of ONESWEEP_WG work-items a tile, taken in order through an atomic
 * counter (so that a tile's predecessors have started):
 *   the work-group ranks its keys by digit, stably: each warp takes the keys of its stretch of the tile in order,
 *   32 at a time, and finds those of one digit among them by a ballot a bit; a warp's counters per digit, scanned
 *   across the warps, place each key within its digit's run of the tile;
 *   the work-group publishes its count of each digit and looks back over the tiles before it for their sum
 *   ("decoupled look-back", Merrill and Garland, "Single-pass parallel prefix scan with decoupled look-back",
 *   2016): a tile's status word per digit holds a flag (its count alone, or the sum of every tile up to it) and
 *   the value; a look-back stops at the first sum;
 *   the keys are laid out in local memory in digit order and written out, each digit's run to its place: the
 *   digit's start over all keys (the scan of onesweep_count's counts), plus the tiles' before it, plus its rank.
 * Keys of one digit keep their order within a tile, and tiles are placed in tile order: each pass is stable.
 * Status words hold counts below 2^30.
 *
 * More macros: ONESWEEP_WG (256: a work-item per digit), ONESWEEP_ITEMS (keys a work-item).
 */

#ifdef ONESWEEP_WG

#define OS_TILE (ONESWEEP_WG * ONESWEEP_ITEMS)
#define OS_WARPS (ONESWEEP_WG / 32)
#define OS_AGGREGATE (1u << 30)
#define OS_PREFIX (2u << 30)
#define OS_VALUE ((1u << 30) - 1)

static inline uint ballot(uint x)
{
    uint m;
    asm volatile("{ .reg .pred p; setp.ne.u32 p, %1, 0; vote.sync.ballot.b32 %0, p, 0xffffffff; }"
                 : "=r"(m) : "r"(x));
    return m;
}

/* The lanes of the warp whose key is valid as this lane's is and whose digit of `width` bits equals this lane's:
 * a ballot a bit (as CUB's MatchAny: match.any.sync is slower). */
static inline uint peers_of(const uint valid, const uint d, const uint width)
{
    const uint v = ballot(valid);
    uint m = valid ? v : ~v;
    for (uint b = 0; b < width; b++) {
        const uint bit = (d >> b) & 1, on = ballot(bit);
        m &= bit ? on : ~on;
    }
    return m;
}

static inline uint lanemask_lt(void)
{
    uint m;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
    return m;
}

static inline void warp_sync(void)
{
    asm volatile("bar.warp.sync 0xffffffff;" ::: "memory");
}

/* counts[p * 256 + d]: the keys of digit d in pass p (bits [p * digit, min(p * digit + digit, bits)) of the
 * image), for every pass p < ceil(bits / digit); counts start at zero. */
__kernel __attribute__((reqd_work_group_size(ONESWEEP_WG, 1, 1)))
void onesweep_count(__global const KEY_T *keys, const uint n, const uint digit, const uint bits,
                    __global uint *counts)
{
    const uint passes = (bits + digit - 1) / digit;
    __local uint hist[8 * 256];
    const uint lid = get_local_id(0);
    for (uint b = lid; b < passes * 256; b += ONESWEEP_WG)
        hist[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i = get_global_id(0); i < n; i += get_global_size(0)) {
        const ORDER_T k = image(keys[i]);
        for (uint p = 0; p < passes; p++) {
            const uint width = min(digit, bits - p * digit);
            atomic_inc(&hist[p * 256 + (uint)((k >> (p * digit)) & (((ORDER_T)1 << width) - 1))]);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint b = lid; b < passes * 256; b += ONESWEEP_WG)
        if (hist[b])
            atomic_add(&counts[b], hist[b]);
}

/* counts[p * 256 + d] turned into where digit d's keys start in pass p: exclusive prefix sums, one work-group. */
__kernel __attribute__((reqd_work_group_size(ONESWEEP_WG, 1, 1)))
void onesweep_scan(__global uint *counts, const uint passes)
{
    __local uint tmp[ONESWEEP_WG];
    for (uint p = 0; p < passes; p++) {
        const uint c = counts[p * 256 + get_local_id(0)];
        uint total;
        counts[p * 256 + get_local_id(0)] = group_scan(c, tmp, &total);
    }
}

__kernel __attribute__((reqd_work_group_size(ONESWEEP_WG, 1, 1)))
void onesweep_pass(__global const KEY_T *src, __global KEY_T *dst, const uint n, const uint shift, const uint bins,
                   const uint pass, const uint passes, __global uint *aux)
{
    /* aux: every pass's start of each digit (onesweep_scan's), then every pass's tile counter, then every
     * pass's status word per (tile, digit); the counters and status words start at zero */
    __global const uint *counts = aux + pass * 256;
    __global uint *next_tile = aux + passes * 256 + pass;
    __global uint *status = aux + passes * 257 + (size_t)pass * ((n + OS_TILE - 1) / OS_TILE) * 256;
    __local KEY_T tile[OS_TILE];
    __local uint warp_counts[OS_WARPS * 256];
    __local uint start[256], place[256], tmp[ONESWEEP_WG];
    __local uint tile_id;
    const uint lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
    if (lid == 0)
        tile_id = atomic_inc(next_tile);
    for (uint i = lid; i < OS_WARPS * 256; i += ONESWEEP_WG)
        warp_counts[i] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint t = tile_id, lo = t * OS_TILE;
    const uint below = lanemask_lt(), width = 31 - clz(bins);

    /* Each warp's keys in order, 32 at a time (all loaded first: the ranking's warp barriers would order each load
     * after the ranks before it): its count of each digit so far, and each key's rank among them.  Keys past the
     * end (digit 256) match only each other and get no rank. */
    KEY_T k[ONESWEEP_ITEMS];
    uint dr[ONESWEEP_ITEMS]; /* digit << 16 | rank: one register a key */
#pragma unroll
    for (uint j = 0; j < ONESWEEP_ITEMS; j++) {
        const uint i = lo + warp * 32 * ONESWEEP_ITEMS + j * 32 + lane;
        k[j] = i < n ? src[i] : (KEY_T)0;
        dr[j] = (i < n ? (uint)((image(k[j]) >> shift) & (bins - 1)) : 256) << 16;
    }
#pragma unroll
    for (uint j = 0; j < ONESWEEP_ITEMS; j++) {
        const uint d = dr[j] >> 16, valid = d < 256;
        const uint peers = peers_of(valid, d, width);
        const uint before = popcount(peers & below);
        const uint base = valid ? warp_counts[warp * 256 + d] : 0;
        warp_sync();
        if (valid && before == 0)
            warp_counts[warp * 256 + d] = base + popcount(peers);
        warp_sync();
        dr[j] |= base + before;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* Work-item d: the warps' counts of digit d scanned in warp order, the tile's count of it published, the
     * counts of the tiles before looked back on. */
    const uint d = lid;
    uint total = 0;
    for (uint w = 0; w < OS_WARPS; w++) {
        const uint c = warp_counts[w * 256 + d];
        warp_counts[w * 256 + d] = total;
        total += c;
    }
    __global volatile uint *st = (__global volatile uint *)status;
    uint before_tile = 0;
    if (t == 0) {
        atomic_xchg(&status[d], OS_PREFIX | total);
    } else {
        atomic_xchg(&status[t * 256 + d], OS_AGGREGATE | total);
        for (uint j = t; j-- > 0;) {
            uint s;
            do
                s = st[j * 256 + d];
            while (s == 0);
            before_tile += s & OS_VALUE;
            if (s & OS_PREFIX)
                break;
        }
        atomic_xchg(&status[t * 256 + d], OS_PREFIX | (before_tile + total));
    }
    uint all;
    const uint in_tile = group_scan(total, tmp, &all); /* where digit d's run starts in the tile; counts: overall */
    start[d] = in_tile;
    place[d] = counts[d] + before_tile - in_tile;
    barrier(CLK_LOCAL_MEM_FENCE);

#pragma unroll
    for (uint j = 0; j < ONESWEEP_ITEMS; j++) {
        const uint d = dr[j] >> 16;
        if (d < 256)
            tile[start[d] + warp_counts[warp * 256 + d] + (dr[j] & 0xffff)] = k[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint len = min(n - lo, (uint)OS_TILE);
    for (uint i = lid; i < len; i += ONESWEEP_WG) {
        const KEY_T key = tile[i];
        dst[place[(uint)((image(key) >> shift) & (bins - 1))] + i] = key;
    }
}

#endif
