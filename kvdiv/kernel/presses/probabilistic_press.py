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
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from kvpress import ScorerPress
from kvpress.presses.base_press import BasePress, is_prefilling
from kvpress.utils import compute_n_kept, extract_keys_and_values
from torch import nn
from transformers import Gemma3ForConditionalGeneration

from kvdiv.kernel.presses.arguments import check_arguments
from kvdiv.kernel.presses.cache_layers import write_cache_layer
from kvdiv.kernel.presses.discovery import kvpress_classes
from kvdiv.kernel.presses.entry_gather import take_entries
from kvdiv.kernel.presses.logit_bias import check_bias_supported, patch_attention_functions, set_logit_bias

from kvdiv.kernel.presses.multinomial_design import (
    allocate_draws,
    importance_log_weights,
    kept_from_counts,
    multinomial_counts,
)
from kvdiv.kernel.presses.pips_design import inclusion_probabilities, systematic_sample
from kvdiv.kernel.presses.proposals import normalise, proposal_distribution, score_weights
from kvdiv.seeds import derive_seed


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
        # the rules of every argument: kvdiv.kernel.presses.arguments (also read by the start-up check and the schema)
        check_arguments(type(self).__name__, {f.name: getattr(self, f.name) for f in fields(self) if f.init})
        if self.budget is None:  # the paper's global budget; pips keeps exactly k per head
            self.budget = "global" if self.design == "multinomial" else "per_head"
        if self.design == "pips" and self.budget != "per_head":
            raise ValueError(f"budget {self.budget!r} needs design 'multinomial' (pips keeps exactly k per head)")
        self._scorer = None
        if self.proposal != "scorer":
            return
        scorers = kvpress_classes(ScorerPress)
        if self.scorer not in scorers:
            raise ValueError(f"unknown scorer {self.scorer!r}; valid scorers: {', '.join(scorers)}")
        if "compression_ratio" in self.scorer_kwargs:
            raise ValueError(
                "scorer_kwargs.compression_ratio is ignored (the press's own compression_ratio sets the budget): "
                "leave it out"
            )
        try:
            self._scorer = scorers[self.scorer](compression_ratio=self.compression_ratio, **self.scorer_kwargs)
        except (TypeError, ValueError, AssertionError) as err:
            raise ValueError(f"scorer_kwargs {self.scorer_kwargs} not accepted by {self.scorer}: {err}") from None

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
        is applied through the model's attention function (:mod:`kvdiv.kernel.presses.logit_bias`), also after the block
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
            self.proposal,
            module,
            hidden_states,
            keys,
            values,
            kwargs["position_embeddings"],
            self.history_size,
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
            return take_entries(keys, idx), take_entries(values, idx)
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
        (:mod:`kvdiv.kernel.presses.logit_bias`: ``with press(model)`` and kvpress's pipeline); else clear any."""
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
        keep = (~pad).to(keys.device).unsqueeze(-1)
        new_keys = take_entries(keys, safe.to(keys.device)) * keep
        new_values = take_entries(values, safe.to(keys.device)) * keep
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
            write_cache_layer(cache, layer, keys, values)
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
