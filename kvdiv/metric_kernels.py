"""The Numba kernels of :mod:`kvdiv.metrics`: first events, per-replicate sums and estimators (complete coupling and
SWRB, written once in :mod:`kvdiv.estimands`) and the depth-aligned profile, over plain arrays.
Formulas: docs/estimators.md#per-row-metrics.
"""

from __future__ import annotations

import numba
import numpy as np

from kvdiv.estimands import COMPLETE_COLUMNS, SWRB_COLUMNS, complete_estimates, swrb_estimates

CUBE_VARIABLES = ("match", "tv", "fixed_tv", "eos_x", "eos_y")


@numba.njit(cache=True)
def first_true(flags: np.ndarray) -> np.ndarray:
    """1-based index of the first True per row of ``flags`` [N, H]; H + 1 where there is none."""
    n, horizon = flags.shape
    out = np.full(n, horizon + 1, dtype=np.int64)
    for i in range(n):
        for t in range(horizon):
            if flags[i, t]:
                out[i] = t + 1
                break
    return out


@numba.njit(cache=True)
def replicate_counts(mismatch: np.ndarray, tv: np.ndarray, fixed_tv: np.ndarray, eos_any: np.ndarray, window: int):
    """Per-row sums behind the replicate metrics.

    Parameters
    ----------
    mismatch, eos_any : bool [N, H]
    tv, fixed_tv : float [N, H]
    window : int, L

    Returns
    -------
    tau, first_eos : int64 [N] (1-based; H + 1 = none)
    sums : float64 [N, 7] — Σ mismatch, Σ_{t>τ} mismatch, Σ δ, Σ fixed δ, Σ_{t≤t_e} mismatch,
        Σ_{t<t_e} mismatch, Σ_{ℓ=1}^{min(L,H−τ)} mismatch_{τ+ℓ}
    """
    n, horizon = mismatch.shape
    tau = first_true(mismatch)
    first_eos = first_true(eos_any)
    sums = np.zeros((n, 7))
    for i in range(n):
        for t in range(1, horizon + 1):
            m = 1.0 if mismatch[i, t - 1] else 0.0
            sums[i, 0] += m
            if t > tau[i]:
                sums[i, 1] += m
                if t <= tau[i] + window:
                    sums[i, 6] += m
            sums[i, 2] += tv[i, t - 1]
            sums[i, 3] += fixed_tv[i, t - 1]
            if t <= first_eos[i]:
                sums[i, 4] += m
            if t < first_eos[i]:
                sums[i, 5] += m
    return tau, first_eos, sums


#: The columns of ``replicates.parquet`` the complete coupling's estimators fill, and the estimator each holds.
COMPLETE_METRICS = {
    "occurrence": "O",
    "exposure": "E",
    "occupation": "Pi",
    "mismatch": "M",
    "risk_window": "M_L",
    "capacity": "W_L",
}


@numba.njit(cache=True)
def complete_estimators(tau: np.ndarray, sums: np.ndarray, horizon: int, window: int) -> np.ndarray:
    """The complete coupling's estimators per row: columns :data:`kvdiv.estimands.COMPLETE_COLUMNS` from
    :func:`kvdiv.estimands.complete_estimates`, with ``tau`` and ``sums`` from :func:`replicate_counts`."""
    n = tau.shape[0]
    out = np.zeros((n, len(COMPLETE_COLUMNS)))
    for i in range(n):
        t = tau[i] if tau[i] <= horizon else 0
        complete_estimates(sums[i, 0], t, sums[i, 6], horizon, window, out[i])
    return out


#: The swrb-mode columns of ``replicates.parquet`` and the estimator of :mod:`kvdiv.estimands` each holds.
SWRB_METRICS = {
    "d": "D",
    "z_o": "Z_O",
    "z_pi": "Z_Pi",
    "z_r": "Z_R",
    "z_l": "Z_L",
    "z_t": "Z_T",
    "w_l": "W_L",
    "z_e": "Z_E",
}


@numba.njit(cache=True)
def swrb_estimators(overlap_tv: np.ndarray, tv: np.ndarray, branch_start: np.ndarray, window: int) -> np.ndarray:
    """SWRB conditional Monte Carlo per row: columns :data:`kvdiv.estimands.SWRB_COLUMNS` from
    :func:`kvdiv.estimands.swrb_estimates`.

    ``overlap_tv`` [N, H]: hazards along the overlap scan (D = 1 − Π_t (1 − δ_t)); ``tv`` [N, H]: δ along the
    branch path; ``branch_start`` [N]: 1-based J (0 when D = 0).
    """
    n, horizon = tv.shape
    out = np.zeros((n, len(SWRB_COLUMNS)))
    for i in range(n):
        survival = 1.0
        for t in range(horizon):
            survival *= 1.0 - overlap_tv[i, t]
        d = 1.0 - survival
        j = branch_start[i]
        if j <= 0:
            d = 0.0
        branch = 0.0
        near = 0.0
        if j > 0:
            for t in range(j + 1, horizon + 1):
                branch += tv[i, t - 1]
                if t <= j + window:
                    near += tv[i, t - 1]
        swrb_estimates(d, j, horizon, window, branch, near, out[i])
    return out


@numba.njit(cache=True)
def aligned_profile(tau: np.ndarray, tv: np.ndarray, mismatch: np.ndarray, first_eos: np.ndarray):
    """Long-format divergence-aligned profile: for each row with τ ≤ H and depth ℓ = 1..H−τ, the
    row index, ℓ, δ_{τ+ℓ}, 1{x_{τ+ℓ} ≠ y_{τ+ℓ}} and whether τ+ℓ < t_e (strictly before any EOS)."""
    n, horizon = tv.shape
    total = 0
    for i in range(n):
        if tau[i] <= horizon:
            total += horizon - tau[i]
    row = np.empty(total, dtype=np.int64)
    depth = np.empty(total, dtype=np.int32)
    out_tv = np.empty(total, dtype=np.float32)
    out_m = np.empty(total, dtype=np.bool_)
    pre_eos = np.empty(total, dtype=np.bool_)
    k = 0
    for i in range(n):
        if tau[i] > horizon:
            continue
        for t in range(tau[i] + 1, horizon + 1):
            row[k] = i
            depth[k] = t - tau[i]
            out_tv[k] = tv[i, t - 1]
            out_m[k] = mismatch[i, t - 1]
            pre_eos[k] = t < first_eos[i]
            k += 1
    return row, depth, out_tv, out_m, pre_eos
