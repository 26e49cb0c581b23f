"""Writing a press's compressed keys/values into a transformers cache layer, as kvpress's ``BasePress.forward_hook``
does (a quantized cache re-quantizes them)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import QuantizedCache


def write_cache_layer(cache: Any, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
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
