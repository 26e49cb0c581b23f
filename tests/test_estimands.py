"""kvdiv.estimands: one TV for numpy, torch and Numba rows; the complete coupling's estimators against their
definitions on every mismatch path, the SWRB estimators' identities, and the metrics over cubes computing both with the
shared functions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvdiv.estimands import COMPLETE_COLUMNS, SWRB_COLUMNS, complete_estimates, swrb_estimates, tv, tv_rows


def test_tv_is_half_the_l1_distance_for_numpy_torch_and_rows():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(7), size=5), rng.dirichlet(np.ones(7), size=5)
    expected = np.array([0.5 * sum(abs(a - b) for a, b in zip(p[i], q[i])) for i in range(5)])
    np.testing.assert_allclose(tv(p, q), expected, rtol=1e-15)
    np.testing.assert_allclose(tv(torch.from_numpy(p), torch.from_numpy(q)).numpy(), expected, rtol=1e-15)
    np.testing.assert_allclose([tv_rows(p, i, q, i) for i in range(5)], expected, rtol=1e-15)
    assert tv(p[0], p[0]) == 0.0 and tv(np.eye(3)[0], np.eye(3)[1]) == 1.0  # identical laws; disjoint supports


def _paths(horizon: int) -> np.ndarray:
    """Every mismatch path 1{x_t ≠ y_t}, t = 1..H: bool [2^H, H]."""
    return (np.arange(2**horizon)[:, None] >> np.arange(horizon)[None, :]) & 1 == 1


def _by_definition(m: np.ndarray, window: int) -> dict[str, float]:
    """The complete coupling's estimators of one mismatch path, from their definitions (docs/estimators.md)."""
    horizon = len(m)
    hits = np.flatnonzero(m)
    tau = int(hits[0]) + 1 if hits.size else 0
    after = m[tau:].sum() if tau else 0  # Σ_{t>τ}
    near = m[tau : tau + window].sum() if tau else 0  # Σ_{τ<t≤τ+L}
    return {
        "M": m.sum() / horizon,
        "O": (tau > 0) / horizon,
        "Pi": after / horizon,
        "E": (horizon - tau) / horizon if tau else 0.0,
        "diverged": float(tau > 0),
        "M_L": ((tau > 0) + near) / horizon,
        "M_T": (after - near) / horizon,
        "W_L": max(0, horizon - tau - window) / horizon if tau else 0.0,
        "tau": float(tau),
    }


@pytest.mark.parametrize("horizon,window", [(6, 2), (5, 1), (4, 9)])
def test_complete_estimates_match_their_definitions_on_every_path(horizon, window):
    out = np.empty(len(COMPLETE_COLUMNS))
    for m in _paths(horizon):
        expected = _by_definition(m, window)
        tau = int(expected["tau"])
        near = float(m[tau : tau + window].sum()) if tau else 0.0
        complete_estimates(float(m.sum()), tau, near, horizon, window, out)
        z = dict(zip(COMPLETE_COLUMNS, out))
        for key in COMPLETE_COLUMNS:
            assert z[key] == pytest.approx(expected[key], rel=1e-15, abs=0.0), (m, key)
        assert z["M"] == pytest.approx(z["O"] + z["Pi"], rel=1e-15) and z["M"] == pytest.approx(z["M_L"] + z["M_T"])


def test_metrics_compute_the_complete_columns_with_the_shared_formula():
    """On every mismatch path of length 6, the cube metrics' per-row sums go through complete_estimates exactly (the
    finite-state naive sampler calls the same function; its unbiasedness is tested in tests/finite/)."""
    from kvdiv.metric_kernels import complete_estimators, replicate_counts

    horizon, window = 6, 2
    mismatch = _paths(horizon)
    zeros = np.zeros(mismatch.shape)
    tau, _, sums = replicate_counts(mismatch, zeros, zeros, np.zeros(mismatch.shape, dtype=bool), window)
    z = complete_estimators(tau, sums, horizon, window)
    expected = np.empty(len(COMPLETE_COLUMNS))
    for row, m in enumerate(mismatch):
        t = int(_by_definition(m, window)["tau"])
        complete_estimates(float(m.sum()), t, float(m[t : t + window].sum()) if t else 0.0, horizon, window, expected)
        np.testing.assert_array_equal(z[row], expected)


@pytest.mark.parametrize(
    "d,j,horizon,window,branch,near", [(0.3, 2, 8, 3, 2.5, 1.25), (1.0, 8, 8, 2, 0.0, 0.0), (0.05, 1, 5, 9, 3.0, 3.0)]
)
def test_swrb_identities(d, j, horizon, window, branch, near):
    out = np.empty(len(SWRB_COLUMNS))
    swrb_estimates(d, j, horizon, window, branch, near, out)
    z = dict(zip(SWRB_COLUMNS, out))
    assert z["D"] == d and z["J"] == j and z["Z_O"] == d / horizon
    assert z["Z_R"] == pytest.approx(z["Z_O"] + z["Z_Pi"], rel=1e-15)
    assert z["Z_R"] == pytest.approx(z["Z_L"] + z["Z_T"], rel=1e-15)
    assert z["Z_E"] == d * (horizon - j) / horizon and z["W_L"] == d * max(0, horizon - j - window) / horizon


def test_swrb_estimates_vanish_without_a_branch():
    out = np.full(len(SWRB_COLUMNS), 7.0)
    swrb_estimates(0.0, 0, 8, 2, 0.0, 0.0, out)
    assert not out.any()


def test_metrics_compute_the_swrb_columns_with_the_shared_formula():
    """From one stored overlap path and branch, the cube metrics give exactly swrb_estimates(D, J, Σ, Σ_L) (the
    finite-state sampler calls the same function; its unbiasedness is tested in tests/finite/)."""
    from kvdiv.metric_kernels import swrb_estimators

    horizon, window = 6, 2
    overlap = np.array([[0.0, 0.1, 0.2, 0.05, 0.3, 0.1]])
    branch_tv = np.array([[0.0, 0.0, 0.4, 0.5, 0.6, 0.7]])
    j = np.array([3])
    z = swrb_estimators(overlap, branch_tv, j, window)[0]
    d = 1.0 - np.prod(1.0 - overlap[0])
    expected = np.empty(len(SWRB_COLUMNS))
    swrb_estimates(d, 3, horizon, window, 0.5 + 0.6 + 0.7, 0.5 + 0.6, expected)
    np.testing.assert_array_equal(z, expected)
