"""hpu on a Dask cluster: a runtime per worker, a distributed sample sort, and many tabu searches at once.

Needs the optional extra ``hpu[dask]`` (``dask[array]`` and ``distributed``)::

    from distributed import Client, LocalCluster
    client = Client(LocalCluster(n_workers=2)); hpu.dask.register(client)
    y = hpu.dask.sort(x)          # x: a 1-D dask array; y: lazy, globally sorted, stable

- :class:`HpuPlugin` (registered by :func:`register`) gives every worker one
  process-wide :class:`hpu.Runtime`, made its default runtime: its own
  OpenCL device (GPUs of a host shared out among its workers, one each while
  there are enough), with that device's calibrated profile when one is
  cached (``python -m hpu.calibrate --device P:D`` once per device and host).
- :func:`sort` is a sample sort (Blelloch et al., "A comparison of sorting
  algorithms for the Connection Machine CM-2", SPAA 1991; Frazer and McKellar,
  "Samplesort", JACM 17(3), 1970): sample each block, choose splitters at
  quantiles weighted by each worker's speed as its hpu model predicts it,
  partition every block by key range (sorting it on the worker's device
  and cutting it by binary search where the device sorts it; the blocks
  of a persisted array that one worker holds together, :func:`local_groups`),
  move the pieces in Dask's all-to-all
  task shuffle, and make each key range on its worker: merged from its
  pieces where they all come sorted (:func:`hpu.sorting.cpu.multiway_merge`), else sorted
  with :func:`hpu.sort`.
  Keys are compared as (order-preserving key, global position) pairs
  (:func:`hpu.sorting.keys.to_unsigned`), so equal keys split across ranges
  by position and the result is stable, NaN and NaT last.
- :func:`tabu_search_many` runs independent :func:`hpu.tabu.tabu_search` calls on
  the workers and gathers their :class:`~hpu.tabu.TabuResult`\\ s;
  :func:`hybrid_ea_islands` runs :func:`hpu.tabu.hybrid_ea` populations on
  the workers as islands with periodic migration of their best individuals.

Every task is a pure function of its inputs, so Dask recomputes the tasks of
a worker that dies and the result is unchanged.
"""

from __future__ import annotations

import dataclasses
import fcntl
import inspect
import logging
import os
import pickle
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

try:
    import dask
    import dask.array as da
    import distributed
except ImportError as e:  # pragma: no cover - the optional extra is missing
    raise ImportError("hpu.dask needs the optional extra: pip install 'hpu[dask]' (dask[array] and distributed)") from e

from .core.profile import Profile
from .core.runtime import Runtime, default_runtime, list_devices, set_default_runtime
from .core.util import check_int, seed_list
from .core.kernels import CL_TYPES
from .sorting.api import sort as hpu_sort
from .sorting.cpu import bucket_ids, multiway_merge, stable_partition
from .sorting.mergesort import planned_split, planned_strategy
from .sorting.keys import check_sort_dtype, to_unsigned
from .tabu import hybrid_ea, tabu_search

log = logging.getLogger("hpu")

__all__ = ["MEMORY_SHARE", "SORT_FOOTPRINT", "HpuPlugin", "IslandResult", "default_partitions", "hybrid_ea_islands",
           "local_groups", "partition_block", "register", "sort", "tabu_search_many", "worker_speed"]

#: The process's worker runtime, the workers using it, and the lock file of the GPU it claimed.
_SHARED: dict[str, Any] = {"runtime": None, "workers": set(), "gpu_lock": None, "previous_default": None}
_SHARED_LOCK = threading.Lock()
#: Sampled keys per output partition, drawn from the input blocks in proportion to their sizes (regular
#: oversampling; Blelloch et al. 1991).
OVERSAMPLING = 32
_SPEED_KEYS = 1 << 24
#: Host bytes a worker's sort of one output block needs at its peak, per byte of the block: its pieces joined
#: (1) and :func:`hpu.sort`'s own scratch and result, 3.2-4.3 times the keys for 2^22-2^26 int64 keys on a CPU
#: OpenCL device, whose buffers are host memory too (``experiments/sort_footprint.py``,
#: ``experiments/results/cpu-only/sort_footprint.log``), with room to spare.
SORT_FOOTPRINT = 6.0
#: Share of a worker's memory limit the sorts it runs at once may take (Dask pauses a worker at 80% of it, and the
#: worker also holds its input blocks and pieces).
MEMORY_SHARE = 0.5


# -- workers -------------------------------------------------------------------


class HpuPlugin(distributed.WorkerPlugin):
    """Gives each Dask worker one process-wide hpu runtime, its default runtime (:func:`hpu.set_default_runtime`).

    Parameters
    ----------
    device : str, optional
        ``"auto"`` (default): the host's GPUs shared out among its workers,
        each worker claiming the first one no other worker of the host holds
        (a lock file per GPU, released when the worker's process ends), else
        :func:`hpu.core.runtime.select_device`'s default; any other value is
        passed to :class:`hpu.Runtime` (``"none"`` for CPU-only workers).
        Workers that share a process (``LocalCluster(processes=False)``)
        share its runtime, made by the first of them.
    threads : int, optional
        The runtime's thread pool (default: the worker's ``nthreads``).
    profile : hpu.Profile, str or os.PathLike, optional
        The runtime's profile, as :class:`hpu.Runtime` takes it (a path must
        be readable on every worker).  Default: the worker's device's
        profile from the host's cache.

    Notes
    -----
    Each worker's runtime takes its device's profile from the host's cache
    (``python -m hpu.calibrate --device P:D``, once per device and host);
    without one it sorts on its CPU (:attr:`hpu.Runtime.calibrated`).
    That profile was measured with all of the host's threads: workers of
    fewer threads log a warning, and a profile calibrated for them
    (``python -m hpu.calibrate --threads T --out FILE``) is given as
    ``profile``.

    Raises
    ------
    TypeError
        ``profile`` of another type (checked here, before any worker starts).
    """

    name = "hpu"

    def __init__(self, device: str = "auto", threads: int | None = None,
                 profile: Profile | str | os.PathLike | None = None):
        if profile is not None and not isinstance(profile, (Profile, str, os.PathLike)):
            raise TypeError(f"profile must be an hpu.Profile, a path or a shipped name, got {type(profile).__name__}")
        self.device, self.threads, self.profile = device, threads, profile

    def setup(self, worker: Any) -> None:
        with _SHARED_LOCK:  # workers in one process (LocalCluster(processes=False)) share its runtime
            if _SHARED["runtime"] is None:
                device = self._claim_gpu() if self.device == "auto" else self.device
                try:
                    _SHARED["runtime"] = Runtime(device, threads=self.threads or worker.state.nthreads,
                                                 profile=self.profile)
                except BaseException:
                    self._release_gpu()
                    raise
                _SHARED["previous_default"] = set_default_runtime(_SHARED["runtime"])
            _SHARED["workers"].add(worker.address)  # teardown counts only workers whose setup succeeded
            rt = _SHARED["runtime"]
        log.info("hpu on worker %s: %s, %s profile", worker.address, rt.device_name,
                 "calibrated" if rt.calibrated else "uncalibrated")

    def teardown(self, worker: Any) -> None:
        with _SHARED_LOCK:
            if worker.address not in _SHARED["workers"]:
                return  # its setup failed (distributed tears such a plugin down all the same)
            _SHARED["workers"].discard(worker.address)
            if _SHARED["workers"] or _SHARED["runtime"] is None:
                return
            rt, _SHARED["runtime"] = _SHARED["runtime"], None
            previous, _SHARED["previous_default"] = _SHARED["previous_default"], None
            current = set_default_runtime(previous)  # the process's default before the workers came back
            if current is not rt:  # replaced since: that choice stays
                log.debug("the default runtime had been replaced; closing hpu's worker runtime only")
                set_default_runtime(current)
            rt.close()
            self._release_gpu()

    @staticmethod
    def _release_gpu() -> None:
        if _SHARED["gpu_lock"] is not None:
            os.close(_SHARED["gpu_lock"])
            _SHARED["gpu_lock"] = None

    def _claim_gpu(self) -> str | None:
        """The ``"P:D"`` index of the first of the host's GPUs whose lock file this process can take (of one taken
        already when all are), or None for the default device."""
        gpus = [d.index for d in list_devices() if "GPU" in d.type]
        for gpu in gpus:
            path = os.path.join(tempfile.gettempdir(), f"hpu-gpu-{gpu.replace(':', '-')}.lock")
            try:  # another user's lock file may not be ours to open: then try the next GPU
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            _SHARED["gpu_lock"] = fd
            return gpu
        return gpus[os.getpid() % len(gpus)] if gpus else None


def register(client: distributed.Client, **kw: Any) -> None:
    """Register :class:`HpuPlugin` (``kw`` are its parameters) on every worker of ``client``, present and future."""
    client.register_plugin(HpuPlugin(**kw))


def worker_speed(dtype: Any = np.int32) -> float:
    """Keys per second this process's default runtime sorts, as its model predicts for 2^24 keys of ``dtype``.

    With a calibrated profile: the predicted time of the split :func:`hpu.sort`
    would run (:func:`hpu.sorting.planned_split`; the CPU alone where the
    device cannot take ``dtype``); otherwise the CPU alone, ``n log2 n`` merge
    steps of the profile's ``cpu_op_seconds`` (a guess when uncalibrated:
    :data:`hpu.core.runtime.GUESSED_CPU_OP_SECONDS`) over ``p`` cores (the
    paper's CPU cost, López-Ortiz et al. 2014, section 3).
    """
    rt = default_runtime()
    n = _SPEED_KEYS
    split = planned_split(n, dtype, rt)
    if split is not None:
        return n / split.predicted_time
    return n / (n * np.log2(n) * rt.profile.cpu_op_seconds / max(rt.profile.p, 1.0))


def _worker_facts(dtype: Any, dask_worker: Any = None) -> tuple[float, int | None, int]:
    """(:func:`worker_speed`, memory limit in bytes or None, threads) of the worker this runs on (``client.run``;
    the scheduler's own list may name only some workers)."""
    limit = getattr(getattr(dask_worker, "memory_manager", None), "memory_limit", None)
    return worker_speed(dtype), limit, int(dask_worker.state.nthreads)


# -- the sample sort -------------------------------------------------------------


def _client(client: distributed.Client | None) -> distributed.Client:
    """``client``, else the current client; ``TypeError`` for anything but a Client, ``ValueError`` for none."""
    if client is not None:
        if not isinstance(client, distributed.Client):
            raise TypeError(f"client must be a dask.distributed Client, got {type(client).__name__}")
        return client
    try:
        return distributed.get_client()
    except ValueError:
        raise ValueError("hpu.dask needs a dask.distributed Client (none is running; pass client= or start one)") \
            from None


def sort(x: Any, *, npartitions: int | None = None, client: distributed.Client | None = None,
         seed: int = 0) -> da.Array:
    """A globally sorted copy of the 1-D dask array ``x``, stable, computed on the cluster; lazy.

    Parameters
    ----------
    x : dask.array.Array (or array_like), shape (n,)
        A dtype :func:`hpu.sort` takes (bool, integers, float16/32/64,
        datetime64, timedelta64), with known chunk sizes.
    npartitions : int, optional
        Output blocks, one key range each (default: one per worker, more
        where a worker's memory limit calls for it: :func:`default_partitions`);
        at most ``n`` (one for an empty array).
    client : distributed.Client, optional
        Default: the current client.  Its workers' speeds
        (:func:`worker_speed`, from each worker's hpu model) weight the key
        ranges, and output block ``j`` is meant for worker ``j mod workers``
        (an annotation of its task; other workers may take it).  Dask's
        array optimisation drops annotations with its low-level fusion,
        which is on by default: the blocks go where the scheduler puts them
        unless the graph is computed unoptimised (``persist(...,
        optimize_graph=False)``) or with ``dask.config.set({"optimization.fuse.active": False})``.
    seed : int
        Seed of the sample positions (the result does not depend on it).

    Returns
    -------
    dask.array.Array, shape (n,)
        Lazy; equal to ``numpy.sort(x, kind="stable")`` once computed.
        Its blocks' sizes are unknown until computed
        (``compute_chunk_sizes()``): they depend on the keys (known for one
        block: ``npartitions=1`` or at most one key).

    Raises
    ------
    TypeError
        An unsupported dtype, or ``client`` not a :class:`distributed.Client`.
    ValueError
        Not one-dimensional, unknown chunk sizes, ``npartitions < 1``, no
        client, or a cluster without workers; all before any task runs.

    Notes
    -----
    Splitters: ``OVERSAMPLING`` keys per output block are drawn from every
    input block in proportion to its size; the output block of worker ``w``
    takes a share of the sample (ordered by key, then position) proportional
    to ``w``'s speed, so a worker with a calibrated GPU gets a wider key range.
    """
    if not isinstance(x, da.Array):
        x = np.asarray(x)  # its dtype checked before dask chunks it (dask refuses object arrays its own way)
    check_sort_dtype(x.dtype, "hpu.dask.sort")
    seed = check_int("seed", seed, 0)
    x = da.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"hpu.dask.sort sorts 1-D arrays; got shape {x.shape}")
    if any(np.isnan(c) for c in x.chunks[0]):
        raise ValueError("hpu.dask.sort needs known chunk sizes; call x.compute_chunk_sizes() first")
    if npartitions is not None:
        npartitions = check_int("npartitions", npartitions, 1)
    c = _client(client)
    facts = c.run(_worker_facts, x.dtype)
    if not facts:
        raise ValueError("the Dask cluster has no workers")
    workers = sorted(facts)
    speeds = {w: facts[w][0] for w in workers}
    n = x.shape[0]
    if npartitions is None:
        parts = default_partitions(n * x.dtype.itemsize, [facts[w][1] for w in workers],
                                   [facts[w][2] for w in workers], [speeds[w] for w in workers])
    else:
        parts = npartitions
    parts = min(parts, max(n, 1))  # more key ranges than keys would only add empty blocks (and tasks)
    if n <= 1 or parts == 1:
        return x.rechunk(-1).map_blocks(_sort_block, x.dtype, dtype=x.dtype)
    owner = [workers[j % len(workers)] for j in range(parts)]
    weights = np.array([speeds[w] for w in owner], dtype=np.float64)
    holders = _holders(c, x)
    cap = _group_cap([facts[w][1] for w in workers], max(facts[w][2] for w in workers), holders, x.chunks[0],
                     x.dtype.itemsize)
    groups = local_groups(holders, x.chunks[0], x.dtype.itemsize, cap, consecutive=x.dtype.kind == "f")
    return _sample_sort(x, parts, owner, weights / weights.sum(), seed, groups)


def _group_cap(limits: Sequence[int | None], threads: int, holders: Sequence[str | None], sizes: Sequence[int],
               itemsize: int) -> float:
    """The most bytes of keys in one of :func:`local_groups`' groups: a worker partitions as many groups at once as
    it has threads, each needing :data:`SORT_FOOTPRINT` times its keys, and all of them at once may take
    :data:`MEMORY_SHARE` of the least memory limit.  Where every worker's blocks fit that whole, any grouping
    does (one group a worker); else ``threads`` groups at once must.  No limits: no cap."""
    known = [int(m) for m in limits if m]
    if not known:
        return np.inf
    budget = MEMORY_SHARE * min(known) / SORT_FOOTPRINT
    held: dict[str, float] = {}
    for w, size in zip(holders, sizes):
        if w is not None:
            held[w] = held.get(w, 0.0) + float(size) * itemsize
    return budget if max(held.values(), default=0.0) <= budget else budget / max(threads, 1)


def _holders(client: distributed.Client, x: da.Array) -> list[str | None]:
    """The worker holding each block of ``x`` (the least address where several do, so that one worker's blocks
    group alike), None for a block not held (``x`` not persisted, or not yet computed)."""
    futures = {f.key: f for f in distributed.futures_of(x)}
    keys = list(x.__dask_keys__())
    held = client.who_has([futures[k] for k in keys if k in futures]) if futures else {}
    return [min(held[k]) if held.get(k) else None for k in keys]


def local_groups(holders: Sequence[str | None], sizes: Sequence[int], itemsize: int, cap_bytes: float = np.inf,
                 consecutive: bool = True) -> list[list[int]]:
    """Blocks of :func:`sort`'s input partitioned together: blocks one worker holds.

    A worker that holds several blocks sorts them in one device sort and cuts the result at the splitters (the local
    sort of "parallel sorting by regular sampling", Shi and Schaeffer, JPDC 14(4), 1992, over all of a worker's keys
    rather than block by block: one host-to-device sort instead of one per block).  With ``consecutive`` (what keys
    that compare equal but differ in their bits need, floats' -0.0 and 0.0 or NaNs of other payloads), only runs of
    consecutive blocks, so that a key range's pieces, in group order, are in input order for its stable merge;
    otherwise any of the worker's blocks, in order (equal keys are then the same bits, in whatever order).

    Parameters
    ----------
    holders : sequence of str or None, length B
        The worker holding each block (None: not known; such a block is a group of its own).
    sizes : sequence of int, length B
        Keys per block.
    itemsize : int
        Bytes per key.
    cap_bytes : float
        The most bytes of keys a group may hold (a group of one block may exceed it); default no cap.
    consecutive : bool
        Group only consecutive blocks (default True).

    Returns
    -------
    list of list of int
        Block indices, every block once, each group in increasing order, the groups by their first block.
    """
    groups: list[list[int]] = []
    open_: dict[Any, tuple[list[int], float]] = {}  # worker -> (its group still taking blocks, bytes in it)
    for i, (w, size) in enumerate(zip(holders, sizes)):
        nbytes = float(size) * itemsize
        current = open_.get(w) if w is not None else None
        if current is not None and current[1] + nbytes <= cap_bytes and (not consecutive or current[0][-1] == i - 1):
            current[0].append(i)
            open_[w] = (current[0], current[1] + nbytes)
        else:
            groups.append([i])
            if w is not None:
                open_[w] = (groups[-1], nbytes)
    return groups


def default_partitions(nbytes: int, memory_limits: Sequence[int | None], threads: Sequence[int],
                       speeds: Sequence[float] | None = None) -> int:
    """Output blocks of :func:`sort` by default: one per worker, or more where sorting that much at once would not fit
    a worker's memory.

    With ``W`` workers, the least memory limit ``L`` (bytes; None or 0: no
    limit), the most threads ``t`` of a worker and the largest share ``s``
    of the keys a worker sorts (its speed over the sum of the speeds:
    ``1 / W`` for equal ones), a worker sorts up to ``s nbytes`` of keys; one
    block each needs :data:`SORT_FOOTPRINT` times that at its peak, which
    may take :data:`MEMORY_SHARE` of ``L``.  Where it does not fit, each
    worker gets ``p >= t`` blocks, its share in ``p`` (``t`` of them sorted
    at once), with ``p = ceil(t SORT_FOOTPRINT s nbytes / (MEMORY_SHARE L))``:
    ``W p`` blocks in all.

    Parameters
    ----------
    nbytes : int
        Bytes of keys to sort.
    memory_limits : sequence of int or None
        Each worker's memory limit in bytes (Dask's ``memory_limit``).
    threads : sequence of int
        Each worker's threads.
    speeds : sequence of float, optional
        Each worker's keys per second (:func:`worker_speed`), which
        :func:`sort` weights the key ranges by; default equal.

    Returns
    -------
    int
        At least ``len(memory_limits)``, and at least 1.
    """
    w = max(1, len(memory_limits))
    limits = [int(m) for m in memory_limits if m]
    if not limits:
        return w
    budget = MEMORY_SHARE * min(limits)
    share = 1.0 / w if not speeds or sum(speeds) <= 0 else max(speeds) / sum(speeds)
    per_worker = nbytes * share
    if SORT_FOOTPRINT * per_worker <= budget:
        return w
    t = max([int(k) for k in threads] + [1])
    return w * max(t, int(np.ceil(t * SORT_FOOTPRINT * per_worker / budget)))


def _sample_sort(x: da.Array, parts: int, owner: list[str], shares: np.ndarray, seed: int,
                 groups: list[list[int]] | None = None) -> da.Array:
    """The task graph of :func:`sort`: sample, splitters, partition (each of ``groups``' blocks together; default
    each block alone), shuffle, sort each key range."""
    blocks = x.to_delayed().ravel()
    offsets = np.concatenate([[0], np.cumsum(x.chunks[0])]).astype(np.int64)
    n = int(offsets[-1])
    per_block = [max(1, int(round(OVERSAMPLING * parts * size / n))) for size in x.chunks[0]]
    samples = [dask.delayed(_sample, pure=True)(b, int(offsets[i]), k, seed + i)
               for i, (b, k) in enumerate(zip(blocks, per_block))]
    splitters = dask.delayed(_splitters, pure=True)(samples, shares)
    pieces = [dask.delayed(_partition, pure=True, nout=parts)([blocks[i] for i in g], [int(offsets[i]) for i in g],
                                                              splitters, parts)
              for g in (groups or [[i] for i in range(len(blocks))])]
    out = []
    for j in range(parts):
        with dask.annotate(workers=[owner[j]], allow_other_workers=True):
            part = dask.delayed(_sort_range, pure=True)([p[j] for p in pieces])
        out.append(da.from_delayed(part, shape=(np.nan,), dtype=x.dtype))
    return da.concatenate(out).astype(x.dtype, copy=False)  # dask's concatenation drops a non-native byte order


def _sort_block(b: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``b`` sorted, in ``dtype``'s byte order (numpy's pickle, which sends ``b`` to a worker process, drops a
    non-native one from datetime64 and timedelta64 arrays)."""
    return hpu_sort(b).astype(dtype, copy=False)


def _sample(block: np.ndarray, offset: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``k`` (key, global position) pairs at random positions of a block (sorted by position)."""
    if block.shape[0] == 0:
        return to_unsigned(block), np.zeros(0, np.int64)
    pos = np.sort(np.random.default_rng(seed).integers(0, block.shape[0], k))
    return to_unsigned(block[pos]), pos + offset


def _splitters(samples: list[tuple[np.ndarray, np.ndarray]], shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``len(shares) - 1`` (key, position) splitters: the sample ordered by (key, position) cut at the cumulative
    ``shares``."""
    keys = np.concatenate([s[0] for s in samples])
    pos = np.concatenate([s[1] for s in samples])
    order = np.lexsort((pos, keys))
    cuts = np.minimum((np.cumsum(shares)[:-1] * keys.size).astype(np.int64), keys.size - 1)
    return keys[order][cuts], pos[order][cuts]


def partition_block(block: np.ndarray, offset: int, splitters: tuple[np.ndarray, np.ndarray], parts: int, *,
                    method: str = "auto") -> tuple[np.ndarray, ...]:
    """One block's keys of each key range of :func:`sort` (a task of its graph, on a worker).

    Element ``(u, g)`` (its order-preserving key :func:`hpu.sorting.keys.to_unsigned` and global position)
    goes to the range of the number of splitters ``(su, sg)`` with ``(su, sg) < (u, g)``.

    Parameters
    ----------
    block : numpy.ndarray, shape (m,)
        Keys at global positions ``offset .. offset + m - 1``; any dtype :func:`hpu.sort` takes.
    offset : int
    splitters : (numpy.ndarray, numpy.ndarray), shapes (parts - 1,)
        Unsigned keys and int64 global positions, lexicographically non-decreasing.
    parts : int
        Number of key ranges.
    method : {"auto", "sort", "numpy"}
        ``"sort"``: the block sorted by :func:`hpu.sort` on this process's default runtime and cut by binary search (the
        local sort of "parallel sorting by regular sampling", Shi and Schaeffer, JPDC 14(4), 1992): each piece sorted.
        ``"numpy"``: a stable counting sort of the range numbers on one thread (:func:`hpu.sorting.cpu.bucket_ids` and
        :func:`hpu.sorting.cpu.stable_partition`, compiled where hpu's partition was built): each piece in block order.
        ``"auto"`` (default): ``"sort"`` where that runtime sorts a block of this size and dtype on its device
        (:func:`hpu.sorting.planned_strategy`), else ``"numpy"``.  Either way the pieces hold the same keys, equal keys
        in input order, which is all the final stable sort needs.

    Returns
    -------
    tuple of numpy.ndarray
        ``parts`` arrays of ``block``'s dtype.

    Raises
    ------
    ValueError
        An unknown ``method``.
    """
    if method not in ("auto", "sort", "numpy"):
        raise ValueError(f"method must be 'auto', 'sort' or 'numpy', got {method!r}")
    if method == "auto":
        method = _partition_method(block.shape[0], block.dtype, parts)
    if method == "sort":
        return _cut_sorted(block, [offset], [block.shape[0]], splitters)
    su, sg = splitters
    dest = bucket_ids(to_unsigned(block), offset, su, sg)  # keys level with a splitter's: split by position
    grouped, counts = stable_partition(np.ascontiguousarray(block), dest, parts)
    return tuple(np.split(grouped, np.cumsum(counts)[:-1]))


def _partition_method(n: int, dtype: np.dtype, parts: int) -> str:
    """:func:`partition_block`'s ``"auto"``: ``"sort"`` where this process's default runtime sorts ``n`` keys of
    ``dtype`` on its device, else ``"numpy"``.  Also on a CPU device (PoCL), though there the compiled partition
    alone is faster than a block's sort and cut: sorted pieces are merged, partitioned ones sorted again, and over a
    cluster of two workers on the CPU-only machine the partitioned blocks' sorts made up for it only at 2^26 keys
    (``experiments/results/cpu-only/bench_dask_compiled.log`` against ``bench_dask_merge.log``)."""
    return "sort" if parts > 1 and n and planned_strategy(n, dtype, default_runtime()) != "cpu" else "numpy"


def _partition(blocks: list[np.ndarray], offsets: list[int], splitters: tuple[np.ndarray, np.ndarray],
               parts: int) -> tuple[tuple[np.ndarray, bool], ...]:
    """The graph's partition task of a group of blocks in increasing order (:func:`local_groups`): their pieces of
    each key range, each with whether it is sorted.  Where the worker's runtime sorts the group's keys on its device,
    they are sorted together and cut (:func:`partition_block`'s ``"sort"``, over all of them); else each block is
    partitioned alone and its pieces of each range joined in block order."""
    dt = blocks[0].dtype
    sizes = [b.shape[0] for b in blocks]
    if _partition_method(sum(sizes), dt, parts) == "sort":
        keys = blocks[0] if len(blocks) == 1 else np.concatenate(blocks).astype(dt, copy=False)
        return tuple((p, True) for p in _cut_sorted(keys, offsets, sizes, splitters))
    each = [partition_block(b, o, splitters, parts, method="numpy") for b, o in zip(blocks, offsets)]
    joined = [np.concatenate([e[j] for e in each]).astype(dt, copy=False) for j in range(parts)]
    return tuple((p, p.shape[0] <= 1) for p in joined)


def _cut_sorted(keys: np.ndarray, offsets: list[int], sizes: list[int],
                splitters: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """:func:`partition_block`'s pieces, each sorted: ``keys`` (segments of ``sizes`` keys at global positions from
    ``offsets``, in increasing order) sorted by :func:`hpu.sort` (this worker's runtime), cut where each splitter
    falls (keys equal to a splitter's: those at global positions up to its position before it)."""
    su, sg = splitters
    s = hpu_sort(keys)
    us = to_unsigned(s)
    cuts = np.searchsorted(us, su, side="left")
    level = np.searchsorted(us, su, side="right") - cuts
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    u = None
    for j in np.flatnonzero(level):  # equal keys are in input order in the stable sort: count those not after sg[j]
        for start, offset, size in zip(starts, offsets, sizes):
            stop = int(min(max(sg[j] + 1 - offset, 0), size))
            if stop:
                u = to_unsigned(keys) if u is None else u
                cuts[j] += np.count_nonzero(u[start:start + stop] == su[j])
    return tuple(np.split(s, cuts))


def _sort_range(pieces: list[tuple[np.ndarray, bool]]) -> np.ndarray:
    """One key range from its pieces (each with whether it is sorted), in input order: merged stably by the
    thread pool of this worker's runtime (:func:`hpu.sorting.cpu.multiway_merge`, numpy's timsort merging the
    runs of each bucket) where every piece is sorted and of a native dtype the merge takes, else concatenated
    and sorted stably by :func:`hpu.sort` (in the input's byte order, which ``numpy.concatenate`` does not keep).

    Merging the sorted pieces rather than sorting them again is the last step of "parallel sorting by regular
    sampling" (Shi and Schaeffer, JPDC 14(4), 1992).  On the CPU-only machine 8 sorted pieces of 2^24 int64 keys
    in all merged in 221 ms on one thread against 317 ms sorted again (109 against 267 ms on two;
    ``experiments/bench_dask_partition.py``, ``experiments/results/cpu-only/bench_dask_partition_merge_t*.log``);
    re-sorting each bucket with numpy's quicksort instead of merging its runs was slower than sorting again.
    """
    arrays = [p for p, _ in pieces]
    dt = arrays[0].dtype
    if all(done for _, done in pieces) and dt in CL_TYPES and dt.isnative:
        runs = [a for a in arrays if a.shape[0]]
        if len(runs) <= 1:
            return runs[0].copy() if runs else arrays[0][:0].copy()
        out = np.empty(sum(a.shape[0] for a in runs), dt)
        rt = default_runtime()
        multiway_merge(runs, out, rt.pool, rt.threads, timsort_max_runs=len(runs))
        return out
    return hpu_sort(np.concatenate(arrays).astype(dt, copy=False))


# -- tabu searches ----------------------------------------------------------------


def tabu_search_many(problem: Any, seeds: Sequence[Any], *, client: distributed.Client | None = None,
                     **kw: Any) -> list[Any]:
    """Run ``hpu.tabu.tabu_search(problem, seed=s, **kw)`` for every seed on the cluster's workers; their results.

    Parameters
    ----------
    problem : hpu.tabu.TabuProblem
        Sent to the workers (it must pickle).
    seeds : sequence
        One search per seed, any value :func:`hpu.tabu.tabu_search` accepts.
    client : distributed.Client, optional
        Default: the current client.
    **kw
        Passed to :func:`hpu.tabu.tabu_search` (``iterations`` and ``tenure`` at
        least); each worker's default runtime runs its searches.

    Returns
    -------
    list of hpu.tabu.TabuResult
        In the order of ``seeds``; each equal to the search run on its own
        (the trajectory of a seed does not depend on the unit that runs it).

    Raises
    ------
    TypeError
        A problem or argument that cannot be pickled, ``runtime=`` (each
        worker uses its own) or ``seed=`` among ``kw``; ``seeds`` not an
        iterable of seeds; ``client`` not a :class:`distributed.Client`.
    ValueError
        No client or no workers; both before any task runs.
    """
    seeds = seed_list(seeds)  # once: an iterator gives its seeds once
    c = _ready_client(client, "tabu_search_many", ("seed",), problem, seeds, kw)
    # Sent once, not with every task; under a key of its own (a key from the contents is the previous call's, which
    # the scheduler may be dropping just then: "lost dependencies").
    shared = c.scatter(problem, broadcast=True, hash=False)
    return c.gather(c.map(_one_search, seeds, problem=shared, kw=kw, key="hpu-tabu-search", pure=False))


def _ready_client(client: distributed.Client | None, what: str, own: tuple[str, ...], *sent: Any) -> distributed.Client:
    """The client, after checking that ``sent`` pickles, that neither ``runtime=`` nor one of the arguments ``own``
    that ``what`` sets itself is among the keyword arguments (the last of ``sent``) and that the cluster has
    workers."""
    if "runtime" in sent[-1]:
        raise TypeError(f"{what} runs on each worker's runtime; do not pass runtime=")
    for name in own:
        if name in sent[-1]:
            raise TypeError(f"{what} sets {name}= of each run itself; do not pass it")
    try:
        pickle.dumps(sent)
    except Exception as e:
        raise TypeError(f"{what} sends the problem and arguments to the workers, but they cannot be pickled: {e}") \
            from e
    c = _client(client)
    if not c.nthreads():
        raise ValueError("the Dask cluster has no workers")
    return c


def _one_search(seed: Any, problem: Any, kw: dict[str, Any]) -> Any:
    return tabu_search(problem, seed=seed, **kw)


@dataclasses.dataclass
class IslandResult:
    """Outcome of :func:`hybrid_ea_islands`.

    Attributes
    ----------
    best_solution : numpy.ndarray of int64, shape (n,)
        The best solution of all islands (the first island's among equals).
    best_value : int
        Its objective.
    history : numpy.ndarray of int64, shape (epochs + 1,)
        The best objective over all islands: of the initial populations, then after each epoch.
    islands : list of hpu.tabu.EvolutionResult
        Each island's last epoch (its final population, best first).
    """

    best_solution: np.ndarray
    best_value: int
    history: np.ndarray
    islands: list[Any]


def hybrid_ea_islands(problem: Any, *, islands: int | None = None, epochs: int = 5, migrants: int = 1,
                      seed: Any = None, client: distributed.Client | None = None, **kw: Any) -> IslandResult:
    """The island model of :func:`hpu.tabu.hybrid_ea`: populations evolve on the workers, and after each epoch the
    best ``migrants`` individuals of every island replace the worst of the next (a ring; Whitley, Rana and
    Heckendorn, "The island model genetic algorithm", J. Computing and Information Technology 7, 1999).

    Parameters
    ----------
    problem : hpu.tabu.TabuProblem
        A permutation problem (as :func:`hpu.tabu.hybrid_ea` needs); it must pickle.
    islands : int, optional
        Populations (default: one per worker).
    epochs : int
        Rounds of ``hybrid_ea(..., generations=kw["generations"])`` per island, a migration after every one but the
        last (>= 1).
    migrants : int
        Individuals sent to the next island each migration (``0 <= migrants < population``).
    seed : int, sequence of int, numpy.random.SeedSequence or None
        Seeds every island's epochs (a :class:`numpy.random.SeedSequence` spawned per island and epoch): the same
        seed gives the same result, whichever worker runs an island.
    client : distributed.Client, optional
        Default: the current client.
    **kw
        Passed to :func:`hpu.tabu.hybrid_ea` (``population``, ``generations``, ``ls_iterations`` ...).

    Returns
    -------
    IslandResult

    Raises
    ------
    TypeError
        A problem or argument that cannot be pickled, ``runtime=`` or ``initial_population=`` among ``kw``, or
        ``client`` not a :class:`distributed.Client`.
    ValueError
        ``islands``, ``epochs``, ``migrants`` or ``population`` out of range, no client or no workers (before any
        task runs); and what :func:`hpu.tabu.hybrid_ea` raises.
    """
    c = _ready_client(client, "hybrid_ea_islands", ("initial_population",), problem, seed, kw)
    k = len(c.nthreads()) if islands is None else check_int("islands", islands, 1)
    epochs = check_int("epochs", epochs, 1)
    population = check_int("population", kw.get("population", _EA_POPULATION), 2)  # as hybrid_ea checks it
    migrants = check_int("migrants", migrants, 0, population, " (the population)")
    shared = c.scatter(problem, broadcast=True, hash=False)  # sent once (see tabu_search_many)

    def mapper(fn: Callable[..., Any], *args: list) -> list:
        return c.gather(c.map(fn, *args, key="hpu-island-epoch", pure=False))

    return run_islands(shared, k, epochs, migrants, seed, kw, mapper)


def run_islands(problem: Any, k: int, epochs: int, migrants: int, seed: Any, kw: dict[str, Any],
                mapper: Callable[..., list]) -> IslandResult:
    """:func:`hybrid_ea_islands`'s epochs and migrations, each epoch's islands run by ``mapper(fn, *arg_lists)``
    (``client.map`` and ``gather``, or the builtin ``map`` in a ``list`` for one process: the same result);
    ``problem`` is passed to ``mapper`` as it is (a scattered future for ``client.map``)."""
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    # root.spawn's children, without spawning from (and so changing) a SeedSequence of the caller's
    seeds = [np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, i), pool_size=root.pool_size)
             for i in range(k * epochs)]
    pops: list[Any] = [None] * k
    history: list[int] = []
    for e in range(epochs):
        results = mapper(_island_epoch, [problem] * k, pops, seeds[e * k:(e + 1) * k], [kw] * k)
        if e == 0:
            history.append(min(int(r.history[0]) for r in results))
        history.append(min(r.best_value for r in results))
        pops = [r.population.copy() for r in results]
        if migrants and k > 1 and e < epochs - 1:
            best = [p[:migrants].copy() for p in pops]
            for i in range(k):
                pops[i][-migrants:] = best[i - 1]
    top = min(range(k), key=lambda i: results[i].best_value)
    return IslandResult(results[top].best_solution.copy(), results[top].best_value, np.array(history, np.int64),
                        results)


#: hybrid_ea's default population.
_EA_POPULATION = inspect.signature(hybrid_ea).parameters["population"].default


def _island_epoch(problem: Any, population: Any, seed: np.random.SeedSequence, kw: dict[str, Any]) -> Any:
    return hybrid_ea(problem, seed=seed, initial_population=population, **kw)
