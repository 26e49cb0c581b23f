"""The ``pips`` design of :class:`~kvdiv.kernel.presses.probabilistic_press.ProbabilisticPress`: exactly k entries per
head by randomised systematic πps sampling, with inclusion probabilities ρ ∝ the proposal's weights (capped at 1).

The kept entries' decode-time correction is −log ρ_i (Horvitz–Thompson). The mathematics:
docs/estimators.md#probabilistic-eviction.
"""

from __future__ import annotations

import torch


def inclusion_probabilities(weights: torch.Tensor, k: int) -> torch.Tensor:
    """πps inclusion probabilities ρ (last dim = entries) with Σρ = k and ρ ≤ 1, by iterative capping.

    ρ_i = min(1, c·w_i) with c such that the sum is k. Rows with at most k positive weights keep those
    with ρ = 1 and spread the rest of the budget uniformly over the zero-weight entries.
    """
    w = weights.to(torch.float64)
    n = w.shape[-1]
    if not 0 <= k <= n:
        raise ValueError(f"budget k={k} outside [0, {n}]")
    if (w < 0).any():
        raise ValueError("weights must be non-negative")
    if k == n:
        return torch.ones_like(w)
    if k == 0:
        return torch.zeros_like(w)
    n_pos = (w > 0).sum(-1, keepdim=True)
    few = n_pos <= k
    # rows with few positives: positives get a huge weight (capped at once), zeros weight 1
    w = torch.where(few, torch.where(w > 0, torch.full_like(w, 1e30), torch.ones_like(w)), w)
    capped = torch.zeros_like(w, dtype=torch.bool)
    for _ in range(n + 1):
        remaining = k - capped.sum(-1, keepdim=True)
        free_mass = torch.where(capped, torch.zeros_like(w), w).sum(-1, keepdim=True)
        c = remaining / free_mass
        rho = torch.where(capped, torch.ones_like(w), c * w)
        new = (rho >= 1) & ~capped
        if not new.any():
            break
        capped |= new
    return rho.clamp(max=1.0)


def systematic_sample(rho: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Exactly-k randomised systematic πps sample for each row of ``rho`` (k = Σρ, an integer).

    Returns the kept indices per row, sorted ascending: LongTensor [..., k]. Entries with ρ = 1 are kept
    deterministically; P(i kept) = ρ_i (Madow's systematic sampling, docs/estimators.md#probabilistic-eviction).
    """
    shape = rho.shape
    r = rho.reshape(-1, shape[-1]).to(torch.float64).cpu()
    k = int(round(float(r[0].sum())))
    sure = r >= 1.0
    rest = torch.where(sure, torch.zeros_like(r), r)
    order = torch.argsort(torch.rand(r.shape, generator=generator, dtype=torch.float64), dim=-1)
    rest_perm = rest.gather(-1, order)
    target = (k - sure.sum(-1, keepdim=True)).to(torch.float64)
    cum = torch.cumsum(rest_perm, dim=-1)
    total = cum[:, -1:]
    cum = torch.where(total > 0, cum * (target / total.clamp(min=1e-300)), cum)
    prev = torch.cat([torch.zeros_like(cum[:, :1]), cum[:, :-1]], dim=-1)
    u = torch.rand((r.shape[0], 1), generator=generator, dtype=torch.float64)
    hits = (torch.floor(cum - u) - torch.floor(prev - u)) > 0
    chosen_perm = torch.zeros_like(sure)
    chosen_perm.scatter_(-1, order, hits)
    chosen = sure | chosen_perm
    counts = chosen.sum(-1)
    if not bool((counts == k).all()):
        raise RuntimeError(f"systematic sample kept {counts.tolist()} entries, expected {k}")
    idx = torch.sort(chosen.to(torch.int8), dim=-1, descending=True, stable=True).indices[:, :k]
    idx = torch.sort(idx, dim=-1).values
    return idx.reshape(*shape[:-1], k).to(rho.device)


__all__ = ["inclusion_probabilities", "systematic_sample"]
