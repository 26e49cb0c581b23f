"""Monte Carlo estimators on finite-state systems: the naive coupled sampler and SWRB.

Both samplers run the recursive overlap–residual maximal coupling of :mod:`kvdiv.finite.exact` on the dense tables
of a :class:`~kvdiv.finite.system.FiniteSystem` (arXiv 2609.16617, §4): the naive sample (H kernel-pair
evaluations) and residual-branch conditional Monte Carlo (H + (H − J)), whose estimators are
:mod:`kvdiv.estimands`' (:func:`~kvdiv.estimands.complete_estimates`, :func:`~kvdiv.estimands.swrb_estimates`).
Each kernel consumes one ``RandomState(seed)`` stream in a fixed order (a plain NumPy twin in
tests/support/finite_numpy.py draws the same replicates).
The mathematics: docs/estimators.md#the-naive-coupled-sample and #residual-branch-estimation-swrb.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from kvdiv.estimands import COMPLETE_COLUMNS, SWRB_COLUMNS, complete_estimates, swrb_estimates, tv_rows
from kvdiv.finite.system import FiniteSystem

# Per-replicate columns of each sampler, in kernel output order (kvdiv.estimands.complete_estimates, swrb_estimates).
NAIVE_COLUMNS = COMPLETE_COLUMNS
# Which column estimates which exact quantity (keys of ``kvdiv finite exact``; T_L = R_H − R_L).
ESTIMATES = {
    "naive": {
        "R_H": "M",
        "O_H": "O",
        "Pi_H": "Pi",
        "E_H": "E",
        "P_diverge": "diverged",
        "R_L": "M_L",
        "T_L": "M_T",
        "B_L": "W_L",
    },
    "swrb": {
        "R_H": "Z_R",
        "O_H": "Z_O",
        "Pi_H": "Z_Pi",
        "E_H": "Z_E",
        "P_diverge": "D",
        "R_L": "Z_L",
        "T_L": "Z_T",
        "B_L": "W_L",
    },
}
WINDOW_KEYS = ("R_L", "T_L", "B_L")
METHODS = ("naive", "swrb")


# ---------------------------------------------------------------------------------------------
# Numba kernels


@numba.njit(cache=True, inline="always")
def _weight(P: np.ndarray, i: int, Q: np.ndarray, j: int, kind: int, k: int) -> float:
    if kind == 0:
        return min(P[i, k], Q[j, k])
    if kind == 1:
        return max(P[i, k] - Q[j, k], 0.0)
    return max(Q[j, k] - P[i, k], 0.0)


@numba.njit(cache=True)
def draw_weighted(P: np.ndarray, i: int, Q: np.ndarray, j: int, kind: int, u: float) -> int:
    """Inverse-CDF draw with uniform u, for p = P[i] and q = Q[j], from min(p, q) (kind 0), (p − q)⁺ (kind 1) or
    (q − p)⁺ (kind 2).

    The first k with u·Σw < w_0 + … + w_k (sequential sums, as ``np.cumsum``); −1 when Σw = 0.
    """
    V = P.shape[1]
    total = 0.0
    for k in range(V):
        total += _weight(P, i, Q, j, kind, k)
    if total <= 0.0:
        return -1
    target = u * total
    acc = 0.0
    last = -1
    for k in range(V):
        w = _weight(P, i, Q, j, kind, k)
        acc += w
        if w > 0.0:
            last = k
            if target < acc:
                return k
    return last


@numba.njit(cache=True)
def draw_index(w: np.ndarray, n: int, u: float) -> int:
    """Inverse-CDF draw with uniform u from the first n weights w (−1 when they sum to zero)."""
    total = 0.0
    for k in range(n):
        total += w[k]
    if total <= 0.0:
        return -1
    target = u * total
    acc = 0.0
    last = -1
    for k in range(n):
        acc += w[k]
        if w[k] > 0.0:
            last = k
            if target < acc:
                return k
    return last


@numba.njit(cache=True)
def coupled_step(P: np.ndarray, i: int, Q: np.ndarray, j: int, tv: float) -> tuple[int, int]:
    """One draw (x_t, y_t) of the maximal coupling of p = P[i] and q = Q[j] with TV ``tv``."""
    if np.random.random() < tv:
        x = draw_weighted(P, i, Q, j, 1, np.random.random())
        y = draw_weighted(P, i, Q, j, 2, np.random.random())
        return x, y
    z = draw_weighted(P, i, Q, j, 0, np.random.random())
    return z, z


@numba.njit(cache=True)
def naive_replicate(reference, intervention, child, horizon, window, out):
    """One naive coupled sample; fills ``out`` (NAIVE_COLUMNS) and returns the pair evaluations."""
    H, L = horizon, window
    nx = 0
    ny = 0
    tau = 0
    count = 0
    in_window = 0
    for t in range(1, H + 1):
        tv = tv_rows(reference, nx, intervention, ny)
        x, y = coupled_step(reference, nx, intervention, ny, tv)
        if x != y:
            count += 1
            if tau == 0:
                tau = t
            elif t <= tau + L:
                in_window += 1
        if t < H:
            nx = child[nx, x]
            ny = child[ny, y]
    complete_estimates(count, tau, in_window, H, L, out)
    return H


@numba.njit(cache=True)
def swrb_replicate(reference, intervention, child, horizon, window, nodes, w, out):
    """One SWRB replicate; fills ``out`` (SWRB_COLUMNS) and returns the pair evaluations.

    ``nodes`` [H] and ``w`` [H] are scratch arrays (the overlap path and the weights w_j).
    """
    H, L = horizon, window
    evals = 0
    survival = 1.0
    nodes[0] = 0
    for k in range(H):
        w[k] = 0.0
    for t in range(1, H + 1):
        n = nodes[t - 1]
        tv = tv_rows(reference, n, intervention, n)
        evals += 1
        w[t - 1] = survival * tv
        survival *= 1.0 - tv
        if t == H:
            break
        z = draw_weighted(reference, n, intervention, n, 0, np.random.random())
        if z < 0:  # δ_t = 1: no overlap, S_t = 0 from here on
            break
        nodes[t] = child[n, z]
    big_d = 0.0
    for k in range(H):
        big_d += w[k]
    for k in range(out.shape[0]):
        out[k] = 0.0
    if big_d <= 0.0:
        return evals
    jb = draw_index(w, H, np.random.random()) + 1  # the branch start J
    n = nodes[jb - 1]
    x = draw_weighted(reference, n, intervention, n, 1, np.random.random())
    y = draw_weighted(reference, n, intervention, n, 2, np.random.random())
    total = 0.0
    inside = 0.0
    if jb < H:
        nx = child[n, x]
        ny = child[n, y]
        for t in range(jb + 1, H + 1):
            tv = tv_rows(reference, nx, intervention, ny)
            evals += 1
            total += tv
            if t <= jb + L:
                inside += tv
            if t < H:
                x, y = coupled_step(reference, nx, intervention, ny, tv)
                nx = child[nx, x]
                ny = child[ny, y]
    swrb_estimates(big_d, jb, H, L, total, inside, out)
    return evals


@numba.njit(cache=True)
def naive_kernel(reference, intervention, child, horizon, window, replicates, seed):
    """``replicates`` naive coupled samples from one stream seeded with ``seed`` (uint32).

    Returns (values [replicates, len(NAIVE_COLUMNS)], pair evaluations [replicates]).
    """
    np.random.seed(seed)
    values = np.zeros((replicates, 9))
    evals = np.zeros(replicates, dtype=np.int64)
    for r in range(replicates):
        evals[r] = naive_replicate(reference, intervention, child, horizon, window, values[r])
    return values, evals


@numba.njit(cache=True)
def swrb_kernel(reference, intervention, child, horizon, window, replicates, seed):
    """``replicates`` SWRB replicates from one stream seeded with ``seed`` (uint32).

    Returns (values [replicates, len(SWRB_COLUMNS)], pair evaluations [replicates]).
    """
    np.random.seed(seed)
    values = np.zeros((replicates, 9))
    evals = np.zeros(replicates, dtype=np.int64)
    nodes = np.zeros(horizon, dtype=np.int64)
    w = np.zeros(horizon)
    for r in range(replicates):
        evals[r] = swrb_replicate(reference, intervention, child, horizon, window, nodes, w, values[r])
    return values, evals


@numba.njit(cache=True)
def coupled_paths(reference, intervention, child, horizon, replicates, seed):
    """``replicates`` coupled paths (x_{1:H}, y_{1:H}): two int64 arrays [replicates, H].

    Each path alone is a sample of its own kernel (x ~ P, y ~ Q): the coupling keeps marginals.
    """
    np.random.seed(seed)
    xs = np.zeros((replicates, horizon), dtype=np.int64)
    ys = np.zeros((replicates, horizon), dtype=np.int64)
    for r in range(replicates):
        nx = 0
        ny = 0
        for t in range(horizon):
            x, y = coupled_step(reference, nx, intervention, ny, tv_rows(reference, nx, intervention, ny))
            xs[r, t] = x
            ys[r, t] = y
            if t + 1 < horizon:
                nx = child[nx, x]
                ny = child[ny, y]
    return xs, ys


# ---------------------------------------------------------------------------------------------
# Orchestration


@dataclass(frozen=True)
class SampleResult:
    """Per-replicate output of one sampler run.

    Attributes
    ----------
    method : "naive" or "swrb".
    window : the depth L used for the window columns (H when none was asked for).
    values : {column: [replicates]} (NAIVE_COLUMNS or SWRB_COLUMNS).
    pair_evaluations : int64 [replicates], kernel-pair evaluations per replicate.
    """

    method: str
    horizon: int
    window: int
    values: dict[str, np.ndarray]
    pair_evaluations: np.ndarray

    @classmethod
    def of(cls, method: str, horizon: int, window: int, values: np.ndarray, evals: np.ndarray) -> SampleResult:
        """The result of a kernel's table ``values`` [replicates, 9] and pair evaluations ``evals``."""
        columns = NAIVE_COLUMNS if method == "naive" else SWRB_COLUMNS
        values = {c: values[:, i].copy() for i, c in enumerate(columns)}
        return cls(method=method, horizon=horizon, window=window, values=values, pair_evaluations=evals)

    def column(self, key: str) -> np.ndarray:
        """Per-replicate estimates of exact quantity ``key`` (R_H, O_H, Pi_H, E_H, P_diverge, R_L, T_L, B_L)."""
        return self.values[ESTIMATES[self.method][key]]


def _seed32(seed: int) -> int:
    if int(seed) < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    return int(seed) % (1 << 32)


def sample(system: FiniteSystem, method: str, replicates: int, seed: int, window: int | None = None) -> SampleResult:
    """Run the naive or SWRB sampler for ``replicates`` replicates from ``seed`` (window L: H when ``None``)."""
    L, seed32 = check_arguments(system, method, replicates, seed, window)
    kernel = naive_kernel if method == "naive" else swrb_kernel
    values, evals = kernel(
        system.reference, system.intervention, system.child, system.horizon, L, int(replicates), seed32
    )
    return SampleResult.of(method, system.horizon, L, values, evals)


def check_arguments(
    system: FiniteSystem, method: str, replicates: int, seed: int, window: int | None
) -> tuple[int, int]:
    """The window L (H when ``window`` is None) and the uint32 stream seed of a :func:`sample` call, after checking
    its arguments."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if int(replicates) < 1:
        raise ValueError(f"replicates must be >= 1, got {replicates}")
    L = system.horizon if window is None else int(window)
    if L < 1:
        raise ValueError(f"window L must be >= 1, got {window}")
    return L, _seed32(seed)


def _none_if_nan(v: float) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def summarize(result: SampleResult, window: bool = False) -> dict:
    """Estimates, standard errors and per-replicate variances, keyed like ``kvdiv finite exact``.

    C_H is the ratio of means Π̂_H/Ê_H, with the delta-method standard error. With ``window``
    the R_L and B_L keys (and T_L = R_H − R_L) are included.

    Returns
    -------
    {"method", "replicates", "estimate": {...}, "stderr": {...}, "variance": {...},
     "pair_evaluations": mean kernel-pair evaluations per replicate}
    """
    n = len(result.pair_evaluations)
    keys = ["R_H", "O_H", "Pi_H", "E_H", "P_diverge"] + (list(WINDOW_KEYS) if window else [])
    est, se, var = {}, {}, {}
    for key in keys:
        col = result.column(key)
        est[key] = float(col.mean())
        var[key] = float(col.var(ddof=1)) if n > 1 else math.nan
        se[key] = math.sqrt(var[key] / n) if n > 1 else math.nan
    pi, e = result.column("Pi_H"), result.column("E_H")
    if e.mean() > 0:
        ratio = pi.mean() / e.mean()
        infl = (pi - ratio * e) / e.mean()
        est["C_H"] = float(ratio)
        var["C_H"] = float(infl.var(ddof=1)) if n > 1 else math.nan
        se["C_H"] = math.sqrt(var["C_H"] / n) if n > 1 else math.nan
    else:
        est["C_H"] = var["C_H"] = se["C_H"] = math.nan
    order = ["R_H", "O_H", "Pi_H", "E_H", "C_H", "P_diverge"] + (list(WINDOW_KEYS) if window else [])
    return {
        "method": result.method,
        "replicates": n,
        "estimate": {k: _none_if_nan(est[k]) for k in order},
        "stderr": {k: _none_if_nan(se[k]) for k in order},
        "variance": {k: _none_if_nan(var[k]) for k in order},
        "pair_evaluations": float(result.pair_evaluations.mean()),
    }
