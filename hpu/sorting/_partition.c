/* The CPU's partition of keys by splitters, the step of a sample sort that numpy has no single call for.  A plain C
 * library (no Python API), loaded by hpu.sorting.cpu through ctypes, which releases the GIL around each call.
 *
 * hpu_bucket_counts: the bucket of every key, the number of splitters that the pair (key, position) sorts after, in
 * numpy's order (NaN after every number, -0.0 level with +0.0; level keys ordered by position), and the keys a
 * bucket.  Each key is mapped to an unsigned integer in the same order (equal keys to one integer), and a table
 * over that integer's leading bits below the splitters' common range says which splitters a key with those bits
 * can fall between: the bucket is the table's entry, plus what a comparison with the few splitters that share the
 * key's entry adds (a table of splitters in the manner of a radix sort's digit; the comparisons by pairs (key,
 * position) keep the split exact and stable).
 *
 * With at most SMALL_MAX splitters (a split between a few units) each key is compared with every splitter instead,
 * in a loop the compiler vectorizes.
 *
 * hpu_scatter: every element to the next free slot of its bucket (offsets advance), so that each bucket keeps its
 * elements in input order: the scatter pass of a stable counting sort by bucket. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The table's entries: keys below the first splitter, 2^TABLE_BITS ranges of equal width from the first to the last
 * splitter's integer, keys above. */
#define TABLE_BITS 11
#define SLOTS ((1 << TABLE_BITS) + 2)
/* Splitters in one entry up to which a key is compared with each; more (many equal splitters: few distinct keys)
 * are binary-searched. */
#define SCAN_MAX 4

/* Keys as unsigned integers in numpy's order. */
static inline uint64_t order_i8(int8_t v) { return (uint8_t)v ^ 0x80u; }
static inline uint64_t order_i16(int16_t v) { return (uint16_t)v ^ 0x8000u; }
static inline uint64_t order_i32(int32_t v) { return (uint32_t)v ^ 0x80000000u; }
static inline uint64_t order_i64(int64_t v) { return (uint64_t)v ^ 0x8000000000000000u; }
static inline uint64_t order_u(uint64_t v) { return v; }
static inline uint64_t order_f32(float v)
{
    uint32_t b;
    v = v == 0 ? 0.0f : v; /* -0.0 level with +0.0 */
    memcpy(&b, &v, 4);
    b = (b >> 31) ? ~b : (b | 0x80000000u);
    return v != v ? UINT64_MAX : b; /* every NaN level, after every number */
}
static inline uint64_t order_f64(double v)
{
    uint64_t b;
    v = v == 0 ? 0.0 : v;
    memcpy(&b, &v, 8);
    b = (b >> 63) ? ~b : (b | 0x8000000000000000u);
    return v != v ? UINT64_MAX : b;
}

typedef struct {
    uint64_t low;       /* the first splitter's integer */
    int shift;          /* an entry covers 2^shift integers */
    uint8_t first[SLOTS]; /* splitters before the entry's range */
    uint8_t count[SLOTS]; /* splitters in it */
} table_t;

static inline int slot(const table_t *t, uint64_t u)
{
    if (u < t->low)
        return 0;
    const uint64_t r = (u - t->low) >> t->shift;
    return r >= (1u << TABLE_BITS) ? SLOTS - 1 : (int)r + 1;
}

static void build(table_t *t, const uint64_t *su, int nsplit)
{
    t->low = su[0];
    t->shift = 0;
    while (((su[nsplit - 1] - su[0]) >> t->shift) >= (1u << TABLE_BITS))
        t->shift++;
    memset(t->count, 0, sizeof t->count);
    for (int j = 0; j < nsplit; j++)
        t->count[slot(t, su[j])]++;
    for (int s = 0, before = 0; s < SLOTS; s++) {
        t->first[s] = (uint8_t)before;
        before += t->count[s];
    }
}

/* The bucket of the pair (u, p): splitters (su, sp) sorted; the key sorts after those with su < u, or su == u and
 * sp < p. */
static inline int bucket(const table_t *t, const uint64_t *su, const int64_t *sp, uint64_t u, int64_t p)
{
    const int s = slot(t, u);
    int lo = t->first[s], n = t->count[s];
    if (n <= SCAN_MAX) {
        int j = lo;
        for (int q = lo; q < lo + n; q++)
            j += (su[q] < u) | ((su[q] == u) & (sp[q] < p));
        return j;
    }
    while (n > 0) { /* the first of [lo, lo + n) the key does not sort after */
        const int half = n / 2, q = lo + half;
        if ((su[q] < u) | ((su[q] == u) & (sp[q] < p))) {
            lo = q + 1;
            n -= half + 1;
        } else {
            n = half;
        }
    }
    return lo;
}

#define DEFINE_COUNTS(NAME, T, ORDER)                                                                                  \
    static void counts_##NAME(const T *x, int64_t m, int64_t start, const T *keys, const int64_t *pos, int nsplit,   \
                              uint8_t *ids, int64_t *counts)                                                           \
    {                                                                                                                  \
        uint64_t su[255];                                                                                              \
        table_t t;                                                                                                     \
        for (int j = 0; j < nsplit; j++)                                                                               \
            su[j] = ORDER(keys[j]);                                                                                    \
        build(&t, su, nsplit);                                                                                         \
        for (int64_t i = 0; i < m; i++)                                                                                \
            ids[i] = (uint8_t)bucket(&t, su, pos, ORDER(x[i]), start + i);                                             \
        for (int64_t i = 0; i < m; i++)                                                                                \
            counts[ids[i]]++;                                                                                          \
    }

DEFINE_COUNTS(i8, int8_t, order_i8)
DEFINE_COUNTS(u8, uint8_t, order_u)
DEFINE_COUNTS(i16, int16_t, order_i16)
DEFINE_COUNTS(u16, uint16_t, order_u)
DEFINE_COUNTS(i32, int32_t, order_i32)
DEFINE_COUNTS(u32, uint32_t, order_u)
DEFINE_COUNTS(i64, int64_t, order_i64)
DEFINE_COUNTS(u64, uint64_t, order_u)
DEFINE_COUNTS(f32, float, order_f32)
DEFINE_COUNTS(f64, double, order_f64)

/* Up to SMALL_MAX splitters (a split between a few devices): every key compared with each splitter, no table, in a
 * loop that the compiler vectorizes; the keys a bucket summed from the bucket numbers. */
#define SMALL_MAX 3
#define DEFINE_SMALL(NAME, T, ORDER, NS)                                                                               \
    static void small##NS##_##NAME(const T *x, int64_t m, int64_t start, const uint64_t *su_, const int64_t *sp_,      \
                                   uint8_t *ids, int64_t *counts)                                                      \
    {                                                                                                                  \
        uint64_t su[NS];                                                                                               \
        int64_t sp[NS];                                                                                                \
        for (int q = 0; q < NS; q++) {                                                                                 \
            su[q] = su_[q];                                                                                            \
            sp[q] = sp_[q] - start; /* a key at i sorts after a level splitter when i > sp - start */                  \
        }                                                                                                              \
        for (int64_t i = 0; i < m; i++) {                                                                              \
            const uint64_t u = ORDER(x[i]);                                                                            \
            int j = 0;                                                                                                 \
            for (int q = 0; q < NS; q++)                                                                               \
                j += (su[q] < u) | ((su[q] == u) & (sp[q] < i));                                                       \
            ids[i] = (uint8_t)j;                                                                                       \
        }                                                                                                              \
        for (int b = 1; b <= NS; b++) {                                                                                \
            int64_t c = 0;                                                                                             \
            for (int64_t i = 0; i < m; i++)                                                                            \
                c += ids[i] == b;                                                                                      \
            counts[b] += c;                                                                                            \
            counts[0] -= c;                                                                                            \
        }                                                                                                              \
        counts[0] += m;                                                                                                \
    }
#define DEFINE_SMALLS(NAME, T, ORDER)                                                                                  \
    DEFINE_SMALL(NAME, T, ORDER, 1)                                                                                    \
    DEFINE_SMALL(NAME, T, ORDER, 2)                                                                                    \
    DEFINE_SMALL(NAME, T, ORDER, 3)                                                                                    \
    static void small_##NAME(const T *x, int64_t m, int64_t start, const T *keys, const int64_t *pos, int nsplit,     \
                             uint8_t *ids, int64_t *counts)                                                            \
    {                                                                                                                  \
        uint64_t su[SMALL_MAX];                                                                                        \
        for (int j = 0; j < nsplit; j++)                                                                               \
            su[j] = ORDER(keys[j]);                                                                                    \
        if (nsplit == 1)                                                                                               \
            small1_##NAME(x, m, start, su, pos, ids, counts);                                                          \
        else if (nsplit == 2)                                                                                          \
            small2_##NAME(x, m, start, su, pos, ids, counts);                                                          \
        else                                                                                                           \
            small3_##NAME(x, m, start, su, pos, ids, counts);                                                          \
    }

DEFINE_SMALLS(i8, int8_t, order_i8)
DEFINE_SMALLS(u8, uint8_t, order_u)
DEFINE_SMALLS(i16, int16_t, order_i16)
DEFINE_SMALLS(u16, uint16_t, order_u)
DEFINE_SMALLS(i32, int32_t, order_i32)
DEFINE_SMALLS(u32, uint32_t, order_u)
DEFINE_SMALLS(i64, int64_t, order_i64)
DEFINE_SMALLS(u64, uint64_t, order_u)
DEFINE_SMALLS(f32, float, order_f32)
DEFINE_SMALLS(f64, double, order_f64)

/* kind: numpy's dtype.kind ('i', 'u' or 'f') and itemsize, the key type; nsplit splitters, sorted by (key, position)
 * in numpy's order, counts nsplit + 1 entries (added to).  Returns -1 for a type it does not handle or nsplit
 * outside [1, 255] (a bucket number fits a byte), else 0. */
int hpu_bucket_counts(char kind, int64_t itemsize, const void *x, int64_t m, int64_t start, const void *keys,
                      const int64_t *pos, int nsplit, uint8_t *ids, int64_t *counts)
{
    if (nsplit < 1 || nsplit > 255)
        return -1;
#define CASE(K, SIZE, NAME)                                                                                            \
    if (kind == K && itemsize == SIZE) {                                                                               \
        if (nsplit <= SMALL_MAX)                                                                                       \
            small_##NAME(x, m, start, keys, pos, nsplit, ids, counts);                                                 \
        else                                                                                                           \
            counts_##NAME(x, m, start, keys, pos, nsplit, ids, counts);                                                \
        return 0;                                                                                                      \
    }
    CASE('i', 1, i8)
    CASE('u', 1, u8)
    CASE('i', 2, i16)
    CASE('u', 2, u16)
    CASE('i', 4, i32)
    CASE('u', 4, u32)
    CASE('i', 8, i64)
    CASE('u', 8, u64)
    CASE('f', 4, f32)
    CASE('f', 8, f64)
#undef CASE
    return -1;
}

#define DEFINE_SCATTER(NAME, T)                                                                                        \
    static int scatter_##NAME(const T *x, int64_t m, const uint8_t *ids, int64_t *offsets, int nbuckets, T *out,       \
                              int64_t limit)                                                                           \
    {                                                                                                                  \
        for (int64_t i = 0; i < m; i++) {                                                                              \
            const uint8_t b = ids[i];                                                                                  \
            if (b >= nbuckets || offsets[b] < 0 || offsets[b] >= limit)                                                \
                return -1;                                                                                             \
            out[offsets[b]++] = x[i];                                                                                  \
        }                                                                                                              \
        return 0;                                                                                                      \
    }

DEFINE_SCATTER(1, uint8_t)
DEFINE_SCATTER(2, uint16_t)
DEFINE_SCATTER(4, uint32_t)
DEFINE_SCATTER(8, uint64_t)

typedef struct {
    char bytes[16];
} item16_t;
DEFINE_SCATTER(16, item16_t)

/* Elements of 1, 2, 4, 8 or 16 bytes; offsets (nbuckets of them, in elements) advance past what was written.
 * Returns -1, having stopped there, at an element whose bucket is not below nbuckets or whose slot is outside
 * out[0, limit); -2 for another itemsize; else 0. */
int hpu_scatter(const void *x, int64_t m, int64_t itemsize, const uint8_t *ids, int64_t *offsets, int nbuckets,
                void *out, int64_t limit)
{
    switch (itemsize) {
    case 1: return scatter_1(x, m, ids, offsets, nbuckets, out, limit);
    case 2: return scatter_2(x, m, ids, offsets, nbuckets, out, limit);
    case 4: return scatter_4(x, m, ids, offsets, nbuckets, out, limit);
    case 8: return scatter_8(x, m, ids, offsets, nbuckets, out, limit);
    case 16: return scatter_16(x, m, ids, offsets, nbuckets, out, limit);
    default: return -2;
    }
}
