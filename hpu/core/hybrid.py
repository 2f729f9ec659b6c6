"""The one hybrid driver: a CPU share and a device share run at once, with fallback.

The sorts and :mod:`hpu.dc` run their shares through :func:`run_units` (several
devices) or :func:`run_hybrid` (one device, the usual case; tabu search's
evaluator, which keeps its lease across iterations, borrows it itself): the device
share on a feeder thread (which mostly waits on OpenCL events) with a
:class:`~hpu.core.runtime.DeviceLease` of its own (command queues and cached
buffers no other call touches), the CPU share on the calling thread (which
fans out into the runtime's thread pool; numpy releases the GIL).  Both
overlap in time, as in the advanced split of López-Ortiz et al. 2014,
section 5.2 (algorithm 8).

When the device share fails (an OpenCL error, a lost or faulted context, too
little device memory), no partly computed data escapes: the workload's
``redo`` callable computes the device share on the CPU from the input (or
:class:`DeviceFailure` is raised, per ``on_device_error``), and the runtime
is told, so that a faulted context is rebuilt before the next call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import numbers
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from .util import check_int

try:
    import pyopencl as cl
except Exception:  # pragma: no cover - CPU-only installs
    cl = None

log = logging.getLogger("hpu")

__all__ = ["ON_DEVICE_ERROR", "STRATEGIES", "DeviceFailure", "HybridResult", "as_device_failure",
           "check_on_device_error", "check_split", "check_strategy", "run_hybrid", "run_units", "UnitsResult"]

#: Values of every entry point's ``on_device_error`` argument.
ON_DEVICE_ERROR = ("fallback", "raise")

#: The one strategy vocabulary: every workload accepts the names that apply to it (:func:`check_strategy`).
STRATEGIES = {
    "auto": "the split the model predicts fastest, among every strategy the workload has",
    "cpu": "the CPU alone (its thread pool)",
    "gpu": "the device alone",
    "basic": "the paper's basic division (López-Ortiz et al. 2014, section 5.1): device below the transfer level",
    "advanced": "the paper's advanced division (section 5.2): a CPU share alpha beside the device's, both bottom-up",
    "hybrid": "a CPU share and a device share of each step at once, sized by the model",
    "keyrange": "a key range per unit (the CPU and every device), each sorted where it lands: no final merge",
}

C = TypeVar("C")
D = TypeVar("D")


class DeviceFailure(RuntimeError):
    """The device share of a run failed (build error, out of resources, lost or faulted device).

    ``fatal`` is True when the OpenCL context may be unusable afterwards (an
    OpenCL error from the driver): the runtime then rebuilds its context
    before the next device call.  A share refused before it started (too
    large for the device's memory) is not fatal.  ``secondary`` is True for
    a share that stopped because another share of the same call failed
    (its device is fine): :func:`run_units` reports the other failure.
    """

    def __init__(self, message: str, *, fatal: bool = False, secondary: bool = False):
        super().__init__(message)
        self.fatal = fatal
        self.secondary = secondary


#: OpenCL status codes of a program the compiler refused (the context stays usable).
_COMPILER_REFUSED = frozenset() if cl is None else frozenset(
    getattr(cl.status_code, name) for name in ("BUILD_PROGRAM_FAILURE", "COMPILE_PROGRAM_FAILURE",
                                               "LINK_PROGRAM_FAILURE", "INVALID_BUILD_OPTIONS")
    if hasattr(cl.status_code, name))


def as_device_failure(exc: BaseException) -> DeviceFailure | None:
    """``exc`` as a :class:`DeviceFailure`; None for errors that are not the device's.

    OpenCL errors are fatal (the context may be dead: ``LogicError``,
    ``RuntimeError``, e.g. NVIDIA's ``-9999`` after a kernel fault), except
    ``pyopencl.MemoryError`` (an allocation the device refused) and a
    program the compiler refused (``BUILD_PROGRAM_FAILURE``, e.g. a
    :class:`hpu.DCSpec` snippet that is not OpenCL C: the context is
    fine, and rebuilding it would throw away every compiled program); a host
    ``MemoryError`` (e.g. while staging) is a non-fatal failure.
    """
    if isinstance(exc, DeviceFailure):
        return exc
    if cl is not None and isinstance(exc, cl.Error):
        refused = isinstance(exc, cl.MemoryError) or getattr(exc, "code", None) in _COMPILER_REFUSED
        return DeviceFailure(f"{type(exc).__name__}: {exc}", fatal=not refused)
    if isinstance(exc, MemoryError):
        return DeviceFailure(f"MemoryError: {exc}")
    return None


def check_strategy(value: str, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed`` (names of :data:`STRATEGIES`).

    Raises
    ------
    ValueError
        Naming the unknown strategy and the ones this workload accepts.
    """
    if value not in allowed:
        raise ValueError(f"unknown strategy {value!r}; choose one of {', '.join(allowed)}")
    return value


def check_on_device_error(value: str) -> str:
    """Return ``value`` if it is one of :data:`ON_DEVICE_ERROR`; raise ``ValueError`` naming it otherwise."""
    if value not in ON_DEVICE_ERROR:
        raise ValueError(f"on_device_error must be 'fallback' or 'raise', got {value!r}")
    return value


def check_split(alpha: Any, transfer_level: Any) -> tuple[float | None, int | None]:
    """A forced split's ``alpha`` (the CPU's share, a real number in ``[0, 1]``) and ``transfer_level`` (an
    integer ``>= 0``; the upper bound depends on the input and is checked where it is known), each None or checked.

    Raises
    ------
    TypeError
        ``alpha`` is not a real number.
    ValueError
        ``alpha`` outside ``[0, 1]``, or ``transfer_level`` not an integer ``>= 0``; the message names it.
    """
    if alpha is not None:
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
            raise TypeError(f"alpha must be a real number in [0, 1], got {alpha!r}")
        if not 0 <= alpha <= 1:  # before float(): an int past the float range is out of range, not an overflow
            raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
        alpha = float(alpha)
    if transfer_level is not None:
        transfer_level = check_int("transfer_level", transfer_level, 0)
    return alpha, transfer_level


@dataclasses.dataclass
class HybridResult(Generic[C, D]):
    """What :func:`run_hybrid` returns.

    Attributes
    ----------
    cpu : object
        The CPU share's result (None without a CPU share).
    device : object
        The device share's result, or ``redo``'s after a fallback.
    fallback : str
        Empty, or why the device share failed and the CPU redid it.
    """

    cpu: C | None
    device: D | None
    fallback: str = ""


def run_hybrid(runtime: Any, *, device: Callable[[Any], D] | None, cpu: Callable[[], C] | None = None,
               redo: Callable[[], D] | None = None, on_device_error: str = "fallback",
               finish: Callable[[HybridResult], Any] | None = None) -> Any:
    """Run a CPU share and a device share of one call at once; fall back to the CPU if the device fails.

    :func:`run_units` with one device.

    Parameters
    ----------
    runtime : hpu.Runtime
        Lends the device share a :class:`~hpu.core.runtime.DeviceLease` for
        the whole call (so concurrent calls never share queues or buffers).
    device : callable(lease) -> D, or None
        The device share; None runs the CPU share alone.
    cpu : callable() -> C, optional
        The CPU share, run on the calling thread while the device share runs
        on a feeder thread.
    redo : callable() -> D
        Computes the device share on the CPU from the input (needed with
        ``on_device_error="fallback"``).  It must not read what the failed
        device share wrote.
    on_device_error : {"fallback", "raise"}
    finish : callable(HybridResult) -> T, optional
        Runs while the lease is still held (e.g. a merge that reads the
        device share's runs out of the lease's pinned staging memory); its
        value is returned.  Default: return the :class:`HybridResult`.

    Returns
    -------
    HybridResult, or ``finish``'s value

    Raises
    ------
    DeviceFailure
        The device share failed and ``on_device_error="raise"``.
    ValueError
        Bad ``on_device_error``, or ``"fallback"`` without ``redo``.
    Exception
        Anything the CPU share or ``finish`` raises, and non-device errors of
        the device share, unchanged.
    """
    done = finish or (lambda r: r)
    if device is None:
        check_on_device_error(on_device_error)
        return done(HybridResult(cpu() if cpu is not None else None, None))
    return run_units([runtime], devices=[device], cpu=cpu, redo=None if redo is None else (lambda i: redo()),
                     on_device_error=on_device_error,
                     finish=lambda r: done(HybridResult(r.cpu, r.devices[0], r.fallbacks[0])))


@dataclasses.dataclass
class UnitsResult(Generic[C, D]):
    """What :func:`run_units` returns.

    Attributes
    ----------
    cpu : object
        The CPU share's result (None without a CPU share).
    devices : list
        Each device share's result, or ``redo``'s after its fallback.
    fallbacks : list of str
        Per device: empty, or why its share failed and the CPU redid it.
    """

    cpu: C | None
    devices: list
    fallbacks: list


def run_units(runtimes: Sequence[Any], *, devices: Sequence[Callable[[Any], D]], cpu: Callable[[], C] | None = None,
              redo: Callable[[int], D] | None = None, on_device_error: str = "fallback",
              finish: Callable[[UnitsResult], Any] | None = None,
              on_failure: Callable[[int], None] | None = None) -> Any:
    """Run a CPU share and the shares of several devices at once; the CPU redoes a failed device's share.

    Device share ``i`` runs on a feeder thread of its own with a
    :class:`~hpu.core.runtime.DeviceLease` of ``runtimes[i]`` held for the
    whole call; the CPU share runs on the calling thread.  A device share
    that fails with a device error (:func:`as_device_failure`) is reported to
    its runtime (a faulted context is rebuilt before its next call) and then,
    after every share has ended, redone by ``redo(i)`` or raised as
    :class:`DeviceFailure`.

    Parameters
    ----------
    runtimes : sequence of hpu.Runtime
        One per device share (the same runtime may appear twice: two leases),
        all with one thread pool (a runtime and its :attr:`~hpu.Runtime.peers`).
    devices : sequence of callable(lease) -> D
    cpu : callable() -> C, optional
    redo : callable(i) -> D
        Computes device share ``i`` on the CPU from the input, never from what
        the failed share wrote (needed with ``on_device_error="fallback"``).
    on_device_error : {"fallback", "raise"}
    finish : callable(UnitsResult) -> T, optional
        Runs while every lease is still held; its value is returned.
    on_failure : callable(i), optional
        Called on device share ``i``'s thread as soon as it fails, its lease
        included, while the other shares may still run (shares that wait for
        each other stop theirs with it; they raise a ``secondary``
        :class:`DeviceFailure`, which is neither reported against their
        device nor raised in place of the failure that caused it).

    Returns
    -------
    UnitsResult, or ``finish``'s value

    Raises
    ------
    DeviceFailure
        A device share failed and ``on_device_error="raise"``.
    ValueError
        Bad ``on_device_error``, ``"fallback"`` without ``redo``, or
        ``runtimes`` and ``devices`` of different lengths.
    Exception
        Anything the CPU share or ``finish`` raises, and non-device errors of
        a device share, unchanged (the first in unit order, secondary
        failures last).
    """
    check_on_device_error(on_device_error)
    if len(runtimes) != len(devices):
        raise ValueError(f"{len(runtimes)} runtimes for {len(devices)} device shares")
    if devices and redo is None and on_device_error == "fallback":
        raise ValueError("on_device_error='fallback' needs a redo callable")
    finish = finish or (lambda r: r)
    k = len(devices)
    outcome: list[tuple[bool, Any] | None] = [None] * k
    leases: list[Any] = [None] * k
    # Called from a pool worker, the feeders' pool tasks run on the feeders: the workers may all be waiting here.
    as_worker = runtimes[0].pool.acting_as_worker if k and runtimes[0].pool.in_worker() else contextlib.nullcontext

    def job(i: int) -> None:
        try:
            with as_worker():
                leases[i] = runtimes[i].acquire_lease()
                outcome[i] = (True, devices[i](leases[i]))
        except BaseException as e:  # handed to the calling thread
            outcome[i] = (False, e)
            if on_failure is not None:
                on_failure(i)

    # The CPU share (or, without one, the last device share) runs on the calling thread.
    feeders = [threading.Thread(target=job, args=(i,), name=f"hpu-device-feeder-{i}", daemon=True)
               for i in range(k if cpu is not None else k - 1)]
    for f in feeders:
        f.start()
    cpu_value, cpu_error = None, None
    try:
        if cpu is not None:
            cpu_value = cpu()
        elif k:
            job(k - 1)
    except BaseException as e:  # raised once the device shares' failures are reported and their leases given back
        cpu_error = e
    finally:
        for f in feeders:
            f.join()
    try:
        failed = [i for i, (ok, _) in enumerate(outcome) if not ok]
        secondary = {i for i in failed if getattr(outcome[i][1], "secondary", False)}
        for i in failed:
            if i in secondary:  # stopped by another share's failure: its device and lease are fine
                continue
            err = as_device_failure(outcome[i][1])
            if leases[i] is not None:  # its queues may still hold work of the failed share: never lent again
                runtimes[i].release_lease(leases[i], failure=err or outcome[i][1])
                leases[i] = None
            elif err is not None:
                runtimes[i].report_failure(err)
        if cpu_error is not None:
            raise cpu_error
        for i in sorted(failed, key=lambda j: j in secondary):  # the cause before what it stopped
            value = outcome[i][1]
            err = as_device_failure(value)
            if err is None:
                raise value
            if on_device_error == "raise":
                raise err from value if err is not value else None
            if i not in secondary:
                log.warning("device share %d failed (%s); the CPU redoes it", i, str(err))  # a record holds no frame
        results = [value if ok else None for ok, value in outcome]
        fallbacks = ["" if ok else str(as_device_failure(value)) for ok, value in outcome]
        for i in failed:
            results[i] = redo(i)
        return finish(UnitsResult(cpu_value, results, fallbacks))
    finally:
        for i, lease in enumerate(leases):
            if lease is not None:
                runtimes[i].release_lease(lease)
        outcome.clear()  # a failure's traceback holds job's frame, which holds outcome: no cycle keeps results alive
        # nor this frame's: a failure raised on this thread holds it through its traceback (and with it redo's data)
        value = err = None
