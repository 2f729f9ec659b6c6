"""Host memory one ``hpu.sort`` call needs at its peak, per byte of its keys (``hpu.dask.SORT_FOOTPRINT``).

Each size runs in a fresh Python process (a process's peak resident set only
grows): it makes uniform random keys, sorts a few of them (the runtime
made, its kernels built), notes its peak resident set (``getrusage``'s
``ru_maxrss``), sorts them all with ``hpu.sort`` on the default runtime (the
default device) and prints the growth of the peak, in MiB and per byte of
keys.  On a CPU OpenCL device (PoCL) the device's buffers are
host memory too, so the figure covers them.

    python experiments/sort_footprint.py [--log 22,24,26] [--dtype int64] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bench_common import command_line, utc_now, write_json

_CHILD = """
import resource, sys
import numpy as np
import hpu
n, dtype = 1 << int(sys.argv[1]), np.dtype(sys.argv[2])
x = np.random.default_rng(0).integers(0, np.iinfo(np.int32).max, n).astype(dtype)
hpu.sort(x[:4096])  # the runtime made, its kernels built
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
y = hpu.sort(x)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
assert np.array_equal(y, np.sort(x, kind="stable"))
rt = hpu.default_runtime()
print(json.dumps({"n": n, "dtype": str(dtype), "bytes": x.nbytes, "peak_growth": after - before,
                  "device": rt.device_name, "calibrated": rt.calibrated}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", default="22,24,26", help="comma-separated log2 n (default 22,24,26)")
    ap.add_argument("--dtype", default="int64", help="numpy dtype of the keys (default int64)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    print(f"# date: {utc_now()}  command: {command_line('sort_footprint.py', argv)}")
    print(f"{'n':>12} {'dtype':>8} {'keys MiB':>9} {'peak growth MiB':>16} {'per byte':>9}  device")
    for lg in (int(v) for v in args.log.split(",")):
        out = subprocess.run([sys.executable, "-c", "import json\n" + _CHILD, str(lg), args.dtype],
                             check=True, capture_output=True, text=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        row["per_byte"] = row["peak_growth"] / row["bytes"]
        rows.append(row)
        print(f"{row['n']:>12} {row['dtype']:>8} {row['bytes'] / 2**20:9.0f} {row['peak_growth'] / 2**20:16.0f} "
              f"{row['per_byte']:9.2f}  {row['device']} (calibrated: {row['calibrated']})", flush=True)
    if args.json:
        write_json(args.json, {"meta": {"date": utc_now(), "command": command_line("sort_footprint.py", argv)},
                               "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
