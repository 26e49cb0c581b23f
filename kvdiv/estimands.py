"""Formulas written once and used by the finite-state samplers, the LLM samplers and the metrics over cubes.

Notation of arXiv 2609.16617: steps t = 1..H, δ_t = ``tv``, τ = ``tau``, J = the branch start, L = ``window``.

**Total variation.** δ = TV(p, q) = ½‖p − q‖₁ = ½ Σ_k |p_k − q_k|: :func:`tv` over the last axis of numpy arrays
or torch tensors (the coupling's δ_t and fixed-history TV, the exact enumeration, the kernel tests), and
:func:`tv_rows`, the same sum for rows of two tables inside Numba kernels (the finite-state samplers).

**Residual-branch conditional Monte Carlo (SWRB)**, per replicate. Along the overlap scan
S_t = Π_{s≤t}(1 − δ_s), w_j = S_{j−1} δ_j and D = Σ_j w_j = 1 − S_H; J ~ w_j/D is the branch start and δ_t
for t > J the TV along the branch. With Σ = Σ_{t>J} δ_t and Σ_L = Σ_{t=J+1}^{min(J+L, H)} δ_t
(:func:`swrb_estimates`, columns :data:`SWRB_COLUMNS`):

    Z_O = D/H,  Z_Π = D·Σ/H,  Z_R = D(1 + Σ)/H = Z_O + Z_Π,  Z_E = D(H − J)/H,
    Z_L = D(1 + Σ_L)/H,  Z_T = D(Σ − Σ_L)/H,  W_L = D·max(0, H − J − L)/H,

with E[Z_R] = R_H, E[Z_O] = O_H, E[Z_Π] = Π_H, E[Z_E] = E_H, E[D] = P(τ ≤ H), E[Z_L] = R_L, E[Z_T] = R_H − R_L
and E[W_L] = B_L. All vanish when D = 0.
"""

from __future__ import annotations

import numba
import numpy as np

#: The columns of :func:`swrb_estimates`, in its output order.
SWRB_COLUMNS = ("Z_R", "Z_O", "Z_Pi", "Z_E", "D", "Z_L", "Z_T", "W_L", "J")


def tv(p, q):
    """δ = ½‖p − q‖₁ along the last axis (numpy arrays or torch tensors, broadcasting)."""
    return 0.5 * abs(p - q).sum(-1)


@numba.njit(cache=True)
def tv_rows(P: np.ndarray, i: int, Q: np.ndarray, j: int) -> float:
    """δ = TV(P[i], Q[j]) = ½ Σ_k |P[i, k] − Q[j, k]| for rows of two tables (by index: no array views), summed
    in order of k."""
    acc = 0.0
    for k in range(P.shape[1]):
        acc += abs(P[i, k] - Q[j, k])
    return 0.5 * acc


@numba.njit(cache=True)
def swrb_estimates(d: float, j: int, horizon: int, window: int, branch: float, near: float, out: np.ndarray) -> None:
    """Fill ``out`` (:data:`SWRB_COLUMNS`) with one replicate's SWRB estimators (module docstring).

    ``d`` = D, ``j`` = J (1-based), ``branch`` = Σ_{t>J} δ_t and ``near`` = Σ_{t=J+1}^{min(J+L, H)} δ_t along the
    branch, ``window`` = L. Everything is 0 when D = 0 (no branch).
    """
    if d <= 0.0:
        for k in range(out.shape[0]):
            out[k] = 0.0
        return
    out[0] = d * (1.0 + branch) / horizon
    out[1] = d / horizon
    out[2] = d * branch / horizon
    out[3] = d * (horizon - j) / horizon
    out[4] = d
    out[5] = d * (1.0 + near) / horizon
    out[6] = d * (branch - near) / horizon
    out[7] = d * max(0, horizon - j - window) / horizon
    out[8] = j
