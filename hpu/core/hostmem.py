"""Recycled host memory for results: already paged in, and pinned where the DMA engine writes it.

A fresh numpy array of 64 MB costs its first writer one page fault per 4 KiB
page: 16 threads write into fresh memory at 20 GB/s on the H100 machine,
against 46 GB/s into memory already touched, and a device can DMA only into
pinned (page-locked) memory at full speed (53-54 GB/s pinned, 12-15 GB/s
pageable; ``experiments/bench_host_memory.py``, ``results/h100/host_memory.json``).  Like the caching host
allocators of CuPy and PyTorch, :class:`HostArrayPool` hands out arrays whose
memory comes back to the pool when the last reference to them dies, so the
next result of that size needs neither page faults nor a staging copy: the
device copies its share straight into the result.

Pinned memory is only for what the DMA engine touches: it is page-locked,
a resource the whole machine shares, and a result that only the CPU writes
gains nothing from it, so such results come from plain blocks, recycled all
the same.

The arrays are ordinary :class:`numpy.ndarray` objects (writeable, C
contiguous); only their ``base`` is a lease object of this module.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

try:
    import pyopencl as cl
except Exception:  # pragma: no cover - pyopencl is a dependency; CPU-only mode works without it
    cl = None

log = logging.getLogger("hpu")

__all__ = ["HostArrayPool", "MIN_POOLED_BYTES", "RENTAL_SIZES"]

#: Arrays smaller than this come from ``numpy.empty`` (their page faults cost little).
MIN_POOLED_BYTES = 1 << 20
#: Sizes whose plain arrays handed out in place of pinned ones :class:`HostArrayPool` counts (the most recent).
RENTAL_SIZES = 64


def _check_kept(kept: Any) -> str:
    """``kept`` itself if it is ``"pin"`` or ``"plain"``; else ValueError."""
    if kept not in ("pin", "plain"):
        raise ValueError(f"kept must be 'pin' or 'plain', got {kept!r}")
    return kept


class _Block:
    """One allocation: pinned (an OpenCL buffer mapped into host memory) or a plain numpy byte array."""

    __slots__ = ("nbytes", "host", "buffer", "pinned", "leases")

    def __init__(self, nbytes: int, context: Any, queue: Any):
        self.nbytes = nbytes
        self.leases = 0  # times handed out: a plain block's pages are mapped once its first lessee wrote them
        self.buffer = None
        self.pinned = context is not None
        if context is not None:
            mf = cl.mem_flags
            self.buffer = cl.Buffer(context, mf.READ_WRITE | mf.ALLOC_HOST_PTR, nbytes)
            self.host, _ = cl.enqueue_map_buffer(queue, self.buffer, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                                 (nbytes,), np.uint8, is_blocking=True)
        else:
            self.host = np.empty(nbytes, dtype=np.uint8)


class _Lease:
    """The ``base`` of a pooled array (its first ``nbytes`` bytes): returns its block to the pool when collected.

    The array interface is plain bytes; :meth:`HostArrayPool.empty` views them
    as the dtype asked for (a view keeps every dtype exactly: structured ones
    with padding or fields out of order included).
    """

    __slots__ = ("_pool", "_block", "__array_interface__")

    def __init__(self, pool: HostArrayPool, block: _Block, nbytes: int):
        self._pool, self._block = pool, block
        self.__array_interface__ = {
            "data": (block.host.__array_interface__["data"][0], False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }

    def __del__(self) -> None:
        self._pool._release(self._block)

    def __copy__(self) -> _Lease:  # a second lease of one block would give it back twice
        raise TypeError("a pooled array's lease cannot be copied; copy the array")

    def __deepcopy__(self, memo: dict) -> _Lease:
        raise TypeError("a pooled array's lease cannot be copied; copy the array")

    def __reduce__(self) -> Any:
        raise TypeError("a pooled array's lease cannot be pickled; pickle the array")


class HostArrayPool:
    """A pool of host memory blocks recycled between results, plain or pinned.

    Parameters
    ----------
    context, queue : pyopencl.Context and pyopencl.CommandQueue, or None
        With a context, :meth:`empty` can hand out pinned blocks: OpenCL
        buffers allocated with ``CL_MEM_ALLOC_HOST_PTR`` and mapped (the DMA
        engine's fast path).  Plain blocks are numpy memory.
    max_bytes : int
        Most bytes the pool holds, leased and free together (>= 0; 0 turns
        pooling off).  Past it :meth:`empty` returns ``None`` and the caller
        allocates as usual.

    Notes
    -----
    Thread-safe.  A leased array stays valid after :meth:`close`: its block
    is freed when the array is.
    """

    def __init__(self, context: Any, queue: Any, max_bytes: int):
        if int(max_bytes) < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._context, self._queue = context, queue
        self._free: list[_Block] = []
        self._leased_pinned: set[_Block] = set()
        self._total = 0
        self._lock = threading.Lock()
        self._returned: collections.deque[_Block] = collections.deque()  # released blocks not yet taken back
        # Per size (bytes): plain arrays handed out in place of pinned ones since kept last answered "pin" for it.
        self._rentals: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._closed = False

    @property
    def can_pin(self) -> bool:
        """Whether :meth:`empty` can hand out pinned (page-locked) OpenCL host memory."""
        return self._context is not None

    @property
    def total_bytes(self) -> int:
        """Bytes held now, leased and free."""
        return self._total

    def empty(self, n: int, dtype: Any, *, pinned: bool = False, kept: str | Callable[[int], str] = "pin",
              inputs: Sequence[np.ndarray] = ()) -> np.ndarray | None:
        """A new uninitialised array of ``n`` elements from the pool, or ``None``.

        Parameters
        ----------
        n : int
            Number of elements (>= 0).
        dtype : numpy dtype
        pinned : bool
            Pinned memory (for the DMA engine; plain memory when the pool has
            no OpenCL context).
        kept : {"pin", "plain"}, or a callable returning one
            With ``pinned``, when no free pinned block fits while one of this
            size is still leased (the caller keeps earlier results): pin a
            fresh block (``"pin"``), or hand out plain memory instead
            (``"plain"``: the caller stages through pinned buffers of its
            own, see :meth:`is_pinned`), which is cheaper where pinning fresh
            memory costs more than a staging copy.  A callable is called only
            when that choice arises (under the pool's lock: it must not use
            the pool), so that a choice that costs time (a cost model's) is
            not paid by the calls that recycle a block; it gets one argument,
            the plain arrays of this size handed out so far in place of
            pinned ones since its answer for the size was last "pin" (a
            loop that keeps its last result finds the block leased every
            other call: renting plain memory again and again may come to
            cost more than pinning another block once, the ski-rental
            problem; :func:`hpu.sorting.pipeline.kept_policy`).  The first block of a size
            is always pinned: later calls recycle it.  A call with several
            results asks once (views of one block): a block it leased itself a
            moment before would otherwise count as a result the caller keeps.
        inputs : sequence of numpy.ndarray
            Arrays the call reads: the pool's blocks they lie in (an input in
            pinned memory, :meth:`hpu.Runtime.empty_pinned`) are not results
            the caller keeps, for ``kept``.

        Returns
        -------
        numpy.ndarray of shape (n,) and ``dtype``, or None
            None when pooling is off, the pool is closed, the array is smaller
            than :data:`MIN_POOLED_BYTES` or holds Python objects, the pool is full (free pinned blocks are
            dropped to make room for pinned memory only), or the pinned
            allocation fails: allocate with ``numpy.empty`` then.  The array
            is the caller's alone; its memory returns to the pool when the
            array and every view of it are gone.
        """
        dt = np.dtype(dtype)
        need = int(n) * dt.itemsize
        pinned = bool(pinned) and self.can_pin
        if not callable(kept):
            _check_kept(kept)
        if need < MIN_POOLED_BYTES or self._closed or dt.hasobject:  # object arrays must start zeroed
            return None
        with self._held():
            fits = [b for b in self._free if need <= b.nbytes <= 2 * need and b.pinned == pinned]
            if pinned and not fits and self._kept_elsewhere(need, inputs):
                pinned = self._rent_or_pin(need, kept)
                fits = fits if pinned else [b for b in self._free if need <= b.nbytes <= 2 * need and not b.pinned]
            block = min(fits, key=lambda b: b.nbytes) if fits else None
            if block is not None:
                self._free.remove(block)
            else:
                # Make room: drop free blocks, oldest first; never a pinned one for plain memory, which costs
                # numpy.empty where the pool is full, while pinning a block again costs far more.
                droppable = [b for b in self._free if pinned or not b.pinned]
                if self._total - sum(b.nbytes for b in droppable) + need > self.max_bytes:
                    return None  # no room even without them: keep them
                for drop in droppable:
                    if self._total + need <= self.max_bytes:
                        break
                    self._free.remove(drop)
                    self._total -= drop.nbytes
                self._total += need
        if block is None:
            try:
                block = _Block(need, self._context if pinned else None, self._queue)
            except Exception as e:  # out of pinned memory: the caller allocates as usual
                log.debug("host pool: allocation of %d bytes failed (%s)", need, e)
                with self._held():
                    self._total -= need
                return None
        block.leases += 1  # the block is this call's alone until its lease dies
        if block.pinned:
            with self._held():
                self._leased_pinned.add(block)
        return np.asarray(_Lease(self, block, need)).view(dt)

    def empty_or_new(self, n: int, dtype: Any, *, pinned: bool = False, kept: str | Callable[[int], str] = "pin",
                     inputs: Sequence[np.ndarray] = ()) -> np.ndarray:
        """:meth:`empty`, or ``numpy.empty(n, dtype)`` where the pool has no array to give.

        Returns
        -------
        numpy.ndarray of shape (n,) and ``dtype``, uninitialised (object arrays: ``None`` everywhere)
        """
        a = self.empty(n, dtype, pinned=pinned, kept=kept, inputs=inputs)
        return np.empty(int(n), dtype) if a is None else a

    def is_pinned(self, arr: np.ndarray) -> bool:
        """Whether ``arr`` (or the array it views) lies in pinned memory of this pool."""
        block = self._block_of(arr)
        return block is not None and block.pinned

    def recycled_pinned(self, arr: np.ndarray) -> bool:
        """Whether ``arr`` (or the array it views) lies in a pinned block of this pool that was handed out before:
        a result that cost neither pinning nor a copy out of staging memory."""
        block = self._block_of(arr)
        return block is not None and block.pinned and block.leases > 1

    def paged_in(self, arr: np.ndarray) -> bool:
        """Whether ``arr`` (or the array it views) lies in memory of this pool whose pages are mapped already: a
        pinned block, or a plain one handed out before (recycled), whose first lessee wrote it.  Writing into
        such memory costs no page faults, so there is nothing to gain by touching it first."""
        block = self._block_of(arr)
        return block is not None and (block.pinned or block.leases > 1)

    def _rent_or_pin(self, need: int, kept: str | Callable[[int], str]) -> bool:
        """Whether a result of ``need`` bytes gets a freshly pinned block (else plain memory), as ``kept`` says
        (:meth:`empty`), given the plain ones handed out for that size since its last answer "pin" for it; counts
        them; under the lock."""
        rentals = self._rentals.pop(need, 0)
        if _check_kept(kept(rentals) if callable(kept) else kept) == "pin":
            return True
        self._rentals[need] = rentals + 1  # the most recent size last
        while len(self._rentals) > RENTAL_SIZES:
            self._rentals.popitem(last=False)
        return False

    def _kept_elsewhere(self, need: int, inputs: Sequence[np.ndarray]) -> bool:
        """Whether a leased pinned block of ``need`` to ``2 * need`` bytes holds none of ``inputs`` (a result the
        caller keeps); under the lock."""
        held = [self._block_of(a) for a in inputs]
        return any(need <= b.nbytes <= 2 * need and all(b is not h for h in held) for b in self._leased_pinned)

    def _block_of(self, arr: Any) -> _Block | None:
        """The block of this pool that ``arr`` (or the array it views) lies in, or None."""
        base = arr
        while isinstance(base, np.ndarray):
            base = base.base
        return base._block if isinstance(base, _Lease) and base._pool is self else None

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        """Hold the pool's lock, the blocks released so far taken back; those released meanwhile (by any thread) are
        taken back as it is let go (:meth:`_drain`)."""
        with self._lock:
            self._take_back()
            yield
        self._drain()

    def _release(self, block: _Block) -> None:
        """Give ``block`` back (from :class:`_Lease`'s ``__del__``).

        Never waits for the lock: the garbage collector may run ``__del__`` on
        a thread that holds it (inside :meth:`empty`).  The block is queued;
        whoever holds the lock, this thread or another, takes it back as it
        lets the lock go.
        """
        self._returned.append(block)
        self._drain()

    def _drain(self) -> None:
        """Take back the queued blocks if the lock is free (else its holder does, after letting it go)."""
        while self._returned and self._lock.acquire(blocking=False):
            try:
                self._take_back()
            finally:
                self._lock.release()

    def _take_back(self) -> None:
        """Put the released blocks back (free, or freed once the pool is closed); under the lock."""
        while self._returned:
            block = self._returned.popleft()
            self._leased_pinned.discard(block)
            if self._closed:
                self._total -= block.nbytes
            else:
                self._free.append(block)

    def close(self) -> None:
        """Free the blocks not leased; later releases free their blocks (idempotent)."""
        with self._held():
            self._closed = True
            for b in self._free:
                self._total -= b.nbytes
            self._free.clear()
