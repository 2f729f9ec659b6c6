"""The sort's cost model: measured cost curves and the fast-mode split (beyond the paper).

The paper's model (López-Ortiz et al. 2014, section 5) predicts the
breadth-first scheme; fast mode's steps (local-memory leaf sorts,
merge-path merges, pinned staged copies, the CPU's parallel sort and
multiway merge) are predicted from cost curves measured by
:func:`hpu.sorting.calibrate.measure_costs` and stored in the profile under
``"sort"``.  Also here: the closed forms of paper section 5.2.2 for
mergesort, which check the general level sums of :mod:`hpu.core.model`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.hybrid import check_strategy
from ..core.model import Recurrence, Split, UnitShares, check_n, equal_finish_shares
from ..core.profile import Profile
from .cpu import COMPRESS_MAX_BUCKETS, native_partition

__all__ = ["FAST_COSTS", "PIECE_FILL", "SORT_COSTS", "cpu_sort_method", "exchange_split", "fast_cost", "fast_split",
           "has_device_curves", "keyrange_split", "mergesort_closed_forms", "partition_cost"]

#: A key range sorted on a device holds at most this fraction of what one device run may hold, so that a sample's
#: error rarely overflows it (:func:`hpu.sorting.keyrange.keyrange_sort`; :func:`keyrange_split` predicts so).
PIECE_FILL = 0.75


def mergesort_closed_forms(n: float, profile: Profile, alpha: float) -> dict:
    """The closed forms of paper section 5.2.2 for ``a = b = 2``, ``f(n) = n``.

    Returns a dict with ``T_c``, ``T_g_max``, ``case`` and ``y`` (solved from the
    closed-form ``T_g`` piecewise function) and ``W_g``; used to check the
    general sums of section 5.2.1.
    """
    p, g, gam = profile.p, profile.g, profile.gamma
    L = math.log2(n)
    t_c = alpha * n / p * (L - math.log2(p / alpha) + 1)
    t_gmax = (1 - alpha) * n / (gam * g) * (L - math.log2(g / (1 - alpha)) + 1)
    if (1 - alpha) * n < g:
        case = "i"
        # (1/gamma)(n a/(a-1) a^-y - 1/(a-1)) = T_c
        y = -math.log2((t_c * gam + 1) / (2 * n))
    elif t_gmax >= t_c:
        case = "ii"
        y = L + 1 - t_c * gam * g / ((1 - alpha) * n)
    else:
        case = "iii"
        # T_gmax + 2n/gamma (2^-y - (1-alpha)/g) = T_c
        y = -math.log2((t_c - t_gmax) * gam / (2 * n) + (1 - alpha) / g)
    w_g = (1 - alpha) * n * (L - y + 1)
    return {"T_c": t_c, "T_g_max": t_gmax, "case": case, "y": y, "W_g": w_g, "total": n * (L + 1)}


#: Fast-mode cost curves a calibrated profile carries in the profile's ``"sort"`` curves, next to ``"sizes"``
#: (``"cpu_sort"``, ``"merge2"`` and ``"merge16"`` always, which :func:`fast_split` needs: a profile file without
#: one is refused, :data:`hpu.core.profile.REQUIRED_CURVES`; ``"transfer"`` and ``"device_sort"`` where calibrated
#: with a device; ``"cpu_sort_1"`` only where the runtime has more than one thread; ``"partition"`` from
#: calibrations made since the key-range split; without it ``"auto"`` does not consider that split; ``"partition4"``
#: from calibrations made since partitions count their buckets: without it a partition is charged as two buckets;
#: ``"cpu_sort_psrs"`` only where the compiled partition was built, from calibrations made since the sample sort).
FAST_COSTS = ("cpu_sort", "cpu_sort_1", "cpu_sort_psrs", "device_sort", "transfer", "merge2", "merge16", "partition",
              "partition4", "kept_pinned", "kept_plain")


#: The curves of the CPU's comparison sorts: past the largest calibrated size :func:`fast_cost` scales them by
#: ``log2 n / log2 n_max`` beyond the at least linear growth every curve is extrapolated with (not the device's:
#: a CPU device sorts by a radix sort, linear in ``n``).
SORT_COSTS = ("cpu_sort", "cpu_sort_1", "cpu_sort_psrs")


def fast_cost(profile: Profile, name: str, n: Any, itemsize: int = 4) -> Any:
    """Predicted seconds of one fast-mode step on ``n`` elements (0 where ``n <= 0``; ``n`` may be an array).

    ``cpu_sort``: :func:`hpu.sorting.cpu.parallel_sort` on all threads, the faster of its sample sort
    (``cpu_sort`` as measured) and PSRS (``cpu_sort_psrs``) where the profile has both (the pipeline runs the faster:
    :func:`cpu_sort_method`);
    ``partition``/``partition4``: the key-range split's partition into
    two / four buckets (:func:`hpu.sorting.keyrange.partition`) on all
    threads (:func:`partition_cost` for other counts);
    ``kept_pinned``/``kept_plain``: a whole device-only sort while the
    caller keeps every earlier result, into freshly pinned memory / into
    plain memory through the staging buffer
    (:func:`hpu.sorting.pipeline.kept_policy` chooses by them);
    ``cpu_sort_1``: the same on one thread (numpy's sort);
    ``device_sort``: the device-resident sort; ``transfer``: everything
    else of a device-only sort of ``n`` elements (staging, copies to the
    device and back, the copy into the result); ``merge2``/``merge16``: the
    CPU multiway merge of 2 / 16 runs.

    The profile's ``"sort"`` curves (:meth:`hpu.Profile.cost_curves`) hold
    each step's time measured at a few sizes (4-byte keys), interpolated by
    :meth:`hpu.core.costs.CostCurves.cost`; costs scale with ``itemsize / 4``.
    Past the largest size measured, the curves of :data:`SORT_COSTS` grow by
    ``log2 n / log2 n_max`` more than the others: a sort's ``Theta(n log n)``, as for
    the mergesort of López-Ortiz et al. 2014, section 5.2.2.

    Raises
    ------
    ValueError
        The profile has no sort curves, or none for ``name``.
    """
    curves = profile.cost_curves("sort")
    if curves is None or name not in curves:
        raise ValueError(f"profile {profile.name!r} has no fast-mode cost {name!r}; run python -m hpu.calibrate")
    t = curves.cost(name, n, itemsize)
    if name == "cpu_sort" and "cpu_sort_psrs" in curves:
        t = np.minimum(t, curves.cost("cpu_sort_psrs", n, itemsize))
    if name in SORT_COSTS:  # past the largest size measured, a sort's time grows as n log n, not n
        top = curves.sizes[-1]
        t = t * np.maximum(np.log2(np.maximum(n, 2)) / np.log2(top), 1.0)
    return float(t) if np.ndim(t) == 0 else t


def cpu_sort_method(profile: Profile, n: int, itemsize: int = 4) -> str:
    """:func:`hpu.sorting.cpu.parallel_sort`'s ``method`` for ``n`` keys: ``"psrs"`` or ``"sample"``, whichever the
    profile measured faster there (its curves ``cpu_sort_psrs`` and ``cpu_sort``,
    :func:`hpu.sorting.calibrate.measure_costs`); ``"auto"`` where it has not both.

    Which one wins depends on the machine (``experiments/bench_cpusort.py``; ``experiments/README.md``, *The CPU's
    sort*): on the CPU-only machine (2 cores, whose numpy sorts 2^24 int32 5.5 times slower than the H100
    machine's) the sample sort of 2^24 int32 took 234 ms against 372 ms for PSRS; on the H100 machine (16 cores)
    30.4 ms against 22.1 ms, and within 9% of PSRS at 2^22 and 2^28.
    """
    curves = profile.cost_curves("sort")
    if curves is None or "cpu_sort_psrs" not in curves or "cpu_sort" not in curves:
        return "auto"
    faster = float(curves.cost("cpu_sort_psrs", n, itemsize)) < float(curves.cost("cpu_sort", n, itemsize))
    return "psrs" if faster else "sample"


def partition_cost(profile: Profile, n: Any, buckets: int, itemsize: int = 4) -> Any:
    """Predicted seconds of the key-range split's partition of ``n`` keys into ``buckets`` buckets.

    Where the compiled partition was built (:func:`hpu.sorting.cpu.native_partition`) each key is placed in one
    pass whatever the buckets (its bucket found through a table, then scattered), so the cost is the larger of the
    calibrated two- and four-bucket curves for any count.  Else, up to :data:`hpu.sorting.cpu.COMPRESS_MAX_BUCKETS`
    buckets the partition compresses each bucket's keys out of a block in turn
    (:func:`hpu.sorting.cpu.stable_partition`), a pass a bucket, so its cost is taken linear in the buckets through
    the two curves, ``p2 + (p4 - p2) (b - 2) / 2`` with ``b`` clipped to ``[2, COMPRESS_MAX_BUCKETS]`` (above, the
    argsort's cost hardly grows with ``b``).  A profile without ``"partition4"`` gets ``p2`` for any count.
    Beyond the paper: its model has no partition.

    Parameters
    ----------
    profile : Profile
        With the ``"partition"`` sort curve (and ``"partition4"``; :func:`hpu.sorting.calibrate.measure_costs`).
    n : int, float or numpy.ndarray
        Keys.
    buckets : int
        Buckets of the partition.
    itemsize : int
        Bytes per key (costs scale from the 4-byte calibration).

    Returns
    -------
    float or numpy.ndarray
        Seconds, shaped as ``n``.

    Raises
    ------
    ValueError
        The profile has no ``"partition"`` curve.
    """
    p2 = fast_cost(profile, "partition", n, itemsize)
    curves = profile.cost_curves("sort")
    if curves is None or "partition4" not in curves:
        return p2
    p4 = fast_cost(profile, "partition4", n, itemsize)
    if native_partition():
        return np.maximum(p2, p4)
    b = min(max(int(buckets), 2), COMPRESS_MAX_BUCKETS)
    return p2 + (p4 - p2) * (b - 2) / 2


def _fast_time(profile: Profile, n: float, alpha: Any, t: int, w: int = 4,
               cpu_threads: int = 0, shared_cores: bool = False) -> tuple[Any, Any, Any, Any]:
    """(CPU share, device share, final merge, total) seconds for fast-mode splits (alpha may be an array).

    ``cpu_threads``: 0 for the CPU share on all threads, 1 for one thread.
    ``shared_cores``: the device runs on the host's cores, so the two shares add up instead of overlapping.
    """
    a = np.asarray(alpha, dtype=float)
    n_c = np.round(a * n)
    n_g = n - n_c
    cpu = fast_cost(profile, "cpu_sort_1" if cpu_threads == 1 else "cpu_sort", n_c, w)
    k = 2**t
    dev = np.zeros_like(n_g)
    if np.any(n_g > 0):  # a CPU-only profile has no device curves, and needs none for alpha = 1
        dev = np.where(n_g > 0, fast_cost(profile, "transfer", n_g, w) + k * fast_cost(profile, "device_sort", n_g / k, w),
                       0.0)
    runs = (n_c > 0) + np.where(n_g > 0, k, 0)
    m2, m16 = fast_cost(profile, "merge2", n, w), fast_cost(profile, "merge16", n, w)
    merge = m2 + (m16 - m2) * np.clip((np.log2(np.maximum(runs, 1)) - 1) / 3.0, 0.0, 2.0)  # linear in log2(runs)
    final = np.where(runs > 1, merge, 0.0)
    total = (cpu + dev if shared_cores else np.maximum(cpu, dev)) + final
    return cpu, dev, final, total


def has_device_curves(profile: Profile) -> bool:
    """Whether ``profile`` has the device's sort curves, ``"transfer"`` and ``"device_sort"``."""
    curves = profile.cost_curves("sort")
    return curves is not None and "transfer" in curves and "device_sort" in curves


def _never(x: Any) -> Any:
    """The cost of a unit that cannot take part: infinite for any item, 0 for none."""
    return np.where(np.asarray(x) > 0, np.inf, 0.0)


def _forced_shares(m: int, costs: Sequence[Any], shares: Sequence[float]) -> UnitShares:
    """``m`` items divided by the given ``shares`` (not by :func:`equal_finish_shares`), each unit's time its cost."""
    counts = [int(round(float(v) * m)) for v in shares]
    counts[int(np.argmax(counts))] += m - sum(counts)
    times = tuple(float(c(np.asarray(float(k)))) if k else 0.0 for c, k in zip(costs, counts))
    return UnitShares(tuple(counts), tuple(k / m for k in counts), times, max(times))


def keyrange_split(n: float, profile: Profile, devices: Sequence[Profile], *, itemsize: int = 4,
                   shared_cores: bool = False, capacity: Sequence[float] | None = None,
                   shares: Sequence[float] | None = None) -> Split:
    """Shares of a key-range split (:mod:`hpu.sorting.keyrange`) over the CPU and ``k`` devices, and its time.

    Each unit sorts its own range of keys, so that the units only have to
    finish together (:func:`hpu.core.model.equal_finish_shares`): with
    ``m_0`` keys on the CPU and ``m_i`` on device ``i``,

    ``T = T_part(n, b) + max(T_cpu_sort(m_0), max_i (T_transfer,i(m_i) + T_dev_sort,i(m_i)))``

    where ``T_part`` is the partition on the thread pool into the ``b``
    buckets of the units with keys (:func:`partition_cost`) and every term is
    a measured cost curve (:func:`fast_cost`) of the CPU's profile or of
    device ``i``'s own.  When the devices run on the host's cores
    (``shared_cores``, e.g. PoCL) nothing overlaps and ``max`` becomes a sum.
    A device range larger than :data:`PIECE_FILL` of what one device run
    may hold (``capacity``) is sorted in ``k_i = ceil(m_i / (PIECE_FILL
    capacity_i))`` key ranges one after another
    (:func:`hpu.sorting.keyrange.keyrange_sort`): device ``i`` then
    costs ``k_i (T_transfer,i(m_i / k_i) + T_dev_sort,i(m_i / k_i))`` and
    each of its ranges is one more bucket of the partition.  Beyond the
    paper, whose model has neither key ranges nor a partition.

    Parameters
    ----------
    n : float
        Keys (>= 1).
    profile : Profile
        The CPU's (and the first device's) profile, with ``"partition"`` in
        its sort curves (else the partition is predicted free).
    devices : sequence of Profile
        One per device, with ``"transfer"`` and ``"device_sort"`` curves; a
        device without them gets no share.
    itemsize : int
        Bytes per key (costs scale from the 4-byte calibration).
    shared_cores : bool
        The devices run on the host's cores (:attr:`hpu.Runtime.device_shares_host_cores`).
    capacity : sequence of float, optional
        Per device, the most keys one device run may hold (default: no
        limit; :func:`hpu.sorting.pipeline.max_device_elements`).
    shares : sequence of float, optional
        The units' shares, CPU first (default: those that make the units
        finish together); e.g. a position split's ``(alpha, 1 - alpha)``
        that ``hybrid_mergesort`` runs as key ranges when the device cannot
        hold its share.

    Returns
    -------
    Split
        ``strategy="keyrange"``, ``shares`` (CPU first), ``alpha`` the CPU's
        share, ``predicted_time`` in seconds, ``case="keyrange"``.

    Raises
    ------
    ValueError
        ``n < 1``, no unit with cost curves, or ``shares`` (``capacity``) of another length than the units
        (``devices``).
    """
    n = check_n(n)
    m = int(n)
    if shares is not None and len(shares) != 1 + len(devices):
        raise ValueError(f"shares must give the CPU and each of {len(devices)} devices a share, got {list(shares)}")
    if capacity is not None and len(capacity) != len(devices):
        raise ValueError(f"capacity must give each of {len(devices)} devices a size, got {list(capacity)}")

    def cpu_cost(x: np.ndarray) -> np.ndarray:
        return np.where(x > 0, fast_cost(profile, "cpu_sort", x, itemsize), 0.0)

    caps = [math.inf] * len(devices) if capacity is None else [max(1.0, PIECE_FILL * float(c)) for c in capacity]

    def ranges(x: Any, cap: float) -> Any:  # key ranges a device sorts one after another
        return np.maximum(1.0, np.ceil(np.asarray(x, dtype=float) / cap))

    def dev_cost(prof: Profile, cap: float) -> Any:
        if not has_device_curves(prof):
            return _never

        def cost(x: Any) -> Any:
            k = ranges(x, cap)
            return np.where(x > 0, k * (fast_cost(prof, "transfer", x / k, itemsize) +
                                        fast_cost(prof, "device_sort", x / k, itemsize)), 0.0)
        return cost

    costs = [cpu_cost] + [dev_cost(p, c) for p, c in zip(devices, caps)]
    units = equal_finish_shares(m, costs) if shares is None else _forced_shares(m, costs, shares)
    if not math.isfinite(units.predicted_time):
        raise ValueError("no unit has the cost curves of a key-range split; run python -m hpu.calibrate")
    curves = profile.cost_curves("sort")
    runs = [int(ranges(c, cap)) if c else 0 for c, cap in zip(units.counts[1:], caps)]  # each device's key ranges
    buckets = int(units.counts[0] > 0) + sum(runs)
    part = float(partition_cost(profile, n, buckets, itemsize)) if curves is not None and "partition" in curves else 0.0
    busy = sum(units.times) if shared_cores else units.predicted_time
    total = part + busy
    one_core = Recurrence(2, 2, 1).total_work(n) * profile.cpu_op_seconds
    alpha = units.shares[0]
    return Split(
        strategy="keyrange",
        alpha=alpha,
        y=0.0,
        transfer_level=0,
        depth=math.log2(n),
        gpu_work_fraction=1.0 - alpha,
        predicted_cpu_time=part + units.times[0],
        predicted_gpu_time=max(units.times[1:], default=0.0),
        predicted_transfer_time=sum(k * float(fast_cost(p, "transfer", c / k, itemsize))
                                    for p, c, k in zip(devices, units.counts[1:], runs) if c),
        predicted_time=total,
        predicted_speedup=one_core / total,
        case="keyrange",
        shares=units.shares,
    )


#: Keys of the device's leaf tile that its merge sort's passes start from (the H100's: 256 work-items x 17 keys).
_LEAF_TILE = 4352


def exchange_split(n: float, devices: Sequence[Profile], *, itemsize: int = 4,
                   shares: Sequence[float] | None = None) -> Split:
    """Shares of an exchange sort (:mod:`hpu.sorting.exchange`) over ``k`` devices, and its time.

    Device ``i`` sorts ``m_i`` of the positions, trades the keys that belong
    to the other devices' ranges (about ``m_i (1 - m_i / n)`` each way for
    keys in random order) and merges what it holds.  The staging and the
    copies of all ``n`` keys share the host's memory, which bounds them on
    the machines measured (two H100s: each GPU's copies run at 55 GB/s alone
    and at once, but the staging copy of the pageable input is the host's:
    ``experiments/README.md``), so they cost what they cost one device:

    ``T = T_transfer,1(n) + max_i [T_dev_sort,i(m_i) (1 + 1 / (P(m_i) + 2)) + T_transfer,i(m_i (1 - m_i / n))]``

    with ``P(m) = ceil(log2(m / 4352))`` the merge sort's passes (a merge of
    the runs costs about one pass; the leaf sort about two), each term a
    measured cost curve of the first device's or of device ``i``'s own
    profile (:func:`fast_cost`), at the shares that make the devices'
    own parts finish together (:func:`hpu.core.model.equal_finish_shares`).
    Against one device's ``T_transfer(n) + T_dev_sort(n)`` the exchange pays
    only where the devices' sort dominates the copies.

    Parameters
    ----------
    n : float
        Keys (>= 1).
    devices : sequence of Profile
        One per device, with ``"transfer"`` and ``"device_sort"`` curves; a
        device without them gets no share.
    itemsize : int
        Bytes per key (costs scale from the 4-byte calibration).
    shares : sequence of float, optional
        The devices' shares to predict (one per device, summing to 1);
        default: the model's.

    Returns
    -------
    Split
        ``strategy="exchange"``, ``shares`` (the CPU's 0 first, then each
        device's), ``alpha`` 0, ``predicted_time`` in seconds,
        ``predicted_transfer_time`` the shared ``T_transfer,1(n)``,
        ``case="exchange"``.

    Raises
    ------
    ValueError
        ``n < 1``, no device with cost curves, or ``shares`` of another
        length than ``devices``.
    """
    n = check_n(n)

    def dev_cost(prof: Profile) -> Any:
        if not has_device_curves(prof):
            return _never

        def cost(x: np.ndarray) -> np.ndarray:
            x = np.asarray(x, dtype=float)
            passes = np.ceil(np.log2(np.maximum(x, _LEAF_TILE) / _LEAF_TILE))
            sort = fast_cost(prof, "device_sort", x, itemsize)
            return np.where(x > 0, sort * (1 + 1 / (passes + 2)) +
                            fast_cost(prof, "transfer", x * (1.0 - x / n), itemsize), 0.0)
        return cost

    costs = [dev_cost(p) for p in devices]
    if shares is None:
        units = equal_finish_shares(int(n), costs)
    else:
        if len(shares) != len(devices):
            raise ValueError(f"shares must give each of {len(devices)} devices a share, got {list(shares)}")
        counts = [float(v) * n for v in shares]
        times = tuple(float(c(np.array([m]))[0]) for c, m in zip(costs, counts))
        units = UnitShares(tuple(int(round(m)) for m in counts), tuple(float(v) for v in shares), times, max(times))
    first = next((p for p in devices if has_device_curves(p)), None)
    if not math.isfinite(units.predicted_time) or first is None:
        raise ValueError("no device has the cost curves of an exchange sort; run python -m hpu.calibrate")
    shared = float(fast_cost(first, "transfer", n, itemsize))
    total = shared + units.predicted_time
    one_core = Recurrence(2, 2, 1).total_work(n) * devices[0].cpu_op_seconds
    return Split(
        strategy="exchange",
        alpha=0.0,
        y=0.0,
        transfer_level=0,
        depth=math.log2(n),
        gpu_work_fraction=1.0,
        predicted_cpu_time=0.0,
        predicted_gpu_time=units.predicted_time,
        predicted_transfer_time=shared,
        predicted_time=total,
        predicted_speedup=one_core / total,
        case="exchange",
        shares=(0.0, *units.shares),
    )


def fast_split(n: float, profile: Profile, *, strategy: str = "auto", max_level: int = 4,
               device: bool = True, itemsize: int = 4, shared_cores: bool = False,
               devices: Sequence[Profile] | None = None, capacity: Sequence[float] | None = None) -> Split:
    """Choose and predict a fast-mode split (``alpha``, ``transfer_level``) by minimising predicted time.

    The prediction (beyond the paper; fast mode of DESIGN.md) is
    ``max(T_cpu(alpha n), T_transfer((1-alpha) n) + 2**t T_dev((1-alpha) n / 2**t)) + T_merge(n, runs)``:
    the CPU share and the device share run concurrently (paper 5.2), the
    device sorts its share as ``2**t`` segments, and the CPU merges all runs
    at the end.  Each term comes from the profile's fitted fast-mode costs
    (:func:`fast_cost`).  Where the device is a CPU device running on the
    host's own cores (``shared_cores``, e.g. PoCL), the shares cannot overlap
    and ``max`` becomes a sum.  The CPU alone may also use one thread, where
    the profile has that curve (``"cpu_sort_1"``): on few cores numpy's sort
    on one thread can beat a parallel sort whose final merge is memory-bound.

    Parameters
    ----------
    n : float
        Number of elements (>= 1).
    profile : Profile
        With fast-mode cost curves (its ``"sort"`` curves, :data:`FAST_COSTS`); without the device's
        (``"transfer"``, ``"device_sort"``) only the CPU takes part.
    strategy : {"auto", "cpu", "gpu", "basic", "advanced", "keyrange", "exchange"}
        ``"cpu"``: alpha = 1; ``"gpu"``: alpha = 0, t = 0; ``"basic"``:
        alpha = 0, best t >= 1; ``"advanced"``: best alpha in (0, 1) and t;
        ``"keyrange"``: the key-range split of :func:`keyrange_split`;
        ``"exchange"``: the exchange sort of :func:`exchange_split`;
        ``"auto"``: the best of all of them (the key-range split only where
        the profile has the ``"partition"`` curve, the exchange sort only
        with several devices that do not share the host's cores).
    max_level : int
        Largest transfer level considered.
    device : bool
        False when no usable device exists (then only ``"cpu"``).
    itemsize : int
        Bytes per key (costs scale from the 4-byte calibration).
    shared_cores : bool
        The device shares the host's cores (:attr:`hpu.Runtime.device_shares_host_cores`).
    devices : sequence of Profile, optional
        The profile of every device of the HPU for the key-range split
        (default: ``[profile]``, one device).
    capacity : sequence of float, optional
        Per device, the most keys one device run may hold (default: no
        limit).  A position split whose device share is larger runs as key
        ranges with its shares, the device's sorted one after another
        (``hybrid_mergesort``), and is predicted so (:func:`keyrange_split`
        with ``capacity`` and ``shares``), as is the key-range split.

    Returns
    -------
    Split
        ``strategy`` is the chosen one; times in seconds; ``cpu_threads`` is
        1 when the CPU alone sorts on one thread, else 0 (all threads);
        ``transfer_level`` (and ``y``) is ``t``, the device sorting its
        share as ``2**t`` segments; ``gpu_work_fraction = 1 - alpha``;
        ``predicted_speedup`` is mergesort's one-core time
        ``n (log2 n + 1) cpu_op_seconds`` over ``predicted_time``;
        ``case = "fast"`` for a position split, ``"keyrange"`` or
        ``"exchange"`` for a split across units (:func:`keyrange_split`,
        :func:`exchange_split`).

    Raises
    ------
    ValueError
        ``n < 1``, unknown strategy, or a profile without fast-mode costs (for ``"gpu"``, ``"basic"``,
        ``"advanced"`` and ``"exchange"``: without the device's).
    TypeError
        ``profile``, or an item of ``devices``, not an :class:`hpu.Profile`.
    """
    n = check_n(n)
    for what, prof in [("profile", profile)] + [(f"devices[{i}]", d) for i, d in enumerate(devices or ())]:
        if not isinstance(prof, Profile):
            raise TypeError(f"{what} must be an hpu.Profile, got {type(prof).__name__}")
    check_strategy(strategy, ("auto", "cpu", "gpu", "basic", "advanced", "keyrange", "exchange"))
    if not device:
        strategy = "cpu"  # as hybrid_mergesort runs every strategy without a usable device
    curves = profile.cost_curves("sort")
    devices = [profile] if devices is None else list(devices)
    across = None  # the best split across units (key ranges or exchange), weighed against the position splits
    if device and (strategy == "keyrange" or (strategy == "auto" and curves is not None and "partition" in curves)):
        across = keyrange_split(n, profile, devices, itemsize=itemsize, shared_cores=shared_cores, capacity=capacity)
        if strategy == "keyrange":
            return across
    if device and (strategy == "exchange" or (strategy == "auto" and len(devices) > 1 and not shared_cores)):
        exchange = exchange_split(n, devices, itemsize=itemsize)
        if strategy == "exchange":
            return exchange
        if across is None or exchange.predicted_time < across.predicted_time:
            across = exchange
    cands: list[tuple[str, float, int, int]] = [("cpu", 1.0, 0, 0)]
    if curves is not None and "cpu_sort_1" in curves:
        cands.append(("cpu", 1.0, 0, 1))
    if device and has_device_curves(profile):  # a profile calibrated without a device: the CPU's only
        cands += [("gpu", 0.0, 0, 0)] + [("basic", 0.0, t, 0) for t in range(1, max_level + 1)]
        grid = np.linspace(0.0, 1.0, 257)[1:-1]  # interior alphas, steps of 1/256
        for t in range(0, max_level + 1):
            tot = _fast_time(profile, n, grid, t, itemsize, shared_cores=shared_cores)[3]
            cands.append(("advanced", float(grid[int(np.argmin(tot))]), t, 0))
    if strategy != "auto":
        cands = [c for c in cands if c[0] == strategy]
        if not cands:
            raise ValueError(f"profile {profile.name!r} has no device costs ('transfer', 'device_sort') for "
                             f"strategy {strategy!r}; run python -m hpu.calibrate with the device")
    cap = math.inf if capacity is None or not device else float(capacity[0])
    oversize = [c for c in cands if (1.0 - c[1]) * n > cap]
    if oversize:  # run as key ranges with their shares (hybrid_mergesort): predicted so
        pieces = min((keyrange_split(n, profile, devices, itemsize=itemsize, shared_cores=shared_cores,
                                     capacity=capacity, shares=(c[1], 1.0 - c[1]) + (0.0,) * (len(devices) - 1))
                      for c in oversize), key=lambda sp: sp.predicted_time)
        if across is None or pieces.predicted_time < across.predicted_time:
            across = pieces
        cands = [c for c in cands if c not in oversize]
        if not cands:
            return across
    best = min(cands, key=lambda c: float(_fast_time(profile, n, c[1], c[2], itemsize, c[3], shared_cores)[3]))
    name, alpha, t, threads = best
    cpu, dev, final, total = (float(v) for v in _fast_time(profile, n, alpha, t, itemsize, threads, shared_cores))
    if across is not None and across.predicted_time < total:
        return across
    one_core = Recurrence(2, 2, 1).total_work(n) * profile.cpu_op_seconds  # mergesort's T(n) on one core
    return Split(
        strategy=name,
        alpha=alpha,
        y=float(t),
        transfer_level=int(t),
        depth=math.log2(n),
        gpu_work_fraction=1.0 - alpha,
        predicted_cpu_time=cpu + final,
        predicted_gpu_time=dev,
        predicted_transfer_time=fast_cost(profile, "transfer", (1 - alpha) * n, itemsize) if alpha < 1 else 0.0,
        predicted_time=total,
        predicted_speedup=one_core / total,
        case="fast",
        cpu_threads=threads,
    )
