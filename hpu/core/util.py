"""Small standard-library helpers shared by hpu's modules (no numpy, no OpenCL): files, host, checks."""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import importlib.util
import logging
import math
import numbers
import operator
import os
import platform
import secrets
import signal
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["atomic_write_text", "check_int", "check_nonneg", "check_positive", "host_description",
           "interrupts_deferred", "native_library", "seed_list", "wait_all"]

log = logging.getLogger("hpu")


def wait_all(futures: Iterable[concurrent.futures.Future]) -> list:
    """Wait for every task, then return their results in order or raise the first one's error.

    A task that fails never leaves the others still writing into memory that
    the caller's error path hands back (to a pool) or redoes.
    """
    futures = list(futures)
    concurrent.futures.wait(futures)
    return [f.result() for f in futures]


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C back until the block ends: a SIGINT that comes while it runs raises ``KeyboardInterrupt`` as it
    exits (with the block's own error, if any, as its context), not half-way through it.

    For code that enqueues OpenCL commands waiting for work that this thread must still do: pyopencl returns a copy
    between host and device memory as an event whose release waits for the copy, holding Python's global lock, so a
    ``KeyboardInterrupt`` between the enqueue and the line that keeps the event dropped it and waited forever (for
    a staging copy that the caller, or pool threads needing that lock, had yet to make).  Only where Python's own
    SIGINT handler is installed and on the main thread (the only one Python raises it in); elsewhere the block runs
    as it is.
    """
    if threading.current_thread() is not threading.main_thread() or (
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if caught:
            raise KeyboardInterrupt


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename: readers never see half a file.

    Creates missing parent directories; an interrupted write (Ctrl-C included)
    leaves the old file, if any, untouched.  The file keeps the old one's
    permissions, or gets those of a new file (``0o666`` less the umask), not
    the private ones of a temporary file.  Returns the path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # as open() makes a file: the umask applies
    try:
        with os.fdopen(fd, "w") as fh:
            if path.exists():
                os.chmod(fh.fileno(), path.stat().st_mode & 0o7777)
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def host_description() -> str:
    """The CPU's model name (from ``/proc/cpuinfo`` where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def native_library(module: str) -> ctypes.CDLL | None:
    """One of hpu's optional compiled libraries (``setup.py`` builds them where a C compiler is found), loaded by
    :mod:`ctypes`, or None where it was not built or does not load (hpu then runs its numpy code instead)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        log.debug("hpu: %s was not built; using numpy instead", module)
        return None
    try:
        return ctypes.CDLL(spec.origin)
    except OSError as exc:  # pragma: no cover - a broken build
        log.warning("hpu: %s (%s) does not load (%s); using numpy instead", module, spec.origin, exc)
        return None


def check_positive(name: str, value: float) -> float:
    """``value`` as a float, checked finite and > 0.

    Raises
    ------
    TypeError
        ``value`` is not a real number.
    ValueError
        ``value`` is not finite or not > 0 (the message names ``name``).
    """
    v = _real(name, value)
    if v <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return v


def check_nonneg(name: str, value: float) -> float:
    """``value`` as a float, checked finite and >= 0 (errors as :func:`check_positive`)."""
    v = _real(name, value)
    if v < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return v


def check_int(name: str, value: object, low: int, high: int | None = None, what: str = "") -> int:
    """``value`` as an int, checked to be an integer (Python or numpy, not bool) in ``[low, high)``.

    ``high=None`` means no upper bound; ``what`` is appended to the range in
    the message (e.g. ``" (the number of moves)"``).

    Raises
    ------
    ValueError
        Anything else; the message names ``name`` and the range.
    """
    bounds = (f">= {low}" if high is None else f"in [{low}, {high})") + what
    try:
        v = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        v = None
    if v is None or v < low or (high is not None and v >= high):
        raise ValueError(f"{name} must be an integer {bounds}, got {value!r}")
    return v


def seed_list(seeds: object) -> list:
    """``seeds`` as a list, one seed a search (each anything ``numpy.random.default_rng`` takes).

    Raises
    ------
    TypeError
        ``seeds`` not an iterable, or a string or bytes (whose characters are no seeds).
    """
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise TypeError(f"seeds must be a sequence of seeds, one a search, got {seeds!r}")
    return list(seeds)


def _real(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # no strings, no flags
        raise TypeError(f"{name} must be a real number, got {value!r}")
    try:
        v = float(value)
    except OverflowError:  # an int past the float range
        raise ValueError(f"{name} must be finite, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v
