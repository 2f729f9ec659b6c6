"""hpu.core.runtime.WorkerPool: tasks submitted from its own workers run on them; others go to the workers.

Also the core's checks of what workloads are given (hpu.core.costs, hpu.core.hybrid)."""

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


# -- the core's checks of what workloads are given (hpu.core.costs, hpu.core.hybrid) --------------------------------


@pytest.mark.parametrize("name", ["sizes", "itemsize"])
def test_a_cost_curve_named_as_a_key_of_the_format_is_refused(name):
    """A curve named "sizes" or "itemsize" would overwrite that key in to_dict: refused, not read back wrong."""
    from hpu.core.costs import CostCurves

    with pytest.raises(ValueError, match=name):
        CostCurves((16, 32), {"sort": (1.0, 2.0), name: (3.0, 4.0)})
    kept = CostCurves((16, 32), {"sort": (1.0, 2.0)}, itemsize=8)
    back = CostCurves.from_dict(kept.to_dict())
    assert (back.sizes, back.seconds, back.itemsize) == ((16, 32), {"sort": (1.0, 2.0)}, 8)


@pytest.mark.parametrize("alpha", [10**400, -(10**400)], ids=["huge", "minus-huge"])
def test_check_split_refuses_an_alpha_past_the_float_range_as_out_of_range(alpha):
    """As documented: ValueError naming alpha, not OverflowError from float()."""
    from fractions import Fraction

    from hpu.core.hybrid import check_split

    with pytest.raises(ValueError, match="alpha"):
        check_split(alpha, None)
    with pytest.raises(ValueError, match="alpha"):
        check_split(Fraction(alpha, 3), None)
    assert check_split(Fraction(1, 4), 2) == (0.25, 2)


@pytest.mark.parametrize("version", [True, False, 1.0, "1", None])
def test_a_schema_version_that_is_not_an_integer_is_refused(version):
    """JSON's true is not schema version 1 (Python's bool is an int): refused as non-integer, as 1.0 and "1" are."""
    from hpu.core.costs import ProfileError, check_versioned

    with pytest.raises(ProfileError, match="non-integer 'schema_version'"):
        check_versioned({"kind": "profile", "schema_version": version}, "profile", 2)
    assert check_versioned({"kind": "profile", "schema_version": 1}, "profile", 2)["schema_version"] == 1
