"""The CPU share of fast mode: a parallel stable sort on the runtime's thread pool.

Parallel sorting by regular sampling (PSRS; Shi and Schaeffer, "Parallel
sorting by regular sampling", JPDC 14(4), 1992):

1. each thread sorts one contiguous chunk (numpy's vectorised quicksort);
2. :func:`multiway_merge` splits the sorted runs into buckets with
   splitters taken at regular positions of the runs, and each thread merges
   one bucket.

Splitters are (value, input position) pairs, so equal keys are split
exactly and stably, and buckets stay balanced even when all keys are equal.

Stability.  For integers a stable and an unstable sort give the same bits.
For floats only two kinds of equal-but-different values exist: -0.0/+0.0
and NaNs with different payloads; :func:`stable_sort_inplace` sorts with the
fast unstable sort and then rewrites the zero run and the NaN run in input
order, which gives exactly ``numpy.sort(kind="stable")``.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence

import numpy as np

from ..core.streaming import copy_into

__all__ = ["stable_sort_inplace", "multiway_merge", "parallel_sort", "parallel_copy", "stable_partition"]

#: Fewest elements per thread (below it, hand-offs between threads cost more than they save).
SERIAL_CUTOFF = 1 << 18

#: A bucket gathered from at most this many sorted runs is merged by numpy's timsort (``kind="stable"``),
#: which finds the runs and merges them; from more runs it is re-sorted by numpy's quicksort.
TIMSORT_MAX_RUNS = 2


#: Buckets up to which :func:`stable_partition` compresses the keys of each bucket in turn; above, it gathers them
#: through a stable argsort of the bucket numbers (``experiments/bench_partition.py``).
COMPRESS_MAX_BUCKETS = 8


def stable_partition(x: np.ndarray, ids: np.ndarray, k: int, out: np.ndarray | None = None, *,
                     method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
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
    method : {"auto", "compress", "argsort"}
        ``"compress"``: ``numpy.compress`` of each bucket's keys in turn (a pass over ``ids`` and ``x`` a
        bucket); ``"argsort"``: a gather through ``numpy.argsort(ids, kind="stable")`` (numpy's radix sort of
        small integers), whose cost hardly grows with ``k``; ``"auto"`` (default): the first for at most
        :data:`COMPRESS_MAX_BUCKETS` buckets.  Measured by ``experiments/bench_partition.py`` (blocks of 2^20
        int32 and int64 keys in random buckets): on one thread compressing was the faster up to 4-6 buckets
        (the CPU-only machine: 2.9-6.3 ms against 5.5-13.9 for 2 to 6 buckets,
        ``experiments/results/cpu-only/bench_partition.log``); with every thread grouping a block at once, as
        :func:`hpu.sorting.keyrange.partition` runs it, it scaled 6-11x over 32 threads up to 8 buckets and
        the argsort 3-6x, so that compressing was the faster up to 16 buckets on the two-GPU machine's 32
        threads (``experiments/results/h200x2/bench_partition.log``) and the argsort at 32.  8 buckets is the
        compromise.

    Returns
    -------
    out : numpy.ndarray, shape (m,)
    counts : numpy.ndarray, shape (k,), int64
        Keys per bucket: bucket ``b`` is ``out[sum(counts[:b]) : sum(counts[:b + 1])]``.

    Raises
    ------
    ValueError
        An unknown ``method``, ``k < 1``, or ``x`` and ``ids`` of different lengths.
    """
    if method not in ("auto", "compress", "argsort"):
        raise ValueError(f"method must be 'auto', 'compress' or 'argsort', got {method!r}")
    if k < 1 or x.shape != ids.shape:
        raise ValueError(f"need k >= 1 and one bucket number a key, got k={k}, {x.shape} keys, {ids.shape} numbers")
    out = np.empty_like(x) if out is None else out[: x.shape[0]]
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
    for f in [pool.submit(copy_into, dst[b[i] : b[i + 1]], src[b[i] : b[i + 1]], stream) for i in range(threads)]:
        f.result()


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

    futures = [pool.submit(bucket, cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1)]
    for f in futures:
        f.result()


def _merge_runs(x: np.ndarray) -> None:
    x.sort(kind="stable")  # timsort finds the sorted runs and merges them; already stable


def parallel_sort(a: np.ndarray, pool: concurrent.futures.Executor, threads: int,
                  out: np.ndarray | None = None, scratch: np.ndarray | None = None,
                  runs: int | None = None, *, timsort_max_runs: int = TIMSORT_MAX_RUNS) -> np.ndarray:
    """``np.sort(a, kind="stable")`` on ``threads`` threads of ``pool`` (PSRS).

    Parameters
    ----------
    a : numpy.ndarray, shape (n,)
        Numeric 1-D array; not modified.
    pool : concurrent.futures.Executor
    threads : int
        Threads to use (>= 1).
    out : numpy.ndarray, shape (n,), optional
        Destination (must not overlap ``a``); a new array by default.
    scratch : numpy.ndarray, optional
        A 1-D array of ``a``'s dtype with at least ``n`` elements for the
        sorted chunks (saves allocating and page-faulting one per call).
    runs : int, optional
        Number of chunks sorted in the first phase (default ``threads``;
        more than ``threads`` balances the load when some threads are slow,
        at the price of more runs to merge).
    timsort_max_runs : int
        Passed to :func:`multiway_merge` (default :data:`TIMSORT_MAX_RUNS`).

    Returns
    -------
    numpy.ndarray, shape (n,)
        The sorted array (``out`` if given).
    """
    n = a.shape[0]
    out = np.empty_like(a) if out is None else out
    threads = min(threads, max(1, n // SERIAL_CUTOFF))  # each chunk at least SERIAL_CUTOFF elements
    if threads == 1:
        out[:] = a
        stable_sort_inplace(out)
        return out
    tmp = scratch[:n] if scratch is not None and scratch.shape[0] >= n else np.empty_like(a)
    k = max(threads, min(int(runs or threads), n // SERIAL_CUTOFF))
    b = np.linspace(0, n, k + 1).astype(np.int64)

    def chunk(i: int) -> None:
        tmp[b[i] : b[i + 1]] = a[b[i] : b[i + 1]]
        stable_sort_inplace(tmp[b[i] : b[i + 1]])

    for f in [pool.submit(chunk, i) for i in range(k)]:
        f.result()
    multiway_merge([tmp[b[i] : b[i + 1]] for i in range(k)], out, pool, threads, timsort_max_runs=timsort_max_runs)
    return out
