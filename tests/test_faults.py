"""A faulted device, a closed runtime, a forked process: right results or clear errors, never a poisoned runtime."""

from __future__ import annotations

import logging
import os
import threading

import numpy as np
import pytest
from conftest import pipeline_calls, raises_closed_in_a_fork, same_bits

import hpu
import hpu.core.runtime as core_runtime
import hpu.dc.executor as dc_executor
import hpu.sorting.device as sort_device

cl = pytest.importorskip("pyopencl")

FAST = [dict(strategy="gpu"), dict(strategy="advanced", alpha=0.3, transfer_level=2)]


def _fault_once(monkeypatch, owner, name, after: int = 0):
    """Make ``owner.name`` raise the error NVIDIA gave (-9999) on its call number ``after``, and kill the context.

    Like a real faulted context, the one in use then fails every later call
    made on it (seen through the lease or plan argument's ``context``): only a
    runtime that rebuilds its context gets the device back.
    """
    real, calls, dead = getattr(owner, name), [], []

    def context_of(args):  # a lease's context, or a device sorter's lease's
        for a in args:
            for obj in (a, getattr(a, "runtime", None)):
                if hasattr(obj, "context"):
                    return obj.context
        return None

    def faulty(*args, **kw):
        calls.append(1)
        ctx = context_of(args)
        if len(calls) == after + 1 or (ctx is not None and any(ctx is d for d in dead)):
            dead.append(ctx)
            raise cl.LogicError("clEnqueueNDRangeKernel failed: <unknown error -9999>")
        return real(*args, **kw)

    monkeypatch.setattr(owner, name, faulty)
    return calls


def _twenty_right(rt, rng, mode="fast", **kw):
    for _ in range(20):
        a = rng.standard_normal(int(rng.integers(2000, 40_000))).astype(np.float32)
        out, tr = hpu.hybrid_mergesort(a, runtime=rt, mode=mode, return_trace=True, **kw)
        assert same_bits(out, np.sort(a, kind="stable"))
        assert tr.fallback == ""  # the device works again: the runtime was not poisoned


@pytest.mark.parametrize("kw", FAST)
@pytest.mark.parametrize("on_error", ["fallback", "raise"])
@pytest.mark.parametrize("device_sort", ["merge", "radix", "tile-radix"])
def test_fault_mid_sort_then_twenty_right(fresh, monkeypatch, kw, on_error, device_sort):
    rng = np.random.default_rng(1)
    # Sorts in several waves: the fault comes after a sort was enqueued; the CPU's radix sort: one sort.
    after = 0 if device_sort == "radix" else 1
    calls = _fault_once(monkeypatch, sort_device.DeviceSorter, "sort", after=after)
    a = rng.standard_normal(300_000).astype(np.float32)
    before = a.copy()
    opts = hpu.PipelineOptions(chunk_bytes=64 << 10, device_sort=device_sort)
    if on_error == "raise":
        with pytest.raises(hpu.DeviceFailure, match="-9999"):
            hpu.hybrid_mergesort(a, runtime=fresh, on_device_error="raise", options=opts, **kw)
    else:
        out, tr = hpu.hybrid_mergesort(a, runtime=fresh, return_trace=True, options=opts, **kw)
        assert same_bits(out, np.sort(a, kind="stable")) and "-9999" in tr.fallback
    assert len(calls) > after and same_bits(a, before)
    _twenty_right(fresh, rng, **kw)


def test_fault_in_paper_mode_then_twenty_right(fresh, monkeypatch):
    rng = np.random.default_rng(2)
    _fault_once(monkeypatch, dc_executor, "_device_levels")
    a = rng.integers(0, 1000, 50_000).astype(np.int32)
    out, tr = hpu.hybrid_mergesort(a, runtime=fresh, mode="paper", strategy="advanced", alpha=0.25,
                                   transfer_level=4, return_trace=True)
    assert same_bits(out, np.sort(a, kind="stable")) and "-9999" in tr.fallback
    _twenty_right(fresh, rng, mode="paper", strategy="gpu")


def test_lost_device_runs_on_the_cpu_with_one_warning(fresh, monkeypatch, caplog):
    """When the context cannot be rebuilt, every later call is right, on the CPU, after one warning."""
    rng = np.random.default_rng(3)
    _fault_once(monkeypatch, sort_device.DeviceSorter, "sort")

    def no_context(*a, **k):
        raise cl.RuntimeError("clCreateContext failed: DEVICE_NOT_AVAILABLE")

    monkeypatch.setattr(core_runtime.cl, "Context", no_context)
    a = rng.standard_normal(30_000)
    assert same_bits(hpu.hybrid_mergesort(a, strategy="gpu", runtime=fresh), np.sort(a, kind="stable"))
    with caplog.at_level(logging.WARNING, logger="hpu"):
        caplog.clear()
        for _ in range(5):
            b = rng.standard_normal(30_000)
            out, tr = hpu.hybrid_mergesort(b, strategy="gpu", runtime=fresh, return_trace=True)
            assert same_bits(out, np.sort(b, kind="stable"))
    assert not fresh.has_device and tr.strategy == "cpu"
    assert len([r for r in caplog.records if "could not be rebuilt" in r.getMessage()]) == 1


def test_closed_runtime_raises():
    rt = hpu.Runtime("none")
    rt.close()
    with pytest.raises(hpu.RuntimeClosedError, match="closed"):
        hpu.hybrid_mergesort(np.arange(10), runtime=rt)
    rt.close()  # idempotent


def test_close_while_calls_run(runtime):
    """close() waits for running calls; calls made after it raise RuntimeClosedError; no deadlock."""
    rt = hpu.Runtime(runtime.device, profile=runtime.profile, threads=2)
    errors, wrong, done = [], [], []
    started = threading.Barrier(5, timeout=120)  # a thread that died before it: a failure, not a hang

    def loop(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            while True:
                a = rng.integers(0, 50, int(rng.integers(1, 100_000))).astype(np.int64)
                if not np.array_equal(hpu.hybrid_mergesort(a, strategy="gpu" if seed % 2 else "cpu", runtime=rt),
                                      np.sort(a, kind="stable")):
                    wrong.append(seed)
                done.append(seed)
                if len([s for s in done if s == seed]) == 1:
                    started.wait()  # every thread has sorted once and goes on sorting: close() meets running calls
        except hpu.RuntimeClosedError as e:
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    started.wait()
    rt.close()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and len(errors) == 4 and not wrong
    assert sorted(set(done)) == [0, 1, 2, 3]  # each thread's calls ran (and were right) before it was refused
    assert all("closed" in str(e) for e in errors)


def test_a_running_call_ends_right_after_close_is_called(runtime):
    """close() waits for a running call, which still gets its device leases and makes inner calls, and a second
    close() returns only once everything is released; new calls are refused."""
    rt = hpu.Runtime(runtime.device, profile=runtime.profile, threads=2)
    a = np.random.default_rng(5).integers(-1000, 1000, 50_000)
    seconds = []
    with rt.call():  # a public call in progress on this thread
        closers = [threading.Thread(target=lambda: (rt.close(), seconds.append(rt.host_pool.total_bytes)))
                   for _ in range(2)]
        closers[0].start()
        while not rt.closed:
            threading.Event().wait(0.001)
        closers[1].start()
        for strategy in ("gpu", "cpu", "auto"):
            assert same_bits(hpu.hybrid_mergesort(a, strategy=strategy, runtime=rt), np.sort(a, kind="stable"))
        assert all(c.is_alive() for c in closers) and not seconds  # both wait for this call
    for c in closers:
        c.join(timeout=30)
    assert not any(c.is_alive() for c in closers) and seconds == [0, 0]  # the host pool released before either
    with pytest.raises(hpu.RuntimeClosedError, match="closed"):
        hpu.hybrid_mergesort(a, runtime=rt)


def test_closing_a_peer_leaves_its_runtime_working(runtime):
    """Peers share their runtime's thread pool: closing one leaves the pool to the runtime."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    rt = hpu.Runtime(devices=[runtime.device] * 2, profile=runtime.profile, threads=2)
    try:
        rt.peers[0].close()
        assert rt.pool.submit(lambda: 42).result(timeout=30) == 42
        a = np.random.default_rng(6).integers(0, 100, 200_000)
        assert same_bits(hpu.hybrid_mergesort(a, strategy="cpu", runtime=rt), np.sort(a, kind="stable"))
    finally:
        rt.close()


def test_a_runtime_closed_from_its_own_pool_task_is_released(runtime):
    rt = hpu.Runtime(runtime.device, profile=runtime.profile, threads=2)
    rt.pool.submit(rt.close).result(timeout=30)  # raised "cannot join current thread", half closed
    assert rt.closed and rt.host_pool.total_bytes == 0
    with pytest.raises(hpu.RuntimeClosedError, match="is closed"):
        rt.acquire_lease()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_runtime_after_fork_raises_in_the_child():
    rt = hpu.Runtime("none")
    assert raises_closed_in_a_fork(lambda: hpu.hybrid_mergesort(np.arange(5), runtime=rt))
    assert np.array_equal(hpu.hybrid_mergesort(np.arange(5)[::-1], runtime=rt), np.arange(5))
    rt.close()


def test_default_runtime_is_made_once_and_replaceable():
    first = hpu.default_runtime()
    assert hpu.default_runtime() is first
    mine = hpu.Runtime("none")
    with hpu.using_runtime(mine):
        assert hpu.default_runtime() is mine
        out, tr = hpu.hybrid_mergesort(np.arange(2000)[::-1], return_trace=True)
        assert np.array_equal(out, np.arange(2000)) and tr.strategy == "cpu"
    assert hpu.default_runtime() is first
    prev = hpu.set_default_runtime(mine)
    assert prev is first and hpu.default_runtime() is mine
    hpu.set_default_runtime(prev)
    mine.close()
    with pytest.raises(TypeError, match="Runtime"):
        hpu.set_default_runtime("gpu")


def test_uncalibrated_default_sorts_on_the_cpu(runtime, tmp_path, monkeypatch):
    """With no calibrated profile the default strategy is the CPU alone: never slower than it."""
    monkeypatch.setenv("HPU_PROFILE_DIR", str(tmp_path))
    with hpu.Runtime(runtime.device) as rt:
        assert not rt.calibrated
        a = np.random.default_rng(0).integers(0, 1 << 20, 1 << 17).astype(np.int32)
        out, tr = hpu.hybrid_mergesort(a, runtime=rt, return_trace=True)
        assert np.array_equal(out, np.sort(a)) and tr.strategy == "cpu" and tr.alpha == 1.0


@pytest.mark.parametrize("device_fails", [False, True])
def test_a_failing_cpu_share_gives_its_call_s_lease_back(fresh, device_fails):
    """The CPU share's error is raised, and only once every device share has ended and its lease has gone back:
    kept for the next call when the device share worked, discarded (its failure reported) when it failed."""
    from hpu.core.hybrid import run_hybrid

    leases = []

    def device(lease):
        leases.append(lease)
        if device_fails:
            raise cl.LogicError("clEnqueueNDRangeKernel failed: <unknown error -9999>")
        return 1

    def cpu():
        raise ZeroDivisionError("planted")

    with pytest.raises(ZeroDivisionError, match="planted"):
        run_hybrid(fresh, device=device, cpu=cpu, redo=lambda: 1, on_device_error="fallback")
    kept = fresh.acquire_lease()
    try:
        assert (kept is leases[0]) is not device_fails  # a faulted lease is never lent again
    finally:
        fresh.release_lease(kept)


def test_a_trace_read_by_two_threads_at_once_counts_every_event():
    """One thread resolving a trace's deferred events while another asks for them: both see every event."""
    import time as _time

    from hpu.core.trace import Recorder, Trace

    rec = Recorder()

    def slow_reader():
        _time.sleep(0.2)
        rec.add("device", "sort", 0, 0.0, 1.0, 1, 10, 40)

    rec.deferred.append(slow_reader)
    trace = rec.finish(Trace("gpu", 0.0, 0, 0, 10))
    seen = []
    t = threading.Thread(target=lambda: seen.append(trace.busy("device")))
    t.start()
    _time.sleep(0.05)
    seen.append(trace.busy("device"))
    t.join()
    assert seen == [1.0, 1.0]


def test_quiesce_flushes_every_queue_before_finishing_any():
    """After a failure every queue is flushed before any is finished: a command of one queue may wait for an event
    of another that an OpenCL driver has not submitted yet (the values' gathers on the copy queue wait for the
    sort on the kernel queue), and finishing the first queue alone could then wait forever."""
    from hpu.sorting.pipeline import quiesce

    calls = []

    class Queue:
        def __init__(self, name: str) -> None:
            self.name = name

        def flush(self) -> None:
            calls.append(("flush", self.name))

        def finish(self) -> None:
            calls.append(("finish", self.name))

    quiesce([], (Queue("copy"), Queue("kernel"), Queue("download")))
    assert calls[:3] == [("flush", "copy"), ("flush", "kernel"), ("flush", "download")]
    assert sorted(calls[3:]) == [("finish", "copy"), ("finish", "download"), ("finish", "kernel")]


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("part", ["sort", "rows", "kv"])
def test_ctrl_c_right_after_a_copy_is_enqueued(fresh, monkeypatch, part, native):
    """A Ctrl-C (SIGINT) that comes right after a copy up is enqueued, before the pipeline keeps its event, reaches
    the caller as ``KeyboardInterrupt`` once every event is kept: the copy's event, dropped, waited (holding
    Python's lock) for a staging copy that the caller had yet to make, and the process hung.  The next call is
    right.  One piece (the caller stages it alone) and several (staged by the compiled stager or pool tasks)."""
    import faulthandler
    import signal
    import sys

    import pyopencl as cl

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("Python raises KeyboardInterrupt on the main thread only")
    rng = np.random.default_rng(3)
    a = rng.integers(-1000, 1000, 257 * 1200).astype(np.int32)
    opts = hpu.PipelineOptions(chunk_bytes=64 << 10 if native else 1 << 22, native_staging=native)
    run, want = pipeline_calls(fresh, a, rng.integers(-2**62, 2**62, a.size), 257, opts)[part]
    real, armed = cl.enqueue_copy, [True]

    def enqueue_copy(*args, **kwargs):
        if not armed[0] or threading.current_thread() is not threading.main_thread():
            return real(*args, **kwargs)
        armed[0] = False
        held = [real(*args, **kwargs)]
        try:
            signal.raise_signal(signal.SIGINT)  # Python's handler runs here, before the event is returned
        except KeyboardInterrupt:
            held.clear()  # as the unwinding frees pyopencl's return value, an event no one keeps
            raise
        return held.pop()

    monkeypatch.setattr(cl, "enqueue_copy", enqueue_copy)
    # Python's own handler, as in an interactive program (a job started in the background ignores SIGINT)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)  # a hang: every thread's traceback
    try:
        with pytest.raises(KeyboardInterrupt):
            run()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGINT, outer)
    assert not armed[0]
    monkeypatch.undo()
    assert all(same_bits(got, w) for got, w in zip(run(), want, strict=True))


def test_a_call_in_flight_when_another_thread_loses_the_device(fresh, monkeypatch):
    """A call that holds a lease and has yet to build its sorter when another thread's device fault and failed
    rebuild leave the runtime CPU-only still sorts right (in its lease's context): it raised NoDeviceError (or
    pybind's bad_cast), which no fallback catches, since its programs were built for the runtime's device."""
    import pyopencl as cl

    from hpu.sorting.device import DeviceSorter

    a = np.random.default_rng(8).standard_normal(1 << 16).astype(np.float32)
    paused, go = threading.Event(), threading.Event()
    real_of_lease, real_sort, faulted = DeviceSorter.of_lease.__func__, DeviceSorter.sort, []

    def of_lease(cls, lease, dtype, algorithm=None):
        if threading.current_thread().name == "in-flight":
            paused.set()
            assert go.wait(60)
        return real_of_lease(cls, lease, dtype, algorithm)

    def sort(self, *args, **kwargs):
        if threading.current_thread().name == "faulting" and not faulted:
            faulted.append(True)
            raise cl.LogicError("clEnqueueNDRangeKernel failed: <unknown error -9999>")
        return real_sort(self, *args, **kwargs)

    def no_context(*args, **kwargs):
        raise cl.RuntimeError("clCreateContext failed: DEVICE_NOT_AVAILABLE")

    monkeypatch.setattr(DeviceSorter, "of_lease", classmethod(of_lease))
    monkeypatch.setattr(DeviceSorter, "sort", sort)
    got: dict = {}

    def call(name: str) -> None:
        try:
            got[name] = [hpu.hybrid_mergesort(a, runtime=fresh, strategy="gpu") for _ in range(2)]
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            got[name] = e

    in_flight = threading.Thread(target=call, args=("in-flight",), name="in-flight", daemon=True)
    in_flight.start()
    assert paused.wait(60)
    first = hpu.hybrid_mergesort(a, runtime=fresh, strategy="gpu")  # no fault on this thread
    monkeypatch.setattr(core_runtime.cl, "Context", no_context)
    faulting = threading.Thread(target=call, args=("faulting",), name="faulting")
    faulting.start()
    faulting.join(120)
    assert faulted and not fresh.has_device  # the fault's rebuild failed: CPU-only from then on
    go.set()
    in_flight.join(120)
    want = np.sort(a, kind="stable")
    assert same_bits(first, want)
    for name in ("faulting", "in-flight"):
        assert not isinstance(got[name], BaseException), got[name]
        assert all(same_bits(out, want) for out in got[name])
