import ast
import io
import logging
import os
import tokenize
from pathlib import Path

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


@pytest.fixture
def fresh(runtime):
    """A runtime of its own on the test device, 2 threads (a fault rebuilds its context); skipped without a device."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    with hpu.Runtime(runtime.device, profile=runtime.profile, threads=2) as rt:
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


def long_functions(path: Path, limit: int) -> list[str]:
    """The functions of ``path`` with more than ``limit`` lines of code (docstrings, comments, blank lines aside)."""
    source = path.read_text()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    code = {line for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type not in skip
            for line in range(tok.start[0], tok.end[0] + 1)}
    long = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0]
            doc = (set(range(first.lineno, first.end_lineno + 1)) if isinstance(first, ast.Expr)
                   and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str) else set())
            lines = len((code & set(range(node.lineno, node.end_lineno + 1))) - doc)
            if lines > limit:
                long.append(f"{path.name}:{node.lineno} {node.name}: {lines} lines of code")
    return long
