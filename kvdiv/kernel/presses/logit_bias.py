"""A decode-time attention-logit bias that a press leaves on an attention module, applied wherever the model's own
attention runs: under ``with press(model):`` and in kvpress's ``pipeline("kv-press-text-generation", ...)``.

Like kvpress's ``masked_key_indices``, a press sets :data:`LOGIT_BIAS_ATTR` ([batch, kv_heads, kept]) on a layer's
attention module; :func:`bias_patch` adds it to the first ``kept`` key positions of every non-prefill forward through
an additive mask (softmax(q·k/√d + b)·v, as KernelSession does). Only :data:`BIAS_ATTENTION` (``sdpa`` and
kvdiv's prefill attention, sdpa outside a prefill) can carry it;
elsewhere :func:`check_bias_supported` raises. Details: docs/internals.md#decode-time-logit-bias.
"""

from __future__ import annotations

from typing import Any

import torch

from kvdiv.kernel.attention_switch import attention_implementation

#: The attention-module attribute a press sets: [batch, kv_heads, kept] logit bias of the first ``kept`` keys.
LOGIT_BIAS_ATTR = "kvdiv_logit_bias"
#: Attention implementations through which the bias is applied (an additive float attention mask): ``sdpa`` and
#: kvdiv's prefill attention, which is ``sdpa`` but for a plain causal prefill (kvdiv.kernel.prefill_attention)
BIAS_ATTENTION = ("sdpa", "kvdiv_prefill")
_PATCHED = "_kvdiv_logit_bias_patched"


def set_logit_bias(module: torch.nn.Module, bias: torch.Tensor | None) -> None:
    """Leave ``bias`` [batch, kv_heads, kept] on ``module`` for its next non-prefill forwards (None clears it)."""
    setattr(module, LOGIT_BIAS_ATTR, bias)


def clear_logit_bias(module: torch.nn.Module) -> None:
    """Remove a bias left on ``module``."""
    setattr(module, LOGIT_BIAS_ATTR, None)


def biased_mask(
    query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, bias: torch.Tensor
) -> torch.Tensor:
    """The additive mask [batch, heads, q, n]: causal over this layer's n keys, the model's mask (boolean or additive;
    its last n columns) and ``bias`` on the first ``kept`` keys of every query head (query head j reads KV head
    j // (heads / kv_heads), as ``repeat_kv``)."""
    b, heads, q, _ = query.shape
    n, kept = key.shape[2], bias.shape[-1]
    if kept > n:
        raise RuntimeError(f"logit bias for {kept} entries but the layer cache holds {n}")
    add = torch.zeros(b, heads, q, n, dtype=torch.float32, device=query.device)
    per_head = bias.to(device=query.device, dtype=torch.float32).repeat_interleave(heads // bias.shape[1], dim=1)
    add[..., :kept] += per_head[:, :, None, :]
    if q > 1:  # causal: query i (of the last q positions) sees keys 0 .. n - q + i
        allowed = torch.ones(q, n, dtype=torch.bool, device=query.device).tril(diagonal=n - q)
        add = add.masked_fill(~allowed, float("-inf"))
    if attention_mask is not None:
        # the model builds one mask for all layers from the first layer's cache length; a press may keep fewer
        # entries in other layers, so align the mask's last n columns (the newest keys) with this layer's keys
        mask = attention_mask[..., -n:] if attention_mask.shape[-1] >= n else attention_mask
        if mask.dtype == torch.bool:
            add = add.masked_fill(~mask, float("-inf"))
        else:
            add = add + mask.to(torch.float32)
    return add.to(query.dtype)


def bias_patch(func):
    """Wrap an attention function so that it adds the bias a module carries (:data:`LOGIT_BIAS_ATTR`)."""

    def wrapper(module, query, key, value, attention_mask, *args, **kwargs):
        bias = getattr(module, LOGIT_BIAS_ATTR, None)
        if query.shape[2] == key.shape[2]:  # a prefill: a new prompt, the bias of the last one no longer applies
            clear_logit_bias(module)
        elif bias is not None:
            attention_mask = biased_mask(query, key, attention_mask, bias)
            # the bias is −inf on padded entries: kvpress's fake keys for them (masked_key_indices) are not needed
            masked = getattr(module, "masked_key_indices", None)
            module.masked_key_indices = None
            try:
                return func(module, query, key, value, attention_mask, *args, **kwargs)
            finally:
                module.masked_key_indices = masked
        return func(module, query, key, value, attention_mask, *args, **kwargs)

    setattr(wrapper, _PATCHED, True)
    wrapper.__wrapped__ = func
    return wrapper


def patch_attention_functions() -> None:
    """Wrap the registered attention functions of :data:`BIAS_ATTENTION` once (kvdiv's own decode attention, which
    applies the bias from its buffers, is left alone)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    import kvdiv.kernel.prefill_attention  # noqa: F401  (registers "kvdiv_prefill" before it is wrapped)

    for name in BIAS_ATTENTION:
        func = ALL_ATTENTION_FUNCTIONS[name]
        if not getattr(func, _PATCHED, False):
            ALL_ATTENTION_FUNCTIONS[name] = bias_patch(func)


def check_bias_supported(model: Any, who: str) -> None:
    """Raise ``NotImplementedError`` (naming ``who`` and where its correction applies) unless ``model`` runs an
    attention implementation that carries the bias."""
    impl = attention_implementation(model)
    if impl not in BIAS_ATTENTION:
        raise NotImplementedError(
            f"{who}: its decode-time correction is applied through the model's attention function, which must be one "
            f"of {', '.join(BIAS_ATTENTION)} (load the model with attn_implementation='sdpa'); this model uses "
            f"{impl!r}. The correction also applies in kvdiv's KernelSession (the workflow, kvdiv.compare); with "
            f"correction=False the press is plain sampled eviction anywhere."
        )


__all__ = [
    "BIAS_ATTENTION",
    "LOGIT_BIAS_ATTR",
    "biased_mask",
    "bias_patch",
    "check_bias_supported",
    "clear_logit_bias",
    "patch_attention_functions",
    "set_logit_bias",
]
