"""Exact enumeration of kvdiv.finite.exact against brute-force path enumeration and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from finite_helpers import brute_force, iid_system, n_nodes, random_system

from kvdiv.finite.exact import coupled_marginals, enumerate_exact, orders_identified, path_laws
from kvdiv.finite.suite import build_suite
from kvdiv.finite.system import FiniteSystem, system_from_dict


def tv_one_system(horizon: int = 4) -> FiniteSystem:
    """P(·|"") and Q(·|"") have disjoint supports (δ_1 = 1); random kernels afterwards."""
    s = random_system(3, horizon, seed=11)
    p, q = s.reference.copy(), s.intervention.copy()
    p[0], q[0] = [1.0, 0.0, 0.0], [0.0, 0.5, 0.5]
    return FiniteSystem(3, horizon, p, q, name="tv1")


def deterministic_system(horizon: int = 5) -> FiniteSystem:
    """P always emits 0; Q emits 0 at the first step and 1 afterwards: τ = 2 and every later step differs."""
    n = n_nodes(2, horizon)
    p = np.tile([1.0, 0.0], (n, 1))
    q = np.tile([0.0, 1.0], (n, 1))
    q[0] = [1.0, 0.0]
    return FiniteSystem(2, horizon, p, q, name="deterministic")


SYSTEMS = {
    "random_v2h4": lambda: random_system(2, 4, seed=1),
    "random_v3h3_eos": lambda: random_system(3, 3, seed=2, mix=0.5, eos=2),
    "random_v3h4_eos": lambda: random_system(3, 4, seed=3, eos=0),
    "tv_one": tv_one_system,
    "deterministic": deterministic_system,
}


@pytest.mark.parametrize("name", SYSTEMS)
def test_enumeration_matches_brute_force_paths(name):
    system = SYSTEMS[name]()
    exact = enumerate_exact(system)
    p_tau, joint, laws_x, laws_y = brute_force(system)
    np.testing.assert_allclose(exact.p_tau, p_tau, atol=1e-13)
    np.testing.assert_allclose(exact.joint, joint, atol=1e-13)
    H = system.horizon
    # risk straight from the path law: E[M] = (1/H) Σ_t P(x_t ≠ y_t)
    assert exact.risk == pytest.approx(joint.sum() / H, abs=1e-13)
    # marginals of the full paths under the coupling are P and Q
    law_p, law_q = path_laws(system)[-1]
    for laws, target in ((laws_x, law_p), (laws_y, law_q)):
        dense = np.zeros_like(target)
        for path, prob in laws.items():
            dense[_local(path, system.vocab)] += prob
        np.testing.assert_allclose(dense, target, atol=1e-13)


def _local(path, vocab):
    local = 0
    for t in path:
        local = local * vocab + t
    return local


@pytest.mark.parametrize("name", SYSTEMS)
def test_decomposition_identity_and_window_bounds(name):
    system = SYSTEMS[name]()
    exact = enumerate_exact(system)
    H = system.horizon
    assert exact.risk == pytest.approx(exact.occurrence + exact.occupation, abs=1e-14)
    for L in range(1, H + 2):
        r_l, b_l = exact.risk_window(L), exact.capacity(L)
        assert r_l <= exact.risk + 1e-14
        assert exact.risk <= r_l + b_l + 1e-14
        mid, err = exact.midpoint(L)
        assert abs(exact.risk - mid) <= err + 1e-14
        if L >= H - 1:
            assert b_l == 0.0
            assert r_l == pytest.approx(exact.risk, abs=1e-14)


@pytest.mark.parametrize("vocab,horizon,tv", [(2, 5, 0.2), (3, 4, 0.05), (4, 3, 0.5), (3, 2, 0.3)])
def test_history_independent_perturbation(vocab, horizon, tv):
    rng = np.random.default_rng(vocab * 100 + horizon)
    p0 = rng.dirichlet(np.ones(vocab))
    k = int(np.argmin(p0))
    lam = tv / (1 - p0[k])
    q0 = (1 - lam) * p0
    q0[k] += lam
    system = iid_system(p0, q0, horizon)
    exact = enumerate_exact(system)
    assert exact.occupation == pytest.approx(tv * exact.exposure, rel=1e-12)
    assert exact.mismatch_rate == pytest.approx(tv, rel=1e-12)
    assert exact.p_diverge == pytest.approx(1 - (1 - tv) ** horizon, rel=1e-12)
    np.testing.assert_allclose(exact.mismatch, tv, rtol=1e-12)  # every step mismatches w.p. δ = e
    prof = exact.profile(horizon)
    np.testing.assert_allclose(prof[~np.isnan(prof)], tv, rtol=1e-12)


@pytest.mark.parametrize("name", SYSTEMS)
def test_coupling_preserves_marginals_exactly(name):
    system = SYSTEMS[name]()
    for (cx, cy), (px, qy) in zip(coupled_marginals(system), path_laws(system)):
        np.testing.assert_allclose(cx, px, atol=1e-14)
        np.testing.assert_allclose(cy, qy, atol=1e-14)


def test_suite_member_marginals_and_identity():
    system = build_suite({})[23]  # the largest shape with EOS
    for (cx, cy), (px, qy) in zip(coupled_marginals(system), path_laws(system)):
        np.testing.assert_allclose(cx, px, atol=1e-13)
        np.testing.assert_allclose(cy, qy, atol=1e-13)
    exact = enumerate_exact(system)
    assert exact.risk == pytest.approx(exact.occurrence + exact.occupation, abs=1e-14)


def test_eos_absorption_closed_form():
    """V = 2, eos = 1, H = 2: R_H = (a − b)(1 + (1 − b) + (1 − a))/2 for P(eos) = a > Q(eos) = b."""
    a, b = 0.3, 0.1
    data = {
        "vocab": 2,
        "horizon": 2,
        "eos": 1,
        "reference": {"": [1 - a, a], "0": [1 - a, a], "1": [0.5, 0.5]},  # "1" continues past EOS: replaced
        "intervention": {"": [1 - b, b], "0": [1 - b, b]},
    }
    system = system_from_dict(data)
    np.testing.assert_array_equal(system.reference[system.node((1,))], [0.0, 1.0])
    np.testing.assert_array_equal(system.intervention[system.node((1,))], [0.0, 1.0])
    exact = enumerate_exact(system)
    assert exact.risk == pytest.approx((a - b) * (1 + (1 - b) + (1 - a)) / 2, abs=1e-15)
    # after EOS the x chain stays at EOS: P(x_2 = eos | x_1 = eos) = 1 under the coupling
    law_x2 = coupled_marginals(system)[1][0]
    assert law_x2[1 * 2 + 0] == 0.0 and law_x2[1 * 2 + 1] == pytest.approx(a)


def test_tv_one_at_first_step():
    system = tv_one_system(4)
    exact = enumerate_exact(system)
    assert exact.p_diverge == 1.0
    assert exact.p_tau[0] == 1.0
    assert exact.occurrence == pytest.approx(1 / 4)
    assert exact.exposure == pytest.approx(3 / 4)


def test_deterministic_kernels():
    H = 5
    exact = enumerate_exact(deterministic_system(H))
    assert exact.p_tau.tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]
    assert exact.risk == pytest.approx((H - 1) / H)
    assert exact.mismatch_rate == pytest.approx(1.0)
    assert exact.risk_window(1) == pytest.approx(2 / H)
    assert exact.capacity(1) == pytest.approx((H - 2 - 1) / H)


def test_orders_identified():
    base = random_system(3, 4, seed=5, mix=0.05)
    strong = random_system(3, 4, seed=5, mix=0.9)
    assert not orders_identified(base, base, 1)  # identical intervals overlap
    H = base.horizon
    assert orders_identified(base, strong, H - 1)  # B_L = 0: intervals are the distinct risks
    e_base, e_strong = enumerate_exact(base), enumerate_exact(strong)
    assert e_base.risk < e_strong.risk
    lo, hi = e_base.interval(1)
    assert hi - lo == pytest.approx(e_base.capacity(1))
