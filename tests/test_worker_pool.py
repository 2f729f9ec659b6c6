"""hpu.core.runtime.WorkerPool: tasks submitted from its own workers run on them; others go to the workers."""

from __future__ import annotations

import threading

import pytest

from hpu.core.runtime import WorkerPool


def test_nested_submissions_run_on_the_submitting_worker():
    with WorkerPool(2) as pool:
        def outer() -> tuple[str, list[str]]:
            inner = [pool.submit(lambda: threading.current_thread().name) for _ in range(4)]
            assert all(f.done() for f in inner)
            return threading.current_thread().name, [f.result() for f in inner]

        # Every worker busy with an outer task that waits for inner ones: a plain ThreadPoolExecutor deadlocks here.
        results = [f.result(timeout=30) for f in [pool.submit(outer) for _ in range(2)]]
    for me, inner in results:
        assert me.startswith("hpu-cpu") and inner == [me] * 4


def test_errors_of_inline_tasks_reach_the_future():
    with WorkerPool(1) as pool:
        def outer() -> BaseException | None:
            return pool.submit(lambda: 1 // 0).exception()

        assert isinstance(pool.submit(outer).result(timeout=30), ZeroDivisionError)


def test_other_threads_and_acting_as_worker():
    with WorkerPool(2) as pool:
        assert not pool.in_worker()
        assert pool.submit(threading.current_thread).result(timeout=30) is not threading.current_thread()
        with pool.acting_as_worker():
            assert pool.in_worker()
            assert pool.submit(threading.current_thread).result() is threading.current_thread()
        assert not pool.in_worker()
        with pytest.raises(ValueError):
            pool.submit(int, "x").result(timeout=30)
