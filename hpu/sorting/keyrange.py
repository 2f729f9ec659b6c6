"""Key-range split: a sample sort across the CPU and every device, with no final merge (beyond the paper).

The paper splits a sort by position (López-Ortiz et al. 2014, section 5.2):
each unit sorts a share of the positions and the top levels merge the
shares.  When one unit is much faster than the other, that final merge on
the host costs more than the slower unit's share saves.  A key-range split
gives each unit a range of keys instead, as a sample sort does (Frazer and
McKellar, "Samplesort", JACM 1970; Blelloch et al., "A comparison of
sorting algorithms for the Connection Machine CM-2", SPAA 1991):

1. a random sample of the input, sorted, gives ``K - 1`` splitters at the
   cumulative fractions the model asks for (:func:`choose_splitters`); a
   splitter is a (key, position) pair, so that equal keys are divided by
   position and the split stays stable (the CPU sort's PSRS merge breaks
   ties the same way);
2. the thread pool partitions the input by bucket (:func:`partition`):
   each key's bucket, counted by block; then every block's keys to their
   buckets' final offsets in the result, blocks in input order (so each
   bucket holds its keys in input order);
3. every unit sorts its buckets where they lie in the result: the CPU with
   :func:`hpu.sorting.cpu.parallel_sort`, each device through the fast
   pipeline (staging skipped where the result is the device's pinned
   memory), bucket after bucket when a device's range is larger than the
   device memory it may use (:attr:`hpu.Runtime.device_memory_bytes`).

A device that fails has its buckets redone on the CPU, gathered again from
the input by the keys' bucket numbers, which no device writes
(:func:`hpu.core.hybrid.run_units`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.hybrid import UnitsResult, run_units
from ..core.kernels import CL_TYPES
from ..core.runtime import DeviceLease, Runtime
from ..core.trace import Recorder, Trace
from .costs import PIECE_FILL
from .cpu import bucket_ids, choose_splitters, parallel_sort, partition_by_splitters
from .pipeline import DEFAULT_OPTIONS, PipelineOptions, Rental, cpu_method, device_share, max_device_elements

__all__ = ["KeyRangePlan", "bucket_ids", "check_shares", "choose_splitters", "keyrange_sort", "partition"]

#: Keys per block of :func:`partition`.  Smaller blocks make many more small numpy calls, for which 16 threads queue
#: on Python's global lock (2^16-key blocks were 4-5x slower on the H100 machine: experiments/README.md).
BLOCK = 1 << 20


@dataclasses.dataclass
class KeyRangePlan:
    """Where each bucket of a key-range split lies and which unit sorts it.

    Attributes
    ----------
    bounds : numpy.ndarray, shape (K + 1,), int64
        Bucket ``b`` is ``result[bounds[b]:bounds[b + 1]]``.
    owner : list of int
        Per bucket: 0 for the CPU, ``1 + i`` for device ``i`` of ``rt.units``.
    blocks : numpy.ndarray, shape (C + 1,), int64
        Input block bounds of the partition.
    counts : numpy.ndarray, shape (C, K), int64
        Keys of block ``c`` in bucket ``b``.
    ids : numpy.ndarray, shape (n,), unsigned integers, or None
        Each input key's bucket (:func:`partition`); None for one bucket.
    """

    bounds: np.ndarray
    owner: list[int]
    blocks: np.ndarray
    counts: np.ndarray
    ids: np.ndarray | None = None

    def gather(self, src: np.ndarray, b: int, out: np.ndarray) -> None:
        """Bucket ``b``'s keys of the input ``src``, in input order, into their range of ``out`` (what a failed
        unit's bucket is redone from)."""
        lo, hi = int(self.bounds[b]), int(self.bounds[b + 1])
        if self.ids is None:
            out[lo:hi] = src[lo:hi]
        else:
            np.compress(self.ids == b, src, out=out[lo:hi])


def partition(src: np.ndarray, keys: np.ndarray, positions: np.ndarray, out: np.ndarray, rt: Runtime, *,
              block: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`hpu.sorting.cpu.partition_by_splitters` (its parameters and results) on ``rt``'s thread pool, in blocks
    of ``block`` keys (default :data:`BLOCK`), with the keys' bucket numbers (the least unsigned integer type that
    holds ``K - 1``) in ``rt``'s host pool, returned last as ``ids``: what :meth:`KeyRangePlan.gather` redoes a
    bucket from."""
    ids = rt.host_pool.empty_or_new(src.shape[0], np.min_scalar_type(keys.size))
    bounds, blocks, counts = partition_by_splitters(src, keys, positions, out, ids, rt.pool, rt.threads,
                                                    block=BLOCK if block is None else int(block))
    return bounds, blocks, counts, ids


def _fractions(shares: Sequence[float], pieces: Sequence[int]) -> tuple[list[float], list[int]]:
    """Cumulative splitter fractions and each bucket's unit, for unit shares and pieces per unit."""
    fr, owner, acc = [], [], 0.0
    for unit, (share, k) in enumerate(zip(shares, pieces)):
        for j in range(k):
            owner.append(unit)
            fr.append(acc + share * (j + 1) / k)
        acc += share
    return fr[:-1], owner


def check_shares(shares: Sequence[float], units: int) -> np.ndarray:
    """``shares`` as a float array: ``1 + units`` non-negative fractions (the CPU's, then each device's) summing to 1
    (within 1e-6; scaled to sum to 1 exactly, so that the splitters' fractions stay in [0, 1]).

    Raises
    ------
    TypeError
        ``shares`` is not a sequence of real numbers (a string, a set, bools, ``None``s).
    ValueError
        Another length (a scalar included), a negative or NaN share, or a sum other than 1 (within 1e-6).
    """
    try:
        s = np.asarray(shares)
    except ValueError:  # ragged nesting
        s = np.asarray(None)
    if s.dtype.kind not in "iuf":
        raise TypeError(f"shares must be a sequence of real numbers (the CPU's fraction, then each of {units} "
                        f"devices'), got {shares!r}")
    s = s.astype(float)
    if s.shape != (1 + units,) or not np.all(s >= 0) or not math.isclose(s.sum(), 1.0, abs_tol=1e-6):
        raise ValueError(f"shares must be {1 + units} non-negative fractions (the CPU, then each of "
                         f"{units} devices) summing to 1, got {shares!r}")
    return s / s.sum()


def keyrange_sort(arr: np.ndarray, rt: Runtime, shares: Sequence[float], *, on_device_error: str = "fallback",
                  split: Any = None, options: PipelineOptions = DEFAULT_OPTIONS,
                  units: Sequence[Runtime] | None = None) -> tuple[np.ndarray, Trace]:
    """Sort ``arr`` with a key range per unit: the CPU's and each device's share of the keys.

    Parameters
    ----------
    arr : numpy.ndarray, shape (n,)
        int32, uint32, int64, uint64, float32 or float64; never modified.
    rt : Runtime
        Its units: the CPU (thread pool) and ``rt.units`` (its device and its peers').
    shares : sequence of float, length ``1 + len(units)``
        Fractions of the keys for the CPU and each device, non-negative,
        summing to 1 (a unit with share 0 takes no part).
    on_device_error : {"fallback", "raise"}
    split : optional
        Recorded in the trace.
    options : PipelineOptions
    units : sequence of Runtime, optional
        The devices ``shares`` names (default ``rt.units`` now): those the
        caller planned for.  The CPU sorts the ranges of one lost since
        (another thread's failed rebuild); one lost later still fails its
        lease, and its ranges fall back or the call raises, as
        ``on_device_error`` says.

    Returns
    -------
    sorted : numpy.ndarray, shape (n,)
        Equal to ``np.sort(arr, kind="stable")``.
    trace : Trace
        Strategy ``"keyrange"``; ``alpha`` is the CPU's measured fraction.

    Raises
    ------
    ValueError
        ``arr`` not a 1-D numpy array; shares of the wrong length, negative,
        or not summing to 1; a device share for a dtype a device cannot sort.
    hpu.DeviceFailure
        With ``on_device_error="raise"`` when a device fails.

    Notes
    -----
    A device's range larger than :data:`hpu.sorting.costs.PIECE_FILL` of what one device run
    may hold (:func:`hpu.sorting.pipeline.max_device_elements`, which the
    runtime's ``device_memory_limit`` caps) is split into that many more
    key ranges, sorted on the device one after another; a piece the sample
    made too large for its device anyway is sorted by the CPU.
    """
    if not isinstance(arr, np.ndarray) or arr.ndim != 1:
        raise ValueError(f"keyrange_sort sorts a 1-D numpy array, got {type(arr).__name__} of shape {np.shape(arr)}")
    units = rt.units if units is None else tuple(units)  # read once: a failed rebuild may drop a device meanwhile
    s = check_shares(shares, len(units))
    n, dt = arr.shape[0], arr.dtype
    for i, u in enumerate(units):  # (a device lost since units was read supports nothing: its lease fails instead)
        if s[1 + i] > 0 and (dt not in CL_TYPES or (not u.supports(dt) and u.has_device)):
            raise ValueError(f"device {u.device_name!r} cannot sort {dt}; give it share 0")
    rec = Recorder()
    src = np.ascontiguousarray(arr)
    cap = [max(1, max_device_elements(u, dt.itemsize)) for u in units]
    # One piece for a device lost since units was read (its capacity 0, asked after it): the CPU sorts its range
    pieces = [1] + [max(1, math.ceil(s[1 + i] * n / (PIECE_FILL * cap[i]))) if u.has_device else 1
                    for i, u in enumerate(units)]
    active = [u for u in range(len(s)) if s[u] > 0]
    fr, owner = _fractions([s[u] for u in active], [pieces[u] for u in active])
    owner = [active[o] for o in owner]
    pinned = active != [0]
    rental = Rental(f"keyrange-{len(active)}", n, dt.itemsize)  # over these many units, as its own calls measure it
    kept = rental.kept(rt, options) if pinned else "pin"
    out = rt.host_pool.empty_or_new(n, dt, pinned=pinned, kept=kept, inputs=(arr,))
    trace = Trace("keyrange", float(s[0]), 0, int(np.ceil(np.log2(max(n, 2)))), n, split=split)
    t0 = rec.now()
    if n and fr:
        keys, positions = choose_splitters(src, fr)
        bounds, blocks, counts, ids = partition(src, keys, positions, out, rt)
    else:
        bounds, blocks = np.array([0, n], np.int64), np.array([0, n], np.int64)
        counts, ids = np.array([[n]], np.int64), None
        owner = owner[:1]  # one bucket: no keys, or one unit
        np.copyto(out, src)
    rec.add("cpu:pool", "partition", 0, t0, rec.now(), len(owner), n, src.nbytes)
    plan = KeyRangePlan(bounds, owner, blocks, counts, ids)
    for b, o in enumerate(plan.owner):  # a piece the sample made too large for its device: the CPU's
        if o and bounds[b + 1] - bounds[b] > cap[o - 1]:
            plan.owner[b] = 0
    trace.alpha = float(sum(bounds[b + 1] - bounds[b] for b, o in enumerate(plan.owner) if o == 0) / max(n, 1))
    _run(rt, units, plan, src, out, rec, on_device_error, options, trace)
    return out, rental.record(rt, out, rec.finish(trace)) if pinned else rec.finish(trace)


def _run(rt: Runtime, units: tuple[Runtime, ...], plan: KeyRangePlan, src: np.ndarray, out: np.ndarray,
         rec: Recorder, on_device_error: str, options: PipelineOptions, trace: Trace) -> None:
    """Each unit sorts its buckets in place in ``out``, at once; a failed device's buckets are redone on the CPU.

    ``units``: the devices the plan's owners number (``rt.units`` as :func:`keyrange_sort` read it), not
    ``rt.units`` now: a device lost since then drops out of that, and its buckets would be left unsorted."""
    def buckets(unit: int) -> list[tuple[int, int]]:
        return [(int(plan.bounds[b]), int(plan.bounds[b + 1])) for b, o in enumerate(plan.owner)
                if o == unit and plan.bounds[b + 1] > plan.bounds[b]]

    def cpu_sort(ranges: list[tuple[int, int]], kind: str) -> None:
        for a, b in ranges:
            t0 = rec.now()
            parallel_sort(out[a:b], rt.pool, rt.threads, out=out[a:b], scratch=rt.host_pool.empty(b - a, out.dtype),
                          method=cpu_method(rt, b - a, out.dtype, options))
            rec.add("cpu:pool", kind, 0, t0, rec.now(), 1, b - a, (b - a) * out.itemsize)

    used = [u for u in range(1, len(units) + 1) if buckets(u)]

    def device(unit: int) -> Any:
        def share(lease: DeviceLease) -> None:
            for a, b in buckets(unit):
                device_share(rt, lease, out[a:b], 0, rec, out[a:b], options, unit=str(unit - 1) if unit > 1 else "")
        return share

    def redo(i: int) -> None:
        unit = used[i]
        for b, o in enumerate(plan.owner):
            if o == unit:  # from the input, by the keys' bucket numbers: no device wrote either
                plan.gather(src, b, out)
        cpu_sort(buckets(unit), "fallback")

    def finish(r: UnitsResult) -> None:
        trace.fallback = "; ".join(f for f in r.fallbacks if f)

    mine = buckets(0)
    run_units([units[u - 1] for u in used], devices=[device(u) for u in used],
              cpu=(lambda: cpu_sort(mine, "sort")) if mine else None, redo=redo, on_device_error=on_device_error,
              finish=finish)
