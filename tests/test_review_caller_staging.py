"""Review of 9980bb1 (the caller stages beside the pool): failure paths that the caller's own staging share opens.

The caller runs its staging task (:class:`hpu.sorting.pipeline._OnCaller`) only once the device's work is
enqueued; with one piece no pool task stages at all.  Until then every copy up, and everything behind one,
waits for a user event that only the caller can complete.  So:

* a pyopencl copy event (a ``NannyEvent``) freed before the caller stages waits for its copy in its destructor
  holding the GIL: the process hangs for good (an error while a list comprehension collects such events frees
  the ones already enqueued);
* an asynchronous exception (Ctrl-C) can now land in a staging task, which only ever ran on pool threads before;
* a failure of the caller's task is stored in the future itself.

The hangs hold the GIL (or leave a lease's queue waiting on a user event forever), so those tests run the call in a
child process with a deadline: ``faulthandler`` ends a hung child and prints where it hung.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import numpy as np
import pytest
from conftest import same_bits

import hpu
from hpu.sorting import pipeline

cl = pytest.importorskip("pyopencl")

ROOT = Path(hpu.__file__).resolve().parents[1]
HANG_S = 60  # a child still running then is hung (it takes a few seconds with a cold kernel cache, under one warm)

PRELUDE = f"""
import faulthandler
faulthandler.dump_traceback_later({HANG_S}, exit=True)
import threading
import numpy as np
import pyopencl as cl
import hpu
rt = hpu.Runtime(None, profile=hpu.Profile(p=2, g=64, gamma=0.5, cpu_op_seconds=3e-9), threads=2)


def fail_second_copy(up, message):  # the second copy up (up) or down enqueued fails; the copies seen
    real, seen = cl.enqueue_copy, []

    def flaky(queue, dest, src, **kw):
        host, device = (src, dest) if up else (dest, src)
        if isinstance(host, np.ndarray) and isinstance(device, cl.MemoryObjectHolder):
            seen.append(1)
            if len(seen) == 2:
                raise RuntimeError(message)
        return real(queue, dest, src, **kw)

    cl.enqueue_copy = flaky
    return seen
"""


def _child(tmp_path: Path, body: str) -> str:
    """Run PRELUDE + ``body`` in a child on the test device; its output, after asserting that it ended by itself."""
    script = tmp_path / "child.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                              timeout=HANG_S + 40)
    except subprocess.TimeoutExpired as e:  # not even faulthandler could run: the GIL is held for good
        pytest.fail(f"the call hung (GIL held): {e.stdout!r} {e.stderr!r}")
    out = done.stdout + done.stderr
    assert "Timeout (" not in out, f"the call hung:\n{out}"
    assert done.returncode == 0, out
    return out


@pytest.fixture
def device(runtime):
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    return runtime.device


def test_a_failed_enqueue_of_a_copy_down_raises_instead_of_hanging(device, tmp_path):
    """A small sort (result in plain memory: one copy down a piece) of two pieces; the second copy down cannot be
    enqueued.  The error must come out.  device_share collected the copies down in a list comprehension: the error
    freed the first copy's event, whose destructor waits, holding the GIL, for a copy behind the sort behind copies
    up that wait for the caller's staging, which never ran."""
    out = _child(tmp_path, """
        seen = fail_second_copy(False, "injected: the second copy down could not be enqueued")
        a = np.random.default_rng(1).integers(0, 1 << 30, 30_000).astype(np.int32)
        try:
            hpu.hybrid_mergesort(a, strategy="gpu", runtime=rt, options=hpu.PipelineOptions(chunk_bytes=1 << 16))
            print("no error", len(seen))
        except RuntimeError as e:
            print("raised:", e)
    """)
    assert "raised: injected" in out, out


def test_a_failed_enqueue_of_the_values_copy_up_raises_instead_of_hanging(device, tmp_path):
    """A key-value sort of one piece of keys and one of values (one staging task: the caller's); the values' copy
    up cannot be enqueued.  _keyed_share built h2d in a list comprehension: the error freed the keys' copy-up
    event, whose destructor waits, holding the GIL, for a copy that waits for the caller's staging."""
    out = _child(tmp_path, """
        from hpu.sorting.pipeline import fast_keyed_sort
        seen = fail_second_copy(True, "injected: the values' copy up could not be enqueued")
        keys = np.random.default_rng(1).integers(0, 1 << 30, 1000).astype(np.int32)
        try:
            fast_keyed_sort(keys, [np.arange(1000, dtype=np.int64)], rt, gather=True, redo=None,
                            on_device_error="raise")
            print("no error", len(seen))
        except RuntimeError as e:
            print("raised:", e)
    """)
    assert "raised: injected" in out, out


def test_ctrl_c_in_the_callers_staging_interrupts_the_call(device, tmp_path):
    """Ctrl-C lands (on the main thread, where signals land) in the caller's staging task right after it completed
    the first piece's ready event and before it noted the piece staged.  The task ends as the last one, and its
    leftover loop sets that event's status a second time (an OpenCL error), so the second piece's event is never
    completed: quiesce then waits forever for its copy up.  The call must raise KeyboardInterrupt."""
    out = _child(tmp_path, """
        class Interrupted(cl.UserEvent):
            fired = []

            def set_status(self, status):
                super().set_status(status)
                if not Interrupted.fired and threading.current_thread() is threading.main_thread():
                    Interrupted.fired.append(1)
                    raise KeyboardInterrupt  # as a signal's handler would, between two bytecodes

        cl.UserEvent = Interrupted
        a = np.random.default_rng(1).integers(0, 1 << 30, 30_000).astype(np.int32)
        try:
            hpu.hybrid_mergesort(a, strategy="gpu", runtime=rt, options=hpu.PipelineOptions(chunk_bytes=1 << 16))
            print("no error", Interrupted.fired)
        except BaseException as e:
            print("raised:", type(e).__name__)
    """)
    # Before this commit no staging ran on the main thread: no interrupt lands there, and the sort just ends.
    assert "raised: KeyboardInterrupt" in out or "no error []" in out, out


def test_a_failed_caller_future_keeps_nothing_alive():
    """_OnCaller delivers its task's failure "as the pool's futures deliver theirs", but a pool future breaks the
    reference cycle future -> exception -> traceback -> frame -> future (concurrent.futures sets ``self = None``);
    _OnCaller's _run frame keeps ``self``, and (through its f_back) so do its result and exception frames, so what
    the failed task's frames hold (staging memory: the result itself for a device-only sort) stays alive until a
    garbage collection."""
    from hpu.sorting.pipeline import _OnCaller

    class Memory:
        pass

    refs = []

    def stage():
        memory = Memory()  # a local of the failing frame, kept by the exception's traceback
        refs.append(weakref.ref(memory))
        raise MemoryError("no memory to stage")

    gc.collect()
    gc.disable()
    try:
        f = _OnCaller(stage)
        assert isinstance(f.exception(), MemoryError)
        try:
            f.result()
        except MemoryError:
            pass
        del f
        assert refs[0]() is None, "a reference cycle through the stored exception keeps the task's frames alive"
    finally:
        gc.enable()


def test_a_staging_failure_on_the_callers_share_keeps_no_result_alive(fresh, monkeypatch):
    """A device-only sort of one piece (staged by the caller alone) whose staging fails: the CPU redoes it, and the
    result, once dropped, goes back to the host pool at once, as the exchange's failures' results do
    (test_exchange.py).  Here it stays leased until a collection: the _OnCaller's cycle above, and (already before
    this commit) device_share's frame, kept by the exception's traceback, holds the futures (staging_tasks, f) that
    hold the exception.  Staged by the Python pool's tasks, whose copies can fail (the compiled stager's cannot)."""
    def fail(dst, src, stream):
        raise MemoryError("no memory to stage")

    monkeypatch.setattr(pipeline, "copy_into", fail)
    a = np.random.default_rng(5).integers(-2**31, 2**31, 300_000).astype(np.int32)  # one piece, pooled result
    gc.collect()
    gc.disable()
    try:
        out, tr = hpu.hybrid_mergesort(a, strategy="gpu", runtime=fresh, return_trace=True,
                                       options=hpu.PipelineOptions(native_staging=False))
        assert "no memory to stage" in tr.fallback and same_bits(out, np.sort(a, kind="stable"))
        alive = weakref.ref(out)
        del out, tr
        assert alive() is None, "the failed call's result stays leased until a garbage collection"
    finally:
        gc.enable()
