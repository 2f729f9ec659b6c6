"""The runtime and host-memory review's findings: threads kept, a hang after fork, labels and arguments."""

import gc
import os
import threading

import numpy as np
import pytest
from conftest import raises_closed_in_a_fork

import hpu

PROFILE = hpu.Profile(p=2, g=64, gamma=0.5)


def _pool_threads() -> int:
    return sum(t.name.startswith("hpu-cpu") for t in threading.enumerate())


def test_a_runtime_dropped_without_close_lets_its_threads_go():
    """Each worker kept its initializer, a bound method of the pool, for life: the pool of a runtime dropped
    without close() was never collected, and its threads stayed (3, 5, 7 after three runtimes)."""
    x = np.arange(1 << 16, dtype=np.int32)[::-1].copy()
    before = _pool_threads()
    for _ in range(3):
        rt = hpu.Runtime("none", threads=2, profile=PROFILE)
        assert np.array_equal(hpu.sort(x, runtime=rt, alpha=1.0), np.sort(x))  # its pool's threads at work
        del rt
        gc.collect()
    for _ in range(50):  # the workers end once they see the pool gone
        if _pool_threads() <= before:
            break
        threading.Event().wait(0.1)
    assert _pool_threads() <= before


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_empty_pinned_after_fork_raises_in_the_child():
    """The child hung in clEnqueueMapBuffer on the parent's context; now RuntimeClosedError, as every call."""
    rt = hpu.Runtime()
    hpu.sort(np.arange(1 << 16, dtype=np.int32), runtime=rt)
    assert raises_closed_in_a_fork(lambda: rt.empty_pinned(1 << 22, np.int32))
    assert rt.empty_pinned(8, np.int32).shape == (8,)
    rt.close()


@pytest.mark.parametrize("shape, error", [(2.5, TypeError), ("10", TypeError), (True, TypeError),
                                          ((3, 2.0), TypeError), ((1 << 40, 1 << 40), ValueError),
                                          ((-1,), ValueError)])
def test_empty_pinned_takes_shapes_as_numpy_empty_does(shape, error):
    """2.5 gave shape (2,), "10" (10,), True (1,); numpy.empty refuses them.  (2^40, 2^40) wrapped to 0 elements
    in an int64 product, and a product wrapping to a large count would have pinned that much first."""
    if error is TypeError:  # the reference
        with pytest.raises(TypeError):
            np.empty(shape)
    with hpu.Runtime("none") as rt:
        with pytest.raises(error):
            rt.empty_pinned(shape, np.int32)
        assert rt.empty_pinned(np.int64(5), np.int32).shape == (5,)


def test_device_type_names_the_type_alone():
    """pyopencl's to_string named ALL (0xFFFFFFFF) for every device: 'ALL | CPU'."""
    for info in hpu.list_devices():
        names = info.type.split(" | ")
        assert "ALL" not in names and set(names) <= {"DEFAULT", "CPU", "GPU", "ACCELERATOR", "CUSTOM"}


@pytest.mark.parametrize("kw, error, name", [
    (dict(host_pool_bytes=-1), ValueError, "host_pool_bytes"),
    (dict(host_pool_bytes=1.5), ValueError, "host_pool_bytes"),
    (dict(host_pool_bytes="x"), ValueError, "host_pool_bytes"),
    (dict(max_idle_leases=-1), ValueError, "max_idle_leases"),
    (dict(max_idle_leases=2.7), ValueError, "max_idle_leases"),
    (dict(context=3), TypeError, "context"),
])
def test_runtime_arguments_are_checked_by_name(kw, error, name):
    """host_pool_bytes=-1 was refused as "max_bytes", 1.5 taken as 1; max_idle_leases=-1 and 2.7 taken as 0 and 2;
    context=3 an AttributeError from inside."""
    if "context" in kw and not hpu.list_devices():
        pytest.skip("no OpenCL device")
    with pytest.raises(error, match=name):
        hpu.Runtime(**kw)


def test_close_inside_a_call_of_its_own_thread_lets_the_call_finish():
    """As call() documents: its nested calls run once close() has been called (was: the pool shut down under
    them, "cannot schedule new futures after shutdown"), and the call's end releases everything."""
    rt = hpu.Runtime("none", profile=PROFILE, threads=2)
    x = np.arange(1 << 16, dtype=np.int32)[::-1].copy()
    with rt.call():
        rt.close()
        assert rt.closed
        assert np.array_equal(hpu.sort(x, runtime=rt, alpha=1.0), np.sort(x))
    with pytest.raises(hpu.RuntimeClosedError):
        hpu.sort(x, runtime=rt)
    rt.close()  # idempotent
    assert rt.host_pool.total_bytes == 0
