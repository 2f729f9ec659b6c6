"""The HPU model applied to the tabu-search reduction: choose the CPU share and the transfer level.

Evaluating a neighbourhood of ``N`` moves and reducing it to the best move is
a divide-and-conquer with ``a = b = 2`` and a constant combine:
``T(N) = 2 T(N/2) + O(1)``, whose ``N`` leaves are move evaluations.  As for
mergesort in the HPU model (López-Ortiz, Salinger and Suderman, IJNC 4(1),
2014, section 5.2), the CPU takes a share ``alpha`` of the leaves
and the device the rest; the device reduces the bottom levels of its share
up to the *transfer level* ``t`` (``2**t`` work-groups, so ``2**t`` partial
minima come back) and the host finishes the top levels.

The paper's model, with ``p`` CPU cores, ``g`` device work-items each ``gamma``
times as fast as a core, and no transfer or launch cost, balances the two
units at ``alpha = p / (p + gamma g)`` (section 5.2.1, case ii, with a
negligible combine).  Here the profile of the problem kind (:class:`TabuCosts`,
measured by :func:`hpu.tabu.calibrate`) adds what the paper leaves out and
what dominates a tabu iteration on a PCIe device: the launch and read-back
latency, the cost per partial minimum, the thread pool's dispatch cost, and
how well the two units really run at once.  Per iteration, with
``N_c = round(alpha N)`` moves on the CPU in ``k`` ranges and
``N_d = N - N_c`` on the device in ``G = 2**t`` work-groups of ``W``
work-items::

    T_cpu = c0 + c N_c                          (k = 1, on the calling thread)
          = d + c0 + c N_c / min(k, p)          (k > 1, in the thread pool)
    T_dev = lambda + tau max(ceil(ceil(N_d / G) / W), N_d / g) + kappa G + e_t
    T     = h + max(T_cpu, T_dev) + (1 - omega_k) min(T_cpu, T_dev) + o [N_c > 0 and N_d > 0]

(``h``: the host's bookkeeping of a move.)  ``tau max(...)`` is the HPU
model's device time: ``G W`` work-items share the moves, at most ``g`` make
progress at once, each at ``1 / tau`` moves per second (so ``gamma = c / tau``).
``e_t`` is measured: the device alone is timed at every transfer level over
the whole neighbourhood, and ``e_t`` is that curve minus the formula, so that
``T_dev`` at ``alpha = 0`` *is* the measured curve (a mis-fitted ``g`` or
``kappa`` cannot move the level) and the formula only carries it to smaller
device shares.  The paper assumes the units overlap perfectly and for free
(``omega = 1``, ``o = 0``); measured on an H100 host they do neither: a CPU
share of 1% made an iteration 0.1 ms slower (the overhead ``o``: the calling
thread's numpy work delays the driver's launch and read-back), and the CPU's
time added to the device's instead of hiding behind it (``omega`` near 0;
``bench_tabu`` results of 2026-11-22).  Both are measured by timing the
hybrid against each unit alone (:func:`hpu.tabu.calibrate`), with the CPU
share on the calling thread (``omega_1``) and in the thread pool
(``omega_p``, used for ``k > 1``).  ``omega`` may be negative: a CPU OpenCL
device shares the host's cores, so that the pool's threads and the device's
slow each other down and the hybrid takes longer than the two units one
after the other (measured on a 2-core machine with PoCL, 2026-11-23).

On a CPU OpenCL device (PoCL) the "two units" are the host's own cores, and
the HPU model's premise of two independent units fails: on a 2-core machine
splits predicted faster than either unit ran slower than the CPU alone, and
the measured ``omega`` ranged from 0.01 to 0.92 over five instances of one
run (``bench_tabu``, 2026-11-23).  There (``TabuCosts.shared_cores``) the hybrid
is the faster of the two units alone, as predicted; forcing ``alpha`` still
splits.

:func:`plan_split` minimises ``T`` over ``alpha`` (a fine grid on ``[0, 1]``),
``t`` (every level from one work-group to one move per work-item) and ``k``
in ``{1, threads}``, and keeps the simpler configuration (one unit, one CPU
range) unless the more complex one is predicted faster by more than
:data:`SIMPLER_MARGIN`: predictions are only as good as timings that scatter
by 10-20% at 0.2 ms per iteration.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..core.costs import ProfileError, read_versioned, write_versioned
from ..core.hybrid import check_split
from ..core.util import check_int

__all__ = ["TabuCosts", "TabuSplit", "plan_split", "transfer_levels", "STRATEGIES", "SIMPLER_MARGIN", "BLOCK_OVERHEAD",
           "MAX_BLOCK_ITERATIONS"]

#: Accepted values of ``strategy``.
STRATEGIES = ("cpu", "gpu", "hybrid")
#: A split using both units, or the thread pool, must be predicted faster than the best simpler one by this fraction.
SIMPLER_MARGIN = 0.05
#: ``kind`` and ``schema_version`` of :class:`TabuCosts` files (:func:`hpu.core.costs.write_versioned`; version 4:
#: the problem kind under ``problem_kind``, the file's kind under ``kind``; version 5: the resident blocks' costs).
COSTS_KIND, COSTS_SCHEMA_VERSION = "tabu-costs", 5
#: The model's iterations per round trip K of resident blocks (:meth:`TabuCosts.plan_resident`): the smallest power
#: of two whose round trip adds at most this fraction to the time of an iteration ...
BLOCK_OVERHEAD = 0.05
#: ... and at most this many (the trail read back per block, and how often ``time_limit`` is checked).
MAX_BLOCK_ITERATIONS = 1024


@dataclasses.dataclass(frozen=True)
class TabuCosts:
    """Calibrated costs of evaluating one problem kind's moves on one machine.

    All times are in seconds.  Made by :func:`hpu.tabu.calibrate`, which
    caches them per device, problem kind, size and thread count.

    Attributes
    ----------
    kind, key : str
        Problem kind (``"qap"``, ``"hwsw"``) and the size key it was measured at.
    threads : int
        Size of the thread pool measured.
    work_group_size : int
        ``W`` of the fused kernel (0 when no device was measured).
    cpu_move_seconds : float
        ``c``: one CPU thread, per move (vectorised numpy, reduction included).
    cpu_call_seconds : float
        ``c0``: fixed cost of one CPU range.
    pool_seconds : float
        ``d``: dispatching ``threads`` tasks to the pool and joining them.
    cpu_parallelism : float
        ``p``: speed-up of ``threads`` ranges in the pool over one, in ``[1, threads]``.
    device_fixed_seconds : float
        ``lambda``: launch, apply kernel and read-back of the fused kernel with one move.
    device_move_seconds : float
        ``tau``: one work-item, per move.
    device_saturation : float
        ``g``: work-items beyond which the device gets no faster (paper 3.2, 6.4).
    partial_seconds : float
        ``kappa``: per partial minimum (read-back bytes and host combine).
    device_level_seconds : tuple of float
        Measured ``T_dev`` of the device alone at transfer levels ``0, 1, ...``
        over ``device_level_moves`` moves (empty: the formula alone).
    device_level_moves : int
        ``N_d`` of that curve (the whole neighbourhood).
    host_seconds : float
        ``h``: the host's part of applying a move (the same for every split).
    overlap : float
        ``omega_1`` in ``[-1, 1]``: the fraction of the shorter unit's time
        hidden behind the longer one's when the CPU share runs on the calling
        thread (1: the paper's concurrent units; 0: they take turns; below 0:
        they slow each other down, as a CPU OpenCL device and the host's
        threads contending for the same cores).
    pool_overlap : float
        ``omega_p``, the same with the CPU share in the thread pool (``k > 1``).
    shared_cores : bool
        The device runs on the host's own cores (a CPU OpenCL device): the
        hybrid then uses one unit (module docstring).
    hybrid_seconds : float
        ``o``: fixed cost of an iteration that uses both units, beyond each unit's own.
    resident_levels : tuple of int
        Transfer levels at which blocks of iterations resident on the device
        alone were timed (empty: none).
    resident_iteration_seconds, resident_block_seconds : tuple of float
        For each of those levels, ``s_t`` and ``o_t`` of a block of ``K``
        iterations taking ``o_t + K s_t`` (launch, read-back and host work
        per block in ``o_t``).
    device : str
        Device name (``"CPU only"`` without one).
    measurements : dict
        Raw timings the fit used.
    """

    kind: str
    key: str
    threads: int
    work_group_size: int
    cpu_move_seconds: float
    cpu_call_seconds: float
    pool_seconds: float
    cpu_parallelism: float
    device_fixed_seconds: float = math.inf
    device_move_seconds: float = math.inf
    device_saturation: float = 1.0
    partial_seconds: float = 0.0
    device_level_seconds: tuple = ()
    device_level_moves: int = 0
    host_seconds: float = 0.0
    overlap: float = 1.0
    pool_overlap: float = 1.0
    shared_cores: bool = False
    hybrid_seconds: float = 0.0
    device: str = "CPU only"
    resident_levels: tuple = ()
    resident_iteration_seconds: tuple = ()
    resident_block_seconds: tuple = ()
    measurements: dict = dataclasses.field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # JSON gives lists; tuples keep the costs comparable and immutable.
        for name, kind in (("device_level_seconds", float), ("resident_levels", int),
                           ("resident_iteration_seconds", float), ("resident_block_seconds", float)):
            object.__setattr__(self, name, tuple(kind(v) for v in getattr(self, name)))
        if not len(self.resident_levels) == len(self.resident_iteration_seconds) == len(self.resident_block_seconds):
            raise ValueError("resident_levels, resident_iteration_seconds and resident_block_seconds differ in length")

    def plan_resident(self, transfer_level: int | None = None) -> tuple[int, int, float] | None:
        """Transfer level and iterations per round trip ``K`` of iterations resident on the device alone.

        A block of ``K`` iterations at level ``t`` takes ``o_t + K s_t``
        (:attr:`resident_block_seconds`, :attr:`resident_iteration_seconds`),
        ``s_t + o_t / K`` per iteration.  ``K_t`` is the smallest power of
        two with ``o_t / K_t <= BLOCK_OVERHEAD s_t``, at most
        :data:`MAX_BLOCK_ITERATIONS`: larger blocks gain less than
        :data:`BLOCK_OVERHEAD` and only check ``time_limit`` less often.  The
        level is the measured one with the least ``s_t + o_t / K_t``.

        Parameters
        ----------
        transfer_level : int, optional
            Plan ``K`` at this level only.

        Returns
        -------
        (level, K, seconds per iteration) or None
            None when no level (or not ``transfer_level``) was measured.
        """
        best = None
        for t, s_t, o_t in zip(self.resident_levels, self.resident_iteration_seconds, self.resident_block_seconds):
            if transfer_level is not None and t != transfer_level:
                continue
            need = o_t / (BLOCK_OVERHEAD * s_t) if s_t > 0 else math.inf
            k = MAX_BLOCK_ITERATIONS if need >= MAX_BLOCK_ITERATIONS else 1 << math.ceil(math.log2(max(need, 1)))
            per = s_t + o_t / k
            if best is None or per < best[2]:
                best = (t, k, per)
        return best

    @property
    def has_device(self) -> bool:
        """Whether a device was measured."""
        return self.work_group_size > 0

    @property
    def cpu_moves_per_second(self) -> float:
        """Throughput of one CPU thread, ``1 / c`` (moves per second)."""
        return 1.0 / self.cpu_move_seconds

    @property
    def device_moves_per_second(self) -> float:
        """Saturated throughput of the device, ``g / tau`` (moves per second; 0 without a device)."""
        return self.device_saturation / self.device_move_seconds if self.has_device else 0.0

    @property
    def gamma(self) -> float:
        """Speed of one work-item relative to one CPU thread, ``c / tau`` (the HPU model's gamma)."""
        return self.cpu_move_seconds / self.device_move_seconds if self.has_device else 0.0

    def predict(self, num_moves: Any, cpu_moves: Any, cpu_chunks: Any, groups: Any) -> tuple:
        """Predicted seconds per iteration (module docstring); arguments broadcast as numpy arrays.

        Returns
        -------
        (t_cpu, t_device, t) : tuple of float or numpy.ndarray
        """
        N, nc, k, G = (np.asarray(v, dtype=np.float64) for v in (num_moves, cpu_moves, cpu_chunks, groups))
        nd = N - nc
        with np.errstate(invalid="ignore", divide="ignore"):
            pooled = self.pool_seconds + self.cpu_call_seconds + self.cpu_move_seconds * nc / np.minimum(
                np.maximum(k, 1), self.cpu_parallelism
            )
            t_cpu = np.where(nc > 0, np.where(k > 1, pooled, self.cpu_call_seconds + self.cpu_move_seconds * nc), 0.0)
            G = np.maximum(np.minimum(G, nd), 1)
            t_dev = np.where(nd > 0, self._device_formula(nd, G) + self._level_correction(nd, G), 0.0)
        both = (nc > 0) & (nd > 0)
        omega = np.where(k > 1, self.pool_overlap, self.overlap)
        total = (self.host_seconds + np.maximum(t_cpu, t_dev) + (1.0 - omega) * np.minimum(t_cpu, t_dev)
                 + np.where(both, self.hybrid_seconds, 0.0))
        if total.ndim == 0:
            return float(t_cpu), float(t_dev), float(total)
        return t_cpu, t_dev, total

    def _device_formula(self, nd: Any, G: Any) -> np.ndarray:
        """``lambda + tau max(ceil(ceil(N_d / G) / W), N_d / g) + kappa G``: latency plus the HPU model's device
        time."""
        per_item = np.maximum(np.ceil(np.ceil(nd / G) / (self.work_group_size or 1)), nd / self.device_saturation)
        return self.device_fixed_seconds + self.device_move_seconds * per_item + self.partial_seconds * G

    def _level_correction(self, nd: np.ndarray, G: np.ndarray) -> np.ndarray:
        """``e_t``: the measured device time at level ``t = log2 G`` minus the formula's (both at the measured ``N_d``).

        Zero where no level was measured; the corrected ``T_dev`` never drops below the
        fastest device time measured (``lambda``, or the curve's minimum).
        """
        curve = np.asarray(self.device_level_seconds)
        if curve.size == 0:
            return np.zeros(np.broadcast(nd, G).shape)
        m = float(self.device_level_moves)
        e = np.append(curve - self._device_formula(m, np.minimum(2.0 ** np.arange(curve.size), m)), 0.0)
        t = np.rint(np.log2(G))
        measured = (t < curve.size) & (G == np.minimum(2.0**t, m))
        corr = e[np.where(measured, t, curve.size).astype(np.int64)]
        floor = min(self.device_fixed_seconds, float(curve.min()))
        return np.maximum(corr, floor - self._device_formula(nd, G))

    # -- persistence -------------------------------------------------------------
    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict (what :meth:`save` writes, besides ``kind`` and ``schema_version``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, source: str = "<dict>") -> TabuCosts:
        """Inverse of :meth:`to_dict` (unknown keys, such as ``kind`` and ``schema_version``, are ignored).

        Raises
        ------
        hpu.ProfileError
            A field is missing or of the wrong type.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{k: v for k, v in d.items() if k in fields})
        except (TypeError, ValueError) as e:
            raise ProfileError(f"{source}: invalid tabu costs: {e}") from None

    def save(self, path: str | os.PathLike) -> Path:
        """Write as a versioned JSON file (kind ``"tabu-costs"``, :func:`hpu.core.costs.write_versioned`), atomically.

        The fields are :meth:`to_dict`'s, with the problem kind under ``problem_kind``.

        Returns
        -------
        pathlib.Path
            The path written.
        """
        d = self.to_dict()
        d["problem_kind"] = d.pop("kind")
        return write_versioned(path, COSTS_KIND, COSTS_SCHEMA_VERSION, d)

    @classmethod
    def load(cls, path: str | os.PathLike) -> TabuCosts:
        """Read :meth:`save` output.

        Raises
        ------
        hpu.ProfileError
            The file is missing, unreadable, not JSON, of another kind or
            schema version (:func:`hpu.core.costs.read_versioned`), lacks
            fields, or holds a count or cost a measurement cannot give (null,
            negative, NaN, out of its range: :func:`_checked`).
        """
        d = read_versioned(path, COSTS_KIND, COSTS_SCHEMA_VERSION, oldest=COSTS_SCHEMA_VERSION)
        if "problem_kind" not in d:
            raise ProfileError(f"{path}: tabu costs without a 'problem_kind'")
        return _checked(cls.from_dict({**d, "kind": d["problem_kind"]}, source=str(path)), path)


#: ``(low, high, above)`` of each cost in a costs file, as :mod:`hpu.tabu.calibrate` measures them: ``low < v <=
#: high`` where ``above``, else ``low <= v <= high``; infinite only as :data:`_NO_DEVICE` allows.
_COST_RANGES = {
    "cpu_move_seconds": (0.0, math.inf, True), "cpu_call_seconds": (0.0, math.inf, False),
    "pool_seconds": (0.0, math.inf, False), "cpu_parallelism": (1.0, math.inf, False),
    "device_fixed_seconds": (0.0, math.inf, False), "device_move_seconds": (0.0, math.inf, True),
    "device_saturation": (0.0, math.inf, True), "partial_seconds": (0.0, math.inf, False),
    "host_seconds": (0.0, math.inf, False), "overlap": (-1.0, 1.0, False), "pool_overlap": (-1.0, 1.0, False),
    "hybrid_seconds": (0.0, math.inf, False),
}
#: The costs that are infinite in a file measured without a device (``work_group_size == 0``).
_NO_DEVICE = ("device_fixed_seconds", "device_move_seconds")


def _checked(costs: TabuCosts, path: str | os.PathLike) -> TabuCosts:
    """``costs`` read from ``path`` if its numbers are what a measurement gives: a hand-edited or corrupt file is
    refused at :meth:`TabuCosts.load`, not met as a TypeError or a division by zero inside a search.

    Raises
    ------
    hpu.ProfileError
        A count (``threads`` >= 1, ``work_group_size``, ``device_level_moves``, ``resident_levels`` >= 0) that is
        not such an integer, a cost (s, or a ratio) that is not a real number in its range of :data:`_COST_RANGES`
        (NaN included; infinite only as :data:`_NO_DEVICE` allows), or a time of ``device_level_seconds`` or of the
        resident blocks that is negative or not finite.
    """
    bad = []
    for name, value, low in (("threads", costs.threads, 1), ("work_group_size", costs.work_group_size, 0),
                             ("device_level_moves", costs.device_level_moves, 0),
                             *(("resident_levels", t, 0) for t in costs.resident_levels)):
        try:
            check_int(name, value, low)
        except ValueError as e:
            bad.append(str(e))
    if not bad:  # the counts are integers: work_group_size says whether a device was measured
        for name, (low, high, above) in _COST_RANGES.items():
            v = getattr(costs, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or math.isnan(v):
                ok = False
            elif math.isinf(v):
                ok = v > 0 and name in _NO_DEVICE and costs.work_group_size == 0
            else:
                ok = (v > low if above else v >= low) and v <= high
            if not ok:
                bounds = f"{'(' if above else '['}{low}, {high}{')' if math.isinf(high) else ']'}"
                bad.append(f"{name} must be a real number in {bounds}, got {v!r}")
    for name in ("device_level_seconds", "resident_iteration_seconds", "resident_block_seconds"):
        if not all(math.isfinite(v) and v >= 0 for v in getattr(costs, name)):
            bad.append(f"{name} must hold finite times >= 0, got {list(getattr(costs, name))}")
    if bad:
        raise ProfileError(f"{path}: invalid tabu costs: {'; '.join(bad)}")
    return costs


@dataclasses.dataclass(frozen=True)
class TabuSplit:
    """How one tabu iteration's neighbourhood is divided between CPU and device.

    Attributes
    ----------
    strategy : str
        ``"cpu"``, ``"gpu"`` or ``"hybrid"`` (what was asked for).
    alpha : float
        CPU share of the moves, ``cpu_moves / num_moves``.
    num_moves, cpu_moves : int
        ``N`` and ``N_c``; the CPU evaluates moves ``[0, N_c)``, the device ``[N_c, N)``.
    cpu_chunks : int
        CPU ranges (1: the calling thread; more: the thread pool; 0: no CPU share).
    transfer_level : int
        ``t``: the device returns ``2**t`` partial minima (-1: no device share).
    groups : int
        Work-groups launched, ``min(2**t, N - N_c)`` (0: no device share).
    work_group_size : int
        ``W``.
    depth : float
        ``log2 N``: levels of the reduction tree.
    predicted_cpu_time, predicted_device_time, predicted_time : float
        Seconds per iteration predicted by the model (NaN when forced without costs).
    """

    strategy: str
    alpha: float
    num_moves: int
    cpu_moves: int
    cpu_chunks: int
    transfer_level: int
    groups: int
    work_group_size: int
    depth: float
    predicted_cpu_time: float = math.nan
    predicted_device_time: float = math.nan
    predicted_time: float = math.nan

    @property
    def device_moves(self) -> int:
        """``N - N_c``."""
        return self.num_moves - self.cpu_moves


def transfer_levels(device_moves: int, work_group_size: int) -> range:
    """Sensible transfer levels for ``device_moves`` moves: from one work-group to one move per work-item.

    Returns ``range(0, ceil(log2(ceil(device_moves / W))) + 1)``.

    Raises
    ------
    ValueError
        ``device_moves`` not an integer >= 0, or ``work_group_size`` not an integer (>= 1 where
        ``device_moves > 0``).
    """
    device_moves = check_int("device_moves", device_moves, 0)
    work_group_size = check_int("work_group_size", work_group_size, 1 if device_moves else 0)
    if device_moves == 0:
        return range(0)
    items = -(-device_moves // work_group_size)
    return range(0, max(items - 1, 0).bit_length() + 1)


def _alpha_grid(strategy: str, alpha: float | None, has_device: bool, shared_cores: bool) -> np.ndarray:
    if strategy == "cpu" or not has_device:
        return np.array([1.0])
    if strategy == "gpu":
        return np.array([0.0])
    if alpha is not None:
        return np.array([alpha])
    if shared_cores:
        return np.array([0.0, 1.0])
    return np.unique(np.concatenate([np.linspace(0, 1, 1001), [0.005, 0.0025, 0.001]]))


def _simplest_near_best(total: np.ndarray, both_units: np.ndarray, pooled: np.ndarray) -> int:
    """Index of the simplest candidate predicted within :data:`SIMPLER_MARGIN` of the fastest.

    Simplicity ranks one unit on one CPU range first, then one of the two
    complications (both units, or the thread pool), then both.  Within a
    rank the first minimum wins: least CPU share, fewest ranges, lowest level.
    """
    rank = both_units.astype(np.int64) + pooled.astype(np.int64)
    bound = total.min() * (1.0 + SIMPLER_MARGIN)
    for r in (0, 1):
        masked = np.where(rank <= r, total, np.inf)
        best = int(np.argmin(masked))
        if masked[best] <= bound:
            return best
    return int(np.argmin(total))


def plan_split(
    num_moves: int,
    costs: TabuCosts | None = None,
    *,
    strategy: str = "hybrid",
    alpha: float | None = None,
    transfer_level: int | None = None,
    cpu_chunks: int | None = None,
    threads: int = 1,
    work_group_size: int | None = None,
    has_device: bool | None = None,
) -> TabuSplit:
    """Choose the CPU share, the number of CPU ranges and the transfer level (module docstring).

    Parameters
    ----------
    num_moves : int
        ``N`` (>= 1).
    costs : TabuCosts, optional
        Calibrated costs.  Needed unless every free parameter is forced.
    strategy : {"cpu", "gpu", "hybrid"}
        ``"cpu"`` forces ``alpha = 1``, ``"gpu"`` forces ``alpha = 0``.
    alpha : float, optional
        Force the CPU share (``"hybrid"`` only), in ``[0, 1]``.
    transfer_level : int, optional
        Force ``t`` (>= 0).
    cpu_chunks : int, optional
        Force the number of CPU ranges (>= 1).
    threads : int
        Thread-pool size (the pooled choice of ``cpu_chunks``); taken from
        ``costs`` when given.
    work_group_size : int, optional
        ``W``; taken from ``costs`` when given.
    has_device : bool, optional
        Whether a device exists; default from ``costs`` (True when forced
        without costs and ``work_group_size`` is given).

    Returns
    -------
    TabuSplit

    Raises
    ------
    ValueError
        Unknown strategy, out-of-range forced values, ``"gpu"`` without a
        device, or a free parameter to choose without ``costs``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    N = check_int("num_moves", num_moves, 1)
    alpha, transfer_level = check_split(alpha, transfer_level)  # a real alpha in [0, 1], an integer level >= 0
    if alpha is not None and strategy != "hybrid":
        raise ValueError(f"alpha can only be forced with strategy='hybrid', not {strategy!r}")
    if cpu_chunks is not None:
        cpu_chunks = check_int("cpu_chunks", cpu_chunks, 1)
    if costs is not None:
        threads, work_group_size = costs.threads, costs.work_group_size
        has_device = costs.has_device if has_device is None else has_device and costs.has_device
    work_group_size = check_int("work_group_size", work_group_size or 0, 0)
    if has_device is None:
        has_device = bool(work_group_size)
    if not has_device and (strategy == "gpu" or (alpha is not None and alpha < 1)):
        raise ValueError(f"strategy {strategy!r} with a device share needs an OpenCL device")
    w = int(work_group_size or 0)

    alphas = _alpha_grid(strategy, alpha, has_device, bool(costs is not None and costs.shared_cores))
    cpu_moves = np.unique(np.rint(alphas * N).astype(np.int64))
    chunk_opts = [int(cpu_chunks)] if cpu_chunks is not None else sorted({1, int(threads)})
    if costs is None:
        free = []
        if cpu_moves.size > 1:
            free.append("alpha")
        if len(chunk_opts) > 1 and cpu_moves.max() > 0:
            free.append("cpu_chunks")
        if transfer_level is None and cpu_moves.min() < N:
            free.append("transfer_level")
        if free:
            raise ValueError(f"choosing {', '.join(free)} needs calibrated costs (hpu.tabu.calibrate)")

    cands = []  # (cpu_moves, chunks, level)
    for nc in cpu_moves.tolist():
        chunks = [min(k, nc) for k in chunk_opts] if nc > 0 else [0]
        levels = [int(transfer_level)] if transfer_level is not None else list(transfer_levels(N - nc, w))
        levels = levels if nc < N else [-1]
        cands.extend((nc, k, t) for k in sorted(set(chunks)) for t in levels)
    c = np.array(cands, dtype=np.int64)
    groups = np.where(c[:, 2] >= 0, np.minimum(2.0 ** np.maximum(c[:, 2], 0), N - c[:, 0]), 0).astype(np.int64)
    if costs is not None:
        t_cpu, t_dev, total = costs.predict(N, c[:, 0], c[:, 1], groups)
        best = _simplest_near_best(total, (c[:, 0] > 0) & (c[:, 0] < N), c[:, 1] > 1)
        pred = (float(t_cpu[best]), float(t_dev[best]), float(total[best]))
    else:
        best, pred = 0, (math.nan, math.nan, math.nan)
    nc, k, t = (int(v) for v in c[best])
    return TabuSplit(
        strategy=strategy,
        alpha=nc / N,
        num_moves=N,
        cpu_moves=nc,
        cpu_chunks=k,
        transfer_level=t,
        groups=int(groups[best]),
        work_group_size=w,
        depth=math.log2(N) if N > 1 else 0.0,
        predicted_cpu_time=pred[0],
        predicted_device_time=pred[1],
        predicted_time=pred[2],
    )
