"""hybrid_mergesort against numpy.sort(kind="stable"), for every strategy, dtype and forced split."""

import itertools
import threading
import time

import numpy as np
import pytest
from conftest import same_bits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hpu
from hpu import DeviceFailure, hybrid_mergesort
from hpu.core.streaming import native_staging_available
from hpu.sorting.pipeline import wave_merges

DTYPES = [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64]
STRATEGIES = ["cpu", "gpu", "basic", "advanced"]


def _special(draw_kind: str, n: int, dtype, rng) -> np.ndarray:
    dt = np.dtype(dtype)
    if draw_kind == "sorted":
        a = np.sort(rng.integers(0, 1000, n)).astype(dt)
    elif draw_kind == "reversed":
        a = np.sort(rng.integers(0, 1000, n))[::-1].astype(dt)
    elif draw_kind == "equal":
        a = np.full(n, 7, dtype=dt)
    elif draw_kind == "few":
        a = rng.integers(0, 3, n).astype(dt)
    else:
        if dt.kind == "f":
            a = rng.standard_normal(n).astype(dt)
            pool = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=dt)
            mask = rng.random(n) < 0.3
            a[mask] = rng.choice(pool, mask.sum())
        else:
            info = np.iinfo(dt)
            a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    return a


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    mode=st.sampled_from(["fast", "paper"]),
    strategy=st.sampled_from(STRATEGIES + ["auto"]),
    dtype=st.sampled_from(DTYPES),
    n=st.one_of(st.integers(0, 70), st.integers(71, 5000), st.integers(5001, 100_000)),
    kind=st.sampled_from(["random", "sorted", "reversed", "equal", "few"]),
    seed=st.integers(0, 2**32 - 1),
    alpha=st.none() | st.floats(0, 1),
    level_frac=st.none() | st.floats(0, 1),
)
def test_equals_numpy_stable_sort(runtime, mode, strategy, dtype, n, kind, seed, alpha, level_frac):
    rng = np.random.default_rng(seed)
    a = _special(kind, n, dtype, rng)
    before = a.copy()
    kw = {}
    depth = int(np.ceil(np.log2(n))) if n > 1 else 0
    if strategy in ("basic", "advanced") and level_frac is not None:
        kw["transfer_level"] = int(round(level_frac * depth))
    if strategy == "advanced" and alpha is not None:
        kw["alpha"] = alpha
    out = hybrid_mergesort(a, strategy=strategy, mode=mode, runtime=runtime, **kw)
    assert same_bits(out, np.sort(a, kind="stable"))
    assert same_bits(a, before)
    assert out is not a


@given(data=hnp.arrays(st.sampled_from([np.float32, np.float64]), st.integers(0, 300),
                       elements=st.floats(allow_nan=True, allow_infinity=True, width=32)))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_float_edge_values(runtime, data):
    for mode in ("fast", "paper"):
        assert same_bits(hybrid_mergesort(data, runtime=runtime, mode=mode), np.sort(data, kind="stable"))


def test_stability_with_signed_zeros(runtime):
    # -0.0 and +0.0 compare equal: a stable sort keeps their input order.
    a = np.array([0.0, -0.0, 1.0, -0.0, 0.0, -1.0] * 50, dtype=np.float64)
    for s in STRATEGIES:
        for mode in ("fast", "paper"):
            out = hybrid_mergesort(a, strategy=s, mode=mode, runtime=runtime, transfer_level=3, alpha=0.5)
            assert same_bits(out, np.sort(a, kind="stable"))


@pytest.mark.parametrize("mode", ["fast", "paper"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_noncontiguous_and_readonly_input(runtime, strategy, mode):
    base = np.random.default_rng(1).integers(-1000, 1000, 20_001).astype(np.int64)
    view = base[::3]
    view.flags.writeable = False
    snapshot = base.copy()
    out = hybrid_mergesort(view, strategy=strategy, mode=mode, runtime=runtime, transfer_level=4)
    assert same_bits(out, np.sort(view, kind="stable"))
    assert same_bits(base, snapshot)


def test_lists_and_byte_order(runtime):
    assert hybrid_mergesort([3, 1, 2], runtime=runtime).tolist() == [1, 2, 3]
    big = np.array([5, -1, 3], dtype=">i4")
    assert hybrid_mergesort(big, runtime=runtime).tolist() == [-1, 3, 5]


def test_cpu_only_runtime_sorts(cpu_runtime):
    a = np.random.default_rng(2).random(10_000)
    for s in STRATEGIES + ["auto"]:  # device strategies run on the CPU in CPU-only mode
        for mode in ("fast", "paper"):
            out = hybrid_mergesort(a, strategy=s, mode=mode, runtime=cpu_runtime)
            assert same_bits(out, np.sort(a, kind="stable"))


def test_model_may_sort_on_one_cpu_thread(cpu_runtime):
    """A profile that measured one thread faster: the CPU alone sorts on one thread, still exactly numpy's order."""
    sizes = 2.0 ** np.arange(12, 27, 2)
    pool = (1e-4 + 1e-9 * sizes * np.log2(sizes)).tolist()
    merge = (1e-4 + 1e-10 * sizes).tolist()
    fast = {"sizes": sizes.tolist(), "cpu_sort": pool, "cpu_sort_1": [t / 2 for t in pool], "merge2": merge,
            "merge16": merge}  # a CPU-only profile: no device curves
    with hpu.Runtime("none", profile=hpu.Profile(p=2, g=1, gamma=1, curves={"sort": fast}), threads=2) as rt:
        a = np.random.default_rng(4).standard_normal(1 << 19)
        a[::97], a[1::89], a[2::83] = np.nan, 0.0, -0.0
        out, tr = hybrid_mergesort(a, runtime=rt, return_trace=True)
        assert tr.split.strategy == "cpu" and tr.split.cpu_threads == 1
        assert same_bits(out, np.sort(a, kind="stable"))


def test_default_runtime_is_created_and_closed():
    a = np.arange(100, 0, -1, dtype=np.int32)
    assert np.array_equal(hybrid_mergesort(a), np.arange(1, 101, dtype=np.int32))


def test_trace_records_both_units(runtime):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(3).integers(0, 10**6, 1 << 16).astype(np.int32)
    out, tr = hybrid_mergesort(a, strategy="advanced", mode="paper", alpha=0.5, transfer_level=4, runtime=runtime,
                               return_trace=True)
    assert same_bits(out, np.sort(a, kind="stable"))
    assert tr.alpha == 0.5 and tr.transfer_level == 4 and tr.depth == 16
    device_levels = sorted({e.level for e in tr.events if e.unit == "device" and e.kind == "combine"})
    assert device_levels == list(range(4, 16))  # one launch per level of the device share
    cpu_levels = {e.level for e in tr.events if e.unit.startswith("cpu")}
    assert set(range(0, 16)) <= cpu_levels
    assert {e.kind for e in tr.events if e.unit == "bus"} == {"h2d", "d2h"}
    assert sum(e.nbytes for e in tr.events if e.kind == "h2d") == a.nbytes // 2
    assert tr.split is None and "ms" in tr.summary()  # a forced transfer level: no split of the model's ran


@pytest.mark.parametrize("mode,strategy",
                         [("fast", "gpu"), ("fast", "cpu"), ("fast", "keyrange"), ("paper", "advanced")])
def test_a_trace_starts_on_the_callers_clock(runtime, mode, strategy):
    """``Trace.start`` is the caller's ``time.perf_counter`` at the trace's zero: within the call, every event of
    the host's threads (timed on that clock; the device's are mapped onto it) and the wall's end inside it; None for
    a sort of one element."""
    if strategy != "cpu" and not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(4).integers(0, 10**6, 1 << 16).astype(np.int32)
    t0 = time.perf_counter()
    out, tr = hybrid_mergesort(a, mode=mode, strategy=strategy, runtime=runtime, return_trace=True)
    t1 = time.perf_counter()
    assert same_bits(out, np.sort(a, kind="stable"))
    host = [e for e in tr.events if e.unit.startswith("cpu")]
    assert t0 <= tr.start and tr.start + tr.wall <= t1 and host
    assert all(t0 <= tr.start + e.start <= tr.start + e.end <= t1 for e in host)
    assert hybrid_mergesort(a[:1], runtime=runtime, return_trace=True)[1].start is None


@pytest.mark.parametrize("strategy", ["gpu", "advanced", "exchange"])
@pytest.mark.parametrize("n", [50_001, 1 << 19])  # the latter: the result in the pinned pool, copied down into it
def test_fast_trace_records_the_bytes_each_copy_moves(rt, strategy, n):
    a = np.random.default_rng(5).standard_normal(n)
    out, tr = hybrid_mergesort(a, strategy=strategy, alpha=0.25 if strategy == "advanced" else None, runtime=rt,
                               return_trace=True)
    assert same_bits(out, np.sort(a, kind="stable"))
    tr.resolve()
    device_keys = a.size if strategy != "advanced" else a.size - int(tr.alpha * a.size)
    for kind in ("h2d", "d2h"):
        copies = [e for e in tr.events if e.unit.startswith("bus") and e.kind == kind]
        assert copies and sum(e.nbytes for e in copies) == pytest.approx(device_keys * a.itemsize, rel=1e-3)
        assert all(e.nbytes == e.size * a.itemsize for e in copies)


@pytest.mark.parametrize(
    "arg, exc, match",
    [
        (np.zeros((3, 3)), ValueError, "1-D"),
        (np.zeros(3, dtype=complex), TypeError, "unsupported dtype"),
        (np.array(["a", "b"]), TypeError, "unsupported dtype"),
        (np.array([object(), object()]), TypeError, "unsupported dtype"),
        (np.zeros(3, dtype=[("x", "i4")]), TypeError, "unsupported dtype"),
        (np.zeros(3, dtype=np.int16), TypeError, "unsupported dtype"),
        (np.zeros(3, dtype=bool), TypeError, "unsupported dtype"),
    ],
)
def test_bad_input(runtime, arg, exc, match):
    with pytest.raises(exc, match=match):
        hybrid_mergesort(arg, runtime=runtime)


def test_bad_options(runtime):
    a = np.arange(64, dtype=np.int32)
    with pytest.raises(ValueError, match="alpha"):
        hybrid_mergesort(a, alpha=1.5, runtime=runtime)
    with pytest.raises(ValueError, match="transfer_level"):
        hybrid_mergesort(a, strategy="basic", transfer_level=7, runtime=runtime)
    with pytest.raises(ValueError, match="strategy"):
        hybrid_mergesort(a, strategy="fastest", runtime=runtime)
    with pytest.raises(ValueError, match="mode"):
        hybrid_mergesort(a, mode="slow", runtime=runtime)
    with pytest.raises(ValueError, match="transfer_level"):
        hybrid_mergesort(a, transfer_level=-1, runtime=runtime)
    for field, bad in (("chunk_bytes", float("inf")), ("wave_pieces", float("inf")), ("staging_tasks", None),
                       ("staging_slices", 0), ("staging_slices", 2.0),
                       ("staging_tasks", float("nan")), ("chunk_bytes", 1.5), ("chunk_bytes", True),
                       ("chunk_bytes", "1")):
        with pytest.raises(ValueError, match=f"{field} must be an integer >= 1"):
            hpu.PipelineOptions(**{field: bad})
    opts = hpu.PipelineOptions(chunk_bytes=np.int64(4096), staging_tasks=np.int32(3))
    assert type(opts.chunk_bytes) is int and opts == hpu.PipelineOptions(chunk_bytes=4096, staging_tasks=3)


def test_pipeline_piece_sizes():
    """Pieces of 4 MiB by default, 8 MiB for key-value sorts, an explicit size for both; a size below one byte
    refused."""
    assert hpu.PipelineOptions().piece_bytes() == 4 << 20
    assert hpu.PipelineOptions().piece_bytes(values=True) == 8 << 20
    assert hpu.PipelineOptions(chunk_bytes=1000).piece_bytes(values=True) == 1000
    with pytest.raises(ValueError, match="chunk_bytes"):
        hpu.PipelineOptions(chunk_bytes=0)


def test_pipeline_staging_tasks(runtime):
    """At most 8 staging tasks by default, or as many as asked; one task stages the pieces one by one, so the device
    sorts each piece as a wave of its own."""
    assert hpu.PipelineOptions().staging_tasks == 8
    with pytest.raises(ValueError, match="staging_tasks"):
        hpu.PipelineOptions(staging_tasks=0)
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(2).integers(-50, 50, 9000).astype(np.int32)
    out, tr = hybrid_mergesort(a, strategy="gpu", runtime=runtime, return_trace=True,
                               options=hpu.PipelineOptions(chunk_bytes=4096, device_sort="merge", staging_tasks=1))
    assert same_bits(out, np.sort(a, kind="stable"))
    assert [e.kind for e in tr.events if e.unit == "device"].count("sort") == -(-a.nbytes // 4096)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("chunk_bytes, tasks", [(None, 8), (4096, 3)])
def test_the_caller_stages_beside_the_pool(runtime, chunk_bytes, tasks, native):
    """The calling thread is one of the staging tasks: a sort of one piece is staged on it alone (no pool task to
    wake), and of many pieces every piece is staged once, by the caller or a task of the pool (the compiled
    stager's threads with ``native_staging`` where it was built, else the runtime's)."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = np.random.default_rng(3).integers(-2**31, 2**31, 20_000).astype(np.int32)
    out, tr = hybrid_mergesort(a, strategy="gpu", runtime=runtime, return_trace=True,
                               options=hpu.PipelineOptions(chunk_bytes=chunk_bytes, staging_tasks=tasks,
                                                           native_staging=native))
    assert same_bits(out, np.sort(a, kind="stable"))
    # Copies out of the staging memory into a result that is not pinned come after the staging, behind touches.
    copies_out = next((i for i, e in enumerate(tr.events) if e.kind == "touch"), len(tr.events))
    staged = [e for e in tr.events[:copies_out] if e.kind == "stage"]
    assert sum(e.count * e.size for e in staged) == a.size
    units = {e.unit for e in staged}
    caller = f"cpu:{threading.current_thread().name}"
    if chunk_bytes is None:  # one piece
        assert units == {caller}
    elif native and native_staging_available():
        assert len(units - {caller}) <= tasks - 1 and all(u.startswith("cpu:hpu-stage_") for u in units - {caller})
    else:
        assert units <= {caller} | {f"cpu:{t.name}" for t in threading.enumerate() if t.name.startswith("hpu-cpu")}


def test_a_future_run_on_its_caller():
    from hpu.sorting.pipeline import _OnCaller

    calls = []
    f = _OnCaller(lambda: calls.append(threading.current_thread()) or 7)
    assert not calls and not f.done()
    assert f.result() == 7 and f.result() == 7 and f.exception() is None
    assert calls == [threading.current_thread()]
    g = _OnCaller(lambda: 1 // 0)
    assert isinstance(g.exception(), ZeroDivisionError)
    with pytest.raises(ZeroDivisionError):
        g.result()


@pytest.mark.parametrize("strategy", ["gpu", "basic", "advanced"])
def test_injected_device_failure(runtime, monkeypatch, strategy):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    import hpu.dc.executor as ex

    real = ex._device_share

    def broken(lease, plan, work, y, first, last, rec):
        real(lease, plan, work, y, first, last, rec)
        seg = plan.level(y).size
        work[first * seg : last * seg] = 12345  # the device wrote garbage, then the run "failed"
        raise DeviceFailure("injected: device lost")

    monkeypatch.setattr(ex, "_device_share", broken)
    a = np.random.default_rng(4).integers(0, 1000, 30_000).astype(np.int32)
    before = a.copy()
    out, tr = hybrid_mergesort(a, strategy=strategy, mode="paper", transfer_level=5, alpha=0.25, runtime=runtime,
                               return_trace=True)
    assert same_bits(out, np.sort(a, kind="stable"))
    assert "injected" in tr.fallback
    with pytest.raises(DeviceFailure, match="injected"):
        hybrid_mergesort(a, strategy=strategy, mode="paper", transfer_level=5, runtime=runtime,
                         on_device_error="raise")
    assert same_bits(a, before)


@pytest.mark.parametrize("n", [40_000, 1 << 19])  # the latter: results in the pinned pool, the device writes into them
@pytest.mark.parametrize("strategy", ["gpu", "basic", "advanced"])
def test_injected_device_failure_fast_mode(runtime, monkeypatch, strategy, n):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    import hpu.sorting.pipeline as fm

    real = fm.device_share

    def broken(rt, lease, src, t, rec, dst, options):
        runs = real(rt, lease, src, t, rec, dst, options)
        for r in runs:
            r[:] = 999  # the device wrote garbage into the staging buffer or the result, then "failed"
        raise DeviceFailure("injected: device lost")

    monkeypatch.setattr(fm, "device_share", broken)
    a = np.random.default_rng(6).standard_normal(n).astype(np.float32)
    before = a.copy()
    split = {} if strategy == "gpu" else {"transfer_level": 2, "alpha": 0.25}
    out, tr = hybrid_mergesort(a, strategy=strategy, runtime=runtime, return_trace=True, **split)
    assert same_bits(out, np.sort(a, kind="stable")) and "injected" in tr.fallback
    with pytest.raises(DeviceFailure, match="injected"):
        hybrid_mergesort(a, strategy=strategy, runtime=runtime, on_device_error="raise")
    assert same_bits(a, before)


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
@pytest.mark.parametrize("n", [9_000, 50_001])
@pytest.mark.parametrize("device_sort", ["merge", "tile-radix"])
def test_device_sort_in_waves(runtime, monkeypatch, dtype, n, device_sort):
    """Small pieces: the device sorts many staging waves as they arrive and merges their runs (odd counts too)."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = _special("random", n, dtype, np.random.default_rng(n))
    out, tr = hybrid_mergesort(a, strategy="gpu", runtime=runtime, return_trace=True,
                               options=hpu.PipelineOptions(chunk_bytes=4096, device_sort=device_sort))
    assert same_bits(out, np.sort(a, kind="stable"))
    steps = [e.kind for e in tr.events if e.unit == "device"]
    pieces = -(-n * a.itemsize // 4096)
    tasks = min(runtime.threads, (pieces + 1) // 2, hpu.PipelineOptions().staging_tasks)
    waves = -(-pieces // tasks)  # as pipeline.stage_pieces shares them out
    assert steps.count("sort") == waves >= 2 and steps[-1] == "merge"
    # The radix sort (the default on CPU devices) takes the staged keys in one sort, without waves.
    out, tr = hybrid_mergesort(a, strategy="gpu", runtime=runtime, return_trace=True,
                               options=hpu.PipelineOptions(chunk_bytes=4096, device_sort="radix"))
    assert same_bits(out, np.sort(a, kind="stable"))
    assert [e.kind for e in tr.events if e.unit == "device"] == ["sort"]


def _replay_wave_merges(sizes: list[int]) -> list[tuple[int, int, int, int]]:
    """``wave_merges(sizes)``'s merges, checked against a replay: every merge joins two adjacent runs present at that
    point, no earlier than its last wave is sorted, in order; one run of every wave is left; each wave's depth counts
    the merges that take it in."""
    waves = len(sizes)
    merges, depth = wave_merges(sizes)
    runs, arrived, last_after = {}, 0, 0  # runs: start wave -> end wave
    for i, j, k, after in merges:
        assert after >= last_after and after >= k - 1
        last_after = after
        while arrived <= after:  # the waves sorted by then
            runs[arrived], arrived = arrived + 1, arrived + 1
        assert runs.pop(i) == j and runs.pop(j) == k
        runs[i] = k
    if not merges:
        runs = {w: w + 1 for w in range(waves)}
    assert runs == ({0: waves} if waves else {})
    assert depth == [sum(i <= w < k for i, _, k, _ in merges) for w in range(waves)]
    return merges


@pytest.mark.parametrize("waves", range(1, 40))
def test_wave_merges_join_adjacent_runs_as_soon_as_they_are_sorted(waves):
    """Waves of one size: a binary counter; after the last wave at most about log2(waves) merges remain."""
    merges = _replay_wave_merges([3] * waves)
    assert sum(after == waves - 1 for *_, after in merges) <= int(np.log2(waves)) + 1 if waves > 1 else not merges
    assert [(i, j, k) for i, j, k, _ in merges if k - i == 2][:2] == ([(0, 1, 2), (2, 3, 4)][:waves // 2])


@given(st.lists(st.integers(1, 9), max_size=30))
@settings(max_examples=200, deadline=None)
def test_wave_merges_of_waves_of_any_sizes(sizes):
    """Waves of other sizes (a last wave of the pieces left): adjacent runs, each merge at the earliest wave it can
    follow; two runs are merged before the next wave exactly when the later holds at least as many pieces."""
    merges = _replay_wave_merges(sizes)
    pieces = [0, *itertools.accumulate(sizes)]
    runs: dict[int, int] = {}
    for w in range(len(sizes) - 1):  # the runs once wave w's merges are enqueued
        runs[w] = w + 1
        for i, j, k, after in merges:
            if after == w:
                assert pieces[k] - pieces[j] >= pieces[j] - pieces[i]
                del runs[j]
                runs[i] = k
        *_, (a, b), (c, d) = [(0, 0), (0, 0), *sorted(runs.items())]
        assert not (a < b and pieces[d] - pieces[c] >= pieces[b] - pieces[a]), "two runs left unmerged"


@given(st.integers(0, 200), st.integers(1, 16), st.sampled_from([None, 1, 3, 8]), st.floats(0.01, 0.5))
def test_pipeline_waves(pieces, tasks, wave_pieces, last_wave):
    """Waves of ``wave_pieces`` (or ``tasks``) pieces in order, every piece in one; the last two waves' pieces shared
    out again so that the last holds ``floor(last_wave * k)`` of their ``k`` (at least one, no more than before);
    0.5 leaves equal waves as they are."""
    opts = hpu.PipelineOptions(wave_pieces=wave_pieces, last_wave=last_wave)
    per = wave_pieces or tasks
    even = [per] * (pieces // per) + [pieces % per] * bool(pieces % per)
    sizes = opts.waves(pieces, tasks)
    assert sum(sizes) == pieces and all(w >= 1 for w in sizes) and len(sizes) == len(even)
    assert sizes[:-2] == even[:-2]
    if len(sizes) >= 2:
        k = even[-1] + even[-2]
        assert sizes[-1] == min(even[-1], max(1, int(last_wave * k))) and sizes[-2] == k - sizes[-1]
    assert hpu.PipelineOptions(wave_pieces=wave_pieces, last_wave=0.5).waves(pieces, tasks) == even


def test_pipeline_last_wave_refused():
    """``last_wave`` outside (0, 0.5], not a number, or a bool raises ValueError; numpy numbers are taken."""
    for bad in (0, 0.51, -0.1, float("nan"), True, "0.25", None):
        with pytest.raises(ValueError, match="last_wave"):
            hpu.PipelineOptions(last_wave=bad)
    assert hpu.PipelineOptions(last_wave=np.float32(0.5)).last_wave == 0.5
    assert hpu.PipelineOptions().waves(16, 8) == [12, 4]


@pytest.mark.parametrize("wave_pieces", [1, 2, 3, 5])
@pytest.mark.parametrize("device_sort", ["merge", "tile-radix"])
def test_device_sort_in_waves_of_any_size(runtime, wave_pieces, device_sort):
    """The waves' runs merged as they come: right for wave counts that are not powers of two; one merge fewer than
    the waves."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = _special("random", 40_000, np.int32, np.random.default_rng(wave_pieces))
    opts = hpu.PipelineOptions(chunk_bytes=4096, device_sort=device_sort, wave_pieces=wave_pieces)
    out, tr = hybrid_mergesort(a, strategy="gpu", runtime=runtime, return_trace=True, options=opts)
    assert same_bits(out, np.sort(a, kind="stable"))
    steps = [e.kind for e in tr.events if e.unit == "device"]
    waves = -(-(-(-a.nbytes // 4096)) // wave_pieces)
    assert steps.count("sort") == waves and steps.count("merge") == waves - 1
    with pytest.raises(ValueError, match="wave_pieces"):
        hpu.PipelineOptions(wave_pieces=0)


def test_failed_staging_raises_and_leaves_input(runtime, monkeypatch):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    import hpu.sorting.pipeline as fm

    small = hpu.PipelineOptions(chunk_bytes=4096)
    real, calls = np.copyto, []

    def copyto(dst, src, *args, **kw):  # the third staged piece fails
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError("injected: staging failed")
        return real(dst, src, *args, **kw)

    monkeypatch.setattr(fm.np, "copyto", copyto)
    a = np.random.default_rng(8).standard_normal(20_000)
    before = a.copy()
    with pytest.raises(DeviceFailure, match="injected"):
        hybrid_mergesort(a, strategy="gpu", runtime=runtime, on_device_error="raise", options=small)
    monkeypatch.setattr(fm.np, "copyto", real)
    assert same_bits(a, before)
    assert same_bits(hybrid_mergesort(a, strategy="gpu", runtime=runtime), np.sort(a, kind="stable"))


def test_device_build_failure_falls_back(runtime, monkeypatch):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    import pyopencl as cl

    def no_build(*a, **k):
        raise cl.MemoryError("injected: out of resources")

    with hpu.Runtime(runtime.device, profile=runtime.profile) as rt:
        monkeypatch.setattr(rt, "build", no_build)
        a = np.random.default_rng(5).random(5000).astype(np.float32)
        for mode in ("fast", "paper"):
            out, tr = hybrid_mergesort(a, strategy="gpu", mode=mode, runtime=rt, return_trace=True)
            assert same_bits(out, np.sort(a, kind="stable")) and tr.fallback


@pytest.mark.parametrize("mode", ["fast", "paper"])
def test_alpha_does_not_move_work_of_a_single_unit_strategy(rt, mode):
    """``alpha`` is the advanced split's CPU share: ``strategy="cpu"`` never uses the device and ``"gpu"`` never
    leaves the device's share to the CPU, whatever ``alpha`` says (as in paper mode)."""
    a = np.random.default_rng(9).standard_normal(20_000)
    for strategy, alpha in (("cpu", 0.0), ("cpu", 0.5), ("gpu", 1.0), ("gpu", 0.5), ("basic", 1.0)):
        out, tr = hybrid_mergesort(a, strategy=strategy, alpha=alpha, mode=mode, runtime=rt, return_trace=True)
        assert same_bits(out, np.sort(a, kind="stable"))
        on_device = any(e.unit in ("device", "bus") for e in tr.events)
        assert on_device == (strategy != "cpu"), (strategy, alpha)
        assert tr.alpha == (1.0 if strategy == "cpu" else 0.0), (strategy, alpha)


def _cpu_only_curves() -> dict:
    """Sort curves as a calibration without a device measures them: no ``"transfer"`` nor ``"device_sort"``."""
    sizes = 2.0 ** np.arange(12, 27, 2)
    pool = (1e-4 + 1e-9 * sizes * np.log2(sizes)).tolist()
    merge = (1e-4 + 1e-10 * sizes).tolist()
    return {"sizes": sizes.tolist(), "cpu_sort": pool, "merge2": merge, "merge16": merge}


@pytest.mark.parametrize("strategy", ["auto", "cpu", "gpu", "basic", "advanced", "keyrange", "exchange"])
def test_fast_split_without_a_usable_device_is_the_cpus(strategy):
    """``device=False`` (no usable device): every strategy is predicted as the CPU alone, as hybrid_mergesort runs
    it, its time the CPU's sort curve."""
    from hpu.sorting.costs import fast_cost, fast_split

    prof = hpu.Profile(p=2, g=1, gamma=1, curves={"sort": _cpu_only_curves()})
    for n in (1, 1000, 2**20):
        sp = fast_split(n, prof, strategy=strategy, device=False)
        assert sp.strategy == "cpu" and sp.alpha == 1.0 and sp.gpu_work_fraction == 0.0
        assert sp.predicted_time == pytest.approx(fast_cost(prof, "cpu_sort", n))


def test_a_profile_without_device_curves_sorts_on_the_cpu(rt):
    """A profile calibrated without a device, on a runtime with one: ``"auto"`` and ``"cpu"`` sort on the CPU (the
    device's speed is unknown), a forced device split is refused naming the missing curves."""
    from hpu.sorting.costs import fast_split

    prof = hpu.Profile(p=2, g=1, gamma=1, curves={"sort": _cpu_only_curves()})
    assert fast_split(2**20, prof).strategy == "cpu"
    with pytest.raises(ValueError, match="device_sort"):
        fast_split(2**20, prof, strategy="gpu")
    with hpu.Runtime(rt.device, profile=prof, threads=2) as r:
        a = np.random.default_rng(10).standard_normal(1 << 16)
        for strategy in ("auto", "cpu"):
            out, tr = hybrid_mergesort(a, strategy=strategy, runtime=r, return_trace=True)
            assert same_bits(out, np.sort(a, kind="stable")) and tr.strategy == "cpu"


def _device_curves() -> dict:
    """A calibrated profile's sort curves with a device as fast as the CPU (int32 keys)."""
    sizes = 2.0 ** np.arange(12, 27, 2)
    curves = _cpu_only_curves()
    return {**curves, "device_sort": curves["cpu_sort"], "transfer": (2e-4 + 4e-10 * sizes).tolist()}


@pytest.mark.parametrize("curves", [None, "device"])
def test_planned_strategy_is_the_strategy_that_runs(rt, curves):
    """planned_strategy names the strategy hybrid_mergesort's trace records, also where the device cannot hold its
    share (a position split or exchange then runs as key ranges) and for n <= 1 (the CPU's copy)."""
    prof = rt.profile if curves is None else rt.profile.replace(curves={"sort": _device_curves()})
    with hpu.Runtime(rt.device, profile=prof, threads=2, device_memory_limit=3 * 8 * 5000) as r:
        for n in (0, 1, 3000, 30_000):
            a = np.random.default_rng(n).standard_normal(n)
            for strategy in ("auto", "cpu", "gpu", "basic", "advanced", "keyrange", "exchange"):
                out, tr = hybrid_mergesort(a, strategy=strategy, runtime=r, return_trace=True)
                assert same_bits(out, np.sort(a, kind="stable"))
                assert hpu.sorting.planned_strategy(n, a.dtype, r, strategy) == tr.strategy, (n, strategy)
        with pytest.raises(ValueError, match="strategy"):
            hpu.sorting.planned_strategy(100, np.float64, r, "fastest")


def test_keyrange_split_refuses_shares_or_capacities_of_another_length():
    """One share per unit (the CPU, then each device) and one capacity per device; others are refused, not
    truncated to the shorter list."""
    from hpu.sorting.costs import keyrange_split

    prof = hpu.Profile(p=2, g=1, gamma=1, curves={"sort": _device_curves()})
    assert keyrange_split(2**20, prof, [prof, prof], shares=(0.5, 0.25, 0.25)).shares == (0.5, 0.25, 0.25)
    with pytest.raises(ValueError, match="shares"):
        keyrange_split(2**20, prof, [prof, prof], shares=(0.5, 0.5))
    with pytest.raises(ValueError, match="capacity"):
        keyrange_split(2**20, prof, [prof, prof], capacity=[2**19])


@pytest.mark.parametrize("strategy, alpha", [("advanced", None), ("advanced", 0.3), ("basic", None)])
def test_paper_mode_runs_the_models_split_of_its_runtimes_profile_every_call(runtime, strategy, alpha):
    """Paper mode's split (memoised per runtime and profile) is the model's for the padded size and the data's
    transfer cost, on the first call and on the calls that find it cached; the result equals numpy's."""
    if not runtime.has_device:
        pytest.skip("paper mode's device strategies need an OpenCL device")
    n, padded = 3000, 4096
    a = np.random.default_rng(5).integers(-1000, 1000, n).astype(np.int64)
    model = {"basic": hpu.basic_split, "advanced": hpu.advanced_split}[strategy]
    kw = {} if alpha is None else {"alpha": alpha}
    expected = model(hpu.Recurrence(2, 2, 1), padded, runtime.profile, data_bytes=padded * 8, **kw)
    for _ in range(2):
        out, trace = hybrid_mergesort(a, mode="paper", strategy=strategy, runtime=runtime, return_trace=True, **kw)
        assert trace.split == expected and trace.transfer_level == expected.transfer_level
        assert same_bits(out, np.sort(a, kind="stable"))
