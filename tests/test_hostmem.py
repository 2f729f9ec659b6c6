"""The recycled host-memory pool and fast-mode results that live in it."""

import copy
import gc
import pickle
import threading

import numpy as np
import pytest
from conftest import same_bits

import hpu
from hpu.core.hostmem import MIN_POOLED_BYTES, HostArrayPool

N_POOLED = 2 * MIN_POOLED_BYTES // 4  # int32 elements of an array the pool serves


@pytest.fixture(params=["pinned", "plain"])
def pool(request, runtime):
    if request.param == "pinned" and not runtime.has_device:
        pytest.skip("no OpenCL device")
    p = HostArrayPool(runtime.context, runtime.queue, 16 * MIN_POOLED_BYTES)
    yield p, request.param == "pinned"
    p.close()


def test_arrays_are_plain_writable_and_recycled(pool):
    pool, pinned = pool
    a = pool.empty(N_POOLED, np.int32, pinned=pinned)
    assert isinstance(a, np.ndarray) and a.shape == (N_POOLED,) and a.dtype == np.int32
    assert a.flags.writeable and a.flags.c_contiguous
    a[:] = np.arange(N_POOLED)
    view = a[5:9]
    assert pool.is_pinned(view) == pinned
    addresses = {a.ctypes.data}
    del a
    gc.collect()
    other = pool.empty(N_POOLED, np.int32, pinned=not pinned)  # other kind: a block of its own
    assert other is not None and pool.is_pinned(other) == (not pinned) and not np.shares_memory(other, view)
    del other
    gc.collect()
    held = pool.total_bytes
    b = pool.empty(N_POOLED, np.int32, pinned=pinned)  # the view still holds the first block: a second one
    assert pool.total_bytes == held + 2 * MIN_POOLED_BYTES and not np.shares_memory(b, view)
    addresses.add(b.ctypes.data)
    assert view.tolist() == [5, 6, 7, 8]
    b[:] = -1
    assert view.tolist() == [5, 6, 7, 8]
    del view, b
    gc.collect()
    c = pool.empty(N_POOLED, np.int32, pinned=pinned)  # recycled, nothing new
    assert pool.total_bytes == held + 2 * MIN_POOLED_BYTES
    assert c.ctypes.data in addresses and pool.is_pinned(c) == pinned  # one of the freed blocks of its kind
    del c


ODD_DTYPES = [np.dtype([("a", "i1"), ("b", "f8")], align=True),  # padding
              np.dtype({"names": ["b", "a"], "formats": ["f8", "i4"], "offsets": [8, 0]}),  # fields out of order
              np.dtype(">i8"), np.dtype("M8[ns]"), np.dtype("S3")]


@pytest.mark.parametrize("dtype", ODD_DTYPES, ids=str)
def test_arrays_keep_every_dtype(pool, dtype):
    pool, pinned = pool
    n = MIN_POOLED_BYTES // dtype.itemsize + 1
    a = pool.empty(n, dtype, pinned=pinned)
    assert a.dtype == dtype and a.shape == (n,) and pool.is_pinned(a) == pinned
    raw = np.frombuffer(np.random.default_rng(1).bytes(n * dtype.itemsize), dtype=np.uint8)
    a.view(np.uint8)[:] = raw  # every byte of every element is the array's own
    assert a.view(np.uint8).tobytes() == raw.tobytes()


def test_small_full_and_closed(pool):
    pool, pinned = pool
    assert pool.empty(16, np.float64) is None  # below MIN_POOLED_BYTES
    keep = [pool.empty(4 * MIN_POOLED_BYTES // 8, np.float64, pinned=pinned) for _ in range(4)]
    assert all(k is not None for k in keep) and pool.total_bytes == 16 * MIN_POOLED_BYTES
    assert pool.empty(N_POOLED, np.int32) is None  # full: the caller allocates as usual
    keep[0][:] = 1.5
    pool.close()
    assert pool.empty(N_POOLED, np.int32) is None
    assert keep[0].sum() == 1.5 * keep[0].size  # leased memory outlives close()
    del keep
    gc.collect()
    assert pool.total_bytes == 0


def test_bad_size():
    with pytest.raises(ValueError, match="max_bytes"):
        HostArrayPool(None, None, -1)


@pytest.mark.parametrize("strategy", ["gpu", "cpu", "advanced", "basic"])
def test_fast_results_do_not_alias(runtime, strategy):
    """Each result is the caller's alone: a later sort never overwrites an earlier result."""
    if strategy != "cpu" and not runtime.has_device:
        pytest.skip("no OpenCL device")
    rng = np.random.default_rng(3)
    a = rng.integers(-(2**31), 2**31 - 1, N_POOLED, dtype=np.int32)
    b = rng.integers(-(2**31), 2**31 - 1, N_POOLED + 17, dtype=np.int32)
    a0, b0 = a.copy(), b.copy()
    ra = hpu.hybrid_mergesort(a, strategy=strategy, runtime=runtime)
    rb = hpu.hybrid_mergesort(b, strategy=strategy, runtime=runtime)
    assert np.array_equal(ra, np.sort(a0)) and np.array_equal(rb, np.sort(b0))
    assert np.array_equal(a, a0) and np.array_equal(b, b0)  # inputs untouched
    assert not np.shares_memory(ra, rb)
    # Only a device-only sort's result is pinned (the device copies straight into it).
    assert runtime.host_pool.is_pinned(ra) == (strategy == "gpu")
    del ra
    gc.collect()
    rc = hpu.hybrid_mergesort(a, strategy=strategy, runtime=runtime)  # may reuse ra's memory, not rb's
    assert np.array_equal(rc, np.sort(a0)) and np.array_equal(rb, np.sort(b0))


def test_unresolved_traces_do_not_hold_results(runtime):
    """A trace whose device times are not read yet keeps no result alive: the pool recycles one block."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    import hpu.sorting.pipeline as fm

    with hpu.Runtime(runtime.device, profile=runtime.profile, threads=2) as rt:
        a = np.random.default_rng(1).standard_normal(N_POOLED)
        traces = [fm.fast_sort(a, rt, strategy="gpu", alpha=0.0, transfer_level=0)[1] for _ in range(3)]
        gc.collect()
        assert rt.host_pool.total_bytes == a.nbytes
        assert all(tr.resolve().span("bus")[1] > 0 for tr in traces)


def test_pool_off(runtime):
    with hpu.Runtime(runtime.device, profile=runtime.profile, threads=2, host_pool_bytes=0) as rt:
        a = np.random.default_rng(0).standard_normal(N_POOLED)
        out = hpu.hybrid_mergesort(a, runtime=rt)
        assert np.array_equal(out, np.sort(a, kind="stable")) and rt.host_pool.total_bytes == 0


def test_kept_results_get_plain_memory_only_when_asked(runtime):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    pool = HostArrayPool(runtime.context, runtime.queue, 16 * MIN_POOLED_BYTES)
    n = MIN_POOLED_BYTES // 4
    first = pool.empty(n, np.int32, pinned=True, kept="plain")
    assert pool.is_pinned(first)  # the first block of a size is pinned: later calls recycle it
    second = pool.empty(n, np.int32, pinned=True, kept="plain")  # first still kept: plain memory instead
    assert second is not None and not pool.is_pinned(second)
    third = pool.empty(n, np.int32, pinned=True, kept="pin")
    assert pool.is_pinned(third)
    del first
    fourth = pool.empty(n, np.int32, pinned=True, kept="plain")  # a free pinned block again: recycled
    assert pool.is_pinned(fourth)
    with pytest.raises(ValueError, match="kept"):
        pool.empty(n, np.int32, pinned=True, kept="never")
    # A block the call reads (an input in pinned memory) is not a result kept.
    del third
    gc.collect()
    fifth = pool.empty(n, np.int32, pinned=True, kept="plain", inputs=[fourth[3:]])
    assert pool.is_pinned(fifth)  # third's block, recycled
    sixth = pool.empty_or_new(n, np.int32, pinned=True, kept="plain", inputs=(fourth, fifth))
    assert pool.is_pinned(sixth)  # a fresh block: fourth's and fifth's are read, not kept
    assert not pool.is_pinned(pool.empty_or_new(n, np.int32, pinned=True, kept="plain", inputs=(fourth, fifth)))


def test_a_result_freed_by_the_garbage_collector_inside_the_pool_does_not_deadlock():
    """A pooled array held only by a reference cycle is freed whenever the cyclic collector runs, which may be on a
    thread inside :meth:`HostArrayPool.empty`, holding the pool's lock: its block waits there instead of taking
    the lock again (which hung the thread)."""
    pool = HostArrayPool(None, None, 1 << 30)
    n = MIN_POOLED_BYTES // 4

    class Holder:
        pass

    threshold = gc.get_threshold()

    def churn():
        for t in range(1, 200):
            gc.collect(0)  # the young generation's count from 0 (a full collection's time grows with the heap)
            h = Holder()
            h.me, h.arr = h, pool.empty(n, np.float32)
            del h
            gc.set_threshold(t)  # a collection within the next t allocations: inside empty() for some t
            a = pool.empty(n, np.float32)
            del a
            gc.set_threshold(*threshold)

    worker = threading.Thread(target=churn, daemon=True)
    try:
        worker.start()
        worker.join(timeout=60)
    finally:
        gc.set_threshold(*threshold)  # also if the thread hangs (with a low threshold set)
    assert not worker.is_alive(), "the pool deadlocked on a block released by the garbage collector"
    gc.collect()
    held = pool.total_bytes
    a, b = pool.empty(n, np.float32), pool.empty(n, np.float32)  # the blocks came back: recycled, none twice
    assert pool.total_bytes == held and not np.shares_memory(a, b)


def test_a_kept_policy_is_asked_only_when_the_choice_arises(runtime):
    """A callable ``kept`` (the sorts pass their cost model's choice so) is called only when no free pinned block
    fits while one of the size is leased: a call that recycles a block never pays for it."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    pool = HostArrayPool(runtime.context, runtime.queue, 16 * MIN_POOLED_BYTES)
    n, asked = MIN_POOLED_BYTES // 4, []

    def policy(answer):
        return lambda rentals: asked.append(answer) or answer

    first = pool.empty(n, np.int32, pinned=True, kept=policy("plain"))
    assert pool.is_pinned(first) and asked == []  # the first block of a size: no choice
    second = pool.empty(n, np.int32, pinned=True, kept=policy("plain"))
    assert not pool.is_pinned(second) and asked == ["plain"]
    third = pool.empty(n, np.int32, pinned=True, kept=policy("pin"))
    assert pool.is_pinned(third) and asked == ["plain", "pin"]
    del first
    fourth = pool.empty(n, np.int32, pinned=True, kept=policy("plain"))  # first's block recycled: not asked
    assert pool.is_pinned(fourth) and asked == ["plain", "pin"]
    with pytest.raises(ValueError, match="kept"):
        pool.empty(n, np.int32, pinned=True, kept=policy("never"))
    assert pool.empty(n, np.int32, pinned=False, kept=policy("never")) is not None  # plain memory: not asked


def test_a_loop_that_keeps_its_last_result_rents_plain_memory_then_pins_a_block(runtime):
    """``r = f()`` in a loop finds its last result's pinned block leased every other call.  The policy is told how
    many plain arrays of the size it was given since the pool last pinned one (here it rents three times, then buys),
    and once a second block is pinned the loop recycles the two."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    pool = HostArrayPool(runtime.context, runtime.queue, 16 * MIN_POOLED_BYTES)
    n, asked = MIN_POOLED_BYTES // 4, []

    def policy(rentals):
        asked.append(rentals)
        return "plain" if rentals < 3 else "pin"

    last, pinned, blocks = None, [], set()
    for _ in range(12):
        r = pool.empty(n, np.int32, pinned=True, kept=policy)
        pinned.append(pool.is_pinned(r))
        if pinned[-1]:
            blocks.add(r.ctypes.data)
        last = r  # noqa: F841 (kept until the next call returns)
        del r
    assert pinned == [True, False] * 3 + [True, True] + [True] * 4
    assert asked == [0, 1, 2, 3] and len(blocks) == 2
    # Another size counts apart; a size pinned afresh starts again from none.
    other = [pool.empty(2 * n, np.int32, pinned=True, kept=policy) for _ in range(2)]
    assert [pool.is_pinned(x) for x in other] == [True, False] and asked[-1] == 0
    pool.close()


def test_kept_policy_rents_until_the_rent_paid_reaches_the_price_of_pinning():
    """kept_policy against the ski-rental rule worked by hand: a recycled sort of 1 ms, 1.3 ms into plain memory
    (a rent of 0.3 ms) and 2 ms into freshly pinned memory (a price of 1 ms): plain three times, then pin."""
    from hpu.sorting.pipeline import DEFAULT_OPTIONS, PipelineOptions, kept_policy

    sizes = [1 << 20, 1 << 24]
    curves = {"device_sort": [0.4e-3, 0.4e-3], "transfer": [0.6e-3, 0.6e-3], "kept_plain": [1.3e-3, 1.3e-3],
              "kept_pinned": [2e-3, 2e-3], "cpu_sort": [1.0, 1.0]}
    profile = hpu.Profile(p=2, g=1, gamma=1, curves={"sort": {"sizes": sizes, **curves}})
    rt = hpu.Runtime("none", profile=profile)
    choices = [kept_policy(rt, 1 << 22, 4, DEFAULT_OPTIONS, k) for k in range(6)]
    assert choices == ["plain", "plain", "plain", "pin", "pin", "pin"]  # (k + 1) 0.3 < 1 for k < 3
    assert kept_policy(rt, 1 << 22, 4, PipelineOptions(result_memory="plain"), 99) == "plain"
    cheap = hpu.Profile(p=2, g=1, gamma=1, curves={"sort": {"sizes": sizes, **curves, "kept_plain": [0.9e-3] * 2}})
    assert kept_policy(hpu.Runtime("none", profile=cheap), 1 << 22, 4, DEFAULT_OPTIONS, 10**6) == "plain"  # no rent
    # With no rentals the choice is one call's, plain where kept_plain < kept_pinned, also both below a recycled call.
    for plain, pinned, want in ((0.8e-3, 0.95e-3, "plain"), (0.95e-3, 0.8e-3, "pin")):
        noisy = hpu.Profile(p=2, g=1, gamma=1, curves={"sort": {"sizes": sizes, **curves, "kept_plain": [plain] * 2,
                                                                "kept_pinned": [pinned] * 2}})
        assert kept_policy(hpu.Runtime("none", profile=noisy), 1 << 22, 4, DEFAULT_OPTIONS, 0) == want
    rt.close()


@pytest.mark.parametrize("part", ["sort", "rows", "argsort", "by_key"])
def test_a_pinned_input_is_not_a_kept_result(fresh, monkeypatch, part):
    """Results in plain memory where the caller keeps earlier ones (the "plain" policy): an input in the pool's
    pinned memory, a block of the result's size, is not one, so the result is pinned (the DMA engine writes it, no
    copy out); a block of that size kept beside it does count."""
    if not fresh.has_device or not fresh.host_pool.can_pin:
        pytest.skip("no OpenCL device that pins host memory")
    from hpu.sorting import pipeline

    monkeypatch.setattr(pipeline, "kept_policy", lambda *args, **kw: "plain")
    n = 8 * N_POOLED
    # Inputs of the result's bytes: int64 keys for int64 indices; keys and values of a key-value sort in one block.
    block = fresh.empty_pinned(2 * n if part == "by_key" else n, np.int64 if part == "argsort" else np.int32)
    block[:] = np.random.default_rng(9).integers(-50, 50, block.size)
    before = block.copy()
    keys, values = block[:n], block[n:]
    kw = {"runtime": fresh, "strategy": "gpu"}
    calls = {"sort": lambda: hpu.hybrid_mergesort(keys, **kw), "rows": lambda: hpu.sort(keys.reshape(-1, 256), **kw),
             "argsort": lambda: hpu.argsort(keys, **kw), "by_key": lambda: hpu.sort_by_key(keys, values, **kw)[1]}
    order = np.argsort(before[:n], kind="stable")  # before: the keys (and the values)
    expect = {"sort": lambda: before[order], "rows": lambda: np.sort(before.reshape(-1, 256), axis=-1),
              "argsort": lambda: order, "by_key": lambda: before[n:][order]}[part]()
    out = calls[part]()
    assert same_bits(out, expect) and same_bits(block, before)
    assert fresh.host_pool.is_pinned(out)
    nbytes = block.nbytes
    del out
    gc.collect()
    kept = fresh.host_pool.empty(nbytes, np.uint8, pinned=True)  # the result's block, now kept by the caller
    again = calls[part]()
    assert same_bits(again, expect) and not fresh.host_pool.is_pinned(again)
    del kept


@pytest.mark.parametrize("memory", ["pin", "plain"])
def test_sorts_with_results_kept_alive_are_right_in_either_memory(fresh, memory):
    opts = hpu.PipelineOptions(result_memory=memory)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(1 << 18).astype(np.float32) for _ in range(4)]
    kept = [hpu.hybrid_mergesort(a, strategy="gpu", runtime=fresh, options=opts) for a in inputs]
    for a, out in zip(inputs, kept):
        assert same_bits(out, np.sort(a, kind="stable"))
    pinned = [fresh.host_pool.is_pinned(out) for out in kept]
    assert pinned[0] and all(pinned[1:]) == (memory == "pin")
    with pytest.raises(ValueError, match="result_memory"):
        hpu.PipelineOptions(result_memory="fresh")


def test_empty_pinned(fresh):
    """Runtime.empty_pinned: the shape and dtype asked, C-contiguous and writeable, in the pool's pinned memory where
    the device pins host memory and the array is large enough; refusals as numpy's, and for object dtypes."""
    a = fresh.empty_pinned((3, N_POOLED), np.float32)
    assert a.shape == (3, N_POOLED) and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
    assert fresh.host_pool.is_pinned(a) == (fresh.has_device and fresh.host_pool.can_pin)
    small = fresh.empty_pinned(10, np.int8)
    assert small.shape == (10,) and not fresh.host_pool.is_pinned(small)
    assert fresh.empty_pinned(0).shape == (0,) and fresh.empty_pinned((4, 0), np.int16).shape == (4, 0)
    with pytest.raises(ValueError, match="negative"):
        fresh.empty_pinned((2, -1))
    with pytest.raises(TypeError, match="object"):
        fresh.empty_pinned(4, object)
    sub = np.dtype((np.float32, 3))  # a sub-array dtype adds its shape, as in numpy.empty
    assert fresh.empty_pinned((2, N_POOLED), sub).shape == np.empty((2, N_POOLED), sub).shape == (2, N_POOLED, 3)
    lease = a.base
    while isinstance(lease, np.ndarray):
        lease = lease.base
    for dup in (copy.copy, copy.deepcopy, pickle.dumps):  # two leases of one block would hand it out twice
        with pytest.raises(TypeError, match="lease"):
            dup(lease)
    with hpu.Runtime("none", threads=1) as cpu_only:  # "none": Runtime(None) takes the default device if any
        assert not cpu_only.has_device
        plain = cpu_only.empty_pinned((2, N_POOLED), np.int32)
        assert plain.shape == (2, N_POOLED) and plain.dtype == np.int32 and plain.flags.c_contiguous
        assert plain.flags.writeable and not cpu_only.host_pool.is_pinned(plain)


def test_pinned_inputs_are_not_staged(fresh, staged_sources):
    """Inputs in the pool's pinned memory (Runtime.empty_pinned, or an earlier result passed on) are read by the DMA
    engine itself: no staging copy reads them, for a sort, rows, an argsort and a key-value sort; the same keys from
    ordinary memory are staged.  Results equal numpy's and the inputs are unchanged."""
    if not fresh.has_device or not fresh.host_pool.can_pin:
        pytest.skip("no OpenCL device that pins host memory")
    n = 8 * N_POOLED
    keys = np.random.default_rng(8).integers(-1000, 1000, n).astype(np.int32)
    values = np.arange(n, dtype=np.int64)[::-1].copy()
    pinned_keys, pinned_values = fresh.empty_pinned(n, np.int32), fresh.empty_pinned(n, np.int64)
    pinned_keys[:], pinned_values[:] = keys, values
    kw = {"runtime": fresh, "strategy": "gpu"}
    order = np.argsort(keys, kind="stable")
    for src, vals in ((pinned_keys, pinned_values), (keys.copy(), values.copy())):
        staged_sources.clear()
        out = hpu.hybrid_mergesort(src, on_device_error="raise", options=hpu.PipelineOptions(chunk_bytes=1 << 20), **kw)
        assert same_bits(out, keys[order])
        assert same_bits(hpu.sort(src.reshape(-1, 256), **kw), np.sort(keys.reshape(-1, 256), axis=-1))
        assert same_bits(hpu.argsort(src, **kw), order)
        got_keys, got_values = hpu.sort_by_key(src, values=vals, **kw)
        assert same_bits(got_keys, keys[order]) and same_bits(got_values, values[order])
        assert same_bits(src, keys) and same_bits(vals, values)
        staged = [s for s, _, _ in staged_sources if np.shares_memory(s, src) or np.shares_memory(s, vals)]
        assert (staged == []) == (src is pinned_keys), len(staged)


def test_plain_memory_does_not_push_out_a_free_pinned_block(runtime):
    """A pool full of one free pinned block: a plain array comes from numpy instead (the block stays, and the next
    pinned request recycles it); a pinned request still makes room by dropping free plain blocks."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    pool = HostArrayPool(runtime.context, runtime.queue, 2 * MIN_POOLED_BYTES)
    a = pool.empty(N_POOLED, np.int32, pinned=True)
    del a
    gc.collect()
    assert pool.empty(N_POOLED, np.int32, pinned=False) is None and pool.total_bytes == 2 * MIN_POOLED_BYTES
    b = pool.empty(N_POOLED, np.int32, pinned=True)
    assert b is not None and pool.is_pinned(b)
    del b
    gc.collect()
    pool.close()
    plain_first = HostArrayPool(runtime.context, runtime.queue, 2 * MIN_POOLED_BYTES)
    c = plain_first.empty(N_POOLED, np.int32, pinned=False)
    del c
    gc.collect()
    d = plain_first.empty(N_POOLED, np.int32, pinned=True)  # the free plain block is dropped for it
    assert d is not None and plain_first.is_pinned(d) and plain_first.total_bytes == 2 * MIN_POOLED_BYTES
    del d
    plain_first.close()
    mixed = HostArrayPool(runtime.context, runtime.queue, 2 * MIN_POOLED_BYTES)
    e, f = (mixed.empty(N_POOLED // 2, np.int32, pinned=p) for p in (True, False))
    del e, f
    gc.collect()
    # Room for a plain array of both blocks' size only by dropping the pinned one too: none, and both stay.
    assert mixed.empty(N_POOLED, np.int32, pinned=False) is None and mixed.total_bytes == 2 * MIN_POOLED_BYTES
    g = mixed.empty(N_POOLED // 2, np.int32, pinned=False)  # the free plain block, recycled
    assert g is not None and not mixed.is_pinned(g) and mixed.total_bytes == 2 * MIN_POOLED_BYTES
    del g
    mixed.close()


def _trace(wall: float, fallback: str = "") -> hpu.Trace:
    trace = hpu.Trace("gpu", 0.0, 0, 0, 1)
    trace.wall, trace.fallback = wall, fallback
    return trace


def test_the_rent_meter_measures_plain_against_recycled_pinned_calls(fresh):
    """Medians of the last plain and recycled-pinned calls of one kind and size, once each has three; a freshly
    pinned result (its call paid the pinning) and a call that fell back are not counted; kinds and sizes apart."""
    if not fresh.host_pool.can_pin:
        pytest.skip("no OpenCL device that pins host memory")
    from hpu.sorting.pipeline import RentMeter

    meter, pool = RentMeter(), fresh.host_pool
    first = pool.empty(N_POOLED, np.int32, pinned=True)
    assert pool.is_pinned(first) and not pool.recycled_pinned(first)
    meter.add(fresh, "rows", 8, first, _trace(1.0))  # freshly pinned: not a sample
    del first
    gc.collect()
    again = pool.empty(N_POOLED, np.int32, pinned=True)
    assert pool.recycled_pinned(again)
    plain = np.empty(N_POOLED, np.int32)
    for wall in (2e-3, 3e-3, 2.5e-3):
        assert meter.rent("rows", 8) is None
        meter.add(fresh, "rows", 8, again, _trace(wall))
        meter.add(fresh, "rows", 8, plain, _trace(wall + 4e-3))
        meter.add(fresh, "rows", 8, plain, _trace(1.0, fallback="the device failed"))  # not a sample
    assert meter.rent("rows", 8) == pytest.approx(4e-3)
    assert meter.rent("rows", 16) is None and meter.rent("sort", 8) is None
    for _ in range(RentMeter.SAMPLES):  # only the last calls count
        meter.add(fresh, "rows", 8, plain, _trace(3.5e-3))
    assert meter.rent("rows", 8) == pytest.approx(1e-3)


def test_kept_policy_takes_the_rent_its_calls_measured(monkeypatch):
    """A profile whose plain calls cost no more than recycled ones never pins (a sort hides its copies out); rows
    that measured a rent of 2 ms against a price of 10 ms rent four times, then pin ((k + 1) 2 < 10 for k < 4);
    a kind without measurements keeps the profile's rent."""
    from hpu.sorting import pipeline
    from hpu.sorting.pipeline import DEFAULT_OPTIONS, kept_policy, rent_meter

    sizes = [1 << 20, 1 << 24]
    curves = {"device_sort": [0.4e-3] * 2, "transfer": [0.6e-3] * 2, "kept_plain": [0.9e-3] * 2,
              "kept_pinned": [11e-3] * 2, "cpu_sort": [1.0] * 2}
    with hpu.Runtime("none", profile=hpu.Profile(p=2, g=1, gamma=1, curves={"sort": {"sizes": sizes, **curves}})) as rt:
        n = 1 << 22
        monkeypatch.setattr(rent_meter(rt), "rent", lambda kind, nbytes: 2e-3 if (kind, nbytes) == ("rows", 4 * n)
                            else None)
        assert [kept_policy(rt, n, 4, DEFAULT_OPTIONS, k, kind="rows") for k in range(6)] == \
            ["plain"] * 4 + ["pin"] * 2
        assert {kept_policy(rt, n, 4, DEFAULT_OPTIONS, k, kind="sort") for k in (0, 10**6)} == {"plain"}
        assert kept_policy(rt, n, 4, DEFAULT_OPTIONS, 10**6) == "plain"
        assert pipeline.rent_meter(rt) is rent_meter(rt)  # one a runtime


@pytest.mark.parametrize("part", ["sort", "rows", "argsort", "by_key", "exchange", "keyrange"])
def test_a_loop_keeping_its_last_result_measures_its_rent(fresh, monkeypatch, part):
    """A loop that keeps its last result, given plain memory whenever its pinned block is still leased, alternates
    a recycled pinned block and plain memory: after seven calls the meter has three of each for the call's kind
    and result bytes, and the results are right."""
    if not fresh.has_device or not fresh.host_pool.can_pin:
        pytest.skip("no OpenCL device that pins host memory")
    from hpu.sorting import pipeline
    from hpu.sorting.exchange import exchange_sort
    from hpu.sorting.keyrange import keyrange_sort

    monkeypatch.setattr(pipeline, "kept_policy", lambda *args, **kw: "plain")
    n = 4 * N_POOLED
    keys = np.random.default_rng(2).integers(-50, 50, n).astype(np.int32)
    values = np.arange(n, dtype=np.int64)
    kw = {"runtime": fresh, "strategy": "gpu"}
    calls = {"sort": lambda: hpu.hybrid_mergesort(keys, **kw), "rows": lambda: hpu.sort(keys.reshape(-1, 256), **kw),
             "argsort": lambda: hpu.argsort(keys, **kw), "by_key": lambda: hpu.sort_by_key(keys, values, **kw),
             "exchange": lambda: exchange_sort(keys, fresh, [0.0, 1.0])[0],
             "keyrange": lambda: keyrange_sort(keys, fresh, [0.5, 0.5])[0]}
    kind, nbytes = {"sort": ("sort", 4 * n), "rows": ("rows", 4 * n), "argsort": (f"keyed-positions-{n}", 8 * n),
                    "by_key": (f"keyed-values-{n}", 12 * n), "exchange": ("exchange-1", 4 * n),
                    "keyrange": ("keyrange-2", 4 * n)}[part]
    order = np.argsort(keys, kind="stable")
    last = None
    for _ in range(7):
        last = calls[part]()
    got = last[1] if part == "by_key" else last
    want = {"sort": keys[order], "rows": np.sort(keys.reshape(-1, 256), axis=-1), "argsort": order,
            "by_key": values[order], "exchange": keys[order], "keyrange": keys[order]}[part]
    assert np.array_equal(got, want)
    assert pipeline.rent_meter(fresh).rent(kind, nbytes) is not None
