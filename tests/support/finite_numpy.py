"""Plain NumPy/Python twins of the finite-state samplers of :mod:`kvdiv.finite.sampling` (the test reference and the
benchmark baseline of benchmarks/finite_samplers.py).

They consume one ``RandomState(seed)`` stream in the kernels' order of draws (inverse-CDF draws from ``np.cumsum``,
as the Numba kernels sum), so :func:`sample_numpy` returns the replicates of :func:`kvdiv.finite.sampling.sample`.
"""

from __future__ import annotations

import numpy as np

from kvdiv.estimands import COMPLETE_COLUMNS, SWRB_COLUMNS, complete_estimates, swrb_estimates, tv
from kvdiv.finite.sampling import SampleResult, check_arguments
from kvdiv.finite.system import FiniteSystem


def sample_numpy(
    system: FiniteSystem, method: str, replicates: int, seed: int, window: int | None = None
) -> SampleResult:
    """:func:`kvdiv.finite.sampling.sample` in plain NumPy/Python (the same replicates, slower)."""
    L, seed32 = check_arguments(system, method, replicates, seed, window)
    fn = naive_numpy if method == "naive" else swrb_numpy
    values, evals = fn(system, L, int(replicates), seed32)
    return SampleResult.of(method, system.horizon, L, values, evals)


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
    """The naive coupled sampler in plain NumPy/Python (same output as :func:`kvdiv.finite.sampling.naive_kernel`)."""
    rng = np.random.RandomState(seed)
    H, L = system.horizon, window
    P, Q, child = system.reference, system.intervention, system.child
    values = np.zeros((replicates, len(COMPLETE_COLUMNS)))
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
        complete_estimates(count, tau, in_window, H, L, values[r])
    return values, evals


def swrb_numpy(system: FiniteSystem, window: int, replicates: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The SWRB sampler in plain NumPy/Python (same output as :func:`kvdiv.finite.sampling.swrb_kernel`)."""
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
