"""Calibration: fit the HPU profile (p, g, gamma, lambda, delta) on this machine.

Run ``python -m hpu.calibrate --help``.  The microbenchmarks follow paper
section 6.4 and go beyond it:

* **g** (fig. 5): time of a fixed-size elementwise sum in which each
  work-item handles a contiguous segment, against the number of work-items
  ``W``; ``g`` is the knee of a two-segment fit ``log t = max(c - s log W,
  log t_min)`` (robust least squares, :func:`scipy.optimize.least_squares`).
* **gamma** (fig. 6): one work-item merging two sorted lists on the device
  (the executor's own merge kernel) against one CPU thread doing the same
  merge (the executor's numpy merge), over several sizes; ``gamma`` is the
  geometric mean of the time ratios.
* **p**: the thread pool's throughput on the same merge with ``k`` threads,
  relative to one; ``p`` is the plateau of a two-segment fit
  ``speedup = min(e k, p)``.
* **cpu_op_seconds**: seconds per merged element on one core.
* **lambda, delta**: host-to-device and device-to-host copies over sizes,
  fitted as ``t = lambda + delta w`` (relative least squares), for pageable
  numpy arrays (used by the executor) and pinned buffers (recorded).
* **launch_seconds**: an empty kernel launch plus wait.
* **fast-mode costs** (beyond the paper): the parallel CPU sort, the
  device-resident sort, the staged transfers and the multiway merges over
  sizes, kept as measured curves; see :func:`hpu.model.fast_cost`.

The profile is saved atomically (an interrupted run leaves no file).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import optimize
from tqdm.auto import tqdm

from . import __version__
from ._util import host_description
from .dc import mergesort_spec
from .device import Runtime, default_profile_path
from .model import Profile

log = logging.getLogger("hpu")

__all__ = ["calibrate", "fit_knee", "fit_plateau", "fit_affine", "host_description", "main"]


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
        ``p`` (effective cores, >= 1), ``efficiency`` ``e``, ``residuals``.
    """
    k = np.asarray(threads, dtype=float)
    s = np.asarray(speedup, dtype=float)
    if k.shape != s.shape or k.size < 1 or np.any(k <= 0) or np.any(s <= 0):
        raise ValueError("fit_plateau needs positive (threads, speedup) pairs of equal length")
    if k.size == 1:
        return {"p": max(1.0, float(s[0])), "efficiency": float(s[0] / k[0]), "residuals": [0.0]}

    def model(q: np.ndarray) -> np.ndarray:
        return np.minimum(q[0] * k, q[1])

    r = optimize.least_squares(lambda q: model(q) - s, [1.0, s.max()], loss="soft_l1", f_scale=0.2,
                               bounds=([1e-3, 0.5], [2.0, 4 * k.max()]))
    return {"p": max(1.0, float(r.x[1])), "efficiency": float(r.x[0]), "residuals": (model(r.x) - s).tolist()}


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


def _sorted_runs(m: int, dtype: Any, rng: np.random.Generator) -> np.ndarray:
    a = rng.integers(0, 4 * m, size=2 * m).astype(dtype)
    a[:m].sort()
    a[m:].sort()
    return a


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


def _measure_merge(rt: Runtime, sizes: list[int], repeats: int, bar: tqdm) -> dict:
    """One work-item merge on the device vs one CPU thread (paper 6.4, fig. 6)."""
    spec = mergesort_spec()
    rng = np.random.default_rng(2)
    dev_s, cpu_s = [], []
    for m in sizes:
        runs = _sorted_runs(m, np.int32, rng)
        ref = np.sort(runs, kind="stable")

        def cpu() -> float:
            row = runs.copy().reshape(1, -1)
            t = time.perf_counter()
            spec.combine_np(row)
            return time.perf_counter() - t

        cpu_s.append(_best(cpu, repeats))
        if rt.has_device:
            import pyopencl as cl

            plan = spec.plan(2 * m, np.int32)
            kern = cl.Kernel(rt.build(plan.device_source()), "mergesort_combine")
            mf = cl.mem_flags
            src = cl.Buffer(rt.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=runs)
            dst = cl.Buffer(rt.context, mf.WRITE_ONLY, runs.nbytes)
            dev_s.append(_best(lambda: _event_seconds(kern(rt.queue, (1,), None, src, dst, np.uint64(1),
                                                                np.uint64(2 * m))), repeats))
            out = np.empty_like(runs)
            cl.enqueue_copy(rt.queue, out, dst)
            if not np.array_equal(out, ref):
                raise RuntimeError("calibration merge on the device gave a wrong result; the device is unreliable")
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


def _thread_counts(threads: int) -> list[int]:
    """Pool sizes at which the CPU merge's scaling is measured: 1, then up to 8 steps to ``threads``."""
    return sorted({1, *range(2, threads + 1, max(1, threads // 8))} | {threads})


def _measure_p(rt: Runtime, row_size: int, rows_per_thread: int, repeats: int, bar: tqdm) -> dict:
    """Thread-pool scaling of the executor's CPU merge (weak scaling)."""
    spec = mergesort_spec()
    rng = np.random.default_rng(3)
    base = np.concatenate([_sorted_runs(row_size // 2, np.int32, rng) for _ in range(rows_per_thread)])
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


#: Seconds of idle before each timed fast-mode run: calibration measures calls as they come
#: (after a pause: thread pool and device idle), which is how ``experiments/bench_mergesort.py`` times them.
IDLE_PAUSE = 0.02


def _median_from_idle(fn: Any, repeats: int) -> Any:
    """The value of the median-time run of ``fn`` over ``repeats`` runs, each after :data:`IDLE_PAUSE` (after a warm-up).

    ``fn`` returns ``(seconds, value)``.
    """
    fn()
    runs = []
    for _ in range(repeats):
        time.sleep(IDLE_PAUSE)
        runs.append(fn())
    runs.sort(key=lambda r: r[0])
    return runs[len(runs) // 2][1]


def _measure_fast(rt: Runtime, sizes: list[int], repeats: int, bar: tqdm) -> dict:
    """Fast-mode step costs over sizes (int32 keys), the curves :func:`hpu.model.fast_cost` interpolates.

    Each cost is the median of ``repeats`` calls, each made after :data:`IDLE_PAUSE`
    seconds of idle: the model predicts a typical call, not the best of a burst
    (at 2^18 keys on the H100 machine the best of back-to-back calls was 35%
    shorter than the median of calls after a pause).
    """
    from .cpusort import multiway_merge
    from .fastmode import fast_sort

    rng = np.random.default_rng(4)
    series: dict[str, list[float]] = {k: [] for k in ("cpu_sort", "merge2", "merge16")}
    if rt.threads > 1:
        series["cpu_sort_1"] = []
    if rt.has_device:
        series.update(device_sort=[], transfer=[])
    for n in sizes:
        a = rng.integers(0, 2 * n, n).astype(np.int32)
        out = np.empty_like(a)

        def timed(fn: Any) -> float:
            def run() -> tuple[float, float]:
                t = time.perf_counter()
                fn()
                t = time.perf_counter() - t
                return t, t

            return _median_from_idle(run, repeats)

        series["cpu_sort"].append(timed(lambda: fast_sort(a, rt, strategy="cpu", alpha=1.0, transfer_level=0)))
        if rt.threads > 1:
            series["cpu_sort_1"].append(timed(lambda: fast_sort(a, rt, strategy="cpu", alpha=1.0, transfer_level=0,
                                                                 cpu_threads=1)))
        for k in (2, 16):
            runs = np.concatenate([np.sort(c) for c in np.array_split(a, k)])
            parts = np.array_split(runs, k)
            series[f"merge{k}"].append(timed(lambda parts=parts: multiway_merge(parts, out, rt.pool, rt.threads)))
        if rt.has_device:
            res, _ = fast_sort(a, rt, strategy="gpu", alpha=0.0, transfer_level=0)
            if not np.array_equal(res, np.sort(a)):
                raise RuntimeError("fast-mode device sort gave a wrong result; the device is unreliable")
            del res

            def device_run() -> tuple[float, Any]:
                t = time.perf_counter()
                tr = fast_sort(a, rt, strategy="gpu", alpha=0.0, transfer_level=0)[1]
                return time.perf_counter() - t, tr

            typical = _median_from_idle(device_run, repeats).resolve()
            sort_s = sum(e.duration for e in typical.events if e.unit == "device")
            series["device_sort"].append(sort_s)
            series["transfer"].append(max(typical.wall - sort_s, 1e-9))
        bar.update()
    return {"sizes": sizes, "seconds": series}


def calibrate(runtime: Runtime, *, quick: bool = False, progress: bool = True, command: str = "") -> Profile:
    """Measure this machine and fit a :class:`~hpu.model.Profile` (paper 6.4 and beyond).

    Parameters
    ----------
    runtime : Runtime
        The device and thread pool to calibrate (CPU-only runtimes fit ``p``
        and ``cpu_op_seconds`` only, leaving ``g = gamma = 1``).
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
    import pyopencl as cl

    rt = runtime
    reps = 2 if quick else 5
    g_n = 1 << (22 if quick else 24)
    g_max = 1 << (16 if quick else 20)
    merge_sizes = [1 << k for k in (range(8, 14) if quick else range(9, 17))]
    xfer_max = 1 << (24 if quick else 27)
    fast_sizes = [1 << k for k in (range(14, 21, 2) if quick else range(16, 27, 2))]
    steps = len(fast_sizes) + len(merge_sizes) + len(_thread_counts(rt.threads))
    if rt.has_device:
        steps += int(np.log2(g_max)) + 1 + 4 + 1
    with tqdm(total=steps, desc="calibrating", disable=not progress, unit="step") as bar:
        meas: dict[str, Any] = {}
        meas["merge"] = _measure_merge(rt, merge_sizes, reps, bar)
        meas["p"] = _measure_p(rt, 1 << (14 if quick else 16), 8 if quick else 16, reps, bar)
        if rt.has_device:
            meas["g"] = _measure_g(rt, g_n, g_max, reps, bar)
            meas["transfer"] = _measure_transfers(rt, xfer_max, reps, bar)
        meas["fast"] = _measure_fast(rt, fast_sizes, reps, bar)
    kw: dict[str, Any] = {"p": meas["p"]["p"], "cpu_op_seconds": meas["merge"]["cpu_op_seconds"], "g": 1.0, "gamma": 1.0,
                          "fast": {"sizes": meas["fast"]["sizes"], **meas["fast"]["seconds"]}}
    if rt.has_device:
        tr = meas["transfer"]
        kw.update(
            g=meas["g"]["g"],
            gamma=meas["merge"]["gamma"],
            h2d_latency=tr["pageable_h2d"]["latency"],
            h2d_seconds_per_byte=tr["pageable_h2d"]["seconds_per_byte"],
            d2h_latency=tr["pageable_d2h"]["latency"],
            d2h_seconds_per_byte=tr["pageable_d2h"]["seconds_per_byte"],
            launch_seconds=tr["launch_seconds"],
        )
    info = rt.device_info
    prov = {
        "command": command or "hpu.calibrate.calibrate()",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hpu": __version__,
        "numpy": np.__version__,
        "pyopencl": cl.VERSION_TEXT,
        "python": platform.python_version(),
        "threads": rt.threads,
        "quick": quick,
    }
    if info is not None:
        prov.update(platform=info.platform, device_version=info.version, driver=info.driver)
    return Profile(name=f"calibrated {rt.device_name}", device=rt.device_name, host=host_description(),
                   provenance=prov, measurements=meas, **kw)


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


def main(argv: list[str] | None = None) -> int:
    """Command line entry point of ``python -m hpu.calibrate``; returns the exit status."""
    ap = argparse.ArgumentParser(
        prog="python -m hpu.calibrate",
        description="Measure this machine and fit the HPU model's profile (p, g, gamma, lambda, delta; "
                    "paper section 6.4). The profile is saved as JSON and used by later runs on the same device.",
    )
    ap.add_argument("--device", default=None,
                    help="OpenCL device: 'gpu', 'cpu', 'P:D' indices, a name substring, or 'none' for CPU only "
                         "(default: PYOPENCL_CTX, else a GPU, else a CPU OpenCL device)")
    ap.add_argument("--out", type=Path, default=None,
                    help="where to save the profile (default: the user cache directory, one file per device; "
                         "HPU_PROFILE_DIR overrides the directory)")
    ap.add_argument("--quick", action="store_true", help="smaller measurements (under two minutes on 2 CPU cores)")
    ap.add_argument("--plot", type=Path, default=None, metavar="DIR", help="also write PNG plots of the fits to DIR")
    ap.add_argument("--force", action="store_true", help="overwrite an existing profile")
    ap.add_argument("--threads", type=int, default=None, help="CPU thread-pool size (default: all cores)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    try:
        rt = Runtime(args.device, threads=args.threads, profile=_placeholder())
    except ValueError as e:
        ap.error(str(e))
    with rt:
        out = args.out or default_profile_path(rt.device)
        if out.exists() and not args.force:
            print(f"error: {out} exists; pass --force to overwrite it or --out to save elsewhere", file=sys.stderr)
            return 2
        print(f"calibrating {rt.device_name} with {rt.threads} CPU threads" + (" (quick)" if args.quick else ""))
        try:
            prof = calibrate(rt, quick=args.quick, progress=not args.no_progress,
                             command="python -m hpu.calibrate " + " ".join(argv if argv is not None else sys.argv[1:]))
        except KeyboardInterrupt:
            print("\ninterrupted: nothing saved", file=sys.stderr)
            return 130
    prof.save(out)
    print(format_profile(prof))
    print(f"saved {out}")
    if args.plot:
        from .plots import calibration_figures

        for path in calibration_figures(prof, args.plot):
            print(f"wrote {path}")
    return 0


def _placeholder() -> Profile:
    # The runtime's profile is irrelevant while calibrating; avoid the "uncalibrated" warning.
    return Profile(p=1, g=1, gamma=1, name="calibrating")


if __name__ == "__main__":
    sys.exit(main())
