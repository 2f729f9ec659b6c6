"""The HPU performance model and the work splits it predicts.

This module implements the Hybrid Processing Unit (HPU) model of
López-Ortiz, Salinger and Suderman, "Toward a Generic Hybrid CPU-GPU
Parallelization of Divide-and-Conquer Algorithms", IJNC 4(1), 2014
(cited below as "paper, section X"):

* a CPU with ``p`` cores, each doing one operation per time unit;
* a GPU with ``g`` cores (the *empirical* degree of parallelism), each doing
  ``gamma < 1`` operations per time unit (paper, section 3.2);
* a recurrence ``T(n) = a T(n/b) + f(n)`` whose level ``i`` holds ``a**i``
  subproblems of size ``n / b**i`` (paper, section 4);
* the basic split (paper, section 5.1) and the advanced split (paper,
  section 5.2) of the recursion tree between the two units.

Beyond the paper, a :class:`~hpu.core.profile.Profile` carries the seconds per operation of one
CPU core (so predictions are wall times, not only work shares) and the
transfer cost ``lambda + delta * w`` of paper section 3.2, which the paper
leaves out of its analysis; passing ``data_bytes`` to a split function adds it.

Only numpy and scipy are imported here: the model is usable for "what if"
studies on machines without OpenCL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from .profile import Profile
from .util import check_nonneg, check_positive

__all__ = ["Recurrence", "Split", "UnitShares", "advanced_split", "basic_split", "check_n", "equal_finish_shares",
           "level_sum"]

# ---------------------------------------------------------------------------
# Recurrences and level sums
# ---------------------------------------------------------------------------


class Recurrence:
    """A divide-and-conquer recurrence ``T(n) = a T(n/b) + f(n)``, ``T(1) = leaf_cost`` (paper, section 4).

    Parameters
    ----------
    a : float
        Number of subproblems per division (>= 1; real values are allowed,
        as the paper's level sums are).
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
    TypeError
        ``a``, ``b``, ``leaf_cost`` or a numeric ``f`` is not a real number.
    ValueError
        If ``a < 1``, ``b <= 1``, ``leaf_cost < 0``, or one of them (or a
        numeric ``f``) is not finite.
    """

    def __init__(self, a: float, b: float, f: Callable[[float], float] | float = 1, *, leaf_cost: float = 1.0):
        self.a = check_positive("a", a)
        if self.a < 1:
            raise ValueError(f"a must be >= 1 (the number of subproblems per division), got {a!r}")
        bf = check_positive("b", b)
        if bf <= 1:
            raise ValueError(f"b must be finite and > 1 (the problem must shrink), got {b!r}")
        self.b = bf
        self.leaf_cost = check_nonneg("leaf_cost", leaf_cost)
        if callable(f):
            self.exponent = None
            self._f = f
        else:
            if isinstance(f, bool) or not isinstance(f, numbers.Real):
                raise TypeError(f"f must be a callable or a real exponent, got {f!r}")
            k = float(f) if abs(f) < 2**64 else math.inf  # an int past the float range is not finite either
            if not math.isfinite(k):
                raise ValueError(f"f exponent must be finite, got {f!r}")
            self.exponent = k
            self._f = lambda n, k=k: n**k

    def __repr__(self) -> str:
        f = f"n**{self.exponent:g}" if self.exponent is not None else getattr(self._f, "__name__", "f")
        return f"Recurrence(a={self.a:g}, b={self.b:g}, f={f})"

    def f(self, n: float) -> float:
        """Divide-and-combine cost of one problem of size ``n`` (CPU operations).

        Raises
        ------
        TypeError
            A callable ``f`` returned something other than a real number.
        ValueError
            A callable ``f`` returned a negative, NaN or infinite cost.
        """
        v = self._f(n)
        try:
            c = float(v)
        except (TypeError, ValueError):
            raise TypeError(f"f({n:g}) must return a real number, got {v!r}") from None
        if not 0 <= c < math.inf:
            raise ValueError(f"f({n:g}) must be finite and >= 0 (a cost in operations), got {v!r}")
        return c

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
        ``"cpu"``, ``"gpu"``, ``"basic"`` (paper 5.1) or ``"advanced"`` (paper 5.2);
        from :func:`hpu.fast_split` also ``"keyrange"`` or ``"exchange"``.
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
        One-core time (``Recurrence.total_work``) over ``predicted_time``
        (1 when both are 0: nothing to do).
    case : str
        For ``"advanced"``: which case of paper 5.2.1 fixed ``y``:
        ``"i"`` (device never saturated), ``"ii"`` (always saturated),
        ``"iii"`` (both); for :func:`hpu.fast_split`, ``"fast"`` (a position
        split), ``"keyrange"`` or ``"exchange"``; otherwise ``""``.
    cpu_threads : int
        Threads the CPU share uses: 0 for all of the runtime's, 1 for one
        (:func:`fast_split` only).
    shares : tuple of float
        For a key-range split (strategy ``"keyrange"``): the fraction of the
        keys of the CPU, then of each device (:func:`equal_finish_shares`);
        empty otherwise.
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
    shares: tuple[float, ...] = ()

    def __str__(self) -> str:
        w = max(len(f.name) for f in dataclasses.fields(self))
        notes = {"predicted_speedup": " (over the model's one-core time)",
                 "cpu_threads": " (all of the runtime's)" if self.cpu_threads == 0 else ""}
        return "\n".join(f"{f.name.rjust(w)}: {getattr(self, f.name)!r}{notes.get(f.name, '')}"
                         for f in dataclasses.fields(self))


def check_n(n: float) -> float:
    """``n`` as a float, checked finite and >= 1 (a problem size).

    Raises
    ------
    TypeError
        ``n`` is not a number (a string or a bool included).
    ValueError
        ``n < 1``, or not finite (an int past the float range included).
    """
    if isinstance(n, (bool, str, bytes)):
        raise TypeError(f"n must be a number, got {n!r}")
    try:
        v = float(n)
    except OverflowError:  # an int past the float range
        v = math.inf
    except (TypeError, ValueError):
        raise TypeError(f"n must be a number, got {n!r}") from None
    if not math.isfinite(v) or v < 1:
        raise ValueError(f"n must be finite and >= 1, got {n!r}")
    return v


def _check_inputs(recurrence: Recurrence, profile: Profile, data_bytes: float | None) -> float | None:
    """Check a split's arguments; return ``data_bytes`` as a float (or None)."""
    if not isinstance(recurrence, Recurrence):
        raise TypeError(f"recurrence must be an hpu.Recurrence, got {type(recurrence).__name__}")
    if not isinstance(profile, Profile):
        raise TypeError(f"profile must be an hpu.Profile, got {type(profile).__name__}")
    return None if data_bytes is None else check_nonneg("data_bytes", data_bytes)


def _speedup(one_core: float, wall: float) -> float:
    """``one_core / wall``; 1 when there is nothing to do (both 0, e.g. ``n = 1`` with ``leaf_cost = 0``)."""
    return one_core / wall if wall > 0 else 1.0


@contextlib.contextmanager
def _float_range() -> Iterator[None]:
    """Turn an OverflowError of the model's arithmetic (``a**i``, ``n**k``) into a ValueError that says why."""
    try:
        yield
    except OverflowError as e:
        raise ValueError(f"the model's sums leave the float range ({e}): n, a or f's growth is too large") from None


def _finite(split: Split) -> Split:
    """``split``, whose times and fractions must be finite: sums that overflowed to inf (or inf - inf = nan)
    without an OverflowError leave the float range as surely as those that raised one."""
    bad = [f.name for f in dataclasses.fields(split)
           if isinstance(getattr(split, f.name), float) and not math.isfinite(getattr(split, f.name))]
    if bad:
        raise ValueError(f"the model's sums leave the float range ({', '.join(bad)} not finite): n, a or f's growth "
                         f"is too large")
    return split


def _cpu_level_time(rec: Recurrence, n: float, i: float, count: float, p: float) -> float:
    """Time (operations) for ``count`` subproblems of level ``i`` on ``p`` cores: ``f(n/b^i) max(1, count/p)``.

    Paper 5.1 cases 1-3.
    """
    if count <= 0:
        return 0.0
    return rec.level_span(n, i) * max(1.0, count / p)


def _gpu_level_time(rec: Recurrence, n: float, i: float, count: float, prof: Profile) -> float:
    """Time for ``count`` subproblems of level ``i`` on the device: ``f(n/b^i)/gamma * max(1, count/g)``.

    Paper 5.1 cases 1-3.
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
    TypeError
        ``recurrence`` or ``profile`` of the wrong type, ``n`` or
        ``data_bytes`` not a number.
    ValueError
        If ``n < 1``, ``data_bytes < 0``, a value not finite, or the
        model's sums leave the float range.
    """
    data_bytes = _check_inputs(recurrence, profile, data_bytes)
    n = check_n(n)
    with _float_range():
        return _finite(_basic(recurrence, n, profile, data_bytes))


def _basic(rec: Recurrence, n: float, prof: Profile, data_bytes: float | None) -> Split:
    L = rec.depth(n)
    if prof.gamma * prof.g < prof.p or rec.a == 1:  # a = 1: one subproblem a level, nothing to spread out
        y = L
    else:
        y = min(max(math.log(prof.p / prof.gamma) / math.log(rec.a), 0.0), L)
    t_level = min(math.ceil(y - 1e-9), math.ceil(L)) if y < L else math.ceil(L)
    cpu = _levels_time(lambda i: _cpu_level_time(rec, n, i, rec.a**i, prof.p), 0.0, min(t_level, L))
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
        gpu_work_fraction=gpu_work / total_work if total_work > 0 else 0.0,
        predicted_cpu_time=cpu * s,
        predicted_gpu_time=gpu * s,
        predicted_transfer_time=transfer * s,
        predicted_time=wall * s,
        predicted_speedup=_speedup(total_work, wall),
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

    def level(self, count: float) -> float:
        """``log_a(count)`` clipped to ``[0, L]``: the level of ``count`` subproblems (for ``a = 1``: 0 or ``L``)."""
        if self.log_a == 0:  # a = 1: every level holds one subproblem
            return self.L if count > 1 else 0.0
        return min(max(math.log(count) / self.log_a, 0.0), self.L)

    def cpu_level(self, alpha: float) -> float:
        """``log_a(p/alpha)``: where the CPU share reaches p subproblems (paper 5.2.1)."""
        if alpha <= 0:
            return self.L
        return self.level(self.prof.p / alpha)

    def t_c(self, alpha: float) -> float:
        """``T_c = alpha/p (n^{log_b a} + sum_{i=log_a(p/alpha)}^{L-1} a^i f(n/b^i))`` (paper 5.2.1)."""
        return alpha / self.prof.p * self.work(self.cpu_level(alpha))

    def gpu_level(self, alpha: float) -> float:
        """``log_a(g/(1-alpha))``: below it the device share saturates the device."""
        return self.level(self.prof.g / (1 - alpha))

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
        from scipy import optimize  # on first use: importing it costs 0.2 s, and most callers never solve

        y = optimize.brentq(lambda yy: self.t_g(alpha, yy, case) - budget, 0.0, hi, xtol=1e-10, rtol=1e-12)
        return float(y), case

    def gpu_work(self, alpha: float) -> float:
        """``W_g = (1-alpha)(n^{log_b a} + sum_{i=y(alpha)}^{L-1} a^i f(n/b^i))`` (paper 5.2.1).

        0 where ``T_g(y) = T_c`` has no solution ``y <= L``: the device share cannot finish even its leaves
        while the CPU share reaches ``p`` subproblems, so it does no work "in this period" (and the CPU would
        wait for it).
        """
        y, case = self.y(alpha)
        if y >= self.L and self.t_c(alpha) - self.transfer(alpha) < self.t_g(alpha, self.L, case):
            return 0.0
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
    ``W_g(alpha)`` over the alphas for which ``y`` exists (the device share
    finishes at least its leaves within ``T_c``), by a grid search refined
    with :func:`scipy.optimize.minimize_scalar`.

    Parameters
    ----------
    recurrence, n, profile
        As for :func:`basic_split`.
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
    TypeError
        ``recurrence`` or ``profile`` of the wrong type, ``n``,
        ``data_bytes`` or ``alpha`` not a number.
    ValueError
        If ``n < 1``, ``data_bytes < 0``, ``alpha`` is outside ``[0, 1]``
        (or strictly inside it for ``a = 1``, whose levels hold one
        subproblem), a value is not finite, or the model's sums leave the
        float range.

    Examples
    --------
    The worked example of paper section 5.2.2 (mergesort on HPU1, n = 2**24):

    >>> s = advanced_split(Recurrence(2, 2, 1), 2**24, Profile(p=4, g=2**12, gamma=1/160))
    >>> round(s.alpha, 2), s.transfer_level, round(s.gpu_work_fraction, 2)
    (0.16, 10, 0.52)
    """
    data_bytes = _check_inputs(recurrence, profile, data_bytes)
    n = check_n(n)
    if alpha is not None:
        alpha = check_nonneg("alpha", alpha)  # a real number (no bools or strings), finite
        if alpha > 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
        if recurrence.a == 1 and 0.0 < alpha < 1.0:
            raise ValueError(f"with a = 1 every level holds one subproblem, which cannot be shared: alpha must be 0 "
                             f"or 1, got {alpha!r}")
    with _float_range():
        return _finite(_advanced(recurrence, n, profile, data_bytes, alpha))


def _advanced(recurrence: Recurrence, n: float, profile: Profile, data_bytes: float | None,
              alpha: float | None) -> Split:
    m = _Advanced(recurrence, n, profile, data_bytes)
    total = recurrence.total_work(n)
    lo = min(profile.p / m.N, 1.0)  # paper 5.2.1: alpha >= p/n (n^{log_b a} leaves) so the CPU starts with >= p tasks
    if alpha is not None:  # forced: predicted as asked
        return _advanced_result(m, alpha, total)
    if m.N <= profile.p or lo >= 1.0 or recurrence.a == 1:  # a = 1: one subproblem a level, nothing to share
        return _advanced_result(m, 1.0, total)
    split = _advanced_result(m, _maximise_gpu_work(m, lo), total)
    cpu_alone = _advanced_result(m, 1.0, total)  # the device may not help at all (latency, a slow device)
    return split if split.predicted_time <= cpu_alone.predicted_time else cpu_alone


def _maximise_gpu_work(m: _Advanced, lo: float) -> float:
    hi = 1.0 - 1e-9
    grid = np.unique(np.concatenate([np.geomspace(max(lo, 1e-9), hi, 60), np.linspace(lo, hi, 60)]))
    vals = np.array([m.gpu_work(a) for a in grid])
    k = int(np.argmax(vals))
    a0, a1 = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    best_a, best_w = float(grid[k]), float(vals[k])
    if a1 > a0:
        from scipy import optimize

        r = optimize.minimize_scalar(lambda a: -m.gpu_work(a), bounds=(a0, a1), method="bounded",
                                     options={"xatol": 1e-7})
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
        return Split("advanced", 1.0, float(L), math.ceil(L), L, 0.0, cpu * s, 0.0, 0.0, cpu * s, _speedup(total, cpu),
                     "")
    if alpha <= 0.0:  # the whole tree on the device, level by level (a level of fewer than g subproblems leaves
        case = m.case(0.0)  # work-items idle: f(n/b^i) max(1, a^i/g) / gamma, paper 5.1)
        gpu = _levels_time(lambda i: _gpu_level_time(rec, n, i, rec.a**i, prof), 0.0, L)
        gpu += rec.leaf_cost * max(1.0, m.N / prof.g) / prof.gamma
        tr = m.transfer(0.0)
        return Split("advanced", 0.0, 0.0, 0, L, 1.0, 0.0, gpu * s, tr * s, (gpu + tr) * s, _speedup(total, gpu + tr),
                     case)
    y, case = m.y(alpha)
    t_c = m.t_c(alpha)
    lc = m.cpu_level(alpha)
    tr = m.transfer(alpha)
    t_gpu_busy = m.t_g(alpha, y, case)

    # Phase 2: the CPU finishes what is left: the device share above y and its own share above lc (a device
    # faster than the CPU share may reach y < lc, leaving levels y .. lc of the CPU share to do).
    def remaining(i: float) -> float:
        count = rec.a**i * ((1 - alpha) if i >= lc else 1.0)
        return _cpu_level_time(rec, n, i, count, prof.p)

    phase2 = _levels_time(remaining, 0.0, y) + _levels_time(
        lambda i: _cpu_level_time(rec, n, i, alpha * rec.a**i, prof.p), y, lc)
    wall = max(t_c, t_gpu_busy + tr) + phase2
    gpu_work = (1 - alpha) * m.work(y)
    return Split(
        strategy="advanced",
        alpha=float(alpha),
        y=float(y),
        transfer_level=int(min(math.ceil(y - 1e-9), math.ceil(L))),
        depth=L,
        gpu_work_fraction=gpu_work / total if total > 0 else 0.0,
        predicted_cpu_time=(t_c + phase2) * s,
        predicted_gpu_time=t_gpu_busy * s,
        predicted_transfer_time=tr * s,
        predicted_time=wall * s,
        predicted_speedup=_speedup(total, wall),
        case=case,
    )


# ---------------------------------------------------------------------------
# Several units: shares that finish together (beyond the paper)
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class UnitShares:
    """How :func:`equal_finish_shares` divides ``n`` items among units.

    Attributes
    ----------
    counts : tuple of int
        Items per unit (summing to ``n``; 0 for a unit left out).
    shares : tuple of float
        ``counts / n``.
    times : tuple of float
        Each unit's predicted time ``T_i(counts[i])`` (0 for a unit left out).
    predicted_time : float
        ``max(times)``: the wall time when the units run at once.
    """

    counts: tuple[int, ...]
    shares: tuple[float, ...]
    times: tuple[float, ...]
    predicted_time: float


def equal_finish_shares(n: int, costs: Sequence[Callable[[np.ndarray], np.ndarray]], *,
                        samples: int = 256) -> UnitShares:
    """Divide ``n`` independent items among ``k`` units so that the units that take part finish together.

    The paper's HPU has two units, a CPU of ``p`` cores and a GPU of ``g``
    cores of relative speed ``gamma`` (López-Ortiz et al. 2014, section 3),
    and notes that the model extends to more units.  Here each unit ``i``
    has its own cost function ``T_i(m)``: the seconds it takes for ``m``
    items, its transfers included (e.g. ``lambda_i + delta_i w m + C_i(m)``
    with ``C_i`` its measured cost curve; in the paper's units,
    ``C_i(m) = W(m) / (p)`` for the CPU and ``W(m) / (gamma_i g_i)`` for a
    saturated device, ``W`` the work).  The shares minimise the wall time of
    the units running at once,

    ``T = max_i T_i(m_i)`` subject to ``sum_i m_i = n``, ``m_i >= 0``.

    For increasing ``T_i`` with ``T_i(0) = 0``, the optimum over a set ``U``
    of units taking part has ``T_i(m_i) = T`` for every ``i`` in ``U`` (else
    moving items from the last unit to finish to another lowers the max), so
    ``m_i = T_i^{-1}(T)`` and ``T`` solves ``sum_{i in U} T_i^{-1}(T) = n``
    (bisection on ``T``).  Fixed costs (``lambda_i``) can make a unit's
    share slower than leaving it out.  Which units take part: every unit
    whose time for a first item, ``T_i(1)``, is below the optimum's ``T``
    (a unit left out that could finish an item sooner would take items from
    the others and lower ``T``), and no other.  So the units taking part are
    one of the ``k`` prefixes of the units ordered by ``T_i(1)``; each prefix
    is tried and the fastest kept (``k`` bisections, not one per subset).
    For linear costs ``T_i(m) = m / r_i`` the shares are ``r_i / sum_j r_j``:
    each unit gets its share of the total speed.

    Parameters
    ----------
    n : int
        Items to divide (>= 0).
    costs : sequence of callable
        ``T_i(m)`` for an array ``m`` of item counts (float64), seconds;
        non-decreasing in ``m``.  At least one unit.
    samples : int
        Points of the geometric grid on which each ``T_i`` is inverted.

    Returns
    -------
    UnitShares

    Raises
    ------
    ValueError
        ``n < 0`` or no units.
    """
    n = int(n)
    k = len(costs)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if k < 1:
        raise ValueError("equal_finish_shares needs at least one unit")
    grid = np.unique(np.concatenate([[0.0], np.geomspace(1.0, max(n, 1), samples), [float(n)]]))
    curves = [np.maximum.accumulate(np.asarray(c(grid), dtype=float)) for c in costs]  # made non-decreasing
    first = [float(np.interp(1.0, grid, c)) for c in curves]  # T_i(1)
    order = sorted(range(k), key=lambda i: first[i])
    best: UnitShares | None = None
    for r in range(1, k + 1):
        used = sorted(order[:r])
        counts = _finish_together(n, grid, [curves[i] for i in used])
        full = [0] * k
        for i, m in zip(used, counts):
            full[i] = m
        times = tuple(float(costs[i](np.array([float(m)]))[0]) if m else 0.0 for i, m in enumerate(full))
        cand = UnitShares(tuple(full), tuple(m / n if n else 0.0 for m in full), times, max(times))
        if best is None or cand.predicted_time < best.predicted_time:
            best = cand
    assert best is not None
    return best


def _finish_together(n: int, grid: np.ndarray, curves: list[np.ndarray]) -> list[int]:
    """Integer counts summing to ``n`` with ``T_i(m_i)`` equal (inverse interpolation on ``grid``, then bisection)."""
    def counts_at(t: float) -> np.ndarray:
        return np.array([np.interp(t, c, grid, right=float(n)) if t >= c[0] else 0.0 for c in curves])

    lo, hi = 0.0, min(float(c[-1]) for c in curves)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if counts_at(mid).sum() >= n:
            hi = mid
        else:
            lo = mid
    m = np.minimum(np.floor(counts_at(hi)).astype(np.int64), n)
    if abs(n - int(m.sum())) > 64 * len(curves):  # not a rounding difference: to (or from) the largest share
        m[int(np.argmax(m))] += n - int(m.sum())
        return [int(v) for v in m]

    def after(i: int, v: int) -> float:  # unit i's time with v items
        return float(np.interp(v, grid, curves[i]))

    while m.sum() < n:  # rounding: each item left to the unit that then finishes first
        i = min(range(len(curves)), key=lambda j: after(j, int(m[j]) + 1))
        m[i] += 1
    while m.sum() > n:  # each item too many from the unit that finishes last
        i = max((j for j in range(len(curves)) if m[j] > 0), key=lambda j: after(j, int(m[j])))
        m[i] -= 1
    return [int(v) for v in m]
