"""What an OpenCL driver reports as a kernel's largest work-group, against what it runs.

``hpu.tabu``'s level-0 blocks (one work-group runs a whole block of tabu
iterations) try the work-group size they want with a launch rather than
trust ``CL_KERNEL_WORK_GROUP_SIZE``.  This prints, for the device:
``CL_DEVICE_MAX_WORK_GROUP_SIZE``; ``CL_KERNEL_WORK_GROUP_SIZE`` of a kernel
that adds one to each element, of a kernel that reverses each work-group's
elements through local memory (a barrier between), both without and with
``reqd_work_group_size`` of the device's maximum, and of hpu's
``tabu_run_group`` for QAP tai100a (the group build at that size); then
launches the reversing kernel in work-groups of the device's maximum and
checks its result against numpy.

    python experiments/kernel_work_group.py --device gpu --json experiments/results/h100/kernel_work_group.json
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

import numpy as np
import pyopencl as cl

import hpu
from hpu.tabu import QAP
from hpu.tabu.engine import program_source

from bench_common import command_line, utc_now, write_json

DATA = Path(__file__).parent / "data" / "qaplib"
ADD = "__kernel {attr} void add_one(__global int *a) {{ a[get_global_id(0)] += 1; }}"
REVERSE = """__kernel {attr} void reverse(__global long *a)
{{
    __local long b[{wg}];
    const size_t l = get_local_id(0), n = get_local_size(0);
    b[l] = a[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    a[get_global_id(0)] = b[n - 1 - l];
}}"""


def reported(ctx, dev, source: str, name: str) -> int:
    """``CL_KERNEL_WORK_GROUP_SIZE`` of kernel ``name`` of ``source`` on ``dev``."""
    kernel = cl.Kernel(cl.Program(ctx, source).build(devices=[dev]), name)
    return int(kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, dev))


def reverse_runs(ctx, dev, wg: int) -> bool:
    """Whether the reversing kernel, launched in work-groups of ``wg``, reverses every group's elements."""
    queue = cl.CommandQueue(ctx, dev)
    host = np.arange(4 * wg, dtype=np.int64)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    prg = cl.Program(ctx, REVERSE.format(attr="", wg=wg)).build(devices=[dev])
    try:
        prg.reverse(queue, (host.size,), (wg,), buf).wait()
    except cl.Error as e:
        print(f"launch in {wg} work-items refused: {e}")
        return False
    out = np.empty_like(host)
    cl.enqueue_copy(queue, out, buf).wait()
    return bool(np.array_equal(out, host.reshape(4, wg)[:, ::-1].reshape(-1)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="hpu.Runtime's device (default: hpu's choice)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    with hpu.Runtime(args.device, profile="hpu1") as rt:
        if not rt.has_device:
            ap.error("kernel_work_group.py needs an OpenCL device")
        ctx, dev = rt.context, rt.device
        most = int(dev.max_work_group_size)
        reqd = f"__attribute__((reqd_work_group_size({most}, 1, 1)))"
        problem = QAP.from_qaplib(DATA / "tai100a.dat")
        state = problem.state(np.arange(problem.n))
        row = dict(device=rt.device_name, device_max_work_group_size=most,
                   add_one=reported(ctx, dev, ADD.format(attr=""), "add_one"),
                   add_one_reqd=reported(ctx, dev, ADD.format(attr=reqd), "add_one"),
                   reverse=reported(ctx, dev, REVERSE.format(attr="", wg=most), "reverse"),
                   reverse_reqd=reported(ctx, dev, REVERSE.format(attr=reqd, wg=most), "reverse"),
                   tabu_run_group_tai100a=reported(ctx, dev, program_source(state, most, dev, group=True),
                                                   "tabu_run_group"),
                   reverse_runs_at_device_max=reverse_runs(ctx, dev, most))
    for key, value in row.items():
        print(f"{key:>28}: {value}")
    if args.json:
        write_json(args.json, dict(date=utc_now(), command=command_line("kernel_work_group.py", argv),
                                   host=platform.processor() or platform.machine(), hpu=hpu.__version__, **row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
