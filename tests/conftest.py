import ast
import gc
import io
import logging
import os
import tokenize
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import hpu

# No deadline and no too-slow health check, on CI as here: a property's examples are timed by nothing (speed lives in
# the benchmarks), and a slower machine must not fail them.  HYPOTHESIS_PROFILE picks another registered profile.
settings.register_profile("hpu", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "hpu"))


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
def rt(runtime):
    """The shared test runtime where it has a device; skipped without one."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    return runtime


@pytest.fixture
def fresh(runtime):
    """A runtime of its own on the test device, 2 threads (a fault rebuilds its context); skipped without a device."""
    if not runtime.has_device:
        pytest.skip("no OpenCL device")
    with hpu.Runtime(runtime.device, profile=runtime.profile, threads=2) as rt:
        yield rt


@pytest.fixture
def staged_sources(monkeypatch):
    """A list that receives ``(source, stream, by)`` for every piece the pipeline stages, whichever stages it: its
    Python pool's tasks (``copy_into``, ``by == "pool"``) or the compiled stager (``NativeStaging``, ``"native"``)."""
    from hpu.sorting import pipeline

    seen: list = []
    real_copy, real_native = pipeline.copy_into, pipeline.NativeStaging

    def copy(dst, src, stream):
        seen.append((src, stream, "pool"))
        return real_copy(dst, src, stream)

    class Spy(real_native):
        def __init__(self, pieces, events=None, **kw):
            seen.extend((src, kw["stream"], "native") for _, src in pieces)
            super().__init__(pieces, events, **kw)

        @classmethod
        def of_ranges(cls, arrays, events=None, **kw):
            seen.extend((src[a:b], kw["stream"], "native") for _, src, ranges in arrays for a, b in ranges)
            return super().of_ranges(arrays, events, **kw)

    monkeypatch.setattr(pipeline, "copy_into", copy)
    monkeypatch.setattr(pipeline, "NativeStaging", Spy)
    return seen


@pytest.fixture(scope="session")
def cpu_runtime():
    with hpu.Runtime("none", profile=hpu.Profile(p=2, g=1, gamma=1)) as rt:
        yield rt


@pytest.fixture(autouse=True)
def _quiet_hpu_logs(caplog):
    caplog.set_level(logging.WARNING, logger="hpu")


@pytest.fixture
def frozen_heap():
    """The objects alive before the test left out of garbage collections (``gc.freeze``) while it runs: a test that
    collects all the time then walks only what it made, not a heap that grows with the tests run before it (a full
    collection late in the suite holds the GIL several times as long as in a test run alone)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def raises_closed_in_a_fork(call) -> bool:
    """Whether ``call()`` in a forked child raises :class:`hpu.RuntimeClosedError` naming the fork (the child exits
    at once, whatever happens: no hang, no test run twice)."""
    pid = os.fork()
    if pid == 0:
        try:
            call()
        except hpu.RuntimeClosedError as e:
            os._exit(0 if "fork" in str(e) else 2)
        except BaseException:
            os._exit(3)
        os._exit(4)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bit patterns (so -0.0 vs +0.0 and NaN payload order count)."""
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def stable_rows_into(block: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = numpy.sort(block, axis=-1, kind="stable")``: the CPU's row sort that the pipeline's row calls
    take (``fast_row_sort``'s ``sort_into``)."""
    out[...] = np.sort(block, axis=-1, kind="stable")


def pipeline_calls(rt, a: np.ndarray, values: np.ndarray, m: int, options, on_device_error: str = "raise") -> dict:
    """The pipeline's three device calls on the 1-D ``a``, by name, each as ``(call, want)``: ``call()`` returns the
    call's results as a list, ``want`` numpy's stable results.  ``"sort"``: a device sort of ``a``; ``"rows"``: its
    first whole rows of ``m`` keys, each sorted; ``"kv"``: a key-value sort of ``a`` carrying ``values`` (its CPU
    redo numpy's)."""
    from hpu.sorting.pipeline import fast_keyed_sort, fast_row_sort, fast_sort

    rows, order = a[:a.size // m * m], np.argsort(a, kind="stable")
    kw = {"options": options, "on_device_error": on_device_error}
    return {"sort": (lambda: [fast_sort(a, rt, strategy="gpu", alpha=0.0, transfer_level=0, **kw)[0]],
                     [np.sort(a, kind="stable")]),
            "rows": (lambda: [fast_row_sort(rows, m, rt, sort_into=stable_rows_into, **kw)[0]],
                     [np.sort(rows.reshape(-1, m), axis=-1, kind="stable").reshape(-1)]),
            "kv": (lambda: fast_keyed_sort(a, [values], rt, gather=True, redo=lambda: [a[order], values[order]],
                                           **kw)[0],
                   [a[order], values[order]])}


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


def reference_tie(m: int, iteration: int, seed: int) -> int:
    """The documented 21-bit tie-break hash (hpu.tabu.tie_hash), in plain Python integers."""
    mask = 0xFFFFFFFF
    x = (m & mask) ^ ((m >> 32) * 0x9E3779B9 & mask)
    x ^= (iteration * 0x85EBCA6B & mask) ^ seed
    x ^= x >> 16
    x = x * 0x7FEB352D & mask
    x ^= x >> 15
    x = x * 0x846CA68B & mask
    x ^= x >> 16
    return x >> 11


def _moved(x: np.ndarray, y: np.ndarray) -> list[tuple[int, int]]:
    """``(index, value)`` pairs of ``y`` that differ from ``x``: what a move puts where."""
    return [(int(k), int(y[k])) for k in np.flatnonzero(x != y)]


def reference_search(problem, *, iterations, tenure, seed, tie_break="random"):
    """Plain tabu search from full objectives (no deltas, no split): the independent reference.

    The rules hpu.tabu.tabu_search documents: the best admissible neighbour by (value, tie, move
    index), tie = reference_tie(move, iteration, s) with s drawn after the random start under
    tie_break="random", else 0; aspiration below the best value; the best tabu move when all feasible
    moves are tabu; a restart when none is feasible.  Tabu attributes, read off the solutions (not the
    move numbering): "move": the move index; "facility-location" (QAP, x[f] = location of f): the
    (f, former location) of both facilities moved, tabu when both return; "job-position" (PFSP,
    x[k] = job at position k): the (job, former position) of every job moved, tabu when any returns.
    Returns (moves, history, best value).
    """
    rng = np.random.default_rng(seed)
    x = problem.random_solution(rng)
    tie_seed = int(rng.integers(2**32)) if tie_break == "random" else None
    attr = problem.tabu_attribute
    tabu_until = {}
    best = problem.objective(x) if problem.feasible(x) else None

    def is_tabu(m, y, it):
        if attr == "move":
            return tabu_until.get(m, 0) > it
        if attr == "facility-location":
            return all(tabu_until.get((f, loc), 0) > it for f, loc in _moved(x, y))
        return any(tabu_until.get((job, k), 0) > it for k, job in _moved(x, y))

    moves, history = [], []
    for it in range(1, iterations + 1):
        while True:
            cands = []
            for m in range(problem.num_moves):
                y = problem.apply_move(x, m)
                if not problem.feasible(y):
                    continue
                v = problem.objective(y)
                admissible = best is None or v < best or not is_tabu(m, y, it)
                tie = 0 if tie_seed is None else reference_tie(m, it, tie_seed)
                cands.append((0 if admissible else 1, v, tie, m))
            if cands:
                break
            x = problem.restart(rng)
            if problem.feasible(x) and (best is None or problem.objective(x) < best):
                best = problem.objective(x)
        _, v, _, m = min(cands)
        y = problem.apply_move(x, m)
        if attr == "move":
            tabu_until[m] = it + tenure
        else:
            for k, _ in _moved(x, y):
                tabu_until[(k, int(x[k])) if attr == "facility-location" else (int(x[k]), k)] = it + tenure
        x = y
        best = v if best is None else min(best, v)
        moves.append(m)
        history.append(v)
    return np.array(moves), np.array(history), best


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
