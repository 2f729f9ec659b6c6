// (row, key, column) packing for argsort, key-value and row sorts on the device (hpu.sorting.pipeline.fast_keyed_sort).
//
// Defines: KEY_T (int, uint or float: a 32-bit key), KEY_KIND (0 unsigned, 1 signed, 2 float), WORD_T (the
// gathered word type: uchar, ushort, uint or ulong).
//
// The keys are rows of m elements, one after another (one row: m = n).  pack_keys makes, for element i of row
// r = i / m and column c = i % m,
//     packed[i] = r << (32 + col_bits) | key_bits(keys[i]) << col_bits | c,
// where key_bits is numpy's sort order as an unsigned integer (hpu.sorting.keys.to_unsigned, bit for bit): the
// sign bit flipped for signed integers; for floats the classic radix-sort map, with -0.0 sent to +0.0's key and
// every NaN to the positive quiet NaN's.  The packed integers are all distinct, so any sort of them gives every
// row's stable argsort in their low col_bits bits, rows in order.

static inline uint key_bits(KEY_T x) {
#if KEY_KIND == 2
    uint b = as_uint(x);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFC00000u;  // any NaN: the quiet NaN's key
    if (b == 0x80000000u) b = 0u;                             // -0.0 sorts as +0.0
    return b ^ ((0u - (b >> 31)) | 0x80000000u);
#elif KEY_KIND == 1
    return as_uint(x) ^ 0x80000000u;
#else
    return (uint)x;
#endif
}

// Elements [global offset, end) of rows of m.
__kernel void pack_keys(__global const KEY_T *keys, __global ulong *packed, const long m, const int col_bits,
                        const long end) {
    const long i = get_global_id(0);
    if (i >= end) return;
    const ulong r = (ulong)(i / m), c = (ulong)(i % m);
    const ulong high = col_bits + 32 < 64 ? r << (col_bits + 32) : 0;  // one row when col_bits = 32
    packed[i] = high | ((ulong)key_bits(keys[i]) << col_bits) | c;
}

// The columns, in place: the packed integers' low bits, read back as int64.
__kernel void unpack_positions(__global ulong *packed, const ulong col_mask, const long n) {
    const long i = get_global_id(0);
    if (i < n) packed[i] &= col_mask;
}

// dst[i] = src[r * m + c] for packed[i]'s row r and column c, an element being `words` consecutive WORD_T (any
// fixed-size dtype).
__kernel void gather(__global const WORD_T *src, __global const ulong *packed, __global WORD_T *dst, const long m,
                     const int col_bits, const int words, const long n) {
    const long i = get_global_id(0);
    if (i >= n) return;
    const ulong p = packed[i];
    const long r = col_bits + 32 < 64 ? (long)(p >> (col_bits + 32)) : 0;
    const long j = r * m + (long)(p & ((1ul << col_bits) - 1ul));
    for (int w = 0; w < words; ++w) dst[i * words + w] = src[j * words + w];
}
