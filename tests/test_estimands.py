"""kvdiv.estimands: one TV for numpy, torch and Numba rows; the SWRB estimators' identities, and the metrics over
cubes computing them with the shared function."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvdiv.estimands import SWRB_COLUMNS, swrb_estimates, tv, tv_rows


def test_tv_is_half_the_l1_distance_for_numpy_torch_and_rows():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(7), size=5), rng.dirichlet(np.ones(7), size=5)
    expected = np.array([0.5 * sum(abs(a - b) for a, b in zip(p[i], q[i])) for i in range(5)])
    np.testing.assert_allclose(tv(p, q), expected, rtol=1e-15)
    np.testing.assert_allclose(tv(torch.from_numpy(p), torch.from_numpy(q)).numpy(), expected, rtol=1e-15)
    np.testing.assert_allclose([tv_rows(p, i, q, i) for i in range(5)], expected, rtol=1e-15)
    assert tv(p[0], p[0]) == 0.0 and tv(np.eye(3)[0], np.eye(3)[1]) == 1.0  # identical laws; disjoint supports


@pytest.mark.parametrize("d,j,horizon,window,branch,near", [(0.3, 2, 8, 3, 2.5, 1.25), (1.0, 8, 8, 2, 0.0, 0.0), (0.05, 1, 5, 9, 3.0, 3.0)])
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
    from kvdiv.metrics import swrb_estimators

    horizon, window = 6, 2
    overlap = np.array([[0.0, 0.1, 0.2, 0.05, 0.3, 0.1]])
    branch_tv = np.array([[0.0, 0.0, 0.4, 0.5, 0.6, 0.7]])
    j = np.array([3])
    z = swrb_estimators(overlap, branch_tv, j, window)[0]
    d = 1.0 - np.prod(1.0 - overlap[0])
    expected = np.empty(len(SWRB_COLUMNS))
    swrb_estimates(d, 3, horizon, window, 0.5 + 0.6 + 0.7, 0.5 + 0.6, expected)
    np.testing.assert_array_equal(z, expected)
