"""The ``multinomial`` design of :class:`~kvdiv.kernel.presses.probabilistic_press.ProbabilisticPress`: m draws with
replacement from π, the distinct drawn entries kept with their counts.

The budget maths (the expected and variance of the number of distinct entries, the law of m meeting a per-head or
cache-wide target, :func:`allocate_draws`), the draws themselves and the kept entries' log importance weights
log(c_i/(mπ_i)). The mathematics: docs/estimators.md#probabilistic-eviction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: the most draws m a head may get (the budget target may stay out of reach beyond it)
MAX_DRAWS = 2**50


def expected_distinct(pi: torch.Tensor, m: torch.Tensor | float) -> torch.Tensor:
    """E|S| = Σ_i (1 − (1 − π_i)^m): expected number of distinct entries in m draws from π (last dim);
    ``m`` broadcasts against ``pi``'s leading dims. Returns float64 [...] (on the CPU)."""
    log_q = np.log1p(-_numpy64(pi))
    return torch.from_numpy(np.asarray(_distinct(log_q, np.asarray(_numpy64(m)))))


def _numpy64(x: Any) -> np.ndarray:
    return (
        x.detach().cpu().to(torch.float64).numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)
    )


def _distinct(log_q: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Σ_i −expm1(m · log(1 − π_i)) over the last dim of ``log_q``, m broadcast over the leading dims."""
    return (-np.expm1(np.expand_dims(m, -1) * log_q)).sum(-1)


def distinct_variance(pi: torch.Tensor, m: torch.Tensor | float) -> torch.Tensor:
    """Var|S| of the number of distinct entries in m draws from π (last dim), exactly:
    Σ_i a_i(1 − a_i) + Σ_{i≠j} [(1 − π_i − π_j)^m − a_i a_j] with a_i = (1 − π_i)^m (the indicators of
    undrawn entries). O(n²) per row. Returns float64 [...] (CPU)."""
    p = _numpy64(pi)
    rows = p.reshape(-1, p.shape[-1])
    ms = np.broadcast_to(np.asarray(_numpy64(m)), p.shape[:-1]).reshape(-1)
    out = np.empty(len(rows))
    for r, (row, mr) in enumerate(zip(rows, ms)):
        log_a = mr * np.log1p(-row)
        a = np.exp(log_a)
        # (1−π_i−π_j)^m = a_i a_j (1 − π_iπ_j/((1−π_i)(1−π_j)))^m, computed without cancellation
        with np.errstate(divide="ignore"):
            ratio = np.outer(row, row) / np.outer(1 - row, 1 - row)
            cov = np.outer(a, a) * np.expm1(mr * np.log1p(-np.minimum(ratio, 1.0)))
        np.fill_diagonal(cov, 0.0)
        out[r] = (a * (1 - a)).sum() + cov.sum()
    return torch.from_numpy(out.reshape(p.shape[:-1]))


def draws_law(
    pi: torch.Tensor, target: torch.Tensor | float, shared: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The law of the number of draws m meeting an expected-distinct target: m = m⁻ + Bernoulli(f).

    Per row of ``pi`` [..., n] with ``target`` [...] (or a scalar); with ``shared=True`` one m for all rows
    and Σ_rows E|S_row| = ``target`` (a scalar). m⁻ is the largest integer in [1, MAX_DRAWS] with
    E|S|(m⁻) ≤ target (1 if none) and f ∈ [0, 1] interpolates so that
    (1 − f)·E|S|(m⁻) + f·E|S|(m⁻ + 1) = target (f = 0 where the target is out of reach).
    Returns (m⁻ LongTensor, f float64 tensor) on the CPU: shape [...] per row, [] when shared.
    """
    log_q = np.log1p(-_numpy64(pi))
    if shared:
        rows = log_q.reshape(-1, log_q.shape[-1])

        def distinct(m: np.ndarray) -> np.ndarray:
            return _distinct(rows, np.broadcast_to(m, rows.shape[:1])).sum(keepdims=True)

        goal = np.asarray(_numpy64(target)).reshape(1)
        shape: tuple[int, ...] = ()
    else:

        def distinct(m: np.ndarray) -> np.ndarray:
            return _distinct(log_q, m)

        shape = log_q.shape[:-1]
        goal = np.broadcast_to(_numpy64(target), shape).astype(np.float64)
    lo = np.ones(goal.shape)
    hi = np.full(goal.shape, float(MAX_DRAWS + 1))
    # integer bisection keeping E|S|(lo) <= target < E|S|(hi) (or hi = MAX_DRAWS + 1): about 50 halvings
    while bool((hi - lo > 1).any()):
        mid = np.floor((lo + hi) / 2)
        below = distinct(mid) <= goal
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    d_lo, d_next = distinct(lo), distinct(lo + 1)
    gap = d_next - d_lo
    f = np.where(gap > 0, (goal - d_lo) / np.where(gap > 0, gap, 1.0), 0.0).clip(0.0, 1.0)
    f = np.where(lo >= MAX_DRAWS, 0.0, f)
    return torch.from_numpy(lo.astype(np.int64).reshape(shape)), torch.from_numpy(f.reshape(shape))


def allocate_draws(
    pi: torch.Tensor, target: torch.Tensor | float, u: torch.Tensor | float, shared: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Numbers of draws m = m⁻ + 1{u < f} (:func:`draws_law`; ``u`` uniform on [0, 1)) and the expected
    kept entries E|S| of every row of ``pi`` [..., n] over the law of m and the draws.

    Per row: ``u`` [...], each row's E|S| equals its target. ``shared=True``: ``u`` a scalar, one m for every
    row (returned broadcast to [...]), the rows' E|S| sum to the target. Returns (m LongTensor [...],
    E|S| float64 [...]) on the CPU.
    """
    m_lo, f = draws_law(pi, target, shared)
    coin = torch.as_tensor(u, dtype=torch.float64)
    m = m_lo + (coin < f).to(torch.long)
    expected = (1 - f) * expected_distinct(pi, m_lo) + f * expected_distinct(pi, m_lo + 1)
    return m.expand(expected.shape).clone(), expected


def multinomial_counts(pi: torch.Tensor, m: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """Draw counts c ~ Multinomial(m_row, π_row) for every row of ``pi`` [..., n]; ``m`` [...] integers.

    Returns int64 counts [..., n] on ``pi``'s device. numpy's multinomial sampler (exact for any m) draws
    entry by entry from binomials with π_i / (the mass not yet drawn), that mass kept by subtraction; the
    entries are fed in ascending π so that the subtracted mass stays large (no cancellation for the tiny
    π_i that huge m reach).
    """
    p = pi.detach().to(torch.float64).reshape(-1, pi.shape[-1]).cpu().numpy()
    draws = torch.as_tensor(m).detach().expand(pi.shape[:-1]).reshape(-1).cpu().numpy().astype(np.int64)
    counts = np.zeros(p.shape, dtype=np.int64)
    for r, (d, row) in enumerate(zip(draws, p)):
        order = np.argsort(row, kind="stable")
        counts[r, order] = rng.multinomial(int(d), row[order])
    return torch.from_numpy(counts).reshape(pi.shape).to(pi.device)


def importance_log_weights(counts: torch.Tensor, m: torch.Tensor, pi: torch.Tensor) -> torch.Tensor:
    """log w_i = log(c_i / (m π_i)) (float64), −inf where c_i = 0; ``m`` broadcasts over the last dim."""
    m = torch.as_tensor(m, device=counts.device).to(torch.float64).unsqueeze(-1)
    return torch.log(counts.to(torch.float64)) - torch.log(m) - torch.log(pi.to(torch.float64))


def kept_from_counts(counts: torch.Tensor) -> torch.Tensor:
    """Kept entries per row of ``counts`` [..., n]: indices of c_i > 0 ascending, padded with −1 to the
    longest row. Returns LongTensor [..., max_kept]."""
    drawn = counts > 0
    width = max(1, int(drawn.sum(-1).max()))
    # stable descending sort of the drawn flags keeps ascending positions among drawn entries
    order = torch.sort(drawn.to(torch.int8), dim=-1, descending=True, stable=True).indices[..., :width]
    return torch.where(drawn.gather(-1, order), order, torch.full_like(order, -1))


__all__ = [
    "MAX_DRAWS",
    "allocate_draws",
    "distinct_variance",
    "draws_law",
    "expected_distinct",
    "importance_log_weights",
    "kept_from_counts",
    "multinomial_counts",
]
