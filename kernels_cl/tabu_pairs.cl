/* Exact move index <-> pair (i, j) mapping of a 2-element neighbourhood.
 *
 * Moves are the pairs 0 <= i < j < n numbered row by row through the strict
 * upper triangle (Luong, Melab, Talbi, IEEE TC 62(1) 2013, section 4.6.1,
 * propositions 1 and 2).  The square root of proposition 2 is only a first
 * guess here; integer comparisons correct it, so the mapping is exact for
 * every n whose move count fits in 64 bits.  Same as hpu/tabu/pairs.py.
 */

/* Index of the pair (i, j), i < j (proposition 1). */
static inline ulong pair_index(const ulong n, const ulong i, const ulong j)
{
    return i * (n - 1) - i * (i + 1) / 2 + j - 1;
}

/* The pair (i, j) of move index idx in [0, n (n - 1) / 2) (proposition 2, corrected). */
static inline void pair_from_index(const ulong n, const ulong idx, uint *i, uint *j)
{
    const ulong k = n * (n - 1) / 2 - 1 - idx;          /* index counted from the last move */
    ulong q = (ulong)((sqrt((float)(8 * k + 1)) - 1.0f) * 0.5f);
    while (q * (q + 1) / 2 > k) q--;                     /* q: largest with q (q + 1) / 2 <= k */
    while ((q + 1) * (q + 2) / 2 <= k) q++;
    const ulong row = n - 2 - q;
    *i = (uint)row;
    *j = (uint)(idx - (row * (n - 1) - row * (row + 1) / 2) + 1);
}
