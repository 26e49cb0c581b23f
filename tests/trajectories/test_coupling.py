"""The one-step maximal coupling: marginals, mismatch probability, residual laws, numerics."""

from __future__ import annotations


import numpy as np
import pytest
from scipy import stats

from kvdiv.trajectories.coupling import (
    categorical,
    couple,
    couple_to_reference,
    overlap_draw,
    reference_draw,
    residual_draw,
    tv_distance,
)

P = np.array([0.4, 0.3, 0.2, 0.1, 0.0, 0.0])
Q = np.array([0.1, 0.3, 0.1, 0.2, 0.3, 0.0])
N = 100_000


def chi2_pvalue(samples: np.ndarray, law: np.ndarray) -> float:
    support = law > 0
    assert np.all(np.isin(samples, np.flatnonzero(support))), "a zero-probability token was drawn"
    counts = np.bincount(samples, minlength=len(law))[support]
    return stats.chisquare(counts, law[support] * len(samples)).pvalue


def test_marginals_and_mismatch_probability():
    rng = np.random.default_rng(0)
    x, y, tv = couple(np.tile(P, (N, 1)), np.tile(Q, (N, 1)), rng, tv_atol=0.0)
    delta = 0.5 * np.abs(P - Q).sum()
    assert np.allclose(tv, delta)
    assert chi2_pvalue(x, P) > 1e-3
    assert chi2_pvalue(y, Q) > 1e-3
    se = np.sqrt(delta * (1 - delta) / N)
    assert abs(np.mean(x != y) - delta) < 4 * se
    # given a mismatch, x ~ (p-q)+/δ and y ~ (q-p)+/δ; given a match, the token ~ min(p,q)/(1-δ)
    diff = x != y
    assert chi2_pvalue(x[diff], np.clip(P - Q, 0, None) / delta) > 1e-3
    assert chi2_pvalue(y[diff], np.clip(Q - P, 0, None) / delta) > 1e-3
    assert chi2_pvalue(x[~diff], np.minimum(P, Q) / (1 - delta)) > 1e-3


def test_identical_laws_never_differ_and_disjoint_always_do():
    rng = np.random.default_rng(1)
    x, y, tv = couple(np.tile(P, (1000, 1)), np.tile(P, (1000, 1)), rng, tv_atol=0.0)
    assert np.array_equal(x, y) and np.all(tv == 0)
    a, b = np.array([0.5, 0.5, 0, 0]), np.array([0, 0, 0.25, 0.75])
    x, y, tv = couple(np.tile(a, (1000, 1)), np.tile(b, (1000, 1)), rng, tv_atol=0.0)
    assert np.all(tv == 1) and np.all(np.isin(x, [0, 1])) and np.all(np.isin(y, [2, 3]))


def test_round_off_is_safe():
    # tiny negatives clipped, almost-equal laws, uniforms at the top of [0, 1)
    p = np.array([[0.5, 0.5 + 1e-17, -1e-18, 0.0]])
    q = np.array([[0.5 + 1e-17, 0.5, 0.0, 0.0]])
    top = np.nextafter(1.0, 0.0)
    x, y, tv = couple(p, q, np.array([[top, top, top]]), tv_atol=0.0)
    assert x[0] in (0, 1) and y[0] in (0, 1) and 0 <= tv[0] < 1e-15
    assert categorical(np.array([[0.0, 1.0, 0.0]]), np.array([top]))[0] == 1
    assert categorical(np.array([[0.0, 1.0, 0.0]]), np.array([0.0]))[0] == 1
    with pytest.raises(ValueError, match="uniforms"):
        couple(p, q, np.array([[1.0, 0.0, 0.0]]), tv_atol=0.0)
    with pytest.raises(ValueError, match="same shape"):
        couple(p, q[:, :3], np.zeros((1, 3)), tv_atol=0.0)


def test_rows_are_independent_streams():
    """Row k's draw depends only on its own laws and uniforms, not on the other rows."""
    rng = np.random.default_rng(2)
    u = rng.random((50, 3))
    ps, qs = rng.dirichlet(np.ones(7), 50), rng.dirichlet(np.ones(7), 50)
    x, y, tv = couple(ps, qs, u, tv_atol=0.0)
    for k in (0, 17, 49):
        xk, yk, tvk = couple(ps[k], qs[k], u[k : k + 1], tv_atol=0.0)
        assert (xk[0], yk[0]) == (x[k], y[k]) and tvk[0] == tv[k]
    assert np.allclose(tv, tv_distance(ps, qs, tv_atol=0.0))
    # the shared-reference step draws only the rows that reject x_t: every row's value is still its own
    x = reference_draw(ps, u[:, 0])
    y, tv = couple_to_reference(ps, qs, x, u[:, 1:], tv_atol=0.0)
    assert 10 < np.sum(x != y) < 50  # both branches taken
    for k in range(50):
        yk, tvk = couple_to_reference(ps[k], qs[k], x[k : k + 1], u[k : k + 1, 1:], tv_atol=0.0)
        assert yk[0] == y[k] and tvk[0] == tv[k]


def test_overlap_and_residual_draws():
    rng = np.random.default_rng(3)
    delta = 0.5 * np.abs(P - Q).sum()
    u, hazard = overlap_draw(np.tile(P, (N, 1)), np.tile(Q, (N, 1)), rng, tv_atol=0.0)
    assert np.allclose(hazard, delta)
    assert chi2_pvalue(u, np.minimum(P, Q) / (1 - delta)) > 1e-3
    x, y = residual_draw(np.tile(P, (N, 1)), np.tile(Q, (N, 1)), rng)
    assert np.all(x != y)
    assert chi2_pvalue(x, np.clip(P - Q, 0, None) / delta) > 1e-3
    assert chi2_pvalue(y, np.clip(Q - P, 0, None) / delta) > 1e-3
    with pytest.raises(ValueError, match="δ > 0"):
        residual_draw(P, P, rng)
    # no overlap at all: the scan continues with a draw from p
    u, hazard = overlap_draw(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), rng, tv_atol=0.0)
    assert u[0] == 0 and hazard[0] == 1


def test_tv_below_tolerance_counts_as_zero():
    rng = np.random.default_rng(4)
    noisy = P + np.array([1e-9, -1e-9, 0, 0, 0, 0])
    x, y, tv = couple(np.tile(P, (2000, 1)), np.tile(noisy, (2000, 1)), rng, tv_atol=1e-6)
    assert np.all(tv == 0) and np.array_equal(x, y) and chi2_pvalue(x, P) > 1e-3
    u, hazard = overlap_draw(P, noisy, rng, tv_atol=1e-6)
    assert hazard[0] == 0
    assert tv_distance(P, noisy, tv_atol=0.0)[0] > 0 and tv_distance(P, noisy, 1e-6)[0] == 0
    x, y, tv = couple(np.tile(P, (N, 1)), np.tile(Q, (N, 1)), rng, tv_atol=1e-6)  # real gaps untouched
    assert np.all(tv > 0.3) and abs(np.mean(x != y) - tv[0]) < 4 * np.sqrt(tv[0] * (1 - tv[0]) / N)


def test_fold_eos_moves_end_mass_onto_the_absorbing_id():
    from kvdiv.trajectories.coupling import fold_eos

    laws = np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    folded = fold_eos(laws, [2, 0, 2])
    np.testing.assert_allclose(folded, [[0.0, 0.2, 0.4, 0.4], [0.0, 0.25, 0.5, 0.25]])
    np.testing.assert_allclose(laws[0], [0.1, 0.2, 0.3, 0.4])  # a copy
    assert fold_eos(laws, [2]) is laws and fold_eos(laws, [1, 1]) is laws  # one id: nothing to fold
