// (row, key, column) packing for argsort, key-value and row sorts on the device (hpu.sorting.pipeline.fast_keyed_sort).
//
// Defines: KEY_T (the key's OpenCL type), KEY_BITS (32 or 64), KEY_KIND (0 unsigned, 1 signed, 2 float,
// 3 datetime64/timedelta64 as int64), WORD_T (the gathered word type: uchar, ushort, uint or ulong).
//
// The keys are rows of m elements, one after another (one row: m = n).  pack_keys makes, for element i of row
// r = i / m and column c = i % m,
//     packed[i] = r << (32 + col_bits) | digit << col_bits | c,
// where the digit is 32 bits (from bit `shift`) of key_bits(key): numpy's sort order as an unsigned integer
// (hpu.sorting.keys.to_unsigned, bit for bit): the sign bit flipped for signed integers; for floats the
// classic radix-sort map, with -0.0 sent to +0.0's key and every NaN to the positive quiet NaN's; for
// datetime64 and timedelta64 the sign bit flipped, minus one (NaT last).  The packed integers are all
// distinct, so any sort of them gives every row's stable order of that digit in their low col_bits bits.
// 64-bit keys take two such sorts, low digit first (an LSD radix sort with 32-bit digits): the second packs
// the high digit of each key in the first's order (`first`), and `compose` maps its columns back.

#if KEY_BITS == 64
#define KEY_U ulong
#define SIGN 0x8000000000000000ul
#define ABS_MASK 0x7FFFFFFFFFFFFFFFul
#define INF_BITS 0x7FF0000000000000ul
#define NAN_KEY 0xFFF8000000000000ul
#define AS_U as_ulong
#else
#define KEY_U uint
#define SIGN 0x80000000u
#define ABS_MASK 0x7FFFFFFFu
#define INF_BITS 0x7F800000u
#define NAN_KEY 0xFFC00000u
#define AS_U as_uint
#endif

static inline KEY_U key_bits(KEY_T x) {
#if KEY_KIND == 2
    KEY_U b = AS_U(x);
    if ((b & ABS_MASK) > INF_BITS) return NAN_KEY;  // any NaN: the quiet NaN's key
    if (b == SIGN) b = 0;                           // -0.0 sorts as +0.0
    return b ^ (((KEY_U)0 - (b >> (KEY_BITS - 1))) | SIGN);
#elif KEY_KIND == 3
    return (AS_U(x) ^ SIGN) - 1;                    // NaT (the minimum) wraps to the largest key
#elif KEY_KIND == 1
    return AS_U(x) ^ SIGN;
#else
    return (KEY_U)x;
#endif
}

// Elements [global offset, end) of rows of m.  With `first` (the sorted packed integers of the low digit), element
// i takes the key at its row's column first[i] & col_mask (the low digit's order).
__kernel void pack_keys(__global const KEY_T *keys, __global ulong *packed, __global const ulong *first, const long m,
                        const int col_bits, const int shift, const long end) {
    const long i = get_global_id(0);
    if (i >= end) return;
    const long r = i / m, c = i % m;
    const long src = first ? r * m + (long)(first[i] & ((1ul << col_bits) - 1ul)) : i;
    const ulong digit = (ulong)(uint)(key_bits(keys[src]) >> shift);
    const ulong high = col_bits + 32 < 64 ? (ulong)r << (col_bits + 32) : 0;  // one row when col_bits = 32
    packed[i] = high | (digit << col_bits) | (ulong)c;
}

// The columns, in place: the packed integers' low bits, read back as int64.
__kernel void unpack_positions(__global ulong *packed, const ulong col_mask, const long n) {
    const long i = get_global_id(0);
    if (i < n) packed[i] &= col_mask;
}

// The sorted 32-bit integer keys themselves, from the packed integers' digits (key_bits inverted: the sign bit
// flipped back for signed keys), instead of a gather of them: floats keep the gather (-0.0 and every NaN share
// a digit), 64-bit keys theirs (their digits are in two sorts).
__kernel void unpack_keys(__global const ulong *packed, __global KEY_T *dst, const int col_bits, const long n) {
    const long i = get_global_id(0);
    if (i >= n) return;
#if KEY_BITS == 32 && (KEY_KIND == 0 || KEY_KIND == 1)
    const uint digit = (uint)(packed[i] >> col_bits);
#if KEY_KIND == 1
    dst[i] = as_int(digit ^ SIGN);  // reinterpreted, not converted: exact for every int
#else
    dst[i] = digit;
#endif
#endif
}

// The second of two passes: second[i] = first[row * m + (second[i] & col_mask)] & col_mask, in place.
__kernel void compose(__global const ulong *first, __global ulong *second, const long m, const ulong col_mask,
                      const long n) {
    const long i = get_global_id(0);
    if (i < n) second[i] = first[(i / m) * m + (long)(second[i] & col_mask)] & col_mask;
}

// dst[i] = src[row * m + (order[i] & col_mask)] for output slot i of row i / m, an element being `words`
// consecutive WORD_T (any fixed-size dtype).
__kernel void gather(__global const WORD_T *src, __global const ulong *order, __global WORD_T *dst, const long m,
                     const ulong col_mask, const int words, const long n) {
    const long i = get_global_id(0);
    if (i >= n) return;
    const long j = (i / m) * m + (long)(order[i] & col_mask);
    for (int w = 0; w < words; ++w) dst[i * words + w] = src[j * words + w];
}
