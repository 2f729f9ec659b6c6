"""A device lost by another thread while a call plans, builds or takes a lease: right results or DeviceFailure.

When a device call fails, the runtime rebuilds its context before the next one; when that rebuild fails, it runs
on the CPU from then on (``has_device`` False, ``device`` None).  That can happen on another thread at any moment
of a call on this one, so a call that asked ``rt.has_device`` and then reads ``rt.device`` (or its attributes, the
context, the queue, ``rt.units``) may find it gone.  These tests make it happen at a chosen moment: right after the
k-th read of ``rt.device`` on the calling thread (every k a call makes), while another thread's rebuild makes its
new context, or while a key-range sort partitions; the call must still return numpy's stable result with its input
unchanged (or raise :class:`hpu.DeviceFailure` with ``on_device_error="raise"``).  The program cache must never
give a context a program of another context that the process freed at the same address.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import same_bits

import hpu
import hpu.core.runtime as core_runtime
from hpu.core.costs import CostCurves
from hpu.core.runtime import NoDeviceError, Runtime

cl = pytest.importorskip("pyopencl")

_SIZES = [1 << 10, 1 << 16, 1 << 20]
#: Measured-looking curves under which the model gives the device the sorts ("auto" then plans with the device).
DEVICE_FAVOURED = hpu.Profile(p=2, g=1, gamma=1, curves={"sort": CostCurves.measured(_SIZES, {
    "cpu_sort": [s * 1e-7 for s in _SIZES], "device_sort": [s * 1e-10 for s in _SIZES],
    "transfer": [1e-6 + s * 1e-11 for s in _SIZES], "merge2": [s * 1e-8 for s in _SIZES],
    "merge16": [s * 2e-8 for s in _SIZES]}).to_dict()})

_rng = np.random.default_rng(11)
KEYS = _rng.standard_normal(1 << 15).astype(np.float32)
ROWS = _rng.standard_normal((64, 300)).astype(np.float32)
INTS = _rng.integers(0, 100, 1 << 15).astype(np.int32)
VALUES = _rng.integers(0, 1 << 40, 1 << 15)

#: name: (the call on a runtime with ``on_device_error``, numpy's stable results, the runtime's profile or None for
#: the test runtime's (no cost curves: only forced strategies plan with the device)).
CALLS = {
    "sort-gpu": (lambda rt, e: [hpu.hybrid_mergesort(KEYS, runtime=rt, strategy="gpu", on_device_error=e)],
                 [np.sort(KEYS, kind="stable")], None),
    "sort-advanced": (lambda rt, e: [hpu.hybrid_mergesort(KEYS, runtime=rt, strategy="advanced", alpha=0.3,
                                                          transfer_level=2, on_device_error=e)],
                      [np.sort(KEYS, kind="stable")], None),
    "sort-auto": (lambda rt, e: [hpu.hybrid_mergesort(KEYS, runtime=rt, on_device_error=e)],
                  [np.sort(KEYS, kind="stable")], DEVICE_FAVOURED),
    "rows-gpu": (lambda rt, e: [hpu.sort(ROWS, runtime=rt, strategy="gpu", on_device_error=e)],
                 [np.sort(ROWS, axis=-1, kind="stable")], None),
    "argsort-gpu": (lambda rt, e: [hpu.argsort(KEYS, runtime=rt, strategy="gpu", on_device_error=e)],
                    [np.argsort(KEYS, kind="stable")], None),
    "argsort-auto": (lambda rt, e: [hpu.argsort(KEYS, runtime=rt, on_device_error=e)],
                     [np.argsort(KEYS, kind="stable")], DEVICE_FAVOURED),
    "argsort-rows-gpu": (lambda rt, e: [hpu.argsort(ROWS, runtime=rt, strategy="gpu", on_device_error=e)],
                         [np.argsort(ROWS, axis=-1, kind="stable")], None),
    "sort_by_key-gpu": (lambda rt, e: list(hpu.sort_by_key(INTS, VALUES, runtime=rt, strategy="gpu",
                                                           on_device_error=e)),
                        [np.sort(INTS, kind="stable"), VALUES[np.argsort(INTS, kind="stable")]], None),
    "sort_by_key-auto": (lambda rt, e: list(hpu.sort_by_key(INTS, VALUES, runtime=rt, on_device_error=e)),
                         [np.sort(INTS, kind="stable"), VALUES[np.argsort(INTS, kind="stable")]], DEVICE_FAVOURED),
    "keyrange-shares": (lambda rt, e: [hpu.hybrid_mergesort(KEYS, runtime=rt, strategy="keyrange", shares=(0.5, 0.5),
                                                            on_device_error=e)],
                        [np.sort(KEYS, kind="stable")], None),
    "exchange": (lambda rt, e: [hpu.hybrid_mergesort(KEYS, runtime=rt, strategy="exchange", on_device_error=e)],
                 [np.sort(KEYS, kind="stable")], None),
    "paper-advanced": (lambda rt, e: [hpu.hybrid_mergesort(KEYS, runtime=rt, mode="paper", strategy="advanced",
                                                           alpha=0.25, transfer_level=4, on_device_error=e)],
                       [np.sort(KEYS, kind="stable")], None),
}


def _lose_device(rt: Runtime) -> None:
    """What another thread's device fault and failed rebuild do to ``rt``: on a thread of their own, a fatal failure
    is reported and the lease asked for next cannot rebuild the context, so ``rt`` runs on the CPU from then on."""
    def no_context(*args, **kwargs):
        raise cl.RuntimeError("clCreateContext failed: DEVICE_NOT_AVAILABLE")

    def fault_and_rebuild() -> None:
        rt.report_failure(hpu.DeviceFailure("clEnqueueNDRangeKernel failed: <unknown error -9999>", fatal=True))
        try:
            rt.acquire_lease()
        except hpu.DeviceFailure:  # no usable device: the rebuild failed
            pass

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(core_runtime.cl, "Context", no_context)
        other = threading.Thread(target=fault_and_rebuild, name="faulting")
        other.start()
        other.join(120)
    assert not other.is_alive() and not rt.has_device


class _DeviceReads:
    """Counts the reads of ``Runtime.device`` of one runtime on one thread; with ``at``, that runtime loses its
    device (:func:`_lose_device`) right after the ``at``-th read returns (a read made while holding the runtime's
    lock is not counted: no rebuild, which takes that lock, can come between it and what the holder reads next)."""

    def __init__(self, monkeypatch) -> None:
        self.rt: Runtime | None = None
        self.thread, self.at, self.reads, self.lost = None, None, 0, False
        monkeypatch.setattr(Runtime, "device", property(self._get, self._set), raising=False)

    def watch(self, rt: Runtime, at: int | None = None) -> None:
        self.rt, self.thread, self.at, self.reads, self.lost = rt, threading.current_thread(), at, 0, False

    def _get(self, rt: Runtime):
        device = rt.__dict__["device"]
        if rt is self.rt and threading.current_thread() is self.thread and not rt._cond._is_owned():
            self.reads += 1
            if self.reads == self.at:
                _lose_device(rt)
                self.lost = True
        return device

    @staticmethod
    def _set(rt: Runtime, device) -> None:
        rt.__dict__["device"] = device


def _check(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Each result bit for bit numpy's."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert same_bits(g, w)


@pytest.mark.parametrize("on_device_error", ["fallback", "raise"])
@pytest.mark.parametrize("call", list(CALLS))
def test_a_call_whose_device_is_lost_after_any_read_of_it_is_right(runtime, monkeypatch, call, on_device_error):
    """For every k, the device lost right after the call's k-th read of ``rt.device``: numpy's result, the input
    unchanged, or DeviceFailure with ``on_device_error="raise"``.  It raised AttributeError (``max_device_elements``,
    ``keyed_fits``, ``rows_on_device`` and ``Runtime.device_memory_bytes`` read the device again after checking it;
    a lease read the runtime's queue after its lock was let go), NoDeviceError or TypeError (``row_tile`` built its
    sorter for the runtime's device), IndexError (the model's split read ``rt.units`` again) or ValueError (a sort
    too large for a device of no capacity went to key ranges, whose shares then named a device no more there; key
    ranges and exchanges counted the devices again after choosing the shares; paper mode's ``execute`` took the
    runtime for one made CPU-only)."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    run, want, profile = CALLS[call]
    inputs = [KEYS, ROWS, INTS, VALUES]
    before = [x.copy() for x in inputs]
    reads = _DeviceReads(monkeypatch)
    with Runtime(runtime.device, profile=profile or runtime.profile, threads=2) as rt:
        reads.watch(rt)
        _check(run(rt, on_device_error), want)  # undisturbed: how many reads the call makes
    count = reads.reads
    assert count > 0
    for k in range(1, count + 1):
        with Runtime(runtime.device, profile=profile or runtime.profile, threads=2) as rt:
            reads.watch(rt, at=k)
            try:
                got = run(rt, on_device_error)
            except hpu.DeviceFailure:
                assert on_device_error == "raise", k
            else:
                _check(got, want)
            assert reads.lost and not rt.has_device, k
    assert all(same_bits(x, b) for x, b in zip(inputs, before))


@pytest.mark.parametrize("on_device_error", ["fallback", "raise"])
def test_a_keyrange_sort_whose_device_is_lost_while_it_partitions_is_right(fresh, monkeypatch, on_device_error):
    """The device lost while the keys are partitioned among the units: its key ranges are sorted on the CPU (or
    DeviceFailure).  They were left unsorted, and the result returned: the units that sort the ranges were read
    again after the partition, and a device lost meanwhile was no more among them."""
    import hpu.sorting.keyrange as keyrange

    real = keyrange.partition

    def partition(*args, **kwargs):
        parts = real(*args, **kwargs)
        _lose_device(fresh)
        return parts

    monkeypatch.setattr(keyrange, "partition", partition)
    a = KEYS.copy()
    if on_device_error == "raise":
        with pytest.raises(hpu.DeviceFailure, match="no usable"):
            hpu.hybrid_mergesort(a, runtime=fresh, strategy="keyrange", shares=(0.5, 0.5), on_device_error="raise")
    else:
        out, trace = hpu.hybrid_mergesort(a, runtime=fresh, strategy="keyrange", shares=(0.5, 0.5),
                                          return_trace=True)
        assert same_bits(out, np.sort(KEYS, kind="stable")) and "no usable" in trace.fallback
    assert same_bits(a, KEYS) and not fresh.has_device


@pytest.mark.parametrize("on_device_error", ["fallback", "raise"])
def test_a_keyrange_sort_whose_device_is_lost_after_any_read_of_it_is_right(fresh, monkeypatch, on_device_error):
    """``keyrange_sort`` given shares for the device, which is lost right after its k-th read of ``rt.device``: the
    device's ranges sorted on the CPU (or DeviceFailure).  A device lost once the units were read failed the check
    that each can sort the keys (ValueError); lost after the partition, its ranges were left unsorted."""
    from hpu.sorting.keyrange import keyrange_sort

    reads = _DeviceReads(monkeypatch)
    reads.watch(fresh)
    assert same_bits(keyrange_sort(KEYS, fresh, (0.5, 0.5))[0], np.sort(KEYS, kind="stable"))
    for k in range(1, reads.reads + 1):
        with Runtime(fresh.device, profile=fresh.profile, threads=2) as rt:
            reads.watch(rt, at=k)
            try:
                out = keyrange_sort(KEYS, rt, (0.5, 0.5), on_device_error=on_device_error)[0]
            except hpu.DeviceFailure:
                assert on_device_error == "raise", k
            else:
                assert same_bits(out, np.sort(KEYS, kind="stable")), k
            assert reads.lost and not rt.has_device, k


def test_exchange_fits_when_the_device_is_lost_after_any_read_of_it(fresh, monkeypatch):
    """``exchange_fits`` read ``rt.units`` twice (the shares' devices, then each one's capacity): a device lost
    between the two raised IndexError.  A lost device holds nothing."""
    from hpu.sorting.exchange import exchange_fits

    reads = _DeviceReads(monkeypatch)
    reads.watch(fresh)
    assert exchange_fits(fresh, 1 << 15, (0.0, 1.0), 4)
    for k in range(1, reads.reads + 1):
        with Runtime(fresh.device, profile=fresh.profile, threads=2) as rt:
            reads.watch(rt, at=k)
            assert exchange_fits(rt, 1 << 15, (0.0, 1.0), 4) in (True, False)
            assert reads.lost and not rt.has_device, k


@pytest.mark.parametrize("rebuilt", [True, False])
def test_a_build_while_another_thread_rebuilds_the_context(fresh, monkeypatch, rebuilt):
    """A program built without a lease while another thread rebuilds the context after a fault: the new context's
    program, or NoDeviceError once the rebuild failed.  The rebuild sets the context and queue to None before it
    makes the new ones, and such a build read None there: pyopencl's AttributeError."""
    source = "__kernel void k(__global int *a) { a[0] = 1; }"
    old = fresh.context
    paused, moved, got = threading.Event(), threading.Event(), {}
    real_context = cl.Context

    def context(*args, **kwargs):  # the rebuild's new context, made once the builder has built or waits
        if threading.current_thread().name == "rebuilding":
            paused.set()
            assert moved.wait(60)
            if not rebuilt:
                raise cl.RuntimeError("clCreateContext failed: DEVICE_NOT_AVAILABLE")
        return real_context(*args, **kwargs)

    class Watched(threading.Condition):  # the runtime's lock, telling when the builder waits for it
        def __enter__(self):
            if threading.current_thread().name == "building":
                moved.set()
            return super().__enter__()

    def rebuild() -> None:
        fresh.report_failure(hpu.DeviceFailure("clEnqueueNDRangeKernel failed: <unknown error -9999>", fatal=True))
        try:
            fresh.release_lease(fresh.acquire_lease())
        except hpu.DeviceFailure:
            assert not rebuilt

    def build() -> None:
        try:
            got["program"] = fresh.build(source)
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            got["error"] = e
        finally:
            moved.set()

    monkeypatch.setattr(core_runtime.cl, "Context", context)
    monkeypatch.setattr(fresh, "_cond", Watched())
    rebuilding = threading.Thread(target=rebuild, name="rebuilding")
    rebuilding.start()
    assert paused.wait(60)
    building = threading.Thread(target=build, name="building")
    building.start()
    rebuilding.join(60)
    building.join(60)
    assert not rebuilding.is_alive() and not building.is_alive()
    if rebuilt:
        assert "error" not in got, got.get("error")
        assert fresh.context is not old and got["program"].get_info(cl.program_info.CONTEXT) == fresh.context
    else:
        assert isinstance(got.get("error"), NoDeviceError), got
        assert not fresh.has_device


def test_a_program_is_never_given_to_a_new_context_at_a_freed_one_s_address(fresh, monkeypatch, tmp_path):
    """Programs are cached per context: where pyopencl caches a program's binary itself (platforms it does not know
    to cache builds, Intel's or AMD's; emulated here) the program keeps no reference to its context, and a context
    made after one was freed often gets its address.  Keyed by that address (``id``), the cache gave the new
    context the freed one's program, whose kernels no queue of the new context runs (INVALID_CONTEXT)."""
    import pyopencl.characterize

    monkeypatch.setattr(pyopencl.characterize, "has_src_build_cache", lambda device: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # pyopencl's binary cache
    source = "__kernel void k(__global int *a) { a[0] = 2; }"
    freed = cl.Context([fresh.device])
    fresh.build(source, context=freed)
    del freed
    contexts = [cl.Context([fresh.device]) for _ in range(8)]  # all alive: each at an address of its own
    for ctx in contexts:
        assert fresh.build(source, context=ctx).get_info(cl.program_info.CONTEXT) == ctx


@pytest.mark.parametrize("on_device_error", ["fallback", "raise"])
def test_execute_on_a_runtime_that_lost_its_device(fresh, on_device_error):
    """A device strategy on a runtime that lost its device (not one made CPU-only: ValueError, tests/test_dc.py) is
    no misuse, since another thread may have lost it after the caller checked: the device share falls back (the
    sum, as the CPU computes it) or raises DeviceFailure."""
    from hpu.arraysum import array_sum_spec
    from hpu.dc.executor import execute

    plan = array_sum_spec().plan(1000, np.int64)
    a = np.arange(1000, dtype=np.int64)
    _lose_device(fresh)
    assert fresh.device_lost and not fresh.has_device
    for strategy, kw in (("gpu", {}), ("advanced", {"alpha": 0.5, "transfer_level": 3})):
        if on_device_error == "raise":
            with pytest.raises(hpu.DeviceFailure):
                execute(plan, a, fresh, strategy=strategy, on_device_error="raise", **kw)
        else:
            out, trace = execute(plan, a, fresh, strategy=strategy, **kw)
            assert out[0] == a.sum() and trace.fallback
    assert same_bits(a, np.arange(1000, dtype=np.int64))
