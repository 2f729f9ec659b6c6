"""Review of the tabu search's public API: defects found by checking against independent references."""

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from hpu.tabu import PPP, QAP, HWSWPartitioning, hybrid_ea, tabu_search, tabu_search_many

ROOT = Path(__file__).resolve().parents[1]


def test_ppp_with_one_row_runs_on_the_device(tmp_path):
    """A PPP of one row (``m = 1``, accepted by :class:`PPP`) aborted the whole process on PoCL: building
    ``apply_move`` with ``ROWS`` 1 fails an assertion in its compiler.  In a subprocess, so that an abort fails this
    test instead of ending the run; every device path must take the CPU's trajectory."""
    script = textwrap.dedent("""
        import numpy as np
        import hpu
        from hpu.tabu import PPP, evaluate_neighbourhood, tabu_search, tabu_search_many

        with hpu.Runtime() as rt:
            if not rt.has_device:
                print("NO DEVICE")
                raise SystemExit(0)
            pb = PPP(np.array([[1, -1, 1, 1, -1, 1, -1]]), [3], hamming=2)
            v = pb.random_solution(np.random.default_rng(1))
            assert np.array_equal(evaluate_neighbourhood(pb, v, unit="device", runtime=rt)[0],
                                  evaluate_neighbourhood(pb, v)[0])
            ref = tabu_search(pb, iterations=10, tenure=2, seed=3, strategy="cpu", cpu_chunks=1, runtime=rt)
            for kw in (dict(strategy="gpu", transfer_level=0, block_iterations=1), dict(strategy="gpu",
                       block_iterations=4), dict(strategy="hybrid", alpha=0.5, transfer_level=1, cpu_chunks=1)):
                res = tabu_search(pb, iterations=10, tenure=2, seed=3, runtime=rt, on_device_error="raise", **kw)
                assert res.moves.tolist() == ref.moves.tolist(), kw
                assert res.best_value == ref.best_value == pb.objective(res.best_solution), kw
            (many,) = tabu_search_many(pb, [3], iterations=10, tenure=2, strategy="gpu", runtime=rt,
                                       on_device_error="raise")
            assert many.moves.tolist() == ref.moves.tolist()
        print("OK")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)  # in tmp_path: PoCL's abort leaves .dot files in the working directory
    if "NO DEVICE" in out.stdout:
        pytest.skip("no OpenCL device")
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("bad, error", [(True, TypeError), ("1", TypeError), (-1.0, ValueError),
                                        (math.nan, ValueError)])
def test_hybrid_ea_checks_time_limit_as_tabu_search_does(bad, error):
    """``hybrid_ea``'s ``time_limit`` took ``True`` as one second and refused a string with numpy's message about
    ``>``; it is checked as :func:`hpu.tabu.tabu_search` checks it, naming the argument."""
    qap = QAP([[0, 1, 2], [1, 0, 3], [2, 3, 0]], [[0, 5, 2], [1, 0, 3], [2, 7, 0]])
    with pytest.raises(error, match="time_limit"):
        hybrid_ea(qap, population=2, generations=1, ls_iterations=2, strategy="cpu", time_limit=bad)


def test_hybrid_ea_time_limit_inf_is_no_limit():
    qap = QAP([[0, 1, 2], [1, 0, 3], [2, 3, 0]], [[0, 5, 2], [1, 0, 3], [2, 7, 0]])
    res = hybrid_ea(qap, population=2, generations=2, ls_iterations=3, strategy="cpu", time_limit=math.inf, seed=0)
    assert res.stop == "generations" and res.generations == 2
    assert res.best_value == qap.objective(res.best_solution)


_QAP3 = QAP([[0, 1, 2], [1, 0, 3], [2, 3, 0]], [[0, 5, 2], [1, 0, 3], [2, 7, 0]])
_SEEDED = {
    "tabu_search": lambda seed, rt: tabu_search(_QAP3, iterations=2, tenure=1, seed=seed, strategy="cpu", runtime=rt),
    "tabu_search_many": lambda seed, rt: tabu_search_many(_QAP3, [0, seed], iterations=2, tenure=1, strategy="cpu",
                                                          runtime=rt),
    "hybrid_ea": lambda seed, rt: hybrid_ea(_QAP3, population=2, generations=1, ls_iterations=2, seed=seed,
                                            strategy="cpu", runtime=rt),
    "PPP.generate": lambda seed, rt: PPP.generate(3, 5, seed),
    "HWSWPartitioning.random": lambda seed, rt: HWSWPartitioning.random(5, seed=seed),
}


@pytest.mark.parametrize("entry", _SEEDED)
@pytest.mark.parametrize("bad, error", [(1.5, TypeError), ("1", TypeError), (-1, ValueError), ([1, -2], ValueError)])
def test_a_bad_seed_is_refused_naming_seed(cpu_runtime, entry, bad, error):
    """A float, a string or a negative seed passed numpy's message on ("SeedSequence expects int or sequence of ints
    for entropy not 1.5", "expected non-negative integer"), which names no argument."""
    name = r"seeds\[1\]" if entry == "tabu_search_many" else "seed"
    with pytest.raises(error, match=rf"{name} must be None, an int >= 0"):
        _SEEDED[entry](bad, cpu_runtime)


@pytest.mark.parametrize("entry", _SEEDED)
def test_every_seed_numpy_takes_is_taken(cpu_runtime, entry):
    seeds = [None, 3, np.int64(3), [1, 2], np.random.SeedSequence(3)]
    if entry != "hybrid_ea":  # its seed roots a SeedSequence of streams: no Generator
        seeds += [np.random.PCG64(3), np.random.default_rng(3)]
    for seed in seeds:
        _SEEDED[entry](seed, cpu_runtime)


def test_hybrid_ea_refuses_a_generator_seed_naming_seed():
    with pytest.raises(TypeError, match="seed must be None, an int >= 0, a sequence of them or a numpy SeedSequence"):
        hybrid_ea(_QAP3, population=2, generations=1, ls_iterations=2, seed=np.random.default_rng(0), strategy="cpu")


@pytest.mark.parametrize("which", ["flow", "distance"])
def test_qap_refuses_ragged_matrices_naming_them(which):
    """Ragged nested lists passed numpy's "setting an array element with a sequence ... inhomogeneous shape" on."""
    good, ragged = [[0, 1, 2], [1, 0, 3], [2, 3, 0]], [[0, 1, 2], [1, 0], [2, 3, 0]]
    with pytest.raises(ValueError, match=f"{which} matrix must be square .* ragged"):
        QAP(ragged, good) if which == "flow" else QAP(good, ragged)


def test_the_ppp_kernel_documents_the_padded_row_of_a_one_row_instance():
    """``ROWS`` is ``max(m, 2)`` (:meth:`PPP` pads a one-row instance with a row of zeros); the kernel's header said
    ``ROWS (m)``."""
    header = (ROOT / "kernels_cl" / "tabu_ppp.cl").read_text().split("*/")[0]
    assert "ROWS (max(m, 2)" in " ".join(header.split())
    pb = PPP(np.array([[1, -1, 1]]), [1])
    assert pb.state(pb.random_solution(np.random.default_rng(0))).defines()["ROWS"] == 2
