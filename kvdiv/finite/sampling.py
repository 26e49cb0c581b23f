"""Monte Carlo estimators on finite-state systems: the naive coupled sampler and SWRB.

Both samplers run the recursive overlap–residual maximal coupling of :mod:`kvdiv.finite.exact` on the dense tables
of a :class:`~kvdiv.finite.system.FiniteSystem` (arXiv 2609.16617, §4): the naive sample (H kernel-pair
evaluations) and residual-branch conditional Monte Carlo (H + (H − J)), whose estimators are
:mod:`kvdiv.estimands`'. The Numba kernels and the NumPy reference implementation (:func:`naive_numpy`,
:func:`swrb_numpy`) consume one ``RandomState(seed)`` stream in the same order, so they return the same replicates.
The mathematics: docs/estimators.md#the-naive-coupled-sample and #residual-branch-estimation-swrb.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from kvdiv.estimands import SWRB_COLUMNS, swrb_estimates, tv, tv_rows
from kvdiv.finite.system import FiniteSystem

# Per-replicate columns of each sampler, in kernel output order (SWRB: kvdiv.estimands.swrb_estimates).
NAIVE_COLUMNS = ("M", "O", "Pi", "E", "diverged", "M_L", "M_T", "W_L", "tau")
# Which column estimates which exact quantity (keys of ``kvdiv finite exact``; T_L = R_H − R_L).
ESTIMATES = {
    "naive": {"R_H": "M", "O_H": "O", "Pi_H": "Pi", "E_H": "E", "P_diverge": "diverged", "R_L": "M_L", "T_L": "M_T", "B_L": "W_L"},
    "swrb": {"R_H": "Z_R", "O_H": "Z_O", "Pi_H": "Z_Pi", "E_H": "Z_E", "P_diverge": "D", "R_L": "Z_L", "T_L": "Z_T", "B_L": "W_L"},
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
    """Inverse-CDF draw with uniform u, for p = P[i] and q = Q[j], from min(p, q) (kind 0), (p − q)⁺ (kind 1) or (q − p)⁺ (kind 2).

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
    hit = 1.0 if tau > 0 else 0.0
    out[0] = count / H
    out[1] = hit / H
    out[2] = (count - hit) / H
    out[3] = (H - tau) / H if tau > 0 else 0.0
    out[4] = hit
    out[5] = (hit + in_window) / H
    out[6] = (count - hit - in_window) / H
    out[7] = max(0, H - tau - L) / H if tau > 0 else 0.0
    out[8] = tau
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
# Plain NumPy/Python reference implementation (same stream, same order of draws)


def _draw_np(weights: np.ndarray, u: float) -> int:
    cum = np.cumsum(weights)
    if cum[-1] <= 0.0:
        return -1
    k = int(np.searchsorted(cum, u * cum[-1], side="right"))
    if k >= len(cum):  # u·total rounded onto the top: last index with positive weight
        k = int(np.flatnonzero(weights > 0)[-1])
    return k


def _coupled_step_np(p: np.ndarray, q: np.ndarray, tv: float, rng: np.random.RandomState) -> tuple[int, int]:
    if rng.random_sample() < tv:
        x = _draw_np(np.maximum(p - q, 0.0), rng.random_sample())
        y = _draw_np(np.maximum(q - p, 0.0), rng.random_sample())
        return x, y
    z = _draw_np(np.minimum(p, q), rng.random_sample())
    return z, z


def naive_numpy(system: FiniteSystem, window: int, replicates: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The naive coupled sampler in plain NumPy/Python (same output as :func:`naive_kernel`)."""
    rng = np.random.RandomState(seed)
    H, L = system.horizon, window
    P, Q, child = system.reference, system.intervention, system.child
    values = np.zeros((replicates, len(NAIVE_COLUMNS)))
    evals = np.full(replicates, H, dtype=np.int64)
    for r in range(replicates):
        nx = ny = 0
        tau = count = in_window = 0
        for t in range(1, H + 1):
            p, q = P[nx], Q[ny]
            delta = tv(p, q)
            x, y = _coupled_step_np(p, q, delta, rng)
            if x != y:
                count += 1
                if tau == 0:
                    tau = t
                elif t <= tau + L:
                    in_window += 1
            if t < H:
                nx, ny = child[nx, x], child[ny, y]
        hit = 1.0 if tau > 0 else 0.0
        values[r] = (
            count / H,
            hit / H,
            (count - hit) / H,
            (H - tau) / H if tau else 0.0,
            hit,
            (hit + in_window) / H,
            (count - hit - in_window) / H,
            max(0, H - tau - L) / H if tau else 0.0,
            tau,
        )
    return values, evals


def swrb_numpy(system: FiniteSystem, window: int, replicates: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The SWRB sampler in plain NumPy/Python (same output as :func:`swrb_kernel`)."""
    rng = np.random.RandomState(seed)
    H, L = system.horizon, window
    P, Q, child = system.reference, system.intervention, system.child
    values = np.zeros((replicates, len(SWRB_COLUMNS)))
    evals = np.zeros(replicates, dtype=np.int64)
    for r in range(replicates):
        nodes = [0]
        w = np.zeros(H)
        survival = 1.0
        n_eval = 0
        for t in range(1, H + 1):
            p, q = P[nodes[-1]], Q[nodes[-1]]
            delta = tv(p, q)
            n_eval += 1
            w[t - 1] = survival * delta
            survival *= 1.0 - delta
            if t == H:
                break
            z = _draw_np(np.minimum(p, q), rng.random_sample())
            if z < 0:
                break
            nodes.append(child[nodes[-1], z])
        big_d = float(np.cumsum(w)[-1])
        if big_d <= 0.0:
            evals[r] = n_eval
            continue
        j = _draw_np(w, rng.random_sample()) + 1
        p, q = P[nodes[j - 1]], Q[nodes[j - 1]]
        x = _draw_np(np.maximum(p - q, 0.0), rng.random_sample())
        y = _draw_np(np.maximum(q - p, 0.0), rng.random_sample())
        total = inside = 0.0
        if j < H:
            nx, ny = child[nodes[j - 1], x], child[nodes[j - 1], y]
            for t in range(j + 1, H + 1):
                p, q = P[nx], Q[ny]
                delta = tv(p, q)
                n_eval += 1
                total += delta
                if t <= j + L:
                    inside += delta
                if t < H:
                    x, y = _coupled_step_np(p, q, delta, rng)
                    nx, ny = child[nx, x], child[ny, y]
        evals[r] = n_eval
        swrb_estimates(big_d, j, H, L, total, inside, values[r])
    return values, evals


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

    def column(self, key: str) -> np.ndarray:
        """Per-replicate estimates of exact quantity ``key`` (R_H, O_H, Pi_H, E_H, P_diverge, R_L, T_L, B_L)."""
        return self.values[ESTIMATES[self.method][key]]


def _seed32(seed: int) -> int:
    if int(seed) < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    return int(seed) % (1 << 32)


def sample(
    system: FiniteSystem,
    method: str,
    replicates: int,
    seed: int,
    window: int | None = None,
    backend: str = "numba",
) -> SampleResult:
    """Run the naive or SWRB sampler for ``replicates`` replicates from ``seed``.

    ``backend="numpy"`` runs the plain NumPy/Python implementation (identical replicates, slower).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if int(replicates) < 1:
        raise ValueError(f"replicates must be >= 1, got {replicates}")
    L = system.horizon if window is None else int(window)
    if L < 1:
        raise ValueError(f"window L must be >= 1, got {window}")
    seed32 = _seed32(seed)
    if backend == "numba":
        kernel = naive_kernel if method == "naive" else swrb_kernel
        values, evals = kernel(
            system.reference, system.intervention, system.child, system.horizon, L, int(replicates), seed32
        )
    elif backend == "numpy":
        fn = naive_numpy if method == "naive" else swrb_numpy
        values, evals = fn(system, L, int(replicates), seed32)
    else:
        raise ValueError(f"backend must be 'numba' or 'numpy', got {backend!r}")
    columns = NAIVE_COLUMNS if method == "naive" else SWRB_COLUMNS
    return SampleResult(
        method=method,
        horizon=system.horizon,
        window=L,
        values={c: values[:, i].copy() for i, c in enumerate(columns)},
        pair_evaluations=evals,
    )


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
