"""Review of hpu.core.model against López-Ortiz, Salinger & Suderman (IJNC 4(1), 2014), by independent references.

Every reference below is written from the paper's text, not from the implementation's helpers:

* section 5.1, cases 1-4: the time of level ``i`` on each unit (CPU ``f(n/b^i)`` for ``a^i < p`` subproblems,
  ``(a^i/p) f(n/b^i)`` else; GPU ``f(n/b^i)/gamma`` for ``a^i < g``, ``(a^i/(gamma g)) f(n/b^i)`` else; the
  ``n^{log_b a}`` leaves ``N/p`` and ``N/(gamma g)``), summed level by level;
* section 5.2.2: the closed forms of ``T_c``, ``T_g^max``, ``T_g`` (three cases) and ``W_g`` for a recurrence
  with ``f(n) = n^{log_b a}``, with ``y`` solved analytically, and ``alpha*`` found by a grid search.
"""

import math

import numpy as np
import pytest

from hpu import Profile, Recurrence, advanced_split, basic_split

HPU1 = Profile(p=4, g=4096, gamma=1 / 160)  # paper table 2
HPU2 = Profile(p=4, g=1200, gamma=1 / 65)
# Recurrences with f(n) = n^{log_b a}, whose closed forms paper 5.2.2 gives: (a, b, exponent of f).
BALANCED = [(2, 2, 1), (4, 2, 2), (3, 3, 1)]


# ---------------------------------------------------------------------------------------------------------------
# References written from the paper
# ---------------------------------------------------------------------------------------------------------------

def _f(k, x):
    return x**k


def paper_level_times(a, b, k, n, p, g, gam, i):
    """(T_CPU, T_GPU) of level i (paper 5.1 cases 1-3): one subproblem per core while there are fewer than cores."""
    count, span = a**i, _f(k, n / b**i)
    cpu = span if count < p else count / p * span
    gpu = span / gam if count < g else count / (gam * g) * span
    return cpu, gpu


def paper_leaves(N, p, g, gam):
    """(T_CPU, T_GPU) of the N leaves (paper 5.1 case 4), one operation each; at least one operation's time."""
    return max(1.0, N / p), max(1.0, N / g) / gam


def paper_basic(a, b, k, L, p, g, gam):
    """Basic split (paper 5.1): levels with a^i >= p/gamma (and the leaves) on the GPU, unless gamma g < p."""
    n, N = float(b) ** L, float(a) ** L
    cpu = gpu = gpu_work = 0.0
    on_gpu = gam * g >= p
    for i in range(L):
        tc, tg = paper_level_times(a, b, k, n, p, g, gam, i)
        if on_gpu and a**i >= p / gam:
            gpu += tg
            gpu_work += a**i * _f(k, n / b**i)
        else:
            cpu += tc
    lc, lg = paper_leaves(N, p, g, gam)
    if on_gpu and N >= p / gam:
        gpu, gpu_work = gpu + lg, gpu_work + N
    else:
        cpu += lc
    total = N + sum(a**i * _f(k, n / b**i) for i in range(L))
    return cpu, gpu, gpu_work / total


def paper_closed_forms(a, N, L, p, g, gam, alpha):
    """Paper 5.2.2 for f(n) = n^{log_b a}: T_c, case, y (solved from T_g = T_c analytically), W_g.

    None where T_g = T_c has no solution y <= L: the device cannot finish even its leaves while the CPU
    share reaches p subproblems (outside the paper's schedule).
    """
    t_c = alpha * N / p * (L - math.log(p / alpha, a) + 1)
    t_gmax = (1 - alpha) * N / (gam * g) * (L - math.log(g / (1 - alpha), a) + 1)
    if (1 - alpha) * N < g:  # (i): (1/gamma)(N a/(a-1) a^-y - 1/(a-1)) = T_c
        case, y = "i", -math.log((gam * t_c + 1 / (a - 1)) * (a - 1) / (a * N), a)
    elif t_gmax >= t_c:  # (ii): (1-alpha) N/(gamma g) (L - y + 1) = T_c
        case, y = "ii", L + 1 - t_c * gam * g / ((1 - alpha) * N)
    else:  # (iii): T_g^max + N a/(gamma (a-1)) (a^-y - (1-alpha)/g) = T_c
        case, y = "iii", -math.log((t_c - t_gmax) * gam * (a - 1) / (N * a) + (1 - alpha) / g, a)
    if y > L + 1e-12:
        return None
    y = max(y, 0.0)
    return {"T_c": t_c, "case": case, "y": y, "W_g": (1 - alpha) * N * (L - y + 1), "total": N * (L + 1)}


def paper_grid_search(a, N, L, p, g, gam, points=4001):
    """alpha* maximising W_g over alpha in [p/N, 1) (paper 5.2.1), by brute force on a grid."""
    lo = p / N
    grid = np.unique(np.concatenate([np.linspace(lo, 1, points)[:-1], np.geomspace(lo, 1, points)[:-1]]))
    best_w, best = 0.0, None
    for alpha in grid:
        r = paper_closed_forms(a, N, L, p, g, gam, float(alpha))
        if r is not None and r["W_g"] > best_w:
            best_w, best = r["W_g"], (float(alpha), r)
    return best


# ---------------------------------------------------------------------------------------------------------------
# The paper's numbers
# ---------------------------------------------------------------------------------------------------------------

def test_paper_section_5_2_2_example_and_figures_3_4():
    # Mergesort on HPU1, n = 2^24: alpha* ~ 0.16, GPU ~ 52 % of the work, level reached ~ 10 (fig. 4: transfer
    # level 10), the GPU both saturated and not (case iii).  The closed forms give y(0.16) = 9.44.
    s = advanced_split(Recurrence(2, 2, 1), 2**24, HPU1)
    alpha, ref = paper_grid_search(2, 2.0**24, 24, 4, 4096, 1 / 160)
    assert round(s.alpha, 2) == round(alpha, 2) == 0.16
    assert s.gpu_work_fraction == pytest.approx(ref["W_g"] / ref["total"], abs=1e-4)
    assert round(s.gpu_work_fraction, 2) == 0.52
    assert s.y == pytest.approx(ref["y"], abs=1e-3) and 9 < s.y < 10 and s.transfer_level == 10
    assert s.case == ref["case"] == "iii"
    # Basic split (paper 5.1, fig. 1): one transfer at level log_a(p/gamma) = log2 640.
    b = basic_split(Recurrence(2, 2, 1), 2**24, HPU1)
    assert b.y == pytest.approx(math.log2(640)) and b.transfer_level == 10


# ---------------------------------------------------------------------------------------------------------------
# Basic split, level by level (paper 5.1)
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("prof", [HPU1, HPU2, Profile(p=1, g=64, gamma=0.5), Profile(p=8, g=10, gamma=0.5),
                                  Profile(p=1, g=1, gamma=1.0), Profile(p=16, g=1e6, gamma=1.0)])
@pytest.mark.parametrize("rec", [(2, 2, 1), (2, 2, 2), (4, 2, 1), (3, 2, 0.5), (2, 3, 1)])
@pytest.mark.parametrize("L", [1, 3, 8, 14])
def test_basic_split_matches_the_paper_level_by_level(prof, rec, L):
    a, b, k = rec
    p, g, gam = prof.p, prof.g, prof.gamma
    y = math.log(p / gam, a)
    if gam * g >= p and y <= L <= math.ceil(y):
        pytest.skip("leaves-only device share: the split keeps the leaves on the CPU (reported, not changed)")
    cpu, gpu, frac = paper_basic(a, b, k, L, p, g, gam)
    s = basic_split(Recurrence(a, b, k), float(b) ** L, prof)
    assert s.predicted_cpu_time == pytest.approx(cpu, rel=1e-9)
    assert s.predicted_gpu_time == pytest.approx(gpu, rel=1e-9)
    assert s.predicted_time == pytest.approx(cpu + gpu, rel=1e-9)
    assert s.gpu_work_fraction == pytest.approx(frac, rel=1e-9, abs=1e-12)
    # Each level runs where it is faster (paper 5.1: "each level ... in the platform in which it runs faster").
    if gam * g >= p:
        n, N = float(b) ** L, float(a) ** L
        fastest = sum(min(paper_level_times(a, b, k, n, p, g, gam, i)) for i in range(L)) + min(
            paper_leaves(N, p, g, gam))
        assert s.predicted_time == pytest.approx(fastest, rel=1e-9)


@pytest.mark.parametrize("n", [3, 5, 6, 7, 1000, 3000.5])
def test_basic_split_on_the_cpu_alone_stops_at_the_leaves(n):
    # gamma g < p: every level on the CPU (paper 5.1).  For n not a power of b the CPU's levels ran up to
    # ceil(log_b n) instead of log_b n, charging a whole level more than the tree has (n = 3: 9 operations for
    # a tree of n log2 n + n = 7.75; speedup 0.86 on one core).  Mergesort's levels cost n each, so the
    # fractional last level is unambiguous: n (log2 n) + n leaves.
    s = basic_split(Recurrence(2, 2, 1), n, Profile(p=1, g=1, gamma=0.5))
    assert s.predicted_time == pytest.approx(n * math.log2(n) + n, rel=1e-12)
    assert s.predicted_speedup == pytest.approx(1.0, rel=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# Advanced split (paper 5.2.1, 5.2.2)
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rec", BALANCED)
@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.16, 0.3, 0.6, 0.95])
@pytest.mark.parametrize("prof", [HPU1, HPU2])
def test_forced_alpha_y_and_work_match_the_closed_forms(rec, alpha, prof):
    a, b, k = rec
    L = {2: 24, 4: 12, 3: 15}[a]
    N = float(a) ** L
    ref = paper_closed_forms(a, N, L, prof.p, prof.g, prof.gamma, alpha)
    s = advanced_split(Recurrence(a, b, k), float(b) ** L, prof, alpha=alpha)
    if ref is None:  # the device share cannot finish its leaves in T_c: y is clipped to the tree
        assert s.y == L and s.predicted_time > s.predicted_cpu_time
        return
    assert s.case == ref["case"]
    assert s.y == pytest.approx(ref["y"], abs=1e-7)
    assert s.gpu_work_fraction == pytest.approx(ref["W_g"] / ref["total"], rel=1e-9)
    if 0 < ref["y"] < L:  # the device works exactly as long as the CPU share (T_g(y) = T_c)
        assert s.predicted_gpu_time == pytest.approx(ref["T_c"], rel=1e-9)
        assert s.predicted_time == pytest.approx(s.predicted_cpu_time, rel=1e-9)


@pytest.mark.parametrize("prof", [HPU1, HPU2, Profile(p=1, g=64, gamma=0.5), Profile(p=8, g=1e5, gamma=0.01)])
@pytest.mark.parametrize("rec", BALANCED)
def test_alpha_maximises_the_device_work_as_a_grid_search(prof, rec):
    # Paper 5.2.1: alpha* maximises W_g over the alphas whose y(alpha) solves T_g = T_c.  An alpha whose device
    # share cannot finish even its leaves in T_c has no such y: it was credited with its leaves anyway, so the
    # smallest alpha (p/N) won for small trees, the CPU then waited for the device and the split fell back to
    # the CPU alone (mergesort on HPU1, n = 2^8: alpha 1 instead of 0.47, 832 instead of 822 operations).
    a, b, k = rec
    for L in range(2, {2: 27, 4: 14, 3: 17}[a], 3):
        N = float(a) ** L
        if N <= prof.p:
            continue
        s = advanced_split(Recurrence(a, b, k), float(b) ** L, prof)
        best = paper_grid_search(a, N, L, prof.p, prof.g, prof.gamma)
        cpu_alone = advanced_split(Recurrence(a, b, k), float(b) ** L, prof, alpha=1.0).predicted_time
        if best is None:  # no alpha lets the device finish its share in time
            assert s.alpha == 1.0
            continue
        alpha, ref = best
        forced = advanced_split(Recurrence(a, b, k), float(b) ** L, prof, alpha=alpha)
        if s.alpha == 1.0:  # the documented fallback: the paper's alpha* predicted slower than the CPU alone
            assert forced.predicted_time >= cpu_alone * (1 - 1e-9), (L, alpha)
            continue
        assert s.gpu_work_fraction >= ref["W_g"] / ref["total"] - 1e-4, (L, alpha, s.alpha)
        assert s.gpu_work_fraction <= ref["W_g"] / ref["total"] + 1e-3, (L, alpha, s.alpha)
        # The CPU never waits for the device (paper 5.2: no idle CPU cores): both finish at T_c.
        assert s.predicted_time == pytest.approx(s.predicted_cpu_time, rel=1e-9), L


def test_a_device_that_cannot_finish_its_leaves_is_not_credited_with_them():
    # HPU1, f(n) = sqrt(n): the maximiser took alpha = p/N, whose device share needs 160 operations for its
    # leaves while the CPU share is done after 1: the CPU waited (859 operations, 731 with a feasible alpha).
    rec = Recurrence(2, 2, 0.5)
    s = advanced_split(rec, 1122.45, HPU1)
    assert 0 < s.alpha < 1
    assert s.predicted_time == pytest.approx(s.predicted_cpu_time, rel=1e-9)
    assert s.predicted_time < advanced_split(rec, 1122.45, HPU1, alpha=4 / 1122.45).predicted_time


# ---------------------------------------------------------------------------------------------------------------
# Edge cases
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("prof", [Profile(p=4, g=1, gamma=0.5), Profile(p=0.5, g=8, gamma=0.5),
                                  Profile(p=1, g=1, gamma=1.0)])
def test_one_subproblem_a_level_never_divides_by_log_a(prof):
    # a = 1: log_a is 0; with g <= 1 (alpha = 0) or p < 1 (alpha optimised) this was a ZeroDivisionError.
    rec = Recurrence(1, 2, 1)
    for s in (advanced_split(rec, 16, prof), advanced_split(rec, 16, prof, alpha=0.0),
              advanced_split(rec, 16, prof, alpha=1.0), basic_split(rec, 16, prof)):
        assert s.alpha in (0.0, 1.0) and math.isfinite(s.predicted_time) and s.predicted_time > 0
    assert advanced_split(rec, 16, prof).alpha == 1.0  # as the basic split: nothing to spread out


PROFILES = [HPU1, HPU2, Profile(p=1, g=1, gamma=1.0), Profile(p=1, g=64, gamma=0.5), Profile(p=8, g=1, gamma=1.0),
            Profile(p=2, g=3, gamma=0.9), Profile(p=64, g=1e7, gamma=1e-3)]
RECS = [Recurrence(2, 2, 1), Recurrence(2, 2, 2), Recurrence(3, 2, 1), Recurrence(2, 3, 0.5), Recurrence(1.5, 2, 1),
        Recurrence(8, 2, 3), Recurrence(2, 2, 0)]


@pytest.mark.parametrize("prof", PROFILES)
@pytest.mark.parametrize("rec", RECS)
def test_splits_stay_finite_and_in_range(prof, rec):
    ub = {"basic": max(prof.p, prof.gamma * prof.g), "advanced": prof.p + prof.gamma * prof.g}
    for n in (1, 1.5, 2, 3, 4.1, 7, 100, 1000.5, 2**16, 2.0**30):
        for s in (basic_split(rec, n, prof), advanced_split(rec, n, prof)):
            vals = (s.alpha, s.y, s.predicted_time, s.predicted_cpu_time, s.predicted_gpu_time, s.predicted_speedup)
            assert all(math.isfinite(v) for v in vals), (n, s)
            assert 0 <= s.alpha <= 1 and 0 <= s.gpu_work_fraction <= 1 + 1e-12 and 0 <= s.y <= s.depth + 1e-12
            assert 0 <= s.transfer_level <= math.ceil(s.depth)
            assert s.predicted_time >= max(s.predicted_cpu_time, s.predicted_gpu_time) * (1 - 1e-12)
            # No split beats the units' combined throughput (basic: one unit at a time); for n not a power of b
            # the times weight a partial level linearly, the one-core work geometrically (reported, not changed).
            if math.log(n, rec.b) == round(math.log(n, rec.b)):
                assert s.predicted_speedup <= ub[s.strategy] * (1 + 1e-9), (n, s)
        assert advanced_split(rec, n, prof).predicted_time <= advanced_split(
            rec, n, prof, alpha=1.0).predicted_time * (1 + 1e-12)


@pytest.mark.parametrize("alpha", [0.0, 5e-324, 1e-300, 1e-12, 0.5, 1 - 1e-12, 1 - 2**-53, 1.0])
@pytest.mark.parametrize("prof", [HPU1, Profile(p=1, g=1, gamma=1.0)])
def test_extreme_forced_alpha_stays_finite(alpha, prof):
    for n in (1, 2, 3.5, 2**20):
        s = advanced_split(Recurrence(2, 2, 1), n, prof, alpha=alpha)
        assert s.alpha == alpha and 0 <= s.gpu_work_fraction <= 1
        assert all(math.isfinite(v) and v >= 0 for v in (s.y, s.predicted_time, s.predicted_speedup))


@pytest.mark.parametrize("prof", [HPU1, HPU2])
@pytest.mark.parametrize("split", [basic_split, advanced_split])
def test_predicted_time_grows_with_n_and_with_the_data_to_move(prof, split):
    rec = Recurrence(2, 2, 1)
    times = [split(rec, 2.0**k, prof).predicted_time for k in range(0, 27)]
    assert all(t1 >= t0 for t0, t1 in zip(times, times[1:]))
    bus = prof.replace(h2d_latency=50.0, d2h_latency=50.0, h2d_seconds_per_byte=1e-3, d2h_seconds_per_byte=1e-3)
    assert split(rec, 2**20, bus).predicted_time == split(rec, 2**20, bus, data_bytes=0).predicted_time
    assert split(rec, 2**20, bus).predicted_time == split(rec, 2**20, prof).predicted_time  # None: the paper's
    costs = [split(rec, 2**20, bus, data_bytes=d).predicted_time for d in (0, 1e3, 1e5, 1e7, 1e9, 1e12)]
    assert all(t1 >= t0 * (1 - 1e-12) for t0, t1 in zip(costs, costs[1:]))


def test_gamma_above_one_is_refused():
    # Paper 3.2: gamma < 1 (a GPU core is slower than a CPU core); the profile allows gamma = 1, not more.
    with pytest.raises(ValueError, match="gamma must lie in"):
        Profile(p=4, g=16, gamma=1.5)
