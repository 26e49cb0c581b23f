"""Probabilistic KV eviction with decode-time Horvitz–Thompson correction (arXiv 2608.28293).

Scores s_i of prompt entries come from a named kvpress scorer press (its ``score()``); per layer and
KV head they become πps inclusion probabilities

    ρ_i = min(1, c·w_i),   Σ_i ρ_i = k,

with weights w_i ≥ 0 from the scores and c found by iterative capping (entries reaching ρ_i = 1 are
kept deterministically, the rest share the remaining budget in proportion to w_i). Exactly k entries are
kept by randomised systematic πps sampling (Madow 1949; Goodman & Kish 1950): put the entries in a
uniformly random order, cut the cumulative sums of ρ at u, u+1, …, u+k−1 with u ~ U[0, 1); entry i is
kept iff one cut falls in its interval. Each interval has length ρ_i ≤ 1 and the cuts are spaced by 1,
so P(i kept) = ρ_i exactly and exactly Σρ = k entries are kept.

Decode-time correction: every decode step adds −log ρ_i to the attention logit of each kept entry, so
the attention numerator Σ_kept e^{s_i}/ρ_i v_i and denominator Σ_kept e^{s_i}/ρ_i are Horvitz–Thompson
estimators, unbiased for the full-cache sums Σ_i e^{s_i} v_i and Σ_i e^{s_i}. The correction is applied
by :class:`kvdiv.kernels.KernelSession` (it reads :meth:`ProbabilisticPress.attention_bias`); inside a
plain kvpress pipeline only the eviction happens. ``correction=False`` is plain sampled eviction.

Randomness: layer ℓ's sample (permutation and offset u) uses a torch Generator seeded with
``derive_seed(draw seed, ℓ)``. Inside a trajectory job the session sets the draw seed per document,
``derive_seed(master seed, study seed, document id, action name, "ProbabilisticPress", seed)``, so
documents get independent evictions (the cluster bootstrap treats them as independent) and the store
records it; outside a session the draw seed is ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import kvpress
import torch
from kvpress import ScorerPress
from kvpress.presses.base_press import BasePress
from kvpress.utils import compute_n_kept
from torch import nn

from kvdiv.seeds import derive_seed

WEIGHTINGS = ("linear", "softmax")


def scorer_classes() -> dict[str, type[ScorerPress]]:
    """kvpress's exported scorer presses (subclasses of ``ScorerPress``), by class name."""
    out = {}
    for name in dir(kvpress):
        obj = getattr(kvpress, name)
        if isinstance(obj, type) and issubclass(obj, ScorerPress) and obj is not ScorerPress:
            out[name] = obj
    return dict(sorted(out.items()))


def score_weights(scores: torch.Tensor, weighting: str = "linear", score_temperature: float = 1.0) -> torch.Tensor:
    """Non-negative weights w from scores (last dim = entries), float64.

    ``linear``: w_i = s_i − min(0, min_j s_j) (scores shifted to be non-negative; attention-type scores
    are used as they are; with negative scores the lowest-scored entry gets weight 0, hence ρ = 0, and
    is never kept). ``softmax``: w_i = exp((s_i − max_j s_j) / score_temperature), all ρ_i > 0, which the
    Horvitz–Thompson estimators need to be unbiased.
    """
    s = scores.to(torch.float64)
    if torch.isnan(s).any():
        raise ValueError("scorer returned NaN scores")
    if weighting == "linear":
        finite = torch.where(torch.isfinite(s), s, torch.zeros_like(s))
        shift = finite.min(dim=-1, keepdim=True).values.clamp(max=0.0)
        w = torch.where(s == float("-inf"), torch.zeros_like(s), s - shift)
        top = torch.where(torch.isfinite(w), w, torch.zeros_like(w)).max(dim=-1, keepdim=True).values
        return torch.where(w == float("inf"), 2 * top + 1, w)
    if weighting == "softmax":
        return torch.softmax(s / score_temperature, dim=-1)
    raise ValueError(f"unknown weighting {weighting!r}; valid: {', '.join(WEIGHTINGS)}")


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
    deterministically; P(i kept) = ρ_i (see the module docstring).
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


@dataclass
class ProbabilisticPress(BasePress):
    """Probabilistic eviction: πps sample of the prompt cache + decode-time Horvitz–Thompson correction.

    Based on "A Probabilistic Interpretation of KV Cache Eviction" (arXiv 2608.28293). See the module
    docstring for the mathematics.

    Parameters
    ----------
    compression_ratio : float, default=0.0
        Fraction of prompt entries evicted; the budget is k = kvpress's ``compute_n_kept(n, ratio)``.
    scorer : str, default="SnapKVPress"
        Name of the kvpress scorer press (a ``ScorerPress``) whose ``score()`` gives the scores.
    scorer_kwargs : dict
        Arguments of the scorer press (e.g. ``{"window_size": 64}``); its compression_ratio is ignored.
    weighting : {"linear", "softmax"}, default="linear"
        Scores → weights (:func:`score_weights`).
    score_temperature : float, default=1.0
        Temperature of the ``softmax`` weighting.
    correction : bool, default=True
        Add −log ρ_i to kept entries' attention logits at decode time (applied by KernelSession).
    seed : int, default=0
        Extra seed part: layer ℓ's sample uses a torch Generator seeded with ``derive_seed(draw seed, ℓ)``,
        the draw seed being ``derive_seed(master, study, document, action, "ProbabilisticPress", seed)``
        inside a trajectory job (:meth:`set_document`) and ``seed`` elsewhere.
    """

    compression_ratio: float = 0.0
    scorer: str = "SnapKVPress"
    scorer_kwargs: dict[str, Any] = field(default_factory=dict)
    weighting: str = "linear"
    score_temperature: float = 1.0
    correction: bool = True
    seed: int = 0
    draw_seed: int | None = field(default=None, init=False, repr=False)
    kept_indices: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)
    log_rho: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        if not 0 <= self.compression_ratio < 1:
            raise ValueError(f"compression_ratio must be in [0, 1), got {self.compression_ratio}")
        scorers = scorer_classes()
        if self.scorer not in scorers:
            raise ValueError(f"unknown scorer {self.scorer!r}; valid scorers: {', '.join(scorers)}")
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"unknown weighting {self.weighting!r}; valid: {', '.join(WEIGHTINGS)}")
        if not self.score_temperature > 0:
            raise ValueError(f"score_temperature must be > 0, got {self.score_temperature}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        kwargs = {k: v for k, v in dict(self.scorer_kwargs).items() if k != "compression_ratio"}
        try:
            self._scorer = scorers[self.scorer](compression_ratio=self.compression_ratio, **kwargs)
        except TypeError as err:
            raise ValueError(f"scorer_kwargs {kwargs} not accepted by {self.scorer}: {err}") from None

    def set_document(self, *seed_parts: int | str, action: str) -> int:
        """Draw per document: ``draw_seed = derive_seed(*seed_parts, action, "ProbabilisticPress", seed)``
        with ``seed_parts`` = (master seed, study seed, document id). Returns the draw seed."""
        self.draw_seed = derive_seed(*seed_parts, action, type(self).__name__, self.seed)
        return self.draw_seed

    def layer_seed(self, layer: int) -> int:
        """Seed of layer ``layer``'s sample: ``derive_seed(draw seed, layer)`` (draw seed: ``seed`` when
        no document was set)."""
        return derive_seed(self.seed if self.draw_seed is None else self.draw_seed, layer)

    def post_init_from_model(self, model):
        self._scorer.post_init_from_model(model)

    def inclusion_probabilities(self, module, hidden_states, keys, values, attentions, kwargs) -> torch.Tensor:
        """ρ [batch, kv_heads, n] (float64) for this layer's prompt entries."""
        scores = self._scorer.score(module, hidden_states, keys, values, attentions, kwargs)
        k = compute_n_kept(keys.shape[2], self.compression_ratio)
        w = score_weights(scores, self.weighting, self.score_temperature)
        return inclusion_probabilities(w, k)

    def compress(
        self,
        module: nn.Module,
        hidden_states: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        attentions: torch.Tensor,
        kwargs: dict,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        layer = int(module.layer_idx)
        n = keys.shape[2]
        if self.compression_ratio == 0:
            idx = torch.arange(n, device=keys.device).expand(keys.shape[0], keys.shape[1], n)
            self.kept_indices[layer] = idx
            self.log_rho[layer] = torch.zeros(idx.shape, dtype=torch.float64, device=keys.device)
            return keys, values
        rho = self.inclusion_probabilities(module, hidden_states, keys, values, attentions, kwargs)
        gen = torch.Generator().manual_seed(self.layer_seed(layer))
        idx = systematic_sample(rho, gen).to(keys.device)
        self.kept_indices[layer] = idx
        self.log_rho[layer] = torch.log(rho.gather(-1, idx.to(rho.device))).to(keys.device)
        gidx = idx.unsqueeze(-1).expand(-1, -1, -1, keys.shape[-1])
        return keys.gather(2, gidx).contiguous(), values.gather(2, gidx).contiguous()

    def attention_bias(self, layer: int) -> torch.Tensor | None:
        """Additive decode-time logit bias −log ρ of layer ``layer``'s kept entries [batch, kv_heads, k],
        or None when ``correction`` is off (or nothing was compressed yet)."""
        if not self.correction or layer not in self.log_rho:
            return None
        return -self.log_rho[layer]


__all__ = ["ProbabilisticPress", "inclusion_probabilities", "systematic_sample", "score_weights"]
