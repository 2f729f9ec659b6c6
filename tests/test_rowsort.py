"""Rows sorted one work-group a row on the device (hpu.sorting.pipeline.fast_row_sort) against numpy's stable sort.

The rows path of ``hpu.sort(a, axis=-1)`` for rows no longer than one
work-group's tile: pieces of whole rows are staged, copied up, sorted in place
by the merge sort's leaf kernel and copied back, pipelined.  Every result must
equal ``numpy.sort(a, axis=-1, kind="stable")`` bit for bit (-0.0 and +0.0,
NaN payloads in input order).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import same_bits, stable_rows_into
from test_argsort import make

import hpu
from hpu.sorting.device import ROW_MIN_GROUP, DeviceSorter, row_block
from hpu.sorting.pipeline import fast_row_sort, row_tile

NATIVE = ["int32", "uint32", "float32", "int64", "uint64", "float64"]


def _sorted_rows(rt, rows: np.ndarray, chunk_bytes: int = 4 << 20, **kw) -> tuple[np.ndarray, hpu.Trace]:
    opts = hpu.PipelineOptions(chunk_bytes=chunk_bytes)
    out, trace = fast_row_sort(rows.reshape(-1), rows.shape[1], rt, options=opts,
                               **{"sort_into": stable_rows_into, "on_device_error": "raise", **kw})
    return out.reshape(rows.shape), trace


@pytest.mark.parametrize("dtype", NATIVE)
@pytest.mark.parametrize("shape", [(2, 2), (300, 7), (64, 33), (37, 1000), (5, "tile")])
@pytest.mark.parametrize("chunk_bytes", [1000, 64 << 10, 4 << 20])  # 1000: under one row of the longer rows
@pytest.mark.parametrize("kind", ["specials", "few-unique", "reversed"])
def test_rows_equal_numpy(fresh, dtype, shape, chunk_bytes, kind):
    if not fresh.supports(np.dtype(dtype)):
        pytest.skip(f"{dtype} unsupported by the device")
    r, m = shape[0], row_tile(fresh, dtype) if shape[1] == "tile" else shape[1]
    rows = make(dtype, (r, m), kind, r * m)
    before = rows.copy()
    out, _ = _sorted_rows(fresh, rows, chunk_bytes)
    assert same_bits(out, np.sort(rows, axis=-1, kind="stable"))
    assert same_bits(rows, before), "input modified"


def test_zeros_and_nans_keep_their_input_order(fresh):
    """Equal keys of different bits: -0.0 / +0.0 and NaNs of several payloads, in input order as numpy's stable sort."""
    nans = np.array([0x7FC00001, 0xFFC00000, 0x7FC00002], np.uint32).view(np.float32)
    row = np.array([0.0, -0.0, nans[0], 1.0, -0.0, nans[1], 0.0, nans[2]], np.float32)
    rows = np.stack([row, row[::-1], np.roll(row, 3)] * 50)
    out, _ = _sorted_rows(fresh, rows, 256)
    assert same_bits(out, np.sort(rows, axis=-1, kind="stable"))


def test_api_sorts_rows_on_the_device_with_the_gpu_strategy(fresh, monkeypatch):
    import hpu.sorting.api as api

    calls = []
    real = api.fast_row_sort
    monkeypatch.setattr(api, "fast_row_sort", lambda *a, **k: calls.append(1) or real(*a, **k))
    rows = make("float32", (200, 500), "specials", 1)
    assert same_bits(hpu.sort(rows, runtime=fresh, strategy="gpu"), np.sort(rows, axis=-1, kind="stable"))
    got, want = hpu.sort(rows.T, axis=0, runtime=fresh, strategy="gpu"), np.sort(rows.T, axis=0, kind="stable")
    assert same_bits(np.ascontiguousarray(got), np.ascontiguousarray(want))
    assert len(calls) == 2
    # Not this path: rows longer than the tile, one row, a CPU share forced, datetime keys (NaT last), CPU strategy.
    long = make("float32", (3, row_tile(fresh, np.float32) + 1), "random", 2)
    assert same_bits(hpu.sort(long, runtime=fresh, strategy="gpu"), np.sort(long, axis=-1, kind="stable"))
    dates = rows.view(np.int32).astype("datetime64[s]")
    dates[::7, ::5] = np.datetime64("NaT")
    for a, kw in [(rows[:1], dict(strategy="gpu")), (rows, dict(strategy="advanced", alpha=0.5)),
                  (dates, dict(strategy="gpu")), (rows, dict(strategy="cpu"))]:
        assert same_bits(hpu.sort(a, runtime=fresh, **kw), np.sort(a, axis=-1, kind="stable")), kw
    assert len(calls) == 2


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("cpu_share", [0.0, 0.01, 0.3, 0.999, 1.0])
def test_cpu_share_of_rows(fresh, dtype, cpu_share):
    """The CPU pool sorts the first rows while the device sorts the rest: disjoint rows of one result, no merge."""
    rows = make(dtype, (301, 700), "specials", 9)
    cpu_rows = int(round(cpu_share * rows.shape[0]))
    calls = []

    def block(b: np.ndarray, o: np.ndarray) -> None:
        calls.append(b.shape[0])
        stable_rows_into(b, o)

    out, trace = _sorted_rows(fresh, rows, 64 << 10, cpu_rows=cpu_rows, sort_into=block)
    assert same_bits(out, np.sort(rows, axis=-1, kind="stable"))
    assert sum(calls) == cpu_rows and trace.alpha == pytest.approx(cpu_rows / rows.shape[0])
    got = hpu.sort(rows, runtime=fresh, strategy="gpu", alpha=cpu_share)
    assert same_bits(got, np.sort(rows, axis=-1, kind="stable"))


def test_cpu_share_of_rows_from_a_pool_worker(fresh):
    """Called from one of the runtime's own workers (whose submissions run at once), the CPU share still runs beside
    the device's, and every row is sorted once."""
    rows = make("float32", (200, 300), "specials", 4)
    calls = []

    def block(b: np.ndarray, o: np.ndarray) -> None:
        calls.append(b.shape[0])
        stable_rows_into(b, o)

    out, trace = fresh.pool.submit(_sorted_rows, fresh, rows, 64 << 10, cpu_rows=50, sort_into=block).result()
    assert same_bits(out, np.sort(rows, axis=-1, kind="stable"))
    assert sum(calls) == 50 and trace.alpha == pytest.approx(0.25)


@pytest.mark.parametrize("on_error", ["fallback", "raise"])
@pytest.mark.parametrize("cpu_rows", [0, 50])
def test_device_fault_mid_rows(fresh, monkeypatch, on_error, cpu_rows):
    """A device failure after some pieces: the CPU redoes the device's rows (right result, failure in the trace),
    its own share intact, or raises."""
    import pyopencl as cl

    real, calls, fail_at = DeviceSorter.sort_rows, [], [3]

    def faulty(self, *a, **k):
        calls.append(1)
        ev = real(self, *a, **k)
        if len(calls) == fail_at[0]:
            raise cl.LogicError("clEnqueueNDRangeKernel failed: <unknown error -9999>")
        return ev

    monkeypatch.setattr(DeviceSorter, "sort_rows", faulty)
    rows = make("float64", (400, 300), "specials", 5)
    before, want, done = rows.copy(), np.sort(rows, axis=-1, kind="stable"), []

    def slow(b: np.ndarray, o: np.ndarray) -> None:
        time.sleep(0.2)
        stable_rows_into(b, o)
        done.append(b.shape[0])

    if on_error == "raise":
        with pytest.raises(hpu.DeviceFailure, match="-9999"):
            _sorted_rows(fresh, rows, 64 << 10, cpu_rows=cpu_rows, sort_into=slow)
        assert sum(done) == cpu_rows  # the CPU's tasks had ended (none left writing into the result)
        assert len(calls) >= 3  # the fault fired
    else:
        out, trace = _sorted_rows(fresh, rows, 64 << 10, cpu_rows=cpu_rows, on_device_error="fallback")
        assert same_bits(out, want) and "-9999" in trace.fallback
        assert len(calls) >= 3
        # The API's own redo: its rows (one piece) fault at their first device sort, which must fire.
        calls.clear()
        fail_at[0] = 1
        with pytest.raises(hpu.DeviceFailure, match="-9999"):
            hpu.sort(rows, runtime=fresh, strategy="gpu", on_device_error="raise")
        assert len(calls) >= 1
        calls.clear()
        assert same_bits(hpu.sort(rows, runtime=fresh, strategy="gpu"), want)
        assert len(calls) >= 1  # the fault fired: this result is the CPU's redo
    assert same_bits(rows, before)


@pytest.mark.parametrize("on_error", ["fallback", "raise"])
def test_device_fault_before_staging(fresh, monkeypatch, on_error):
    """The device share fails before it queues its staging (and with it the CPU's share): with a fallback the CPU's
    rows are still sorted, once, before the call returns, and the device's are redone on the CPU; else the failure is
    raised at once."""
    import pyopencl as cl

    from hpu.core.runtime import DeviceLease

    def no_buffer(self, name, nbytes):
        raise cl.MemoryError("clCreateBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE")

    monkeypatch.setattr(DeviceLease, "buffer", no_buffer)
    rows = make("float32", (200, 300), "specials", 6)
    want, calls = np.sort(rows, axis=-1, kind="stable"), []

    def block(b: np.ndarray, o: np.ndarray) -> None:
        calls.append(b.shape[0])
        stable_rows_into(b, o)

    if on_error == "raise":
        with pytest.raises(hpu.DeviceFailure, match="ALLOCATION"):
            _sorted_rows(fresh, rows, 64 << 10, cpu_rows=40, sort_into=block)
        assert sum(calls) == 0  # raised before the CPU's share was queued: no work wasted, none left running
    else:
        out, trace = _sorted_rows(fresh, rows, 64 << 10, cpu_rows=40, sort_into=block, on_device_error="fallback")
        assert same_bits(out, want) and "ALLOCATION" in trace.fallback
        assert sum(calls) == 200  # 40 rows as the CPU's share, the device's 160 as its redo


def test_bad_arguments(fresh):
    tile = row_tile(fresh, np.int32)
    with pytest.raises(ValueError, match="divide"):
        fast_row_sort(np.zeros(10, np.int32), 3, fresh, sort_into=stable_rows_into)
    with pytest.raises(ValueError, match="tile"):
        fast_row_sort(np.zeros(2 * tile + 2, np.int32), tile + 1, fresh, sort_into=stable_rows_into)
    with pytest.raises(TypeError, match="float16"):
        fast_row_sort(np.zeros(4, np.float16), 2, fresh, sort_into=stable_rows_into)
    for cpu_rows in (-1, 6):
        with pytest.raises(ValueError, match="cpu_rows"):
            fast_row_sort(np.zeros(10, np.int32), 2, fresh, sort_into=stable_rows_into, cpu_rows=cpu_rows)
    lease = fresh.acquire_lease()
    try:
        assert DeviceSorter.for_rows(lease, np.int32, tile + 1) is None
        sorter = DeviceSorter.for_rows(lease, np.int32, 100)
        assert sorter.tile == row_block(100, 4) and sorter.tile >= 100
        buf = lease.buffer("t", 4 * 1000)
        for start, stop, m in [(0, 10, 0), (0, 10, sorter.tile + 1), (5, 4, 2)]:
            with pytest.raises(ValueError, match=rf"rows of m={m} keys need 1 <= m <= tile=.*got {start}, {stop}"):
                sorter.sort_rows(buf, start, stop, m)
        with pytest.raises(ValueError, match="too few"):
            sorter.sort_rows(buf, 0, 1001, 10)
    finally:
        fresh.release_lease(lease)


def test_row_block():
    assert row_block(1024, 4) == 64 * 17 and row_block(1, 8) == ROW_MIN_GROUP * 11
    assert row_block(ROW_MIN_GROUP * 17 + 1, 4) == 2 * ROW_MIN_GROUP * 17
    for m in range(1, 3000, 37):
        b = row_block(m, 8)
        assert b >= m and (b // 11) & (b // 11 - 1) == 0 and (b // 11 == ROW_MIN_GROUP or b // 2 < m)


@pytest.mark.parametrize("device_sort_seconds, on_device", [(0.05, True), (0.5, False)])
def test_rows_on_device_follows_the_model(runtime, monkeypatch, device_sort_seconds, on_device):
    """n = 2^20 float32 keys in rows of m = 2^10: the CPU's whole sort, 1 s, scaled by log2(m) / log2(n) = 0.5 s,
    against transfers plus the device's whole sort scaled to blocks of b = 1088 keys (pads included):
    0.1 s + 0.05 s x (1088 / 1024) x log2(1088) / 20 = 0.127 s (the device), or 0.3 s + 0.27 s = 0.57 s (the CPU).
    Only where the device's measured sort is the merge sort (a CPU device's curve is its radix sort's)."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    import hpu.sorting.api as api

    monkeypatch.setattr(api, "default_algorithm", lambda device: "merge")  # PoCL's own curve is its radix sort's
    sizes = [1 << 10, 1 << 20]
    curves = {"sizes": sizes, "cpu_sort": [1e-3, 1.0], "device_sort": [1e-4, device_sort_seconds],
              "transfer": [1e-4, 0.1 if on_device else 0.3], "merge2": [1e-4, 0.1], "merge16": [1e-4, 0.2]}
    profile = hpu.Profile(p=2, g=1, gamma=1, curves={"sort": curves})
    with hpu.Runtime(runtime.device, profile=profile, threads=2) as rt:
        assert hpu.sorting.rows_on_device(1 << 10, 1 << 10, np.float32, rt) is on_device
        assert hpu.sorting.rows_on_device(1 << 10, 1 << 10, np.float32, rt, strategy="gpu")
        for strategy in ("cpu", "basic", "advanced", "keyrange"):
            assert not hpu.sorting.rows_on_device(1 << 10, 1 << 10, np.float32, rt, strategy=strategy)
        assert not hpu.sorting.rows_on_device(1, 1 << 10, np.float32, rt, strategy="gpu")
        assert not hpu.sorting.rows_on_device(8, row_tile(rt, np.float32) + 1, np.float32, rt, strategy="gpu")
        assert not hpu.sorting.rows_on_device(8, 8, np.float16, rt, strategy="gpu")
    monkeypatch.undo()
    with hpu.Runtime(runtime.device, profile=profile, threads=2) as rt:  # a runtime decides once per shape
        merge = hpu.sorting.device.default_algorithm(rt.device) == "merge"
        assert hpu.sorting.rows_on_device(1 << 10, 1 << 10, np.float32, rt) is (on_device and merge)
    assert not hpu.sorting.rows_on_device(1 << 10, 1 << 10, np.float32, runtime), "uncalibrated: the CPU"

