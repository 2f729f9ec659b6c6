"""Command line: ``python -m hpu {devices,calibrate,sort}`` (also installed as ``hpu``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
from numpy.lib.format import MAGIC_PREFIX as NPY_MAGIC

from .core.kernels import CL_TYPES
from .core.runtime import Runtime, list_devices
from .sorting.mergesort import SORT_STRATEGIES, as_sortable

__all__ = ["main"]


def _devices(args: argparse.Namespace) -> int:
    devs = list_devices()
    if not devs:
        print("no OpenCL devices (CPU-only mode)")
    for d in devs:
        print(d)
    return 0


def _open(args: argparse.Namespace, ap: argparse.ArgumentParser) -> tuple[np.ndarray, str, Runtime]:
    """The keys, their description and the runtime of ``hpu sort``; a user's mistake (a missing or unreadable file,
    an array hybrid_mergesort does not take, an unwritable ``--output`` or ``--gantt``, an unknown device, a bad
    profile or thread count) ends with argparse's usage message and status 2, not a traceback (status 1 is a result
    that differs from numpy's)."""
    for flag, path in (("--output", args.output), ("--gantt", args.gantt)):
        if path is not None and not (path.parent.is_dir() and os.access(path.parent, os.W_OK)):
            ap.error(f"{flag} {path}: {path.parent} is not a directory this user can write in")
    try:
        if args.input:
            with open(args.input, "rb") as f:  # numpy's message for other files speaks of pickled data
                if f.read(len(NPY_MAGIC)) != NPY_MAGIC:
                    raise ValueError(f"{args.input} is not a .npy file (it does not start with numpy's "
                                     f"{NPY_MAGIC!r}); save the array with numpy.save")
            try:
                data = np.load(args.input, allow_pickle=False)
            except ValueError as e:  # not a .npy file, or an object array
                raise ValueError(f"cannot load {args.input} as a .npy array: {e}") from None
            if not isinstance(data, np.ndarray):
                raise ValueError(f"{args.input} holds several arrays (.npz); give a .npy file of one 1-D array")
            as_sortable(data)  # its dtype and shape, checked before the runtime starts
            source = str(args.input)
        else:
            rng = np.random.default_rng(args.seed)
            data = rng.integers(0, 2 * args.n, size=args.n).astype(args.dtype)
            source = f"{args.n} uniform random {args.dtype} in [0, 2n), seed {args.seed}"
        return data, source, Runtime(args.device, threads=args.threads, profile=args.profile)
    except (OSError, TypeError, ValueError, MemoryError) as e:  # ProfileError is a ValueError
        ap.error(str(e) or type(e).__name__)  # exits


def _sort(args: argparse.Namespace, ap: argparse.ArgumentParser) -> int:
    from .sorting.mergesort import hybrid_mergesort

    data, source, runtime = _open(args, ap)
    with runtime as rt:
        print(f"device: {rt.device_name}; CPU threads: {rt.threads}; profile: {rt.profile.name}")
        print(f"input: {source}")
        kw = dict(strategy=args.strategy, mode=args.mode, runtime=rt)
        hybrid_mergesort(data, **kw)  # warm-up: kernel builds, pinned buffers
        t = time.perf_counter()
        out, trace = hybrid_mergesort(data, return_trace=True, **kw)
        wall = time.perf_counter() - t
    t = time.perf_counter()
    np.sort(data)
    t_np = time.perf_counter() - t
    ok = np.array_equal(out.view(np.uint8), np.sort(data, kind="stable").view(np.uint8))
    if trace.split is not None:
        s = trace.split
        threads = ", the CPU's share on one thread" if s.cpu_threads == 1 else ""
        print(f"model split: {s.strategy}, alpha = {s.alpha:.4f}, transfer level = {s.transfer_level}, "
              f"device share {100 * s.gpu_work_fraction:.1f}%{threads}, predicted {s.predicted_time * 1e3:.3g} ms")
    print(trace.summary())
    print(f"hybrid_mergesort: {wall * 1e3:.3g} ms; numpy.sort (its default kind, 1 core): {t_np * 1e3:.3g} ms; "
          f"speed-up {t_np / wall:.2f}x; result {'equals' if ok else 'DIFFERS FROM'} numpy.sort(kind='stable')")
    if args.output:
        path = args.output if args.output.suffix == ".npy" else args.output.with_name(args.output.name + ".npy")
        np.save(path, out)  # numpy.save adds ".npy" to a name without it
        print(f"wrote {path}")
    if args.gantt:
        from .plots import gantt

        path = args.gantt if args.gantt.suffix else args.gantt.with_suffix(".png")  # as savefig names it
        fig = gantt(trace)
        fig.savefig(path, dpi=120, bbox_inches="tight")
        print(f"wrote {path}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    ap = argparse.ArgumentParser(prog="hpu", description="Hybrid CPU + OpenCL divide-and-conquer runtime.")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("devices", help="list OpenCL devices")
    sub.add_parser("calibrate", help="fit this machine's profile (same as python -m hpu.calibrate)", add_help=False)
    sp = sub.add_parser("sort", help="sort an array with hybrid_mergesort and compare with numpy.sort")
    src = sp.add_mutually_exclusive_group()
    src.add_argument("--n", type=int, default=1 << 22, help="number of random keys (default 2^22)")
    src.add_argument("--input", type=Path, help="a .npy file holding a 1-D array to sort instead, of a dtype "
                     f"hybrid_mergesort takes ({', '.join(str(d) for d in CL_TYPES)}; hpu.sort takes more)")
    sp.add_argument("--dtype", default="int32", choices=[str(d) for d in CL_TYPES], help="dtype of random keys")
    sp.add_argument("--seed", type=int, default=0, help="random seed")
    sp.add_argument("--strategy", default="auto", choices=SORT_STRATEGIES,
                    help="work division (default: auto, the model's fastest; keyrange and exchange: fast mode only)")
    sp.add_argument("--mode", default="fast", choices=("fast", "paper"),
                    help="fast kernels (default) or the paper-faithful scheme")
    sp.add_argument("--device", default=None, help="OpenCL device (see python -m hpu.calibrate --help)")
    sp.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    sp.add_argument("--profile", default=None, help="profile JSON or shipped name (default: this device's calibration)")
    sp.add_argument("--output", type=Path, help="save the sorted array as .npy")
    sp.add_argument("--gantt", type=Path, help="save a Gantt chart of the run (PNG)")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["calibrate"]:
        from .calibrate import main as calibrate_main

        return calibrate_main(argv[1:], prog="hpu calibrate")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    if args.command == "sort":
        if args.n < 1:
            sp.error("--n must be >= 1")
        if args.seed < 0:
            sp.error("--seed must be >= 0")
        if args.mode == "paper" and args.strategy in ("keyrange", "exchange"):
            sp.error(f"--strategy {args.strategy} splits by key or exchanges between devices: --mode fast only")
        return _sort(args, sp)
    return _devices(args)
