"""Naive and SWRB samplers of kvdiv.finite.sampling against exact enumeration (fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest
from finite_helpers import iid_system, n_nodes, random_system
from scipy import stats
from support.finite_numpy import sample_numpy

from kvdiv.estimands import enclosure
from kvdiv.finite.exact import enumerate_exact, path_laws
from kvdiv.finite.sampling import (
    ESTIMATES,
    coupled_paths,
    sample,
    summarize,
)
from kvdiv.finite.suite import build_suite
from kvdiv.finite.system import FiniteSystem

Z_TOL = 4.5  # |estimate − exact| / stderr; seeds are fixed, so a pass is deterministic
REPLICATES = 30_000


def tv_one_system() -> FiniteSystem:
    s = random_system(3, 4, seed=11)
    p, q = s.reference.copy(), s.intervention.copy()
    p[0], q[0] = [1.0, 0.0, 0.0], [0.0, 0.5, 0.5]
    return FiniteSystem(3, 4, p, q, name="tv1")


def tv_one_later_system() -> FiniteSystem:
    """δ = 1 at every history of depth 2 (the overlap scan stops there)."""
    s = random_system(2, 5, seed=12, mix=0.2)
    p, q = s.reference.copy(), s.intervention.copy()
    p[s.offset[2] : s.offset[3]] = [1.0, 0.0]
    q[s.offset[2] : s.offset[3]] = [0.0, 1.0]
    return FiniteSystem(2, 5, p, q, name="tv1-later")


SYSTEMS = {
    "random_v3h5_eos": lambda: random_system(3, 5, seed=21, mix=0.1, eos=2),
    "random_v2h6": lambda: random_system(2, 6, seed=22, mix=0.05),
    "suite_v4h5_hist_eos": lambda: build_suite({})[23],
    "tv_one_first": tv_one_system,
    "tv_one_later": tv_one_later_system,
}


def exact_values(system: FiniteSystem, window: int) -> dict[str, float]:
    exact = enumerate_exact(system)
    out = exact.summary(window)
    out["T_L"] = exact.risk - exact.risk_window(window)
    return out


@pytest.mark.parametrize("method", ["naive", "swrb"])
@pytest.mark.parametrize("name", SYSTEMS)
def test_unbiased_against_exact(name, method):
    system = SYSTEMS[name]()
    window = 2
    exact = exact_values(system, window)
    result = sample(system, method, REPLICATES, seed=1000 + len(name), window=window)
    summary = summarize(result, window=True)
    for key in ESTIMATES[method]:
        est, se = summary["estimate"][key], summary["stderr"][key]
        # a (near-)constant per-replicate value must be exact up to round-off
        assert abs(est - exact[key]) <= Z_TOL * se + 1e-12, (key, est, exact[key], se)


@pytest.mark.parametrize("name", ["random_v3h5_eos", "random_v2h6", "suite_v4h5_hist_eos"])
def test_swrb_variance_below_naive(name):
    system = SYSTEMS[name]()
    exact = enumerate_exact(system)
    assert 0 < exact.p_diverge < 1
    naive = sample(system, "naive", 20_000, seed=5)
    swrb = sample(system, "swrb", 20_000, seed=6)
    assert swrb.column("R_H").var() < naive.column("R_H").var()


@pytest.mark.parametrize("method", ["naive", "swrb"])
@pytest.mark.parametrize("name", ["random_v3h5_eos", "tv_one_later"])
def test_numpy_baseline_matches_numba(name, method):
    system = SYSTEMS[name]()
    a = sample(system, method, 400, seed=77, window=2)
    b = sample_numpy(system, method, 400, seed=77, window=2)
    for column in a.values:
        np.testing.assert_array_equal(a.values[column], b.values[column], err_msg=column)
    np.testing.assert_array_equal(a.pair_evaluations, b.pair_evaluations)


def test_seeded_and_reproducible():
    system = SYSTEMS["random_v3h5_eos"]()
    a = sample(system, "swrb", 500, seed=3)
    b = sample(system, "swrb", 500, seed=3)
    c = sample(system, "swrb", 500, seed=4)
    np.testing.assert_array_equal(a.values["Z_R"], b.values["Z_R"])
    assert not np.array_equal(a.values["Z_R"], c.values["Z_R"])


def test_pair_evaluation_counts():
    system = SYSTEMS["random_v3h5_eos"]()
    H = system.horizon
    naive = sample(system, "naive", 2000, seed=8)
    assert (naive.pair_evaluations == H).all()
    swrb = sample(system, "swrb", 2000, seed=8)
    j = swrb.values["J"].astype(int)
    expected = np.where(j > 0, 2 * H - j, H)  # H overlap steps + (H − J) branch steps
    np.testing.assert_array_equal(swrb.pair_evaluations, expected)
    # δ = 1 at depth 2: the overlap scan stops after 3 evaluations and J ≤ 3
    later = sample(tv_one_later_system(), "swrb", 2000, seed=8)
    j = later.values["J"].astype(int)
    assert (j >= 1).all() and (j <= 3).all()
    np.testing.assert_array_equal(later.pair_evaluations, 3 + (5 - j))
    np.testing.assert_allclose(later.values["D"], 1.0)


def test_deterministic_kernels_give_exact_constant_estimates():
    H = 5
    n = n_nodes(2, H)
    p = np.tile([1.0, 0.0], (n, 1))
    q = np.tile([0.0, 1.0], (n, 1))
    q[0] = [1.0, 0.0]
    system = FiniteSystem(2, H, p, q)
    for method in ("naive", "swrb"):
        result = sample(system, method, 50, seed=1, window=1)
        np.testing.assert_allclose(result.column("R_H"), (H - 1) / H)
        np.testing.assert_allclose(result.column("R_L"), 2 / H)
        np.testing.assert_allclose(result.column("B_L"), (H - 3) / H)


@pytest.mark.parametrize("name", ["random_v3h5_eos", "random_v2h6"])
def test_sampled_paths_keep_each_chain_marginal(name):
    system = SYSTEMS[name]()
    R = 20_000
    xs, ys = coupled_paths(system.reference, system.intervention, system.child, system.horizon, R, 31)
    law_p, law_q = path_laws(system)[-1]
    V = system.vocab
    weights = V ** np.arange(system.horizon - 1, -1, -1)
    for paths, law in ((xs, law_p), (ys, law_q)):
        counts = np.bincount(paths @ weights, minlength=len(law))
        assert counts[law == 0].sum() == 0  # impossible paths never appear
        keep = law * R >= 5  # chi-square cells with enough expected mass; pool the rest
        observed = np.append(counts[keep], counts[~keep].sum())
        expected = np.append(law[keep], law[~keep].sum()) * R
        if expected[-1] == 0:
            observed, expected = observed[:-1], expected[:-1]
        assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_enclosure_covers_risk_and_collapses_without_capacity():
    system = SYSTEMS["random_v3h5_eos"]()
    exact = enumerate_exact(system)
    result = sample(system, "swrb", 20_000, seed=9, window=1)
    lo, hi = enclosure(result.column("R_L"), result.column("B_L"), alpha=0.05)
    assert lo <= exact.risk <= hi
    assert lo <= exact.risk_window(1) and exact.risk_window(1) + exact.capacity(1) <= hi + 1e-3
    full = sample(system, "swrb", 20_000, seed=9, window=system.horizon - 1)
    assert (full.column("B_L") == 0).all()
    lo2, hi2 = enclosure(full.column("R_L"), full.column("B_L"), alpha=0.05)
    assert lo2 <= exact.risk <= hi2 and hi2 - lo2 < hi - lo
    with pytest.raises(ValueError, match="alpha"):
        enclosure(full.column("R_L"), full.column("B_L"), alpha=1.5)


def test_mismatch_rate_ratio_estimate_for_iid_perturbation():
    p0, q0 = np.array([0.6, 0.3, 0.1]), np.array([0.5, 0.3, 0.2])  # TV 0.1 at every history pair
    system = iid_system(p0, q0, 5)
    naive = summarize(sample(system, "naive", 20_000, seed=2))
    c, se = naive["estimate"]["C_H"], naive["stderr"]["C_H"]
    assert se > 0 and abs(c - 0.1) <= Z_TOL * se
    # SWRB: Z_Π = D·0.1·(H − J)/H = 0.1·Z_E in every replicate, so its ratio is exact
    swrb = summarize(sample(system, "swrb", 1000, seed=2))
    assert swrb["estimate"]["C_H"] == pytest.approx(0.1, abs=1e-12)


def test_bad_arguments():
    system = SYSTEMS["random_v2h6"]()
    with pytest.raises(ValueError, match="method"):
        sample(system, "other", 10, seed=1)
    with pytest.raises(ValueError, match="replicates"):
        sample(system, "swrb", 0, seed=1)
    with pytest.raises(ValueError, match="window"):
        sample(system, "swrb", 10, seed=1, window=0)
    with pytest.raises(ValueError, match="seed"):
        sample(system, "swrb", 10, seed=-1)
