"""Calibration: fit the HPU profile (p, g, gamma, lambda, delta) on this machine.

Run ``python -m hpu.calibrate --help``.  The microbenchmarks follow paper
section 6.4 and go beyond it:

* **g** (fig. 5): time of a fixed-size elementwise sum in which each
  work-item handles a contiguous segment, against the number of work-items
  ``W``; ``g`` is the knee of a two-segment fit ``log t = max(c - s log W,
  log t_min)`` (robust least squares, :func:`scipy.optimize.least_squares`).
* **gamma** (fig. 6): one work-item running a D&C spec's combine step on
  the device (the transformer's own level kernel) against one CPU thread
  running its numpy counterpart, over several sizes; ``gamma`` is the
  geometric mean of the time ratios.  The paper times a merge; the caller
  supplies the step (:class:`CombineBenchmark`; ``python -m hpu.calibrate``
  uses mergesort's merge).
* **p**: the thread pool's throughput on the same step with ``k`` threads,
  relative to one; ``p`` is the plateau of a two-segment fit
  ``speedup = min(e k, p)``.
* **cpu_op_seconds**: seconds per combined element on one core.
* **lambda, delta**: host-to-device and device-to-host copies over sizes,
  fitted as ``t = lambda + delta w`` (relative least squares), for pageable
  numpy arrays (used by the executor) and pinned buffers (recorded).
* **launch_seconds**: an empty kernel launch plus wait.
* **workload cost curves** (beyond the paper): each workload's own
  measurements of its fast paths (for the sort, :func:`hpu.sorting.calibrate.measure_costs`),
  stored in ``Profile.curves`` under the workload's name.

The core knows no workload: the combine step and the cost-curve
measurements come in as arguments.  ``python -m hpu.calibrate`` (the
command line, :mod:`hpu.calibrate`) passes the sort's.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import platform
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from scipy import optimize
from tqdm.auto import tqdm

from .profile import Profile
from .runtime import Runtime
from .util import host_description

log = logging.getLogger("hpu")

__all__ = ["IDLE_PAUSE", "CombineBenchmark", "calibrate", "fit_affine", "fit_knee", "fit_plateau", "format_profile",
           "median_time"]

#: Seconds of idle before each run timed by :func:`median_time` with ``idle=True``: calibration measures
#: calls as they come (after a pause: thread pool and device idle), which is how the benchmarks time them.
IDLE_PAUSE = 0.02


@dataclasses.dataclass(frozen=True)
class CombineBenchmark:
    """The combine step whose device/CPU speed ratio gives ``gamma`` (paper 6.4, fig. 6).

    Attributes
    ----------
    spec : hpu.DCSpec
        Its ``<name>_combine`` level kernel runs on one work-item; its
        ``combine_np`` on one CPU thread.
    make_input : callable(m, rng) -> numpy.ndarray
        One subproblem of ``2 m`` elements whose two children are valid
        combine input (for a merge: two sorted runs of ``m``), int32.
    """

    spec: Any
    make_input: Callable[[int, np.random.Generator], np.ndarray]


# ---------------------------------------------------------------------------
# Fits (pure functions, tested on synthetic data)
# ---------------------------------------------------------------------------


_MIN_SLOPE = 0.3


def fit_knee(work_items: np.ndarray, seconds: np.ndarray) -> dict:
    """Fit ``log t = max(c - s log W, log t_min)`` and return the knee ``g`` (paper 6.4, fig. 5).

    Parameters
    ----------
    work_items : array, shape (k,)
        Numbers of work-items ``W`` (> 0).
    seconds : array, shape (k,)
        Kernel times (s, > 0).

    Returns
    -------
    dict
        ``g`` (the ``W`` where the falling line meets the floor), ``slope``
        ``s``, ``t_min`` (s), ``residuals`` (log-space, one per point).
        When the fitted slope is below 0.3 (ten times the work-items
        gives less than a 2x speed-up) ``g`` is the smallest ``W``.

    Raises
    ------
    ValueError
        Fewer than 3 points, or non-positive values.
    """
    w = np.asarray(work_items, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if w.shape != t.shape or w.size < 3 or np.any(w <= 0) or np.any(t <= 0):
        raise ValueError("fit_knee needs >= 3 positive (work_items, seconds) pairs of equal length")
    x, y = np.log(w), np.log(t)

    def model(q: np.ndarray) -> np.ndarray:
        c, s, f = q
        return np.maximum(c - s * x, f)

    best = None
    for k in range(1, len(x)):  # start from every split point; keep the best robust fit
        s0 = max((y[0] - y[k]) / max(x[k] - x[0], 1e-9), 1e-3)
        q0 = np.array([y[0] + s0 * x[0], s0, y[k:].min()])
        r = optimize.least_squares(lambda q: model(q) - y, q0, loss="soft_l1", f_scale=0.1,
                                   bounds=([-np.inf, 0.0, -np.inf], [np.inf, 5.0, np.inf]))
        if best is None or r.cost < best.cost:
            best = r
    c, s, f = best.x
    # A slope below MIN_SLOPE means ten times the work-items buys < 2x: no usable parallelism.
    g = float(np.exp((c - f) / s)) if s >= _MIN_SLOPE else float(w.min())
    g = float(np.clip(g, w.min(), w.max()))
    return {"g": g, "slope": float(s), "t_min": float(np.exp(f)), "residuals": (model(best.x) - y).tolist()}


def fit_plateau(threads: np.ndarray, speedup: np.ndarray) -> dict:
    """Fit ``speedup = min(e k, p)`` (parallel efficiency ``e``, plateau ``p``) to thread-pool scaling.

    Returns
    -------
    dict
        ``p`` (effective cores, at least 1 and at most the most threads measured), ``efficiency`` ``e``,
        ``residuals``.
    """
    k = np.asarray(threads, dtype=float)
    s = np.asarray(speedup, dtype=float)
    if k.shape != s.shape or k.size < 1 or np.any(k <= 0) or np.any(s <= 0):
        raise ValueError("fit_plateau needs positive (threads, speedup) pairs of equal length")
    if k.size == 1:
        return {"p": max(1.0, float(s[0])), "efficiency": float(s[0] / k[0]), "residuals": [0.0]}

    def model(q: np.ndarray) -> np.ndarray:
        return np.minimum(q[0] * k, q[1])

    lower, upper = [1e-3, 0.5], [2.0, 4 * k.max()]
    start = [1.0, float(np.clip(s.max(), lower[1], upper[1]))]  # a noisy timing can put s.max() out of bounds
    r = optimize.least_squares(lambda q: model(q) - s, start, loss="soft_l1", f_scale=0.2, bounds=(lower, upper))
    p = float(np.clip(r.x[1], 1.0, k.max()))  # no more effective cores than threads measured (noise is superlinear)
    return {"p": p, "efficiency": float(r.x[0]), "residuals": (model(r.x) - s).tolist()}


def fit_affine(nbytes: np.ndarray, seconds: np.ndarray) -> dict:
    """Fit ``t = lambda + delta w`` by least squares on relative errors (paper 3.2's transfer cost).

    Returns
    -------
    dict
        ``latency`` (lambda, s), ``seconds_per_byte`` (delta, s/B),
        ``bandwidth`` (B/s), ``residuals`` (relative).
    """
    w = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if w.shape != t.shape or w.size < 2 or np.any(t <= 0):
        raise ValueError("fit_affine needs >= 2 (bytes, seconds) pairs with positive times")
    r = optimize.least_squares(lambda q: (q[0] + q[1] * w) / t - 1.0, [t.min(), t.max() / w.max()],
                               bounds=([0.0, 0.0], [np.inf, np.inf]), x_scale=[t.min(), t.max() / w.max()])
    lam, dlt = (float(v) for v in r.x)
    return {"latency": lam, "seconds_per_byte": dlt, "bandwidth": 1 / dlt if dlt > 0 else float("inf"),
            "residuals": ((lam + dlt * w) / t - 1.0).tolist()}


# ---------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------


def _event_seconds(ev: Any) -> float:
    ev.wait()
    return (ev.profile.end - ev.profile.start) * 1e-9


def _best(fn: Any, repeats: int) -> float:
    fn()  # warm-up
    return min(fn() for _ in range(repeats))


def median_time(fn: Callable[[], Any], *, repeats: int = 3, max_repeats: int | None = None, budget: float = 0.0,
                slow: float = float("inf"), idle: bool = False) -> tuple[float, Any]:
    """Median wall time of ``fn()`` and the value returned by the median-time run, after one warm-up call.

    Parameters
    ----------
    fn : callable
        The work to time.
    repeats : int
        Runs timed at least (unless they pass ``slow`` seconds in all).
    max_repeats : int, optional
        Runs go on past ``repeats`` while the timing has taken less than
        ``budget`` seconds, up to this many (default ``repeats``).
    budget, slow : float
        Seconds; see above.  ``slow`` caps the time spent on huge problems.
    idle : bool
        Sleep :data:`IDLE_PAUSE` before each run, so that each is timed as a
        call that comes after a pause (thread pool and device idle), as users
        make them; the model then predicts a typical call, not the best of a
        burst (at 2^18 keys on the H100 machine the best of back-to-back
        sorts was 35% shorter than the median of calls after a pause).

    Returns
    -------
    (seconds, value) : (float, object)
        The median run's seconds (the upper of the two middle runs for an
        even count) and what ``fn`` returned in it.
    """
    fn()
    runs: list[tuple[float, Any]] = []
    most = max(repeats, max_repeats or repeats)
    start = time.perf_counter()
    while not runs or (len(runs) < repeats and time.perf_counter() - start < slow) or (
            len(runs) < most and time.perf_counter() - start < budget):
        if idle:
            time.sleep(IDLE_PAUSE)
        t = time.perf_counter()
        value = fn()
        runs.append((time.perf_counter() - t, value))
    runs.sort(key=lambda r: r[0])
    return runs[len(runs) // 2]


def _measure_g(rt: Runtime, n: int, max_items: int, repeats: int, bar: tqdm) -> dict:
    import pyopencl as cl

    prg = rt.program("calibrate")
    kern = cl.Kernel(prg, "segment_add")
    mf = cl.mem_flags
    host = np.random.default_rng(1).random(n, dtype=np.float32)
    a = cl.Buffer(rt.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=host)
    b = cl.Buffer(rt.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=host)
    c = cl.Buffer(rt.context, mf.WRITE_ONLY, host.nbytes)
    items, secs = [], []
    w = 1
    while w <= max_items:
        per = -(-n // w)
        t = _best(lambda: _event_seconds(kern(rt.queue, (w,), None, a, b, c, np.uint64(n), np.uint64(per))), repeats)
        items.append(w)
        secs.append(t)
        w *= 2
        bar.update()
    out = np.empty_like(host)
    cl.enqueue_copy(rt.queue, out, c)
    if not np.allclose(out, host + host):
        raise RuntimeError("calibration kernel segment_add computed a wrong sum; the device is unreliable")
    fit = fit_knee(np.array(items), np.array(secs))
    return {"elements": n, "work_items": items, "seconds": secs, **fit}


def _measure_combine(rt: Runtime, bench: CombineBenchmark, sizes: list[int], repeats: int, bar: tqdm) -> dict:
    """One work-item running the combine step on the device vs one CPU thread (paper 6.4, fig. 6)."""
    spec = bench.spec
    rng = np.random.default_rng(2)
    dev_s, cpu_s = [], []
    for m in sizes:
        data = bench.make_input(m, rng)
        ref = data.copy().reshape(1, -1)
        spec.combine_np(ref)

        def cpu() -> float:
            row = data.copy().reshape(1, -1)
            t = time.perf_counter()
            spec.combine_np(row)
            return time.perf_counter() - t

        cpu_s.append(_best(cpu, repeats))
        if rt.has_device:
            dev_s.append(_device_combine(rt, spec, data, ref.ravel(), repeats))
        bar.update()
    res: dict[str, Any] = {"sizes": [2 * m for m in sizes], "cpu_seconds": cpu_s}
    per_elem = np.array(cpu_s) / (2 * np.array(sizes))
    res["cpu_op_seconds"] = float(np.median(per_elem))
    if dev_s:
        ratio = np.array(cpu_s) / np.array(dev_s)
        gamma = float(np.exp(np.mean(np.log(ratio))))
        res.update(device_seconds=dev_s, ratio=ratio.tolist(), gamma=min(gamma, 1.0),
                   residuals=(np.log(ratio) - np.log(gamma)).tolist())
    return res


def _device_combine(rt: Runtime, spec: Any, data: np.ndarray, ref: np.ndarray, repeats: int) -> float:
    """Best seconds of the spec's combine kernel on one work-item over ``data``; checked against ``ref``."""
    import pyopencl as cl

    plan = spec.plan(data.shape[0], data.dtype)
    kern = cl.Kernel(rt.build(plan.device_source()), f"{spec.name}_combine")
    mf = cl.mem_flags
    src = cl.Buffer(rt.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=data)
    dst = cl.Buffer(rt.context, mf.WRITE_ONLY, data.nbytes)
    secs = _best(lambda: _event_seconds(kern(rt.queue, (1,), None, src, dst, np.uint64(1), np.uint64(data.shape[0]))),
                 repeats)
    out = np.empty_like(data)
    cl.enqueue_copy(rt.queue, out, dst)
    if not np.array_equal(out, ref):
        raise RuntimeError(f"calibration: the device's {spec.name} combine gave a wrong result; the device is unreliable")
    return secs


def _thread_counts(threads: int) -> list[int]:
    """Pool sizes at which the CPU merge's scaling is measured: 1, then up to 8 steps to ``threads``."""
    return sorted({1, *range(2, threads + 1, max(1, threads // 8))} | {threads})


def _measure_p(rt: Runtime, bench: CombineBenchmark, row_size: int, rows_per_thread: int, repeats: int,
               bar: tqdm) -> dict:
    """Thread-pool scaling of the combine step on the CPU (weak scaling)."""
    spec = bench.spec
    rng = np.random.default_rng(3)
    base = np.concatenate([bench.make_input(row_size // 2, rng) for _ in range(rows_per_thread)])
    counts = _thread_counts(rt.threads)
    secs = []
    for k in counts:
        data = np.tile(base, k).reshape(k * rows_per_thread, row_size)

        def run() -> float:
            work = data.copy()
            t = time.perf_counter()
            futs = [rt.pool.submit(spec.combine_np, work[i * rows_per_thread:(i + 1) * rows_per_thread]) for i in range(k)]
            for f in futs:
                f.result()
            return time.perf_counter() - t

        secs.append(_best(run, repeats))
        bar.update()
    speedup = np.array(counts) * secs[0] / np.array(secs)
    fit = fit_plateau(np.array(counts), speedup)
    return {"threads": counts, "seconds": secs, "speedup": speedup.tolist(), "row_size": row_size, **fit}


def _measure_transfers(rt: Runtime, max_bytes: int, repeats: int, bar: tqdm) -> dict:
    import pyopencl as cl

    mf = cl.mem_flags
    sizes = [1 << k for k in range(12, max_bytes.bit_length())]
    dev = cl.Buffer(rt.context, mf.READ_WRITE, sizes[-1])
    pinned_buf = cl.Buffer(rt.context, mf.READ_WRITE | mf.ALLOC_HOST_PTR, sizes[-1])
    pinned, _ = cl.enqueue_map_buffer(rt.queue, pinned_buf, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                      (sizes[-1],), np.uint8)
    pageable = np.ones(sizes[-1], dtype=np.uint8)
    out: dict[str, Any] = {"bytes": sizes}
    for name, host in (("pageable", pageable), ("pinned", pinned)):
        for direction in ("h2d", "d2h"):
            secs = []
            for s in sizes:
                view = host[:s]

                def copy() -> float:
                    t = time.perf_counter()
                    if direction == "h2d":
                        cl.enqueue_copy(rt.queue, dev, view, is_blocking=True)
                    else:
                        cl.enqueue_copy(rt.queue, view, dev, is_blocking=True)
                    return time.perf_counter() - t

                secs.append(_best(copy, repeats))
            out[f"{name}_{direction}"] = {"seconds": secs, **fit_affine(np.array(sizes), np.array(secs))}
            bar.update()
    del pinned
    pinned_buf.release()

    kern = cl.Kernel(rt.program("calibrate"), "empty")

    def launch() -> float:
        t = time.perf_counter()
        kern(rt.queue, (1,), None, dev).wait()
        return time.perf_counter() - t

    out["launch_seconds"] = float(np.median([launch() for _ in range(max(20, 5 * repeats))]))
    bar.update()
    return out


CurveMeasurement = Callable[[Runtime, bool, tqdm], Any]


def calibrate(runtime: Runtime, combine: CombineBenchmark, *, curves: Mapping[str, CurveMeasurement] | None = None,
              quick: bool = False, progress: bool = True, command: str = "") -> Profile:
    """Measure this machine and fit a :class:`~hpu.core.profile.Profile` (paper 6.4 and beyond).

    Parameters
    ----------
    runtime : Runtime
        The device and thread pool to calibrate (CPU-only runtimes fit ``p``
        and ``cpu_op_seconds`` only, leaving ``g = gamma = 1``).
    combine : CombineBenchmark
        The combine step timed for ``gamma``, ``p`` and ``cpu_op_seconds``.
    curves : mapping of str to callable, optional
        Per workload name, ``measure(runtime, quick, bar) -> CostCurves``:
        the workload's own cost-curve calibration (it may add steps to the
        tqdm ``bar``'s total and advance it); stored in ``Profile.curves``.
    quick : bool
        Smaller sizes (under two minutes on a 2-core CPU-only machine).
    progress : bool
        Show a progress bar (tqdm).
    command : str
        Recorded in the profile's provenance.

    Returns
    -------
    Profile
        With the raw measurements and fit residuals in ``measurements``.

    Raises
    ------
    RuntimeError
        If a calibration kernel computes a wrong result.
    """
    rt = runtime
    reps = 2 if quick else 5
    merge_sizes = [1 << k for k in (range(8, 14) if quick else range(9, 17))]
    steps = len(merge_sizes) + len(_thread_counts(rt.threads))
    g_max = 1 << (16 if quick else 20)
    if rt.has_device:
        steps += int(np.log2(g_max)) + 1 + 4 + 1
    # No time left shown: the steps differ in length, the last (largest) ones the longest.
    with tqdm(total=steps, desc="calibrating", disable=not progress, unit="step",
              bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]") as bar:
        bar.set_postfix_str("combine step (gamma)")
        meas: dict[str, Any] = {"combine": _measure_combine(rt, combine, merge_sizes, reps, bar)}
        bar.set_postfix_str("CPU threads (p)")
        meas["p"] = _measure_p(rt, combine, 1 << (14 if quick else 16), 8 if quick else 16, reps, bar)
        if rt.has_device:
            bar.set_postfix_str("device parallelism (g)")
            meas["g"] = _measure_g(rt, 1 << (22 if quick else 24), g_max, reps, bar)
            bar.set_postfix_str("transfers (lambda, delta)")
            meas["transfer"] = _measure_transfers(rt, 1 << (24 if quick else 27), reps, bar)
        fitted = {name: measure(rt, quick, bar) for name, measure in (curves or {}).items()}
    kw: dict[str, Any] = {"p": meas["p"]["p"], "cpu_op_seconds": meas["combine"]["cpu_op_seconds"], "g": 1.0,
                          "gamma": 1.0, "curves": {name: c.to_dict() for name, c in fitted.items()}}
    if rt.has_device:
        tr = meas["transfer"]
        kw.update(
            g=meas["g"]["g"],
            gamma=meas["combine"]["gamma"],
            h2d_latency=tr["pageable_h2d"]["latency"],
            h2d_seconds_per_byte=tr["pageable_h2d"]["seconds_per_byte"],
            d2h_latency=tr["pageable_d2h"]["latency"],
            d2h_seconds_per_byte=tr["pageable_d2h"]["seconds_per_byte"],
            launch_seconds=tr["launch_seconds"],
        )
    return Profile(name=f"calibrated {rt.device_name}", device=rt.device_name, host=host_description(),
                   provenance=_provenance(rt, command, quick), measurements=meas, **kw)


def _provenance(rt: Runtime, command: str, quick: bool) -> dict:
    import pyopencl as cl

    from .. import __version__

    prov = {
        "command": command or "hpu.core.calibrate.calibrate()",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hpu": __version__,
        "numpy": np.__version__,
        "pyopencl": cl.VERSION_TEXT,
        "python": platform.python_version(),
        "threads": rt.threads,
        "quick": quick,
    }
    info = rt.device_info
    if info is not None:
        prov.update(platform=info.platform, device_version=info.version, driver=info.driver)
    return prov


def format_profile(p: Profile) -> str:
    """A short table of a profile's fitted values."""
    rows = [
        ("device", p.device or "-"),
        ("host", p.host or "-"),
        ("p (effective CPU cores)", f"{p.p:.2f}"),
        ("g (device parallelism)", f"{p.g:.0f}"),
        ("gamma (work-item / core speed)", f"{p.gamma:.4g}  (1/gamma = {1 / p.gamma:.1f})"),
        ("CPU seconds per merged element", f"{p.cpu_op_seconds:.3g}"),
        ("lambda h2d / d2h (s)", f"{p.h2d_latency:.3g} / {p.d2h_latency:.3g}"),
        ("delta h2d / d2h (GB/s)", " / ".join(f"{1 / v / 1e9:.2f}" if v else "-" for v in (p.h2d_seconds_per_byte, p.d2h_seconds_per_byte))),
        ("kernel launch + wait (s)", f"{p.launch_seconds:.3g}"),
    ]
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(w)}  {v}" for k, v in rows)
