"""Exact values of a finite-state system under the overlap–residual maximal coupling, by enumeration.

R_H, O_H, Π_H, E_H, C_H, P(τ ≤ H) and, for a window L, R_L and B_L, from enumerating the coupled process depth by
depth: the undiverged mass over common histories, and the diverged mass over pairs of histories, split by τ.
The mathematics: docs/estimators.md#the-coupling and #risk-and-its-decomposition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvdiv.estimands import tv
from kvdiv.finite.system import FiniteSystem

# Exact enumeration keeps dense pair tables of size (V^d)^2 per depth; refuse what would not fit.
MAX_PAIR_STATES = 1 << 20
#: Most values one of its arrays may hold: the pair TV at depth d builds (V^d)^2 × V (256 MB of float64).
MAX_PAIR_VALUES = 1 << 25


def _pair_tv(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """TV between every row of p [n, V] and every row of q [n, V]: [n, n]."""
    return tv(p[:, None, :], q[None, :, :])


def _transition(mass: np.ndarray, p: np.ndarray, q: np.ndarray, tv: np.ndarray) -> np.ndarray:
    """Push diverged pair mass [n, n] at depth d one coupled step: [nV, nV] at depth d + 1.

    K(x, y | i, j) = 1{x = y} min(p_i, q_j)(x) + (p_i − q_j)⁺(x) (q_j − p_i)⁺(y) / δ_ij.
    """
    n, V = p.shape
    pp, qq = p[:, None, :], q[None, :, :]
    scale = np.divide(mass, tv, out=np.zeros_like(mass), where=tv > 0)
    out = (scale[:, :, None, None] * np.maximum(pp - qq, 0.0)[:, :, :, None]) * np.maximum(qq - pp, 0.0)[:, :, None, :]
    diag = np.arange(V)
    out[:, :, diag, diag] += mass[:, :, None] * np.minimum(pp, qq)
    return out.transpose(0, 2, 1, 3).reshape(n * V, n * V)


def _branch_start(a: np.ndarray, p: np.ndarray, q: np.ndarray, tv: np.ndarray) -> np.ndarray:
    """Diverged pair mass [nV, nV] created at one step from undiverged mass a [n] at depth d."""
    n, V = p.shape
    scale = np.divide(a, tv, out=np.zeros_like(a), where=tv > 0)
    res = scale[:, None, None] * np.maximum(p - q, 0.0)[:, :, None] * np.maximum(q - p, 0.0)[:, None, :]
    out = np.zeros((n, V, n, V))
    idx = np.arange(n)
    out[idx, :, idx, :] = res
    return out.reshape(n * V, n * V)


@dataclass(frozen=True)
class ExactResult:
    """Exact laws of the coupled process of one system.

    Attributes
    ----------
    horizon : H.
    p_tau : [H], P(τ = j) at index j − 1.
    joint : [H, H], P(x_t ≠ y_t, τ = j) at [j − 1, t − 1] (zero for t < j; P(τ = j) on the diagonal).
    """

    horizon: int
    p_tau: np.ndarray
    joint: np.ndarray

    @property
    def mismatch(self) -> np.ndarray:
        """P(x_t ≠ y_t) for t = 1..H (the per-step mismatch probability)."""
        return self.joint.sum(axis=0)

    @property
    def p_diverge(self) -> float:
        """P(τ ≤ H)."""
        return float(self.p_tau.sum())

    @property
    def risk(self) -> float:
        """R_H = (1/H) Σ_t P(x_t ≠ y_t)."""
        return float(self.mismatch.sum() / self.horizon)

    @property
    def occurrence(self) -> float:
        """O_H = P(τ ≤ H)/H."""
        return self.p_diverge / self.horizon

    @property
    def exposure(self) -> float:
        """E_H = Σ_j P(τ = j)(H − j)/H."""
        H = self.horizon
        return float((self.p_tau * (H - np.arange(1, H + 1))).sum() / H)

    @property
    def occupation(self) -> float:
        """Π_H = (1/H) Σ_j Σ_{t>j} P(x_t ≠ y_t, τ = j)."""
        return float(np.triu(self.joint, k=1).sum() / self.horizon)

    @property
    def mismatch_rate(self) -> float:
        """C_H = Π_H / E_H (NaN when E_H = 0)."""
        return self.occupation / self.exposure if self.exposure > 0 else math.nan

    def profile(self, window: int) -> np.ndarray:
        """π_j(ℓ) = P(x_{j+ℓ} ≠ y_{j+ℓ} | τ = j): [H, L] with row j − 1, column ℓ − 1.

        NaN where P(τ = j) = 0 or j + ℓ > H.
        """
        H, L = self.horizon, int(window)
        out = np.full((H, L), np.nan)
        for j in range(1, H + 1):
            if self.p_tau[j - 1] <= 0:
                continue
            for ell in range(1, min(L, H - j) + 1):
                out[j - 1, ell - 1] = self.joint[j - 1, j + ell - 1] / self.p_tau[j - 1]
        return out

    def risk_window(self, window: int) -> float:
        """R_L = O_H + (1/H) Σ_j P(τ=j) Σ_{ℓ=1}^{min(L,H−j)} π_j(ℓ)."""
        H, L = self.horizon, _check_window(window)
        inside = sum(self.joint[j - 1, j : min(j + L, H)].sum() for j in range(1, H + 1))
        return self.occurrence + float(inside) / H

    def capacity(self, window: int) -> float:
        """B_L = (1/H) Σ_j P(τ = j) max(0, H − j − L)."""
        H, L = self.horizon, _check_window(window)
        j = np.arange(1, H + 1)
        return float((self.p_tau * np.maximum(0, H - j - L)).sum() / H)

    def midpoint(self, window: int) -> tuple[float, float]:
        """The minimax risk from the depth-L profile, R_L + B_L/2, and its worst-case error B_L/2."""
        b = self.capacity(window)
        return self.risk_window(window) + b / 2, b / 2

    def interval(self, window: int) -> tuple[float, float]:
        """[R_L, R_L + B_L]: the risks compatible with the depth-L profile (sharp)."""
        r = self.risk_window(window)
        return r, r + self.capacity(window)

    def summary(self, window: int | None = None) -> dict[str, float | None]:
        """The keys of ``kvdiv finite exact``: R_H, O_H, Pi_H, E_H, C_H, P_diverge (+ R_L, B_L)."""
        out = {
            "R_H": self.risk,
            "O_H": self.occurrence,
            "Pi_H": self.occupation,
            "E_H": self.exposure,
            "C_H": self.mismatch_rate,
            "P_diverge": self.p_diverge,
        }
        if window is not None:
            out["R_L"] = self.risk_window(window)
            out["B_L"] = self.capacity(window)
        return {k: (None if isinstance(v, float) and math.isnan(v) else float(v)) for k, v in out.items()}


def _check_window(window: int) -> int:
    if int(window) < 1:
        raise ValueError(f"window L must be >= 1, got {window}")
    return int(window)


def _check_size(system: FiniteSystem, depth: int) -> None:
    states = system.vocab ** (2 * depth)
    if states > MAX_PAIR_STATES:
        raise ValueError(
            f"system {system.name!r}: exact enumeration needs {states} history pairs at depth {depth} "
            f"(vocab {system.vocab}, horizon {system.horizon}); at most {MAX_PAIR_STATES} are supported"
        )
    values = states * system.vocab
    if values > MAX_PAIR_VALUES:
        raise ValueError(
            f"system {system.name!r}: exact enumeration needs arrays of {states} history pairs × {system.vocab} "
            f"tokens = {values:.3g} values at depth {depth} (vocab {system.vocab}, horizon {system.horizon}); at most "
            f"{MAX_PAIR_VALUES} are supported (use `kvdiv finite sample` for larger systems)"
        )


def enumerate_exact(system: FiniteSystem) -> ExactResult:
    """Exact P(τ = j) and P(x_t ≠ y_t, τ = j) by enumerating the coupled process.

    Undiverged mass a_d over common histories u of depth d obeys a_{d+1}(u, z) = a_d(u) m_u(z), and
    P(τ = d+1) = Σ_u a_d(u) δ_u. The mass diverging at step j starts on pairs (u x, u y) with weight
    a(u)(p − q)⁺(x)(q − p)⁺(y)/δ_u and moves by the coupling kernel; at depth d its mismatch
    probability for step d + 1 is Σ mass · δ(pair).
    """
    H = system.horizon
    _check_size(system, H - 1)
    p_tau = np.zeros(H)
    joint = np.zeros((H, H))
    a = np.ones(1)
    active: list[tuple[int, np.ndarray]] = []  # (j, diverged mass at the current depth)
    for d in range(H):  # histories of length d; the next step is t = d + 1
        p, q = system.level(d)
        tv_same = tv(p, q)
        p_tau[d] = float((a * tv_same).sum())
        joint[d, d] = p_tau[d]
        if active:
            tv_pair = _pair_tv(p, q)
            for j, mass in active:
                joint[j - 1, d] = float((mass * tv_pair).sum())
        if d + 1 == H:
            break
        active = [(j, _transition(mass, p, q, tv_pair)) for j, mass in active]
        if p_tau[d] > 0:
            active.append((d + 1, _branch_start(a, p, q, tv_same)))
        a = (a[:, None] * np.minimum(p, q)).reshape(-1)
    return ExactResult(horizon=H, p_tau=p_tau, joint=joint)


def coupled_marginals(system: FiniteSystem) -> list[tuple[np.ndarray, np.ndarray]]:
    """Marginal laws of x_{1:d} and y_{1:d} under the coupling, for d = 1..H (by enumeration).

    Entry d − 1 holds two arrays of length V^d over histories in local (base-V) order.
    They equal :func:`path_laws` (x ~ P, y ~ Q): the coupling preserves marginals.
    """
    H = system.horizon
    _check_size(system, H)
    out = []
    a = np.ones(1)
    diverged = np.zeros((1, 1))
    for d in range(H):
        p, q = system.level(d)
        tv_same = tv(p, q)
        diverged = _transition(diverged, p, q, _pair_tv(p, q)) + _branch_start(a, p, q, tv_same)
        a = (a[:, None] * np.minimum(p, q)).reshape(-1)
        out.append((a + diverged.sum(axis=1), a + diverged.sum(axis=0)))
    return out


def path_laws(system: FiniteSystem) -> list[tuple[np.ndarray, np.ndarray]]:
    """Laws of x_{1:d} ~ P and y_{1:d} ~ Q sampled on their own, for d = 1..H (local order)."""
    out = []
    law_p, law_q = np.ones(1), np.ones(1)
    for d in range(system.horizon):
        p, q = system.level(d)
        law_p = (law_p[:, None] * p).reshape(-1)
        law_q = (law_q[:, None] * q).reshape(-1)
        out.append((law_p, law_q))
    return out


def orders_identified(a: FiniteSystem | ExactResult, b: FiniteSystem | ExactResult, window: int) -> bool:
    """Whether two actions are ordered by their depth-L profiles alone.

    True iff the intervals [R_L, R_L + B_L] of the two do not overlap.
    """
    ea = a if isinstance(a, ExactResult) else enumerate_exact(a)
    eb = b if isinstance(b, ExactResult) else enumerate_exact(b)
    lo_a, hi_a = ea.interval(window)
    lo_b, hi_b = eb.interval(window)
    return hi_a < lo_b or hi_b < lo_a
