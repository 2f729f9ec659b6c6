"""Measured cost curves and the one versioned JSON format every calibration writes.

Beyond the paper's closed forms (López-Ortiz et al. 2014, section 5), a
workload's fast paths are described by *measured* cost curves: the seconds of
each step (a device sort, a staged transfer, a CPU merge, ...) at a few
sizes, interpolated in ``log n``-``log t``.  A parallel sort's cost jumps
where it starts using more threads, which no single ``c0 + c1 n log n``
follows; a curve does.

Every file hpu writes (profiles, tabu costs) goes through
:func:`write_versioned` and comes back through :func:`read_versioned`: a
JSON object with a ``kind`` and a ``schema_version``, written atomically, and
one error type, :class:`ProfileError`, for anything wrong with it.

numpy only: usable without OpenCL.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .util import atomic_write_text, check_int

__all__ = ["CostCurves", "ProfileError", "read_versioned", "write_versioned"]


class ProfileError(ValueError):
    """A profile or cost file is missing, corrupt, of another kind, or from a newer hpu."""


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"cannot store {type(o).__name__} in an hpu file")


def write_versioned(path: str | os.PathLike, kind: str, version: int, payload: Mapping[str, Any]) -> Path:
    """Write ``payload`` as JSON with ``kind`` and ``schema_version`` keys, atomically; return the path.

    An interrupted write leaves the old file, if any, untouched.
    """
    d = dict(payload)
    d["kind"] = kind
    d["schema_version"] = int(version)
    text = json.dumps(d, indent=2, sort_keys=True, default=_json_default)
    return atomic_write_text(path, text + "\n")


def check_versioned(d: Any, kind: str, version: int, *, source: str = "<dict>", oldest: int = 1) -> dict:
    """Check a dict read from a versioned file; return it.

    A dict without ``kind`` is accepted (files from before the key existed).

    Raises
    ------
    ProfileError
        Not a JSON object, another ``kind``, a missing or non-integer
        ``schema_version``, or a version outside ``[oldest, version]``.
    """
    if not isinstance(d, dict):
        raise ProfileError(f"{source}: expected a JSON object, got {type(d).__name__}")
    if d.get("kind", kind) != kind:
        raise ProfileError(f"{source}: holds {d['kind']!r}, not {kind!r}")
    v = d.get("schema_version")
    if isinstance(v, bool) or not isinstance(v, int):  # JSON's true is no version 1
        raise ProfileError(f"{source}: missing or non-integer 'schema_version'")
    if v > version:
        raise ProfileError(f"{source}: {kind} schema version {v} is newer than this hpu supports ({version}); "
                           "upgrade hpu or recalibrate")
    if v < oldest:
        raise ProfileError(f"{source}: {kind} schema version {v} is too old (oldest read: {oldest}); recalibrate")
    return d


def read_versioned(path: str | os.PathLike, kind: str, version: int, *, oldest: int = 1) -> dict:
    """Read a file written by :func:`write_versioned` and check it (:func:`check_versioned`).

    Raises
    ------
    ProfileError
        The file is missing, unreadable, not JSON, or fails the checks.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ProfileError(f"{kind} file not found: {path}") from None
    except OSError as e:
        raise ProfileError(f"cannot read {kind} file {path}: {e}") from None
    except UnicodeDecodeError as e:
        raise ProfileError(f"{path}: corrupt {kind} file (not text: {e})") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(f"{path}: corrupt {kind} file (not JSON: {e})") from None
    except RecursionError:  # json's parser recurses once per nesting level
        raise ProfileError(f"{path}: corrupt {kind} file (JSON nested too deeply)") from None
    return check_versioned(d, kind, version, source=str(path), oldest=oldest)


def _reals(what: str, values: Any) -> tuple[float, ...]:
    """``values``, a sequence of real numbers, as floats (inf past the float range); TypeError naming ``what`` for
    anything else: a string (whose characters would read as digits), a mapping, a bool, a scalar."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise TypeError(f"{what} must be a sequence of numbers, got {type(values).__name__}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{what} must be numbers, got {type(v).__name__} {v!r}")
        try:
            out.append(float(v))
        except OverflowError:  # an integer past the float range (10**400 written out in JSON)
            out.append(math.inf)
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class CostCurves:
    """Measured seconds of a workload's steps at a few sizes.

    Parameters
    ----------
    sizes : sequence of int
        Problem sizes measured (elements, increasing, at least two).
    seconds : mapping of str to sequence of float
        Per step name, the seconds measured at each size (same length as
        ``sizes``).
    itemsize : int
        Bytes per element of the measurements; :meth:`cost` scales to other
        element sizes by ``itemsize_asked / itemsize`` (bandwidth-bound steps).

    Raises
    ------
    TypeError
        ``sizes`` or a curve is not a sequence of real numbers (a string, a
        bool, ...).
    ValueError
        Fewer than two sizes, a size that is not a whole number >= 1 (or is
        past the float range), sizes not increasing, a curve of another
        length, a time <= 0 or not finite, a curve named ``"sizes"`` or
        ``"itemsize"``, or an itemsize that is not a positive integer.
    """

    sizes: tuple[int, ...]
    seconds: Mapping[str, tuple[float, ...]]
    itemsize: int = 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "itemsize", check_int("itemsize (bytes per element)", self.itemsize, 1))
        given = _reals("cost curve sizes", self.sizes)
        wrong = [x for x in given if not (math.isfinite(x) and x.is_integer() and x >= 1)]
        if wrong:  # a float size (JSON 16384.0) is fine where whole; int() would truncate 1.5 silently
            raise ValueError(f"cost curve sizes must be whole numbers of elements >= 1, got {wrong[0]!r}")
        sizes = tuple(int(x) for x in given)
        if len(sizes) < 2 or any(b <= a for a, b in zip(sizes, sizes[1:])):
            raise ValueError(f"cost curves need >= 2 increasing sizes, got {list(sizes)}")
        secs = {}
        for name, ys in self.seconds.items():
            if str(name) in ("sizes", "itemsize"):  # to_dict's own keys: the curve would overwrite them
                raise ValueError(f"a cost curve cannot be named {name!r} (a key of to_dict's format)")
            ys = _reals(f"cost curve {name!r}", ys)
            if len(ys) != len(sizes) or not all(np.isfinite(ys)) or min(ys) <= 0:
                raise ValueError(f"cost curve {name!r} needs {len(sizes)} finite times > 0, got {list(ys)}")
            secs[str(name)] = ys
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "seconds", secs)

    def _knots(self, name: str) -> tuple[np.ndarray, np.ndarray, float, float]:
        """:meth:`cost`'s knots of curve ``name`` in log space, computed once (a model's choice asks for a few
        costs a call): log2 of the sizes, log2 of the seconds made non-decreasing, the slope below, the slope above.
        KeyError for an unknown name."""
        cache = self.__dict__.setdefault("_knot_cache", {})  # the dataclass is frozen
        if name not in cache:
            xs = np.log2(np.asarray(self.sizes, dtype=float))
            ys = np.log2(np.maximum.accumulate(np.asarray(self.seconds[name], dtype=float)))
            lo, hi = (ys[1] - ys[0]) / (xs[1] - xs[0]), (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            cache[name] = (xs, ys, max(float(lo), 0.0), max(float(hi), 1.0))
        return cache[name]

    def __contains__(self, name: str) -> bool:
        return name in self.seconds

    def cost(self, name: str, n: Any, itemsize: int | None = None) -> Any:
        """Predicted seconds of step ``name`` on ``n`` elements (0 where ``n <= 0``; ``n`` may be an array).

        Interpolated linearly in ``log2 n``-``log2 t`` between the measured
        sizes and extrapolated with the end segments' slopes, scaled by
        ``itemsize / self.itemsize``.  The measured times are first raised
        to the largest at a smaller size (a noisy measurement would predict
        a larger input cheaper), so the curve never decreases.
        Below the smallest size the slope is at least 0; above the largest at least 1: every
        step touches each element, so past its fixed costs its time grows at
        least linearly, where a last segment still paying them rises slower
        (on the H100 machine the transfer curve's last slope, 2^24 to 2^26,
        was 0.67, and the device's sort of 2^28 int32 was predicted at 0.81
        of its measured time; ``experiments/results/h100/bench_mergesort_model.json``).

        Raises
        ------
        KeyError
            No curve named ``name``.
        ValueError
            ``itemsize`` given and not a positive integer, or ``n`` NaN.
        """
        if itemsize is not None:
            itemsize = check_int("itemsize (bytes per element)", itemsize, 1)
        one = isinstance(n, (int, float, np.integer, np.floating))  # one size: the same formula without arrays
        nn = float(n) if one else np.asarray(n, dtype=float)
        if math.isnan(nn) if one else np.isnan(nn).any():
            raise ValueError("cost of NaN elements")
        xs, ys, lo_slope, hi_slope = self._knots(name)
        scale = (self.itemsize if itemsize is None else itemsize) / self.itemsize
        if one:
            if nn <= 0:
                return 0.0
            x = math.log2(max(nn, 1.0))
            if x < xs[0]:
                y = ys[0] + lo_slope * (x - xs[0])
            elif x > xs[-1]:
                y = ys[-1] + hi_slope * (x - xs[-1])
            else:
                y = float(np.interp(x, xs, ys))
            return 2.0**y * scale
        x = np.log2(np.maximum(nn, 1.0))
        y = np.interp(x, xs, ys)
        y = np.where(x < xs[0], ys[0] + lo_slope * (x - xs[0]), y)
        y = np.where(x > xs[-1], ys[-1] + hi_slope * (x - xs[-1]), y)
        out = np.where(nn > 0, 2.0**y * scale, 0.0)
        return float(out) if out.ndim == 0 else out

    def to_dict(self) -> dict:
        """JSON-ready ``{"sizes": [...], "itemsize": w, "<step>": [...], ...}``."""
        return {"sizes": list(self.sizes), "itemsize": self.itemsize, **{k: list(v) for k, v in self.seconds.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, source: str = "<dict>") -> CostCurves:
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        ProfileError
            No ``sizes``, or curves that :class:`CostCurves` rejects.
        """
        if not isinstance(d, Mapping) or "sizes" not in d:
            raise ProfileError(f"{source}: cost curves need a 'sizes' list")
        curves = {k: v for k, v in d.items() if k not in ("sizes", "itemsize")}
        try:
            return cls(d["sizes"], curves, d.get("itemsize", 4))
        except (TypeError, ValueError) as e:
            raise ProfileError(f"{source}: invalid cost curves: {e}") from None

    @classmethod
    def measured(cls, sizes: Sequence[int], seconds: Mapping[str, Sequence[float]], itemsize: int = 4) -> CostCurves:
        """Curves from a calibration's measurements (times clipped to >= 1 ns)."""
        return cls(tuple(sizes), {k: tuple(max(float(t), 1e-9) for t in v) for k, v in seconds.items()}, itemsize)
