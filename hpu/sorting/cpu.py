"""The CPU share of fast mode: a parallel stable sort on the runtime's thread pool.

Two ways, both with (value, input position) splitters, so that equal keys are split exactly and stably and the
buckets stay balanced even when all keys are equal:

- a sample sort (:func:`sample_sort`; Frazer and McKellar, "Samplesort", JACM 17(3), 1970): splitters from a
  random sample, one partition pass of every key into its key range (compiled, ``hpu/sorting/_partition.c``:
  :func:`bucket_ids`, :func:`scatter`), then each range sorted in place by numpy, a thread a range at a time;
- parallel sorting by regular sampling (PSRS; Shi and Schaeffer, "Parallel sorting by regular sampling", JPDC
  14(4), 1992), where the compiled partition is missing: each thread sorts one contiguous chunk (numpy's
  vectorised quicksort); :func:`multiway_merge` splits the sorted runs into buckets with splitters taken at
  regular positions of the runs, and each thread merges one bucket.

Stability.  For integers a stable and an unstable sort give the same bits.
For floats only two kinds of equal-but-different values exist: -0.0/+0.0
and NaNs with different payloads; :func:`stable_sort_inplace` sorts with the
fast unstable sort and then rewrites the zero run and the NaN run in input
order, which gives exactly ``numpy.sort(kind="stable")``.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.streaming import copy_into
from ..core.util import native_library, wait_all

log = logging.getLogger("hpu")

__all__ = ["bucket_ids", "choose_splitters", "multiway_merge", "native_partition", "parallel_copy", "parallel_sort",
           "partition_by_splitters", "sample_sort", "scatter", "stable_partition", "stable_sort_inplace"]

#: Fewest elements per thread (below it, hand-offs between threads cost more than they save).
SERIAL_CUTOFF = 1 << 18

#: A bucket gathered from at most this many sorted runs is merged by numpy's timsort (``kind="stable"``),
#: which finds the runs and merges them; from more runs it is re-sorted by numpy's quicksort.
TIMSORT_MAX_RUNS = 2

#: Splitters above which :func:`bucket_ids` binary-searches instead of comparing with each splitter in turn
#: (numpy's searchsorted costs about as much as 30 comparison passes).
COMPARE_MAX_SPLITTERS = 32

#: Most buckets of the compiled partition (a bucket number is one byte).
NATIVE_MAX_BUCKETS = 256
#: Element sizes the compiled scatter moves.
SCATTER_ITEMSIZES = (1, 2, 4, 8, 16)


@functools.cache
def _partition_library() -> Any:
    """The compiled partition's two functions (``hpu/sorting/_partition.c``), or None where it was not built."""
    lib = native_library("hpu.sorting._partition")
    if lib is None:
        return None
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    try:
        counts, scatter = lib.hpu_bucket_counts, lib.hpu_scatter
    except AttributeError as exc:  # pragma: no cover - a build of another version
        log.warning("hpu: the compiled partition lacks %s; using numpy instead", exc)
        return None
    counts.argtypes, counts.restype = [ctypes.c_char, i64, p, i64, i64, p, p, ctypes.c_int, p, p], ctypes.c_int
    scatter.argtypes, scatter.restype = [p, i64, i64, p, p, ctypes.c_int, p, i64], ctypes.c_int
    return counts, scatter


def native_partition(dtype: np.dtype | None = None) -> bool:
    """Whether the compiled partition was built (and, given ``dtype``, handles its keys: signed and unsigned integers
    and float32/float64 in native byte order do; other dtypes take numpy's way)."""
    if _partition_library() is None:
        return False
    if dtype is None:
        return True
    dt = np.dtype(dtype)
    return dt.isnative and ((dt.kind in "iu" and dt.itemsize in (1, 2, 4, 8)) or dt in (np.float32, np.float64))


#: Buckets up to which :func:`stable_partition` compresses the keys of each bucket in turn; above, it gathers them
#: through a stable argsort of the bucket numbers (``experiments/bench_partition.py``).
COMPRESS_MAX_BUCKETS = 8


def stable_partition(x: np.ndarray, ids: np.ndarray, k: int, out: np.ndarray | None = None, *,
                     method: str = "auto", counts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The keys of ``x`` grouped by bucket (a counting sort of the bucket numbers ``ids``), in input order within
    each bucket, on the calling thread.

    Parameters
    ----------
    x : numpy.ndarray, shape (m,)
        Any dtype.
    ids : numpy.ndarray, shape (m,), integers
        Each key's bucket, in ``[0, k)`` (the argsort narrows them to the smallest unsigned type that holds
        ``k - 1``: numpy radix-sorts 8- and 16-bit keys).
    k : int
        Number of buckets, >= 1.
    out : numpy.ndarray, shape (m,), optional
        Destination (``x``'s dtype; not overlapping ``x``).
    method : {"auto", "scatter", "compress", "argsort"}
        ``"scatter"``: the compiled scatter (:func:`scatter`; at most :data:`NATIVE_MAX_BUCKETS` buckets, contiguous
        arrays, built where a C compiler was found: :func:`native_partition`), one pass whatever ``k``; ``"compress"``:
        ``numpy.compress`` of each bucket's keys in turn (a pass over ``ids`` and ``x`` a bucket); ``"argsort"``: a
        gather through ``numpy.argsort(ids, kind="stable")`` (numpy's radix sort of small integers), whose cost hardly
        grows with ``k``; ``"auto"`` (default): the scatter where it applies, else compressing for at most
        :data:`COMPRESS_MAX_BUCKETS` buckets and the argsort above.  Measured by ``experiments/bench_partition.py``
        (blocks of 2^20 int32 and int64 keys in random buckets): on one thread compressing was the faster up to 4-6
        buckets (the CPU-only machine: 2.9-6.3 ms against 5.5-13.9 for 2 to 6 buckets,
        ``experiments/results/cpu-only/bench_partition.log``); with every thread grouping a block at once, as
        :func:`hpu.sorting.keyrange.partition` runs it, it scaled 6-11x over 32 threads up to 8 buckets and the argsort
        3-6x, so that compressing was the faster up to 16 buckets on the two-GPU machine's 32 threads
        (``experiments/results/h200x2/bench_partition.log``) and the argsort at 32.  8 buckets is the compromise.
    counts : numpy.ndarray, shape (k,), int64, optional
        Keys per bucket, where known already (:func:`bucket_ids` counts them).

    Returns
    -------
    out : numpy.ndarray, shape (m,)
    counts : numpy.ndarray, shape (k,), int64
        Keys per bucket: bucket ``b`` is ``out[sum(counts[:b]) : sum(counts[:b + 1])]``.

    Raises
    ------
    ValueError
        An unknown ``method``, ``k < 1``, ``x`` and ``ids`` of different lengths, or ``"scatter"`` with more
        buckets or arrays than it takes (:func:`scatter`).
    RuntimeError
        ``"scatter"`` where the compiled partition was not built.
    """
    if method not in ("auto", "scatter", "compress", "argsort"):
        raise ValueError(f"method must be 'auto', 'scatter', 'compress' or 'argsort', got {method!r}")
    if k < 1 or x.shape != ids.shape:
        raise ValueError(f"need k >= 1 and one bucket number a key, got k={k}, {x.shape} keys, {ids.shape} numbers")
    out = np.empty_like(x) if out is None else out[: x.shape[0]]
    compiled = (native_partition() and k <= NATIVE_MAX_BUCKETS and x.flags.c_contiguous and out.flags.c_contiguous
                and x.dtype.itemsize in SCATTER_ITEMSIZES and not x.dtype.hasobject)
    if method == "scatter" or (method == "auto" and compiled):
        if k > NATIVE_MAX_BUCKETS:
            raise ValueError(f"the compiled scatter takes at most {NATIVE_MAX_BUCKETS} buckets, got k={k}")
        ids = np.ascontiguousarray(ids, dtype=np.uint8)
        counts = np.bincount(ids, minlength=k).astype(np.int64) if counts is None else counts
        scatter(x, ids, np.concatenate([[0], np.cumsum(counts[:-1])]).astype(np.int64), out)
        return out, counts
    if method == "argsort" or (method == "auto" and k > COMPRESS_MAX_BUCKETS):
        np.take(x, np.argsort(ids.astype(np.min_scalar_type(k - 1), copy=False), kind="stable"), out=out)
        return out, np.bincount(ids, minlength=k).astype(np.int64)
    counts = np.zeros(k, np.int64)
    start = 0
    for b in range(k):
        mask = ids == b
        counts[b] = np.count_nonzero(mask)
        np.compress(mask, x, out=out[start : start + counts[b]])
        start += int(counts[b])
    return out, counts


def choose_splitters(a: np.ndarray, fractions: Sequence[float], *, seed: int = 0,
                     sample: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Splitters (key, position) at cumulative ``fractions`` of a random sample of ``a``, in numpy's order.

    Parameters
    ----------
    a : numpy.ndarray, shape (n,)
        Keys of a numeric dtype, n >= 1.
    fractions : sequence of float
        Non-decreasing cumulative fractions in [0, 1], one per splitter:
        about ``fractions[j] * n`` keys come before splitter ``j``.
    seed : int
        Seed of the sample's positions (the split is reproducible).
    sample : int, optional
        Sample size; default ``max(4096, 256 K^2)`` (``K`` buckets), at
        most ``2^20`` and ``n``.  The bucket sizes deviate from their
        shares by about ``sqrt(q (1 - q) / sample) n``.

    Returns
    -------
    keys : numpy.ndarray, shape (K - 1,), ``a.dtype``
    positions : numpy.ndarray, shape (K - 1,), int64
        Lexicographically non-decreasing (key in numpy's order, NaN last,
        -0.0 equal to +0.0; then position).

    Raises
    ------
    ValueError
        Empty ``a``, or fractions outside [0, 1] or decreasing.
    """
    n = a.shape[0]
    q = np.asarray(fractions, dtype=float)
    if n < 1:
        raise ValueError("choose_splitters needs at least one key")
    if q.size and (q.min() < 0 or q.max() > 1 or np.any(np.diff(q) < 0)):
        raise ValueError(f"fractions must be non-decreasing and in [0, 1], got {list(q)}")
    k = q.size + 1
    m = min(n, 1 << 20, int(sample) if sample is not None else max(4096, 256 * k * k))
    rng = np.random.default_rng(seed)
    pos = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
    order = np.argsort(a[pos], kind="stable")  # by key, then position (pos is ascending)
    pick = order[np.minimum((q * m).astype(np.int64), m - 1)]
    return a[pos[pick]], pos[pick].astype(np.int64)


def _after(x: np.ndarray, s: Any, strict: bool) -> np.ndarray:
    """Whether each ``x`` sorts after the key ``s`` (``strict``) or not before it, in numpy's order (NaN last)."""
    if x.dtype.kind in "fmM":  # NaN and NaT sort last, level with one another
        if np.isnan(s):
            return np.zeros(x.shape, bool) if strict else np.isnan(x)
        return ~(x <= s) if strict else ~(x < s)  # NaN and NaT compare false: they sort after every value
    return x > s if strict else x >= s


def bucket_ids(x: np.ndarray, start: int, keys: np.ndarray, positions: np.ndarray,
               out: np.ndarray | None = None, counts: np.ndarray | None = None) -> np.ndarray:
    """The bucket of each key of ``x``: the number of splitters the pair (key, position) sorts after.

    Compiled (:func:`native_partition`) for up to :data:`NATIVE_MAX_BUCKETS` buckets, else numpy's comparisons
    or binary search.  Releases the GIL either way for the bulk of the work.

    Parameters
    ----------
    x : numpy.ndarray, shape (m,)
        Keys at positions ``start .. start + m - 1`` of the input.
    start : int
    keys, positions : numpy.ndarray, shape (K - 1,)
        Splitters from :func:`choose_splitters` (lexicographically sorted).
    out : numpy.ndarray, shape (m,), optional
        Unsigned integer destination wide enough for ``K - 1``.
    counts : numpy.ndarray, shape (K,), int64, optional
        Incremented by the keys of each bucket.

    Returns
    -------
    numpy.ndarray, shape (m,)
        Values in ``[0, K - 1]``: bucket ``b`` holds the pairs after
        splitter ``b - 1`` and not after splitter ``b``.

    Raises
    ------
    ValueError
        ``out`` shorter than ``x``; ``counts`` not of shape ``(K,)``.
    """
    m = x.shape[0]
    if out is not None and out.shape[0] < m:
        raise ValueError(f"out holds {out.shape[0]} bucket numbers, the keys are {m}")
    if counts is not None and counts.shape != (keys.size + 1,):
        raise ValueError(f"counts must hold one entry a bucket, shape ({keys.size + 1},), got {counts.shape}")
    ids = np.empty(m, np.min_scalar_type(keys.size)) if out is None else out[:m]
    if (keys.size < NATIVE_MAX_BUCKETS and ids.dtype == np.uint8 and x.flags.c_contiguous and ids.flags.c_contiguous
            and keys.dtype == x.dtype and native_partition(x.dtype)):
        _native_bucket_ids(x, start, keys, positions, ids, counts)
        return ids
    if keys.size <= COMPARE_MAX_SPLITTERS:
        ids[:] = 0
        for s, p in zip(keys, positions):
            cut = min(max(int(p) + 1 - start, 0), m)  # positions <= p: strictly after; beyond: level is after
            for lo, hi, strict in ((0, cut, True), (cut, m, False)):
                if hi > lo:
                    np.add(ids[lo:hi], _after(x[lo:hi], s, strict), out=ids[lo:hi], casting="unsafe")
    else:
        left = np.searchsorted(keys, x, side="left")  # splitters with a smaller key (numpy's order: NaN last)
        level = np.searchsorted(keys, x, side="right") - left  # splitters with an equal key, positions ascending
        ties = np.flatnonzero(level)
        if ties.size:
            pos = start + ties
            base, span = left[ties], level[ties]
            for r in range(int(span.max())):
                inside = r < span
                j = np.minimum(base + r, keys.size - 1)
                left[ties] += inside & (positions[j] < pos)
        ids[:] = left
    if counts is not None:
        counts += np.bincount(ids, minlength=counts.shape[0])
    return ids


def _native_bucket_ids(x: np.ndarray, start: int, keys: np.ndarray, positions: np.ndarray, ids: np.ndarray,
                       counts: np.ndarray | None) -> None:
    """:func:`bucket_ids` by the compiled partition (a table over the keys' leading bits, then comparisons with the
    splitters that share a key's entry: ``hpu/sorting/_partition.c``)."""
    keys = np.ascontiguousarray(keys, x.dtype)
    positions = np.ascontiguousarray(positions, np.int64)
    tally = np.zeros(keys.size + 1, np.int64)
    fn = _partition_library()[0]
    if keys.size and fn(x.dtype.kind.encode(), x.dtype.itemsize, x.ctypes.data, x.shape[0], int(start),
                        keys.ctypes.data, positions.ctypes.data, keys.size, ids.ctypes.data, tally.ctypes.data):
        raise RuntimeError(f"the compiled partition refused {x.dtype} keys, {keys.size} splitters")  # pragma: no cover
    if not keys.size:
        ids[:] = 0
        tally[0] = x.shape[0]
    if counts is not None:
        counts += tally[: counts.shape[0]]


def scatter(x: np.ndarray, ids: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:
    """``out[offsets[ids[i]]++] = x[i]`` for every ``i`` in order (the scatter of a stable counting sort), compiled.

    Parameters
    ----------
    x : numpy.ndarray, shape (m,)
        Contiguous, elements of 1, 2, 4, 8 or 16 bytes (structured too).
    ids : numpy.ndarray, shape (m,), uint8
        Each element's bucket.
    offsets : numpy.ndarray, shape (K,), int64
        Where each bucket's next element goes in ``out`` (elements); advanced past what was written.
    out : numpy.ndarray, 1-D, ``x``'s dtype, contiguous, not overlapping ``x``

    Raises
    ------
    RuntimeError
        The compiled partition was not built (:func:`native_partition`).
    TypeError
        Elements that hold Python objects.
    ValueError
        Mismatched dtypes or lengths, a non-contiguous array, an unhandled itemsize, offsets not int64, or a bucket
        number past ``offsets`` or a slot outside ``out`` (found while writing: ``out`` is then partly written).
    """
    lib = _partition_library()
    if lib is None:
        raise RuntimeError("hpu's compiled partition was not built (no C compiler at install)")
    if x.dtype.hasobject:
        raise TypeError(f"scatter moves plain bytes, not Python objects ({x.dtype})")
    if (x.dtype != out.dtype or ids.shape != x.shape or ids.dtype != np.uint8 or offsets.dtype != np.int64
            or offsets.ndim != 1 or not all(a.flags.c_contiguous for a in (x, ids, offsets, out))
            or not out.flags.writeable or not offsets.flags.writeable):
        raise ValueError("scatter needs contiguous x and out of one dtype, uint8 ids of x's length, int64 offsets")
    rc = lib[1](x.ctypes.data, x.shape[0], x.dtype.itemsize, ids.ctypes.data, offsets.ctypes.data,
                min(offsets.shape[0], NATIVE_MAX_BUCKETS), out.ctypes.data, out.shape[0])
    if rc == -2:
        raise ValueError(f"scatter moves elements of 1, 2, 4, 8 or 16 bytes, not {x.dtype.itemsize} ({x.dtype})")
    if rc:
        raise ValueError("scatter: a bucket number past the offsets, or a slot outside out (offsets that do not "
                         "match the bucket numbers)")


def stable_sort_inplace(x: np.ndarray) -> None:
    """Sort a contiguous 1-D array in place with the result of ``np.sort(x, kind="stable")``.

    Uses numpy's default (quicksort, SIMD) sort and, for floats, puts the
    -0.0/+0.0 run and the NaN run back in input order.  Releases the GIL in
    the sort.
    """
    if x.dtype.kind != "f":
        x.sort()
        return
    zeros = x[x == 0]  # in input order
    nans = x[np.isnan(x)]
    x.sort()
    if zeros.size:
        i = int(np.searchsorted(x, 0, side="left"))
        x[i : i + zeros.size] = zeros
    if nans.size:
        x[x.size - nans.size :] = nans


def parallel_copy(src: np.ndarray, dst: np.ndarray, pool: concurrent.futures.Executor, threads: int, *,
                  stream: bool = True) -> None:
    """``dst[:] = src`` with one chunk per thread (memory bandwidth of several cores); with ``stream``, by
    streaming stores (:func:`hpu.core.streaming.stream_copy`)."""
    n = src.shape[0]
    if n < SERIAL_CUTOFF * 4 or threads == 1:
        copy_into(dst, src, stream)
        return
    b = np.linspace(0, n, threads + 1).astype(np.int64)
    wait_all([pool.submit(copy_into, dst[b[i] : b[i + 1]], src[b[i] : b[i + 1]], stream) for i in range(threads)])


def _splitters(runs: Sequence[np.ndarray], nbuckets: int) -> list[np.ndarray]:
    """Per bucket boundary, the cut position in every run (regular sampling with position tie-breaks)."""
    k = len(runs)
    per_run = max(4, 2 * nbuckets)
    vals, rid, pos = [], [], []
    for i, r in enumerate(runs):
        if r.size == 0:
            continue
        q = (np.arange(1, per_run + 1) * r.size) // (per_run + 1)
        vals.append(r[q])
        rid.append(np.full(q.size, i))
        pos.append(q)
    if not vals:
        return []
    v, ri, q = np.concatenate(vals), np.concatenate(rid), np.concatenate(pos)
    order = np.lexsort((q, ri, v))  # (value, run, position): the stable order of the samples
    picks = order[(np.arange(1, nbuckets) * order.size) // nbuckets]
    sv, sj, sq = v[picks], ri[picks], q[picks]
    cuts = np.empty((picks.size, k), dtype=np.int64)
    for i, r in enumerate(runs):
        left = np.searchsorted(r, sv, side="left")
        right = np.searchsorted(r, sv, side="right")
        # Ties with a splitter go to the earlier run's side: runs before it keep theirs left of the cut.
        cuts[:, i] = np.where(i < sj, right, np.where(i > sj, left, sq))
    return list(cuts)


def multiway_merge(runs: Sequence[np.ndarray], out: np.ndarray, pool: concurrent.futures.Executor,
                   threads: int, *, buckets: int | None = None, timsort_max_runs: int = TIMSORT_MAX_RUNS) -> None:
    """Stably merge sorted runs (given in input order) into ``out``, in parallel.

    Parameters
    ----------
    runs : sequence of 1-D arrays
        Each sorted as by :func:`stable_sort_inplace`; run ``i`` holds input
        elements that precede those of run ``i+1`` (so ties resolve to
        lower runs first).
    out : numpy.ndarray, shape (sum of run lengths,)
        Destination; must not overlap the runs.
    pool, threads
        The thread pool and how many of its threads to use.
    buckets : int, optional
        Number of independent buckets (default ``2 * threads``).
    timsort_max_runs : int
        Buckets gathered from at most this many runs are merged by numpy's
        timsort, the others re-sorted (default :data:`TIMSORT_MAX_RUNS`).

    Notes
    -----
    Each bucket gathers its piece of every run into ``out`` and sorts it
    (:func:`stable_sort_inplace`; numpy's timsort, which merges the runs it
    finds, when there are at most ``timsort_max_runs`` runs).  Bucket ``b`` ends at the
    ``b``-th splitter, a sample taken at regular positions of the runs and
    ordered by (value, run, position), as in PSRS (Shi and Schaeffer 1992).
    """
    runs = [r for r in runs]
    total = sum(r.size for r in runs)
    if out.shape[0] != total:
        raise ValueError(f"out has {out.shape[0]} elements, the runs {total}")
    nb = buckets or max(1, min(2 * threads, total // SERIAL_CUTOFF))
    cuts = [np.zeros(len(runs), dtype=np.int64), *_splitters(runs, nb), np.array([r.size for r in runs])]
    sort = _merge_runs if len(runs) <= timsort_max_runs else stable_sort_inplace

    def bucket(lo: np.ndarray, hi: np.ndarray) -> None:
        o = int(lo.sum())
        start = o
        for r, a, b in zip(runs, lo, hi):
            out[o : o + (b - a)] = r[a:b]
            o += b - a
        if o > start:
            sort(out[start:o])

    wait_all([pool.submit(bucket, cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1)])


def _merge_runs(x: np.ndarray) -> None:
    x.sort(kind="stable")  # timsort finds the sorted runs and merges them; already stable


def partition_by_splitters(src: np.ndarray, keys: np.ndarray, positions: np.ndarray, out: np.ndarray,
                           ids: np.ndarray, pool: concurrent.futures.Executor, threads: int, *,
                           block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Write every key of ``src`` into its bucket's range of ``out``, in input order within each bucket.

    Two passes of ``threads`` pool tasks, each a run of blocks of ``block`` keys: each key's bucket is found and
    counted (:func:`bucket_ids`); then each block's keys go to their buckets' offsets in ``out``, by the compiled
    scatter (:func:`scatter`, one pass) where it is built and takes the keys, else by grouping the block
    (:func:`stable_partition`) and copying each bucket's segment.  The partition of a sample sort (Frazer and
    McKellar, "Samplesort", JACM 17(3), 1970), the bucket numbers kept between the passes as in Sanders and
    Winkel, "Super scalar sample sort", ESA 2004.

    Parameters
    ----------
    src : numpy.ndarray, shape (n,)
    keys, positions : numpy.ndarray, shape (K - 1,)
        Splitters (:func:`choose_splitters`).
    out : numpy.ndarray, shape (n,), ``src.dtype``
        Does not overlap ``src``.
    ids : numpy.ndarray, shape (n,), an unsigned integer type that holds ``K - 1``
        Written: each key's bucket.
    pool : concurrent.futures.Executor
    threads : int
        Most tasks at once (>= 1).
    block : int
        Keys per block (>= 1).

    Returns
    -------
    bounds : numpy.ndarray, shape (K + 1,), int64
        Bucket ``b`` is ``out[bounds[b]:bounds[b + 1]]``.
    blocks : numpy.ndarray, shape (C + 1,), int64
        Input block bounds.
    counts : numpy.ndarray, shape (C, K), int64
        Keys of block ``c`` in bucket ``b``.

    Raises
    ------
    ValueError
        ``ids`` shorter than ``src``.
    """
    n, k = src.shape[0], keys.size + 1
    size = max(1, int(block))
    blocks = np.array(list(range(0, n, size)) + [n], np.int64)
    nblocks = blocks.size - 1
    counts = np.zeros((nblocks, k), np.int64)
    tasks = max(1, min(threads, nblocks))
    ranges = np.linspace(0, nblocks, tasks + 1).astype(np.int64)
    spans = [[(c, int(blocks[c]), int(blocks[c + 1])) for c in range(int(ranges[t]), int(ranges[t + 1]))]
             for t in range(tasks)]

    def count(t: int) -> None:
        for c, a, b in spans[t]:
            bucket_ids(src[a:b], a, keys, positions, out=ids[a:b], counts=counts[c])

    wait_all([pool.submit(count, t) for t in range(tasks)])
    bounds = np.concatenate([[0], np.cumsum(counts.sum(axis=0))]).astype(np.int64)
    dest = bounds[:-1] + np.cumsum(counts, axis=0) - counts  # (block, bucket) -> offset in out
    compiled = (k <= NATIVE_MAX_BUCKETS and ids.dtype == np.uint8 and native_partition(src.dtype)
                and src.flags.c_contiguous and out.flags.c_contiguous)

    def place(t: int) -> None:
        grouped = None if compiled else np.empty(size, src.dtype)
        for c, a, b in spans[t]:
            if compiled:
                scatter(src[a:b], ids[a:b], dest[c].copy(), out)
                continue
            stable_partition(src[a:b], ids[a:b], k, out=grouped, counts=counts[c])
            start = 0
            for j in np.flatnonzero(counts[c]):
                m = int(counts[c, j])
                out[dest[c, j] : dest[c, j] + m] = grouped[start : start + m]
                start += m

    wait_all([pool.submit(place, t) for t in range(tasks)])
    return bounds, blocks, counts




#: Keys a bucket of :func:`sample_sort` aims at (numpy sorts a bucket of 2^16 int32 keys in cache).
SAMPLE_BUCKET = 1 << 16
#: Sample drawn a bucket for :func:`sample_sort`'s splitters: bucket sizes then deviate from their share by
#: about 1/sqrt(64) = 12%, which the buckets' number (several a thread) evens out across threads.
SAMPLE_PER_BUCKET = 64


def sample_sort(a: np.ndarray, pool: concurrent.futures.Executor, threads: int, out: np.ndarray | None = None,
                scratch: np.ndarray | None = None, *, buckets: int | None = None, seed: int = 0) -> np.ndarray:
    """``np.sort(a, kind="stable")`` on ``threads`` threads of ``pool`` by a sample sort: one partition pass into
    key ranges, then every range sorted where it lies in ``out`` (no merge).

    A random sample gives ``K - 1`` (key, position) splitters (:func:`choose_splitters`; ties broken by position,
    so that equal keys are divided and the sort stays stable); the threads partition the keys into their buckets'
    ranges of ``out``, a block each (:func:`partition_by_splitters`: each bucket keeps its keys in input order),
    then sort the buckets in place, largest first (:func:`stable_sort_inplace`).

    Parameters
    ----------
    a : numpy.ndarray, shape (n,)
        Keys of a dtype :func:`native_partition` handles; not modified.
    pool : concurrent.futures.Executor
    threads : int
        Threads to use (>= 1).
    out : numpy.ndarray, shape (n,), optional
        Destination (``a``'s dtype, contiguous; ``a`` itself sorts in place); a new array by default.
    scratch : numpy.ndarray, 1-D, optional
        Contiguous memory of at least ``n`` bytes for the bucket numbers (saves allocating and page-faulting them);
        when ``out`` overlaps ``a``, ``n`` elements of ``a``'s dtype for a copy of the keys.
    buckets : int, optional
        ``K``, at most :data:`NATIVE_MAX_BUCKETS`; default about ``n /`` :data:`SAMPLE_BUCKET`, at least
        ``4 * threads`` (where ``n`` allows).
    seed : int
        Seed of the sample (the result does not depend on it; the buckets' sizes do).

    Returns
    -------
    numpy.ndarray, shape (n,)
        The sorted array (``out`` if given).

    Raises
    ------
    RuntimeError
        The compiled partition was not built.
    TypeError
        A dtype it does not handle (:func:`parallel_sort` takes every dtype).
    """
    if not native_partition(a.dtype):
        raise (RuntimeError("hpu's compiled partition was not built") if not native_partition()
               else TypeError(f"sample_sort does not handle {a.dtype} keys"))
    n = a.shape[0]
    out = np.empty_like(a) if out is None else out
    a = np.ascontiguousarray(a)
    k = int(buckets) if buckets else min(NATIVE_MAX_BUCKETS, max(n // SAMPLE_BUCKET, 4 * threads))
    k = max(1, min(k, NATIVE_MAX_BUCKETS, n))
    if n <= 1 or k == 1:
        out[:] = a
        stable_sort_inplace(out)
        return out
    usable = scratch is not None and scratch.ndim == 1 and scratch.flags.c_contiguous
    if np.may_share_memory(a, out):  # sorting in place: the keys are scattered from a copy
        src = scratch[:n] if usable and scratch.dtype == a.dtype and scratch.shape[0] >= n else np.empty_like(a)
        parallel_copy(a, src, pool, threads)
        a, usable = src, False
    keys, positions = choose_splitters(a, np.arange(1, k) / k, seed=seed, sample=SAMPLE_PER_BUCKET * k)
    ids = scratch.view(np.uint8)[:n] if usable and scratch.nbytes >= n else np.empty(n, np.uint8)
    tasks = max(1, min(threads, n // SERIAL_CUTOFF))
    bounds = partition_by_splitters(a, keys, positions, out, ids, pool, tasks, block=-(-n // tasks))[0]
    order = [int(b) for b in np.argsort(-np.diff(bounds), kind="stable") if bounds[b + 1] > bounds[b]]
    sorters = max(1, min(threads, len(order)))

    def sort_buckets(t: int) -> None:  # the largest buckets first, dealt out over the threads
        for b in order[t::sorters]:
            stable_sort_inplace(out[bounds[b] : bounds[b + 1]])

    wait_all([pool.submit(sort_buckets, t) for t in range(sorters)])
    return out


def parallel_sort(a: np.ndarray, pool: concurrent.futures.Executor, threads: int,
                  out: np.ndarray | None = None, scratch: np.ndarray | None = None,
                  runs: int | None = None, *, timsort_max_runs: int = TIMSORT_MAX_RUNS,
                  method: str = "auto") -> np.ndarray:
    """``np.sort(a, kind="stable")`` on ``threads`` threads of ``pool``: a sample sort (:func:`sample_sort`) or PSRS.

    ``method="auto"`` (default) takes the sample sort on several threads from two :data:`SERIAL_CUTOFF` keys on where
    the compiled partition handles the dtype (:func:`native_partition`) and ``a`` and ``out`` are contiguous, else PSRS
    (which sorts fewer keys than that, or on one thread, with numpy's sort on the calling thread).  Which is faster
    depends on the machine (:func:`hpu.sorting.costs.cpu_sort_method`, which the pipeline follows).

    Parameters
    ----------
    a : numpy.ndarray, shape (n,)
        Numeric 1-D array; not modified.
    pool : concurrent.futures.Executor
    threads : int
        Threads to use (>= 1).
    out : numpy.ndarray, shape (n,), optional
        Destination (``a`` itself sorts in place); a new array by default.
    scratch : numpy.ndarray, optional
        A 1-D array of ``a``'s dtype with at least ``n`` elements for the
        sorted chunks of PSRS, or the sample sort's bucket numbers
        (:func:`sample_sort`; saves allocating and page-faulting one per call).
    runs : int, optional
        Number of chunks sorted in the first phase (default ``threads``;
        more than ``threads`` balances the load when some threads are slow,
        at the price of more runs to merge).
    timsort_max_runs : int
        Passed to :func:`multiway_merge` (default :data:`TIMSORT_MAX_RUNS`).
    method : {"auto", "sample", "psrs"}
        ``"sample"`` raises where :func:`sample_sort` cannot run (its errors).

    Returns
    -------
    numpy.ndarray, shape (n,)
        The sorted array (``out`` if given).

    Raises
    ------
    ValueError
        An unknown ``method``.
    """
    if method not in ("auto", "sample", "psrs"):
        raise ValueError(f"method must be 'auto', 'sample' or 'psrs', got {method!r}")
    n = a.shape[0]
    out = np.empty_like(a) if out is None else out
    if method == "sample" or (method == "auto" and threads > 1 and n >= 2 * SERIAL_CUTOFF and a.flags.c_contiguous
                              and out.flags.c_contiguous and native_partition(a.dtype)):
        return sample_sort(a, pool, threads, out=out, scratch=scratch)
    threads = min(threads, max(1, n // SERIAL_CUTOFF))  # each chunk at least SERIAL_CUTOFF elements
    if threads == 1:
        out[:] = a
        stable_sort_inplace(out)
        return out
    fits = scratch is not None and scratch.ndim == 1 and scratch.dtype == a.dtype and scratch.shape[0] >= n
    tmp = scratch[:n] if fits else np.empty_like(a)
    k = max(threads, min(int(runs or threads), n // SERIAL_CUTOFF))
    b = np.linspace(0, n, k + 1).astype(np.int64)

    def chunk(i: int) -> None:
        tmp[b[i] : b[i + 1]] = a[b[i] : b[i + 1]]
        stable_sort_inplace(tmp[b[i] : b[i + 1]])

    wait_all([pool.submit(chunk, i) for i in range(k)])
    multiway_merge([tmp[b[i] : b[i + 1]] for i in range(k)], out, pool, threads, timsort_max_runs=timsort_max_runs)
    return out
