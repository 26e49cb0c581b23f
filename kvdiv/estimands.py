"""Formulas written once and used by the finite-state samplers, the LLM samplers and the metrics over cubes.

- total variation: :func:`tv` (numpy or torch, last axis), :func:`tv_rows` (rows of two tables, in Numba kernels);
- per replicate, the complete coupling's estimators M, O, Π, E, M_L, M_T, W_L (:func:`complete_estimates`) and the
  SWRB estimators Z_O, Z_Π, Z_R, Z_E, Z_L, Z_T, W_L (:func:`swrb_estimates`);
- the (1 − α) enclosure of R_H (:func:`enclosure`, §4.3), the variance–cost aggregates over cells
  (:func:`variance_cost_aggregates`, §4.4) and kernel-pair evaluations per replicate (:func:`pair_evaluations`).

The mathematics: docs/estimators.md#the-naive-coupled-sample, #residual-branch-estimation-swrb, #enclosure-of-r_h
and #variance-and-cost.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

#: The columns of :func:`complete_estimates`, in its output order.
COMPLETE_COLUMNS = ("M", "O", "Pi", "E", "diverged", "M_L", "M_T", "W_L", "tau")
#: The columns of :func:`swrb_estimates`, in its output order.
SWRB_COLUMNS = ("Z_R", "Z_O", "Z_Pi", "Z_E", "D", "Z_L", "Z_T", "W_L", "J")


def tv(p, q):
    """δ = ½‖p − q‖₁ along the last axis (numpy arrays or torch tensors, broadcasting)."""
    if isinstance(p, np.ndarray) and isinstance(q, np.ndarray):
        diff = np.subtract(p, q)  # one temporary, |·| in place: the same values as abs(p - q)
        return 0.5 * np.abs(diff, out=diff).sum(-1)
    return 0.5 * abs(p - q).sum(-1)


def _tv_rows(P: np.ndarray, i: int, Q: np.ndarray, j: int) -> float:
    """δ = TV(P[i], Q[j]) = ½ Σ_k |P[i, k] − Q[j, k]| for rows of two tables (by index: no array views), summed
    in order of k."""
    acc = 0.0
    for k in range(P.shape[1]):
        acc += abs(P[i, k] - Q[j, k])
    return 0.5 * acc


def _complete_estimates(count: float, tau: int, in_window: float, horizon: int, window: int, out: np.ndarray) -> None:
    """Fill ``out`` (:data:`COMPLETE_COLUMNS`) with one complete-coupling replicate's estimators.

    ``count`` = Σ_t 1{x_t ≠ y_t}, ``tau`` = τ (1-based; 0 when x and y never split), ``in_window`` =
    Σ_{t=τ+1}^{min(τ+L, H)} 1{x_t ≠ y_t}, ``window`` = L: M = count/H, O = 1{τ>0}/H, Π = M − O,
    E = (H − τ)/H, M_L = O + in_window/H, M_T = M − M_L, W_L = (H − τ − L)⁺/H (E and W_L 0 without divergence).
    """
    hit = 1.0 if tau > 0 else 0.0
    out[0] = count / horizon
    out[1] = hit / horizon
    out[2] = (count - hit) / horizon
    out[3] = (horizon - tau) / horizon if tau > 0 else 0.0
    out[4] = hit
    out[5] = (hit + in_window) / horizon
    out[6] = (count - hit - in_window) / horizon
    out[7] = max(0, horizon - tau - window) / horizon if tau > 0 else 0.0
    out[8] = tau


def _swrb_estimates(d: float, j: int, horizon: int, window: int, branch: float, near: float, out: np.ndarray) -> None:
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


#: The Numba kernels of this module, compiled on first access (module ``__getattr__``): importing kvdiv.estimands
#: for :func:`tv` (every trajectory job, through kvdiv.trajectories.coupling) does not pay Numba's import.
_KERNELS = {"tv_rows": _tv_rows, "swrb_estimates": _swrb_estimates, "complete_estimates": _complete_estimates}


def __getattr__(name: str):
    if name in _KERNELS:
        import numba

        kernel = numba.njit(cache=True)(_KERNELS[name])
        globals()[name] = kernel
        return kernel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def enclosure(z_window: np.ndarray, w_capacity: np.ndarray, alpha: float = 0.05) -> tuple[float, float]:
    """The (1 − α) enclosure of R_H from sampled profiles: [LCB(Z_L), UCB(Z_L + W_L)], each at α/2.

    Normal-approximation one-sided bounds: mean ∓ z_{1−α/2} · stderr over the n measurements (n ≥ 2).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    z_window = np.asarray(z_window, dtype=np.float64)
    w_capacity = np.asarray(w_capacity, dtype=np.float64)
    if z_window.shape != w_capacity.shape or z_window.ndim != 1:
        raise ValueError(f"z_window and w_capacity must be 1-d of one length, got {z_window.shape}, {w_capacity.shape}")
    n = len(z_window)
    if n < 2:
        raise ValueError(f"the enclosure needs >= 2 measurements, got {n}")
    z = NormalDist().inv_cdf(1 - alpha / 2)
    upper = z_window + w_capacity
    lo = z_window.mean() - z * z_window.std(ddof=1) / math.sqrt(n)
    hi = upper.mean() + z * upper.std(ddof=1) / math.sqrt(n)
    return float(lo), float(hi)


def pair_evaluations(
    mode: str, horizon: int, branch_start: np.ndarray | None = None, replicates: int = 0
) -> np.ndarray:
    """Kernel-pair evaluations per replicate as the paper counts them: H (``complete``, ``replicates`` of them);
    H + (H − J) (``swrb``; J = ``branch_start``, 0 when D = 0: H)."""
    h = int(horizon)
    if mode == "complete":
        return np.full(int(replicates), h, dtype=np.int64)
    if mode == "swrb":
        j = np.asarray(branch_start, dtype=np.int64)
        return h + np.where(j > 0, h - j, 0)
    raise ValueError(f"mode must be 'complete' or 'swrb', got {mode!r}")


def variance_cost_aggregates(naive_variance, swrb_variance, naive_cost, swrb_cost) -> dict[str, float]:
    """Aggregates of per-cell variances and mean costs of the two estimators (module docstring): ``cells``,
    ``variance_ratio_min/median/max``, ``evaluation_ratio_mean``, ``advantage_ratio_of_means``, ``advantage_median``
    (per-cell variance ratio / evaluation ratio) and ``variance_ratio_of_means`` = mean Var_naive / mean Var_swrb."""
    vn, vs, cn, cs = (np.asarray(v, dtype=np.float64) for v in (naive_variance, swrb_variance, naive_cost, swrb_cost))
    if not vn.size or not vn.shape == vs.shape == cn.shape == cs.shape:
        raise ValueError(f"need equal, non-empty numbers of cells, got {vn.shape}, {vs.shape}, {cn.shape}, {cs.shape}")
    with np.errstate(invalid="ignore", divide="ignore"):
        vr = vn / vs
        er = cs / cn
        return {
            "cells": int(vn.size),
            "variance_ratio_min": float(vr.min()),
            "variance_ratio_median": float(np.median(vr)),
            "variance_ratio_max": float(vr.max()),
            "evaluation_ratio_mean": float(er.mean()),
            "advantage_ratio_of_means": float((vn * cn).mean() / (vs * cs).mean()),
            "advantage_median": float(np.median(vr / er)),
            "variance_ratio_of_means": float(vn.mean() / vs.mean()),
        }


def first_eos_step(eos: np.ndarray) -> np.ndarray:
    """The 1-based step of the first EOS along the last axis of cumulative EOS flags (``eos_x``/``eos_y``), 0 where the
    chain emits none within H (int64, the flags' shape without the step axis)."""
    eos = np.asarray(eos, dtype=bool)
    if eos.ndim == 0 or eos.shape[-1] == 0:
        raise ValueError(f"EOS flags need a step axis of length >= 1, got shape {eos.shape}")
    return np.where(eos.any(axis=-1), np.argmax(eos, axis=-1) + 1, 0).astype(np.int64)
