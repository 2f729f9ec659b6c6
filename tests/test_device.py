"""Device choice and the Runtime."""

import numpy as np
import pytest

import hpu
from hpu import NoDeviceError, Runtime, list_devices, select_device


def test_list_devices_describes_each_device():
    """One entry per device pyopencl enumerates (the loop must not pass by being empty), indexed platform:device."""
    cl = pytest.importorskip("pyopencl")
    try:
        want = [(f"{i}:{j}", d) for i, p in enumerate(cl.get_platforms()) for j, d in enumerate(p.get_devices())]
    except cl.Error:  # no ICD loader or platform: pyopencl raises, list_devices finds none
        want = []
    got = list_devices()
    assert len(got) == len(want)
    for d, (index, dev) in zip(got, want):
        assert d.index == index and d.name == dev.name.strip() and d.compute_units == dev.max_compute_units >= 1


def test_cpu_only_spellings():
    for spec in ("none", "cpu-only", "NONE"):
        assert select_device(spec) is None


def test_unknown_device_names_the_available_ones():
    with pytest.raises(ValueError, match="unknown OpenCL device 'zzz'; available devices"):
        select_device("zzz")


def test_pyopencl_ctx_is_honoured(monkeypatch):
    monkeypatch.setenv("PYOPENCL_CTX", "bogus-device")
    with pytest.raises(ValueError, match="PYOPENCL_CTX"):
        select_device()
    if list_devices():
        import pyopencl as cl

        monkeypatch.setenv("PYOPENCL_CTX", "0:0")
        assert select_device() == cl.get_platforms()[0].get_devices()[0]


def test_default_prefers_a_device_when_one_exists(monkeypatch):
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    assert (select_device() is not None) == bool(list_devices())


def test_cpu_only_runtime(caplog):
    with Runtime("none", profile=hpu.reference_profile("hpu1")) as rt:
        assert not rt.has_device and rt.device_name == "CPU only"
        with pytest.raises(NoDeviceError):
            rt.build("__kernel void k() {}")
        assert not rt.supports(np.int32)


def test_runtime_rejects_bad_threads():
    with pytest.raises(ValueError, match="threads"):
        Runtime("none", threads=0)
    from hpu.core.runtime import MAX_THREADS

    for threads in (MAX_THREADS + 1, 10**30):  # accepted before, until a parallel sort fanned out to them all
        with pytest.raises(ValueError, match=f"threads must be at most {MAX_THREADS}"):
            Runtime("none", threads=threads, profile=hpu.Profile(p=2, g=1, gamma=1))
    with Runtime("none", threads=MAX_THREADS, profile=hpu.Profile(p=2, g=1, gamma=1)) as rt:
        assert rt.threads == MAX_THREADS


def test_runtime_profile_forms(tmp_path):
    prof = hpu.Profile(p=3, g=7, gamma=0.25)
    path = prof.save(tmp_path / "p.json")
    with Runtime("none", profile=path) as rt:
        assert rt.profile == prof
    with Runtime("none", profile="hpu2") as rt:
        assert rt.profile.g == 1200
    with pytest.raises(hpu.ProfileError, match="profile file not found"):
        Runtime("none", profile=tmp_path / "nope.json")
    for missing in (tmp_path / "nope", "profiles/h100.profile"):  # a path, not a shipped name
        with pytest.raises(hpu.ProfileError, match="profile file not found"):
            Runtime("none", profile=missing)
    with pytest.raises(TypeError, match="profile must be"):
        Runtime("none", profile=5)
    for empty in ("", "  "):  # not the current directory
        with pytest.raises(ValueError, match="profile is empty"):
            Runtime("none", profile=empty)


def test_a_cached_profile_of_another_thread_count_is_used_with_a_warning(tmp_path, monkeypatch, caplog):
    """The CPU's costs depend on the threads calibrated: a runtime with other threads says so."""
    import hpu.core.runtime as core_runtime

    path = hpu.Profile(p=1, g=1, gamma=1, provenance={"threads": 1}).save(tmp_path / "cached.json")
    monkeypatch.setattr(core_runtime, "default_profile_path", lambda device: path)
    with caplog.at_level("WARNING", logger="hpu"):
        with Runtime("none", threads=1) as rt:
            assert rt.profile.provenance["threads"] == 1
        assert "threads" not in caplog.text
        with Runtime("none", threads=2) as rt:
            assert rt.profile.p == 1
    assert "calibrated with 1 CPU threads, this runtime has 2" in caplog.text
    # The advice replaces no profile (--force would overwrite the cached one that runtimes of 1 thread use).
    assert "--device 'none' --threads 2 --out FILE" in caplog.text and "--force" not in caplog.text


def test_programs_are_built_once(runtime):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    a = runtime.program("calibrate")
    assert runtime.program("calibrate") is a
    assert runtime.program("calibrate", defines={"X": 1}) is not a
    with pytest.raises(FileNotFoundError):
        runtime.program("no_such_kernel")


def test_close_is_idempotent():
    rt = Runtime("none", profile="hpu1")
    rt.close()
    rt.close()
    with pytest.raises(RuntimeError, match="after shutdown|closed"):
        rt.pool.submit(print)


@pytest.mark.parametrize("threads", [True, 2.5, "2", float("nan"), float("inf")])
def test_runtime_threads_must_be_an_integer(threads):
    # True ran one thread, 2.5 two, "2" two; NaN and inf raised errors that did not name threads (OverflowError).
    with pytest.raises(ValueError, match="threads must be an integer >= 1"):
        Runtime("none", threads=threads, profile=hpu.Profile(p=2, g=1, gamma=1))


@pytest.mark.parametrize("limit", [True, 1.5, "4096", float("nan"), float("inf")])
def test_runtime_device_memory_limit_must_be_an_integer(limit):
    with pytest.raises(ValueError, match="device_memory_limit must be an integer >= 1"):
        Runtime("none", threads=1, device_memory_limit=limit, profile=hpu.Profile(p=2, g=1, gamma=1))


@pytest.mark.parametrize("device", ["", "   "])
def test_an_empty_device_string_names_no_device(device):
    # "" is a substring of every device name, so it picked the first device of any kind.
    with pytest.raises(ValueError, match="must name a device"):
        select_device(device)


def test_a_default_made_inside_a_block_is_closed_when_the_block_ends(monkeypatch):
    """The block's runtime closed, default_runtime() makes one; hpu closes it when a block's end leaves it the
    default of no block (it was left open, with its thread pool, and no one held it)."""
    monkeypatch.setenv("PYOPENCL_CTX", "none")  # made fast, without the device
    prof = hpu.Profile(p=2, g=1, gamma=1)
    with Runtime("none", threads=1, profile=prof) as base, Runtime("none", threads=1, profile=prof) as ra, \
            Runtime("none", threads=1, profile=prof) as rb:
        before = hpu.set_default_runtime(base)
        try:
            with hpu.using_runtime(ra):
                ra.close()
                made = hpu.default_runtime()
                assert made not in (ra, base) and not made.closed
            assert made.closed and hpu.default_runtime() is base
            outer = hpu.using_runtime(ra)
            outer.__enter__()
            made = hpu.default_runtime()  # ra is closed
            with hpu.using_runtime(rb):  # begun later, ends later: it was to restore `made`, now base
                assert not made.closed
                outer.__exit__(None, None, None)
                assert made.closed and hpu.default_runtime() is rb
            assert hpu.default_runtime() is base
            hpu.set_default_runtime(None)
            own = hpu.default_runtime()  # made by hpu, then given to a block by the caller: never closed by it
            with hpu.using_runtime(own):
                pass
            assert not own.closed and hpu.default_runtime() is own
            own.close()
        finally:
            hpu.set_default_runtime(before)


def test_using_runtime_blocks_of_two_threads_restore_the_default_in_any_order():
    # Thread A's block begins, then thread B's; A's ends first.  B's runtime must stay the default until B's block
    # ends, and then the default from before both blocks must come back (it was A's runtime: closed, leaked).
    import threading

    prof = hpu.Profile(p=2, g=1, gamma=1)
    with Runtime("none", threads=1, profile=prof) as base, Runtime("none", threads=1, profile=prof) as ra, \
            Runtime("none", threads=1, profile=prof) as rb:
        before = hpu.set_default_runtime(base)
        try:
            a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
            seen = {}

            def thread_a():
                with hpu.using_runtime(ra):
                    a_in.set()
                    b_in.wait(10)
                a_out.set()

            def thread_b():
                a_in.wait(10)
                with hpu.using_runtime(rb):
                    b_in.set()
                    a_out.wait(10)
                    seen["inside"] = hpu.default_runtime()

            ts = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(20)
            assert seen["inside"] is rb
            assert hpu.default_runtime() is base
            with hpu.using_runtime(ra), hpu.using_runtime(rb):  # nested in one thread
                assert hpu.default_runtime() is rb
            assert hpu.default_runtime() is base
            with pytest.raises(TypeError, match="hpu.Runtime"):
                with hpu.using_runtime(None):
                    pass
        finally:
            hpu.set_default_runtime(before)
