/* Copy bytes with non-temporal (streaming) stores: the destination's cache lines are written straight to memory,
 * not first read into the cache (read for ownership) and later evicted.  A plain C library (no Python API), loaded
 * by hpu.core.streaming through ctypes, which releases the GIL around each call.  x86-64 only (SSE2, part of the
 * architecture); elsewhere memcpy. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>

int hpu_streams(void) /* whether hpu_stream_copy streams (1) or is memcpy (0) */
{
    return 1;
}

void hpu_stream_copy(void *dst, const void *src, size_t n)
{
    char *d = (char *)dst;
    const char *s = (const char *)src;
    size_t head = (size_t)(-(uintptr_t)d & 63); /* streaming stores of whole, aligned cache lines */
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    for (; n >= 256; n -= 256, d += 256, s += 256) { /* four cache lines: all loads before the stores */
        __m128i r[16];
        for (int i = 0; i < 16; i++)
            r[i] = _mm_loadu_si128((const __m128i *)(s + 16 * i));
        for (int i = 0; i < 16; i++)
            _mm_stream_si128((__m128i *)(d + 16 * i), r[i]);
    }
    memcpy(d, s, n);
    _mm_sfence(); /* the streamed lines are visible before the caller reports the copy done */
}
#else
int hpu_streams(void)
{
    return 0;
}

void hpu_stream_copy(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}
#endif
