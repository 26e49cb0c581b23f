r"""Probabilistic KV eviction with decode-time correction (arXiv 2608.28293, "A Probabilistic
Interpretation of KV Cache Eviction", Geh, Chen, Israel, Grover, Van den Broeck), as published summaries
of the paper describe it.

Per layer and KV head a proposal π over the prompt entries (``min``, ``h2o``, ``min_h``, ``h2o_h``, ``scorer``), a
sample of entries to keep (design ``multinomial``: m draws with replacement, budget ``global`` (the paper's, default)
or ``per_head``; or ``pips``: exactly k by systematic πps sampling) and, with ``correction``, a log importance weight
(times ``is_temperature``) added to each kept entry's logit at every decode step: in KernelSession and, through the
model's ``sdpa`` attention, under ``with press(model):`` and kvpress's pipeline (elsewhere refused). Which choices are
the paper's: docs/probabilistic.md; the mathematics: docs/estimators.md#probabilistic-eviction.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator

import kvpress
import numpy as np
import torch
from kvpress import ScorerPress
from kvpress.presses.base_press import BasePress, is_prefilling
from kvpress.utils import compute_n_kept, extract_keys_and_values, get_prerope_query_states
from torch import nn
from transformers import Gemma3ForConditionalGeneration, QuantizedCache
from transformers.models.llama.modeling_llama import rotate_half

from kvdiv.llm.presses.logit_bias import check_bias_supported, patch_attention_functions, set_logit_bias
from kvdiv.seeds import derive_seed

DESIGNS = ("multinomial", "pips")
PROPOSALS = ("min", "h2o", "min_h", "h2o_h", "scorer")
BUDGETS = ("per_head", "global")
#: π_H2O: accumulated attention divided by the number of queries that see each key (kvpress), or not
H2O_NORMALIZATIONS = ("queries", "none")
WEIGHTINGS = ("linear", "softmax")
#: proposals built from prompt-query attention rows, and those of them averaging a history of queries
ATTENTION_PROPOSALS = ("min", "h2o", "min_h", "h2o_h")
HISTORY_PROPOSALS = ("h2o", "min_h", "h2o_h")
#: the most draws m a head may get (the budget target may stay out of reach beyond it)
MAX_DRAWS = 2**50
#: float64 elements of attention computed at once by :func:`mean_attention` (bounds its memory)
_CHUNK_ELEMENTS = 2**24


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


# ---------------------------------------------------------------------------------------- proposals


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
        out += torch.einsum("bkrn,r->bkn", attn, h[rows.start - (n - W): rows.stop - (n - W)])
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


# ---------------------------------------------------------------------------------------- multinomial


def expected_distinct(pi: torch.Tensor, m: torch.Tensor | float) -> torch.Tensor:
    """E|S| = Σ_i (1 − (1 − π_i)^m): expected number of distinct entries in m draws from π (last dim);
    ``m`` broadcasts against ``pi``'s leading dims. Returns float64 [...] (on the CPU)."""
    log_q = np.log1p(-_numpy64(pi))
    return torch.from_numpy(np.asarray(_distinct(log_q, np.asarray(_numpy64(m)))))


def _numpy64(x: Any) -> np.ndarray:
    return (x.detach().cpu().to(torch.float64).numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64))


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


def draws_law(pi: torch.Tensor, target: torch.Tensor | float, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
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


# ---------------------------------------------------------------------------------------- πps


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


# ---------------------------------------------------------------------------------------- the press


def _write_cache_layer(cache: Any, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
    """Store compressed keys/values in ``cache``'s layer as kvpress's ``BasePress.forward_hook`` does."""
    cache_layer = cache.layers[layer]
    if isinstance(cache, QuantizedCache):
        cache_layer._quantized_keys = cache_layer._quantize(keys, axis=cache_layer.axis_key)
        cache_layer._quantized_values = cache_layer._quantize(values, axis=cache_layer.axis_value)
        cache_layer.keys = torch.zeros(0, dtype=keys.dtype, device=keys.device)
        cache_layer.values = torch.zeros(0, dtype=keys.dtype, device=keys.device)
        cache_layer.cumulative_length = keys.shape[2]
    else:
        cache_layer.keys = keys
        cache_layer.values = values


@dataclass
class ProbabilisticPress(BasePress):
    """Probabilistic eviction: a sample of the prompt cache from a proposal π + decode-time correction.

    Based on "A Probabilistic Interpretation of KV Cache Eviction" (arXiv 2608.28293). See the module
    docstring for the mathematics.

    Parameters
    ----------
    compression_ratio : float, default=0.0
        Fraction of prompt entries evicted; the per-head target is k = kvpress's ``compute_n_kept(n, ratio)``
        kept entries (in expectation for ``multinomial``, exactly for ``pips``).
    design : {"multinomial", "pips"}, default="multinomial"
        ``multinomial``: m draws with replacement from π, the distinct drawn entries kept with their
        counts, SNIS correction log(c_i/(mπ_i)). ``pips``: exactly k entries by πps sampling,
        Horvitz–Thompson correction −log ρ_i.
    proposal : {"min", "h2o", "min_h", "h2o_h", "scorer"}, default="min"
        π from the last prompt query's attention × ‖v‖, accumulated attention, or their harmonic-history
        variants; ``scorer``: the named kvpress scorer press's scores.
    budget : {"global", "per_head"}, optional
        ``global`` (the default of ``multinomial``, the paper's global compression ratio): one m for the whole
        cache meeting the cache-wide target (heads differ); ``per_head``: m per KV head meeting E|S| = k (the
        only budget of ``pips``, and its default).
    correction : bool, default=True
        Add the log importance weight to kept entries' attention logits at decode time (KernelSession, and the
        model's own ``sdpa`` attention under ``with press(model)`` or kvpress's pipeline).
    is_temperature : float in [0, 1], default=1.0
        Importance-sampling temperature τ: the decode-time bias is τ·log w_i (w_i^τ), 1 = the full correction,
        0 = none (the same logits as ``correction=False``); between, a bias–variance trade-off. Only with
        ``correction``.
    h2o_normalization : {"queries", "none"}, default="queries"
        ``proposal="h2o"`` only: ``queries`` divides each key's accumulated attention by the number of queries
        that see it (kvpress 0.5.3's ``ObservedAttentionPress``, the H2O press of the paper's code base);
        ``none``: the plain accumulated attention.
    history_size : int, optional
        Number of last prompt queries the history proposals (``h2o``, ``min_h``, ``h2o_h``) average;
        default: all prompt queries.
    scorer : str, optional
        ``proposal="scorer"`` only: name of a kvpress scorer press (e.g. ``"SnapKVPress"``).
    scorer_kwargs : dict
        Arguments of the scorer press (e.g. ``{"window_size": 64}``); its compression_ratio is ignored.
    weighting : {"linear", "softmax"}, default="linear"
        ``proposal="scorer"`` only: scores → weights (:func:`score_weights`).
    score_temperature : float, default=1.0
        Temperature of the ``softmax`` weighting.
    seed : int, default=0
        Extra seed part: layer ℓ draws from ``derive_seed(draw seed, ℓ)`` and the global budget's rounding
        coin from ``derive_seed(draw seed, "budget")``, the draw seed being
        ``derive_seed(master, study, document, action, "ProbabilisticPress", seed)`` inside a trajectory job
        (:meth:`set_document`) and ``seed`` elsewhere.
    """

    compression_ratio: float = 0.0
    design: str = "multinomial"
    proposal: str = "min"
    budget: str | None = None
    correction: bool = True
    is_temperature: float = 1.0
    history_size: int | None = None
    h2o_normalization: str = "queries"
    scorer: str | None = None
    scorer_kwargs: dict[str, Any] = field(default_factory=dict)
    weighting: str = "linear"
    score_temperature: float = 1.0
    seed: int = 0
    draw_seed: int | None = field(default=None, init=False, repr=False)
    #: per layer: kept prompt positions [b, kv_heads, kept] (ascending, −1 = padding)
    kept_indices: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)
    #: per layer: the decode-time log weight of each kept entry [b, kv_heads, kept] (−inf on padding):
    #: log(c_i/(mπ_i)) (multinomial) or −log ρ_i (pips), whether or not ``correction`` applies it
    log_weights: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)
    #: per layer: draw counts c_i of the kept entries [b, kv_heads, kept] (multinomial; 0 = padding)
    counts: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)
    #: per layer: number of draws m [b, kv_heads] (multinomial)
    draws: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)
    #: per layer: the proposal π over the prompt entries [b, kv_heads, n] (multinomial) or ρ (pips)
    probabilities: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)
    #: per layer: expected kept entries E|S| per head [b, kv_heads] over the law of m and the draws
    expected_kept: dict[int, torch.Tensor] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.compression_ratio, (int, float)) or not 0 <= self.compression_ratio < 1:
            raise ValueError(f"compression_ratio must be in [0, 1), got {self.compression_ratio!r}")
        if self.budget is None:  # the paper's global budget; pips keeps exactly k per head
            self.budget = "global" if self.design == "multinomial" else "per_head"
        for name, valid in (("design", DESIGNS), ("proposal", PROPOSALS), ("budget", BUDGETS), ("weighting", WEIGHTINGS),
                            ("h2o_normalization", H2O_NORMALIZATIONS)):
            if getattr(self, name) not in valid:
                raise ValueError(f"{name} must be one of {', '.join(valid)}; got {getattr(self, name)!r}")
        if self.design == "pips" and self.budget != "per_head":
            raise ValueError(f"budget {self.budget!r} needs design 'multinomial' (pips keeps exactly k per head)")
        if not isinstance(self.correction, bool):
            raise ValueError(f"correction must be true or false, got {self.correction!r}")
        t = self.is_temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 1:
            raise ValueError(f"is_temperature must be a number in [0, 1], got {t!r}")
        if not self.correction and t != 1:
            raise ValueError(f"is_temperature is only used with correction true (got is_temperature {t!r})")
        if self.proposal != "h2o" and self.h2o_normalization != "queries":
            raise ValueError(f"h2o_normalization is only used with proposal 'h2o', not {self.proposal!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.history_size is not None:
            if self.proposal not in HISTORY_PROPOSALS:
                raise ValueError(f"history_size is only used by proposals {', '.join(HISTORY_PROPOSALS)}, not {self.proposal!r}")
            if not isinstance(self.history_size, int) or isinstance(self.history_size, bool) or self.history_size < 1:
                raise ValueError(f"history_size must be a positive integer, got {self.history_size!r}")
        if not isinstance(self.score_temperature, (int, float)) or not self.score_temperature > 0:
            raise ValueError(f"score_temperature must be > 0, got {self.score_temperature!r}")
        self._scorer = None
        if self.proposal != "scorer":
            for name, default in (("scorer", None), ("scorer_kwargs", {}), ("weighting", "linear"), ("score_temperature", 1.0)):
                if getattr(self, name) != default:
                    raise ValueError(f"{name} is only used with proposal 'scorer', not {self.proposal!r}")
            return
        scorers = scorer_classes()
        if self.scorer not in scorers:
            raise ValueError(f"unknown scorer {self.scorer!r}; valid scorers: {', '.join(scorers)}")
        if not isinstance(self.scorer_kwargs, dict):
            raise ValueError(f"scorer_kwargs must be a mapping, got {self.scorer_kwargs!r}")
        kwargs = {k: v for k, v in self.scorer_kwargs.items() if k != "compression_ratio"}
        try:
            self._scorer = scorers[self.scorer](compression_ratio=self.compression_ratio, **kwargs)
        except (TypeError, ValueError, AssertionError) as err:
            raise ValueError(f"scorer_kwargs {kwargs} not accepted by {self.scorer}: {err}") from None

    def set_document(self, *seed_parts: int | str, action: str) -> int:
        """Draw per document: ``draw_seed = derive_seed(*seed_parts, action, "ProbabilisticPress", seed)``
        with ``seed_parts`` = (master seed, study seed, document id). Returns the draw seed."""
        self.draw_seed = derive_seed(*seed_parts, action, type(self).__name__, self.seed)
        return self.draw_seed

    def layer_seed(self, layer: int | str) -> int:
        """Seed of layer ``layer``'s sample: ``derive_seed(draw seed, layer)`` (draw seed: ``seed`` when
        no document was set); ``layer_seed("budget")`` seeds the global budget's rounding coin."""
        return derive_seed(self.seed if self.draw_seed is None else self.draw_seed, layer)

    # ------------------------------------------------------------------ hooks
    @contextmanager
    def __call__(self, model):
        """kvpress's ``with press(model):``. With ``correction`` (and something to evict), the decode-time correction
        is applied through the model's attention function (:mod:`kvdiv.llm.presses.logit_bias`), also after the block
        (kvpress's pipeline decodes outside it); a model whose attention cannot carry it is refused with an error."""
        if self.correction and self.compression_ratio > 0:
            check_bias_supported(model, f"{type(self).__name__}(correction=True)")
            patch_attention_functions()
        with super().__call__(model):
            yield

    def post_init_from_model(self, model):
        if self._scorer is not None:
            self._scorer.post_init_from_model(model)
        lm = model.model.language_model if hasattr(model.model, "language_model") else model.model
        self._n_layers = len(lm.layers)
        if self.budget == "global" and isinstance(model, Gemma3ForConditionalGeneration):
            # kvpress leaves Gemma3's sliding-window layers uncompressed; the global budget needs them all
            raise NotImplementedError("budget 'global' is not supported for Gemma3ForConditionalGeneration")
        self._pending: dict[int, tuple[nn.Module, Any, torch.Tensor]] = {}

    def forward_hook(self, module: nn.Module, input: list[torch.Tensor], kwargs: dict, output: list):
        if self.budget != "global" or self.compression_ratio == 0:
            return super().forward_hook(module, input, kwargs, output)
        # global budget: collect every layer's proposal, compress the whole cache after the last layer
        hidden_states = kwargs["hidden_states"]
        if not is_prefilling(kwargs["cache_position"], hidden_states.shape[1]):
            return output
        if not hasattr(self, "_pending"):
            raise RuntimeError("budget 'global': call post_init_from_model(model) first (kvpress's press(model) does)")
        cache = kwargs["past_key_values"]
        layer = int(module.layer_idx)
        keys, values = extract_keys_and_values(cache, layer)
        pi = self.proposal_probabilities(module, hidden_states, keys, values, output[1], kwargs)
        self._pending[layer] = (module, cache, pi)
        if layer == self._n_layers - 1:
            pending, self._pending = self._pending, {}
            self._compress_cache(pending)
        return output

    # ------------------------------------------------------------------ proposals
    def proposal_probabilities(self, module, hidden_states, keys, values, attentions, kwargs) -> torch.Tensor:
        """π [b, kv_heads, n] (float64) over this layer's prompt entries (the ``scorer`` proposal: the
        normalised scorer weights)."""
        if self.proposal == "scorer":
            scores = self._scorer.score(module, hidden_states, keys, values, attentions, kwargs)
            return normalise(score_weights(scores, self.weighting, self.score_temperature))
        return proposal_distribution(
            self.proposal, module, hidden_states, keys, values, kwargs["position_embeddings"], self.history_size,
            self.h2o_normalization,
        )

    def inclusion_probabilities(self, module, hidden_states, keys, values, attentions, kwargs) -> torch.Tensor:
        """``pips``: ρ [batch, kv_heads, n] (float64) for this layer's prompt entries."""
        k = compute_n_kept(keys.shape[2], self.compression_ratio)
        if self.proposal == "scorer":
            scores = self._scorer.score(module, hidden_states, keys, values, attentions, kwargs)
            w = score_weights(scores, self.weighting, self.score_temperature)
        else:
            w = self.proposal_probabilities(module, hidden_states, keys, values, attentions, kwargs)
        return inclusion_probabilities(w, k)

    # ------------------------------------------------------------------ compression
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
        b, heads, n, _ = keys.shape
        if self.compression_ratio == 0:
            idx = torch.arange(n, device=keys.device).expand(b, heads, n)
            self.kept_indices[layer] = idx
            self.log_weights[layer] = torch.zeros(idx.shape, dtype=torch.float64, device=keys.device)
            self.expected_kept[layer] = torch.full((b, heads), float(n), dtype=torch.float64)
            return keys, values
        if self.design == "pips":
            rho = self.inclusion_probabilities(module, hidden_states, keys, values, attentions, kwargs)
            gen = torch.Generator().manual_seed(self.layer_seed(layer))
            idx = systematic_sample(rho, gen).to(keys.device)
            self.kept_indices[layer] = idx
            self.probabilities[layer] = rho
            self.log_weights[layer] = -torch.log(rho.gather(-1, idx.to(rho.device))).to(keys.device)
            self.expected_kept[layer] = rho.sum(-1).cpu()
            self._leave_bias(module, layer)
            gidx = idx.unsqueeze(-1).expand(-1, -1, -1, keys.shape[-1])
            return keys.gather(2, gidx).contiguous(), values.gather(2, gidx).contiguous()
        if self.budget == "global":
            raise RuntimeError("budget 'global' compresses the whole cache at once: run the press as a forward hook")
        pi = self.proposal_probabilities(module, hidden_states, keys, values, attentions, kwargs)
        k = compute_n_kept(n, self.compression_ratio)
        rng = np.random.default_rng(self.layer_seed(layer))
        m, self.expected_kept[layer] = allocate_draws(pi, float(k), rng.random(tuple(pi.shape[:-1])))
        keys, values, masked = self._keep(layer, pi, m, rng, keys, values)
        module.masked_key_indices = masked
        self._leave_bias(module, layer)
        return keys, values

    def _leave_bias(self, module: nn.Module, layer: int) -> None:
        """With ``correction``, leave the layer's log weights on its attention module for the model's own attention
        (:mod:`kvdiv.llm.presses.logit_bias`: ``with press(model)`` and kvpress's pipeline); else clear any."""
        set_logit_bias(module, self.log_weights[layer] if self.correction else None)

    def _keep(self, layer, pi, m, rng, keys, values):
        """Draw counts with m draws per head, keep the distinct entries; record the layer's state.
        Returns (keys, values, masked_key_indices or None) with heads padded to the longest."""
        counts = multinomial_counts(pi, m, rng)
        idx = kept_from_counts(counts)  # [b, h, kept], −1 padding
        pad = idx < 0
        safe = idx.clamp(min=0)
        kept_counts = counts.gather(-1, safe).masked_fill(pad, 0)
        log_w = importance_log_weights(kept_counts, m, pi.gather(-1, safe)).masked_fill(pad, float("-inf"))
        self.kept_indices[layer] = idx.to(keys.device)
        self.counts[layer] = kept_counts
        self.draws[layer] = m.reshape(pi.shape[:-1]).cpu()
        self.probabilities[layer] = pi
        self.log_weights[layer] = log_w.to(keys.device)
        gidx = safe.to(keys.device).unsqueeze(-1).expand(-1, -1, -1, keys.shape[-1])
        keep = (~pad).to(keys.device).unsqueeze(-1)
        new_keys = (keys.gather(2, gidx) * keep).contiguous()
        new_values = (values.gather(2, gidx) * keep).contiguous()
        masked = None
        if pad.any():
            batch_idx, head_idx, seq_idx = torch.nonzero(pad, as_tuple=True)
            masked = (batch_idx.to(keys.device), head_idx.to(keys.device), seq_idx.to(keys.device))
        return new_keys, new_values, masked

    def _compress_cache(self, pending: dict[int, tuple[nn.Module, Any, torch.Tensor]]) -> None:
        """Global budget: one m per sequence for every layer and head, Σ E|S_h| = L·H·k; compress all."""
        layers = sorted(pending)
        if layers != list(range(self._n_layers)):
            raise RuntimeError(f"budget 'global': got the prefill of layers {layers}, expected 0..{self._n_layers - 1}")
        pis = torch.stack([pending[layer][2] for layer in layers], dim=1)  # [b, L, h, n]
        b, n_layers, heads, n = pis.shape
        k = compute_n_kept(n, self.compression_ratio)
        coin = np.random.default_rng(self.layer_seed("budget")).random(b)
        draws = [allocate_draws(pis[s], float(k * n_layers * heads), coin[s], shared=True) for s in range(b)]
        m = torch.stack([d[0] for d in draws])  # [b, L, h], one value per sequence
        expected = torch.stack([d[1] for d in draws])
        for i, layer in enumerate(layers):
            module, cache, pi = pending[layer]
            self.expected_kept[layer] = expected[:, i]
            keys, values = extract_keys_and_values(cache, layer)
            rng = np.random.default_rng(self.layer_seed(layer))
            keys, values, masked = self._keep(layer, pi, m[:, i], rng, keys, values)
            _write_cache_layer(cache, layer, keys, values)
            module.masked_key_indices = masked
            self._leave_bias(module, layer)

    # ------------------------------------------------------------------ decode time and records
    def attention_bias(self, layer: int) -> torch.Tensor | None:
        """Additive decode-time logit bias of layer ``layer``'s kept entries [batch, kv_heads, kept]:
        τ·log w_i (multinomial) or −τ·log ρ_i (pips) with ``correction`` (τ = ``is_temperature``; τ = 1 returns
        the stored log weights themselves), else 0; −inf on padding. None before the layer is compressed."""
        if layer not in self.log_weights:
            return None
        log_w = self.log_weights[layer]
        if self.correction and self.is_temperature == 1:
            return log_w
        padding = torch.isinf(log_w) & (log_w < 0)
        if not self.correction or self.is_temperature == 0:
            return torch.where(padding, log_w, torch.zeros_like(log_w))
        return torch.where(padding, log_w, log_w * float(self.is_temperature))

    def effective_retention(self, batch: int = 0) -> dict[str, Any]:
        """The retention the press achieved on sequence ``batch`` of the last prefill (JSON-serialisable).

        ``target``: k/n; ``effective``: kept entries / entries over the whole cache; ``expected``: the same
        in expectation over the law of m and the draws (= target unless MAX_DRAWS bound); ``per_head``:
        kept/n per layer and KV head; ``draws``: m per layer and head (multinomial).
        """
        if not self.kept_indices:
            raise RuntimeError("nothing compressed yet")
        layers = sorted(self.kept_indices)
        per_head = []
        n = None
        for layer in layers:
            idx = self.kept_indices[layer][batch]
            if layer in self.probabilities:
                n = self.probabilities[layer].shape[-1]
            else:
                n = idx.shape[-1]
            per_head.append(((idx >= 0).sum(-1).to(torch.float64) / n).tolist())
        total = sum(sum(h) for h in per_head) / sum(len(h) for h in per_head)
        expected = [(self.expected_kept[layer][batch] / n).tolist() for layer in layers]
        record = {
            "design": self.design,
            "proposal": self.proposal,
            "budget": self.budget,
            "is_temperature": self.is_temperature if self.correction else 0.0,
            "prompt_entries": int(n),
            "target": compute_n_kept(int(n), self.compression_ratio) / n,
            "effective": total,
            "expected": sum(sum(h) for h in expected) / sum(len(h) for h in expected),
            "per_layer": [sum(h) / len(h) for h in per_head],
            "per_head": per_head,
        }
        if self.draws:
            record["draws"] = [self.draws[layer][batch].tolist() for layer in layers]
        return record


__all__ = [
    "ProbabilisticPress",
    "allocate_draws",
    "distinct_variance",
    "draws_law",
    "expected_distinct",
    "history_prior",
    "importance_log_weights",
    "inclusion_probabilities",
    "kept_from_counts",
    "mean_attention",
    "multinomial_counts",
    "proposal_distribution",
    "score_weights",
    "systematic_sample",
]
