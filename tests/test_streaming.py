"""Copies by streaming stores (hpu.core.streaming) against numpy.copyto, and the pipeline with and without them."""

import numpy as np
import pytest
from conftest import same_bits

import hpu
from hpu.core.streaming import STREAM_MIN_BYTES, copy_into, stream_copy, streaming_available
from hpu.sorting import pipeline
from hpu.sorting.pipeline import fast_row_sort


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


@pytest.mark.parametrize("stream", [True, False])
def test_pipeline_with_and_without_streaming(runtime, monkeypatch, stream):
    """A device sort and a row sort staged in pieces past STREAM_MIN_BYTES equal numpy's, the input untouched; every
    staging copy is made the way ``stream_copies`` asks."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    asked, real = [], pipeline.copy_into
    monkeypatch.setattr(pipeline, "copy_into", lambda d, s, st: asked.append(st) or real(d, s, st))
    opts = hpu.PipelineOptions(chunk_bytes=2 * STREAM_MIN_BYTES, stream_copies=stream)
    rng = np.random.default_rng(5)
    a = rng.standard_normal(5 * STREAM_MIN_BYTES // 4 + 3).astype(np.float32)
    a[::97] = -0.0
    before = a.copy()
    out = hpu.hybrid_mergesort(a, strategy="gpu", runtime=runtime, options=opts, on_device_error="raise")
    assert same_bits(out, np.sort(a, kind="stable")) and same_bits(a, before)
    rows = rng.integers(-9, 9, (4 * STREAM_MIN_BYTES // 256, 64)).astype(np.int32)
    got, _ = fast_row_sort(rows.reshape(-1), 64, runtime, options=opts, on_device_error="raise",
                           sort_into=lambda b, o: o.__setitem__(Ellipsis, np.sort(b, axis=-1, kind="stable")))
    assert np.array_equal(got.reshape(rows.shape), np.sort(rows, axis=-1, kind="stable"))
    assert len(asked) >= 4 and set(asked) == {stream}
