"""Two kernel sessions of the same prompt and actions compared: their prompt caches and initial laws."""

from __future__ import annotations

import torch


def assert_same_prompt_caches(ours, theirs) -> None:
    """Every cache's prompt part (length; per layer keys, values and bias) and initial law bit for bit equal."""
    for cache in ours.caches:
        a, b = ours.prompt_cache(cache), theirs.prompt_cache(cache)
        assert a.length == b.length
        for layer in range(ours.n_layers):
            assert torch.equal(a.keys[layer], b.keys[layer]) and torch.equal(a.values[layer], b.values[layer])
            assert torch.equal(a.bias[layer], b.bias[layer])
        assert torch.equal(ours.initial_probs(cache), theirs.initial_probs(cache))


def kvpress_own_prefill(model, press, ids: torch.Tensor):
    """The cache kvpress's own prefill of ``ids`` leaves with ``press`` (``with press(model)``), run with the attention
    and SnapKV window products kvdiv's prefill runs (on a CPU they are not sdpa's and kvpress's own)."""
    from transformers import DynamicCache

    from kvdiv.kernel.prefill_attention import prefill_attention
    from kvdiv.kernel.presses.window_attention import exact_window_attention

    cache = DynamicCache(config=model.config)
    with torch.no_grad(), press(model), prefill_attention(model), exact_window_attention():
        model(input_ids=ids[None], past_key_values=cache, use_cache=True)
    return cache
