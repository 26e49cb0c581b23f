"""The prefill attention of :class:`~kvdiv.kernel.session.KernelSession` on a CPU: causal self-attention over the
prompt with both products through oneDNN, the library the model's packed Linear layers use.

torch's CPU flash attention multiplies through the BLAS torch was built with (MKL in the PyPI wheels), which on some
CPUs runs a 64-wide head's products at a third of oneDNN's rate (AMD EPYC: 85–90 against 220–240 GFLOP/s). Here each
block of :data:`QUERY_BLOCK` queries of a KV head's query heads takes one product with the keys it may see, a softmax in
base 2 normalised after the product with the values, and that product. :func:`prefill_attention` swaps it in where
:func:`applies`; anything but a plain causal prefill goes on to transformers' ``sdpa``. Same law to round-off (not the
same bits): why and how, docs/internals.md#prefill-attention; speed, benchmarks/floor.md.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from kvdiv.kernel.attention_switch import attention_implementation, model_configs, switched_attention
from kvdiv.kernel.presses.lazy_datasets import import_kvpress
from kvdiv.models.prepacked import is_prepacked, packed_product

import_kvpress()  # (datasets deferred) before kvpress's modules, and before this module registers its function
from kvpress.attention_patch import attention_patch  # noqa: E402

ATTN_IMPLEMENTATION = "kvdiv_prefill"
#: the attention implementation the prefill replaces (and that :func:`prefill_attention` requires the model to run)
REPLACES = "sdpa"
#: queries per product and KV head (times the query heads sharing it): the fastest block on the development machine
#: at 2–4k tokens, whose logits (3 × 128 × 4096 floats) stay in the cache for the softmax and the second product
QUERY_BLOCK = 128
#: log₂ e: the queries' scale carries it, so that a logit's weight is 2^(logit − max) through torch's ``exp2``
#: (SLEEF's), cheaper than the exponential inside torch's softmax (``exp`` itself may go through MKL's VML: slower)
LOG2E = math.log2(math.e)


def causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """softmax(q·kᵀ·scaling + causal mask)·v for query [batch, heads, n, head_dim] and key, value
    [batch, kv_heads, n, head_dim] (query head j reads KV head j // (heads / kv_heads)), returned as
    [batch, n, heads, head_dim], the layout transformers' attention functions return."""
    batch, heads, n, head_dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    out = torch.empty(batch, n, heads, head_dim, dtype=query.dtype, device=query.device)
    # 0 on the keys a query may see, −inf on the later ones: added to a diagonal block's logits (as a mask would be)
    future = torch.full((QUERY_BLOCK, QUERY_BLOCK), float("-inf"), dtype=query.dtype, device=query.device).triu_(1)
    future = future[:, None]  # broadcast over the query heads of a [position, head] row order
    scaled = torch.empty(kv_heads, n, groups, head_dim, dtype=query.dtype, device=query.device)
    for b in range(batch):
        # the queries scaled (and by log₂ e), each KV head's as [position, query head] rows: a block's rows are one
        # contiguous slice
        torch.mul(query[b].unflatten(0, (kv_heads, groups)).transpose(1, 2), scaling * LOG2E, out=scaled)
        for g in range(kv_heads):
            heads_g = slice(g * groups, (g + 1) * groups)
            keys = key[b, g].contiguous()  # [n, head_dim]: the first `end` rows are the keys block [start, end) sees
            values = value[b, g].contiguous()  # read transposed ([head_dim, end], a layout oneDNN takes as it is)
            for start in range(0, n, QUERY_BLOCK):
                end = min(start + QUERY_BLOCK, n)
                rows = end - start
                logits = packed_product(scaled[g, start:end].view(rows * groups, head_dim), keys[:end])
                logits.view(rows, groups, end)[:, :, start:].add_(future[:rows, :, :rows])
                # in place: the weights before their normalisation, 2^(x − max) (1 at each row's largest), which
                # divides the product's [rows, head_dim] instead of the logits' [rows, end]
                logits.sub_(logits.amax(dim=-1, keepdim=True)).exp2_()
                total = logits.sum(dim=-1, keepdim=True)
                product = packed_product(logits, values[:end].t()).div_(total)
                out[b, start:end, heads_g] = product.view(rows, groups, head_dim)
    return out


def _plain_causal(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    dropout: float,
    kwargs: dict,
) -> bool:
    """Whether this call is what :func:`causal_attention` computes: a float32 CPU prefill over exactly its own keys,
    values as wide as the queries, no mask (transformers gives none to a causal prompt without padding), causal as
    sdpa decides it, no dropout, window, softcap or sinks, and no gradient to keep."""
    extras = ("sliding_window", "softcap", "s_aux", "sinks")
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    return (
        not grad
        and bool(causal)
        and query.device.type == "cpu"
        and query.dtype == key.dtype == value.dtype == torch.float32
        and attention_mask is None
        and query.shape[2] == key.shape[2] > 1
        and query.shape[1] % key.shape[1] == 0
        and value.shape[-1] == query.shape[-1]
        and not dropout
        and all(kwargs.get(name) is None for name in extras)
    )


def prefill_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface: :func:`causal_attention` for a plain causal prefill, else
    transformers' ``sdpa`` function. Registered as ``sdpa`` is: wrapped by kvpress's head-wise mask patch, and by
    kvdiv's logit-bias patch where a press asks for it (:data:`~kvdiv.kernel.presses.logit_bias.BIAS_ATTENTION`)."""
    if not _plain_causal(module, query, key, value, attention_mask, dropout, kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, **kwargs)
    scaling = kwargs.get("scaling")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    return causal_attention(query, key, value, float(scaling)), None


def applies(model: torch.nn.Module) -> bool:
    """Whether :func:`prefill_attention` swaps ``model``'s attention: its Linear layers are packed for oneDNN
    (a float32 CPU model whose spec keeps ``prepack: true``) and it runs ``sdpa``."""
    return is_prepacked(model) and attention_implementation(model) == REPLACES


@contextlib.contextmanager
def prefill_attention(model: torch.nn.Module) -> Iterator[bool]:
    """Run ``model``'s forwards in the block with :func:`prefill_attention_forward` where :func:`applies` (yields
    whether it does); every config's attention implementation is restored afterwards."""
    if not applies(model):
        yield False
        return
    with switched_attention(model_configs(model), ATTN_IMPLEMENTATION, replaces=REPLACES):
        yield True


# kvpress wraps every attention function registered when it is imported (its head-wise mask patch, which also clears
# a module's masked entries at each prefill); imported first, it has, and this one is wrapped here, once, as ``sdpa``
# is. The mask is the one ``sdpa`` gets: none for a plain causal prompt.
AttentionInterface.register(ATTN_IMPLEMENTATION, attention_patch(prefill_attention_forward))
ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_IMPLEMENTATION, sdpa_mask)

__all__ = [
    "ATTN_IMPLEMENTATION",
    "QUERY_BLOCK",
    "applies",
    "causal_attention",
    "prefill_attention",
    "prefill_attention_forward",
]
