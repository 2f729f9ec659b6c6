"""Results in plain memory (the caller keeps earlier results, so the host pool has no free pinned block): the device
writes pinned memory only and the thread pool copies each piece on, for every sort path; memory the pool already
paged in is not touched again."""

import gc

import numpy as np
import pytest

import hpu
from hpu.sorting.pipeline import fast_keyed_sort

PLAIN = hpu.PipelineOptions(result_memory="plain", chunk_bytes=64 << 10)


def stage_bytes(trace: hpu.Trace) -> int:
    """Bytes the CPU's threads copied between pinned and result memory: staging in and copying out."""
    return sum(e.nbytes for e in trace.resolve().events if e.unit.startswith("cpu:") and e.kind == "stage")


def touched(trace: hpu.Trace) -> int:
    return sum(1 for e in trace.resolve().events if e.kind == "touch")


def input_copy(rt, keys, pinned):
    """A copy of ``keys`` in the pool's pinned memory (which the DMA engine reads unstaged) or in plain memory."""
    if not pinned:
        return keys.copy()
    src = rt.empty_pinned(keys.shape, keys.dtype)
    src[:] = keys
    assert rt.host_pool.is_pinned(src)
    return src


def keyed(rt, keys, values, gather):
    return fast_keyed_sort(keys, values, rt, gather=gather, redo=None, on_device_error="raise", options=PLAIN)


def kept_block(rt, nbytes):
    """A pinned block of the pool that the caller keeps, so that a result of ``nbytes`` (its arrays' sizes rounded
    up to 64 bytes each) finds none free."""
    return rt.host_pool.empty(nbytes + 256, np.uint8, pinned=True)


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
@pytest.mark.parametrize("pinned_input", [False, True])
def test_argsort_into_plain_memory_comes_down_through_pinned_memory(fresh, dtype, pinned_input):
    """The permutation right and every byte of it copied on by the CPU from the keys' staging memory (a pinned
    input is not staged, and not written)."""
    n = (1 << 18) + 7
    rng = np.random.default_rng(1)
    keys = rng.integers(-50, 50, n).astype(dtype)
    src = input_copy(fresh, keys, pinned_input)
    held = kept_block(fresh, 8 * n)
    (perm,), trace = keyed(fresh, src, [], gather=False)
    assert not fresh.host_pool.is_pinned(perm)
    assert np.array_equal(perm, np.argsort(keys, kind="stable")) and np.array_equal(src, keys)
    staged_in = 0 if pinned_input else keys.nbytes
    assert stage_bytes(trace) == staged_in + perm.nbytes
    del held


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
@pytest.mark.parametrize("pinned_input", [False, True])
def test_key_value_sort_into_plain_memory_comes_down_through_pinned_memory(fresh, pinned_input, dtype):
    """float64 keys: two sorts of 32-bit digits, the keys' staging memory reused behind the second."""
    n = (1 << 18) + 3
    rng = np.random.default_rng(2)
    keys = rng.integers(0, 1000, n).astype(dtype)
    rec = np.zeros(n, dtype=[("a", np.int16), ("b", np.float64)])
    rec["a"], rec["b"] = rng.integers(-9, 9, n), rng.standard_normal(n)
    values = [rng.integers(0, 1 << 60, n), rng.integers(-100, 100, n).astype(np.int8), rec]
    src = input_copy(fresh, keys, pinned_input)
    originals = [v.copy() for v in values]
    held = kept_block(fresh, n * (keys.itemsize + 8 + 1 + rec.itemsize))
    outs, trace = keyed(fresh, src, values, gather=True)
    order = np.argsort(keys, kind="stable")
    assert not any(fresh.host_pool.is_pinned(o) for o in outs)
    assert np.array_equal(outs[0], keys[order])
    for out, v in zip(outs[1:], originals):
        assert out.tobytes() == v[order].tobytes()
    assert np.array_equal(src, keys) and all(v.tobytes() == o.tobytes() for v, o in zip(values, originals))
    nbytes = sum(o.nbytes for o in outs)
    assert stage_bytes(trace) == nbytes - (keys.nbytes if pinned_input else 0) + nbytes
    del held


def test_row_argsort_into_plain_memory(fresh):
    """Rows of m keys (each row's stable argsort, flattened) in plain memory."""
    m, rows = 1000, 300
    keys = np.random.default_rng(9).integers(0, 50, m * rows).astype(np.float32)
    held = kept_block(fresh, 8 * keys.size)
    (perm,), trace = fast_keyed_sort(keys, [], fresh, row_length=m, redo=None, on_device_error="raise",
                                     options=PLAIN)
    assert not fresh.host_pool.is_pinned(perm) and stage_bytes(trace) == keys.nbytes + perm.nbytes
    assert np.array_equal(perm.reshape(rows, m), np.argsort(keys.reshape(rows, m), axis=-1, kind="stable"))
    del held


def test_keyed_results_in_pinned_memory_come_down_directly(fresh):
    """With a free pinned block the device writes the results itself: the CPU copies only the input in."""
    n = 1 << 17
    keys = np.random.default_rng(3).integers(0, 99, n).astype(np.int32)
    (perm,), trace = keyed(fresh, keys, [], gather=False)
    assert fresh.host_pool.is_pinned(perm) and stage_bytes(trace) == keys.nbytes
    assert np.array_equal(perm, np.argsort(keys, kind="stable"))


def test_paged_in(fresh):
    pool = fresh.host_pool
    nbytes = 1 << 21
    assert pool.paged_in(pool.empty(nbytes, np.uint8, pinned=True))
    first = pool.empty(nbytes, np.uint8)
    assert not pool.paged_in(first) and not pool.paged_in(np.zeros(nbytes, np.uint8))
    first[:] = 1
    del first
    gc.collect()
    again = pool.empty(nbytes, np.uint8)
    assert pool.paged_in(again) and pool.paged_in(again[5:])


def test_a_recycled_plain_result_is_not_touched_again(fresh):
    """The first result in plain memory has its pages touched beside the device's work; the same block handed out
    again is paged in already, so the next call only copies into it."""
    n = 1 << 18
    a = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    held = kept_block(fresh, a.nbytes)
    first, t1 = hpu.hybrid_mergesort(a, strategy="gpu", runtime=fresh, options=PLAIN, return_trace=True)
    assert not fresh.host_pool.is_pinned(first) and touched(t1) > 0
    del first
    gc.collect()
    second, t2 = hpu.hybrid_mergesort(a, strategy="gpu", runtime=fresh, options=PLAIN, return_trace=True)
    assert not fresh.host_pool.is_pinned(second) and touched(t2) == 0
    assert np.array_equal(second, np.sort(a))
    del held


def test_a_single_piece_argsort_into_plain_memory_does_not_hang(runtime, tmp_path):
    """One piece (the caller alone stages it, once the device's work is enqueued) and plain results on a fresh
    runtime: the lease's pinned memory for the permutation is made (and mapped, on the lease's queue) before
    anything is enqueued.  Made when its copy down was enqueued, the map waited behind copies up that wait for the
    caller's staging, which runs only after: the call hung.  In a child process with a deadline."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    from test_review_caller_staging import _child

    out = _child(tmp_path, """
        from hpu.sorting.pipeline import fast_keyed_sort
        n = 1 << 18
        keys = np.random.default_rng(5).integers(-9, 9, n).astype(np.int32)
        held = rt.host_pool.empty(8 * n + 256, np.uint8, pinned=True)
        opts = hpu.PipelineOptions(result_memory="plain", chunk_bytes=64 << 20)
        (perm,), _ = fast_keyed_sort(keys, [], rt, redo=None, on_device_error="raise", options=opts)
        print("pinned:", rt.host_pool.is_pinned(perm), "right:", np.array_equal(perm, np.argsort(keys, kind="stable")))
    """)
    assert "pinned: False right: True" in out, out


def lease_pinned_bytes(rt) -> int:
    """Pinned bytes of the runtime's (one) idle lease."""
    lease = rt.acquire_lease()
    try:
        return lease.pinned_bytes
    finally:
        rt.release_lease(lease)


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_the_permutation_comes_down_through_the_keys_staging_memory(fresh, dtype):
    """No pinned buffer of the result's size beside the keys' staging memory: the keys' is made large enough for
    the int64 positions (an int32 argsort held both, half again as much)."""
    n = (1 << 18) + 7
    keys = np.random.default_rng(6).standard_normal(n).astype(dtype)
    held = kept_block(fresh, 8 * n)
    (perm,), _ = keyed(fresh, keys, [], gather=False)
    assert not fresh.host_pool.is_pinned(perm) and np.array_equal(perm, np.argsort(keys, kind="stable"))
    assert lease_pinned_bytes(fresh) == 8 * n
    del held


def test_without_pinned_memory_to_spare_the_results_come_down_straight(fresh, monkeypatch):
    """Where the lease cannot pin memory for the positions (more than the keys' staging needs), they are copied
    straight into the plain result, as before there was a way through pinned memory: the call does not fail."""
    cl = pytest.importorskip("pyopencl")
    from hpu.core.runtime import DeviceLease

    n = (1 << 18) + 7
    keys = np.random.default_rng(7).integers(-99, 99, n).astype(np.int32)
    real = DeviceLease.pinned

    def scarce(self, name, nbytes):
        if nbytes > keys.nbytes:
            raise cl.MemoryError("clCreateBuffer", cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE, "injected")
        return real(self, name, nbytes)

    monkeypatch.setattr(DeviceLease, "pinned", scarce)
    held = kept_block(fresh, 8 * n)
    (perm,), trace = keyed(fresh, keys, [], gather=False)
    assert not fresh.host_pool.is_pinned(perm) and np.array_equal(perm, np.argsort(keys, kind="stable"))
    assert stage_bytes(trace) == keys.nbytes  # staged in; nothing copied out
    del held


def test_tiny_pieces_come_down_in_whole_aligned_elements(fresh):
    """A chunk of a few bytes: the results come down in pieces of whole elements, at least the device's base
    address alignment of them, as the inputs are staged (a piece a chunk made a copy every 8 bytes)."""
    n = (1 << 17) + 5
    rng = np.random.default_rng(8)
    keys, values = rng.standard_normal(n), rng.integers(0, 1 << 40, n)
    held = kept_block(fresh, 16 * n)
    opts = hpu.PipelineOptions(result_memory="plain", chunk_bytes=8)
    (sk, sv), trace = fast_keyed_sort(keys, [values], fresh, gather=True, redo=None, on_device_error="raise",
                                      options=opts)
    order = np.argsort(keys, kind="stable")
    assert np.array_equal(sk, keys[order]) and np.array_equal(sv, values[order])
    align = max(1, fresh.device.mem_base_addr_align // 8)
    downs = [e for e in trace.resolve().events if e.kind == "d2h"]
    assert len(downs) <= 2 * -(-n // align) and all(e.nbytes % 8 == 0 for e in downs)
    del held


def _rows_into_plain(rt, rows):
    from conftest import stable_rows_into

    from hpu.sorting.pipeline import fast_row_sort

    out, trace = fast_row_sort(rows.reshape(-1), rows.shape[1], rt, sort_into=stable_rows_into,
                               on_device_error="fallback", options=PLAIN)
    return out.reshape(rows.shape), trace


def test_rows_into_plain_memory_are_touched_once_a_piece(fresh):
    """Rows into a fresh plain result: every piece's pages touched once, every byte copied on from the staging memory,
    the rows right; the same block handed out again is not touched."""
    rows = np.random.default_rng(5).standard_normal((1200, 256)).astype(np.float32)  # pooled: >= 1 MiB
    held = kept_block(fresh, rows.nbytes)
    out, trace = _rows_into_plain(fresh, rows)
    pieces = -(-rows.nbytes // (64 << 10))
    assert not fresh.host_pool.is_pinned(out) and touched(trace) == pieces
    assert stage_bytes(trace) == 2 * rows.nbytes
    assert np.array_equal(out, np.sort(rows, axis=-1, kind="stable"))
    del out
    gc.collect()
    again, trace = _rows_into_plain(fresh, rows)
    assert touched(trace) == 0 and np.array_equal(again, np.sort(rows, axis=-1, kind="stable"))
    del held

