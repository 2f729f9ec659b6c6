import logging
import os

import numpy as np
import pytest

import hpu


@pytest.fixture(scope="session", autouse=True)
def _private_profile_dir(tmp_path_factory):
    """Tests neither read nor write the user's calibrated profiles (notebook kernels inherit this too)."""
    old = os.environ.get("HPU_PROFILE_DIR")
    os.environ["HPU_PROFILE_DIR"] = str(tmp_path_factory.mktemp("profiles"))
    yield
    if old is None:
        os.environ.pop("HPU_PROFILE_DIR", None)
    else:
        os.environ["HPU_PROFILE_DIR"] = old


@pytest.fixture(scope="session")
def runtime():
    """One runtime on the default device (PoCL on CI) with the paper's HPU1 profile, shared by the tests."""
    with hpu.Runtime(profile=hpu.Profile(p=2, g=64, gamma=0.5, cpu_op_seconds=3e-9)) as rt:
        yield rt


@pytest.fixture(scope="session")
def cpu_runtime():
    with hpu.Runtime("none", profile=hpu.Profile(p=2, g=1, gamma=1)) as rt:
        yield rt


@pytest.fixture(autouse=True)
def _quiet_hpu_logs(caplog):
    caplog.set_level(logging.WARNING, logger="hpu")


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bit patterns (so -0.0 vs +0.0 and NaN payload order count)."""
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def walk_and_check(problem, state, solution, rng, steps: int, brute_force=None) -> None:
    """Apply ``steps`` random moves to ``state``; after each, its value, solution (and deltas) match a full recomputation."""
    for _ in range(steps):
        m = int(rng.integers(problem.num_moves))
        d, _ = state.deltas(0, problem.num_moves)
        state.apply(m, int(d[m]))
        solution = problem.apply_move(solution, m)
        assert state.value == problem.objective(solution)
        np.testing.assert_array_equal(state.solution, solution)
        if brute_force is not None:
            np.testing.assert_array_equal(state.deltas(0, problem.num_moves)[0], brute_force(problem, solution))


def deltas_match_brute_force(problem, rng, brute_force, solutions: int, **evaluate_kw) -> None:
    """At ``solutions`` random solutions, ``evaluate_neighbourhood(**evaluate_kw)`` gives ``brute_force``'s deltas
    and finds every move feasible."""
    from hpu.tabu import evaluate_neighbourhood

    for _ in range(solutions):
        x = problem.random_solution(rng)
        delta, feasible = evaluate_neighbourhood(problem, x, **evaluate_kw)
        np.testing.assert_array_equal(delta, brute_force(problem, x))
        assert feasible.all()


def same_trajectories(search, problem, ref, splits, **kw) -> None:
    """``search(problem, **split, **kw)`` takes the moves and values of ``ref`` (a TabuResult) for every split."""
    for split in splits:
        res = search(problem, **split, **kw)
        np.testing.assert_array_equal(res.moves, ref.moves, err_msg=str(split))
        np.testing.assert_array_equal(res.history, ref.history, err_msg=str(split))
        assert res.best_value == ref.best_value
