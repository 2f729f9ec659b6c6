"""Copies by streaming stores (hpu.core.streaming) against numpy.copyto, and the pipeline with and without them."""

import concurrent.futures
import itertools
import multiprocessing
import time
import warnings

import numpy as np
import pytest
from conftest import pipeline_calls, same_bits, stable_rows_into

import hpu
from hpu.core.streaming import (STREAM_MIN_BYTES, NativeStaging, copy_into, native_staging_available, stream_copy,
                                streaming_available)
from hpu.sorting import pipeline
from hpu.sorting.pipeline import fast_keyed_sort, fast_row_sort


@pytest.fixture
def no_copyto(monkeypatch):
    """numpy.copyto refused: a copy that still happens went through the compiled library."""
    if not streaming_available():
        pytest.skip("the streaming copy library was not built here")

    def refused(*args, **kw):
        raise AssertionError("numpy.copyto called")

    monkeypatch.setattr(np, "copyto", refused)


@pytest.mark.parametrize("nbytes", [STREAM_MIN_BYTES, STREAM_MIN_BYTES + 1, STREAM_MIN_BYTES + 255,
                                    (3 << 20) + 17])
@pytest.mark.parametrize("src_off, dst_off", [(0, 0), (1, 0), (0, 7), (13, 63)])
def test_stream_copy_bytes(no_copyto, nbytes, src_off, dst_off):
    """Every byte arrives, whatever the alignment of either end and the length's remainder, and none beyond."""
    rng = np.random.default_rng(nbytes + src_off)
    src = rng.integers(0, 256, nbytes + src_off, dtype=np.uint8)[src_off:]
    dst = np.full(nbytes + dst_off + 64, 7, np.uint8)
    stream_copy(dst[dst_off:dst_off + nbytes], src)
    assert np.array_equal(dst[dst_off:dst_off + nbytes], src)
    assert (dst[:dst_off] == 7).all() and (dst[dst_off + nbytes:] == 7).all()


def test_stream_copy_typed_and_2d(no_copyto):
    src = np.random.default_rng(1).standard_normal((512, 300))
    src[0, 0], src[1, 1] = -0.0, np.nan
    dst = np.empty_like(src)
    stream_copy(dst, src)
    assert same_bits(dst, src)


@pytest.mark.parametrize("case", ["small", "strided", "overlap", "cast", "broadcast", "list", "void-scalar"])
def test_stream_copy_falls_back_to_numpy(case):
    """Where streaming does not apply, the result is numpy.copyto's, including its overlap and casting rules."""
    n = STREAM_MIN_BYTES // 4 * 2
    src = np.arange(n, dtype=np.int32)
    if case == "small":
        src, dst = src[:100], np.zeros(100, np.int32)
    elif case == "strided":
        dst = np.zeros(2 * n, np.int32)[::2]
    elif case == "overlap":
        buf = np.arange(n + 5, dtype=np.int32)
        src, dst = buf[:n], buf[5:]
    elif case == "cast":
        dst = np.zeros(n, np.int64)
    elif case == "broadcast":
        src, dst = np.int32(3), np.zeros(n, np.int32)
    elif case == "list":
        src, dst = list(range(n)), np.zeros(n, np.int32)
    else:  # a numpy scalar, not an array, of as many bytes as the 0-d destination
        src = np.frombuffer(b"\x07" * (4 * n), f"V{4 * n}")[0]
        dst = np.zeros((), src.dtype)
    expected = dst.copy()
    np.copyto(expected, src.copy() if case == "overlap" else src)
    stream_copy(dst, src)
    assert np.array_equal(dst, expected)


def test_stream_copy_errors_as_numpy():
    src = np.zeros(STREAM_MIN_BYTES, np.float64)
    with pytest.raises(ValueError):
        stream_copy(np.zeros(3, np.float64), src)
    with pytest.raises(TypeError):
        stream_copy(np.zeros(src.shape, np.int32), src)  # same_kind casting refuses float to int


def test_copy_into_with_and_without_streaming(monkeypatch):
    """``stream=False`` is numpy.copyto itself (the measured alternative); ``stream=True`` streams where it can."""
    calls = []
    monkeypatch.setattr(np, "copyto", lambda d, s: calls.append((d, s)))
    src = np.zeros(STREAM_MIN_BYTES, np.uint8)
    copy_into(src.copy(), src, False)
    assert len(calls) == 1
    copy_into(src.copy(), src, True)
    assert len(calls) == (1 if streaming_available() else 2)


def _three_sorts(runtime: hpu.Runtime, opts: hpu.PipelineOptions, rng: np.random.Generator) -> None:
    """A device sort (5 pieces of 2 * STREAM_MIN_BYTES), a row sort (4 pieces) and a key-value sort (6 pieces)
    with ``opts`` equal numpy's stable sorts bit for bit (-0.0 among the floats), the inputs untouched."""
    a = rng.standard_normal(9 * STREAM_MIN_BYTES // 4 + 3).astype(np.float32)  # 5 pieces: 2 tasks or more
    a[::97] = -0.0
    before = a.copy()
    out = hpu.hybrid_mergesort(a, strategy="gpu", runtime=runtime, options=opts, on_device_error="raise")
    assert same_bits(out, np.sort(a, kind="stable")) and same_bits(a, before)
    rows = rng.integers(-9, 9, (8 * STREAM_MIN_BYTES // 256, 64)).astype(np.int32)  # 4 pieces
    got, _ = fast_row_sort(rows.reshape(-1), 64, runtime, options=opts, on_device_error="raise",
                           sort_into=stable_rows_into)
    assert np.array_equal(got.reshape(rows.shape), np.sort(rows, axis=-1, kind="stable"))
    keys = rng.integers(-50, 50, STREAM_MIN_BYTES).astype(np.int32)
    values = rng.integers(-2**62, 2**62, keys.size)
    order = np.argsort(keys, kind="stable")
    (got_keys, got_values), _ = fast_keyed_sort(keys, [values], runtime, gather=True, redo=None,
                                                on_device_error="raise", options=opts)
    assert same_bits(got_keys, keys[order]) and same_bits(got_values, values[order])


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("stream", [True, False])
def test_pipeline_with_and_without_streaming(runtime, staged_sources, stream, native):
    """A device sort, a row sort and a key-value sort staged in pieces past STREAM_MIN_BYTES equal numpy's, the
    inputs untouched; every staging copy is made the way ``stream_copies`` asks, by the compiled stager where
    ``native_staging`` asks for it and it was built, else by the Python pool's tasks."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    opts = hpu.PipelineOptions(chunk_bytes=2 * STREAM_MIN_BYTES, stream_copies=stream, native_staging=native)
    _three_sorts(runtime, opts, np.random.default_rng(5))
    assert len(staged_sources) >= 8 and {st for _, st, _ in staged_sources} == {stream}
    assert {by for _, _, by in staged_sources} == {"native" if native and native_staging_available() else "pool"}


@pytest.mark.parametrize("slices", [None, 1, 2, 7])
def test_pipeline_stages_in_slices(runtime, monkeypatch, slices):
    """``staging_slices``: the compiled stager copies each piece in that many slices (None: as many as the staging
    tasks; 1: a piece a thread), and a device sort, a row sort and a key-value sort staged so equal numpy's."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    if not native_staging_available():
        pytest.skip("the compiled stager was not built here")
    if runtime.threads < 2:
        pytest.skip("one thread: the caller stages alone, not the compiled stager")
    from hpu.sorting import pipeline

    asked: list = []
    real = pipeline.NativeStaging.of_ranges

    def spy(arrays, events=None, **kw):
        asked.append(kw["slice_bytes"])
        return real(arrays, events, **kw)

    monkeypatch.setattr(pipeline.NativeStaging, "of_ranges", spy)
    chunk = 2 * STREAM_MIN_BYTES + 100
    _three_sorts(runtime, hpu.PipelineOptions(chunk_bytes=chunk, staging_tasks=3, staging_slices=slices),
                 np.random.default_rng(7))

    def want(k: int) -> int:  # bytes of one of k slices of a piece, in whole cache lines; 0: a piece a thread
        return 0 if k == 1 else -(-(-(-chunk // k)) // 64) * 64

    # None: as many slices as the call's staging tasks, at most 3 and half its pieces (5, 4 and 2 + 4 here)
    tasks = [max(1, min(runtime.threads, (p + 1) // 2, 3)) for p in (5, 4, 6)]
    assert asked == [want(slices or t) for t in tasks]


@pytest.fixture
def stager():
    if not native_staging_available():
        pytest.skip("the compiled stager was not built here")


@pytest.mark.parametrize("helpers", [0, 1, 3, 8])
@pytest.mark.parametrize("stream", [True, False])
def test_native_staging_copies_every_piece_once(stager, helpers, stream):
    """Pieces of three arrays (empty, under and past STREAM_MIN_BYTES, unaligned) copied by the caller and up to
    ``helpers`` pool threads equal their sources byte for byte, nothing else is written, the sources are untouched;
    each piece's times lie within the call, from start to end, on the caller (0) or one of at most ``helpers``
    pool threads."""
    rng = np.random.default_rng(helpers)
    srcs = [rng.integers(0, 256, n, dtype=np.uint8) for n in (3 * STREAM_MIN_BYTES + 5, 1000, 0)]
    dsts = [np.full(s.size + 2, 7, np.uint8) for s in srcs]
    bounds = [(0, 1), (1, STREAM_MIN_BYTES + 4), (STREAM_MIN_BYTES + 4, 3 * STREAM_MIN_BYTES + 5)]
    pieces = [(dsts[0][1 + a:1 + b], srcs[0][a:b]) for a, b in bounds]
    pieces += [(dsts[1][1:501], srcs[1][:500]), (dsts[1][501:1001], srcs[1][500:]), (dsts[2][1:1], srcs[2])]
    before = [s.copy() for s in srcs]
    t0 = time.perf_counter()
    job = NativeStaging(pieces, helpers=helpers, stream=stream)
    times = job.finish()
    t1 = time.perf_counter()
    for s, d, b in zip(srcs, dsts, before):
        assert np.array_equal(d[1:-1], s) and d[0] == 7 == d[-1] and np.array_equal(s, b)
    assert times.shape == (len(pieces), 3)
    assert np.all((t0 <= times[:, 0]) & (times[:, 0] <= times[:, 1]) & (times[:, 1] <= t1))
    threads = set(times[:, 2].astype(int)) - {0}
    assert len(threads) <= helpers and all(t >= 1 for t in threads)
    assert job.finish() is times


@pytest.mark.parametrize("helpers", [0, 2, 5])
def test_native_staging_of_ranges_copies_each_range_in_order(stager, rt, helpers):
    """``NativeStaging.of_ranges``: ranges of two arrays of other element sizes (one range empty, one past
    STREAM_MIN_BYTES, parts of the arrays left out) copied equal their sources, nothing else written; the events
    are the pieces' in order (each complete, the times one row a piece)."""
    import pyopencl as cl

    rng = np.random.default_rng(helpers)
    a = rng.integers(-2**31, 2**31, STREAM_MIN_BYTES // 2 + 37, dtype=np.int64)
    b = rng.integers(0, 256, 5000, dtype=np.uint8)
    da, db = np.full_like(a, 7), np.full_like(b, 7)
    ra = [(0, 5), (5, 5), (5, STREAM_MIN_BYTES // 2), (STREAM_MIN_BYTES // 2, a.size - 1)]
    rb = [(100, 4000), (4000, 4999)]
    events = [cl.UserEvent(rt.context) for _ in range(len(ra) + len(rb))]
    before = a.copy(), b.copy()
    t0 = time.perf_counter()
    job = NativeStaging.of_ranges([(da, a, ra), (db, b, rb)], events, helpers=helpers, stream=True)
    assert job.times is None
    times = job.finish()
    t1 = time.perf_counter()
    assert np.array_equal(da[:-1], a[:-1]) and da[-1] == 7
    assert np.array_equal(db[100:4999], b[100:4999]) and (db[:100] == 7).all() and db[4999] == 7
    assert np.array_equal(a, before[0]) and np.array_equal(b, before[1])
    assert times.shape == (6, 3)
    assert np.all((t0 <= times[:, 0]) & (times[:, 0] <= times[:, 1]) & (times[:, 1] <= t1))
    if helpers == 0:  # the caller alone: the pieces one after another, in the order given
        assert np.all(np.diff(times[:, 0]) >= 0) and np.all(times[:, 2] == 0)
    complete = cl.command_execution_status.COMPLETE
    assert all(ev.command_execution_status == complete for ev in events)


def test_native_staging_of_ranges_refuses_bad_arrays(stager):
    """Ranges outside the arrays or reversed, arrays that are not 1-D and C-contiguous, of two lengths or element
    sizes, or read-only, and events of another count raise ValueError, arrays of Python objects and bounds that are
    not integers TypeError, before anything is copied; numpy integer bounds are taken."""
    a, b = np.arange(8, dtype=np.int64), np.zeros(8, np.int64)
    frozen = np.zeros(8, np.int64)
    frozen.flags.writeable = False
    for arrays, match in (([(b, a, [(0, 9)])], "outside"), ([(b, a, [(4, 3)])], "reversed"),
                          ([(b, a, [(-1, 3)])], "outside"), ([(b[::2], a[:4], [(0, 4)])], "C-contiguous"),
                          ([(b.reshape(2, 4), a.reshape(2, 4), [(0, 1)])], "1-D"),
                          ([(b[:4], a, [(0, 4)])], "one length"),
                          ([(b.view(np.int32)[:8], a, [(0, 4)])], "element size"),
                          ([(frozen, a, [(0, 4)])], "read-only")):
        with pytest.raises(ValueError, match=match):
            NativeStaging.of_ranges(arrays, helpers=1, stream=False)
    objects = np.array([object()] * 8)
    for arrays, match in (([(objects.copy(), objects, [(0, 8)])], "Python objects"), ([(b, a, [(0.0, 4)])], None)):
        with pytest.raises(TypeError, match=match):
            NativeStaging.of_ranges(arrays, helpers=1, stream=False)
    assert NativeStaging.of_ranges([(b, a, [(np.int32(1), np.int64(2))])], helpers=0, stream=False).finish().shape \
        == (1, 3) and b[1] == a[1] and not b[0] and not b[2:].any()
    b[1] = 0
    with pytest.raises(ValueError, match="1 events for 2 pieces"):
        NativeStaging.of_ranges([(b, a, [(0, 4), (4, 8)])], [object()], helpers=1, stream=False)
    assert not b.any()


def test_native_staging_completes_each_user_event(stager, rt):
    """Each piece's OpenCL user event is complete once finish returns, so that device work behind them runs."""
    import pyopencl as cl

    src = np.arange(1 << 16, dtype=np.int32)
    dst = np.zeros_like(src)
    events = [cl.UserEvent(rt.context) for _ in range(4)]
    marker = cl.enqueue_marker(rt.queue, wait_for=events)
    rt.queue.flush()
    NativeStaging([(dst[k << 14:(k + 1) << 14], src[k << 14:(k + 1) << 14]) for k in range(4)], events, helpers=2,
                  stream=True).finish()
    complete = cl.command_execution_status.COMPLETE
    assert all(ev.command_execution_status == complete for ev in events)
    marker.wait()
    assert np.array_equal(dst, src)


@pytest.mark.parametrize("helpers", [0, 1, 3, 7])
@pytest.mark.parametrize("slice_bytes", [64, 1000, STREAM_MIN_BYTES, 10 * STREAM_MIN_BYTES])
def test_native_staging_in_slices(stager, helpers, slice_bytes):
    """``slice_bytes``: each piece copied in slices by whichever threads take them (slices not a multiple of the
    element size or of a cache line, longer than a piece, an empty piece) equals its source, nothing else is
    written; each piece's times run from its start to its end within the call, and the pieces end in order when the
    caller copies alone."""
    rng = np.random.default_rng(slice_bytes + helpers)
    src = rng.integers(-2**31, 2**31, STREAM_MIN_BYTES + 12345, dtype=np.int64)
    dst = np.full(src.size + 1, 7, np.int64)
    cuts = [0, 3, 3, 5000, STREAM_MIN_BYTES // 2 + 1, src.size]
    t0 = time.perf_counter()
    job = NativeStaging.of_ranges([(dst[:-1], src, list(zip(cuts[:-1], cuts[1:])))], helpers=helpers, stream=True,
                                  slice_bytes=slice_bytes)
    times = job.finish()
    t1 = time.perf_counter()
    assert np.array_equal(dst[:-1], src) and dst[-1] == 7
    assert times.shape == (5, 3) and np.all((t0 <= times[:, 0]) & (times[:, 0] <= times[:, 1]) & (times[:, 1] <= t1))
    # The stager's plan: each piece in ceil(bytes / slice_bytes) slices (an empty one in one), every slice taken.
    slices = [max(1, -(-(b - a) * 8 // slice_bytes)) for a, b in zip(cuts[:-1], cuts[1:])]
    assert list(job._first) == [0, *itertools.accumulate(slices)] and job._job.next > job._first[-1]
    threads = set(times[:, 2].astype(int)) - {0}
    assert len(threads) <= helpers and all(t >= 1 for t in threads)
    if helpers == 0:
        assert np.all(np.diff(times[:, 1]) >= 0) and np.all(times[:, 2] == 0)


@pytest.mark.parametrize("slice_bytes", [0, 4096])
def test_native_staging_takes_its_events_late(stager, rt, slice_bytes):
    """Events given after the copies began (``set_events``): each piece's event completes once it is copied and its
    event given, whichever comes first, so that device work behind the events runs; events given twice, of another
    count, or after ``finish`` are refused."""
    import pyopencl as cl

    src = np.arange(1 << 18, dtype=np.int32)
    dst = np.zeros_like(src)
    ranges = [(k << 14, (k + 1) << 14) for k in range(16)]
    job = NativeStaging.of_ranges([(dst, src, ranges)], helpers=3, stream=True, slice_bytes=slice_bytes)
    time.sleep(0.05)  # the helpers copy (most of) the pieces before their events are given
    events = [cl.UserEvent(rt.context) for _ in ranges]
    marker = cl.enqueue_marker(rt.queue, wait_for=events)
    rt.queue.flush()
    with pytest.raises(ValueError, match="15 events for 16 pieces"):
        job.set_events(events[1:])
    job.set_events(events)
    with pytest.raises(ValueError, match="given already"):
        job.set_events(events)
    job.finish()
    complete = cl.command_execution_status.COMPLETE
    assert all(ev.command_execution_status == complete for ev in events)
    marker.wait()
    assert np.array_equal(dst, src)
    with pytest.raises(RuntimeError, match="finished"):
        job.set_events(events)
    # Every piece copied before its event is given (the caller copies alone, in finish): given, each completes.
    dst[:] = 0
    job = NativeStaging.of_ranges([(dst, src, ranges)], helpers=0, stream=False, slice_bytes=slice_bytes)
    events = [cl.UserEvent(rt.context) for _ in ranges]
    job.set_events(events)
    assert all(ev.command_execution_status != complete for ev in events)
    job.finish()
    assert all(ev.command_execution_status == complete for ev in events) and np.array_equal(dst, src)
    with pytest.raises(ValueError, match="given already"):  # at construction
        NativeStaging.of_ranges([(dst, src, ranges[:1])], events[:1], helpers=0, stream=False).set_events(events[:1])


def test_native_staging_in_slices_of_one_byte(stager):
    """Slices of one byte (as many slices as bytes, taken by four threads at once) copy every byte once."""
    src = np.random.default_rng(3).integers(0, 256, 50_001, dtype=np.uint8)
    dst = np.zeros_like(src)
    job = NativeStaging.of_ranges([(dst, src, [(0, 20_000), (20_000, 50_001)])], helpers=3, stream=False,
                                  slice_bytes=1)
    job.finish()
    assert np.array_equal(dst, src) and list(job._first) == [0, 20_000, 50_001]


def test_native_staging_refuses_bad_slices(stager):
    """A negative ``slice_bytes`` or one from 2**63 on raises ValueError, one that is not an integer (a bool
    included) TypeError, before anything is copied."""
    a, b = np.arange(8, dtype=np.int64), np.zeros(8, np.int64)
    for bad in (-1, 1 << 63):
        with pytest.raises(ValueError, match="slice_bytes"):
            NativeStaging([(b, a)], helpers=1, stream=False, slice_bytes=bad)
    for bad in (64.0, True):
        with pytest.raises(TypeError):
            NativeStaging.of_ranges([(b, a, [(0, 8)])], helpers=1, stream=False, slice_bytes=bad)
    assert not b.any()


def test_native_staging_keeps_no_bad_events(stager, rt):
    """``set_events`` with an object that is no event raises AttributeError and gives nothing: the events given
    next are set."""
    import pyopencl as cl

    src = np.arange(1 << 12, dtype=np.int32)
    dst = np.zeros_like(src)
    job = NativeStaging.of_ranges([(dst, src, [(0, 2048), (2048, 4096)])], helpers=0, stream=False)
    events = [cl.UserEvent(rt.context) for _ in range(2)]
    with pytest.raises(AttributeError):
        job.set_events([events[0], object()])
    job.set_events(events)
    job.finish()
    assert all(ev.command_execution_status == cl.command_execution_status.COMPLETE for ev in events)
    assert np.array_equal(dst, src)


def test_native_staging_refuses_bad_pieces(stager):
    """Pieces that are not C-contiguous, of two byte lengths or into read-only memory, and events of another
    count, raise ValueError before anything is copied."""
    a, b = np.arange(8, dtype=np.int64), np.zeros(8, np.int64)
    frozen = np.zeros(8, np.int64)
    frozen.flags.writeable = False
    for pieces, match in (([(b[::2], a[:4])], "C-contiguous"), ([(b[:3], a[:4])], "byte length"),
                          ([(frozen, a)], "read-only")):
        with pytest.raises(ValueError, match=match):
            NativeStaging(pieces, helpers=1, stream=False)
    with pytest.raises(ValueError, match="1 events for 2 pieces"):
        NativeStaging([(b[:4], a[:4]), (b[4:], a[4:])], [object()], helpers=1, stream=False)
    assert not b.any()


def test_native_staging_from_many_threads(stager):
    """Eight threads staging jobs of their own at once, sharing the pool: every copy right."""
    rng = np.random.default_rng(9)
    srcs = [rng.integers(0, 2**31, 1 << 18, dtype=np.int64) for _ in range(8)]
    dsts = [np.zeros_like(s) for s in srcs]

    def stage(i: int) -> None:
        for _ in range(5):
            dsts[i][:] = 0
            pieces = [(dsts[i][k:k + 4096], srcs[i][k:k + 4096]) for k in range(0, srcs[i].size, 4096)]
            NativeStaging(pieces, helpers=3, stream=i % 2 == 0).finish()
            assert np.array_equal(dsts[i], srcs[i])

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        list(ex.map(stage, range(8)))


def _staged_with_helpers() -> tuple[bool, bool]:
    """Pieces staged with two helpers given time to start first: (every byte right, a helper took a piece)."""
    src = np.arange(1 << 20, dtype=np.int64)
    dst = np.zeros_like(src)
    job = NativeStaging([(dst[k:k + 4096], src[k:k + 4096]) for k in range(0, src.size, 4096)], helpers=2,
                        stream=False)
    time.sleep(0.2)
    times = job.finish()
    return bool(np.array_equal(dst, src)), bool((times[:, 2] != 0).any())


def test_native_staging_helpers_take_pieces(stager):
    """Given time before the caller joins, the pool's threads take pieces (a stager whose helpers never ran would
    leave every piece to the caller)."""
    assert _staged_with_helpers() == (True, True)


def test_native_staging_finish_waits_for_a_helpers_last_piece(stager):
    """A helper still copying a large piece when the caller runs out of pieces: finish returns only once that
    copy is done."""
    big = np.ones(1 << 27, np.uint8)  # 128 MiB
    dst = np.zeros_like(big)
    small_src, small_dst = np.ones(8, np.uint8), np.zeros(8, np.uint8)
    for _ in range(3):
        dst[:] = 0
        job = NativeStaging([(dst, big), (small_dst, small_src)], helpers=1, stream=False)
        t = time.perf_counter()
        while job._job.next < 1 and time.perf_counter() - t < 5:  # a helper has taken the big piece
            pass
        times = job.finish()
        assert dst[-1] == 1 and times[0, 1] > 0, times


def test_native_staging_reports_a_failed_event(stager, rt, monkeypatch):
    """An event whose setting fails (a clSetUserEventStatus that returns CL_INVALID_OPERATION for the second of
    three) makes finish raise, every copy done and the other events set."""
    import ctypes

    import pyopencl as cl

    from hpu.core import streaming

    real = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)(streaming._set_user_event_status())
    events = [cl.UserEvent(rt.context) for _ in range(3)]

    @ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)
    def set_status(event, status):
        return -59 if event == events[1].int_ptr else real(event, status)

    monkeypatch.setattr(streaming, "_set_user_event_status", lambda: ctypes.cast(set_status, ctypes.c_void_p).value)
    src, dst = np.arange(48), np.zeros(48, np.int64)
    job = NativeStaging([(dst[k:k + 16], src[k:k + 16]) for k in range(0, 48, 16)], events, helpers=0, stream=False)
    with pytest.raises(RuntimeError, match=r"clSetUserEventStatus failed \(-59\)"):
        job.finish()
    assert np.array_equal(dst, src)
    complete = cl.command_execution_status.COMPLETE
    assert [ev.command_execution_status == complete for ev in events] == [True, False, True]
    events[1].set_status(complete)


@pytest.mark.parametrize("on_error", ["raise", "fallback"])
@pytest.mark.parametrize("part", ["sort", "rows", "kv"])
def test_pipeline_survives_a_failed_event(fresh, stager, monkeypatch, on_error, part):
    """A clSetUserEventStatus of the compiled stager that fails (CL_OUT_OF_RESOURCES, the second piece's event
    left unset) ends the call at once: a DeviceFailure, or numpy's result from the CPU, the input untouched; it
    left the copies behind that event waiting, and the call waited for them forever.  The next call is right."""
    import ctypes
    import threading

    from hpu.core import streaming

    real = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)(streaming._set_user_event_status())
    calls: list = []

    @ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)
    def set_status(event, status):
        calls.append(event)
        return -5 if len(calls) == 2 else real(event, status)

    rng = np.random.default_rng(11)
    a = rng.standard_normal(9 * STREAM_MIN_BYTES // 4 + 3).astype(np.float32)
    a[::7] = -0.0
    values = rng.integers(-2**62, 2**62, a.size)
    before = (a.copy(), values.copy())
    opts = hpu.PipelineOptions(chunk_bytes=2 * STREAM_MIN_BYTES, native_staging=True)
    run, want = pipeline_calls(fresh, a, values, 256, opts, on_error)[part]
    done: list = []

    def call() -> None:
        try:
            done.append(run())
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            done.append(e)

    monkeypatch.setattr(streaming, "_set_user_event_status", lambda: ctypes.cast(set_status, ctypes.c_void_p).value)
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "the call waited forever for an event left unset"
    assert len(calls) >= 2
    got = done[0]
    if on_error == "raise":
        assert isinstance(got, hpu.DeviceFailure) and "clSetUserEventStatus failed (-5)" in str(got)
    else:
        assert all(same_bits(g, w) for g, w in zip(got, want, strict=True))
    assert same_bits(a, before[0]) and same_bits(values, before[1])
    monkeypatch.undo()
    assert all(same_bits(g, w) for g, w in zip(run(), want, strict=True))


def _stage_in_child(queue) -> None:
    queue.put(_staged_with_helpers())


def test_native_staging_in_a_forked_child(stager):
    """A child forked after the pool's threads were made (which it does not inherit) stages with helpers of a
    pool of its own."""
    src = np.arange(1 << 16, dtype=np.int32)
    NativeStaging([(np.empty_like(src), src)], helpers=4, stream=False).finish()
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_stage_in_child, args=(results,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12: fork() of a multi-threaded process
        child.start()
    assert results.get(timeout=60) == (True, True)
    child.join(60)
    assert child.exitcode == 0


def _capped_in_child(queue) -> None:
    """In a fresh pool: four threads' jobs of 8 helpers each with most_threads=3: the pool threads that copied their
    pieces, and whether every copy is right."""
    import threading

    srcs = [np.arange(1 << 18, dtype=np.int64) + i for i in range(4)]
    dsts = [np.zeros_like(s) for s in srcs]
    seen: list = []

    def stage(i: int) -> None:
        job = NativeStaging([(dsts[i][k:k + 2048], srcs[i][k:k + 2048]) for k in range(0, srcs[i].size, 2048)],
                            helpers=8, stream=False, most_threads=3)
        time.sleep(0.05)
        seen.append(job.finish()[:, 2])

    threads = [threading.Thread(target=stage, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.put((sorted(set(np.concatenate(seen).astype(int).tolist()) - {0}),
               all(np.array_equal(d, s) for d, s in zip(dsts, srcs))))


def test_native_staging_threads_are_capped(stager):
    """Jobs that want more helpers than ``most_threads`` allows share a pool of that many threads (in a forked
    child: a pool of its own, empty), and every copy is right."""
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_capped_in_child, args=(results,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        child.start()
    helpers, right = results.get(timeout=60)
    child.join(60)
    assert right and 1 <= len(helpers) and max(helpers) <= 3, helpers
