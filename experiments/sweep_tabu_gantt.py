"""Beyond the paper: where a tabu iteration's time goes (device, launches, read-back, host), as Gantt charts.

Runs one instance (--instance, default tai100a) on the device alone three
ways, each after an untraced warm-up search (kernel builds, the calibration),
with ``tabu_search(..., trace=True)``:

* the host loop (one round trip per iteration) at the model's transfer level:
  the fused evaluation kernel, the read-back of its partial minima, the
  host's combine of them and its move bookkeeping, the apply kernel;
* resident blocks of --block iterations at the same level (at least 1): two
  kernels an iteration (evaluation, then the choice and the move), one round
  trip a block;
* resident blocks at transfer level 0: one work-group loops over a block's
  iterations in a single launch.

For each it reports the wall time per iteration and how it divides: device
kernels, copies, host steps, and the rest (the Python loop, launch latency
and waiting: no unit busy), from the union of the trace's busy intervals.
Writes tabu_gantt.json (the traces and the table) and tabu_gantt.{png,svg}.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import hpu
import hpu.plots
import sweep_common as common
from hpu.tabu import PFSP, PPP, QAP, tabu_search

DATA = Path(__file__).parent / "data" / "qaplib"


def instance(name: str):
    """tai*/nug*: QAPLIB files; ta0xx: Taillard's flow shops (insertion); pppM-N-K: a permuted perceptron."""
    if name.startswith("ta") and name[2:].isdigit():
        return PFSP.taillard(name)
    if name.startswith("ppp"):
        m, n, k = (int(v) for v in name[3:].split("-"))
        return PPP.generate(m, n, 1, hamming=k)
    return QAP.from_qaplib(DATA / f"{name}.dat")


def busy_union(events: list) -> float:
    """Seconds in which at least one of ``events`` runs."""
    total, end = 0.0, -np.inf
    for e in sorted(events, key=lambda e: e.start):
        if e.end > end:
            total += e.end - max(e.start, end)
            end = e.end
    return total


def breakdown(trace: hpu.Trace, iterations: int) -> dict:
    """Milliseconds per iteration: wall, each unit's busy time, and the time no unit is busy."""
    ev = trace.events
    per = {"wall": trace.wall,
           "device kernels": busy_union([e for e in ev if e.unit == "device"]),
           "copies": busy_union([e for e in ev if e.unit == "bus"]),
           "host steps": busy_union([e for e in ev if e.unit.startswith("cpu:")]),
           "no unit busy": trace.wall - busy_union(ev)}
    return {k: v / iterations * 1e3 for k, v in per.items()}


def runs(problem, args, rt: hpu.Runtime) -> list[dict]:
    """The three ways of the module docstring: warm-up, then a traced search each; the trajectories checked."""
    kw = dict(iterations=args.iterations, tenure=args.tenure, seed=1, runtime=rt, strategy="gpu")
    host = tabu_search(problem, block_iterations=1, **kw)  # the model's level for the host loop
    level = max(host.split.transfer_level, 1)  # level 0 would be one launch a block: the third way
    ways = [("host loop", dict(block_iterations=1)),
            (f"resident, K = {args.block}, level {level}", dict(block_iterations=args.block, transfer_level=level)),
            (f"resident, K = {args.block}, level 0", dict(block_iterations=args.block, transfer_level=0))]
    out = []
    for label, extra in ways:
        tabu_search(problem, **kw, **extra)  # warm-up
        res = tabu_search(problem, trace=True, **kw, **extra)
        assert np.array_equal(res.moves, host.moves), f"{label}: left the host loop's trajectory"
        out.append({"label": label, "transfer_level": res.split.transfer_level, "block_iterations":
                    res.block_iterations, "ms_per_iteration": breakdown(res.trace, res.iterations),
                    "trace": res.trace})
    return out


def plot(data: dict, traces: list[hpu.Trace]):
    """One Gantt panel per way, each on its own time axis."""
    fig, axes = common.plt.subplots(len(traces), 1, figsize=(11, 2.3 * len(traces)), squeeze=False)
    for ax, run, tr in zip(axes[:, 0], data["runs"], traces):
        hpu.plots.tabu_gantt(tr, ax=ax)
        ms = run["ms_per_iteration"]
        ax.set_title(f"{run['label']}: {ms['wall']:.4f} ms per iteration (device kernels {ms['device kernels']:.4f}, "
                     f"copies {ms['copies']:.4f}, host {ms['host steps']:.4f}, no unit busy "
                     f"{ms['no unit busy']:.4f})", fontsize=8)
    return common.finish(fig, f"Tabu iterations of {data['instance']} ({data['moves']} moves) on the device, "
                              f"{data['iterations']} iterations each", data["meta"])


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; return the exit status."""
    ap = common.parser(__doc__, measured=True, timed=False, with_profile=False)
    ap.add_argument("--instance", default=None, help="tai*, ta0xx or pppM-N-K (default tai100a; tai12a with --quick)")
    ap.add_argument("--iterations", type=int, default=32, help="iterations of each traced search (default 32)")
    ap.add_argument("--block", type=int, default=8, help="iterations per round trip of the resident ways (default 8)")
    ap.add_argument("--tenure", type=int, default=10, help="tabu tenure (default 10)")
    args = common.parse(ap, argv, "sweep_tabu_gantt.py")
    if args.block < 2 or args.block > args.iterations:
        ap.error("--block must lie in [2, --iterations]")
    name = args.instance or ("tai12a" if args.quick else "tai100a")
    problem = instance(name)
    with hpu.Runtime(args.device, threads=args.threads) as rt:
        if not rt.has_device:
            raise SystemExit("this sweep needs an OpenCL device (on a CPU-only machine install pocl-opencl-icd)")
        out = runs(problem, args, rt)
        data = {"sweep": "tabu_gantt", "reproduces": "beyond the paper", "meta": common.meta(args, rt),
                "instance": name, "moves": problem.num_moves, "iterations": args.iterations, "block": args.block}
    traces = [r.pop("trace") for r in out]
    data["runs"] = [{**r, "trace": tr.to_dict()} for r, tr in zip(out, traces)]
    for r in out:
        print(f"{r['label']:28s}", "  ".join(f"{k} {v:.4f}" for k, v in r["ms_per_iteration"].items()), "ms/iteration")
    common.report(common.write(args.out, "tabu_gantt", data, {"tabu_gantt": plot(data, traces)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
