"""The proposal π of :class:`~kvdiv.kernel.presses.probabilistic_press.ProbabilisticPress` over a layer's prompt
entries.

Attention proposals (``min``, ``h2o``, ``min_h``, ``h2o_h``: the attention rows of the last prompt queries, weighted by
a history prior, times ‖v‖ for the ``min`` ones) and a kvpress scorer's scores turned into weights (``scorer``);
:func:`shared_proposals` lets the presses of one prefill compute each attention proposal once per layer.
The mathematics: docs/estimators.md#probabilistic-eviction.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

import torch
from kvpress.utils import get_prerope_query_states
from torch import nn
from transformers.models.llama.modeling_llama import rotate_half

from kvdiv.kernel.presses.arguments import ATTENTION_PROPOSALS, H2O_NORMALIZATIONS, HISTORY_PROPOSALS, WEIGHTINGS

#: float64 elements of attention computed at once by :func:`mean_attention` (bounds its memory)
_CHUNK_ELEMENTS = 2**24


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


def history_prior(n_queries: int, prior: str) -> torch.Tensor:
    """Weights h [n_queries] (float64, sum 1) of the history queries, oldest first.

    ``harmonic``: h_j ∝ 1/(a_j + 1), a_j = age of query j (0 for the last one); ``uniform``: 1/W.
    """
    if n_queries < 1:
        raise ValueError(f"n_queries must be >= 1, got {n_queries}")
    if prior == "harmonic":
        h = 1.0 / torch.arange(n_queries, 0, -1, dtype=torch.float64)
    elif prior == "uniform":
        h = torch.ones(n_queries, dtype=torch.float64)
    else:
        raise ValueError(f"unknown prior {prior!r}; valid: harmonic, uniform")
    return h / h.sum()


def mean_attention(
    module: nn.Module,
    hidden_states: torch.Tensor,
    keys: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    query_weights: torch.Tensor,
) -> torch.Tensor:
    """Σ_j h_j Ā_j(i): attention rows of the last W prompt queries, weighted by ``query_weights`` [W]
    (oldest first), each row averaged over the query heads sharing a KV head. Returns [b, kv_heads, n]
    float64.

    The rows are what the layer computes: RoPE'd queries from ``hidden_states`` (kvpress's
    ``get_prerope_query_states``, as SnapKV's window attention), the cached keys, ``module.scaling``,
    causal mask (query j attends entries 0..j). Computed in chunks of queries.
    """
    b, kv_heads, n, head_dim = keys.shape
    W = int(query_weights.numel())
    if not 1 <= W <= n or hidden_states.shape[1] != n:
        raise ValueError(f"{W} history queries for {n} prompt entries and {hidden_states.shape[1]} hidden states")
    n_heads = module.config.num_attention_heads
    groups = n_heads // kv_heads
    scale = float(getattr(module, "scaling", head_dim**-0.5))
    cos, sin = position_embeddings
    k = keys.float().transpose(2, 3)  # [b, kv, d, n]
    positions = torch.arange(n, device=keys.device)
    chunk = max(1, _CHUNK_ELEMENTS // max(1, b * n_heads * n))
    out = torch.zeros(b, kv_heads, n, dtype=torch.float64, device=keys.device)
    h = query_weights.to(device=keys.device, dtype=torch.float64)
    for start in range(n - W, n, chunk):
        rows = slice(start, min(start + chunk, n))
        r = rows.stop - rows.start
        q = get_prerope_query_states(module, hidden_states[:, rows])  # [b, heads, r, d]
        c, s = cos[:, rows].unsqueeze(1), sin[:, rows].unsqueeze(1)
        q = (q * c + rotate_half(q) * s).float()
        # query head kv·G + g shares KV head kv (transformers' repeat_kv layout)
        logits = torch.matmul(q.reshape(b, kv_heads, groups * r, head_dim), k).mul_(scale).double()
        logits = logits.view(b, kv_heads, groups, r, n)
        future = positions[None, :] > positions[rows, None]  # [r, n]
        logits.masked_fill_(future, float("-inf"))
        attn = torch.softmax(logits, dim=-1).mean(2)  # [b, kv, r, n]
        out += torch.einsum("bkrn,r->bkn", attn, h[rows.start - (n - W) : rows.stop - (n - W)])
    return out


#: While :func:`shared_proposals` is open: attention proposals already computed in this prefill, by
#: (layer module, proposal, history size, H2O normalisation) → (hidden states, keys, values, π).
_SHARED: ContextVar[dict | None] = ContextVar("kvdiv_shared_proposals", default=None)


@contextmanager
def shared_proposals() -> Iterator[None]:
    """Within the block, presses of one prefill that ask for the same attention proposal on the same layer
    inputs get one computation (KernelSession's prefill runs every action's press on each layer; a study with
    eleven ``min_h`` actions computed the same attention rows eleven times). Inputs are matched by identity, so a
    different tensor is never served a stale π; each caller gets its own copy."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def proposal_distribution(
    proposal: str,
    module: nn.Module,
    hidden_states: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
    history_size: int | None = None,
    h2o_normalization: str = "queries",
) -> torch.Tensor:
    """The proposal π [b, kv_heads, n] (float64, rows sum to 1) of an attention proposal
    (``min``, ``h2o``, ``min_h``, ``h2o_h``; see the module docstring). ``h2o_normalization`` (``h2o`` only):
    ``queries`` divides each key's accumulated attention by the number of history queries that see it
    (:func:`queries_seeing`, kvpress's ``ObservedAttentionPress``), ``none`` keeps the plain sum."""
    n = keys.shape[2]
    if proposal == "min":
        h = history_prior(1, "uniform")
    elif proposal in HISTORY_PROPOSALS:
        W = n if history_size is None else min(int(history_size), n)
        h = history_prior(W, "uniform" if proposal == "h2o" else "harmonic")
    else:
        raise ValueError(f"unknown attention proposal {proposal!r}; valid: {', '.join(ATTENTION_PROPOSALS)}")
    if h2o_normalization not in H2O_NORMALIZATIONS:
        raise ValueError(f"h2o_normalization must be one of {', '.join(H2O_NORMALIZATIONS)}; got {h2o_normalization!r}")
    memo = _SHARED.get()
    key = (id(module), proposal, int(h.numel()), h2o_normalization)
    if memo is not None and key in memo:
        seen_hidden, seen_keys, seen_values, seen_pi = memo[key]
        if seen_hidden is hidden_states and seen_keys is keys and seen_values is values:
            return seen_pi.clone()
    weight = mean_attention(module, hidden_states, keys, position_embeddings, h)
    if proposal in ("min", "min_h"):
        weight = weight * values.to(torch.float64).norm(dim=-1)
    if proposal == "h2o" and h2o_normalization == "queries":
        weight = weight / queries_seeing(n, int(h.numel())).to(weight.device)
    pi = normalise(weight)
    if memo is not None:
        memo[key] = (hidden_states, keys, values, pi)
        return pi.clone()
    return pi


def queries_seeing(n: int, history: int) -> torch.Tensor:
    """Number of the last ``history`` prompt queries that see each of the n prompt keys under the causal mask:
    min(history, n − i) for key i (float64 [n]); kvpress's ``ObservedAttentionPress`` divides by it (history = n)."""
    return torch.clamp(torch.arange(n, 0, -1, dtype=torch.float64), max=float(history))


def normalise(weights: torch.Tensor) -> torch.Tensor:
    """Rows of non-negative weights (last dim) divided by their sums; all-zero rows become uniform."""
    w = weights.to(torch.float64)
    total = w.sum(-1, keepdim=True)
    return torch.where(total > 0, w / total.clamp(min=1e-300), torch.full_like(w, 1.0 / w.shape[-1]))


__all__ = [
    "history_prior",
    "mean_attention",
    "normalise",
    "proposal_distribution",
    "queries_seeing",
    "score_weights",
    "shared_proposals",
]
