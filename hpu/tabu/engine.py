"""Evaluate a neighbourhood and reduce it to the best admissible move, on the CPU and a device at once.

The moves ``[0, N)`` are the leaves of a binary reduction tree (a D&C with
``a = b = 2`` and a constant combine).  The CPU takes the first
``cpu_moves`` of them (share alpha), split into ``cpu_chunks`` contiguous
ranges evaluated with vectorised numpy (on the calling thread when there is
one chunk, else in the runtime's thread pool).  The device takes the rest in
one fused OpenCL kernel (``kernels_cl/tabu_reduce.cl``; Hou et al. 2019,
section 3.3): ``groups`` work-groups each evaluate a contiguous chunk and
reduce it in local memory, so ``groups`` partial minima come back (the
*transfer level* of the tree is ``log2(groups)``) and the host finishes.

Moves are ordered by ``(class, delta, tie, index)`` with class 0 = admissible
(feasible, and not tabu or better than the best found: aspiration), 1 =
feasible but tabu, 2 = infeasible; ``tie`` breaks ties between equal
deltas (:func:`tie_hash` of the move and the iteration under the search's
tie seed, or 0 for the lowest index).  The combine is associative and commutative, so every
split returns the same move.

Tabu status is a "tabu until iteration" integer per tabu attribute (one per
move, or the problem's own attributes such as (job, position) pairs; see
:class:`~hpu.tabu.problem.NeighbourhoodState`), kept on the host and on the
device and updated in place when a move is applied.

Each :class:`Evaluator` with a device share borrows a
:class:`~hpu.core.runtime.DeviceLease` of the runtime for its whole life (its
own command queue; its buffers and kernel objects are its own too), so that
any number of searches may run on one runtime at once.  The host copy of the
state is the reference: when the device fails mid-search (an OpenCL error,
see :func:`hpu.core.hybrid.as_device_failure`), the lease goes back with the
failure, and the search either goes on with the CPU alone from the same
state, taking the same moves (the CPU evaluation is exact), or raises
:class:`~hpu.core.hybrid.DeviceFailure` (``on_device_error``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, NamedTuple

import numpy as np

from ..core.hybrid import DeviceFailure, as_device_failure, check_on_device_error
from ..core.kernels import define_header, kernel_source
from ..core.runtime import Runtime, resolve_runtime
from ..core.trace import Recorder, event_times
from ..core.util import check_int
from .problem import NeighbourhoodState, TabuProblem

try:  # a dependency, but CPU-only installs must import the tabu search
    import pyopencl as cl
except Exception:  # pragma: no cover
    cl = None

__all__ = ["ADMISSIBLE", "TABU", "INFEASIBLE", "HALT_NO_FEASIBLE_MOVE", "HALT_STOPS", "NO_BEST", "NO_TARGET",
           "TIE_BREAKS", "Evaluator", "evaluate_neighbourhood", "default_work_group_size", "program_source", "tie_hash",
           "tie_kernel_args", "warp_shuffle", "grid_shape"]

log = logging.getLogger("hpu")

#: Move classes, in order of preference.
ADMISSIBLE, TABU, INFEASIBLE, _EMPTY = 0, 1, 2, 3
#: ``control[3]`` after :meth:`Evaluator.run_block` when a block stopped on a neighbourhood with no feasible move.
HALT_NO_FEASIBLE_MOVE = 3
#: The stop (``TabuResult.stop``) of the other halts in ``control[3]``.
HALT_STOPS = {1: "target", 2: "no_improvement"}
#: ``control[1]`` while no feasible solution was found.
NO_BEST = np.iinfo(np.int64).max
#: The kernels' ``stop_target`` when there is no target (``NO_TARGET`` in ``tabu_reduce.cl``).
NO_TARGET = np.iinfo(np.int64).min
#: Accepted values of ``tie_break``.
TIE_BREAKS = ("random", "index")
# key = class << 61 | tie << 40 | move index; tie has 21 bits (the kernels get the shifts as defines).
_CLASS_SHIFT, _TIE_SHIFT, _TIE_BITS = 61, 40, 21
_INDEX_MASK = (1 << _TIE_SHIFT) - 1
_KEY_MASK = (1 << _CLASS_SHIFT) - 1
_NO_ASPIRATION = np.iinfo(np.int64).max
_PARTIAL_ARG = 9  # position of tabu_evaluate_reduce's partial buffer; the problem's parameters follow
_U32 = np.uint32


def tie_hash(index: np.ndarray, iteration: int, seed: int) -> np.ndarray:
    """The 21-bit tie-break of moves ``index`` at ``iteration`` (the same integer hash as ``tabu_reduce.cl``).

    ``x = lo32(m) ^ hi32(m) * 0x9E3779B9 ^ iteration * 0x85EBCA6B ^ seed`` in
    32-bit arithmetic, then the "lowbias32" finaliser (C. Wellons, "Prospecting
    for hash functions", 2018: ``x ^= x >> 16; x *= 0x7FEB352D; x ^= x >> 15;
    x *= 0x846CA68B; x ^= x >> 16``), of which the top 21 bits are kept.

    Parameters
    ----------
    index : numpy.ndarray of int64, shape (k,)
        Move indices (``< 2**40``).
    iteration : int
        Current iteration (>= 0).
    seed : int
        The search's tie seed, in ``[0, 2**32)``.

    Returns
    -------
    numpy.ndarray of int64, shape (k,), values in ``[0, 2**21)``

    Raises
    ------
    ValueError
        ``iteration`` not an integer >= 0, ``seed`` not one in ``[0, 2**32)``, or ``index`` not of integers.
    """
    iteration, seed = check_int("iteration", iteration, 0), check_int("seed", seed, 0, 2**32)
    index = np.asarray(index)
    if index.dtype.kind not in "iub":
        raise ValueError(f"index must hold integer move indices, got dtype {index.dtype}")
    m = index.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (m & np.uint64(0xFFFFFFFF)).astype(_U32) ^ ((m >> np.uint64(32)).astype(_U32) * _U32(0x9E3779B9))
        x ^= _U32(iteration & 0xFFFFFFFF) * _U32(0x85EBCA6B) ^ _U32(seed)
        x ^= x >> _U32(16)
        x *= _U32(0x7FEB352D)
        x ^= x >> _U32(15)
        x *= _U32(0x846CA68B)
        x ^= x >> _U32(16)
    return (x >> _U32(32 - _TIE_BITS)).astype(np.int64)


def tie_kernel_args(tie_seed: int | None) -> tuple[np.uint32, np.uint32]:
    """The kernels' ``(tie_seed, tie_mask)`` for a search's tie seed (None: mask 0, every tie hash is 0 and the
    lowest index wins)."""
    return np.uint32(tie_seed or 0), np.uint32(0 if tie_seed is None else (1 << _TIE_BITS) - 1)


def _tie_keys(index: np.ndarray, iteration: int, seed: int | None) -> np.ndarray:
    """``tie << 40 | index`` (int64) of moves ``index``: the smallest wins a tie (``seed`` None: tie = 0)."""
    index = np.asarray(index, dtype=np.int64)
    if seed is None:
        return index
    return (tie_hash(index, iteration, seed) << _TIE_SHIFT) | index


def default_work_group_size(device: Any) -> int:
    """Work-group size of the fused kernel: 128, or the device's maximum if smaller (a power of two)."""
    size = min(128, int(device.max_work_group_size))
    return 1 << (size.bit_length() - 1)


#: Most work-items of the one work-group that runs a whole block of iterations (transfer level 0).
GROUP_MAX_WORK_GROUP_SIZE = 1024
#: Bytes of local memory a slot of ``tabu_reduce.cl``'s reduction takes (a delta and a key, two longs): one slot a
#: work-item, or one a warp where the reduction shuffles within warps (:func:`warp_shuffle`).
GROUP_REDUCTION_BYTES = 16
#: Moves per work-item that size the one work-group of transfer level 0 (see :func:`group_work_group_size`).
GROUP_MOVES_PER_ITEM = 4


def _nvidia_gpu(device: Any) -> bool:
    """Whether ``device`` is an NVIDIA GPU with warps of 32 work-items (``cl_nv_device_attribute_query``)."""
    if device is None or not device.type & cl.device_type.GPU:
        return False
    return "cl_nv_device_attribute_query" in device.extensions and int(device.warp_size_nv) == 32


def warp_shuffle(device: Any, work_group_size: int) -> bool:
    """Whether ``tabu_reduce.cl`` reduces within warps of 32 work-items by NVIDIA's ``shfl.sync`` (``WARP_SHUFFLE``).

    True for a GPU whose driver has ``cl_nv_device_attribute_query`` and a
    warp of 32 work-items (``CL_DEVICE_WARP_SIZE_NV``), for work-groups of
    whole warps; the reduction then takes one barrier, not one a level of a
    tree (a barrier in a work-group of 1024 work-items halts 32 warps).
    Other devices (PoCL, AMD, Intel) keep the tree in local memory.

    Parameters
    ----------
    device : pyopencl.Device or None
    work_group_size : int
        Work-items of the work-group (a power of two).
    """
    return work_group_size >= 32 and _nvidia_gpu(device)


#: Most work-groups of a grid that runs one search's block of iterations (``tabu_grid.cl``; its warps combine the
#: work-groups' bests, one a lane).
GRID_MAX_GROUPS = 32
#: Work-items of each work-group of a grid.
GRID_WORK_GROUP_SIZE = 256
#: Moves per work-item that size a grid (see :func:`grid_shape`).
GRID_MOVES_PER_ITEM = 1


def grid_shape(device: Any, num_moves: int) -> tuple[int, int]:
    """Work-groups, and work-items of each, of the grid that runs one search's block at transfer level 0
    (``kernels_cl/tabu_grid.cl``); ``(1, 0)`` for one work-group (:func:`group_work_group_size`).

    One work-group takes up to :data:`GROUP_MOVES_PER_ITEM` moves a
    work-item at the device's largest size (or
    :data:`GROUP_MAX_WORK_GROUP_SIZE`); a larger neighbourhood takes a grid
    of work-groups of :data:`GRID_WORK_GROUP_SIZE` work-items that split the
    moves and meet once an iteration: the smallest power of two that gives
    each work-item at most :data:`GRID_MOVES_PER_ITEM` moves, at most
    :data:`GRID_MAX_GROUPS` and the device's compute units (a barrier across
    work-groups needs them all resident at once).  Only on an NVIDIA GPU,
    whose fences ``tabu_grid.cl`` writes in PTX.  The constants are the
    H100's best of those timed on tai60a and tai100a
    (``experiments/README.md``, *a grid of work-groups*).

    Parameters
    ----------
    device : pyopencl.Device or None
    num_moves : int
        Moves of the neighbourhood.
    """
    most = min(GROUP_MAX_WORK_GROUP_SIZE, int(device.max_work_group_size)) if device is not None else 0
    most = 1 << (most.bit_length() - 1) if most else 0  # as group_work_group_size: a power of two
    if not _nvidia_gpu(device) or num_moves <= GROUP_MOVES_PER_ITEM * most or most < GRID_WORK_GROUP_SIZE:
        return 1, 0
    want = 1 << max(-(-num_moves // (GRID_MOVES_PER_ITEM * GRID_WORK_GROUP_SIZE)) - 1, 0).bit_length()
    groups = min(want, GRID_MAX_GROUPS, int(device.max_compute_units))
    return (groups, GRID_WORK_GROUP_SIZE) if groups > 1 else (1, 0)


def _group_local_bytes(device: Any, work_group_size: int) -> int:
    """Local memory the problem's state may take in the group build: the device's, less the reduction's
    (:data:`GROUP_REDUCTION_BYTES` a slot) and 64 bytes."""
    slots = work_group_size // 32 if warp_shuffle(device, work_group_size) else work_group_size
    return int(device.local_mem_size) - GROUP_REDUCTION_BYTES * slots - 64


def group_work_group_size(device: Any, num_moves: int, work_group_size: int) -> int:
    """Work-group size of a block of iterations run in one work-group (transfer level 0, ``tabu_run_group``).

    At level 0 one work-group does all of an iteration's work on one compute
    unit, so it takes a work-item per :data:`GROUP_MOVES_PER_ITEM` moves:
    the smallest power of two at least ``num_moves / GROUP_MOVES_PER_ITEM``,
    at least ``work_group_size`` (the fused kernel's) and at most the
    device's maximum and :data:`GROUP_MAX_WORK_GROUP_SIZE`.
    """
    most = min(GROUP_MAX_WORK_GROUP_SIZE, int(device.max_work_group_size))
    most = 1 << (most.bit_length() - 1)
    want = 1 << max(-(-num_moves // GROUP_MOVES_PER_ITEM) - 1, 0).bit_length()
    return max(work_group_size, min(want, most))


def reduce_moves(delta: np.ndarray, feasible: np.ndarray | None, tabu: np.ndarray, aspiration: int, offset: int,
                 iteration: int, tie_seed: int | None) -> tuple[int, int, int]:
    """Best move of a contiguous range, by ``(class, delta, key)``.

    Parameters
    ----------
    delta : numpy.ndarray of int, shape (m,)
        Objective changes of moves ``[offset, offset + m)``.
    feasible : numpy.ndarray of bool, shape (m,), or None
        Feasibility of the neighbours (None: all feasible).
    tabu : numpy.ndarray of bool, shape (m,)
        Which moves are tabu (:meth:`~hpu.tabu.problem.NeighbourhoodState.tabu`).
    aspiration : int
        A tabu move is admissible when ``delta < aspiration`` (best value found
        minus current value; Hou et al. 2019, section 3.5).
    offset : int
        Index of the first move.
    iteration : int
        The current iteration: a move is tabu while its ``tabu_until`` entry
        exceeds it, and it seeds the tie hash.
    tie_seed : int or None
        Ties between equal deltas go to the lowest :func:`tie_hash` of (move,
        ``iteration``) under this seed, then the lowest index (None: the
        lowest index).

    Returns
    -------
    (class, delta, key) : tuple of int
        ``key = tie << 40 | index``.
    """
    admissible = ~tabu | (delta < aspiration)
    if feasible is not None:
        admissible &= feasible
    if admissible.any():
        cls, mask = ADMISSIBLE, admissible
    elif feasible is None or feasible.any():
        cls, mask = TABU, feasible
    else:
        cls, mask = INFEASIBLE, None
    if mask is None:
        d = delta.min()
        tied = np.flatnonzero(delta == d)
    else:
        d = delta[mask].min()
        tied = np.flatnonzero((delta == d) & mask)
    return cls, int(d), int(_tie_keys(tied + offset, iteration, tie_seed).min())


def _best_of(cls: np.ndarray, delta: np.ndarray, key: np.ndarray) -> tuple[int, int, int]:
    """Lexicographic minimum of ``(class, delta, key)`` triples (the host's top levels of the tree)."""
    sel = cls == cls.min()
    d = delta[sel].min()
    sel &= delta == d
    return int(cls[sel][0]), int(d), int(key[sel].min())


def _columns(parts: list[tuple[int, int, int]]) -> list[np.ndarray]:
    """``(class, delta, key)`` triples as three int64 arrays."""
    if not parts:
        return [np.empty(0, np.int64)] * 3
    return [np.array(v, dtype=np.int64) for v in zip(*parts)]


def program_source(state: NeighbourhoodState, work_group_size: int, device: Any = None, *, group: bool = False,
                   grid: int = 1) -> str:
    """OpenCL C of the tabu kernels for ``state``'s problem.

    The defines, then ``tabu_grid.cl``, ``tabu_pairs.cl``, the problem's file and ``tabu_reduce.cl``.

    Parameters
    ----------
    state : NeighbourhoodState
        Gives the problem's file (:attr:`~NeighbourhoodState.kernel`), its
        defines and the tabu attribute.
    work_group_size : int
        ``WG`` (a power of two).
    device : pyopencl.Device, optional
        The device it is built for: where :func:`warp_shuffle` says so, the
        reduction shuffles within warps (``WARP_SHUFFLE``).
    group : bool, optional
        The group build, ``tabu_run_group`` and ``tabu_run_batch`` alone
        (``GROUP_BUILD``; ``tabu_run_group`` alone in a grid), with the
        problem's :meth:`~NeighbourhoodState.group_defines` for the local
        memory ``device`` leaves it (``device`` required).
    grid : int, optional
        The group build's work-groups (``GRID_GROUPS``, ``tabu_grid.cl``; 1 without ``group``).

    Raises
    ------
    ValueError
        ``group`` without a ``device``; ``grid`` above 1 without ``group``, or for a problem whose group build
        does not run in a grid of that many work-groups.
    """
    if group and device is None:
        raise ValueError("the group build needs the device it is built for (its local memory)")
    if grid > 1 and not group:
        raise ValueError(f"a grid of {grid} work-groups is a group build (group=True)")
    defines = {"WG": work_group_size, "TABU_BY_ATTRIBUTE": int(state.problem.tabu_attribute != "move"),
               "CLASS_SHIFT": _CLASS_SHIFT, "TIE_SHIFT": _TIE_SHIFT, "HALT_NO_FEASIBLE_MOVE": HALT_NO_FEASIBLE_MOVE,
               "WARP_SHUFFLE": int(warp_shuffle(device, work_group_size)), **state.defines()}
    if group:
        extra = state.group_defines(work_group_size, _group_local_bytes(device, work_group_size), grid)
        if extra.get("GRID_GROUPS", 1) != grid:
            raise ValueError(f"the {state.problem.kind} group build does not run in a grid of {grid} work-groups")
        defines.update(GROUP_BUILD=1, PTX_FENCE=int(_nvidia_gpu(device)), GRID_SLOTS=_GRID_SLOTS, **extra)
    names = ("tabu_grid", "tabu_pairs", state.kernel, "tabu_reduce")
    return define_header(defines) + "".join(kernel_source(name) for name in names)


#: Longs of the grid buffer before the work-groups' bests (``GRID_SLOTS`` in ``tabu_grid.cl``).
_GRID_SLOTS = 16
#: Key of the runtime's record (``Runtime.resources``) of whether a grid of work-groups failed to run at once there.
_GRID_STATE = ("tabu-grid",)
#: Position of ``tabu_run_group``'s grid buffer among its arguments (after ``best``; ``GRID_PARAMS``).
_GRID_ARG = 13


class _GroupKernel(NamedTuple):
    """``tabu_run_group`` as :meth:`Evaluator._group_kernel` chose it: the kernel, its work-group size, its
    work-groups (the grid, ``tabu_grid.cl``) and their buffer (None for one work-group)."""

    kernel: Any
    size: int
    grid: int
    buffer: Any

    def args(self, args: tuple) -> tuple:
        """The kernel's arguments: ``args`` with the grid's buffer in its place."""
        return args if self.buffer is None else (*args[:_GRID_ARG], self.buffer, *args[_GRID_ARG:])


class Evaluator:
    """One search's neighbourhood evaluation, split between CPU and device.

    Parameters
    ----------
    state : NeighbourhoodState
        The current solution (the evaluator applies moves to it).
    runtime : hpu.Runtime
    cpu_moves : int
        The CPU evaluates moves ``[0, cpu_moves)``, the device the rest.
    cpu_chunks : int
        Number of contiguous CPU ranges (1: on the calling thread; more: in
        ``runtime.pool``).
    groups : int
        Work-groups of the fused kernel = partial minima read back.
    work_group_size : int, optional
        Default :func:`default_work_group_size`.
    on_device_error : {"fallback", "raise"}
        When the device fails: go on with the CPU alone from the same state
        (:attr:`fallback` then says why), or raise :class:`hpu.DeviceFailure`.
    tie_seed : int or None
        Ties between moves of equal class and delta go to the lowest
        :func:`tie_hash` under this seed (an int in ``[0, 2**32)``), or to the
        lowest index (None).

    Raises
    ------
    hpu.NoDeviceError
        If the device has moves but the runtime is CPU-only.
    hpu.DeviceFailure
        The device failed while setting up and ``on_device_error="raise"``.
    ValueError
        On out-of-range split parameters.

    Attributes
    ----------
    tabu_until : numpy.ndarray of int32, shape (state.num_attributes,)
        Host copy of the tabu status, one entry per tabu attribute (the
        device keeps its own, updated in place).
    cpu_time, device_time, host_time : float
        Seconds spent so far: the CPU share (wall), the device (kernel,
        read-back and apply events when the queue profiles, else wall time
        waited; a resident block: its wall time), and the host's combine and
        bookkeeping.
    fallback : str
        Empty, or why the device failed and the CPU took over its share.
    recorder : hpu.core.trace.Recorder or None
        When set, every step is recorded for a trace (``tabu_search(...,
        trace=True)``): the device's kernels (``"evaluate"``, ``"apply"``,
        ``"select"``, ``"block"``: a level-0 block) and copies (unit
        ``"bus"``, ``"h2d"`` and ``"d2h"``) from their profiled events, the
        CPU ranges (``"evaluate"``) and the host's ``"combine"`` and
        ``"apply"`` on unit ``"cpu:<thread name>"``.

    Notes
    -----
    With a device share the evaluator holds a :class:`hpu.DeviceLease` (its
    own command queue) until :meth:`close`: use it as a context manager.  It
    serves one thread at a time; concurrent searches each make their own.
    """

    def __init__(
        self,
        state: NeighbourhoodState,
        runtime: Runtime,
        *,
        cpu_moves: int,
        cpu_chunks: int = 1,
        groups: int = 1,
        work_group_size: int | None = None,
        on_device_error: str = "fallback",
        tie_seed: int | None = None,
    ):
        if tie_seed is not None:
            check_int("tie_seed", tie_seed, 0, 2**32, " or None")
        self.state = state
        self.tie_seed = tie_seed
        self._tie_args = tie_kernel_args(tie_seed)
        self.runtime = runtime
        self.on_device_error = check_on_device_error(on_device_error)
        self.n = state.problem.n
        self.num_moves = state.problem.num_moves
        if self.num_moves >= 1 << _TIE_SHIFT:
            raise ValueError(f"a neighbourhood of {self.num_moves} moves is too large (at most 2**{_TIE_SHIFT} - 1)")
        self.tabu_until = np.zeros(state.num_attributes, dtype=np.int32)
        self.cpu_time = self.device_time = self.host_time = 0.0
        self.fallback = ""
        self.recorder: Recorder | None = None
        self._clock_offset: float | None = None
        self._last_event: Any = None
        self._lease = None
        self._events: list = []
        self.configure(cpu_moves, cpu_chunks, groups, work_group_size)

    # -- set-up and life cycle -----------------------------------------------------
    def configure(self, cpu_moves: int, cpu_chunks: int, groups: int, work_group_size: int | None = None) -> None:
        """Change the split (the state and tabu status are kept); a device share borrows a lease if none is held.

        Raises
        ------
        ValueError
            Out-of-range values.
        hpu.NoDeviceError
            A device share on a CPU-only runtime.
        hpu.DeviceFailure
            The device failed setting up, with ``on_device_error="raise"``.
        """
        N = self.num_moves
        cpu_moves, cpu_chunks, groups = int(cpu_moves), int(cpu_chunks), int(groups)
        if not 0 <= cpu_moves <= N:
            raise ValueError(f"cpu_moves must lie in [0, {N}], got {cpu_moves}")
        if cpu_moves and not 1 <= cpu_chunks <= cpu_moves:
            raise ValueError(f"cpu_chunks must lie in [1, {cpu_moves}], got {cpu_chunks}")
        if cpu_moves < N and groups < 1:
            raise ValueError(f"groups must be >= 1, got {groups}")
        self.cpu_moves, self.cpu_chunks, self.groups = cpu_moves, cpu_chunks if cpu_moves else 0, groups
        bounds = np.linspace(0, cpu_moves, self.cpu_chunks + 1).round().astype(np.int64) if cpu_moves else []
        self._cpu_ranges = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        if cpu_moves < N:
            self.runtime.require_device()
            try:
                if self._lease is None:
                    self._setup_device(work_group_size)
                self.set_device_range(cpu_moves, N, groups)
            except Exception as e:
                if as_device_failure(e) is None:  # not the device's: no half-made device state is kept
                    self._drop_device(e)
                    raise
                self._device_failed(e)

    @property
    def has_device_share(self) -> bool:
        """Whether the device evaluates some of the moves (False after a fallback)."""
        return self._lease is not None and self.cpu_moves < self.num_moves

    @property
    def device_only(self) -> bool:
        """Whether the device evaluates every move (what :meth:`run_block` needs; False after a fallback)."""
        return self.has_device_share and not self.cpu_moves

    def _setup_device(self, work_group_size: int | None) -> None:
        """Borrow a lease; build the fused kernel on its context; copy the state and tabu status to the device."""
        st = self.state
        w = int(work_group_size or default_work_group_size(self.runtime.device))
        if w < 1 or w & (w - 1):
            raise ValueError(f"work_group_size must be a power of two, got {w}")
        self.work_group_size = w
        lease = self._lease = self.runtime.acquire_lease()
        program = self._program = lease.build(program_source(st, w, self.runtime.device))
        self._select = self._group = None  # the resident kernels (run_block), made on first use
        ctx, mf = lease.context, cl.mem_flags
        self._queue = lease.queue
        self._profiling = bool(self._queue.properties & cl.command_queue_properties.PROFILING_ENABLE)
        self._pargs = st.device_args(ctx)
        self._tabu_d = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=self.tabu_until)
        self._partial_d = None
        self._eval = lease.kernel(program, "tabu_evaluate_reduce")
        self._eval.set_args(np.uint64(self.n), np.uint64(0), np.uint64(0), np.uint64(1), np.int64(0), np.int32(0),
                            *self._tie_args, self._tabu_d, None, *self._pargs)
        self._apply_k = lease.kernel(program, "tabu_apply")
        self._apply_k.set_args(np.uint64(self.n), np.uint64(0), np.int32(0), self._tabu_d, *self._pargs)
        self._apply_range = st.apply_range(w)

    def _drop_device(self, failure: BaseException | None) -> None:
        """Give the lease back (discarded and reported after ``failure``) and forget the device objects."""
        lease, self._lease = self._lease, None
        self._events.clear()
        self._eval = self._apply_k = self._pargs = self._tabu_d = self._partial_d = self._program = None
        self._select = self._eval_res = self._group = self._ctrl_d = self._trail_d = self._best_d = None
        if lease is not None:
            if failure is None:
                self.runtime.release_lease(lease)
            else:
                self.runtime.release_lease(lease, failure=as_device_failure(failure) or failure)

    def _device_failed(self, exc: Exception, *, fallback: bool = True) -> None:
        """Handle ``exc`` raised by device work: the CPU takes over (``fallback``), or :class:`DeviceFailure`.

        Must be called while ``exc`` is being handled.  Errors that are not
        the device's are re-raised unchanged (the lease is kept: :meth:`close`
        gives it back).
        """
        err = as_device_failure(exc)
        if err is None:
            raise exc
        self._drop_device(err)
        if not fallback or self.on_device_error == "raise":
            if err is exc:
                raise exc
            raise err from exc
        self.fallback = str(err)
        log.warning("device failed in a tabu search (%s); the CPU evaluates the whole neighbourhood from now on", err)
        N = self.num_moves
        self.configure(N, self.cpu_chunks or min(self.runtime.threads, N), 0)

    def close(self, failure: BaseException | None = None) -> None:
        """Wait for the device's last commands and give the lease back (discarded after ``failure``); idempotent.

        A device error met while waiting is reported to the runtime and
        logged, not raised: every result read back so far was complete.
        """
        if self._lease is not None and failure is None:
            try:
                self._queue.finish()
            except Exception as e:
                failure = e
                log.warning("device failed after a tabu search's last iteration: %s", e)
        self._drop_device(failure)

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.close(exc)

    # -- the two units' parts --------------------------------------------------------
    def set_device_range(self, lo: int, hi: int, groups: int) -> None:
        """Let the fused kernel evaluate moves ``[lo, hi)`` in ``min(groups, hi - lo)`` work-groups.

        For calibration; :meth:`configure` sets the split of a search.
        """
        groups = min(groups, hi - lo)
        self.groups = groups
        if self._partial_d is None or self._partial.size < 2 * groups:
            self._partial = np.empty(2 * groups, dtype=np.int64)
            # READ_WRITE: tabu_select reads the partial minima on the device (run_block)
            self._partial_d = cl.Buffer(self._lease.context, cl.mem_flags.READ_WRITE, size=self._partial.nbytes)
            self._eval.set_arg(_PARTIAL_ARG, self._partial_d)
        self._chunk = -(-(hi - lo) // groups)
        self._eval.set_arg(1, np.uint64(lo))
        self._eval.set_arg(2, np.uint64(hi))
        self._eval.set_arg(3, np.uint64(self._chunk))

    def _record_host(self, kind: str, t0: float, moves: int = 0) -> None:
        """A host step begun at ``t0`` (``time.perf_counter()``) and ending now, on the calling thread's row."""
        rec = self.recorder
        if rec is not None:
            rec.add(f"cpu:{threading.current_thread().name}", kind, 0, t0 - rec.t0, rec.now(), count=moves)

    def _record_device(self, event: Any, unit: str, kind: str) -> None:
        """A profiled OpenCL event, its times read when the trace is resolved."""
        rec = self.recorder
        if rec is None:
            return
        self._last_event = event

        def add() -> None:
            if rec.device_offset is not None:  # None: no wait placed the device clock (no profiling)
                rec.add(unit, kind, 0, *event_times(event, rec, 0.0))

        rec.deferred.append(add)

    def _record_wait(self, event: Any) -> None:
        """Place the device clock after a wait for ``event``: device end minus host time now is at most the clock
        offset, and the largest such bound over the run is kept."""
        rec = self.recorder
        if rec is None or not self._profiling:
            return
        offset = event.profile.end * 1e-9 - rec.now()
        self._clock_offset = offset if self._clock_offset is None else max(self._clock_offset, offset)
        rec.device_offset = self._clock_offset

    def drain(self) -> None:
        """Wait for the last recorded device command (a trace's last apply kernel runs after the host is done).

        Raises
        ------
        hpu.DeviceFailure
            The device failed and ``on_device_error="raise"``.
        """
        if self._lease is None or self._last_event is None:
            return
        try:
            self._last_event.wait()
            self._record_wait(self._last_event)
        except Exception as e:
            self._device_failed(e)

    def _cpu_range(self, lo: int, hi: int, iteration: int, aspiration: int) -> tuple[int, int, int]:
        """Evaluate and reduce moves ``[lo, hi)`` block by block (the CPU's leaves and lower levels)."""
        t0 = time.perf_counter()
        st, step = self.state, self.state.block_moves
        best = (_EMPTY, 0, lo)
        for b0 in range(lo, hi, step):
            b1 = min(b0 + step, hi)
            delta, feasible = st.deltas(b0, b1)
            tabu = st.tabu(b0, b1, self.tabu_until, iteration)
            best = min(best, reduce_moves(delta, feasible, tabu, aspiration, b0, iteration, self.tie_seed))
        self._record_host("evaluate", t0, hi - lo)
        return best

    def _cpu_parts(self, ranges: list[tuple[int, int]], iteration: int, aspiration: int) -> list[tuple[int, int, int]]:
        if len(ranges) == 1:
            return [self._cpu_range(*ranges[0], iteration, aspiration)]
        pool = self.runtime.pool
        futures = [pool.submit(self._cpu_range, lo, hi, iteration, aspiration) for lo, hi in ranges]
        return [f.result() for f in futures]

    def best_of_ranges(self, ranges: list[tuple[int, int]], iteration: int, aspiration: int) -> tuple[int, int, int]:
        """The CPU's side of :meth:`evaluate` over ``ranges`` (one: the calling thread; more: the pool), combined.

        Parameters
        ----------
        ranges : list of (lo, hi)
            Non-empty ranges of move indices.
        iteration, aspiration : int
            As for :meth:`evaluate`.

        Returns
        -------
        (class, delta, key) : tuple of int
            ``key = tie << 40 | index``.
        """
        return _best_of(*_columns(self._cpu_parts(ranges, iteration, aspiration)))

    def _launch(self, iteration: int, aspiration: int) -> Any:
        k = self._eval
        k.set_arg(4, np.int64(min(aspiration, _NO_ASPIRATION)))
        k.set_arg(5, np.int32(iteration))
        w = self.work_group_size
        evt = cl.enqueue_nd_range_kernel(self._queue, k, (self.groups * w,), (w,))
        read = cl.enqueue_copy(self._queue, self._partial[: 2 * self.groups], self._partial_d, is_blocking=False)
        self._queue.flush()  # start the device now: the CPU share runs meanwhile
        self._events += [evt, read]
        self._record_device(evt, "device", "evaluate")
        self._record_device(read, "bus", "d2h")
        return read

    def _device_result(self, read: Any) -> list[np.ndarray]:
        t0 = time.perf_counter()
        read.wait()
        self._record_wait(read)
        if self._profiling:
            info = cl.profiling_info
            self.device_time += sum(e.get_profiling_info(info.END) - e.get_profiling_info(info.START)
                                    for e in self._events) * 1e-9
        else:
            self.device_time += time.perf_counter() - t0
        self._events.clear()
        part = self._partial[: 2 * self.groups]
        keys = part[1::2]
        return [keys >> _CLASS_SHIFT, part[0::2], keys & _KEY_MASK]

    def device_partials(self, iteration: int, aspiration: int) -> list[np.ndarray]:
        """Run the fused kernel on the device's range and wait: one partial minimum per work-group.

        Parameters
        ----------
        iteration, aspiration : int
            As for :meth:`evaluate`.

        Returns
        -------
        [class, delta, key] : list of numpy.ndarray of int64, shape (groups,)
            The best move of each work-group's chunk (views of a buffer the
            next call overwrites); ``key = tie << 40 | index``.

        Raises
        ------
        ValueError
            No device share.
        hpu.DeviceFailure
            The device failed (whatever ``on_device_error`` says: there is no
            CPU share to fall back to); the lease is given back.
        """
        if not self.has_device_share:
            raise ValueError("this evaluator has no device share")
        try:
            return self._device_result(self._launch(iteration, aspiration))
        except Exception as e:
            self._device_failed(e, fallback=False)
            raise  # not reached: _device_failed raised

    def best_of_device(self, iteration: int, aspiration: int) -> tuple[int, int, int]:
        """The device's side of :meth:`evaluate`: :meth:`device_partials` and the host's combine of them."""
        return _best_of(*self.device_partials(iteration, aspiration))

    # -- one iteration -----------------------------------------------------------
    def evaluate(self, iteration: int, aspiration: int) -> tuple[int, int, int]:
        """Best move of the whole neighbourhood.

        Parameters
        ----------
        iteration : int
            Current iteration (a move is tabu while ``tabu_until > iteration``).
        aspiration : int
            Best value found minus the current value (any larger int when no
            best is known yet).

        Returns
        -------
        (class, delta, index) : tuple of int
            ``class`` is :data:`ADMISSIBLE`, :data:`TABU` (every feasible move
            is tabu) or :data:`INFEASIBLE` (no feasible move); ties between
            equal deltas are broken as ``tie_seed`` says.

        Raises
        ------
        hpu.DeviceFailure
            The device failed and ``on_device_error="raise"`` (with
            ``"fallback"`` the CPU evaluates this and every later neighbourhood).
        """
        if self.has_device_share:
            try:
                return self._evaluate(iteration, aspiration)
            except Exception as e:
                self._device_failed(e)
        return self._evaluate(iteration, aspiration)

    def _evaluate(self, iteration: int, aspiration: int) -> tuple[int, int, int]:
        read = self._launch(iteration, aspiration) if self.has_device_share else None
        t0 = time.perf_counter()
        parts = self._cpu_parts(self._cpu_ranges, iteration, aspiration) if self._cpu_ranges else []
        self.cpu_time += time.perf_counter() - t0 if parts else 0.0
        cls, delta, key = _columns(parts)
        if read is not None:
            dcls, ddelta, dkey = self._device_result(read)
            cls, delta, key = (np.concatenate(pair) for pair in ((cls, dcls), (delta, ddelta), (key, dkey)))
        t2 = time.perf_counter()
        best_cls, best_delta, best_key = _best_of(cls, delta, key)
        self.host_time += time.perf_counter() - t2
        self._record_host("combine", t2)
        return best_cls, best_delta, best_key & _INDEX_MASK

    def apply(self, index: int, delta: int, until: int) -> None:
        """Move to neighbour ``index`` (objective change ``delta``); the move is tabu until iteration ``until``.

        The host's state changes first: a device failure here leaves it
        right (see :meth:`evaluate` for what follows).
        """
        self.follow(index, delta, until)
        if self._lease is not None:
            t0 = time.perf_counter()
            try:
                self.apply_on_device(index, until)
            except Exception as e:
                self._device_failed(e)
            self.host_time += time.perf_counter() - t0

    def follow(self, index: int, delta: int, until: int) -> None:
        """The host's part of :meth:`apply` only: the device took the move itself (:meth:`run_block`).

        Parameters
        ----------
        index : int
            The move taken.
        delta : int
            Its objective change.
        until : int
            The iteration up to which its attributes are tabu.
        """
        t0 = time.perf_counter()
        self.state.mark_tabu(index, self.tabu_until, until)
        self.state.apply(index, delta)
        self.host_time += time.perf_counter() - t0
        self._record_host("apply", t0)

    def _resident_kernels(self, capacity: int) -> None:
        """Make the resident kernels (once per lease) and a trail for ``capacity`` iterations; set their buffers."""
        ctx, mf, n, N = self._lease.context, cl.mem_flags, np.uint64(self.n), np.uint64(self.num_moves)
        if self._select is None:
            self._ctrl_d = cl.Buffer(ctx, mf.READ_WRITE, size=5 * 8)
            self._best_d = cl.Buffer(ctx, mf.READ_WRITE, size=4 * self.n)
            self._trail_d, self._trail = None, np.empty(0, dtype=np.int64)
            self._eval_res = self._lease.kernel(self._program, "tabu_evaluate_resident")
            self._select = self._lease.kernel(self._program, "tabu_select")
        if self._trail.size < 2 * capacity:
            self._trail = np.empty(2 * capacity, dtype=np.int64)
            self._trail_d = cl.Buffer(ctx, mf.READ_WRITE, size=self._trail.nbytes)
        i32, i64 = np.int32(0), np.int64(0)  # set per block by _run_block
        self._eval_res.set_args(n, N, np.uint64(self._chunk), i32, *self._tie_args, self._tabu_d, self._partial_d,
                                self._ctrl_d, *self._pargs)
        self._select.set_args(n, np.uint32(self.groups), i32, i32, i32, i64, i32, self._partial_d, self._ctrl_d,
                              self._trail_d, self._tabu_d, self._best_d, *self._pargs)
        group_args = (n, N, i32, i32, i32, i64, i32, *self._tie_args, self._ctrl_d, self._trail_d, self._tabu_d,
                      self._best_d, *self._pargs)
        if self._group is None:
            self._group = self._group_kernel(group_args)
        self._group.kernel.set_args(*self._group.args(group_args))

    def _group_kernel(self, args: tuple) -> _GroupKernel:
        """``tabu_run_group``, its work-group size and grid: :func:`group_work_group_size` work-items where the
        device runs them, else the largest power of two the compiled kernel reports it can run, at least the fused
        kernel's; in a grid of :func:`grid_shape` where the problem and the device run one.

        The device's word is a launch: on the H100 NVIDIA's driver reports 256 work-items for every kernel, one
        that adds one to each element and ``tabu_run_group`` alike, and runs a kernel with a barrier and local
        memory in work-groups of 1024, right (``experiments/kernel_work_group.py``,
        ``experiments/results/h100/kernel_work_group.json``).  So a larger work-group, and a grid, is tried with
        ``args`` and no iteration (``steps`` 0: nothing changes) and kept when the launch succeeds; the choice is
        kept on the lease for the searches after.
        """
        w, dev = self.work_group_size, self.runtime.device
        want = group_work_group_size(dev, self.num_moves, w)
        grid = grid_shape(dev, self.num_moves)
        if self.runtime.resources.get(_GRID_STATE, dict).get("refused"):  # a grid here did not all run at once
            grid = (1, 0)
        if grid[0] > 1 and "GRID_GROUPS" not in self.state.group_defines(grid[1], _group_local_bytes(dev, grid[1]),
                                                                          grid[0]):
            grid = (1, 0)
        source = program_source(self.state, w, dev, group=True)
        return self._lease.cached(("tabu-group", source, want, grid),
                                  lambda: self._try_group(args, source, want, grid))

    def _try_group(self, args: tuple, source: str, want: int, grid: tuple[int, int]) -> _GroupKernel:
        """:meth:`_group_kernel`'s choice, made once per lease and program: the grid (work-groups, work-items),
        else one work-group of ``want`` work-items, else of what the kernel built from ``source``
        (``self.work_group_size`` work-items) reports, else that size."""
        w, info, dev = self.work_group_size, cl.kernel_work_group_info.WORK_GROUP_SIZE, self.runtime.device
        kernel = cl.Kernel(self._lease.build(source), "tabu_run_group")
        fits = int(kernel.get_work_group_info(info, dev))
        tries = [(grid[1], grid[0])] * (grid[0] > 1)
        tries += [(wg, 1) for wg in sorted({want, min(want, 1 << (fits.bit_length() - 1))}, reverse=True)]
        for wg, groups in tries:
            if wg <= w and groups == 1:
                break
            found = self._launch_group(args, wg, groups)
            if found is not None:
                return found
        # Launched once with no iteration too, as those tried: a device that compiles at a first launch does so here
        return self._launch_group(args, w, 1) or _GroupKernel(kernel, w, 1, None)

    def _launch_group(self, args: tuple, wg: int, groups: int) -> _GroupKernel | None:
        """``tabu_run_group`` in ``groups`` work-groups of ``wg`` work-items, built and launched with ``args`` (no
        iteration); None when the device refuses either."""
        dev = self.runtime.device
        try:
            kernel = cl.Kernel(self._lease.build(program_source(self.state, wg, dev, group=True, grid=groups)),
                               "tabu_run_group")
            buffer = None
            if groups > 1:
                scratch = self.state.group_defines(wg, _group_local_bytes(dev, wg), groups)["GRID_SCRATCH_BYTES"]
                buffer = cl.Buffer(self._lease.context, cl.mem_flags.READ_WRITE,
                                   size=8 * (_GRID_SLOTS + 4 * groups) + groups * scratch)
            found = _GroupKernel(kernel, wg, groups, buffer)
            kernel.set_args(*found.args(args))
            cl.enqueue_nd_range_kernel(self._queue, kernel, (groups * wg,), (wg,)).wait()
        except (cl.Error, RuntimeError) as e:  # pyopencl raises a build failure as RuntimeError
            log.debug("tabu_run_group in %d work-groups of %d work-items: %s", groups, wg, e)
            return None
        return found

    def prepare_resident(self, capacity: int) -> None:
        """Make what :meth:`run_block` runs, before the first block: a search's set-up, not its iterations' time.

        The kernels, built, and their buffers, the one-work-group kernel
        chosen by launches with no iteration (once per lease), so that a
        device that compiles a kernel at its first launch (PoCL) does so now.
        Nothing to do unless the device evaluates the whole neighbourhood.

        Parameters
        ----------
        capacity : int
            Iterations of the largest block to come (>= 1): the size of the
            device's trail of moves and values (``2 * capacity`` int64).

        Raises
        ------
        hpu.DeviceFailure
            The device failed and ``on_device_error="raise"`` (with
            ``"fallback"`` the CPU takes over, as in :meth:`run_block`).
        """
        if not self.device_only:
            return
        try:
            self._resident_kernels(capacity)
        except Exception as e:
            self._device_failed(e)

    def run_block(self, first: int, count: int, tenure: int, control: np.ndarray, target: int | None,
                  max_no_improve: int | None) -> np.ndarray | None:
        """Run iterations ``first .. first + count - 1`` on the device alone, back to back, and wait for them.

        Each iteration is two kernels (``kernels_cl/tabu_reduce.cl``):
        ``tabu_evaluate_resident`` (the fused evaluation over ``groups``
        work-groups, aspiration read from the device) and ``tabu_select`` (one
        work-group: the best admissible move, the value, the best, the stop
        rules, then ``apply_move``); with one work-group (transfer level 0)
        the whole block is one launch of ``tabu_run_group``, which loops over
        the iterations, in a work-group of :func:`group_work_group_size`
        work-items or a grid of :func:`grid_shape` (whose failure to run at
        once is a device failure).  After a move that gives a new best the device copies
        the solution (:meth:`read_best` reads the last one).  Nothing goes
        back to the host in between; the host's state is not moved
        (:meth:`follow` replays the moves).

        Parameters
        ----------
        first, count : int
            Iteration numbers (``first >= 1``, ``count >= 1``).
        tenure : int
            Iterations a taken move's attributes stay tabu.
        control : numpy.ndarray of int64, shape (5,)
            In: current value, best value (``2**63 - 1``: none), iteration of
            the last new best, 0, ``first - 1``.  Out: the same after the
            block, ``control[3]`` the halt reason (0 none, 1 target, 2
            ``max_no_improve``, :data:`HALT_NO_FEASIBLE_MOVE` no feasible move
            at iteration ``control[4] + 1``), ``control[4]`` the last
            iteration done.
        target, max_no_improve : int or None
            The stop rules of :func:`hpu.tabu.tabu_search`.

        Returns
        -------
        numpy.ndarray of int64, shape (2 * done,) or None
            ``[move, value after it]`` of each iteration done
            (``done = control[4] - first + 1``); None when the device failed
            and the CPU took over (``on_device_error="fallback"``).

        Raises
        ------
        ValueError
            The device does not evaluate the whole neighbourhood.
        hpu.DeviceFailure
            The device failed and ``on_device_error="raise"``.
        """
        if not self.device_only:
            raise ValueError("resident iterations need the device to evaluate the whole neighbourhood")
        try:
            return self._run_block(first, count, tenure, control, target, max_no_improve)
        except Exception as e:
            self._device_failed(e)
            return None

    def _run_block(self, first: int, count: int, tenure: int, control: np.ndarray, target: int | None,
                   max_no_improve: int | None) -> np.ndarray:
        self._resident_kernels(count)
        q, ev, sel, grp = self._queue, self._eval_res, self._select, self._group.kernel
        stop_target = np.int64(NO_TARGET if target is None else target)
        for pos, value in ((3, np.int32(first)), (4, np.int32(tenure)), (5, stop_target),
                           (6, np.int32(max_no_improve or 0))):
            sel.set_arg(pos, value)
        for pos, value in ((2, np.int32(first)), (3, np.int32(count)), (4, np.int32(tenure)), (5, stop_target),
                           (6, np.int32(max_no_improve or 0))):
            grp.set_arg(pos, value)
        self._ctrl_in = control.copy()  # alive until the copy is done
        # The events of the copies from and into host memory, kept until the trail's blocking read (behind them on
        # the in-order queue) returns: pyopencl waits for a copy whose event is freed first, holding the GIL, which
        # stalled every other thread for the whole block (the recorder, when there is one, keeps them too).
        copies = [cl.enqueue_copy(q, self._ctrl_d, self._ctrl_in, is_blocking=False)]
        self._record_device(copies[-1], "bus", "h2d")
        t0 = time.perf_counter()
        w, g = self.work_group_size, self._group
        in_grid = self.groups == 1 and g.grid > 1
        if in_grid:  # the grid's arrival counter and failure flag (tabu_grid.cl)
            cl.enqueue_fill_buffer(q, g.buffer, np.int64(0), 0, 8)
        if self.groups == 1:
            self._record_device(cl.enqueue_nd_range_kernel(q, grp, (g.grid * g.size,), (g.size,)), "device", "block")
        else:
            for it in range(first, first + count):
                ev.set_arg(3, np.int32(it))
                sel.set_arg(2, np.int32(it))
                self._record_device(cl.enqueue_nd_range_kernel(q, ev, (self.groups * w,), (w,)), "device", "evaluate")
                self._record_device(cl.enqueue_nd_range_kernel(q, sel, (w,), (w,)), "device", "select")
        copies.append(cl.enqueue_copy(q, control, self._ctrl_d, is_blocking=False))
        self._record_device(copies[-1], "bus", "d2h")
        flags = np.zeros(2, dtype=np.int32)  # the grid's counter and failure flag
        if in_grid:
            copies.append(cl.enqueue_copy(q, flags, g.buffer, is_blocking=False))  # waited for with the trail
        trail = cl.enqueue_copy(q, self._trail[: 2 * count], self._trail_d, is_blocking=True)
        del copies  # complete: the trail's read came after them
        self._record_device(trail, "bus", "d2h")
        self._record_wait(trail)
        self.device_time += time.perf_counter() - t0
        if flags[1]:
            self.runtime.resources.get(_GRID_STATE, dict)["refused"] = True  # the runtime's later searches: one group
            raise DeviceFailure(f"the {g.grid} work-groups of a block's grid did not all run at once "
                                "(kernels_cl/tabu_grid.cl); the block's result is not used")
        return self._trail[: 2 * int(control[4] - first + 1)].copy()

    def read_best(self) -> np.ndarray | None:
        """The solution the device kept after the last new best of :meth:`run_block`'s iterations.

        Returns
        -------
        numpy.ndarray of int32, shape (n,) or None
            The solution (the problem's solution array as the device holds
            it); None when no block ran, or the device failed and the CPU
            took over (``on_device_error="fallback"``).

        Raises
        ------
        hpu.DeviceFailure
            The device failed and ``on_device_error="raise"``.
        """
        if self._lease is None or self._select is None:
            return None
        best = np.empty(self.n, dtype=np.int32)
        try:
            cl.enqueue_copy(self._queue, best, self._best_d, is_blocking=True)
        except Exception as e:
            self._device_failed(e)
            return None
        return best

    def apply_on_device(self, index: int, until: int) -> None:
        """Enqueue the device's part of :meth:`apply` only (the ``tabu_apply`` kernel; no wait).

        The kernel marks the move's tabu attributes as they are before the
        move (as :meth:`~hpu.tabu.problem.NeighbourhoodState.mark_tabu` does
        on the host), then applies it.  For calibration, which times a
        search's iteration without moving the host's state.
        """
        k = self._apply_k
        k.set_arg(1, np.uint64(index))
        k.set_arg(2, np.int32(until))
        self._events.append(cl.enqueue_nd_range_kernel(self._queue, k, *self._apply_range))
        self._record_device(self._events[-1], "device", "apply")

    def reset(self, solution: np.ndarray) -> None:
        """Jump to ``solution`` (a restart); the tabu status is kept."""
        self.state.reset(solution)
        if self._lease is not None:
            try:
                self.state.upload(self._queue, self._pargs)
            except Exception as e:
                self._device_failed(e)


def evaluate_neighbourhood(
    problem: TabuProblem, solution: Any, *, unit: str = "cpu", runtime: Runtime | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Objective change and feasibility of every move of ``solution``, computed by one unit.

    With ``unit="device"`` the fused kernel runs with one work-group per
    move, so its partial minima are the moves themselves: this checks the
    device's delta evaluation move by move.  For the QAP the device reads its
    matrix of move values, which the host computes when the state is uploaded
    and the device only updates as moves are applied: at a fresh state this
    checks the upload and the read, not the device's arithmetic.

    Parameters
    ----------
    problem : TabuProblem
    solution : array_like
    unit : {"cpu", "device"}
    runtime : hpu.Runtime, optional
        The device for ``unit="device"`` (default :func:`hpu.default_runtime`);
        thread-safe (the call borrows a lease).

    Returns
    -------
    delta : numpy.ndarray of int64, shape (N,)
        ``objective(neighbour) - objective(solution)`` for moves ``0..N-1``.
    feasible : numpy.ndarray of bool, shape (N,)

    Raises
    ------
    ValueError
        If ``unit`` is unknown or ``solution`` invalid.
    hpu.NoDeviceError
        For ``unit="device"`` without a device.
    hpu.DeviceFailure
        For ``unit="device"`` when the device fails (no fallback: the device is what is asked for).
    """
    if unit not in ("cpu", "device"):
        raise ValueError(f"unit must be 'cpu' or 'device', got {unit!r}")
    state = problem.state(solution)
    N = problem.num_moves
    if unit == "cpu":
        delta, feasible = np.empty(N, dtype=np.int64), np.ones(N, dtype=bool)
        for lo in range(0, N, state.block_moves):
            hi = min(lo + state.block_moves, N)
            d, f = state.deltas(lo, hi)
            delta[lo:hi] = d
            if f is not None:
                feasible[lo:hi] = f
        return delta, feasible
    rt = resolve_runtime(runtime)
    with rt.call(), Evaluator(state, rt, cpu_moves=0, groups=N, on_device_error="raise") as ev:
        cls, delta, key = ev.device_partials(1, _NO_ASPIRATION)
        order = np.argsort(key & _INDEX_MASK)
        return delta[order].copy(), cls[order] != INFEASIBLE
