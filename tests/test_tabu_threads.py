"""Many threads share one Runtime for tabu search: every trajectory is the single-threaded one.

Eight threads at once run short searches of four problem kinds (QAP tai12a, HW/SW partitioning with restarts, PFSP,
PPP) with the strategies cpu, gpu and hybrid, device evaluations of whole neighbourhoods, the hybrid EA, and the
calibration of one problem's costs, all on one runtime (the suite's ``runtime`` fixture).
"""

from __future__ import annotations

import concurrent.futures
import itertools
from pathlib import Path

import numpy as np
import pytest

from hpu.tabu import PFSP, PPP, QAP, HWSWPartitioning, TabuCosts, calibrate, costs_path, evaluate_neighbourhood
from hpu.tabu import hybrid_ea, tabu_search

DATA = Path(__file__).parents[1] / "experiments/data/qaplib"
THREADS = 8
ITERATIONS = 40
SEEDS = (0, 1)

#: name -> (problem, tabu tenure)
PROBLEMS = {
    "qap": (QAP.from_qaplib(DATA / "tai12a.dat"), 8),
    "hwsw": (HWSWPartitioning.random(24, ccr=1.0, constraint="low", seed=8), 10),
    "pfsp": (PFSP(np.random.default_rng(4).integers(1, 20, (5, 10)), neighbourhood="insertion"), 6),
    "ppp": (PPP.generate(15, 13, 7, hamming=2), 12),
}
SPLITS = {
    "cpu": dict(strategy="cpu", cpu_chunks=2),
    "gpu": dict(strategy="gpu", transfer_level=1),
    "hybrid": dict(strategy="hybrid", alpha=0.3, transfer_level=0, cpu_chunks=1),
}


def _splits(runtime) -> list[str]:
    return list(SPLITS) if runtime.has_device else ["cpu"]


def _at_once(fn, args: list) -> list:
    """``fn(*a)`` for every ``a`` of ``args``, on :data:`THREADS` threads started together; the results in order."""
    with concurrent.futures.ThreadPoolExecutor(THREADS) as ex:
        return list(ex.map(lambda a: fn(*a), args))


@pytest.fixture(scope="module")
def references(runtime):
    """The single-threaded trajectories: (problem name, seed) -> TabuResult, on the CPU alone in one range."""
    return {(name, seed): tabu_search(pb, iterations=ITERATIONS, tenure=tenure, seed=seed, strategy="cpu",
                                      cpu_chunks=1, runtime=runtime)
            for (name, (pb, tenure)), seed in itertools.product(PROBLEMS.items(), SEEDS)}


def _wrong(res, ref, what: str) -> list[str]:
    """A description of how ``res`` differs from the reference trajectory (empty when it does not)."""
    same = (np.array_equal(res.moves, ref.moves) and np.array_equal(res.history, ref.history)
            and res.best_value == ref.best_value and res.restarts == ref.restarts)
    return ([] if same else [f"{what}: another trajectory"]) + ([f"{what}: fell back ({res.fallback})"]
                                                                   if res.fallback else [])


def test_eight_threads_search_on_one_runtime_as_one_thread_does(runtime, references):
    jobs = list(itertools.product(PROBLEMS, SEEDS, _splits(runtime)))

    def worker(w: int) -> list[str]:
        wrong = []
        for i in np.random.default_rng(w).permutation(len(jobs)):  # each thread in its own order
            name, seed, split = jobs[i]
            pb, tenure = PROBLEMS[name]
            res = tabu_search(pb, iterations=ITERATIONS, tenure=tenure, seed=seed, runtime=runtime, **SPLITS[split])
            wrong += _wrong(res, references[name, seed], f"thread {w}: {name} seed {seed} {split}")
            if split != "cpu" and not res.device_time > 0:
                wrong.append(f"thread {w}: {name} seed {seed} {split}: the device did nothing")
        return wrong

    assert sum(_at_once(worker, [(w,) for w in range(THREADS)]), []) == []
    assert references["hwsw", 0].restarts > 0  # the HW/SW searches restart (an upload to the device)


def test_eight_threads_evaluate_neighbourhoods_on_the_device(runtime):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    cases = [(name, seed) for name in PROBLEMS for seed in range(6)]

    def check(name: str, seed: int) -> bool:
        pb = PROBLEMS[name][0]
        x = pb.random_solution(np.random.default_rng(seed))
        on_cpu, on_device = (evaluate_neighbourhood(pb, x, unit=u, runtime=runtime) for u in ("cpu", "device"))
        return all(np.array_equal(a, b) for a, b in zip(on_cpu, on_device))

    assert all(_at_once(check, cases))


def test_eight_threads_asking_for_the_costs_share_one_calibration(runtime, references, tmp_path, monkeypatch):
    monkeypatch.setenv("HPU_PROFILE_DIR", str(tmp_path))
    saves = []
    real_save = TabuCosts.save
    monkeypatch.setattr(TabuCosts, "save", lambda self, path: saves.append(path) or real_save(self, path))
    qap, tenure = PROBLEMS["qap"]
    found = _at_once(lambda: calibrate(qap, runtime), [()] * THREADS)
    assert len(saves) == 1 and costs_path(qap, runtime).exists()
    assert all(c is found[0] for c in found)
    assert TabuCosts.load(costs_path(qap, runtime)) == found[0]
    # The model's own split (from those costs) on every thread: the reference trajectories still.
    results = _at_once(lambda s: tabu_search(qap, iterations=ITERATIONS, tenure=tenure, seed=s, runtime=runtime),
                       [(s % 2,) for s in range(THREADS)])
    assert sum((_wrong(r, references["qap", i % 2], f"search {i}") for i, r in enumerate(results)), []) == []
    assert len({r.split for r in results}) == 1 and len(saves) == 1


def test_hybrid_eas_on_several_threads_give_the_single_threaded_result(runtime):
    qap = PROBLEMS["qap"][0]
    kw = dict(population=3, generations=2, offspring=3, ils_iterations=2, ls_iterations=30, seed=5, runtime=runtime)
    ref = hybrid_ea(qap, strategy="cpu", concurrency=1, **kw)
    runs = _at_once(lambda s: hybrid_ea(qap, strategy=s, concurrency=2, **kw),
                    [(s,) for s in _splits(runtime) for _ in range(2)])
    for r in runs:
        assert r.best_value == ref.best_value and np.array_equal(r.history, ref.history)
        assert np.array_equal(r.population, ref.population) and r.ls_iterations == ref.ls_iterations
        assert r.fallbacks == 0
