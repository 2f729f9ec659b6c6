"""Benchmark hpu.dask.sort against dask.dataframe's sort_values on the same LocalCluster and data.

For each worker count of ``--workers`` a ``distributed.LocalCluster`` of that
many worker processes starts (``--threads`` threads each, the hpu plugin
registered: each worker's runtime on its own GPU where the host has one,
with the host's cached calibrated profile), and for n = 2^min-log .. 2^max-log
int64 keys (uniform random, generated and persisted on the workers, ``--chunk``
keys per block) it times, side by side in shuffled rounds (``--rounds``):

- ``hpu.dask.sort(x)`` persisted (one output block per worker);
- ``dask.dataframe.from_dask_array(x, columns=["k"]).sort_values("k")``
  persisted (a one-column frame: Dask's own distributed sort).

A first, untimed call of each (kernel builds, the workers' first allocations)
is checked on the workers: each block sorted, blocks in order, as many keys as
the input and the same sum (so nothing lost or duplicated).  With
``--no-warmup`` there is no such call (for sizes where a call of
``sort_values`` takes minutes): the last timed call of each is checked
instead, untimed, before the next call starts (so that no result stays in
the workers' memory while another variant runs).  Every call builds a graph
of its own keys, so that none is answered from results the cluster still
holds.

With ``--variants`` holding ``exchange`` and two or more workers, it also
times the least that a sort split between two workers moves: n/4 keys
from the first worker to the second and n/4 from the second to the first,
at once (half of each worker's half, as a key-range split of random keys
moves), each call from blocks made on those workers just before it
(untimed), after one untimed call.

Keys per second are n / median time (for the exchange too, n being the keys
of the sort it bounds: it moves n/2 of them); the JSON also holds, per hpu
run, the busy seconds of each phase from Dask's task stream (sample,
splitters, partition, sort of the key ranges, and the transfers between
workers), to say where the time goes.

Needs ``dask[dataframe]`` besides ``hpu[dask]`` (pandas, pyarrow) for the baseline.

    python experiments/bench_dask.py [--workers 1,2] [--min-log 22] [--max-log 24] [--threads 1] [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path

import numpy as np

from bench_common import command_line, shuffled_rounds, utc_now, write_json

VARIANTS = ("hpu.dask.sort", "dask.dataframe sort_values")
EXCHANGE = "exchange of n/4 keys each way"
#: Phases of hpu.dask.sort by the task names they show in Dask's task stream (a range's sort is fused with the
#: block made of it, "from-value-sort_range-..."; one output block: "_sort_block").
PHASES = {"sample": ("_sample",), "splitters": ("_splitters",), "partition": ("_partition", "getitem"),
          "sort": ("sort_range", "_sort_block")}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated (default 1,2)")
    ap.add_argument("--threads", type=int, default=1, help="threads per worker (default 1)")
    ap.add_argument("--device", default="auto", help="hpu.dask.HpuPlugin's device (default auto: a GPU each)")
    ap.add_argument("--min-log", type=int, default=22)
    ap.add_argument("--max-log", type=int, default=24)
    ap.add_argument("--chunk", type=int, default=1 << 22, help="keys per input block (default 2^22)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="hpu,sort_values",
                    help="comma-separated: hpu, sort_values, exchange (with two or more workers; default "
                         "hpu,sort_values)")
    ap.add_argument("--no-warmup", action="store_true",
                    help="no untimed call first; the last timed call of each variant is the one checked")
    ap.add_argument("--memory-limit", default="auto", help="per worker, as LocalCluster takes it")
    ap.add_argument("--json", type=Path, default=None)
    return ap.parse_args(argv)


def _block_facts(b: np.ndarray) -> np.ndarray:
    """(sorted, first, last, count, sum) of a block, as one int64 row (first/last 0 when empty)."""
    ok = b.size < 2 or bool(np.all(b[1:] >= b[:-1]))
    first, last = (int(b[0]), int(b[-1])) if b.size else (0, 0)
    return np.array([[int(ok), first, last, b.size, int(b.sum(dtype=np.int64))]], dtype=np.int64)


def check(y, n: int, total: int) -> bool:
    """Every block sorted, the blocks in order, ``n`` keys summing to ``total`` (computed on the workers)."""
    facts = y.map_blocks(_block_facts, dtype=np.int64, chunks=((1,) * y.numblocks[0], (5,)), new_axis=1).compute()
    facts = facts[facts[:, 3] > 0]
    ordered = bool(np.all(facts[1:, 1] >= facts[:-1, 2]))
    return bool(facts[:, 0].all()) and ordered and int(facts[:, 3].sum()) == n and int(facts[:, 4].sum()) == total


def phases(stream: list[dict]) -> dict[str, float]:
    """Busy seconds per phase (:data:`PHASES`) and of the transfers between workers, from a task stream."""
    out = {p: 0.0 for p in PHASES} | {"transfer": 0.0}
    for task in stream:
        name = str(task["key"])
        for ss in task.get("startstops", ()):
            seconds = ss["stop"] - ss["start"]
            if ss["action"] == "transfer":
                out["transfer"] += seconds
            elif ss["action"] == "compute":
                for phase, marks in PHASES.items():
                    if any(m in name for m in marks):
                        out[phase] += seconds
                        break
    return out


def run_size(client, x, n: int, rounds: int, rng: np.random.Generator, variants: tuple[str, ...] = VARIANTS,
             warmup: bool = True) -> list[dict]:
    """Time ``variants`` (of :data:`VARIANTS`) of ``x`` side by side, after an untimed, checked call of each (without
    ``warmup``: the last timed call of each checked, untimed, before the next call starts); their rows.

    Every call builds a graph of its own keys (another sampling seed, another column name): a graph seen before
    would be answered from the results the cluster still holds.
    """
    import dask.dataframe as dd
    from distributed import get_task_stream, wait

    import hpu.dask

    total = int(x.sum(dtype=np.int64).compute())
    calls = itertools.count()

    def make(name: str):
        i = next(calls)
        if name == "hpu.dask.sort":
            return hpu.dask.sort(x, client=client, seed=i)
        return dd.from_dask_array(x, columns=[f"k{i}"]).sort_values(f"k{i}")[f"k{i}"]

    def checked(name: str, y) -> bool:
        return check(y if name == "hpu.dask.sort" else y.to_dask_array(lengths=True), n, total)

    correct = {}
    for name in variants if warmup else ():  # warm-up (kernel builds on the workers) and the check
        y = make(name).persist()
        wait(y)
        correct[name] = checked(name, y)
        del y
    streams: list[list[dict]] = []
    made = dict.fromkeys(variants, 0)
    last: list = []  # without warm-up: (variant, result) of its last timed call, checked before the next call starts

    def check_last() -> None:  # untimed (shuffled_rounds' before), so that no result stays alive during other calls
        while last:
            name, y = last.pop()
            correct[name] = checked(name, y)
            del y

    def timed(name: str):
        def run() -> None:
            with get_task_stream(client) as ts:
                y = make(name).persist()
                wait(y)
            if name == "hpu.dask.sort":
                streams.append(ts.data)
            made[name] += 1
            if not warmup and made[name] == rounds:
                last.append((name, y))
        return run

    samples = shuffled_rounds({name: timed(name) for name in variants}, rounds, rng, pause=0.5, before=check_last)
    check_last()
    busy = [phases(s) for s in streams]
    rows = []
    for name, s in samples.items():
        med = float(np.median(s))
        row = {"variant": name, "n": n, "seconds": med, "samples": s, "keys_per_second": n / med,
               "correct": correct[name]}
        if name == "hpu.dask.sort":
            row["phases_busy_seconds"] = {k: float(np.median([p[k] for p in busy])) for k in busy[0]}
        rows.append(row)
    return rows


def _keys(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-2**62, 2**62, size=n, dtype=np.int64)


def _count(block: np.ndarray) -> int:
    return block.size


def exchange(client, n: int, rounds: int) -> dict:
    """Seconds to move n/4 int64 keys from the first worker to the second and n/4 from the second to the first, at
    once (:data:`EXCHANGE`), each call from blocks made on those workers just before (untimed); its row."""
    import time

    from distributed import wait

    wa, wb = sorted(client.scheduler_info()["workers"])[:2]
    samples, moved = [], []
    for r in range(rounds + 1):  # the first call untimed
        a = client.submit(_keys, n // 4, 2 * r, workers=[wa], allow_other_workers=False, pure=False)
        b = client.submit(_keys, n // 4, 2 * r + 1, workers=[wb], allow_other_workers=False, pure=False)
        wait([a, b])
        time.sleep(0.5)
        t0 = time.perf_counter()
        got = [client.submit(_count, a, workers=[wb], allow_other_workers=False, pure=False),
               client.submit(_count, b, workers=[wa], allow_other_workers=False, pure=False)]
        wait(got)
        if r:
            samples.append(time.perf_counter() - t0)
        moved.append(sum(f.result() for f in got))
        del a, b, got
    med = float(np.median(samples))
    return {"variant": EXCHANGE, "n": n, "seconds": med, "samples": samples, "keys_per_second": n / med,
            "correct": all(m == 2 * (n // 4) for m in moved)}


def workers_facts(client) -> dict:
    import hpu.dask

    def facts() -> dict:
        rt = hpu.default_runtime()
        return {"device": rt.device_name, "calibrated": rt.calibrated, "threads": rt.threads,
                "keys_per_second_model": hpu.dask.worker_speed(np.int64)}

    return client.run(facts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import dask
    import dask.array as da
    import distributed
    from distributed import Client, LocalCluster

    import hpu.dask
    from hpu.core.util import host_description

    meta = {"date": utc_now(), "command": command_line("bench_dask.py", argv), "host": host_description(),
            "cores": os.cpu_count(), "hpu": hpu.__version__, "numpy": np.__version__, "dask": dask.__version__,
            "distributed": distributed.__version__,
            "threads_per_worker": args.threads, "chunk": args.chunk, "warmup": not args.no_warmup}
    names = {"hpu": VARIANTS[0], "sort_values": VARIANTS[1], "exchange": EXCHANGE}
    asked = [v for v in args.variants.split(",") if v]
    if not asked or any(v not in names for v in asked):
        raise SystemExit(f"--variants: comma-separated of {', '.join(names)}, not {args.variants!r}")
    variants = tuple(names[v] for v in asked if v != "exchange")
    rows, bad = [], 0
    rng = np.random.default_rng(0)
    for w in [int(v) for v in args.workers.split(",")]:
        with LocalCluster(n_workers=w, threads_per_worker=args.threads, processes=True, dashboard_address=":0",
                          memory_limit=args.memory_limit) as cluster, Client(cluster) as client:
            hpu.dask.register(client, device=args.device)
            facts = workers_facts(client)
            print(f"# {w} worker(s): " + "; ".join(f"{f['device']} ({'calibrated' if f['calibrated'] else 'uncal.'},"
                                                    f" model {f['keys_per_second_model']:.3g} keys/s)"
                                                    for f in facts.values()), flush=True)
            for lg in range(args.min_log, args.max_log + 1):
                n = 1 << lg
                x = da.random.default_rng(lg).integers(-2**62, 2**62, size=n, chunks=args.chunk, dtype=np.int64)
                x = x.persist()
                distributed.wait(x)
                rows_here = run_size(client, x, n, args.rounds, rng, variants, not args.no_warmup) if variants else []
                if "exchange" in asked and w >= 2:
                    rows_here.append(exchange(client, n, args.rounds))
                for row in rows_here:
                    row["workers"] = w
                    row["worker_facts"] = list(facts.values())
                    rows.append(row)
                    bad += not row["correct"]
                    print(f"{w} worker(s) 2^{lg} {row['variant']:28s} {row['seconds'] * 1e3:10.1f} ms "
                          f"{row['keys_per_second'] / 1e6:8.1f} Mkeys/s {'ok' if row['correct'] else 'WRONG'}"
                          + (f"  phases {row['phases_busy_seconds']}" if "phases_busy_seconds" in row else ""),
                          flush=True)
                del x
                if args.json:  # after every size: a run cut short keeps what it measured
                    write_json(args.json, {"meta": meta, "rows": rows})
    if args.json:
        print(f"wrote {args.json}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
