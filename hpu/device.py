"""OpenCL device layer: device discovery and choice, and the :class:`Runtime`.

Device choice (first that applies):

1. the ``device`` argument (see :func:`select_device` for the forms it takes);
2. the ``PYOPENCL_CTX`` environment variable (``"P:D"`` indices, or a name
   substring, as pyopencl understands it);
3. a GPU, if an OpenCL platform offers one;
4. a CPU OpenCL device (e.g. PoCL);
5. no device: CPU-only mode, with a logged warning.

Everything here is explicit: a :class:`Runtime` owns its context, command
queue, compiled programs and thread pool; there is no module-level mutable
state.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import logging
import os
import re
import threading
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import platformdirs

from .hostmem import HostArrayPool
from .model import Profile, ProfileError

try:  # pyopencl is a dependency, but a broken ICD setup must not make hpu unusable
    import pyopencl as cl
except Exception as _e:  # pragma: no cover - exercised only without pyopencl
    cl = None
    _CL_IMPORT_ERROR: Exception | None = _e
else:
    _CL_IMPORT_ERROR = None

log = logging.getLogger("hpu")

__all__ = ["DeviceInfo", "Runtime", "list_devices", "select_device", "default_profile_path", "NoDeviceError"]


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


def _describe(dev: Any, index: str) -> DeviceInfo:
    ext = dev.extensions or ""
    return DeviceInfo(
        index=index,
        platform=dev.platform.name.strip(),
        name=dev.name.strip(),
        type=cl.device_type.to_string(dev.type),
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
    out = []
    for pi, plat in enumerate(_platforms()):
        try:
            devs = plat.get_devices()
        except Exception:
            continue
        for di, dev in enumerate(devs):
            out.append(_describe(dev, f"{pi}:{di}"))
    return out


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
        ``None``: ``PYOPENCL_CTX`` if set, else a GPU, else a CPU OpenCL
        device, else CPU-only mode.  A string: ``"gpu"`` or ``"cpu"`` (first
        device of that type), ``"P:D"`` or ``"P"`` (platform and device
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
    ValueError
        If the string names no available device (the message lists them).
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


def device_key(dev: Any) -> str:
    """A file-name-safe key for a device (or ``"cpu-only"``), used to name cached profiles."""
    if dev is None:
        return "cpu-only"
    raw = f"{dev.platform.name}-{dev.name}"
    return re.sub(r"[^A-Za-z0-9]+", "-", raw).strip("-").lower()[:80]


def default_profile_path(dev: Any) -> Path:
    """Where ``python -m hpu.calibrate`` saves a device's profile by default.

    ``$HPU_PROFILE_DIR/<key>.json`` if that variable is set, else the user
    cache directory (``platformdirs.user_cache_dir("hpu")/profiles``).
    """
    base = os.environ.get("HPU_PROFILE_DIR") or os.path.join(platformdirs.user_cache_dir("hpu"), "profiles")
    return Path(base) / f"{device_key(dev)}.json"


def _physical_memory() -> int:
    """Bytes of physical memory (0 where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 0


def _uncalibrated_profile(dev: Any, threads: int) -> Profile:
    """Rough guesses used until ``python -m hpu.calibrate`` has run for this device."""
    if dev is None:
        return Profile(p=threads, g=1, gamma=1.0, name="uncalibrated (CPU only)", provenance={"source": "default"})
    cu = int(dev.max_compute_units)
    is_gpu = bool(dev.type & cl.device_type.GPU)
    return Profile(
        p=threads,
        g=cu * (256 if is_gpu else 8),
        gamma=1 / 10 if is_gpu else 1 / 2,
        cpu_op_seconds=5e-9,
        h2d_latency=2e-5,
        d2h_latency=2e-5,
        h2d_seconds_per_byte=1 / 8e9,
        d2h_seconds_per_byte=1 / 8e9,
        launch_seconds=1e-5,
        name="uncalibrated",
        device=dev.name.strip(),
        provenance={"source": "default guesses; run python -m hpu.calibrate"},
    )


class Runtime:
    """Everything a hybrid run needs: device, context, queue, programs, thread pool and profile.

    Parameters
    ----------
    device : None, str or pyopencl.Device
        Which OpenCL device to use; see :func:`select_device`.  ``"none"``
        gives CPU-only mode.
    profile : Profile, str or path-like, optional
        The HPU profile used to choose splits.  A :class:`Profile`, a path to
        a JSON profile, or the name of a shipped profile (``"hpu1"``).
        Default: this device's calibrated profile from
        :func:`default_profile_path` if it exists, else rough defaults (with
        a logged warning).
    threads : int, optional
        Size of the CPU thread pool (default ``os.cpu_count()``).
    profiling : bool
        Create the command queue with profiling enabled (event timings).
    host_pool_bytes : int, optional
        Most bytes of recycled result memory (:class:`hpu.hostmem.HostArrayPool`;
        pinned when a device is in use).  Default: a quarter of physical
        memory, at most 4 GiB; 0 turns the pool off.

    Raises
    ------
    ValueError
        Unknown device, or ``threads < 1``.
    ProfileError
        The profile path is missing or corrupt.

    Notes
    -----
    Use as a context manager (``with hpu.Runtime() as rt: ...``) or call
    :meth:`close`.  Programs are compiled once per runtime and cached.
    """

    def __init__(self, device: Any = None, *, profile: Profile | str | os.PathLike | None = None,
                 threads: int | None = None, profiling: bool = True, host_pool_bytes: int | None = None):
        threads = (os.cpu_count() or 1) if threads is None else int(threads)
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = threads
        self.device = select_device(device)
        self.context = None
        self.queue = None
        if self.device is not None:
            self.context = cl.Context([self.device])
            props = cl.command_queue_properties.PROFILING_ENABLE if profiling else 0
            self.queue = cl.CommandQueue(self.context, properties=props)
        self.profile = self._resolve_profile(profile)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="hpu-cpu")
        self._programs: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._closed = False
        #: Reusable per-runtime resources (pinned staging buffers, device sorters), keyed by
        #: their users; released by :meth:`close`.
        self.resources: dict[Any, Any] = {}
        if host_pool_bytes is None:
            host_pool_bytes = min(4 << 30, _physical_memory() // 4)
        #: Recycled memory for results (pinned with a device), see :mod:`hpu.hostmem`.
        self.host_pool = HostArrayPool(self.context, self.queue, host_pool_bytes)

    # -- set-up --------------------------------------------------------------
    def _resolve_profile(self, profile: Any) -> Profile:
        if isinstance(profile, Profile):
            return profile
        if profile is not None:
            p = Path(profile)
            if p.suffix == ".json" or p.exists():
                return Profile.load(p)
            from .model import reference_profile

            return reference_profile(str(profile))
        path = default_profile_path(self.device)
        if path.exists():
            try:
                return Profile.load(path)
            except ProfileError as e:
                log.warning("ignoring the cached profile: %s", e)
        log.warning("no calibrated profile for %s; using rough defaults (run: python -m hpu.calibrate)",
                    self.device_name)
        return _uncalibrated_profile(self.device, self.threads)

    # -- properties ------------------------------------------------------------
    @property
    def has_device(self) -> bool:
        """True when an OpenCL device is in use (False: CPU-only mode)."""
        return self.device is not None

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
        return self.device is not None and bool(self.device.type & cl.device_type.CPU)

    def require_device(self) -> None:
        """Raise :class:`NoDeviceError` in CPU-only mode."""
        if self.device is None:
            raise NoDeviceError("this operation needs an OpenCL device, but the runtime is CPU-only")

    def supports(self, dtype: Any) -> bool:
        """Whether the device can compute on ``dtype`` (float64 needs cl_khr_fp64)."""
        if self.device is None:
            return False
        if np.dtype(dtype) == np.float64:
            return "cl_khr_fp64" in (self.device.extensions or "")
        return True

    # -- programs --------------------------------------------------------------
    def kernel_source(self, name: str) -> str:
        """Text of ``kernels_cl/<name>.cl`` (shipped inside the package)."""
        res = resources.files("hpu.kernels_cl").joinpath(f"{name}.cl")
        if not res.is_file():
            raise FileNotFoundError(f"no OpenCL source named {name!r} in hpu/kernels_cl")
        return res.read_text()

    def build(self, source: str, options: tuple[str, ...] | list[str] = ()) -> Any:
        """Compile OpenCL C ``source`` once per runtime; later calls return the cached program.

        Raises
        ------
        NoDeviceError
            In CPU-only mode.
        pyopencl.RuntimeError
            If the build fails (the message carries the build log).
        """
        self.require_device()
        key = (hashlib.sha256(source.encode()).hexdigest(), tuple(options))
        with self._lock:
            prg = self._programs.get(key)
            if prg is None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # pyopencl warns on non-empty build logs
                    prg = cl.Program(self.context, source).build(options=list(options))
                self._programs[key] = prg
        return prg

    def program(self, name: str, defines: dict[str, Any] | None = None, options: tuple[str, ...] = ()) -> Any:
        """Build ``kernels_cl/<name>.cl`` with ``#define`` lines prepended; cached like :meth:`build`."""
        head = "".join(f"#define {k} {v}\n" for k, v in sorted((defines or {}).items()))
        return self.build(head + self.kernel_source(name), options)

    # -- life cycle ------------------------------------------------------------
    def close(self) -> None:
        """Finish queued device work and shut the thread pool down (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.pool.shutdown(wait=True)
        if self.queue is not None:
            self.queue.finish()
        self.resources.clear()
        self.host_pool.close()
        self._programs.clear()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Runtime(device={self.device_name!r}, threads={self.threads}, profile={self.profile.name!r})"
