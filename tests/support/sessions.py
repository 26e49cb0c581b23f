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
