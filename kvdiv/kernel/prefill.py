"""The prefill of :class:`~kvdiv.kernel.session.KernelSession`: one forward of the model over the prompt, every action's
press run on each layer, each action's evicted prompt cache (:class:`Prefix`) derived from the reference's.

Forward hooks on the attention layers call every press's own ``forward_hook`` on a private capture cache holding the
reference layer's keys/values (never mutated), so each action's cache is exactly what kvpress produces inside its own
prefill run with the same attention and SnapKV window products (on a CPU, :mod:`~kvdiv.kernel.prefill_attention` and
:mod:`~kvdiv.kernel.presses.window_attention`); head-wise masks and a press's decode-time bias
(:class:`~kvdiv.kernel.presses.protocol.BiasedPress`) become the prefix's logit bias. docs/internals.md#kernel-pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from transformers import DynamicCache

from kvdiv.kernel.prefill_attention import prefill_attention
from kvdiv.kernel.presses.entry_gather import row_gather_compress
from kvdiv.kernel.presses.logit_bias import clear_logit_bias
from kvdiv.kernel.presses.protocol import BiasedPress
from kvdiv.kernel.presses.proposals import shared_proposals
from kvdiv.kernel.presses.window_attention import exact_window_attention
from kvdiv.watchdog import doing, press_label

# kvpress after kvdiv.kernel.presses (which imports it behind the lazy `datasets` placeholder)
from kvpress import BasePress  # noqa: E402,I001

REFERENCE = "reference"


class _CaptureLayer:
    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys = keys
        self.values = values


class _CaptureCache:
    """A private stand-in for the prefill cache handed to a press's ``forward_hook``: the press reads the
    reference layer's keys/values from it and writes its compressed ones back into it."""

    def __init__(self, n_layers: int):
        self.layers: list[_CaptureLayer | None] = [None] * n_layers


@dataclass
class Prefix:
    """A cache's prompt part: per layer keys/values [kv_heads, length, head_dim] and logit bias."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    bias: list[torch.Tensor]  # [kv_heads, length]
    length: int
    position: int  # RoPE position of the next token
    _keys_t: list[torch.Tensor] | None = field(default=None, repr=False, compare=False)

    def keys_transposed(self) -> list[torch.Tensor]:
        """Per layer the keys as contiguous [kv_heads, head_dim, length] (the slot buffers' layout), made once."""
        if self._keys_t is None:
            self._keys_t = [k.transpose(1, 2).contiguous() for k in self.keys]
        return self._keys_t


def language_model(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stack of a causal LM (a multimodal model's ``language_model``)."""
    return model.model.language_model if hasattr(model.model, "language_model") else model.model


def attention_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every decoder layer's attention module, in layer order."""
    return [layer.self_attn for layer in language_model(model).layers]


@torch.no_grad()
def prefill_caches(
    model: torch.nn.Module,
    attention: list[torch.nn.Module],
    presses: Mapping[str, BasePress],
    prefill_ids: torch.Tensor,
    device: torch.device,
) -> tuple[dict[str, Prefix], dict[str, list[int]], torch.Tensor]:
    """Prefill ``prefill_ids`` [n] once; return the prefixes ("reference" first, then each action's), each action's
    kept entries per layer before padding to its longest layer, and the last position's logits [V]."""
    n_layers = len(attention)
    lm = language_model(model)
    captures = {name: _CaptureCache(n_layers) for name in presses}
    masked: dict[str, dict[int, Any]] = {name: {} for name in presses}
    for press in presses.values():
        press.post_init_from_model(model)
    for attn in attention:
        attn.rotary_emb = lm.rotary_emb  # as kvpress's BasePress.__call__ does

    def hook(module, args, kwargs, output):
        cache = kwargs["past_key_values"]
        layer = module.layer_idx
        keys, values = cache.layers[layer].keys, cache.layers[layer].values
        for name, press in presses.items():
            capture = captures[name]
            capture.layers[layer] = _CaptureLayer(keys, values)
            module.masked_key_indices = None
            press_kwargs = dict(kwargs)
            press_kwargs["past_key_values"] = capture
            with doing(action=name, press=press_label(press), layer=layer):  # a hang names them (kvdiv.watchdog)
                press.forward_hook(module, args, press_kwargs, output)
            if getattr(module, "masked_key_indices", None) is not None:
                masked[name][layer] = module.masked_key_indices
            module.masked_key_indices = None
            clear_logit_bias(module)  # the session applies a press's correction itself (attention_bias)
        return output

    handles = [attn.register_forward_hook(hook, with_kwargs=True) for attn in attention]
    cache = DynamicCache(config=model.config)
    try:
        # actions sharing an attention proposal compute it once per layer; SnapKV's window without its mask tensors;
        # kept entries copied as rows (the same bits as kvpress's gather)
        with shared_proposals(), exact_window_attention(), row_gather_compress(), prefill_attention(model):
            out = model(input_ids=prefill_ids[None], past_key_values=cache, use_cache=True, logits_to_keep=1)
    finally:
        for h in handles:
            h.remove()
        for attn in attention:  # a press may mask other layers than its hook's (global budgets)
            attn.masked_key_indices = None
            clear_logit_bias(attn)
    logits = out.logits[0, -1]
    n = int(prefill_ids.numel())
    ref = Prefix(
        keys=[layer.keys[0] for layer in cache.layers],
        values=[layer.values[0] for layer in cache.layers],
        bias=[torch.zeros(layer.keys.shape[1], n, dtype=torch.float32, device=device) for layer in cache.layers],
        length=n,
        position=n,
    )
    prefixes = {REFERENCE: ref}
    kept_lengths: dict[str, list[int]] = {}
    for name, press in presses.items():
        keys, values, bias = [], [], []
        for layer in range(n_layers):
            cl = captures[name].layers[layer]
            if cl is None:
                raise RuntimeError(f"action {name!r}: layer {layer} was not captured during prefill")
            k, v = cl.keys[0], cl.values[0]
            b = torch.zeros(k.shape[0], k.shape[1], dtype=torch.float32, device=device)
            if layer in masked[name]:
                batch_idx, head_idx, seq_idx = masked[name][layer]
                sel = batch_idx == 0
                b[head_idx[sel].to(device), seq_idx[sel].to(device)] = float("-inf")
            if isinstance(press, BiasedPress):
                hb = press.attention_bias(layer)
                if hb is not None:
                    b = b + hb[0].to(torch.float32)
            keys.append(k)
            values.append(v)
            bias.append(b)
        # presses that keep different numbers of entries per layer (PyramidKV): pad the shorter
        # layers with zero keys/values whose −inf bias gives them exactly zero attention weight
        longest = max(k.shape[1] for k in keys)
        for layer in range(n_layers):
            pad = longest - keys[layer].shape[1]
            if pad:
                keys[layer] = torch.nn.functional.pad(keys[layer], (0, 0, 0, pad))
                values[layer] = torch.nn.functional.pad(values[layer], (0, 0, 0, pad))
                bias[layer] = torch.nn.functional.pad(bias[layer], (0, pad), value=float("-inf"))
        prefixes[name] = Prefix(keys, values, bias, length=longest, position=n)
        kept_lengths[name] = [int(cl.keys.shape[2]) for cl in captures[name].layers]
    return prefixes, kept_lengths, logits


__all__ = ["Prefix", "REFERENCE", "attention_layers", "language_model", "prefill_caches"]
