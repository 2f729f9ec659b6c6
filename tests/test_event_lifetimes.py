"""The events of pyopencl's copies between host memory and a buffer live until their copies have ended.

``cl.enqueue_copy`` with host memory returns a ``NannyEvent``; freed before its copy ends, pyopencl waits for the
copy in the event's destructor while holding the GIL (``wait_during_cleanup_without_releasing_the_gil``): the copy
turns synchronous and every other Python thread (staging tasks, other devices' threads, the CPU's searches) stands
still until it ends.  :class:`CopyWatch` wraps ``pyopencl.enqueue_copy`` (every module of hpu calls it as
``cl.enqueue_copy``) and notes each non-blocking host copy whose event dies before the copy completed: it hangs a
sentinel on the event's ``__dict__``, which nanobind clears before it runs the C++ destructor (and its wait), so the
sentinel sees the copy's status as it was when the event was let go.  Each test runs a code path under the watch,
checks its result against numpy's, and asserts that no such event died early.

Each watched copy is held back :data:`HOLD` seconds behind a user event, so that an event freed right after its
enqueue is caught on any device.  An event freed while its copy still waits for something only a Python thread can
complete (a staging task's ready event) deadlocks outright, with or without the watch: such a regression hangs the
test instead of failing it.
"""

from __future__ import annotations

import concurrent.futures
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import same_bits, stable_rows_into
from test_argsort import make

import hpu
from hpu import array_sum_spec, execute
from hpu.sorting.exchange import exchange_sort
from hpu.sorting.keyrange import keyrange_sort
from hpu.sorting.pipeline import fast_keyed_sort, fast_row_sort, fast_sort
from hpu.tabu import tabu_search, tabu_search_many

cl = pytest.importorskip("pyopencl")

COMPLETE = cl.command_execution_status.COMPLETE
#: Seconds each watched copy is held back (behind a user event) after it is enqueued: an event freed sooner is
#: always caught (its copy cannot have ended), whatever the device's speed.
HOLD = 0.01


class _Gate:
    """A user event a watched copy waits for: completed ``HOLD`` after the copy was enqueued, or at once when a
    watched event dies before its copy ended (pyopencl's destructor then waits for the copy holding the GIL, and the
    thread that opens the gates could not run: every gate is opened, as the copy may queue behind others)."""

    def __init__(self, context):
        self.event, self.lock, self.open = cl.UserEvent(context), threading.Lock(), False

    def release(self) -> None:
        with self.lock:
            if not self.open:
                self.open = True
                self.event.set_status(COMPLETE)


class _Sentinel:
    """Hung on a copy's event: when the event dies, notes the copy's status then (a plain handle of the same
    ``cl_event``, whose own death waits for nothing) and opens the copy's gate."""

    def __init__(self, watch: CopyWatch, plain: cl.Event, gate: _Gate, site: str):
        self.watch, self.plain, self.gate, self.site = watch, plain, gate, site

    def __del__(self) -> None:
        try:
            status = self.plain.command_execution_status
        except Exception as e:  # pragma: no cover - a dead context
            status = repr(e)
        if status == COMPLETE:
            self.gate.release()
        else:
            self.watch.release_all()
        with self.watch.lock:
            self.watch.died += 1
            if status != COMPLETE:
                self.watch.early.append((self.site, status))


class CopyWatch:
    """``pyopencl.enqueue_copy`` that watches every non-blocking copy from or into host memory (a ``NannyEvent``):
    ``early`` lists ``(call site, status)`` of each whose event died before its copy completed.  Each such copy is
    held back ``HOLD`` seconds (a thread opens its gate; a GIL-releasing wait lets it run), so that an event freed
    right after its enqueue is caught even on a fast device."""

    def __init__(self, real):
        self.real = real
        self.lock = threading.RLock()  # a sentinel may run in a collection while its thread holds it
        self.watched = self.died = 0
        self.early: list[tuple[str, object]] = []
        self.pending: queue.Queue = queue.Queue()
        self.gates: set[_Gate] = set()  # not yet opened
        self.opener = threading.Thread(target=self._open_gates, name="copy-watch", daemon=True)
        self.opener.start()

    def _open_gates(self) -> None:
        while (item := self.pending.get()) is not None:
            deadline, gate = item  # in order: one delay for all
            time.sleep(max(0.0, deadline - time.monotonic()))
            gate.release()
            with self.lock:
                self.gates.discard(gate)

    def release_all(self) -> None:
        with self.lock:
            gates, self.gates = self.gates, set()
        for gate in gates:
            gate.release()

    def close(self) -> None:
        self.pending.put(None)
        self.opener.join()

    def __call__(self, cq, dest, src, **kwargs):
        if kwargs.get("is_blocking", True) is not False:
            return self.real(cq, dest, src, **kwargs)
        gate = _Gate(cq.context)
        ev = self.real(cq, dest, src, **{**kwargs, "wait_for": [*(kwargs.get("wait_for") or []), gate.event]})
        if not isinstance(ev, cl.NannyEvent):  # between buffers: its event's death waits for nothing
            gate.release()
            return ev
        frame = sys._getframe(1)
        site = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
        ev._lifetime_sentinel = _Sentinel(self, cl.Event.from_int_ptr(ev.int_ptr), gate, site)
        with self.lock:
            self.watched += 1
            self.gates.add(gate)
        self.pending.put((time.monotonic() + HOLD, gate))
        return ev

    def check(self) -> None:
        assert self.watched > 0, "the path made no non-blocking host copy: nothing was checked"
        assert not self.early, (f"copy events freed before their copies ended (pyopencl then waits holding the GIL): "
                                f"{self.early}")


@pytest.fixture
def watch(monkeypatch):
    w = CopyWatch(cl.enqueue_copy)
    monkeypatch.setattr(cl, "enqueue_copy", w)
    yield w
    w.close()


# -- the watch itself ------------------------------------------------------------------------------------------------

def test_the_watch_sees_a_copy_event_freed_too_early(fresh, watch):
    """A copy whose event is discarded is caught; the same copy kept until waited for is not."""
    q = cl.CommandQueue(fresh.context, fresh.device)
    buf = cl.Buffer(fresh.context, cl.mem_flags.READ_WRITE, 8 * 64)
    host = np.zeros(64, np.int64)
    cl.enqueue_copy(q, host, buf, is_blocking=False)  # discarded: pyopencl waits for it right here
    assert watch.died == 1 and len(watch.early) == 1 and watch.early[0][0].startswith(Path(__file__).name + ":")
    watch.early.clear()
    ev = cl.enqueue_copy(q, host, buf, is_blocking=False)
    cl.wait_for_events([ev])
    del ev
    cl.enqueue_copy(q, buf, host, is_blocking=True)  # not watched: complete when it returns
    assert watch.died == 2 and watch.early == [] and watch.watched == 2
    watch.check()


# -- the tabu search: a device block, and a batch of searches beside the CPU's ---------------------------------------

def _qap():
    from test_tabu_resident import PROBLEMS

    return PROBLEMS["qap"]()


@pytest.mark.parametrize("level", [2, 0], ids=["two-kernels", "one-work-group"])
@pytest.mark.parametrize("trace", [False, True])
def test_resident_blocks_keep_their_copy_events(fresh, watch, level, trace):
    """``Evaluator.run_block``'s copies of the control block (up and down) lived only as long as the recorder kept
    them: without a trace both were freed at once, and the one down waited for the whole block holding the GIL."""
    from test_tabu_resident import same

    problem = _qap()
    kw = dict(iterations=300, tenure=7, seed=3, runtime=fresh, strategy="gpu", transfer_level=level)
    res = tabu_search(problem, block_iterations=64, trace=trace, **kw)
    assert res.block_iterations == 64 and res.fallback == ""
    watch.check()
    same(res, tabu_search(problem, block_iterations=1, **kw))


def test_a_batch_of_searches_keeps_its_copy_events(fresh, watch):
    """``tabu_search_many``'s batch read its control blocks back through an event freed at once: each launch was
    waited for holding the GIL, while the CPU's searches ran on the pool's threads."""
    from test_tabu_resident import same

    problem = _qap()
    kw = dict(iterations=200, tenure=7, runtime=fresh)
    res = tabu_search_many(problem, range(4), device_searches=2, block_iterations=32, **kw)
    assert [r.split.strategy for r in res] == ["gpu"] * 2 + ["cpu"] * 2 and all(r.fallback == "" for r in res)
    watch.check()
    for seed, r in enumerate(res):
        same(r, tabu_search(problem, seed=seed, strategy="cpu", **kw))


# -- the sort pipelines (every copy event already kept until its copy is known to have ended) ------------------------

def _stable(a: np.ndarray) -> np.ndarray:
    return np.sort(a, kind="stable")


@pytest.mark.parametrize("transfer_level", [0, 2])
@pytest.mark.parametrize("alpha", [0.0, 0.3])
def test_fast_sort_keeps_its_copy_events(fresh, watch, transfer_level, alpha):
    a = make("float32", (300_001,), "specials", 1)
    opts = hpu.PipelineOptions(chunk_bytes=64 << 10)
    out, tr = fast_sort(a, fresh, strategy="advanced", alpha=alpha, transfer_level=transfer_level, options=opts,
                        on_device_error="raise")
    assert tr.fallback == "" and same_bits(out, _stable(a))
    watch.check()


def test_row_sort_keeps_its_copy_events(fresh, watch):
    rows = make("int32", (600, 257), "few-unique", 2)
    out, tr = fast_row_sort(rows.reshape(-1), rows.shape[1], fresh, options=hpu.PipelineOptions(chunk_bytes=32 << 10),
                            sort_into=stable_rows_into,
                            on_device_error="raise")
    assert tr.fallback == "" and same_bits(out.reshape(rows.shape), np.sort(rows, axis=-1, kind="stable"))
    watch.check()


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_keyed_sort_keeps_its_copy_events(fresh, watch, dtype):
    keys = make(dtype, (100_003,), "specials", 3)
    values = [np.arange(keys.size, dtype=np.int64), np.arange(keys.size, dtype=np.float32)]
    order = np.argsort(keys, kind="stable")
    opts = hpu.PipelineOptions(chunk_bytes=64 << 10)
    (perm,), _ = fast_keyed_sort(keys, values, fresh, redo=None, options=opts, on_device_error="raise")
    assert np.array_equal(perm, order)
    out, _ = fast_keyed_sort(keys, values, fresh, gather=True, redo=None, options=opts, on_device_error="raise")
    for got, want in zip(out, [keys, *values]):
        assert same_bits(got, want[order])
    watch.check()


@pytest.mark.parametrize("k", [2, 3])
def test_exchange_sort_keeps_its_copy_events(fresh, watch, k):
    """Several device threads at once (one PoCL device named ``k`` times), both through the pinned result and
    through the staging memory."""
    a = make("int64", (200_003,), "few-unique", 4)
    with hpu.Runtime(devices=[fresh.device] * k, profile=fresh.profile, threads=2) as rt:
        for memory in ("pin", "plain"):
            opts = hpu.PipelineOptions(chunk_bytes=64 << 10, result_memory=memory)
            out, tr = exchange_sort(a, rt, (0.0, *[1 / k] * k), options=opts, on_device_error="raise")
            assert tr.fallback == "" and same_bits(out, _stable(a))
            del out
    watch.check()


def test_keyrange_sort_keeps_its_copy_events(fresh, watch):
    a = make("float64", (150_001,), "specials", 5)
    with hpu.Runtime(devices=[fresh.device] * 2, profile=fresh.profile, threads=2) as rt:
        out, tr = keyrange_sort(a, rt, (0.2, 0.4, 0.4), options=hpu.PipelineOptions(chunk_bytes=64 << 10),
                                on_device_error="raise")
    assert tr.fallback == "" and same_bits(out, _stable(a))
    watch.check()


def test_threads_sharing_a_runtime_keep_their_copy_events(fresh, watch):
    """Several threads sorting on one runtime at once, each on a lease of its own."""
    arrays = [make(dt, (120_000 + i,), "specials", 10 + i) for i, dt in enumerate(["int32", "float32", "uint64"])]
    opts = hpu.PipelineOptions(chunk_bytes=32 << 10)

    def one(a):
        return fast_sort(a, fresh, strategy="gpu", alpha=0.0, transfer_level=0, options=opts, on_device_error="raise")

    with concurrent.futures.ThreadPoolExecutor(len(arrays)) as ex:
        results = list(ex.map(one, arrays))
    for a, (out, tr) in zip(arrays, results):
        assert tr.fallback == "" and same_bits(out, _stable(a))
    watch.check()


def test_divide_and_conquer_keeps_its_copy_events(fresh, watch):
    a = np.random.default_rng(6).integers(-10**6, 10**6, 12_345).astype(np.int64)
    plan = array_sum_spec().plan(a.size, a.dtype)
    out, _ = execute(plan, a, fresh, strategy="advanced", alpha=0.25, transfer_level=min(4, plan.depth))
    assert out[0] == a.sum()
    watch.check()
