"""A device that fails mid-search: the CPU takes the same moves (or DeviceFailure), and the runtime is not poisoned.

Faults are injected into pyopencl's enqueue calls, as the NVIDIA driver gave one (-9999, a dead context): the call
number ``after`` raises, and so does every later call on that context, so that only a runtime that rebuilds its
context gets the device back.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import numpy as np
import pytest

import hpu
from hpu.tabu import QAP, HWSWPartitioning, calibrate, costs_path, hybrid_ea, tabu_search

cl = pytest.importorskip("pyopencl")

DATA = Path(__file__).parents[1] / "experiments/data/qaplib"
DEVICE_SPLITS = [dict(strategy="gpu", transfer_level=2), dict(strategy="hybrid", alpha=0.4, transfer_level=1,
                                                              cpu_chunks=2)]
KW = dict(iterations=60, tenure=8, block_iterations=1)  # the host loop; resident blocks: test_a_fault_in_a_resident_block


def _lost_context():
    return cl.LogicError("clEnqueueNDRangeKernel failed: <unknown error -9999>")


#: (pyopencl function, calls that work before the fault, error raised, its text, whether the context is rebuilt);
#: each iteration launches the fused kernel, reads its partial minima back and launches the apply kernel.
FAULTS = {
    "evaluate": ("enqueue_nd_range_kernel", 20, _lost_context, "-9999", True),
    "apply": ("enqueue_nd_range_kernel", 21, _lost_context, "-9999", True),
    "read": ("enqueue_copy", 20, lambda: hpu.DeviceFailure("injected fault", fatal=True), "injected fault", True),
    "memory": ("enqueue_nd_range_kernel", 20, lambda: MemoryError("no staging memory"), "MemoryError", False),
}


def _fault(monkeypatch, name: str, error, after: int = 0, always: bool = False) -> list:
    """Make ``pyopencl.<name>(queue, ...)`` raise ``error()`` on call number ``after`` (every call if ``always``)
    and on every later call on that call's context; returns the list of calls made."""
    real, calls, dead = getattr(cl, name), [], []

    def faulty(queue, *args, **kw):
        calls.append(name)
        ctx = queue.context
        if always or len(calls) == after + 1 or any(ctx == d for d in dead):
            dead.append(ctx)
            raise error()
        return real(queue, *args, **kw)

    monkeypatch.setattr(cl, name, faulty)
    return calls


@pytest.fixture(scope="module")
def faulty_rt():
    """The module's own runtime: each fault rebuilds its context (or not), and every later test must find it right."""
    with hpu.Runtime(threads=2) as rt:
        if not rt.has_device:
            pytest.skip("no OpenCL device")
        yield rt


@pytest.fixture(scope="module")
def tai12a():
    return QAP.from_qaplib(DATA / "tai12a.dat")


def _same_trajectory(res, ref) -> None:
    np.testing.assert_array_equal(res.moves, ref.moves)
    np.testing.assert_array_equal(res.history, ref.history)
    assert res.best_value == ref.best_value and res.restarts == ref.restarts
    np.testing.assert_array_equal(res.best_solution, ref.best_solution)


def _later_searches_right(rt, problem, split, tenure: int = 8) -> None:
    """Three more searches on ``rt`` use the device again and take the CPU's moves."""
    for seed in range(3):
        kw = dict(iterations=30, tenure=tenure, seed=seed, runtime=rt)
        again = tabu_search(problem, **split, **kw)
        _same_trajectory(again, tabu_search(problem, strategy="cpu", cpu_chunks=1, **kw))
        assert again.fallback == "" and again.device_time > 0


@pytest.mark.parametrize("split", DEVICE_SPLITS, ids=["gpu", "hybrid"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_fault_mid_search_continues_on_the_cpu_on_the_same_trajectory(faulty_rt, monkeypatch, tai12a, fault, split):
    name, after, error, text, fatal = FAULTS[fault]
    ref = tabu_search(tai12a, strategy="cpu", cpu_chunks=1, seed=5, runtime=faulty_rt, **KW)
    context = faulty_rt.context
    with monkeypatch.context() as m:
        calls = _fault(m, name, error, after=after)
        res = tabu_search(tai12a, seed=5, runtime=faulty_rt, **split, **KW)
    assert len(calls) == after + 1  # that call failed (at iteration 11 or 21 of 60), and none came after
    assert text in res.fallback and res.device_time > 0
    _same_trajectory(res, ref)
    _later_searches_right(faulty_rt, tai12a, split)
    assert (faulty_rt.context != context) == fatal  # a fatal failure was reported: the context was rebuilt


@pytest.mark.parametrize("fault", ["evaluate", "read"])
def test_a_fault_in_a_resident_block_continues_on_the_cpu_from_the_block_start(faulty_rt, monkeypatch, tai12a, fault):
    """Blocks of 8 iterations, 2 kernels each: launch 20 is in the second block, copy 5 its read-back."""
    name, _, error, text, _ = FAULTS[fault]
    after = 20 if name == "enqueue_nd_range_kernel" else 5
    kw = dict(iterations=60, tenure=8, seed=6, runtime=faulty_rt)
    ref = tabu_search(tai12a, strategy="cpu", cpu_chunks=1, **kw)
    with monkeypatch.context() as m:
        calls = _fault(m, name, error, after=after)
        res = tabu_search(tai12a, strategy="gpu", transfer_level=2, block_iterations=8, **kw)
    assert len(calls) == after + 1 and text in res.fallback and res.device_time > 0
    _same_trajectory(res, ref)
    _later_searches_right(faulty_rt, tai12a, dict(strategy="gpu", transfer_level=2))


@pytest.mark.parametrize("level", [2, 0], ids=["two-kernels", "one-work-group"])
def test_a_fault_reading_the_best_solution_replays_the_blocks_on_the_host(faulty_rt, monkeypatch, tai12a, level):
    """The device keeps the best solution of its blocks; when reading it back (the search's last copy) fails,
    the host replays the blocks' moves and takes the best solution on the way."""
    kw = dict(iterations=60, tenure=8, seed=7, runtime=faulty_rt)
    ref = tabu_search(tai12a, strategy="cpu", cpu_chunks=1, **kw)
    assert 0 < int(np.argmin(ref.history)) < 59 and ref.history.min() < ref.history[0]  # a best found in a block
    gpu = dict(strategy="gpu", transfer_level=level, block_iterations=8)
    with monkeypatch.context() as m:
        counted = _fault(m, "enqueue_copy", _lost_context, after=10**9)
        tabu_search(tai12a, **gpu, **kw)
    with monkeypatch.context() as m:
        calls = _fault(m, "enqueue_copy", _lost_context, after=len(counted) - 1)
        res = tabu_search(tai12a, **gpu, **kw)
    assert len(calls) == len(counted) and "-9999" in res.fallback
    _same_trajectory(res, ref)
    _later_searches_right(faulty_rt, tai12a, dict(strategy="gpu", transfer_level=level))


def test_a_fault_in_a_restart_upload_continues_on_the_cpu(faulty_rt, monkeypatch):
    """HW/SW restarts copy the new state to the device (enqueue_copy of the state's buffers)."""
    pb = HWSWPartitioning.random(40, ccr=1.0, constraint="low", seed=8)
    kw = dict(iterations=60, tenure=20, seed=3, runtime=faulty_rt)
    ref = tabu_search(pb, strategy="cpu", cpu_chunks=1, **kw)
    assert ref.restarts >= 1
    with monkeypatch.context() as m:
        _fault(m, "enqueue_copy", _lost_context, after=1)  # the first read-back works, the restart's upload fails
        res = tabu_search(pb, strategy="gpu", transfer_level=0, **kw)
    assert "-9999" in res.fallback
    _same_trajectory(res, ref)
    _later_searches_right(faulty_rt, pb, dict(strategy="gpu", transfer_level=0), tenure=20)


@pytest.mark.parametrize("split", DEVICE_SPLITS, ids=["gpu", "hybrid"])
def test_a_fault_raises_device_failure_when_asked(faulty_rt, monkeypatch, tai12a, split):
    with monkeypatch.context() as m:
        _fault(m, "enqueue_nd_range_kernel", _lost_context, after=20)
        with pytest.raises(hpu.DeviceFailure, match="-9999") as info:
            tabu_search(tai12a, seed=5, runtime=faulty_rt, on_device_error="raise", **split, **KW)
    assert info.value.fatal and isinstance(info.value.__cause__, cl.LogicError)
    _later_searches_right(faulty_rt, tai12a, split)
    with pytest.raises(ValueError, match="on_device_error"):
        tabu_search(tai12a, seed=5, runtime=faulty_rt, on_device_error="ignore", **KW)


def test_a_fault_while_calibrating_searches_on_the_cpu(faulty_rt, monkeypatch, tmp_path, tai12a):
    monkeypatch.setenv("HPU_PROFILE_DIR", str(tmp_path))
    kw = dict(seed=2, runtime=faulty_rt, **KW)
    ref = tabu_search(tai12a, strategy="cpu", cpu_chunks=1, **kw)
    with monkeypatch.context() as m:
        _fault(m, "enqueue_nd_range_kernel", _lost_context, always=True)
        with pytest.raises(hpu.DeviceFailure, match="-9999"):
            calibrate(tai12a, faulty_rt)
        res = tabu_search(tai12a, **kw)  # the model must choose: it calibrates, and the device fails again
        with pytest.raises(hpu.DeviceFailure, match="-9999"):
            tabu_search(tai12a, on_device_error="raise", **kw)
    assert "-9999" in res.fallback and res.split.strategy == "cpu" and res.device_time == 0
    _same_trajectory(res, ref)
    assert not costs_path(tai12a, faulty_rt).exists()  # nothing half-measured was kept
    assert calibrate(tai12a, faulty_rt).has_device
    assert tabu_search(tai12a, **kw).fallback == ""


def test_hybrid_ea_with_a_fault_gives_the_cpu_result(faulty_rt, monkeypatch, tmp_path, tai12a):
    monkeypatch.setenv("HPU_PROFILE_DIR", str(tmp_path))
    calibrate(tai12a, faulty_rt)  # so that the fault hits the searches whatever ran before (not the calibration)
    kw = dict(population=3, generations=2, offspring=3, ils_iterations=2, ls_iterations=30, seed=3, runtime=faulty_rt)
    cpu = hybrid_ea(tai12a, strategy="cpu", concurrency=1, **kw)
    with monkeypatch.context() as m:
        _fault(m, "enqueue_nd_range_kernel", _lost_context, after=4)  # resident blocks: few launches a search
        gpu = hybrid_ea(tai12a, strategy="gpu", concurrency=3, **kw)
    assert gpu.fallbacks >= 1 and cpu.fallbacks == 0
    assert gpu.best_value == cpu.best_value and np.array_equal(gpu.history, cpu.history)
    assert np.array_equal(gpu.population, cpu.population) and gpu.ls_iterations == cpu.ls_iterations
    again = hybrid_ea(tai12a, strategy="gpu", concurrency=3, **kw)
    assert again.fallbacks == 0 and again.device_time > 0 and np.array_equal(again.population, cpu.population)


def test_a_fault_while_eight_threads_search_leaves_every_result_right(faulty_rt, monkeypatch, tai12a):
    """The context dies under all of them: each search falls back (or finishes first); all take the CPU's moves."""
    refs = {s: tabu_search(tai12a, strategy="cpu", cpu_chunks=1, seed=s, runtime=faulty_rt, **KW) for s in range(8)}

    def search(s: int):
        return tabu_search(tai12a, seed=s, runtime=faulty_rt, **DEVICE_SPLITS[s % 2], **KW)

    with monkeypatch.context() as m:
        _fault(m, "enqueue_nd_range_kernel", _lost_context, after=100)
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            results = list(ex.map(search, range(8)))
    assert any(r.fallback for r in results)
    for s, r in enumerate(results):
        _same_trajectory(r, refs[s])
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(search, range(8)))
    for s, r in enumerate(results):
        _same_trajectory(r, refs[s])
        assert r.fallback == "" and r.device_time > 0
