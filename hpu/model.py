"""The HPU performance model and the work splits it predicts.

This module implements the Hybrid Processing Unit (HPU) model of
López-Ortiz, Salinger and Suderman, "Toward a Generic Hybrid CPU-GPU
Parallelization of Divide-and-Conquer Algorithms", IJNC 4(1), 2014
(``shared/seeds/002``; cited below as "paper, section X"):

* a CPU with ``p`` cores, each doing one operation per time unit;
* a GPU with ``g`` cores (the *empirical* degree of parallelism), each doing
  ``gamma < 1`` operations per time unit (paper, section 3.2);
* a recurrence ``T(n) = a T(n/b) + f(n)`` whose level ``i`` holds ``a**i``
  subproblems of size ``n / b**i`` (paper, section 4);
* the basic split (paper, section 5.1) and the advanced split (paper,
  section 5.2) of the recursion tree between the two units.

Beyond the paper, a :class:`Profile` carries the seconds per operation of one
CPU core (so predictions are wall times, not only work shares) and the
transfer cost ``lambda + delta * w`` of paper section 3.2, which the paper
leaves out of its analysis; passing ``data_bytes`` to a split function adds it.

Only numpy and scipy are imported here: the model is usable for "what if"
studies on machines without OpenCL.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize

from ._util import atomic_write_text

__all__ = [
    "PROFILE_SCHEMA_VERSION",
    "Profile",
    "ProfileError",
    "Recurrence",
    "Split",
    "basic_split",
    "advanced_split",
    "reference_profile",
    "mergesort_closed_forms",
    "fast_split",
    "FAST_COSTS",
]

#: Version of the JSON layout written by :meth:`Profile.save`.
PROFILE_SCHEMA_VERSION = 1


class ProfileError(ValueError):
    """A profile file is missing, corrupt, or from a newer hpu."""


def _check_positive(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return v


def _check_nonneg(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return v


@dataclasses.dataclass(frozen=True)
class Profile:
    """Parameters of one hybrid processing unit (paper, section 3.2).

    Parameters
    ----------
    p : float
        CPU cores available for tasks (> 0; usually an integer).
    g : float
        Empirical degree of parallelism of the device: the number of
        work-items after which adding more gives no speed-up (> 0; paper,
        section 6.4, fig. 5).
    gamma : float
        Speed of one device work-item relative to one CPU core, in (0, 1]
        (paper, section 3.2; the paper's HPU1 has ``gamma = 1/160``).
    cpu_op_seconds : float
        Seconds one CPU core takes for one operation of the recurrence's
        ``f`` (for mergesort: one merged element).  ``1.0`` (the default)
        makes every predicted time a count of CPU operations, as in the paper.
    h2d_latency, d2h_latency : float
        Transfer latency ``lambda`` in seconds, host to device and back.
    h2d_seconds_per_byte, d2h_seconds_per_byte : float
        Transfer cost ``delta`` in seconds per byte, each direction.
    launch_seconds : float
        Host-side cost of one kernel launch (seconds); the paper neglects it.
    fast : dict
        Measured fast-mode cost curves (see :func:`fast_cost`): ``"sizes"``
        (elements) and, per step in :data:`FAST_COSTS`, the seconds at each
        size; empty when not calibrated.
    name, device, host : str
        Free-text descriptions.
    provenance : dict
        How the profile was made (command, date, versions).
    measurements : dict
        Raw calibration measurements and fit residuals.

    Raises
    ------
    ValueError
        If ``p <= 0``, ``g <= 0``, ``gamma`` outside (0, 1], or a cost is
        negative or not finite.
    """

    p: float
    g: float
    gamma: float
    cpu_op_seconds: float = 1.0
    h2d_latency: float = 0.0
    d2h_latency: float = 0.0
    h2d_seconds_per_byte: float = 0.0
    d2h_seconds_per_byte: float = 0.0
    launch_seconds: float = 0.0
    fast: dict = dataclasses.field(default_factory=dict)
    name: str = ""
    device: str = ""
    host: str = ""
    provenance: dict = dataclasses.field(default_factory=dict)
    measurements: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", _check_positive("p", self.p))
        object.__setattr__(self, "g", _check_positive("g", self.g))
        gamma = _check_positive("gamma", self.gamma)
        if gamma > 1:
            raise ValueError(
                f"gamma must lie in (0, 1] (a device work-item is at most as fast as a "
                f"CPU core; paper section 3.2), got {self.gamma!r}"
            )
        object.__setattr__(self, "gamma", gamma)
        object.__setattr__(self, "cpu_op_seconds", _check_positive("cpu_op_seconds", self.cpu_op_seconds))
        for f in ("h2d_latency", "d2h_latency", "h2d_seconds_per_byte", "d2h_seconds_per_byte", "launch_seconds"):
            object.__setattr__(self, f, _check_nonneg(f, getattr(self, f)))

    # -- transfers ---------------------------------------------------------
    def h2d_time(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` host to device: ``lambda + delta * w`` (paper, section 3.2)."""
        return self.h2d_latency + self.h2d_seconds_per_byte * nbytes if nbytes > 0 else 0.0

    def d2h_time(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` device to host: ``lambda + delta * w`` (paper, section 3.2)."""
        return self.d2h_latency + self.d2h_seconds_per_byte * nbytes if nbytes > 0 else 0.0

    def replace(self, **changes: Any) -> Profile:
        """Return a copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # -- persistence -------------------------------------------------------
    def to_dict(self) -> dict:
        """The profile as a JSON-ready dict with a ``schema_version`` key."""
        d = dataclasses.asdict(self)
        d["schema_version"] = PROFILE_SCHEMA_VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict, *, source: str = "<dict>") -> Profile:
        """Build a profile from :meth:`to_dict` output.

        Raises
        ------
        ProfileError
            If the schema version is missing, newer than this code, or a field
            is missing or invalid.
        """
        if not isinstance(d, dict):
            raise ProfileError(f"{source}: a profile must be a JSON object, got {type(d).__name__}")
        version = d.get("schema_version")
        if not isinstance(version, int):
            raise ProfileError(f"{source}: missing or non-integer 'schema_version'")
        if version > PROFILE_SCHEMA_VERSION:
            raise ProfileError(
                f"{source}: profile schema version {version} is newer than this hpu supports "
                f"({PROFILE_SCHEMA_VERSION}); upgrade hpu or recalibrate"
            )
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = [k for k in ("p", "g", "gamma") if k not in d]
        if missing:
            raise ProfileError(f"{source}: missing field(s) {', '.join(missing)}")
        kwargs = {k: v for k, v in d.items() if k in fields}
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as e:
            raise ProfileError(f"{source}: invalid profile: {e}") from None

    def save(self, path: str | os.PathLike) -> Path:
        """Write the profile as versioned JSON, atomically (no half-written file).

        Returns the path written.
        """
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True, default=_json_default)
        return atomic_write_text(path, text + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> Profile:
        """Read a profile written by :meth:`save`.

        Raises
        ------
        ProfileError
            If the file is missing, is not JSON, or does not hold a valid profile.
        """
        path = Path(path)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ProfileError(f"profile file not found: {path}") from None
        except OSError as e:
            raise ProfileError(f"cannot read profile {path}: {e}") from None
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ProfileError(f"{path}: corrupt profile (not JSON: {e})") from None
        return cls.from_dict(d, source=str(path))


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"cannot store {type(o).__name__} in a profile")


def reference_profile(name: str) -> Profile:
    """One of the profiles shipped in ``models/``: ``"hpu1"``, ``"hpu2"`` (paper, table 2) or a calibrated one.

    Raises
    ------
    ProfileError
        If no shipped profile has that name.
    """
    from importlib import resources

    fname = f"{name.lower()}.json"
    res = resources.files("hpu.models").joinpath(fname)
    if not res.is_file():
        avail = sorted(p.name[:-5] for p in resources.files("hpu.models").iterdir() if p.name.endswith(".json"))
        raise ProfileError(f"no shipped profile named {name!r}; available: {', '.join(avail)}")
    with resources.as_file(res) as p:
        return Profile.load(p)


# ---------------------------------------------------------------------------
# Recurrences and level sums
# ---------------------------------------------------------------------------


class Recurrence:
    """A divide-and-conquer recurrence ``T(n) = a T(n/b) + f(n)``, ``T(1) = leaf_cost`` (paper, section 4).

    Parameters
    ----------
    a : float
        Number of subproblems per division (> 0).
    b : float
        Size reduction per division (> 1).
    f : callable or float
        Cost of dividing and combining a problem of size ``n``, in CPU
        operations.  A number ``k`` means ``f(n) = n**k`` (so
        ``Recurrence(a=2, b=2, f=1)`` is mergesort); a callable is evaluated
        at real sizes ``n / b**i`` and must return a non-negative float.
    leaf_cost : float
        Operations of one base case ``T(1)`` (default 1, as in the paper).

    Raises
    ------
    ValueError
        If ``a <= 0``, ``b <= 1`` or ``leaf_cost < 0``.
    """

    def __init__(self, a: float, b: float, f: Callable[[float], float] | float = 1, *, leaf_cost: float = 1.0):
        self.a = _check_positive("a", a)
        try:
            bf = float(b)
        except (TypeError, ValueError):
            raise TypeError(f"b must be a real number, got {b!r}") from None
        if not math.isfinite(bf) or bf <= 1:
            raise ValueError(f"b must be finite and > 1 (the problem must shrink), got {b!r}")
        self.b = bf
        self.leaf_cost = _check_nonneg("leaf_cost", leaf_cost)
        if callable(f):
            self.exponent = None
            self._f = f
        else:
            k = float(f)
            if not math.isfinite(k):
                raise ValueError(f"f exponent must be finite, got {f!r}")
            self.exponent = k
            self._f = lambda n, k=k: n**k

    def __repr__(self) -> str:
        f = f"n**{self.exponent:g}" if self.exponent is not None else getattr(self._f, "__name__", "f")
        return f"Recurrence(a={self.a:g}, b={self.b:g}, f={f})"

    def f(self, n: float) -> float:
        """Divide-and-combine cost of one problem of size ``n`` (CPU operations)."""
        return float(self._f(n))

    def depth(self, n: float) -> float:
        """``log_b n``: the number of levels above the leaves (real for non-powers of ``b``)."""
        d = math.log(n) / math.log(self.b)
        k = round(d)
        return float(k) if abs(d - k) < 1e-9 else d  # exact for powers of b despite rounding in log

    def leaves(self, n: float) -> float:
        """``n ** log_b a``: the number of base cases (paper, section 5.1, case 4)."""
        return n ** (math.log(self.a) / math.log(self.b))

    def level_work(self, n: float, i: float) -> float:
        """``a**i f(n / b**i)``: total work of level ``i`` (0 is the root)."""
        return self.a**i * self.f(n / self.b**i)

    def level_span(self, n: float, i: float) -> float:
        """``f(n / b**i)``: the work of one subproblem of level ``i``."""
        return self.f(n / self.b**i)

    def total_work(self, n: float) -> float:
        """``n**log_b a * leaf_cost + sum_{i=0}^{log_b n - 1} a**i f(n/b**i)``: one-core time in operations."""
        return self.leaves(n) * self.leaf_cost + level_sum(lambda i: self.level_work(n, i), 0.0, self.depth(n))


def level_sum(h: Callable[[float], float], lo: float, hi: float) -> float:
    """Sum ``sum_{i=lo}^{hi-1} h(i)`` over recursion levels, for real limits.

    Integer levels contribute ``h(i)`` for the interval ``[i, i+1)``; a partial
    interval ``[x0, x1)`` contributes ``h(x0) (r**t - 1) / (r - 1)`` with
    ``t = x1 - x0`` and ``r = (h(x1) / h(x0)) ** (1/t)``.  This is exact for
    geometric terms ``h(i) = C r**i`` (the mergesort-like recurrences whose
    closed forms paper section 5.2.2 uses with fractional levels such as
    ``log_a(p/alpha)``), and linear interpolation when ``r = 1``.

    Returns 0 when ``hi <= lo``.
    """
    if not hi > lo:
        return 0.0
    c, d = math.ceil(lo), math.floor(hi)
    if c > d:  # both limits inside one unit interval
        return _partial(h, lo, hi)
    total = _partial(h, lo, c) + _partial(h, d, hi)
    for i in range(c, d):
        total += h(i)
    return total


def _partial(h: Callable[[float], float], x0: float, x1: float) -> float:
    t = x1 - x0
    if t <= 0:
        return 0.0
    h0, h1 = h(x0), h(x1)
    if h0 <= 0 or h1 <= 0:
        return max(h0, 0.0) * t
    r = (h1 / h0) ** (1.0 / t)
    if abs(r - 1.0) < 1e-12:
        return h0 * t
    return h0 * (r**t - 1.0) / (r - 1.0)


# ---------------------------------------------------------------------------
# Splits
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Split:
    """How a recursion tree is divided between the CPU and the device.

    Reads like :class:`scipy.optimize.OptimizeResult`: named fields, printable.

    Attributes
    ----------
    strategy : str
        ``"cpu"``, ``"gpu"``, ``"basic"`` (paper 5.1) or ``"advanced"`` (paper 5.2).
    alpha : float
        Fraction of the subproblems at the transfer level given to the CPU
        (1 for ``"cpu"``, 0 for ``"gpu"`` and ``"basic"``).
    y : float
        Level reached bottom-up by the device, as a real number (paper 5.2.1).
    transfer_level : int
        The integer level at which results come back to the host: the
        device computes levels ``transfer_level .. depth-1`` of its share.
        ``depth`` means the device does nothing.
    depth : float
        ``log_b n``.
    gpu_work_fraction : float
        Share of the total work (operations) done by the device.
    predicted_cpu_time, predicted_gpu_time, predicted_transfer_time, predicted_time : float
        Predicted busy time of each unit, transfer time, and wall time, in
        seconds if the profile's ``cpu_op_seconds`` is in seconds (else in
        CPU operations).
    predicted_speedup : float
        One-core time (``Recurrence.total_work``) over ``predicted_time``.
    case : str
        For ``"advanced"``: which case of paper 5.2.1 fixed ``y``:
        ``"i"`` (device never saturated), ``"ii"`` (always saturated),
        ``"iii"`` (both); ``"fast"`` for :func:`fast_split`; otherwise ``""``.
    cpu_threads : int
        Threads the CPU share uses: 0 for all of the runtime's, 1 for one
        (:func:`fast_split` only).
    """

    strategy: str
    alpha: float
    y: float
    transfer_level: int
    depth: float
    gpu_work_fraction: float
    predicted_cpu_time: float
    predicted_gpu_time: float
    predicted_transfer_time: float
    predicted_time: float
    predicted_speedup: float
    case: str = ""
    cpu_threads: int = 0

    def __str__(self) -> str:
        w = max(len(f.name) for f in dataclasses.fields(self))
        return "\n".join(f"{f.name.rjust(w)}: {getattr(self, f.name)!r}" for f in dataclasses.fields(self))


def _check_n(n: float) -> float:
    try:
        v = float(n)
    except (TypeError, ValueError):
        raise TypeError(f"n must be a number, got {n!r}") from None
    if not math.isfinite(v) or v < 1:
        raise ValueError(f"n must be >= 1, got {n!r}")
    return v


def _check_inputs(recurrence: Recurrence, profile: Profile) -> None:
    if not isinstance(recurrence, Recurrence):
        raise TypeError(f"recurrence must be an hpu.Recurrence, got {type(recurrence).__name__}")
    if not isinstance(profile, Profile):
        raise TypeError(f"profile must be an hpu.Profile, got {type(profile).__name__}")


def _cpu_level_time(rec: Recurrence, n: float, i: float, count: float, p: float) -> float:
    """Time (operations) for ``count`` subproblems of level ``i`` on ``p`` cores: ``f(n/b^i) max(1, count/p)``.

    Paper 5.1 cases 1 and 2.
    """
    if count <= 0:
        return 0.0
    return rec.level_span(n, i) * max(1.0, count / p)


def _gpu_level_time(rec: Recurrence, n: float, i: float, count: float, prof: Profile) -> float:
    """Time for ``count`` subproblems of level ``i`` on the device: ``f(n/b^i)/gamma * max(1, count/g)``.

    Paper 5.1 cases 2 and 3.
    """
    if count <= 0:
        return 0.0
    return rec.level_span(n, i) / prof.gamma * max(1.0, count / prof.g)


def _levels_time(level_time: Callable[[float], float], lo: float, hi: float) -> float:
    """Sum of per-level times over levels ``[lo, hi)`` (partial levels weighted linearly)."""
    if not hi > lo:
        return 0.0
    total = 0.0
    i = math.floor(lo)
    while i < hi:
        a0, a1 = max(lo, i), min(hi, i + 1)
        if a1 > a0:
            total += (a1 - a0) * level_time(float(i))
        i += 1
    return total


def basic_split(recurrence: Recurrence, n: float, profile: Profile, *, data_bytes: float | None = None) -> Split:
    """Basic hybrid work division (paper, section 5.1, fig. 1).

    Levels with fewer than ``p/gamma`` subproblems run on the CPU, the others
    on the device, with one transfer at level ``log_a(p/gamma)``.  When
    ``gamma * g < p`` every level is faster on the CPU and no transfer happens.

    Parameters
    ----------
    recurrence : Recurrence
    n : float
        Problem size (>= 1).
    profile : Profile
    data_bytes : float, optional
        Bytes of the whole problem's data.  When given, the transfer cost
        ``lambda + delta * w`` (paper 3.2) of sending it to the device and back
        is added to the predicted time; ``None`` (default) reproduces the paper.

    Returns
    -------
    Split
        ``strategy="basic"``, ``alpha=0``.

    Raises
    ------
    ValueError
        If ``n < 1``.
    """
    _check_inputs(recurrence, profile)
    n = _check_n(n)
    rec, prof = recurrence, profile
    L = rec.depth(n)
    if prof.gamma * prof.g < prof.p:
        y = L
    else:
        y = min(max(math.log(prof.p / prof.gamma) / math.log(rec.a), 0.0), L)
    t_level = min(math.ceil(y - 1e-9), math.ceil(L)) if y < L else math.ceil(L)
    cpu = _levels_time(lambda i: _cpu_level_time(rec, n, i, rec.a**i, prof.p), 0.0, t_level)
    gpu = _levels_time(lambda i: _gpu_level_time(rec, n, i, rec.a**i, prof), t_level, L)
    leaves = rec.leaves(n) * rec.leaf_cost
    on_gpu = t_level < L
    if on_gpu:
        gpu += rec.leaf_cost / prof.gamma * max(1.0, rec.leaves(n) / prof.g)
    else:
        cpu += rec.leaf_cost * max(1.0, rec.leaves(n) / prof.p)
    transfer = 0.0
    if on_gpu and data_bytes:
        transfer = (prof.h2d_time(data_bytes) + prof.d2h_time(data_bytes)) / prof.cpu_op_seconds
    total_work = rec.total_work(n)
    gpu_work = level_sum(lambda i: rec.level_work(n, i), t_level, L) + leaves if on_gpu else 0.0
    s = prof.cpu_op_seconds
    wall = cpu + gpu + transfer
    return Split(
        strategy="basic",
        alpha=0.0,
        y=float(y),
        transfer_level=int(t_level),
        depth=L,
        gpu_work_fraction=gpu_work / total_work,
        predicted_cpu_time=cpu * s,
        predicted_gpu_time=gpu * s,
        predicted_transfer_time=transfer * s,
        predicted_time=wall * s,
        predicted_speedup=total_work / wall,
    )


class _Advanced:
    """The advanced-split equations of paper section 5.2.1 for fixed recurrence, n and profile."""

    def __init__(self, rec: Recurrence, n: float, prof: Profile, data_bytes: float | None):
        self.rec, self.n, self.prof = rec, n, prof
        self.L = rec.depth(n)
        self.N = rec.leaves(n)
        self.leaf_work = self.N * rec.leaf_cost
        self.data_bytes = data_bytes
        self.log_a = math.log(rec.a)

    def work(self, lo: float) -> float:
        """``n^{log_b a} + sum_{i=lo}^{L-1} a^i f(n/b^i)`` (paper 5.2.1)."""
        return self.leaf_work + level_sum(lambda i: self.rec.level_work(self.n, i), lo, self.L)

    def span(self, lo: float, hi: float) -> float:
        """``sum_{i=lo}^{hi-1} f(n/b^i)``: one subproblem per level (paper 5.2.1 case i)."""
        return level_sum(lambda i: self.rec.level_span(self.n, i), lo, hi)

    def cpu_level(self, alpha: float) -> float:
        """``log_a(p/alpha)``: where the CPU share reaches p subproblems (paper 5.2.1)."""
        if alpha <= 0:
            return self.L
        return min(max(math.log(self.prof.p / alpha) / self.log_a, 0.0), self.L)

    def t_c(self, alpha: float) -> float:
        """``T_c = alpha/p (n^{log_b a} + sum_{i=log_a(p/alpha)}^{L-1} a^i f(n/b^i))`` (paper 5.2.1)."""
        return alpha / self.prof.p * self.work(self.cpu_level(alpha))

    def gpu_level(self, alpha: float) -> float:
        """``log_a(g/(1-alpha))``: below it the device share saturates the device."""
        return min(max(math.log(self.prof.g / (1 - alpha)) / self.log_a, 0.0), self.L)

    def t_g_max(self, alpha: float) -> float:
        """``T_g^max = (1-alpha)/(gamma g) (n^{log_b a} + sum_{i=log_a(g/(1-alpha))}^{L-1} ...)`` (paper 5.2.1)."""
        return (1 - alpha) / (self.prof.gamma * self.prof.g) * self.work(self.gpu_level(alpha))

    def transfer(self, alpha: float) -> float:
        """Transfer cost of the device share, both ways, in CPU operations (0 when data_bytes is None)."""
        if not self.data_bytes:
            return 0.0
        w = (1 - alpha) * self.data_bytes
        return (self.prof.h2d_time(w) + self.prof.d2h_time(w)) / self.prof.cpu_op_seconds

    def case(self, alpha: float) -> str:
        """Which case of paper 5.2.1 applies."""
        if (1 - alpha) * self.N < self.prof.g:
            return "i"
        return "ii" if self.t_c(alpha) <= self.t_g_max(alpha) + self.transfer(alpha) else "iii"

    def t_g(self, alpha: float, y: float, case: str) -> float:
        """Device time from the leaves up to level ``y`` (paper 5.2.1 cases i-iii)."""
        gam, g = self.prof.gamma, self.prof.g
        if case == "i":
            return (self.rec.leaf_cost + self.span(y, self.L)) / gam
        if case == "ii":
            return (1 - alpha) / (gam * g) * self.work(y)
        lg = self.gpu_level(alpha)
        return self.t_g_max(alpha) + self.span(y, lg) / gam

    def y(self, alpha: float) -> tuple[float, str]:
        """Solve ``T_g(y) + transfer = T_c`` for ``y`` (paper 5.2.1); clipped to ``[0, L]``."""
        case = self.case(alpha)
        budget = self.t_c(alpha) - self.transfer(alpha)
        hi = self.L if case != "iii" else self.gpu_level(alpha)
        if budget <= self.t_g(alpha, hi, case):  # only in cases i and ii: in iii, budget > T_g^max
            return hi, case
        if budget >= self.t_g(alpha, 0.0, case):
            return 0.0, case
        y = optimize.brentq(lambda yy: self.t_g(alpha, yy, case) - budget, 0.0, hi, xtol=1e-10, rtol=1e-12)
        return float(y), case

    def gpu_work(self, alpha: float) -> float:
        """``W_g = (1-alpha)(n^{log_b a} + sum_{i=y(alpha)}^{L-1} a^i f(n/b^i))`` (paper 5.2.1)."""
        y, _ = self.y(alpha)
        return (1 - alpha) * self.work(y)


def advanced_split(
    recurrence: Recurrence,
    n: float,
    profile: Profile,
    *,
    data_bytes: float | None = None,
    alpha: float | None = None,
) -> Split:
    """Advanced hybrid work division (paper, section 5.2, fig. 2, algorithm 8).

    The top levels with at most ``p`` subproblems run on the CPU.  Below,
    a fraction ``alpha`` of the subproblems runs on the CPU and ``1 - alpha``
    on the device, both bottom-up; the CPU share runs until it has ``p``
    subproblems left (level ``log_a(p/alpha)``, time ``T_c``), and the device
    reaches level ``y`` in the same time.  ``y(alpha)`` solves
    ``T_g(y) = T_c`` in the three cases of section 5.2.1 (by
    :func:`scipy.optimize.brentq`), and ``alpha`` maximises the device's work
    ``W_g(alpha)`` (by a grid search refined with
    :func:`scipy.optimize.minimize_scalar`).

    Parameters
    ----------
    recurrence : Recurrence
    n : float
        Problem size (>= 1).
    profile : Profile
    data_bytes : float, optional
        Bytes of the whole problem's data.  When given, the device share's
        transfer to the device and back (``lambda + delta * w`` each way,
        paper 3.2) is charged to the device's time budget, which lowers ``y``
        and shifts ``alpha``; ``None`` (default) reproduces the paper.
    alpha : float, optional
        Force the CPU fraction instead of optimising it (in ``[0, 1]``).

    Returns
    -------
    Split
        ``strategy="advanced"``; ``y`` is the real solution,
        ``transfer_level = ceil(y)`` the level at which the device share
        comes back; predicted times follow the schedule of paper fig. 2: both
        units concurrently until ``T_c``, then the CPU alone on what is left
        (each level ``f(n/b^i) max(1, count/p)``).

    Raises
    ------
    ValueError
        If ``n < 1`` or ``alpha`` is outside ``[0, 1]``.

    Examples
    --------
    The worked example of paper section 5.2.2 (mergesort on HPU1, n = 2**24):

    >>> s = advanced_split(Recurrence(2, 2, 1), 2**24, Profile(p=4, g=2**12, gamma=1/160))
    >>> round(s.alpha, 2), s.transfer_level, round(s.gpu_work_fraction, 2)
    (0.16, 10, 0.52)
    """
    _check_inputs(recurrence, profile)
    n = _check_n(n)
    if alpha is not None:
        alpha = float(alpha)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
    m = _Advanced(recurrence, n, profile, data_bytes)
    total = recurrence.total_work(n)
    lo = min(profile.p / m.N, 1.0)  # paper 5.2.1: alpha >= p/n so the CPU starts with >= p tasks
    if m.N <= profile.p or lo >= 1.0:
        alpha = 1.0
    if alpha is None:
        alpha = _maximise_gpu_work(m, lo)
    return _advanced_result(m, alpha, total)


def _maximise_gpu_work(m: _Advanced, lo: float) -> float:
    hi = 1.0 - 1e-9
    grid = np.unique(np.concatenate([np.geomspace(max(lo, 1e-9), hi, 60), np.linspace(lo, hi, 60)]))
    vals = np.array([m.gpu_work(a) for a in grid])
    k = int(np.argmax(vals))
    a0, a1 = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    best_a, best_w = float(grid[k]), float(vals[k])
    if a1 > a0:
        r = optimize.minimize_scalar(lambda a: -m.gpu_work(a), bounds=(a0, a1), method="bounded", options={"xatol": 1e-7})
        if r.success and -r.fun >= best_w:
            best_a = float(r.x)
    # The device may not help at all: compare with alpha = 1 (no device work).
    return best_a if best_w > 0 else 1.0


def _advanced_result(m: _Advanced, alpha: float, total: float) -> Split:
    rec, n, prof, L = m.rec, m.n, m.prof, m.L
    s = prof.cpu_op_seconds
    if alpha >= 1.0:
        cpu = _levels_time(lambda i: _cpu_level_time(rec, n, i, rec.a**i, prof.p), 0.0, L)
        cpu += rec.leaf_cost * max(1.0, m.N / prof.p)
        return Split("advanced", 1.0, float(L), math.ceil(L), L, 0.0, cpu * s, 0.0, 0.0, cpu * s, total / cpu, "")
    if alpha <= 0.0:  # the whole tree on the device
        case = m.case(0.0)
        gpu, tr = m.t_g(0.0, 0.0, case), m.transfer(0.0)
        return Split("advanced", 0.0, 0.0, 0, L, 1.0, 0.0, gpu * s, tr * s, (gpu + tr) * s, total / (gpu + tr), case)
    y, case = m.y(alpha)
    t_c = m.t_c(alpha)
    lc = m.cpu_level(alpha)
    tr = m.transfer(alpha)
    t_gpu_busy = m.t_g(alpha, y, case)

    # Phase 2: the CPU finishes every level above y; the CPU share is done below lc.
    def remaining(i: float) -> float:
        count = rec.a**i * ((1 - alpha) if i >= lc else 1.0)
        return _cpu_level_time(rec, n, i, count, prof.p)

    phase2 = _levels_time(remaining, 0.0, y)
    wall = max(t_c, t_gpu_busy + tr) + phase2
    gpu_work = (1 - alpha) * m.work(y)
    return Split(
        strategy="advanced",
        alpha=float(alpha),
        y=float(y),
        transfer_level=int(min(math.ceil(y - 1e-9), math.ceil(L))),
        depth=L,
        gpu_work_fraction=gpu_work / total,
        predicted_cpu_time=(t_c + phase2) * s,
        predicted_gpu_time=t_gpu_busy * s,
        predicted_transfer_time=tr * s,
        predicted_time=wall * s,
        predicted_speedup=total / wall,
        case=case,
    )


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


# ---------------------------------------------------------------------------
# Fast mode (beyond the paper)
# ---------------------------------------------------------------------------

#: Fast-mode cost curves a calibrated profile carries in ``Profile.fast``, next to ``"sizes"``
#: (``"cpu_sort_1"`` only where the runtime has more than one thread).
FAST_COSTS = ("cpu_sort", "cpu_sort_1", "device_sort", "transfer", "merge2", "merge16")


def fast_cost(profile: Profile, name: str, n: Any, itemsize: int = 4) -> Any:
    """Predicted seconds of one fast-mode step on ``n`` elements (0 where ``n <= 0``; ``n`` may be an array).

    ``cpu_sort``: :func:`hpu.cpusort.parallel_sort` on all threads;
    ``cpu_sort_1``: the same on one thread (numpy's sort);
    ``device_sort``: the device-resident sort; ``transfer``: everything
    else of a device-only sort of ``n`` elements (staging, copies to the
    device and back, the copy into the result); ``merge2``/``merge16``: the
    CPU multiway merge of 2 / 16 runs.

    The profile holds each step's time measured at ``profile.fast["sizes"]``
    (4-byte keys); the cost is interpolated linearly in ``log n``-``log t``
    and extrapolated with the end segments' slopes.  Measured curves, not a
    closed form: a parallel sort's cost jumps where it starts using more
    threads, which no single ``c0 + c1 n log n`` follows.  Costs scale with
    ``itemsize / 4`` (bandwidth-bound).

    Raises
    ------
    ValueError
        The profile has no fast-mode calibration.
    """
    try:
        xs = np.log2(np.asarray(profile.fast["sizes"], dtype=float))
        ys = np.log2(np.asarray(profile.fast[name], dtype=float))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"profile {profile.name!r} has no fast-mode cost {name!r}; run python -m hpu.calibrate") from None
    if xs.size < 2 or xs.shape != ys.shape:
        raise ValueError(f"profile {profile.name!r}: fast-mode cost {name!r} needs >= 2 sizes")
    x = np.log2(np.maximum(np.asarray(n, dtype=float), 1.0))
    y = np.interp(x, xs, ys)
    lo_slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
    hi_slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    y = np.where(x < xs[0], ys[0] + max(lo_slope, 0.0) * (x - xs[0]), y)
    y = np.where(x > xs[-1], ys[-1] + max(hi_slope, 0.0) * (x - xs[-1]), y)
    cost = np.where(np.asarray(n, dtype=float) > 0, 2.0**y * itemsize / 4, 0.0)
    return float(cost) if cost.ndim == 0 else cost


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


def fast_split(n: float, profile: Profile, *, strategy: str = "auto", max_level: int = 4,
               device: bool = True, itemsize: int = 4, shared_cores: bool = False) -> Split:
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
        With ``profile.fast`` calibrated.
    strategy : {"auto", "cpu", "gpu", "basic", "advanced"}
        ``"cpu"``: alpha = 1; ``"gpu"``: alpha = 0, t = 0; ``"basic"``:
        alpha = 0, best t >= 1; ``"advanced"``: best alpha in (0, 1) and t;
        ``"auto"``: the best of all of them.
    max_level : int
        Largest transfer level considered.
    device : bool
        False when no usable device exists (then only ``"cpu"``).
    itemsize : int
        Bytes per key (costs scale from the 4-byte calibration).
    shared_cores : bool
        The device shares the host's cores (:attr:`hpu.Runtime.device_shares_host_cores`).

    Returns
    -------
    Split
        ``strategy`` is the chosen one; times in seconds; ``cpu_threads`` is
        1 when the CPU alone sorts on one thread, else 0 (all threads);
        ``transfer_level`` (and ``y``) is ``t``, the device sorting its
        share as ``2**t`` segments; ``gpu_work_fraction = 1 - alpha``;
        ``predicted_speedup`` is mergesort's one-core time
        ``n (log2 n + 1) cpu_op_seconds`` over ``predicted_time``;
        ``case = "fast"``.

    Raises
    ------
    ValueError
        ``n < 1``, unknown strategy, or a profile without fast-mode costs.
    """
    n = _check_n(n)
    if strategy not in ("auto", "cpu", "gpu", "basic", "advanced"):
        raise ValueError(f"unknown strategy {strategy!r}")
    cands: list[tuple[str, float, int, int]] = [("cpu", 1.0, 0, 0)]
    if "cpu_sort_1" in (profile.fast or {}):
        cands.append(("cpu", 1.0, 0, 1))
    if device:
        cands += [("gpu", 0.0, 0, 0)] + [("basic", 0.0, t, 0) for t in range(1, max_level + 1)]
        grid = np.linspace(0.0, 1.0, 257)[1:-1]  # interior alphas, steps of 1/256
        for t in range(0, max_level + 1):
            tot = _fast_time(profile, n, grid, t, itemsize, shared_cores=shared_cores)[3]
            cands.append(("advanced", float(grid[int(np.argmin(tot))]), t, 0))
    if strategy != "auto":
        cands = [c for c in cands if c[0] == strategy]
    best = min(cands, key=lambda c: float(_fast_time(profile, n, c[1], c[2], itemsize, c[3], shared_cores)[3]))
    name, alpha, t, threads = best
    cpu, dev, final, total = (float(v) for v in _fast_time(profile, n, alpha, t, itemsize, threads, shared_cores))
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
