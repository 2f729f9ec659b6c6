"""OpenCL device layer: device discovery and choice, and the :class:`Runtime`.

Device choice (first that applies):

1. the ``device`` argument (see :func:`select_device` for the forms it takes);
2. the ``PYOPENCL_CTX`` environment variable (``"P:D"`` indices, or a name
   substring, as pyopencl understands it);
3. a GPU, if an OpenCL platform offers one, else an accelerator;
4. a CPU OpenCL device (e.g. PoCL);
5. no device: CPU-only mode, with a logged warning.

A :class:`Runtime` owns its context, command queues, compiled programs and
thread pool, and may be shared by any number of threads.  The one piece of
module-level state is the lazily created default runtime
(:func:`default_runtime`), which calls without ``runtime=`` use, as CuPy
has a current device.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import math
import operator
import os
import re
import threading
import warnings
import weakref
from pathlib import Path
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import platformdirs

from .hostmem import HostArrayPool
from .hybrid import DeviceFailure
from .kernels import kernel_source
from .profile import Profile, ProfileError, reference_profile
from .util import check_int, host_description

try:  # pyopencl is a dependency, but a broken ICD setup must not make hpu unusable
    import pyopencl as cl
except Exception as _e:  # pragma: no cover - exercised only without pyopencl
    cl = None
    _CL_IMPORT_ERROR: Exception | None = _e
else:
    _CL_IMPORT_ERROR = None

log = logging.getLogger("hpu")

__all__ = ["DeviceInfo", "DeviceLease", "NoDeviceError", "ResourceCache", "Runtime", "RuntimeClosedError",
           "WorkerPool", "MAX_THREADS", "UNCALIBRATED", "check_runtime", "default_profile_path", "default_runtime",
           "device_key", "list_devices", "pocl_shares_kernels_across_queues", "resolve_runtime", "select_device",
           "select_devices", "set_default_runtime", "uncalibrated_profile", "using_runtime"]

#: ``provenance["source"]`` of :func:`uncalibrated_profile`'s profiles.
UNCALIBRATED = "uncalibrated"
#: Most threads of a runtime's CPU pool: more would be started as work comes, a parallel sort's tasks reaching all.
MAX_THREADS = 4096


class NoDeviceError(RuntimeError):
    """An operation needs an OpenCL device but the runtime is in CPU-only mode."""


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """Description of one OpenCL device (as listed by :func:`list_devices`).

    ``index`` is ``"P:D"``: platform and device numbers, the form
    ``PYOPENCL_CTX`` and :func:`select_device` accept.
    """

    index: str
    platform: str
    name: str
    type: str
    version: str
    driver: str
    compute_units: int
    global_mem_bytes: int
    local_mem_bytes: int
    max_work_group_size: int
    fp64: bool

    def __str__(self) -> str:
        return (
            f"[{self.index}] {self.name} ({self.type}, {self.platform}; {self.compute_units} compute units, "
            f"{self.global_mem_bytes / 2**30:.1f} GiB)"
        )


def _platforms() -> list:
    if cl is None:
        return []
    try:
        return cl.get_platforms()
    except Exception as e:  # no ICD loader / no platform
        log.debug("no OpenCL platform: %s", e)
        return []


def _device_type(bits: int) -> str:
    """An OpenCL device type bitfield as its names ("CPU", "GPU", "ACCELERATOR | CUSTOM"): pyopencl's
    ``device_type.to_string`` also names ``ALL`` (``0xFFFFFFFF``), which every non-zero bitfield meets."""
    names = [n for n in ("DEFAULT", "CPU", "GPU", "ACCELERATOR", "CUSTOM")
             if hasattr(cl.device_type, n) and bits & getattr(cl.device_type, n)]
    return " | ".join(names) or str(bits)


def _describe(dev: Any, index: str) -> DeviceInfo:
    ext = dev.extensions or ""
    return DeviceInfo(
        index=index,
        platform=dev.platform.name.strip(),
        name=dev.name.strip(),
        type=_device_type(dev.type),
        version=dev.version.strip(),
        driver=dev.driver_version.strip(),
        compute_units=int(dev.max_compute_units),
        global_mem_bytes=int(dev.global_mem_size),
        local_mem_bytes=int(dev.local_mem_size),
        max_work_group_size=int(dev.max_work_group_size),
        fp64="cl_khr_fp64" in ext or getattr(dev, "double_fp_config", 0) != 0,
    )


def list_devices() -> list[DeviceInfo]:
    """All OpenCL devices of all platforms, in platform order.

    Returns an empty list when pyopencl or an OpenCL driver is missing.
    """
    return [_describe(dev, index) for index, dev in _all_devices()]


def _all_devices() -> list[tuple[str, Any]]:
    out = []
    for pi, plat in enumerate(_platforms()):
        try:
            devs = plat.get_devices()
        except Exception:
            continue
        out.extend((f"{pi}:{di}", d) for di, d in enumerate(devs))
    return out


_CPU_ONLY = {"none", "cpu-only", "cpuonly", "host"}


def select_device(device: Any = None) -> Any:
    """Choose an OpenCL device.

    Parameters
    ----------
    device : None, str or pyopencl.Device
        ``None``: ``PYOPENCL_CTX`` if set, else a GPU, else an accelerator,
        else a CPU OpenCL device, else CPU-only mode.  A string: ``"gpu"``,
        ``"accelerator"`` or ``"cpu"`` (first device of that type), ``"P:D"`` or ``"P"`` (platform and device
        numbers as in ``PYOPENCL_CTX``), ``"none"``/``"cpu-only"`` (no device),
        or a case-insensitive substring of the device or platform name.  A
        ``pyopencl.Device`` is used as it is.

    Returns
    -------
    pyopencl.Device or None
        ``None`` means CPU-only mode (a warning is logged when that was not
        asked for).

    Raises
    ------
    TypeError
        ``device`` is none of these.
    ValueError
        If the string is empty or blank, or names no available device (the
        message lists them).
    """
    if cl is not None and isinstance(device, cl.Device):
        return device
    devices = _all_devices()
    if device is None:
        env = os.environ.get("PYOPENCL_CTX", "").strip()
        if env:
            try:
                return select_device(env)
            except ValueError as e:
                raise ValueError(f"PYOPENCL_CTX={env!r}: {e}") from None
        for want in (cl.device_type.GPU, cl.device_type.ACCELERATOR, cl.device_type.CPU) if cl else ():
            for _, d in devices:
                if d.type & want:
                    return d
        reason = f" (pyopencl import failed: {_CL_IMPORT_ERROR})" if _CL_IMPORT_ERROR else ""
        log.warning("no OpenCL device found%s; running in CPU-only mode", reason)
        return None
    if not isinstance(device, str):
        raise TypeError(f"device must be None, a string or a pyopencl.Device, got {type(device).__name__}")
    spec = device.strip()
    low = spec.lower()
    if not spec:  # "" is a substring of every name: it would pick the first device of any kind
        raise ValueError(f"device must name a device, got {device!r} (None picks the default device)")
    if low in _CPU_ONLY:
        return None
    if low in ("gpu", "cpu", "accelerator"):
        want = getattr(cl.device_type, low.upper()) if cl else None
        for _, d in devices:
            if want is not None and d.type & want:
                return d
    elif re.fullmatch(r"\d+(:\d+)?", spec):
        pi, _, di = spec.partition(":")
        key = f"{int(pi)}:{int(di or 0)}"
        for idx, d in devices:
            if idx == key:
                return d
    else:
        for _, d in devices:
            if low in d.name.lower() or low in d.platform.name.lower():
                return d
    avail = "; ".join(str(_describe(d, i)) for i, d in devices) or "none"
    raise ValueError(f"unknown OpenCL device {spec!r}; available devices: {avail}")


def select_devices(devices: str | Sequence[Any]) -> list:
    """The devices of a several-device HPU (``Runtime(devices=...)``).

    Parameters
    ----------
    devices : "all" or sequence
        ``"all"``: every GPU and accelerator in platform order, else the
        default device (:func:`select_device` with None) alone; a sequence:
        each item as :func:`select_device` takes it (repeats allowed).

    Returns
    -------
    list of pyopencl.Device (one None entry: CPU-only mode)

    Raises
    ------
    TypeError
        ``devices`` neither ``"all"`` nor a sequence (one device, say).
    ValueError
        An empty sequence, a CPU-only item among others, or an unknown device.
    """
    if isinstance(devices, str):
        if devices.strip().lower() != "all":
            raise ValueError(f"devices must be 'all' or a sequence of devices, got {devices!r}")
        accel = cl.device_type.GPU | cl.device_type.ACCELERATOR if cl is not None else 0
        found = [d for _, d in _all_devices() if d.type & accel]
        return found or [select_device(None)]
    if isinstance(devices, (bytes, Mapping)) or not isinstance(devices, Iterable):  # a pyopencl.Device included
        raise TypeError(f"devices must be 'all' or a sequence of devices (one device: device=...), got {devices!r}")
    found = [select_device(d) for d in devices]
    if not found:
        raise ValueError("devices is empty; give at least one device (or 'all')")
    if len(found) > 1 and any(d is None for d in found):
        raise ValueError("a CPU-only entry ('none') cannot be combined with devices")
    return found


def device_key(dev: Any) -> str:
    """A file-name-safe key for a device (or ``"cpu-only"``), used to name cached profiles."""
    if dev is None:
        return "cpu-only"
    raw = f"{dev.platform.name}-{dev.name}"
    return re.sub(r"[^A-Za-z0-9]+", "-", raw).strip("-").lower()[:80]


def default_profile_path(dev: Any) -> Path:
    """Where ``python -m hpu.calibrate`` saves a device's profile by default.

    ``$HPU_PROFILE_DIR/<key>.json`` if that variable is set (a leading
    ``~`` is the home directory, as in a shell), else the user cache
    directory (``platformdirs.user_cache_dir("hpu")/profiles``).
    """
    base = os.environ.get("HPU_PROFILE_DIR") or os.path.join(platformdirs.user_cache_dir("hpu"), "profiles")
    return Path(base).expanduser() / f"{device_key(dev)}.json"


def _origin(field: str, value: Any) -> str:
    """One field of where a profile was calibrated, for a message: ``16 CPU threads``, ``device 'NVIDIA H100'``."""
    return f"{value} CPU threads" if field == "threads" else f"{field} {value!r}"


def _physical_memory() -> int:
    """Bytes of physical memory (0 where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 0


#: Seconds per merge step guessed for a CPU that has not been calibrated.
GUESSED_CPU_OP_SECONDS = 5e-9


def uncalibrated_profile(dev: Any, threads: int) -> Profile:
    """Rough guesses used until ``python -m hpu.calibrate`` has run for this device.

    The profile has no measured cost curves, and ``provenance["source"]`` is
    :data:`UNCALIBRATED`: the fast-mode sorts then keep to the CPU alone
    (never slower than the CPU alone; a device's speed is known only once
    measured); paper mode and :mod:`hpu.dc` apply the paper's model to
    these guesses, and tabu search measures its own costs.
    """
    if dev is None:
        return Profile(p=threads, g=1, gamma=1.0, cpu_op_seconds=GUESSED_CPU_OP_SECONDS, name="uncalibrated (CPU only)",
                       provenance={"source": UNCALIBRATED})
    cu = int(dev.max_compute_units)
    is_gpu = bool(dev.type & cl.device_type.GPU)
    return Profile(
        p=threads,
        g=cu * (256 if is_gpu else 8),
        gamma=1 / 10 if is_gpu else 1 / 2,
        cpu_op_seconds=GUESSED_CPU_OP_SECONDS,
        h2d_latency=2e-5,
        d2h_latency=2e-5,
        h2d_seconds_per_byte=1 / 8e9,
        d2h_seconds_per_byte=1 / 8e9,
        launch_seconds=1e-5,
        name="uncalibrated",
        device=dev.name.strip(),
        provenance={"source": UNCALIBRATED, "note": "default guesses; run python -m hpu.calibrate"},
    )


def device_supports(device: Any, dtype: Any) -> bool:
    """Whether ``device`` can compute on ``dtype`` (float64 needs cl_khr_fp64; False for no device, and for a
    byte order other than the host's, which the kernels do not read)."""
    if device is None or not np.dtype(dtype).isnative:
        return False
    if np.dtype(dtype) == np.float64:
        return "cl_khr_fp64" in (device.extensions or "")
    return True


def pocl_shares_kernels_across_queues(device: Any) -> bool:
    """Whether ``device`` is a CPU device of PoCL before release 7.0, whose cache of compiled kernels can abort the
    process when three command queues or more run one program's kernel at once.

    Its drivers look a finished kernel command's cache entry up again by the program's build hash and the
    work-group size alone, while the lookup at launch also weighs the NDRange's width and global offset: with
    three commands in flight, the one to end last can find an entry already counted down to zero, and an
    assertion aborts the process (PoCL's commit "fix dlhandle cache", June 2024, first released in 7.0, keeps
    the entry with the command instead).  A :class:`Runtime` on such a device builds each command queue's
    programs apart (:attr:`Runtime.queue_slot`), so that no two of its live queues share a build hash.  The
    release is read from the platform's version (``"OpenCL 3.0 PoCL 3.1+debian ..."``; the device's own holds
    none); one that cannot be read counts as affected.
    """
    if device is None or "Portable Computing Language" not in device.platform.name:
        return False
    if not device.type & cl.device_type.CPU:
        return False
    m = re.search(r"PoCL (\d+)\.(\d+)", device.platform.version)
    return m is None or (int(m.group(1)), int(m.group(2))) < (7, 0)


def _finish(queues: Iterable[Any], what: str) -> None:
    """Wait for each of ``queues`` to run what it was given; a faulted queue (nothing more runs on it) is logged."""
    for q in queues:
        try:
            q.finish()
        except Exception as e:
            log.debug("finishing %s: %s", what, e)


class _QueueSlots:
    """The process's queue slots (:attr:`Runtime.queue_slot`): the smallest number no live queue holds.

    The lock is reentrant: a slot is given back by a finalizer, which a garbage collection may run inside
    :meth:`take` on the same thread."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._held: set[int] = set()

    def take(self) -> int:
        with self._lock:
            slot = next(i for i in itertools.count() if i not in self._held)
            self._held.add(slot)
        return slot

    def give(self, slot: int) -> None:
        with self._lock:
            self._held.discard(slot)

    def after_fork(self) -> None:
        """In a forked child: a new lock (another thread of the parent may have held it)."""
        self._lock = threading.RLock()


_QUEUE_SLOTS = _QueueSlots()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_QUEUE_SLOTS.after_fork)


class _SlotHold:
    """The queue slot of one owner (a :class:`Runtime` or a :class:`DeviceLease`) on ``device``, for ``queue``: None
    where the device needs none (:func:`pocl_shares_kernels_across_queues`).  :meth:`give` (or the owner's
    collection) gives it back once the queues that ran its programs (``queue`` and those of :meth:`add`) have
    finished: a queue still running them would share a build hash with the slot's next holder."""

    def __init__(self, owner: Any, device: Any, queue: Any):
        self.slot = _QUEUE_SLOTS.take() if pocl_shares_kernels_across_queues(device) else None
        self._queues: list = [] if self.slot is None else [queue]
        self._give = None if self.slot is None else weakref.finalize(owner, _SlotHold._release, self.slot,
                                                                     self._queues)

    def add(self, queue: Any) -> None:
        if self.slot is not None:
            self._queues.append(queue)

    def give(self) -> None:
        if self._give is not None:
            self._give()

    @staticmethod
    def _release(slot: int, queues: list) -> None:
        _finish(queues, "a queue before giving its slot back")
        queues.clear()
        _QUEUE_SLOTS.give(slot)


class RuntimeClosedError(RuntimeError):
    """A call was made on a closed :class:`Runtime` (or one created in another process)."""


class ResourceCache:
    """A locked cache of long-lived per-runtime objects (device sorters, tabu costs), built once per key.

    :meth:`get` runs ``factory`` at most once per key, even when many threads
    ask at once (the others wait for it), and checks the type of what it
    returns.  Objects here are shared by concurrent calls, so they must hold
    no per-call state; per-call buffers live in a :class:`DeviceLease`.
    """

    def __init__(self) -> None:
        self._items: dict[Any, Any] = {}
        self._lock = threading.Lock()
        self._building: dict[Any, threading.Lock] = {}

    def get(self, key: Any, factory: Any, kind: type | tuple[type, ...] = object) -> Any:
        """The object under ``key``, made by ``factory()`` on first use.

        Raises
        ------
        TypeError
            The cached (or new) object is not an instance of ``kind``.
        """
        with self._lock:
            if key in self._items:
                return _checked(key, self._items[key], kind)
            build = self._building.setdefault(key, threading.Lock())
        with build:
            with self._lock:
                if key in self._items:
                    return _checked(key, self._items[key], kind)
            value = _checked(key, factory(), kind)
            with self._lock:
                self._items[key] = value
                self._building.pop(key, None)
        return value

    def pop(self, key: Any) -> Any:
        """Remove and return the object under ``key`` (None if absent)."""
        with self._lock:
            return self._items.pop(key, None)

    def clear(self) -> None:
        """Forget every object."""
        with self._lock:
            self._items.clear()

    def __contains__(self, key: Any) -> bool:
        with self._lock:
            return key in self._items


def _checked(key: Any, value: Any, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(value, kind):
        raise TypeError(f"resource {key!r} is a {type(value).__name__}, expected {kind}")
    return value


class DeviceLease:
    """Device resources lent to one call at a time: its own command queues, buffers and pinned staging memory.

    A :class:`Runtime` keeps idle leases and lends one to each device share
    (:func:`hpu.core.hybrid.run_hybrid` does it); a lease's buffers grow to
    the largest request and are reused by the next call that borrows it, so a
    single thread pays for allocation once, and concurrent calls never share
    a queue or a buffer.

    Attributes
    ----------
    context : pyopencl.Context
    device : pyopencl.Device
    queue : pyopencl.CommandQueue
        In-order, with profiling when the runtime has it.
    generation : int
        The runtime's context generation this lease belongs to (see
        :meth:`Runtime.report_failure`).
    """

    def __init__(self, runtime: Runtime, generation: int, context: Any, device: Any, properties: int):
        self.runtime = runtime
        self.context, self.device, self.generation = context, device, generation
        self.queue = cl.CommandQueue(self.context, self.device, properties=properties)
        self._slot = _SlotHold(self, self.device, self.queue)
        self._queues: dict[str, Any] = {}  # the further in-order queues, made on first use
        self._items: dict[Any, Any] = {}

    def _extra_queue(self, name: str) -> Any:
        if name not in self._queues:
            self._queues[name] = cl.CommandQueue(self.context, self.device, properties=self.queue.properties)
            self._slot.add(self._queues[name])
        return self._queues[name]

    @property
    def queue_slot(self) -> int | None:
        """As :attr:`Runtime.queue_slot`, for the programs this lease builds (:meth:`build`, :meth:`program`) and
        runs on :attr:`queue`."""
        return self._slot.slot

    @property
    def copy_queue(self) -> Any:
        """A second in-order command queue (e.g. for host-to-device copies that must not wait behind kernels)."""
        return self._extra_queue("copy")

    @property
    def download_queue(self) -> Any:
        """A third in-order command queue (device-to-host copies that must wait neither behind the next kernels nor
        behind host-to-device copies still waiting for their staging)."""
        return self._extra_queue("download")

    def cached(self, key: Any, factory: Any) -> Any:
        """A per-lease object under ``key``, made by ``factory()`` on first use (no lock: one call at a time)."""
        if key not in self._items:
            self._items[key] = factory()
        return self._items[key]

    def kernel(self, program: Any, name: str) -> Any:
        """Kernel ``name`` of ``program`` (built in this lease's context), one object per lease, reused by every
        call on it: pyopencl prepares each new kernel object's argument handling anew.  Its arguments are the last
        call's: set them all before a launch."""
        return self.cached(("kernel", program.int_ptr, name), lambda: cl.Kernel(program, name))

    def buffer(self, name: str, nbytes: int) -> Any:
        """A device buffer of at least ``nbytes`` bytes, reused across calls, grown as needed."""
        key = ("buffer", name)
        cur = self._items.get(key)
        if cur is None or cur.size < nbytes:
            self._items.pop(key, None)
            cur = self._items[key] = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(int(nbytes), 1))
        return cur

    def pinned(self, name: str, nbytes: int) -> np.ndarray:
        """Pinned host memory (uint8, at least ``nbytes``; mapped ``ALLOC_HOST_PTR``), reused and grown as needed."""
        key = ("pinned", name)
        cur = self._items.get(key)
        if cur is None or cur[1].nbytes < nbytes:
            self._items.pop(key, None)
            size = max(int(nbytes), 1 << 20)
            buf = cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, size)
            host, _ = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (size,),
                                            np.uint8, is_blocking=True)
            cur = self._items[key] = (buf, host)
        return cur[1]

    @property
    def pinned_bytes(self) -> int:
        """Bytes of pinned host memory this lease holds (:meth:`pinned`): page-locked for as long as the lease lives,
        idle ones included (``max_idle_leases``)."""
        return sum(item[1].nbytes for key, item in self._items.items() if key[0] == "pinned")

    def host_scratch(self, name: str, dtype: Any, n: int) -> np.ndarray:
        """Ordinary host memory of at least ``n`` elements of ``dtype``, reused and grown as needed."""
        dt = np.dtype(dtype)
        key = ("scratch", name, dt.str)
        cur = self._items.get(key)
        if cur is None or cur.shape[0] < n:
            cur = self._items[key] = np.empty(max(int(n), 1), dtype=dt)
        return cur

    @property
    def device_name(self) -> str:
        """The device's name."""
        return self.device.name.strip()

    def supports(self, dtype: Any) -> bool:
        """Whether the device can compute on ``dtype`` (float64 needs cl_khr_fp64)."""
        return device_supports(self.device, dtype)

    def require_device(self) -> None:
        """Nothing to check: a lease always has a device (for code that takes a runtime or a lease)."""

    def program(self, name: str, defines: dict[str, Any] | None = None, options: tuple[str, ...] = ()) -> Any:
        """:meth:`Runtime.program` for this lease's context and :attr:`queue_slot`."""
        return self.build(kernel_source(name, defines), options)

    def build(self, source: str, options: tuple[str, ...] | list[str] = ()) -> Any:
        """:meth:`Runtime.build` for this lease's context and :attr:`queue_slot`."""
        return self.runtime.build(source, options, lease=self)

    def discard(self) -> None:
        """Drop the lease's objects (queues finished where they still answer)."""
        _finish((self.queue, *self._queues.values()), "a discarded lease's queue")
        self._items.clear()
        self._queues.clear()
        self._slot.give()


def _mark_worker(local: threading.local) -> None:
    """A :class:`WorkerPool` worker's initializer: the thread is one of the pool's."""
    local.worker = True


class WorkerPool(concurrent.futures.ThreadPoolExecutor):
    """The runtime's CPU thread pool: a ``ThreadPoolExecutor`` whose workers run what they submit themselves.

    A task that submits more tasks to its own pool and waits for them (a
    workload called from a pool task) would wait forever once every worker
    does so; here a task submitted from one of this pool's workers runs at
    once on that worker, and its future is returned done.

    Parameters
    ----------
    threads : int
        Number of worker threads (>= 1), named ``hpu-cpu_0``, ``hpu-cpu_1``, ...
    """

    def __init__(self, threads: int):
        self._local = threading.local()
        # Not a bound method: each worker keeps its initializer for life, and one holding the pool would keep it
        # from being collected, so that the workers of a runtime dropped without close() never exited
        super().__init__(max_workers=threads, thread_name_prefix="hpu-cpu", initializer=_mark_worker,
                         initargs=(self._local,))

    def in_worker(self) -> bool:
        """Whether the calling thread is one of this pool's workers (or acts as one, :meth:`acting_as_worker`)."""
        return getattr(self._local, "worker", False)

    @contextlib.contextmanager
    def acting_as_worker(self) -> Iterator[None]:
        """Within the block, the calling thread's submissions run on it, as a worker's do (for a helper thread
        of a call made from a worker: the workers it would queue behind may all be waiting for it)."""
        before = self.in_worker()
        self._local.worker = True
        try:
            yield
        finally:
            self._local.worker = before

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """As ``ThreadPoolExecutor.submit``; from one of this pool's workers, ``fn`` runs now, on the caller."""
        if not self.in_worker():
            return super().submit(fn, *args, **kwargs)
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # delivered through the future, as the pool would
            future.set_exception(e)
        return future


class Runtime:
    """Everything a hybrid run needs: device, context, queues, programs, thread pool and profile.

    Parameters
    ----------
    device : None, str or pyopencl.Device
        Which OpenCL device to use; see :func:`select_device`.  ``"none"``
        gives CPU-only mode.
    profile : Profile, str or path-like, optional
        The HPU profile used to choose splits.  A :class:`Profile`, a path to
        a JSON profile, or the name of a shipped profile (``"hpu1"``).
        Default: this device's calibrated profile from
        :func:`default_profile_path` if it exists, else rough defaults under
        which the fast-mode sorts run on the CPU alone (see
        :attr:`calibrated`; one logged line says so).  A file (given or
        cached) calibrated on another device or host, or with another
        number of CPU threads, is used with a logged warning naming what
        differs; a shipped profile given by name, of its machine by design,
        without one.
    threads : int, optional
        Size of the CPU thread pool (default ``os.cpu_count()``), 1 to
        :data:`MAX_THREADS`.
    profiling : bool
        Create command queues with profiling enabled (event timings).
    host_pool_bytes : int, optional
        Most bytes of recycled result memory (:class:`hpu.core.hostmem.HostArrayPool`;
        pinned when a device is in use).  Default: a quarter of physical
        memory, at most 4 GiB; 0 turns the pool off.
    max_idle_leases : int
        Most idle :class:`DeviceLease` objects (queues and per-call buffers)
        kept for reuse (default 4); more concurrent calls make more and drop
        the extra ones when they finish.
    devices : "all" or sequence, optional
        Several devices in one HPU (instead of ``device``): ``"all"`` (every
        GPU and accelerator; the default device when there is none) or a
        sequence of :func:`select_device` forms.  The first is this
        runtime's device; each further one gets a peer runtime of its own
        (:attr:`peers`: context, leases, profile from its own calibration,
        :func:`default_profile_path`; this runtime's thread pool), and key-range
        and exchange sorts (:func:`hpu.hybrid_mergesort` ``strategy="keyrange"``
        or ``"exchange"``) give every unit a share.  Devices of one platform
        share one context, so that pinned host memory is pinned for all of
        them (each keeps its own queues and programs).  The same device may
        be named twice (two runtimes on one device; tests use it on PoCL).
    device_memory_limit : int, optional
        Most bytes of device memory a call may use on each device (default:
        80% of the device's global memory).  Sorts larger than that are
        sorted on the device in pieces by key range; tests use a few MiB.
    context : pyopencl.Context, optional
        An existing context that holds ``device``, to share with other
        runtimes (what the peers of ``devices`` do); default: a new one.
        A context rebuilt after a device failure is the runtime's own.

    Raises
    ------
    ValueError
        Unknown (or empty) device, ``threads`` or ``device_memory_limit``
        not an integer >= 1 (a bool, float or string included),
        ``host_pool_bytes`` or ``max_idle_leases`` not an integer >= 0,
        ``threads`` above :data:`MAX_THREADS`, both
        ``device`` and ``devices``, an empty ``devices``, a ``context``
        without the device, or an empty ``profile`` string.
    TypeError
        ``profile`` neither a Profile, a path nor a name; ``context`` not a
        ``pyopencl.Context``.
    ProfileError
        The profile path is missing or corrupt.

    Notes
    -----
    **Threads.**  One runtime may be shared by any number of threads: each
    device share borrows a :class:`DeviceLease` (its own command queues and
    buffers), compiled programs and long-lived objects sit in locked caches,
    and result memory comes from a thread-safe pool.  A call made from one
    of the runtime's own pool workers (a task that sorts, say) runs its pool
    work on that worker (:class:`WorkerPool`).  :meth:`close` may be
    called while calls run: new calls raise :class:`RuntimeClosedError`, and
    it returns when the running ones have finished.

    **Device failures.**  When a device share fails with an OpenCL error,
    that call finishes on the CPU (or raises, per its ``on_device_error``);
    the runtime then rebuilds its context before the next device call, and
    if that fails runs every later call on the CPU, with one logged warning.

    **Processes.**  A runtime belongs to the process that made it: a forked
    child gets :class:`RuntimeClosedError` (the default runtime is made anew,
    but an OpenCL driver need not work in a child forked after the parent
    used it: PoCL's copies hang there; start processes that use a device
    with ``multiprocessing``'s ``"spawn"`` method).

    Use as a context manager (``with hpu.Runtime() as rt: ...``) or call
    :meth:`close`.  Calls without ``runtime=`` share :func:`default_runtime`.
    """

    def __init__(self, device: Any = None, *, profile: Profile | str | os.PathLike | None = None,
                 threads: int | None = None, profiling: bool = True, host_pool_bytes: int | None = None,
                 max_idle_leases: int = 4, devices: str | Sequence[Any] | None = None,
                 device_memory_limit: int | None = None, context: Any = None):
        threads = (os.cpu_count() or 1) if threads is None else check_int("threads", threads, 1)
        if threads > MAX_THREADS:  # the pool would start them as work comes, and a parallel sort fans out to all
            raise ValueError(f"threads must be at most {MAX_THREADS} (the CPU thread pool's size), got {threads}")
        if device_memory_limit is not None:
            device_memory_limit = check_int("device_memory_limit", device_memory_limit, 1, what=" (bytes)")
        self.device_memory_limit = device_memory_limit
        self.threads = threads
        if devices is not None and device is not None:
            raise ValueError("give either device or devices, not both")
        found = select_devices(devices) if devices is not None else [select_device(device)]
        self.device = found[0]
        self._profiling = profiling
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._active: dict[int, int] = {}  # thread id -> nesting depth of calls running
        self._closed = False
        self._released = False  # close() has let everything go (it refuses new calls first, then waits)
        self._release_at_end = False  # close() from a pool task: the last running call to end lets everything go
        self._owns_pool = True  # peers share their runtime's pool
        self._idle: list[DeviceLease] = []
        self._max_idle = check_int("max_idle_leases", max_idle_leases, 0)
        self._generation = 0
        self._failed: BaseException | None = None
        self._lost = False  # a failed rebuild left it CPU-only (device_lost)
        self._programs: dict[tuple, Any] = {}
        self._build_lock = threading.Lock()
        if host_pool_bytes is None:
            host_pool_bytes = min(4 << 30, _physical_memory() // 4)
        self._host_pool_bytes = check_int("host_pool_bytes", host_pool_bytes, 0, what=" (bytes)")
        if context is not None and (cl is None or not isinstance(context, cl.Context)):
            raise TypeError(f"context must be a pyopencl.Context, got {type(context).__name__}")
        if context is None and len(found) > 1 and len({d.platform.int_ptr for d in found}) == 1:
            context = cl.Context(list(dict.fromkeys(found)))  # one context: pinned memory is pinned for every device
        if context is not None and self.device not in context.devices:
            raise ValueError(f"context does not hold the device {self.device_name!r}")
        self._open_context(context)
        self._slot = _SlotHold(self, self.device, self.queue)
        self.profile = self._resolve_profile(profile)
        self.pool = WorkerPool(threads)
        #: Long-lived objects shared by calls (see :class:`ResourceCache`); cleared by :meth:`close`.
        self.resources = ResourceCache()
        #: Runtimes of the further devices of ``devices``; they share this one's thread pool (one HPU, one CPU).
        self.peers: tuple[Runtime, ...] = tuple(
            Runtime(d, threads=threads, profiling=profiling, host_pool_bytes=0, max_idle_leases=max_idle_leases,
                    device_memory_limit=device_memory_limit, context=context) for d in found[1:])
        for peer in self.peers:
            peer.pool.shutdown()  # never used: no thread was started
            peer.pool, peer._owns_pool = self.pool, False

    def _open_context(self, context: Any = None) -> None:
        self.context = self.queue = None
        if self.device is not None:
            self.context = context if context is not None else cl.Context([self.device])
            props = cl.command_queue_properties.PROFILING_ENABLE if self._profiling else 0
            self.queue = cl.CommandQueue(self.context, self.device, properties=props)
        #: Recycled memory for results (pinned with a device), see :mod:`hpu.core.hostmem`.
        self.host_pool = HostArrayPool(self.context, self.queue, self._host_pool_bytes)

    # -- set-up --------------------------------------------------------------
    def _resolve_profile(self, profile: Any) -> Profile:
        if isinstance(profile, Profile):
            return profile
        if profile is not None:
            if not isinstance(profile, (str, os.PathLike)):
                raise TypeError(f"profile must be an hpu.Profile, a path or a shipped name, got {profile!r}")
            if not str(profile).strip():
                raise ValueError("profile is empty: give an hpu.Profile, a path or a shipped name")
            p = Path(profile)
            if p.suffix == ".json" or p.exists():
                loaded = Profile.load(p)
                self._warn_if_calibrated_elsewhere(loaded, f"the profile {p}")
                return loaded
            if p.suffix or len(p.parts) > 1:  # a path, not a shipped name
                raise ProfileError(f"profile file not found: {profile}")
            return reference_profile(str(profile))
        path = default_profile_path(self.device)
        if path.exists():
            try:
                cached = Profile.load(path)
            except ProfileError as e:
                log.warning("ignoring the cached profile: %s", e)
            else:
                self._warn_if_calibrated_elsewhere(cached, f"the cached profile of {self.device_name}")
                return cached
        log.info("no calibrated profile for %s: the sorts run on the CPU alone until `python -m hpu.calibrate` "
                 "has run", self.device_name)
        return uncalibrated_profile(self.device, self.threads)

    def _warn_if_calibrated_elsewhere(self, profile: Profile, what: str) -> None:
        """Log a warning where ``profile`` (a file: ``what`` names it) was calibrated on another device, another
        host or with another number of CPU threads than this runtime has: the model's costs, and so its splits, are
        those of that machine.  Fields the profile does not record are not compared."""
        here = {"device": self.device_name, "host": host_description(), "threads": self.threads}
        there = {"device": profile.device, "host": profile.host, "threads": profile.provenance.get("threads")}
        if not isinstance(there["threads"], int):
            there["threads"] = None
        differ = [k for k in here if there[k] not in (None, "") and there[k] != here[k]]
        if differ:  # advice that replaces no profile: the cached one may serve this device's other runtimes
            log.warning("%s was calibrated with %s, this runtime has %s: its costs may be off (calibrate one for "
                        "it with python -m hpu.calibrate --device %r --threads %d --out FILE, then pass "
                        "profile=FILE)", what, ", ".join(_origin(k, there[k]) for k in differ),
                        ", ".join(_origin(k, here[k]) for k in differ),
                        self.device_name if self.device is not None else "none", self.threads)

    # -- properties ------------------------------------------------------------
    @property
    def queue_slot(self) -> int | None:
        """On a PoCL CPU device before 7.0 (:func:`pocl_shares_kernels_across_queues`), the number that sets the
        programs of this runtime's :attr:`queue` apart from those of every other live queue of the process (each
        lease has its own): None elsewhere.  Given back by :meth:`close`."""
        return self._slot.slot

    @property
    def units(self) -> tuple[Runtime, ...]:
        """The device runtimes of this HPU: itself (when it has a device) and its :attr:`peers`."""
        return ((self,) if self.device is not None else ()) + tuple(p for p in self.peers if p.has_device)

    @property
    def device_memory_bytes(self) -> int:
        """Bytes of device memory one call may use: ``device_memory_limit``, at most 80% of global memory (0: none)."""
        device = self.device  # read once: another thread's failed rebuild may set it to None meanwhile
        if device is None:
            return 0
        usable = int(0.8 * device.global_mem_size)
        return usable if self.device_memory_limit is None else min(usable, self.device_memory_limit)

    @property
    def calibrated(self) -> bool:
        """False while the profile is :func:`uncalibrated_profile`'s guesses (the fast-mode sorts then use the CPU
        alone)."""
        return self.profile.provenance.get("source") != UNCALIBRATED

    @property
    def has_device(self) -> bool:
        """True when an OpenCL device is in use (False: CPU-only mode, asked for or after a device was lost)."""
        return self.device is not None

    @property
    def device_lost(self) -> bool:
        """True once the device failed and its context could not be rebuilt: CPU-only from then on, though it had a
        device (a call that planned for the device meanwhile, on another thread, falls back or raises
        :class:`DeviceFailure` as its ``on_device_error`` says)."""
        return self._lost

    @property
    def device_name(self) -> str:
        """The device's name, or ``"CPU only"``."""
        return self.device.name.strip() if self.device is not None else "CPU only"

    @property
    def device_info(self) -> DeviceInfo | None:
        """:class:`DeviceInfo` of the device (None in CPU-only mode)."""
        if self.device is None:
            return None
        for idx, d in _all_devices():
            if d == self.device:
                return _describe(d, idx)
        return _describe(self.device, "?")

    @property
    def device_shares_host_cores(self) -> bool:
        """True when the OpenCL device is a CPU device (e.g. PoCL): it runs on the thread pool's cores."""
        device = self.device  # read once, as device_memory_bytes
        return device is not None and bool(device.type & cl.device_type.CPU)

    def require_device(self) -> None:
        """Raise :class:`NoDeviceError` in CPU-only mode."""
        if self.device is None:
            raise NoDeviceError("this operation needs an OpenCL device, but the runtime is CPU-only")

    def supports(self, dtype: Any) -> bool:
        """Whether the device can compute on ``dtype`` (float64 needs cl_khr_fp64; False in CPU-only mode)."""
        return device_supports(self.device, dtype)

    def empty_pinned(self, shape: int | Sequence[int], dtype: Any = np.float64) -> np.ndarray:
        """An uninitialised array in this runtime's pinned (page-locked) host memory, for inputs.

        The device's copies read pinned memory at the bus's full rate, and an
        input that lies there is not staged by hpu's sorts: the DMA engine
        reads it itself (as an earlier result that lies in the pool is read).
        Like ``cupyx.empty_pinned``; the memory comes from the runtime's
        recycled host pool (:class:`hpu.core.hostmem.HostArrayPool`) and goes
        back to it when the array and every view of it are gone.

        Parameters
        ----------
        shape : int or sequence of int
            Non-negative.
        dtype : numpy dtype
            Default float64.

        Returns
        -------
        numpy.ndarray
            C-contiguous, writeable, of ``shape`` and ``dtype``.  Ordinary
            memory where the runtime has no device that pins host memory (from
            the pool all the same), and ``numpy.empty``'s where the array is
            smaller than :data:`hpu.core.hostmem.MIN_POOLED_BYTES` (staging it
            costs little) or the pool is full or closed.

        Raises
        ------
        ValueError
            A negative dimension, or more elements than numpy can index.
        TypeError
            A dimension that is not an integer (``operator.index``, as
            ``numpy.empty``: no floats, strings or bools), or a dtype that
            holds Python objects (pinned memory is for the device's copies).
        RuntimeClosedError
            In a process forked from the one that made the runtime (its
            OpenCL objects are the parent's).

        Notes
        -----
        A sub-array dtype such as ``(np.float32, 3)`` adds its shape to the
        array's, as with ``numpy.empty``.
        """
        self._check_usable(closed=False)  # a closed runtime's pool hands out numpy's memory; a fork's would hang
        items = (shape,) if np.ndim(shape) == 0 else tuple(shape)
        if any(isinstance(d, (bool, np.bool_)) for d in items):
            raise TypeError(f"empty_pinned's shape must hold integers, got {shape!r}")
        dims = tuple(operator.index(d) for d in items)
        if any(d < 0 for d in dims):
            raise ValueError(f"negative dimensions are not allowed: {dims}")
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise TypeError(f"empty_pinned holds numbers for the device's copies, not {dt}")
        dims, dt = dims + dt.shape, dt.base  # numpy.empty's rule for sub-array dtypes
        n = math.prod(dims)  # Python ints: numpy's int64 product of (2**40, 2**40) wraps to 0
        if n > np.iinfo(np.intp).max:
            raise ValueError(f"array of shape {dims} has more elements than numpy can index")
        return self.host_pool.empty_or_new(n, dt, pinned=True).reshape(dims)

    # -- programs --------------------------------------------------------------
    def build(self, source: str, options: tuple[str, ...] | list[str] = (), *, context: Any = None,
              lease: DeviceLease | None = None) -> Any:
        """Compile OpenCL C ``source`` once per context and queue slot; later calls return the cached program
        (thread-safe).

        ``lease``: build it for that lease's queue (in its context, for its
        device, with its :attr:`DeviceLease.queue_slot`) rather than for
        :attr:`queue`; so a call that holds a lease builds for it even after
        another thread's failed rebuild left the runtime CPU-only (its device
        work runs in the lease's context, and an OpenCL error there falls
        back as any).  Where the queue has a slot (:attr:`queue_slot`), the
        build options end with ``-DHPU_QUEUE_SLOT=<slot>``.

        Raises
        ------
        NoDeviceError
            In CPU-only mode, without a lease.
        ValueError
            Both ``context`` and ``lease`` given.
        pyopencl.RuntimeError
            If the build fails (the message carries the build log).
        """
        if lease is not None:
            if context is not None:
                raise ValueError("give build a context or a lease, not both")
            ctx, slot, device = lease.context, lease.queue_slot, lease.device
        else:
            with self._cond:  # the device and context of one generation: a rebuild replaces both under this lock
                self.require_device()
                device, ctx = self.device, self.context if context is None else context
            slot = self.queue_slot
        options = (*options, *(() if slot is None else (f"-DHPU_QUEUE_SLOT={slot}",)))
        # Keyed by the context itself, which the key keeps alive: a freed context's id may be a new context's.
        key = (ctx, hashlib.sha256(source.encode()).hexdigest(), tuple(options))
        with self._build_lock:
            prg = self._programs.get(key)
            if prg is None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # pyopencl warns on non-empty build logs
                    prg = cl.Program(ctx, source).build(options=list(options), devices=[device])
                self._programs[key] = prg
        return prg

    def program(self, name: str, defines: dict[str, Any] | None = None, options: tuple[str, ...] = ()) -> Any:
        """Build ``kernels_cl/<name>.cl`` with ``#define`` lines prepended (:func:`hpu.core.kernels.kernel_source`)."""
        return self.build(kernel_source(name, defines), options)

    # -- calls, leases, failures ------------------------------------------------
    def _check_usable(self, closed: bool = True) -> None:
        """RuntimeClosedError after a fork, and (``closed``) once :meth:`close` has been called."""
        if self._pid != os.getpid():
            raise RuntimeClosedError(f"this Runtime was created in process {self._pid} and cannot be used after a "
                                     "fork; create a new one in this process (or use the default runtime)")
        if closed and self._closed:
            raise RuntimeClosedError("this Runtime is closed")

    def call(self) -> contextlib.AbstractContextManager[Runtime]:
        """Mark a call running (every public entry point does): :meth:`close` waits for it.

        A call within a running call of the same thread runs even once
        :meth:`close` has been called: it is part of the running one.

        Raises
        ------
        RuntimeClosedError
            The runtime is closed (for a new call), or was created in another process.
        """
        return self._running(helper=False)

    def acquire_lease(self) -> DeviceLease:
        """Borrow a :class:`DeviceLease` (give it back with :meth:`release_lease`).

        Rebuilds the context first if a fatal device failure was reported.

        Raises
        ------
        RuntimeClosedError
            The runtime is closed and its running calls have ended (they get
            leases while :meth:`close` waits for them).
        hpu.DeviceFailure
            No usable device (CPU-only mode, or the context could not be rebuilt).
        """
        with self._cond:
            self._check_usable(closed=False)
            if self._released:
                raise RuntimeClosedError("this Runtime is closed")
            if self._failed is not None:
                self._rebuild()
            if self.device is None:
                raise DeviceFailure("no usable OpenCL device")
            if self._idle:
                return self._idle.pop()
            # One generation's context, device and queue: another thread's rebuild may replace them once unlocked.
            state = self._generation, self.context, self.device, self.queue.properties
        return DeviceLease(self, *state)

    def release_lease(self, lease: DeviceLease, *, failure: BaseException | None = None) -> None:
        """Give a lease back: kept for reuse, or discarded after ``failure`` (then reported, see
        :meth:`report_failure`)."""
        if failure is not None:
            lease.discard()
            self.report_failure(failure, generation=lease.generation)
            return
        with self._cond:
            keep = not self._closed and lease.generation == self._generation and len(self._idle) < self._max_idle
            if keep:
                self._idle.append(lease)
        if not keep:
            lease.discard()

    def report_failure(self, failure: BaseException, *, generation: int | None = None) -> None:
        """Note a device failure; a fatal one (``failure.fatal``) makes the next device call rebuild the context.

        ``generation``: the lease's context generation; a failure of an older
        context (already rebuilt) is ignored.
        """
        if not getattr(failure, "fatal", False):
            return
        with self._cond:
            if generation is None or generation == self._generation:
                self._failed = failure

    def _rebuild(self) -> None:
        """New context, queue, programs and host pool after a fatal failure (lock held); CPU-only if that fails."""
        failure, self._failed = self._failed, None
        for lease in self._idle:
            lease.discard()
        self._idle.clear()
        old_pool = self.host_pool
        try:
            self._open_context()
            self._slot.add(self.queue)
            log.warning("device failed (%s); rebuilt the OpenCL context", failure)
        except Exception as e:
            log.warning("device failed (%s) and its context could not be rebuilt (%s); running on the CPU from now on",
                        failure, e)
            self.device = None
            self._lost = True
            self._open_context()
        old_pool.close()
        with self._build_lock:
            self._programs.clear()
        self.resources.clear()
        self._generation += 1

    # -- life cycle ------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closed

    def helping(self) -> contextlib.AbstractContextManager[Runtime]:
        """Mark this thread a helper of a running call: a thread that the call started and waits for (a task of
        an executor of its own), whose calls are part of it, as the call's nested calls on its own thread are.
        They then run even once :meth:`close` has been called, and :meth:`close` waits for them.

        Raises
        ------
        RuntimeClosedError
            The runtime is closed and no call is running, or it was created in another process.
        """
        return self._running(helper=True)

    @contextlib.contextmanager
    def _running(self, helper: bool) -> Iterator[Runtime]:
        """:meth:`call`'s (``helper`` False) or :meth:`helping`'s block: once closed, a thread is let in only
        inside a running call of its own, or as a helper while any call runs.  The last to end after a
        :meth:`close` from a pool task releases everything."""
        me = threading.get_ident()
        with self._cond:
            self._check_usable(closed=not self._active if helper else me not in self._active)
            self._active[me] = self._active.get(me, 0) + 1
        try:
            yield self
        finally:
            self._leave(me)

    def _leave(self, me: int) -> None:
        with self._cond:
            self._active[me] -= 1
            if not self._active[me]:
                del self._active[me]
            last = self._release_at_end and not self._active
            if last:
                self._release_at_end = False
                idle, self._idle = self._idle, []
            self._cond.notify_all()
        if last:
            self._let_go(idle)

    def close(self) -> None:
        """Refuse new calls, wait for running ones, then release everything (idempotent, thread-safe).

        A second ``close`` returns once the first has released everything
        (at once from a thread inside a running call, which the first waits
        for).  Closed from one of its own pool's tasks, the runtime leaves the
        pool's threads to end as their tasks do, and ``close`` does not wait
        for the running calls of other threads (they may wait for tasks
        queued behind it): it returns at once, and the last of them to end
        releases everything.  Called inside a running call of its own thread
        (within :meth:`call`), it waits for the other threads' calls and
        returns; that call's end releases everything.
        """
        me = threading.get_ident()
        with self._cond:
            if self._closed:
                if me not in self._active and self._pid == os.getpid():
                    self._cond.wait_for(lambda: self._released)
                return
            self._closed = True
            if self._pid == os.getpid():
                if self.pool.in_worker() and any(t != me for t in self._active):
                    self._release_at_end = True
                    return
                self._cond.wait_for(lambda: not any(t != me for t in self._active))
                if me in self._active:  # inside a call of its own, whose nested calls still run: it releases
                    self._release_at_end = True
                    return
            idle, self._idle = self._idle, []
        if self._pid != os.getpid():
            return  # a forked child owns none of the parent's threads or device objects
        self._let_go(idle)

    def _let_go(self, idle: list[DeviceLease]) -> None:
        """Release everything (:meth:`_release_all`), then let the second ``close`` calls waiting for it return."""
        try:
            self._release_all(idle)
        finally:
            with self._cond:
                self._released = True
                self._cond.notify_all()

    def _release_all(self, idle: list[DeviceLease]) -> None:
        """close()'s second half: the pool's threads, the leases, queue, caches, host pool and peers."""
        if self._owns_pool:
            self.pool.shutdown(wait=not self.pool.in_worker())  # a worker cannot wait for itself
        for lease in idle:
            lease.discard()
        _finish([self.queue] if self.queue is not None else [], "the runtime's queue on close")
        self.resources.clear()
        self.host_pool.close()
        with self._build_lock:
            self._programs.clear()
        self._slot.give()
        for peer in self.peers:
            peer.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        peers = f", peers={[p.device_name for p in self.peers]!r}" if self.peers else ""
        return (f"Runtime(device={self.device_name!r}{peers}, threads={self.threads}, profile={self.profile.name!r}"
                f"{state})")


# ---------------------------------------------------------------------------
# The default runtime
# ---------------------------------------------------------------------------

_default: Runtime | None = None
_default_lock = threading.Lock()
#: The open :func:`using_runtime` blocks of every thread, oldest first: ``[the default to restore]`` each.
_using: list[list] = []
#: The runtimes :func:`default_runtime` made (hpu's to close, unlike those the caller gave).
_made: weakref.WeakSet = weakref.WeakSet()


def default_runtime() -> Runtime:
    """The process-wide runtime that calls without ``runtime=`` use.

    Created on first use (thread-safe), on the default device
    (:func:`select_device`, which reads ``PYOPENCL_CTX``) with its
    calibrated profile, and reused after; made anew after a fork or once
    closed.  Replace it with :func:`set_default_runtime` or
    :func:`using_runtime`.

    Returns
    -------
    Runtime
        The current default runtime (open, of this process).

    Raises
    ------
    ValueError
        ``PYOPENCL_CTX`` is set but names no available device (the message
        quotes it and lists the devices).
    """
    global _default
    with _default_lock:
        if _default is None or _default.closed or _default._pid != os.getpid():
            _default = Runtime()
            _made.add(_default)
        return _default


def set_default_runtime(runtime: Runtime | None) -> Runtime | None:
    """Make ``runtime`` the default (None: a fresh one is made on next use); return the previous default.

    The previous default is not closed.

    Raises
    ------
    TypeError
        ``runtime`` is neither a Runtime nor None.
    """
    global _default
    if runtime is not None and not isinstance(runtime, Runtime):
        raise TypeError(f"runtime must be an hpu.Runtime or None, got {type(runtime).__name__}")
    with _default_lock:
        prev, _default = _default, runtime
    return prev


@contextlib.contextmanager
def using_runtime(runtime: Runtime) -> Iterator[Runtime]:
    """``with hpu.using_runtime(rt): ...``: ``rt`` is the default runtime inside the block (process-wide).

    Blocks nest, and blocks of several threads may overlap: when a block
    ends, the default becomes what it was when the block began, unless a
    block begun later is still open (its runtime stays the default, and the
    earlier default comes back when that one ends).  ``rt`` is not closed;
    a default that :func:`default_runtime` made inside the block (``rt``
    having been closed) is closed once the block's end leaves it the
    default of no block.

    Raises
    ------
    TypeError
        ``runtime`` is not a :class:`Runtime` (None included).
    """
    global _default
    if not isinstance(runtime, Runtime):
        raise TypeError(f"runtime must be an hpu.Runtime, got {type(runtime).__name__}")
    with _default_lock:
        entry = [_default]
        _using.append(entry)
        _default = runtime
    try:
        yield runtime
    finally:
        with _default_lock:
            k = next(i for i, e in enumerate(_using) if e is entry)
            del _using[k]
            if k < len(_using):  # a later block is still open: it restores our predecessor when it ends
                dropped, _using[k][0] = _using[k][0], entry[0]
            else:
                dropped, _default = _default, entry[0]
            kept = [runtime, _default, *(e[0] for e in _using)]  # the caller's, and the defaults still to come
            mine = dropped in _made and dropped._pid == os.getpid()
            orphan = dropped if mine and all(r is not dropped for r in kept) else None
        if orphan is not None:  # outside the lock: close() waits for the calls still running on it
            orphan.close()


def resolve_runtime(runtime: Runtime | None) -> Runtime:
    """``runtime``, or :func:`default_runtime` when it is None.

    Raises
    ------
    TypeError
        ``runtime`` is not a Runtime.
    """
    return default_runtime() if check_runtime(runtime) is None else runtime


def check_runtime(runtime: Runtime | None) -> Runtime | None:
    """``runtime`` if it is None or a :class:`Runtime` (without making the default one).

    Raises
    ------
    TypeError
        ``runtime`` is anything else.
    """
    if runtime is not None and not isinstance(runtime, Runtime):
        raise TypeError(f"runtime must be an hpu.Runtime, got {type(runtime).__name__}")
    return runtime


@atexit.register
def _close_default() -> None:
    if _default is not None and _default._pid == os.getpid():
        _default.close()
