"""The device sorts (hpu.sorting.device: merge sort and radix sort) against numpy.sort(kind="stable"), bit for bit."""

import numpy as np
import pyopencl as cl
import pytest
from conftest import same_bits
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hpu
from hpu import NoDeviceError
from hpu.sorting import device as sort_device
from hpu.sorting.device import (ALGORITHMS, RADIX_BITS, SUPPORTED_DTYPES, DeviceSorter, device_algorithms, device_sort,
                                merge_buffers, sort_buffer)

DTYPES = [np.dtype(d) for d in (np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64)]
PATTERNS = ["bits", "small", "sorted", "reversed", "equal", "few", "special", "runs"]
LENGTHS = st.one_of(st.integers(0, 70), st.integers(71, 5000), st.integers(5001, 100_000))
#: Tiny tiles, so that a few thousand keys take many merge passes (odd and even counts).
SMALL_TILES = [(1, 1), (2, 3), (8, 2), (32, 5)]


def make_keys(dtype: np.dtype, n: int, pattern: str, rng: np.random.Generator) -> np.ndarray:
    """``n`` keys of ``dtype``; "bits" draws raw bit patterns (floats: NaNs with any payload and sign,
    infinities, subnormals, -0.0)."""
    uint = np.dtype(f"u{dtype.itemsize}")
    if pattern in ("bits", "sorted", "reversed", "runs"):
        a = rng.integers(0, np.iinfo(uint).max, n, dtype=uint, endpoint=True).view(dtype)
        if pattern == "sorted":
            a = np.sort(a, kind="stable")
        elif pattern == "reversed":
            a = np.sort(a, kind="stable")[::-1].copy()
        elif pattern == "runs":  # sorted runs of random lengths, as a partly merged input
            cuts = np.sort(rng.integers(0, n + 1, 5))
            a = np.concatenate([np.sort(part, kind="stable") for part in np.split(a, cuts)])
        return a
    if pattern == "small":
        return rng.integers(0, 2 * n + 1, n).astype(dtype)
    if pattern == "equal":
        return np.full(n, rng.integers(0, 100), dtype=dtype)
    if pattern == "few":
        return rng.integers(0, 3, n).astype(dtype)
    if dtype.kind == "f":  # special: ±0, ±inf, NaNs of several payloads and signs, subnormals, extremes
        info = np.finfo(dtype)
        nans = (np.array([np.nan, -np.nan], dtype=dtype).view(uint) | np.array([0, 1, 2, 3], dtype=uint)[:, None])
        pool = np.concatenate([np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, info.max, info.min,
                                         info.smallest_subnormal, -info.smallest_subnormal], dtype=dtype),
                               nans.ravel().view(dtype)])
    else:
        info = np.iinfo(dtype)
        pool = np.array([info.min, info.min + 1, 0, 1, info.max - 1, info.max], dtype=dtype)
    return rng.choice(pool, n)


def device_keys(runtime, a: np.ndarray, extra: int = 0):
    """A device buffer holding ``a`` (at least one key, as OpenCL buffers cannot be empty)."""
    host = np.zeros(max(a.size + extra, 1), a.dtype)
    host[:a.size] = a
    return cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)


def read(runtime, buf, n: int, dtype, wait_for=None, offset: int = 0) -> np.ndarray:
    out = np.empty(n, dtype)
    if n:
        cl.enqueue_copy(runtime.queue, out, buf, src_offset=offset * out.itemsize, wait_for=wait_for)
    elif wait_for:
        cl.wait_for_events(wait_for)
    return out


@pytest.fixture(scope="module")
def sorters(runtime):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    return {(dt, alg): DeviceSorter(runtime, dt, algorithm=alg)
            for dt in DTYPES if runtime.supports(dt) for alg in device_algorithms(runtime.device)}


@pytest.fixture(scope="module")
def small_tile_sorters(sorters, runtime):
    return {(dt, wg, items): DeviceSorter(runtime, dt, work_group_size=wg, items_per_thread=items, algorithm="merge")
            for dt in (np.dtype(np.int32), np.dtype(np.float64)) if (dt, "merge") in sorters
            for wg, items in SMALL_TILES}


def sort_on_device(sorter, a: np.ndarray) -> np.ndarray:
    runtime = sorter.runtime
    buf = device_keys(runtime, a)
    out, event = sorter.sort(buf, a.size)
    result = read(runtime, out, a.size, a.dtype, [event])
    assert same_bits(read(runtime, buf, a.size, a.dtype), a), "the input buffer changed"
    return result


@settings(max_examples=200, deadline=None)
@given(dtype=st.sampled_from(DTYPES), n=LENGTHS, pattern=st.sampled_from(PATTERNS), seed=st.integers(0, 2**32 - 1),
       algorithm=st.sampled_from(ALGORITHMS))
def test_sort_equals_numpy(sorters, dtype, n, pattern, seed, algorithm):
    assume((dtype, algorithm) in sorters)
    a = make_keys(dtype, n, pattern, np.random.default_rng(seed))
    assert same_bits(sort_on_device(sorters[dtype, algorithm], a), np.sort(a, kind="stable"))


@settings(max_examples=100, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(DTYPES), algorithm=st.sampled_from(ALGORITHMS))
def test_sort_hypothesis_arrays(sorters, data, dtype, algorithm):
    assume((dtype, algorithm) in sorters)
    a = data.draw(hnp.arrays(dtype, st.integers(0, 400), elements=hnp.from_dtype(dtype)))
    assert same_bits(sort_on_device(sorters[dtype, algorithm], a), np.sort(a, kind="stable"))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sort_tile_boundaries(sorters, dtype):
    """Lengths around multiples of the merge sort's tile: full and ragged last blocks, runs and pairs."""
    if (dtype, "merge") not in sorters:
        pytest.skip(f"{dtype} unsupported on this device")
    sorter = sorters[dtype, "merge"]
    t = sorter.tile
    rng = np.random.default_rng(0)
    for n in (1, 2, t - 1, t, t + 1, 2 * t - 1, 2 * t, 2 * t + 1, 3 * t, 4 * t + 1, 5 * t + 3, 8 * t):
        for pattern in ("bits", "few"):
            a = make_keys(dtype, n, pattern, rng)
            assert same_bits(sort_on_device(sorter, a), np.sort(a, kind="stable")), (n, pattern)


@settings(max_examples=100, deadline=None)
@given(config=st.sampled_from(SMALL_TILES), dtype=st.sampled_from([np.dtype(np.int32), np.dtype(np.float64)]),
       n=st.integers(0, 3000), pattern=st.sampled_from(PATTERNS), seed=st.integers(0, 2**32 - 1))
def test_sort_many_passes(small_tile_sorters, config, dtype, n, pattern, seed):
    key = (dtype, *config)
    assume(key in small_tile_sorters)
    a = make_keys(dtype, n, pattern, np.random.default_rng(seed))
    assert same_bits(sort_on_device(small_tile_sorters[key], a), np.sort(a, kind="stable"))


@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from(DTYPES), na=LENGTHS, nb=st.one_of(st.integers(0, 70), st.integers(71, 20_000)),
       pattern=st.sampled_from(PATTERNS), shared=st.booleans(), offsets=st.tuples(*[st.integers(0, 9)] * 3),
       seed=st.integers(0, 2**32 - 1))
def test_merge_equals_numpy(sorters, runtime, dtype, na, nb, pattern, shared, offsets, seed):
    """Merging sorted a and b equals the stable sort of a + b: on ties a comes first."""
    assume((dtype, "merge") in sorters)
    rng = np.random.default_rng(seed)
    a = np.sort(make_keys(dtype, na, pattern, rng), kind="stable")
    b = np.sort(make_keys(dtype, nb, pattern, rng), kind="stable")
    oa, ob, oo = offsets
    if shared:  # both inputs in one buffer: [pad | b | pad | a]
        host = np.concatenate([make_keys(dtype, ob, "bits", rng), b, make_keys(dtype, oa, "bits", rng), a])
        buf_a = buf_b = device_keys(runtime, host)
        oa += ob + nb
    else:
        buf_a = device_keys(runtime, np.concatenate([make_keys(dtype, oa, "bits", rng), a]))
        buf_b = device_keys(runtime, np.concatenate([make_keys(dtype, ob, "bits", rng), b]))
    out = cl.Buffer(runtime.context, cl.mem_flags.READ_WRITE, max(oo + na + nb, 1) * dtype.itemsize)
    res, event = sorters[dtype, "merge"].merge(buf_a, na, buf_b, nb, a_offset=oa, b_offset=ob, out=out,
                                                out_offset=oo)
    assert res is out
    got = read(runtime, out, na + nb, dtype, [event], offset=oo)
    assert same_bits(got, np.sort(np.concatenate([a, b]), kind="stable"))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_sort_api(sorters, runtime, algorithm):
    if (np.dtype(np.int32), algorithm) not in sorters:
        pytest.skip(f"{runtime.device_name} does not run {algorithm!r}")
    sorter = sorters[np.dtype(np.int32), algorithm]
    rng = np.random.default_rng(1)
    n, extra = 3 * sorter.tile + 5, 11
    a = make_keys(np.dtype(np.int32), n + extra, "bits", rng)
    expect = np.concatenate([np.sort(a[:n]), a[n:]])

    buf = device_keys(runtime, a)  # in place, on a prefix: the tail stays
    res, event = sorter.sort(buf, n, out=buf)
    assert res is buf
    assert same_bits(read(runtime, buf, n + extra, a.dtype, [event]), expect)

    buf = device_keys(runtime, a)  # into a given buffer, after an event the host completes
    out = device_keys(runtime, a[::-1].copy())
    gate = cl.UserEvent(runtime.context)
    res, event = sorter.sort(buf, n, out=out, wait_for=[gate])
    assert event.command_execution_status != cl.command_execution_status.COMPLETE
    gate.set_status(cl.command_execution_status.COMPLETE)
    assert res is out
    assert same_bits(read(runtime, out, n + extra, a.dtype, [event]), np.concatenate([expect[:n], a[::-1][n:]]))
    assert same_bits(read(runtime, buf, n + extra, a.dtype), a)

    for m in (5 * n, 3, 2 * n):  # the scratch buffer grows and is reused
        b = make_keys(np.dtype(np.int32), m, "small", rng)
        assert same_bits(sort_on_device(sorter, b), np.sort(b))

    res, event = sorter.sort(buf, 0)
    event.wait()
    assert res is buf

    res, event = sort_buffer(runtime, buf, n, np.int32)
    assert same_bits(read(runtime, res, n, a.dtype, [event]), expect[:n])
    if algorithm != "merge":
        return
    assert sorter.passes(0) == sorter.passes(sorter.tile) == 0
    assert sorter.passes(sorter.tile + 1) == 1 and sorter.passes(4 * sorter.tile) == 2
    assert sorter.passes(4 * sorter.tile + 1) == 3


def test_merge_buffers_function(sorters, runtime):
    a, b = np.array([-0.0, 1.0, np.nan]), np.array([0.0, 1.0, 2.0, -np.nan])
    res, event = merge_buffers(runtime, device_keys(runtime, a), 3, device_keys(runtime, b), 4, np.float64)
    assert same_bits(read(runtime, res, 7, np.float64, [event]), np.sort(np.concatenate([a, b]), kind="stable"))
    res, event = merge_buffers(runtime, device_keys(runtime, a), 0, device_keys(runtime, b), 0, np.float64)
    event.wait()


def test_device_sort(runtime, sorters):
    a = np.array([3, -1, 2, 0, 2**31 - 1, -(2**31)], dtype=">i4")
    out = device_sort(a, runtime)
    assert out.dtype == a.dtype and np.array_equal(out, np.sort(a))
    strided = np.arange(40, 0, -1, dtype=np.float32)[::3]
    assert same_bits(device_sort(strided, runtime), np.sort(strided))
    assert device_sort([5, 1, 3], runtime).tolist() == [1, 3, 5]
    empty = np.empty(0, np.uint64)
    out = device_sort(empty, runtime)
    assert out.dtype == empty.dtype and out.size == 0 and out is not empty


@pytest.mark.parametrize("dtype", [np.float16, np.int16, np.int8, np.bool_, np.complex64, object, ">i4", "U3"])
def test_unsupported_dtypes(runtime, sorters, dtype):
    with pytest.raises(TypeError, match="supports"):
        DeviceSorter(runtime, dtype)
    if np.dtype(dtype).byteorder != ">":
        with pytest.raises(TypeError, match="device sort supports the native dtypes"):
            device_sort(np.zeros(3, dtype), runtime)
    assert np.dtype(np.int32) in SUPPORTED_DTYPES


def test_float64_needs_fp64(runtime, sorters, monkeypatch):
    monkeypatch.setattr(runtime, "supports", lambda dt: np.dtype(dt) != np.float64)
    with pytest.raises(TypeError, match="cl_khr_fp64"):
        DeviceSorter(runtime, np.float64)
    with pytest.raises(TypeError, match="cl_khr_fp64"):
        device_sort(np.zeros(3), runtime)


def test_bad_arguments(runtime, sorters):
    sorter = sorters[np.dtype(np.int32), "merge"]
    buf = device_keys(runtime, np.zeros(10, np.int32))
    with pytest.raises(ValueError, match="1-D"):
        device_sort(np.zeros((2, 2), np.int32), runtime)
    with pytest.raises(ValueError, match="too few"):
        sorter.sort(buf, 11)
    with pytest.raises(ValueError, match=">= 0"):
        sorter.sort(buf, -1)
    with pytest.raises(TypeError, match="integer"):
        sorter.sort(buf, 2.0)
    with pytest.raises(TypeError, match="buffer"):
        sorter.sort(np.zeros(10, np.int32), 10)
    with pytest.raises(ValueError, match="too few"):
        sorter.sort(buf, 10, out=device_keys(runtime, np.zeros(9, np.int32)))
    with pytest.raises(ValueError, match="overlaps"):
        sorter.merge(buf, 4, buf, 4, b_offset=4, out=buf, out_offset=2)
    with pytest.raises(ValueError, match="too few"):
        sorter.merge(buf, 4, buf, 4, b_offset=7)
    with pytest.raises(ValueError, match="out_offset"):
        sorter.merge(buf, 1, buf, 1, out_offset=3)
    with pytest.raises(ValueError, match="power of two"):
        DeviceSorter(runtime, np.int32, work_group_size=3)
    with pytest.raises(ValueError, match="does not fit"):
        DeviceSorter(runtime, np.int32, work_group_size=runtime.device.max_work_group_size * 2)
    with pytest.raises(ValueError, match="items_per_thread"):
        DeviceSorter(runtime, np.int32, items_per_thread=0)
    with pytest.raises(ValueError, match="algorithm"):
        DeviceSorter(runtime, np.int32, algorithm="bitonic")
    with pytest.MonkeyPatch.context() as mp:  # work-groups larger than the device allows
        mp.setattr(sort_device, "_TILE_RADIX_WG", 2 * runtime.device.max_work_group_size)
        with pytest.raises(ValueError, match="do not fit"):
            DeviceSorter(runtime, np.int64, algorithm="tile-radix")
    with pytest.raises(ValueError, match="unsigned"):
        sorter.sort(buf, 10, bits=8)  # int32 keys
    unsigned = sorters[np.dtype(np.uint32), "radix"]
    for bits in (-1, 33):
        with pytest.raises(ValueError, match="bits"):
            unsigned.sort(buf, 10, bits=bits)
    with pytest.raises(ValueError, match="device_sort"):
        hpu.PipelineOptions(device_sort="bitonic")


@pytest.mark.parametrize("algorithm", ["radix", "tile-radix", "onesweep"])
def test_numpy_integers_as_bits_and_work_group_size(runtime, algorithm):
    """numpy scalars are taken as the integers they hold: a uint8 bits wrapped in the passes' arithmetic (233 passes
    into a counters buffer of 0 bytes, written past its end), an int64 work_group_size lacked bit_length."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    if algorithm not in device_algorithms(runtime.device):
        pytest.skip(f"{runtime.device_name} does not run {algorithm!r}")
    a = np.random.default_rng(11).integers(0, 8, 5000, dtype=np.uint32)
    sorter = DeviceSorter(runtime, np.uint32, algorithm=algorithm)  # fresh: no counters from an earlier sort
    for bits in (np.uint8(3), np.uint16(3), np.uint64(3), np.int64(3)):
        out, event = sorter.sort(device_keys(runtime, a), a.size, bits=bits)
        assert same_bits(read(runtime, out, a.size, np.dtype(np.uint32), [event]), np.sort(a, kind="stable"))
    wg = 1 << (min(runtime.device.max_work_group_size, 64).bit_length() - 1)
    for size in (np.int64(wg), np.uint16(wg)):
        merge = DeviceSorter(runtime, np.int32, work_group_size=size, algorithm="merge")
        b = a.astype(np.int32)
        out, event = merge.sort(device_keys(runtime, b), b.size)
        assert merge.work_group_size == wg and same_bits(read(runtime, out, b.size, np.dtype(np.int32), [event]),
                                                         np.sort(b, kind="stable"))


def test_onesweep_only_on_nvidia_gpus(runtime):
    """The onesweep radix sort (inline PTX) is offered on NVIDIA GPUs alone; elsewhere asking for it is refused."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    dev = runtime.device
    nvidia_gpu = not dev.type & cl.device_type.CPU and "NVIDIA" in dev.vendor.upper()
    assert ("onesweep" in device_algorithms(dev)) == nvidia_gpu
    assert set(device_algorithms(dev)) == set(ALGORITHMS) - (set() if nvidia_gpu else {"onesweep"})
    if not nvidia_gpu:
        with pytest.raises(ValueError, match="NVIDIA GPU"):
            DeviceSorter(runtime, np.int32, algorithm="onesweep")


@pytest.mark.parametrize("algorithm", ["tile-radix", "onesweep"])
@pytest.mark.parametrize("dtype, pattern", [(np.int32, "bits"), (np.float32, "special"), (np.uint32, "few"),
                                            (np.float64, "special"), (np.int64, "bits")])
def test_gpu_radix_sorts_of_many_tiles(sorters, runtime, algorithm, dtype, pattern):
    """A million and a half keys (hundreds of tiles, each placed after the tiles before it: the onesweep sort's
    look-back), the last tile part full: equal to numpy's stable sort bit for bit (-0.0 and +0.0, NaN payloads and
    few keys keep their order), in place too."""
    dtype = np.dtype(dtype)
    if (dtype, algorithm) not in sorters:
        pytest.skip(f"{runtime.device_name} does not run {algorithm!r} on {dtype}")
    a = make_keys(dtype, (3 << 19) + 5, pattern, np.random.default_rng(17))
    expect = np.sort(a, kind="stable")
    assert same_bits(sort_on_device(sorters[dtype, algorithm], a), expect)
    buf = device_keys(runtime, a)
    out, event = sorters[dtype, algorithm].sort(buf, a.size, out=buf)
    assert same_bits(read(runtime, buf, a.size, dtype, [event]), expect)


@pytest.mark.parametrize("n", [(1 << 24) + 3, 5000])
def test_onesweep_many_waves_and_past_its_limit(sorters, runtime, monkeypatch, n):
    """2^24 + 3 keys: thousands of tiles, many waves of work-groups, late tiles looking back on long finished ones;
    and past the onesweep sort's limit (lowered here to 4096 keys) the merge sort: both equal numpy's."""
    if (np.dtype(np.float32), "onesweep") not in sorters:
        pytest.skip(f"{runtime.device_name} does not run 'onesweep'")
    sorter = DeviceSorter(runtime, np.float32, algorithm="onesweep")  # fresh: which buffers it made tells its path
    if n == 5000:
        monkeypatch.setattr(sort_device, "_ONESWEEP_MAX_KEYS", 4096)
    a = make_keys(np.dtype(np.float32), n, "special" if n == 5000 else "bits", np.random.default_rng(n))
    assert same_bits(sort_on_device(sorter, a), np.sort(a, kind="stable"))
    merged = n == 5000  # the merge sort's partitions, not the radix sort's counters
    assert (sorter._partitions is not None, sorter._counts is not None) == (merged, not merged)


def test_default_algorithm(runtime, sorters):
    """The radix sort on CPU devices (work-groups run as loops there), the merge sort on the others."""
    cpu = bool(runtime.device.type & cl.device_type.CPU)
    assert DeviceSorter(runtime, np.int32).algorithm == ("radix" if cpu else "merge")
    assert "radix" in repr(sorters[np.dtype(np.int32), "radix"])


@settings(max_examples=100, deadline=None)
@given(dtype=st.sampled_from([np.dtype(np.uint32), np.dtype(np.uint64)]), n=LENGTHS, data=st.data(),
       in_place=st.booleans(), seed=st.integers(0, 2**32 - 1),
       algorithm=st.sampled_from(["radix", "tile-radix", "onesweep"]))
def test_radix_bits(sorters, dtype, n, data, in_place, seed, algorithm):
    """Keys below 2**bits sorted in ceil(bits / digit) passes (none for bits = 0, odd and even counts, in
    place or not) equal numpy's sort; larger keys are ordered by their low bits only, stably."""
    assume((dtype, algorithm) in sorters)
    sorter = sorters[dtype, algorithm]
    bits = data.draw(st.integers(0, 8 * dtype.itemsize), label="bits")
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1 << bits, n, dtype=dtype) if bits < 8 * dtype.itemsize else make_keys(dtype, n, "bits", rng)
    buf = device_keys(sorter.runtime, a)
    out, event = sorter.sort(buf, n, out=buf if in_place else None, bits=bits)
    assert same_bits(read(sorter.runtime, out, n, dtype, [event]), np.sort(a, kind="stable"))
    # high bits beyond `low` are left unsorted: the order of the low bits, stable
    low = data.draw(st.integers(0, min(bits, 2 * RADIX_BITS)), label="low")
    wide = make_keys(dtype, n, "bits", rng)
    out, event = sorter.sort(device_keys(sorter.runtime, wide), n, bits=low)
    by_low = wide[np.argsort(wide & dtype.type((1 << low) - 1), kind="stable")]
    assert same_bits(read(sorter.runtime, out, n, dtype, [event]), by_low)


def test_cpu_only_runtime(cpu_runtime):
    with pytest.raises(NoDeviceError):
        DeviceSorter(cpu_runtime, np.int32)
    with pytest.raises(NoDeviceError):
        device_sort(np.zeros(3, np.int32), cpu_runtime)


class _FakeDevice:
    """What device_algorithms reads of a device: its type, vendor, platform and (NVIDIA's) compute capability."""

    def __init__(self, kind, vendor, platform="NVIDIA CUDA", major=None):
        self.type, self.vendor = kind, vendor
        self.platform = type("Platform", (), {"name": platform})()
        if major is not None:
            self.compute_capability_major_nv = major


def test_fast_algorithm():
    """The pipeline's device sort: onesweep for 4-byte keys on an NVIDIA GPU of NVIDIA's platform (compute
    capability 7 or later where reported), the device's default otherwise (8-byte keys there; any keys on a CPU
    device, another vendor's GPU, an NVIDIA GPU under PoCL or before Volta)."""
    from hpu.sorting.device import fast_algorithm

    gpu, cpu = cl.device_type.GPU, cl.device_type.CPU
    nvidia, volta = _FakeDevice(gpu, "NVIDIA Corporation"), _FakeDevice(gpu, "NVIDIA Corporation", major=7)
    others = [_FakeDevice(gpu, "Advanced Micro Devices, Inc.", "AMD Accelerated Parallel Processing"),
              _FakeDevice(gpu, "NVIDIA Corporation", "Portable Computing Language"),
              _FakeDevice(gpu, "NVIDIA Corporation", major=6)]
    for dt in (np.int32, np.uint32, np.float32):
        assert fast_algorithm(nvidia, dt) == "onesweep" == fast_algorithm(volta, dt)
        assert all(fast_algorithm(d, dt) == "merge" for d in others)
        assert fast_algorithm(_FakeDevice(cpu, "NVIDIA Corporation"), dt) == "radix"
    for dt in (np.int64, np.uint64, np.float64):
        assert fast_algorithm(nvidia, dt) == "merge"
