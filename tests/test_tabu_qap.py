"""QAP: QAPLIB reading, objective, and the 2-swap delta on the CPU and the device against brute force."""

from pathlib import Path

import numpy as np
import pytest
from conftest import deltas_match_brute_force, walk_and_check

import hpu
from hpu.tabu import QAP, evaluate_neighbourhood, tabu_search
from hpu.tabu.engine import Evaluator

DATA = Path(__file__).parents[1] / "experiments/data/qaplib"
SLN_FILES = sorted(DATA.glob("*.sln"))


@pytest.fixture(scope="module")
def rt():
    with hpu.Runtime() as r:
        yield r


def brute_force_deltas(q, p):
    base = q.objective(p)
    return np.array([q.objective(q.apply_move(p, m)) - base for m in range(q.num_moves)])


def random_qap(rng, n, *, symmetric, diagonal, low=-6, high=9):
    a = rng.integers(low, high, (n, n))
    b = rng.integers(0, high, (n, n))
    if symmetric:
        a, b = a + a.T, b + b.T
    if not diagonal:
        np.fill_diagonal(a, 0)
        np.fill_diagonal(b, 0)
    return QAP(a, b)


# -- QAPLIB files --------------------------------------------------------------------


def test_the_data_set_is_there():
    assert len(SLN_FILES) == 18
    assert (DATA / "tai30a.dat").exists() and (DATA / "tai100a.dat").exists()


@pytest.mark.parametrize("sln", SLN_FILES, ids=lambda p: p.stem)
def test_every_sln_permutation_has_its_stated_objective(sln):
    q = QAP.from_qaplib(sln.with_suffix(".dat"))
    sol = q.read_solution(sln)
    stated = int(sln.read_text().split()[1])
    assert sol.value == stated
    assert q.objective(sol.permutation) == stated
    assert sorted(sol.permutation) == list(range(q.n))


def test_sln_conventions_are_detected():
    conv = {}
    for sln in SLN_FILES:
        q = QAP.from_qaplib(sln.with_suffix(".dat"))
        s = q.read_solution(sln)
        conv[sln.stem] = (s.one_based, s.inverse)
    # nug30 and kra30a list the inverse assignment (data README); so, we find, do tai60a and
    # tai80a; tai40a's file numbers from 0.
    assert {k for k, (_, inv) in conv.items() if inv} == {"nug30", "kra30a", "tai60a", "tai80a"}
    assert {k for k, (one, _) in conv.items() if not one} == {"tai40a"}


def test_instance_properties():
    q = QAP.from_qaplib(DATA / "tai30a.dat")
    assert (q.n, q.num_moves, q.name, q.symmetric) == (30, 435, "tai30a", True)
    lipa = QAP.from_qaplib(DATA / "lipa50a.dat")
    assert not lipa.symmetric  # an asymmetric flow matrix: the general delta formula
    assert QAP.from_qaplib(DATA / "tai100a.dat").objective(np.arange(100)) > 2**24


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty file"),
        ("x\n", r"line 1: the size n: expected an integer, found 'x'"),
        ("-3\n", r"line 1: the size n must be a positive integer, found -3"),
        ("0\n", r"line 1: the size n must be a positive integer, found 0"),
        ("2\n0 1\n1 0\n0 5\n", r"expected 2 n\^2 = 8 matrix entries after n = 2, found 6 \(the file ends at line 4\)"),
        ("2\n0 1\n1 0\n\n0 5\n5 0\n7\n", r"line 7: unexpected token '7' after the 2 n\^2 = 8 matrix entries"),
        ("2\n0 1\n1 0\n0 5.5\n5 0\n", r"line 4: distance matrix entry \(0, 1\): expected an integer, found '5.5'"),
        ("2\n0 1\nfoo 0\n0 5\n5 0\n", r"line 3: flow matrix entry \(1, 0\): expected an integer, found 'foo'"),
        ("1\n0\n0\n", "n >= 2"),
    ],
)
def test_malformed_instance_files(tmp_path, text, message):
    p = _write(tmp_path, "bad.dat", text)
    with pytest.raises(ValueError, match=message) as e:
        QAP.from_qaplib(p)
    assert str(p) in str(e.value)


def test_missing_instance_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        QAP.from_qaplib(tmp_path / "none.dat")


@pytest.mark.parametrize(
    "text, message",
    [
        ("4\n", "missing the objective value"),
        ("3\n10\n1 2 3\n", "solution of size 3, but the instance has n = 4"),
        ("4\n10\n1 2 3\n", "expected a permutation of n = 4 entries, found 3"),
        ("4\n10\n1 2 3 4 5\n", "line 3: expected a permutation of n = 4 entries, found 5"),
        ("4\n10\n1 2 2 4\n", r"not a permutation of 1..4"),
        ("4\n10\n1 2 x 4\n", r"line 3: permutation entry 2: expected an integer, found 'x'"),
        ("4\n10\n1 2 3 4\n", r"stated objective 10, but the permutation gives \d+ and its inverse \d+"),
    ],
)
def test_malformed_solution_files(tmp_path, text, message):
    q = QAP(np.arange(16).reshape(4, 4), np.arange(16).reshape(4, 4).T, name="t")
    p = _write(tmp_path, "bad.sln", text)
    with pytest.raises(ValueError, match=message) as e:
        q.read_solution(p)
    assert str(p) in str(e.value)


def test_solution_files_with_commas_and_zero_based(tmp_path):
    a = [[0, 3, 1, 4], [1, 0, 5, 9], [2, 6, 0, 5], [3, 5, 8, 0]]
    b = [[0, 2, 7, 1], [8, 0, 2, 8], [1, 8, 0, 2], [8, 4, 5, 0]]
    q = QAP(a, b, name="t")
    p = np.array([0, 2, 3, 1])
    v = q.objective(p)
    assert q.objective(np.argsort(p)) != v
    s = q.read_solution(_write(tmp_path, "a.sln", f"4 {v}\n" + ",".join(str(k + 1) for k in p)))
    np.testing.assert_array_equal(s.permutation, p)
    assert s.one_based and not s.inverse
    s = q.read_solution(_write(tmp_path, "b.sln", f"4 {v}\n" + " ".join(str(k) for k in np.argsort(p))))
    np.testing.assert_array_equal(s.permutation, p)
    assert not s.one_based and s.inverse


def test_bad_matrices_and_solutions():
    with pytest.raises(ValueError, match="square"):
        QAP(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="differ in shape"):
        QAP(np.zeros((2, 2)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="integers"):
        QAP([[0, 0.5], [1, 0]], np.zeros((2, 2)))
    with pytest.raises(ValueError, match="overflow"):
        QAP(np.full((4, 4), 2**29), np.full((4, 4), 2**29))
    q = QAP(np.ones((4, 4), int), np.ones((4, 4), int))
    for bad in ([0, 1, 2, 2], [0, 1, 2], [1, 2, 3, 4], [0.0, 1.0, 2.0, 3.0]):
        with pytest.raises(ValueError, match="permutation"):
            q.objective(bad)
    p = np.array([3, 1, 2, 0])
    q.apply_move(p, 0)
    np.testing.assert_array_equal(p, [3, 1, 2, 0])  # inputs are never mutated


# -- deltas -------------------------------------------------------------------------------


CASES = [(s, d) for s in (True, False) for d in (True, False)]


@pytest.mark.parametrize("symmetric, diagonal", CASES)
def test_cpu_delta_of_every_move_equals_brute_force(symmetric, diagonal):
    rng = np.random.default_rng(7)
    for n in (2, 3, 5, 9, 14):
        q = random_qap(rng, n, symmetric=symmetric, diagonal=diagonal)
        assert q.symmetric == symmetric
        deltas_match_brute_force(q, rng, brute_force_deltas, 3)


@pytest.mark.parametrize("symmetric, diagonal", CASES)
@pytest.mark.parametrize("high", [9, 2**25], ids=["matrix-products", "too-large-for-float64"])
def test_all_deltas_at_once_equal_brute_force(symmetric, diagonal, high):
    """The device's initial move values (one matrix product, or deltas() past float64's exact range)."""
    rng = np.random.default_rng(17)
    for n in (2, 3, 9, 14):
        q = random_qap(rng, n, symmetric=symmetric, diagonal=diagonal, low=-high, high=high)
        p = rng.permutation(n)
        got = q.state(p).all_deltas()
        assert got.dtype == np.int64 and got.shape == (q.num_moves,)
        np.testing.assert_array_equal(got, brute_force_deltas(q, p))


@pytest.mark.parametrize("symmetric, diagonal", CASES)
@pytest.mark.parametrize("high", [9, 2**25], ids=["matrix-products", "too-large-for-float64"])
def test_a_batch_of_states_arrays_equal_each_states_own(symmetric, diagonal, high):
    """batch_arrays (the stacked states of many searches): every state's move values as brute force gives them,
    its permutation and permuted distances as its own device_arrays."""
    rng = np.random.default_rng(23)
    q = random_qap(rng, 9, symmetric=symmetric, diagonal=diagonal, low=-high, high=high)
    perms = [rng.permutation(9) for _ in range(4)]
    states = [q.state(p) for p in perms]
    batch = states[0].batch_arrays(states[1:])
    assert len(batch) == 4
    for p, st, arrays in zip(perms, states, batch):
        np.testing.assert_array_equal(arrays[3][0], brute_force_deltas(q, p))
        for (got, own), (want, want_own) in zip(arrays, st.device_arrays()):
            assert own == want_own
            np.testing.assert_array_equal(got, want)
    other = random_qap(rng, 9, symmetric=symmetric, diagonal=diagonal)
    with pytest.raises(ValueError, match="one problem"):
        states[0].batch_arrays([other.state(perms[0])])


def test_a_large_batch_is_made_in_stacks(monkeypatch):
    """More states than a stack takes (forced to 3): the same move values as each state's own."""
    import hpu.tabu.qap as qap_module

    monkeypatch.setattr(qap_module, "_BATCH_STATES", 3)
    rng = np.random.default_rng(29)
    q = random_qap(rng, 8, symmetric=True, diagonal=False)
    perms = [rng.permutation(8) for _ in range(8)]
    batch = q.state(perms[0]).batch_arrays([q.state(p) for p in perms[1:]])
    for p, arrays in zip(perms, batch):
        np.testing.assert_array_equal(arrays[3][0], brute_force_deltas(q, p))


@pytest.mark.parametrize("symmetric, diagonal", CASES)
def test_device_delta_of_every_move_equals_brute_force(rt, symmetric, diagonal):
    rng = np.random.default_rng(11)
    for n in (2, 4, 9, 14):
        q = random_qap(rng, n, symmetric=symmetric, diagonal=diagonal)
        deltas_match_brute_force(q, rng, brute_force_deltas, 2, unit="device", runtime=rt)


@pytest.mark.parametrize("symmetric, diagonal", CASES)
def test_device_move_values_follow_a_walk(rt, symmetric, diagonal):
    """The device keeps every move's delta and updates it after each move it applies (O(1) for moves disjoint from
    the one taken, O(n) for those that share a facility with it): after every step of a random walk it holds the
    brute-force deltas of the walk's current permutation."""
    rng = np.random.default_rng(13)
    for n in (2, 3, 5, 9, 14):
        q = random_qap(rng, n, symmetric=symmetric, diagonal=diagonal)
        p = q.random_solution(rng)
        N = q.num_moves
        with Evaluator(q.state(p), rt, cpu_moves=0, groups=N, on_device_error="raise") as ev:
            for it in range(1, 13):
                m = int(rng.integers(N))
                ev.apply(m, q.objective(q.apply_move(p, m)) - q.objective(p), it + 3)
                p = q.apply_move(p, m)
                # every move admissible (no aspiration limit) and no tie hash: each key is its move's index
                _, delta, key = ev.device_partials(it + 1, np.iinfo(np.int64).max)
                np.testing.assert_array_equal(delta[np.argsort(key)], brute_force_deltas(q, p))


def test_device_delta_with_64_bit_entries(rt):
    rng = np.random.default_rng(3)
    a = rng.integers(2**30, 2**31, (6, 6))
    q = QAP(a, rng.integers(0, 50, (6, 6)))
    p = q.random_solution(rng)
    delta, _ = evaluate_neighbourhood(q, p, unit="device", runtime=rt)
    np.testing.assert_array_equal(delta, brute_force_deltas(q, p))
    np.testing.assert_array_equal(evaluate_neighbourhood(q, p)[0], delta)


@pytest.mark.parametrize("entry, other", [(2**30 - 1, 10), (7300, 7300)])
def test_mixed_sign_entries_near_the_int32_limits(rt, entry, other):
    """Entries of both signs: a delta's factors span four entries, so int32 partial sums (the CPU's, below its
    bound) and int entries (the device's, below 2^29) must not wrap; every split follows the CPU's search and its
    best value is the objective of its best solution."""
    rng = np.random.default_rng(3)
    n = 10 if entry < 2**20 else 8
    a = np.triu(rng.choice([-entry, entry], (n, n)), 1)
    b = np.triu(rng.choice([-other, other], (n, n)), 1)
    q = QAP(a + a.T, b + b.T, tabu_attribute="move")
    p = q.random_solution(rng)
    np.testing.assert_array_equal(evaluate_neighbourhood(q, p)[0], brute_force_deltas(q, p))
    np.testing.assert_array_equal(evaluate_neighbourhood(q, p, unit="device", runtime=rt)[0], brute_force_deltas(q, p))
    kw = dict(iterations=20, tenure=3, seed=5, runtime=rt)
    cpu = tabu_search(q, strategy="cpu", **kw)
    assert cpu.best_value == q.objective(cpu.best_solution)
    for split in (dict(strategy="gpu", transfer_level=0), dict(strategy="gpu", transfer_level=2, block_iterations=1)):
        r = tabu_search(q, **split, **kw)
        assert np.array_equal(r.moves, cpu.moves) and r.best_value == cpu.best_value, split


def test_entries_that_do_not_fit_int64_are_refused():
    for bad in ([[0, -2**63], [-2**63, 0]], [[0, 1e30], [1e30, 0]], np.array([[0, 2**64 - 1], [1, 0]], np.uint64)):
        with pytest.raises(ValueError, match="int64|overflow"):
            QAP(bad, [[0, 1], [1, 0]])


def test_deltas_on_a_qaplib_instance(rt):
    q = QAP.from_qaplib(DATA / "tai12a.dat")
    p = q.read_solution(DATA / "tai12a.sln").permutation
    ref = brute_force_deltas(q, p)
    assert ref.min() >= 0  # the optimum is 2-swap locally optimal
    np.testing.assert_array_equal(evaluate_neighbourhood(q, p)[0], ref)
    np.testing.assert_array_equal(evaluate_neighbourhood(q, p, unit="device", runtime=rt)[0], ref)


def test_state_follows_a_walk():
    rng = np.random.default_rng(5)
    for symmetric in (True, False):
        q = random_qap(rng, 10, symmetric=symmetric, diagonal=True)
        p = q.random_solution(rng)
        walk_and_check(q, q.state(p), p, rng, 30)
