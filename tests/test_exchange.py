"""Exchange sort (every device sorts a range of positions, then the devices trade key ranges and merge): equal to
numpy's stable sort bit for bit, cuts against brute force, the model's shares, failures."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import same_bits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_keyrange import DTYPES, _input

import hpu
import hpu.sorting.device as sort_device
from hpu.core.costs import CostCurves
from hpu.sorting.costs import exchange_split, fast_cost, fast_split
from hpu.sorting.exchange import exchange_cuts, exchange_fits, exchange_sort

cl = pytest.importorskip("pyopencl")


@pytest.fixture(scope="module")
def trio(runtime):
    """One HPU of the test device named three times: three runtimes in one context."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    with hpu.Runtime(devices=[runtime.device] * 3, profile=runtime.profile, threads=2) as rt:
        yield rt


def _shares(weights: list[float]) -> tuple[float, ...]:
    w = np.asarray(weights, dtype=float)
    if w.sum() == 0:
        w[-1] = 1.0
    return (0.0, *(w / w.sum()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(DTYPES), n=st.one_of(st.integers(0, 3), st.integers(0, 120_000)),
       kind=st.sampled_from(["random", "special", "equal", "few"]),
       weights=st.lists(st.sampled_from([0.0, 0.1, 0.3, 1.0]), min_size=3, max_size=3), seed=st.integers(0, 2**16),
       device_sort=st.sampled_from([None, "merge", "radix"]))
def test_forced_shares_over_three_devices_equal_numpy(trio, dtype, n, kind, weights, seed, device_sort):
    # Not "tile-radix" (tested on one queue elsewhere): PoCL 3.1 can abort (an assertion in
    # pocl_release_dlhandle_cache) when one kernel runs on several queues at once with different grid widths, and
    # each more kernel run that way here makes that likelier.
    a = _input(np.random.default_rng(seed), dtype, n, kind)
    before = a.copy()
    opts = hpu.PipelineOptions(device_sort=device_sort, chunk_bytes=1 << 16)
    out, tr = exchange_sort(a, trio, _shares(weights), options=opts)
    assert tr.strategy == "exchange" and tr.fallback == "" and tr.alpha == 0.0
    assert same_bits(out, np.sort(before, kind="stable"))
    assert same_bits(a, before)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_every_device_merges_its_range_and_copies_it_down(runtime, k):
    """The trace: each device sorts, merges the pieces it got (with more than one device) and copies its range of
    the result down; the ranges are about the shares asked for."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = _input(np.random.default_rng(k), np.float64, 150_001, "special")
    with hpu.Runtime(devices=[runtime.device] * k, profile=runtime.profile, threads=2) as rt:
        out, tr = hpu.hybrid_mergesort(a, strategy="exchange", runtime=rt, return_trace=True)
        tr.resolve()
    assert same_bits(out, np.sort(a, kind="stable"))
    units = [""] + [str(i) for i in range(1, k)]
    sorted_keys, merged_keys = [], []
    for u in units:
        kinds = [e.kind for e in tr.events if e.unit == f"device{u}"]
        assert "sort" in kinds and (("merge" in kinds) == (k > 1))
        assert any(e.kind == "d2h" for e in tr.events if e.unit == f"bus{u}")
        for kind, keys in (("sort", sorted_keys), ("merge", merged_keys)):
            keys.append(sum(e.nbytes for e in tr.events if e.unit == f"device{u}" and e.kind == kind) // a.itemsize)
    # Every key sorted once (a range of positions a device) and, with several devices, merged once (a key range
    # each): the devices' ranges cover the input, none empty.
    assert sum(sorted_keys) == a.size and min(sorted_keys) > 0
    if k > 1:
        assert sum(merged_keys) == a.size and min(merged_keys) > 0


def test_one_device_draws_no_sample(runtime):
    """With one device there is nothing to trade: no splitters, so no task for them on the CPU pool."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(4).integers(-50, 50, 100_000).astype(np.int32)
    with hpu.Runtime(runtime.device, profile=runtime.profile, threads=2) as rt:
        submitted, submit = [], rt.pool.submit

        def spy(fn, /, *args, **kwargs):
            submitted.append(getattr(fn, "__qualname__", ""))
            return submit(fn, *args, **kwargs)

        rt.pool.submit = spy
        out, tr = hpu.hybrid_mergesort(a, strategy="exchange", runtime=rt, return_trace=True)
    assert same_bits(out, np.sort(a, kind="stable")) and not tr.fallback
    assert submitted and not [q for q in submitted if q.startswith("exchange_sort")], submitted


def test_a_freed_result_returns_to_the_pool_at_once(trio):
    """No reference cycle keeps an exchange sort's result leased: the next call gets the same pooled block (the
    first version's barrier held the sort's state, and with it the result, until a garbage collection)."""
    a = np.random.default_rng(2).standard_normal(300_000)
    gc.disable()
    try:
        out = exchange_sort(a, trio, (0.0, 0.4, 0.3, 0.3))[0]
        where = out.ctypes.data
        assert trio.host_pool.is_pinned(out)
        del out
        again = exchange_sort(a, trio, (0.0, 0.4, 0.3, 0.3))[0]
        assert again.ctypes.data == where and same_bits(again, np.sort(a, kind="stable"))
    finally:
        gc.enable()


def test_a_pinned_input_is_not_staged(trio, staged_sources):
    """An input in the runtime's pinned memory (Runtime.empty_pinned) is read by each device's DMA engine itself:
    no staging copy reads it; a pageable copy of it is staged.  Both sorts equal numpy's."""
    keys = np.random.default_rng(4).integers(-500, 500, 2_000_000).astype(np.int32)
    pinned = trio.empty_pinned(keys.shape, keys.dtype)
    pinned[:] = keys
    for src in (pinned, keys.copy()):
        staged_sources.clear()
        out = exchange_sort(src, trio, (0.0, 0.4, 0.3, 0.3))[0]
        assert same_bits(out, np.sort(keys, kind="stable")) and same_bits(src, keys)
        staged = [s for s, _, _ in staged_sources if np.shares_memory(s, src)]
        assert (staged == []) == (src is pinned), len(staged)


def test_devices_of_one_platform_share_one_context(runtime):
    """Several devices: one context (pinned memory pinned for all), each runtime's queues on its own device; a
    runtime on a context of the caller's."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    with hpu.Runtime(devices=[runtime.device] * 2, profile=runtime.profile, threads=1) as rt:
        assert all(u.context is rt.context for u in rt.units)
        lease = rt.peers[0].acquire_lease()
        try:
            assert lease.queue.device == runtime.device and lease.copy_queue.device == runtime.device
        finally:
            rt.peers[0].release_lease(lease)
    ctx = cl.Context([runtime.device])
    with hpu.Runtime(runtime.device, context=ctx, profile=runtime.profile, threads=1) as rt:
        assert rt.context is ctx
        a = np.random.default_rng(4).standard_normal(50_000)
        assert same_bits(hpu.hybrid_mergesort(a, strategy="gpu", runtime=rt), np.sort(a, kind="stable"))


def _brute_cuts(runs: list[np.ndarray], splitters: np.ndarray, targets: list[int]) -> np.ndarray:
    """Cuts from the stable order of all keys: (key, run, place) ranks, the first target keys after clipping."""
    keys = np.concatenate(runs)
    run_of = np.concatenate([np.full(r.size, d) for d, r in enumerate(runs)])
    order = np.lexsort((np.arange(keys.size), keys))  # stable by key: run then place (runs concatenated in order)
    rank = np.empty(keys.size, np.int64)
    rank[order] = np.arange(keys.size)
    cuts = np.zeros((len(runs), len(targets) + 2), np.int64)
    cuts[:, -1] = [r.size for r in runs]
    for j, (s, t) in enumerate(zip(splitters, targets)):
        below, level = int((keys < s).sum()), int((keys <= s).sum())
        take = rank < min(max(t, below), level)
        for d in range(len(runs)):
            cuts[d, j + 1] = int(take[run_of == d].sum())
    return cuts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), max_size=12), min_size=1, max_size=4), st.data())
def test_cuts_agree_with_the_stable_order_by_brute_force(runs, data):
    runs = [np.sort(np.array(r, dtype=np.int64)) for r in runs]
    n = sum(r.size for r in runs)
    j = data.draw(st.integers(0, 3))
    splitters = np.sort(np.array(data.draw(st.lists(st.integers(-1, 7), min_size=j, max_size=j)), dtype=np.int64))
    targets = sorted(data.draw(st.lists(st.integers(0, n), min_size=j, max_size=j)))
    lower = np.array([[np.searchsorted(r, s, "left") for s in splitters] for r in runs]).reshape(len(runs), j)
    upper = np.array([[np.searchsorted(r, s, "right") for s in splitters] for r in runs]).reshape(len(runs), j)
    got = exchange_cuts([r.size for r in runs], lower, upper, targets)
    assert np.array_equal(got, _brute_cuts(runs, splitters, targets))
    assert np.all(np.diff(got, axis=1) >= 0)


def test_cuts_reject_bad_bounds():
    with pytest.raises(ValueError, match="shape"):
        exchange_cuts([3, 3], np.zeros((2, 1)), np.zeros((1, 1)), [2])
    with pytest.raises(ValueError, match="lower <= upper"):
        exchange_cuts([3, 3], np.array([[2], [0]]), np.array([[1], [0]]), [2])


def test_rank_bounds_against_searchsorted(runtime):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    rng = np.random.default_rng(3)
    for dtype in (np.int32, np.float64):
        s = np.sort(rng.integers(0, 50, 10_001).astype(dtype))
        if dtype == np.float64:
            s[-300:] = np.nan
            s[s == 5] = -0.0
        q = np.array([-1, 0, 5, 17, 49, 60, np.nan, 0.0][: 8 if dtype == np.float64 else 6], dtype=dtype)
        sorter = sort_device.DeviceSorter(runtime, dtype, algorithm="merge")
        mf = cl.mem_flags
        d_s = cl.Buffer(runtime.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=s)
        d_q = cl.Buffer(runtime.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=q)
        d_b = cl.Buffer(runtime.context, mf.READ_WRITE, 16 * q.size)
        sorter.rank_bounds(d_s, s.size, d_q, q.size, d_b).wait()
        got = np.empty(2 * q.size, np.int64)
        cl.enqueue_copy(runtime.queue, got, d_b)
        want = np.stack([np.searchsorted(s, q, "left"), np.searchsorted(s, q, "right")], axis=1).ravel()
        assert np.array_equal(got, want)  # numpy's searchsorted orders NaN last and -0.0 == 0.0, as the sort does
        with pytest.raises(ValueError, match="m must be"):
            sorter.rank_bounds(d_s, s.size, d_q, 0, d_b)


@pytest.mark.parametrize("on_error", ["fallback", "raise"])
@pytest.mark.parametrize("after", [1, 4])
def test_a_device_lost_mid_exchange_gives_a_right_result(runtime, monkeypatch, on_error, after):
    """A fault in the first device's sort (after=1: the second sort call) or in a merge (after=4): the other devices
    stop at their next step, the CPU sorts everything, nothing is lost."""
    from test_faults import _fault_once

    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = _input(np.random.default_rng(8), np.float32, 200_000, "special")
    before = a.copy()
    with hpu.Runtime(devices=[runtime.device] * 2, profile=runtime.profile, threads=2) as rt:
        name = "sort" if after == 1 else "merge"
        calls = _fault_once(monkeypatch, sort_device.DeviceSorter, name, after=0 if name == "merge" else after)
        opts = hpu.PipelineOptions(device_sort="merge", chunk_bytes=1 << 16)
        if on_error == "raise":
            with pytest.raises(hpu.DeviceFailure, match="-9999"):  # the cause, not the device it stopped
                hpu.hybrid_mergesort(a, strategy="exchange", runtime=rt, on_device_error="raise", options=opts)
        else:
            out, tr = hpu.hybrid_mergesort(a, strategy="exchange", runtime=rt, return_trace=True, options=opts)
            assert same_bits(out, np.sort(a, kind="stable")) and "-9999" in tr.fallback
        assert calls and same_bits(a, before)
        monkeypatch.undo()
        out = hpu.hybrid_mergesort(a, strategy="exchange", runtime=rt)  # the runtime recovers
        assert same_bits(out, np.sort(a, kind="stable"))


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_pieces_traded_in_chunks_equal_numpy(runtime, monkeypatch, k, dtype):
    """With chunks of a few KiB every piece a device sends is copied down and up in many chunks, each up as its copy
    down ends: the result is numpy's stable sort, and each device copies down at least a chunk a piece's share."""
    import hpu.sorting.exchange as exchange

    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = _input(np.random.default_rng(k), dtype, 100_003, "random")
    before = a.copy()
    opts = hpu.PipelineOptions(device_sort="merge", chunk_bytes=1 << 16)
    shares = (0.0, *([1.0 / k] * k))
    with hpu.Runtime(devices=[runtime.device] * k, profile=runtime.profile, threads=2) as rt:
        d2h = []
        for chunk in (exchange.EXCHANGE_CHUNK_BYTES, 4096):
            monkeypatch.setattr(exchange, "EXCHANGE_CHUNK_BYTES", chunk)
            out, tr = exchange_sort(a, rt, shares, options=opts)
            tr.resolve()
            assert tr.fallback == "" and same_bits(out, np.sort(before, kind="stable"))
            d2h.append(sum(e.kind == "d2h" for e in tr.events))
    assert same_bits(a, before)
    # random keys: each device sends about (k - 1) / k of its n / k keys, in chunks of 4 KiB rather than one copy
    # a piece (k (k - 1) pieces in all)
    sent_bytes = a.size * a.itemsize * (k - 1) / k
    assert d2h[1] - d2h[0] >= sent_bytes / 4096 * 0.8 - k * (k - 1)


def _sorted_or_raised(a, before, rt, opts, on_error):
    """An exchange sort over two devices, halves each, after a fault (-9999): with "raise" the fault raised, else the
    CPU's result, numpy's stable sort of ``before``, with the fault in the trace (no result kept)."""
    if on_error == "raise":
        with pytest.raises(hpu.DeviceFailure, match="-9999"):
            exchange_sort(a, rt, (0.0, 0.5, 0.5), options=opts, on_device_error="raise")
    else:
        out, tr = exchange_sort(a, rt, (0.0, 0.5, 0.5), options=opts)
        assert "-9999" in tr.fallback and same_bits(out, np.sort(before, kind="stable"))


@pytest.mark.parametrize("on_error", ["fallback", "raise"])
def test_a_chunk_whose_copy_fails_gives_the_cpu_result(runtime, monkeypatch, on_error):
    """The wait for a sender's chunk fails (its device lost mid-copy): the receiver stops, the sender does not wait
    for it at the last barrier forever, and the CPU's result (or the error) comes back; nothing is modified."""
    import types

    import hpu.sorting.exchange as exchange

    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    calls = []

    def wait_for_events(events):
        calls.append(1)
        if len(calls) == 3:
            raise cl.LogicError("clWaitForEvents failed: <unknown error -9999>")
        return cl.wait_for_events(events)

    proxy = types.SimpleNamespace(**{n: getattr(cl, n) for n in dir(cl) if not n.startswith("__")})
    proxy.wait_for_events = wait_for_events
    monkeypatch.setattr(exchange, "cl", proxy)
    monkeypatch.setattr(exchange, "EXCHANGE_CHUNK_BYTES", 4096)
    a = _input(np.random.default_rng(5), np.float32, 120_000, "special")
    before = a.copy()
    opts = hpu.PipelineOptions(device_sort="merge", chunk_bytes=1 << 16)
    with hpu.Runtime(devices=[runtime.device] * 2, profile=runtime.profile, threads=2) as rt:
        _sorted_or_raised(a, before, rt, opts, on_error)
        assert len(calls) >= 3 and same_bits(a, before)
        monkeypatch.undo()
        out, tr = exchange_sort(a, rt, (0.0, 0.5, 0.5), options=opts)  # the runtime goes on
        assert tr.fallback == "" and same_bits(out, np.sort(before, kind="stable"))


@pytest.mark.parametrize("on_error", ["fallback", "raise"])
def test_a_device_stopped_after_its_send_keeps_its_copy_events(runtime, monkeypatch, on_error):
    """The second device fails before it sends: the first, whose copies down into its pinned outbox are enqueued (not
    waited for), stops at the next barrier.  Its copies' events must outlive the copies (pyopencl's destructor of a
    copy event waits for the copy holding the GIL), and its lease must not go back to the runtime, reusable by the
    next call, with copies into its pinned memory still running.  Each copy is held back behind a gate
    (test_event_lifetimes.CopyWatch) so that one let go too early is seen; the CPU's result (or the error)."""
    import test_event_lifetimes as lifetimes

    import hpu.sorting.exchange as exchange

    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    real = exchange._Exchange._send

    def send(self, j, lease, d_run):
        if j == 1:
            raise hpu.DeviceFailure("device lost before its send (-9999)")
        return real(self, j, lease, d_run)

    a = _input(np.random.default_rng(7), np.float64, 100_000, "special")
    before = a.copy()
    opts = hpu.PipelineOptions(device_sort="merge", chunk_bytes=1 << 16)
    with hpu.Runtime(devices=[runtime.device] * 2, profile=runtime.profile, threads=2) as rt:
        monkeypatch.setattr(lifetimes, "HOLD", 0.5)  # longer than the failure takes to reach the caller
        watch = lifetimes.CopyWatch(cl.enqueue_copy)
        monkeypatch.setattr(cl, "enqueue_copy", watch)
        monkeypatch.setattr(exchange, "EXCHANGE_CHUNK_BYTES", 1 << 14)
        monkeypatch.setattr(exchange._Exchange, "_send", send)
        try:
            _sorted_or_raised(a, before, rt, opts, on_error)
            gc.collect()
        finally:
            watch.close()
        watch.check()
        assert same_bits(a, before)
        monkeypatch.undo()
        out, tr = exchange_sort(a, rt, (0.0, 0.5, 0.5), options=opts)  # the runtime goes on
        assert tr.fallback == "" and same_bits(out, np.sort(before, kind="stable"))


def test_a_failed_sample_keeps_no_result_alive(runtime, monkeypatch):
    """The splitters' sample fails on the pool thread (out of memory): the device that waits for it fails, the other
    stops, the CPU sorts, and no reference cycle through the future's exception (whose traceback holds the devices'
    frames, and with them the sort's state and the caller's frames) keeps the result leased until a garbage
    collection.  The first device has no positions (it never waits for the sample) and stops at the barrier on its
    feeder thread: the failure that run_units reports last is its, whose traceback holds no frame of the caller."""
    import weakref

    import hpu.sorting.exchange as exchange

    if not runtime.has_device:
        pytest.skip("no OpenCL device")

    def choose_splitters(*args, **kwargs):
        raise MemoryError("no memory for the sample")

    monkeypatch.setattr(exchange, "choose_splitters", choose_splitters)
    a = _input(np.random.default_rng(9), np.int32, 100_000, "random")
    with hpu.Runtime(devices=[runtime.device] * 2, profile=runtime.profile, threads=2) as rt:
        gc.collect()
        gc.disable()
        try:
            out, tr = exchange_sort(a, rt, (0.0, 1e-9, 1.0 - 1e-9))
            assert "no memory for the sample" in tr.fallback and same_bits(out, np.sort(a, kind="stable"))
            alive = weakref.ref(out)
            del out
            assert alive() is None
        finally:
            gc.enable()


def test_a_merge_fault_keeps_no_result_alive(runtime, monkeypatch):
    """A fault in a merge (the exchange's last step): the CPU sorts, and the failure raised on the calling thread
    (which runs the last device's share), whose traceback holds the caller's frames, is not kept by run_units past
    its return, so no reference cycle keeps the result leased until a garbage collection."""
    import weakref

    from test_faults import _fault_once

    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = _input(np.random.default_rng(13), np.float32, 150_000, "random")
    opts = hpu.PipelineOptions(device_sort="merge", chunk_bytes=1 << 16)
    with hpu.Runtime(devices=[runtime.device] * 2, profile=runtime.profile, threads=2) as rt:
        calls = _fault_once(monkeypatch, sort_device.DeviceSorter, "merge", after=0)
        gc.collect()
        gc.disable()
        try:
            out, tr = exchange_sort(a, rt, (0.0, 0.5, 0.5), options=opts)
            assert calls and "-9999" in tr.fallback and same_bits(out, np.sort(a, kind="stable"))
            alive = weakref.ref(out)
            del out, tr
            assert alive() is None
        finally:
            gc.enable()


@pytest.mark.parametrize("on_error", ["fallback", "raise"])
def test_a_device_without_a_lease_stops_the_others_instead_of_hanging(runtime, monkeypatch, on_error):
    """The second device's lease cannot be had (its context lost for good): the first must not wait for it at the
    exchange's barrier forever; the CPU sorts, or the lease's error is raised; nothing keeps the result alive."""
    import threading
    import weakref

    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = _input(np.random.default_rng(12), np.int64, 100_000, "random")
    with hpu.Runtime(devices=[runtime.device] * 2, profile=runtime.profile, threads=2) as rt:
        def refuse() -> None:
            raise hpu.DeviceFailure("no usable OpenCL device")
        monkeypatch.setattr(rt.peers[0], "acquire_lease", refuse)
        got: list = []

        def call() -> None:
            try:
                got.append(hpu.hybrid_mergesort(a, strategy="exchange", runtime=rt, on_device_error=on_error,
                                                return_trace=True))
            except BaseException as e:
                got.append(e)

        gc.disable()
        try:
            t = threading.Thread(target=call, daemon=True)
            t.start()
            t.join(120)
            assert not t.is_alive(), "the exchange sort hung"
            if on_error == "raise":
                assert isinstance(got[0], hpu.DeviceFailure) and "no usable" in str(got[0])
            else:
                out, tr = got.pop()
                assert same_bits(out, np.sort(a, kind="stable")) and "no usable" in tr.fallback
                alive = weakref.ref(out)
                del out
                assert alive() is None  # no reference cycle through the failure's traceback
        finally:
            gc.enable()


def test_bad_exchange_arguments(trio, fresh):
    a = np.arange(1000, dtype=np.int32)
    with pytest.raises(ValueError, match="no share"):
        exchange_sort(a, trio, (0.1, 0.3, 0.3, 0.3))
    with pytest.raises(ValueError, match="summing to 1"):
        exchange_sort(a, trio, (0.0, 0.5, 0.5))
    with pytest.raises(ValueError, match="fast-mode"):
        hpu.hybrid_mergesort(a, strategy="exchange", mode="paper", runtime=fresh)
    with pytest.raises(ValueError, match="'keyrange' or 'exchange'"):
        hpu.hybrid_mergesort(a, shares=(0.0, 1.0), strategy="gpu", runtime=fresh)
    if fresh.has_device:
        with hpu.Runtime(devices=[fresh.device] * 2, profile=fresh.profile, threads=1,
                         device_memory_limit=1 << 16) as small:
            with pytest.raises(ValueError, match="does not fit"):
                exchange_sort(np.arange(100_000, dtype=np.int32), small, (0.0, 0.5, 0.5))
            # Through hybrid_mergesort the devices sort it in pieces by key range instead.
            out, tr = hpu.hybrid_mergesort(np.arange(100_000, dtype=np.int32)[::-1], strategy="exchange",
                                           runtime=small, return_trace=True)
            assert tr.strategy == "keyrange" and same_bits(out, np.arange(100_000, dtype=np.int32))


def _profile(dev_scale: float, transfer_scale: float = 1.0) -> hpu.Profile:
    sizes = [1 << 16, 1 << 20, 1 << 24]
    curves = CostCurves.measured(sizes, {"cpu_sort": [s * 4e-9 for s in sizes],
                                         "device_sort": [s * 1e-10 * dev_scale for s in sizes],
                                         "transfer": [1e-4 + s * 3e-10 * transfer_scale for s in sizes],
                                         "merge2": [s * 1e-9 for s in sizes], "merge16": [s * 2e-9 for s in sizes]})
    return hpu.Profile(p=16, g=1 << 14, gamma=0.1, cpu_op_seconds=1e-9, curves={"sort": curves.to_dict()})


def test_exchange_split_follows_its_formula_and_auto_weighs_it():
    fast, slow = _profile(40.0, 0.1), _profile(80.0, 0.1)  # devices whose sort dominates their copies
    n = 1 << 24
    sp = exchange_split(n, [fast, slow])
    assert sp.strategy == "exchange" and sp.shares[0] == 0.0 and sum(sp.shares) == pytest.approx(1.0)
    assert sp.shares[1] > sp.shares[2] > 0.25

    def own(prof: hpu.Profile, m: float) -> float:  # the docstring's device term, term by term (4352-key tiles)
        passes = np.ceil(np.log2(m / 4352))
        cost = lambda name, x: float(fast_cost(prof, name, x))  # noqa: E731
        return cost("device_sort", m) * (1 + 1 / (passes + 2)) + cost("transfer", m * (1 - m / n))

    times = [own(fast, sp.shares[1] * n), own(slow, sp.shares[2] * n)]
    shared = float(fast_cost(fast, "transfer", n))  # the host's part: every key's copies, as on one device
    assert sp.predicted_time == pytest.approx(shared + max(times), rel=1e-3)
    assert sp.predicted_transfer_time == pytest.approx(shared)
    assert times[0] == pytest.approx(times[1], rel=0.02)  # the devices' own parts finish together
    at = exchange_split(n, [fast, slow], shares=sp.shares[1:])  # the same shares given: the same prediction
    assert at.predicted_time == pytest.approx(sp.predicted_time, rel=1e-3)
    half = exchange_split(n, [fast, slow], shares=(0.5, 0.5))  # the slower device's part decides
    assert half.predicted_time == pytest.approx(shared + own(slow, n / 2), rel=1e-3)
    assert half.predicted_time > sp.predicted_time
    with pytest.raises(ValueError, match="each of 2 devices"):
        exchange_split(n, [fast, slow], shares=(1.0,))
    # Where the devices' sort dominates, two devices pay and "auto" takes the exchange ...
    auto = fast_split(n, fast, devices=[fast, fast])
    alone = fast_split(n, fast, strategy="gpu")
    assert auto.strategy == "exchange" and auto.predicted_time < alone.predicted_time
    assert fast_split(n, fast, devices=[fast]).strategy != "exchange"  # one device: no exchange
    # ... and where the copies dominate (the H100 machines), one device alone is faster and "auto" keeps it.
    copying = _profile(1.0)
    assert fast_split(n, copying, devices=[copying, copying]).strategy == "gpu"


def test_exchange_functions_reject_malformed_input(trio):
    """Not 1-D arrays, negative lengths, decreasing targets and impossible sizes: a ValueError, never a wrong
    answer or another exception."""
    sh = (0.0, 1 / 3, 1 / 3, 1 / 3)
    for arr in (np.arange(12, dtype=np.int32).reshape(3, 4), np.int32(5), [3, 1, 2]):
        with pytest.raises(ValueError, match="1-D"):
            exchange_sort(arr, trio, sh)
    z = np.zeros((2, 2), np.int64)
    with pytest.raises(ValueError, match="non-decreasing"):  # once gave rows that decrease
        exchange_cuts([5, 5], z, np.full((2, 2), 5), [8, 2])
    with pytest.raises(ValueError, match=">= 0"):
        exchange_cuts([-1], np.zeros((1, 0)), np.zeros((1, 0)), [])
    with pytest.raises(ValueError, match="1-D"):
        exchange_cuts([5], np.zeros((1, 1)), np.ones((1, 1)), [[1]])
    for n, itemsize in ((-5, 4), (10, 0)):
        with pytest.raises(ValueError, match="itemsize"):
            exchange_fits(trio, n, sh, itemsize)
