"""Host memory for transfers: copy and DMA rates of the kinds of host buffers fast mode can use.

Measures, for one size, the parallel memcpy rate (all CPU threads) into and
out of each kind of host memory, and the host-device DMA rate from and to
it.  Kinds: a fresh numpy array (first touch: page faults), a touched numpy
array, a fresh array backed by transparent huge pages (``madvise``), an
OpenCL ``ALLOC_HOST_PTR`` buffer mapped on the host (pinned on NVIDIA), and
an OpenCL ``USE_HOST_PTR`` buffer over a page-aligned numpy array.

    python experiments/bench_host_memory.py [--mib 64] [--device gpu] [--json PATH]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import mmap
import os
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl

import hpu
from bench_common import command_line, timings, utc_now, write_json


def thp_array(nbytes: int) -> np.ndarray:
    """A fresh uint8 array in anonymous memory advised for transparent huge pages."""
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(m, dtype=np.uint8)


def best(fn, repeats: int = 5) -> float:
    """Fewest seconds of ``repeats`` calls of ``fn`` after a warm-up call."""
    return min(timings(fn, repeats))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=64, help="buffer size in MiB (default 64 = 2^24 int32)")
    ap.add_argument("--device", default=None, help="OpenCL device (default: hpu's choice)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows as JSON")
    args = ap.parse_args(argv)
    nbytes = args.mib << 20
    threads = os.cpu_count() or 1
    pool = concurrent.futures.ThreadPoolExecutor(threads)
    src = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    bounds = np.linspace(0, nbytes, threads + 1).astype(np.int64)

    def pcopy(dst: np.ndarray, s: np.ndarray) -> None:
        for f in [pool.submit(np.copyto, dst[a:b], s[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]:
            f.result()

    rows = []
    with hpu.Runtime(args.device, profile="hpu1") as rt:
        q, ctx = rt.queue, rt.context
        mf = cl.mem_flags
        dev = cl.Buffer(ctx, mf.READ_WRITE, nbytes)
        pinned_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.ALLOC_HOST_PTR, nbytes)
        pinned, _ = cl.enqueue_map_buffer(q, pinned_buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (nbytes,),
                                          np.uint8, is_blocking=True)
        aligned = thp_array(nbytes)
        aligned[:] = 1
        use_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=aligned)
        touched = np.ones(nbytes, dtype=np.uint8)
        kinds = {
            "numpy fresh": lambda: np.empty(nbytes, dtype=np.uint8),
            "numpy touched": lambda: touched,
            "THP fresh": lambda: thp_array(nbytes),
            "ALLOC_HOST_PTR mapped": lambda: pinned,
            "USE_HOST_PTR (THP)": lambda: aligned,
        }
        print(f"# {rt.device_name}; {threads} threads; {args.mib} MiB; rates in GB/s (best of 5)")
        print(f"{'host memory':>24} {'copy in':>9} {'copy out':>9} {'h2d DMA':>9} {'d2h DMA':>9}")
        dest = np.zeros_like(src)  # copy out: into one array already touched, whatever the source's kind
        for name, make in kinds.items():
            cin = nbytes / best(lambda: pcopy(make(), src)) / 1e9
            buf = make()
            buf[:] = 1
            cout = nbytes / best(lambda: pcopy(dest, buf)) / 1e9
            if name == "USE_HOST_PTR (THP)":
                h2d = nbytes / best(lambda: cl.enqueue_copy(q, dev, use_buf).wait()) / 1e9
                d2h = nbytes / best(lambda: cl.enqueue_copy(q, use_buf, dev).wait()) / 1e9
            else:
                h2d = nbytes / best(lambda: cl.enqueue_copy(q, dev, buf, is_blocking=True)) / 1e9
                d2h = nbytes / best(lambda: cl.enqueue_copy(q, buf, dev, is_blocking=True)) / 1e9
            rows.append({"memory": name, "copy_in_GBps": cin, "copy_out_GBps": cout, "h2d_GBps": h2d, "d2h_GBps": d2h})
            print(f"{name:>24} {cin:9.1f} {cout:9.1f} {h2d:9.1f} {d2h:9.1f}", flush=True)
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
        meta = {"date": utc_now(), "command": command_line("bench_host_memory.py", argv),
                "device": rt.device_name, "threads": threads, "bytes": nbytes,
                "thp": thp.read_text().strip() if thp.exists() else "unknown"}
        print(f"# transparent huge pages: {meta['thp']}")
    if args.json:
        write_json(args.json, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
