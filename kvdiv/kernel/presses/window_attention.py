"""kvpress's SnapKV window attention (``SnapKVPress.compute_window_attention``, also called by Finch, TOVA and
SimLayerKV) without its full-size mask tensors: the same bits, or inside the prefill's oneDNN attention its law.

:func:`window_attention` masks in place only the window's own columns (kvpress adds a −inf ``triu`` tensor of the
weights' size; adding 0 or −inf and filling −inf give the softmax the same input), and on a CPU, for one prompt, it
computes a block of heads at a time into the one result tensor, so its temporaries reuse the heap's pages
(:mod:`kvdiv.host_memory`). Inside the prefill's oneDNN attention (:mod:`kvdiv.kernel.prefill_attention`) its
products go through oneDNN too, a KV head's query heads at a time: the same law to round-off (in practice mostly the
same bits). :func:`exact_window_attention` installs it for the prefill; tests/kernel/test_window_attention.py.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator

import torch
from kvpress import SnapKVPress
from kvpress.utils import get_prerope_query_states
from torch import nn
from transformers.models.llama.modeling_llama import repeat_kv, rotate_half

from kvdiv.kernel.prefill_attention import ATTN_IMPLEMENTATION as PREFILL_ATTENTION
from kvdiv.models.prepacked import packed_product

#: kvpress's own implementation, as imported (restored after :func:`exact_window_attention`)
KVPRESS_WINDOW_ATTENTION = SnapKVPress.__dict__["compute_window_attention"]


@lru_cache(maxsize=64)
def future_mask(window_size: int, device: torch.device) -> torch.Tensor:
    """Bool [window_size, window_size]: True where window query i would see a later key among the window's own keys
    (the last ``window_size`` of k_len), i.e. kvpress's ``triu(…, diagonal=k_len − window_size + 1)`` on those
    columns; every earlier column is False."""
    return torch.ones(window_size, window_size, dtype=torch.bool, device=device).triu_(1)


#: logits of one block of heads (16 MiB of float32, unless one head alone is more): under the 32 MiB up to which a
#: trajectory job's malloc serves requests from its heap (kvdiv.host_memory)
BLOCK_ELEMENTS = 1 << 22


def _through_onednn(module: nn.Module, query_states: torch.Tensor, keys: torch.Tensor) -> bool:
    """Whether the products go through oneDNN: where the prefill's own attention does
    (:mod:`kvdiv.kernel.prefill_attention`: a packed float32 CPU model, its config switched for the prefill), for
    float32 operands that keep no gradient."""
    config = getattr(module, "config", None)
    grad = torch.is_grad_enabled() and (query_states.requires_grad or keys.requires_grad)
    return (
        getattr(config, "_attn_implementation", None) == PREFILL_ATTENTION
        and query_states.dtype == keys.dtype == torch.float32
        and not grad
    )


def window_attention(module, hidden_states, keys, window_size, position_embeddings):
    """The attention weights of the last ``window_size`` queries on the first ``k_len − window_size`` keys, computed as
    kvpress's ``SnapKVPress.compute_window_attention`` computes them (same arguments, same bits), but inside the
    prefill's oneDNN attention, where its products also go through oneDNN (same law to round-off)."""
    bsz, _, k_len, _ = keys.shape
    head_dim = module.head_dim
    heads = module.config.num_attention_heads
    groups = heads // module.config.num_key_value_heads
    query_states = get_prerope_query_states(module, hidden_states[:, -window_size:])
    cos, sin = position_embeddings
    cos, sin = cos[:, -window_size:], sin[:, -window_size:]
    query_states = (query_states * cos.unsqueeze(1)) + (rotate_half(query_states) * sin.unsqueeze(1))
    mask = future_mask(window_size, query_states.device)
    scale = math.sqrt(head_dim)
    weights = torch.empty(bsz, heads, window_size, k_len, dtype=query_states.dtype, device=query_states.device)
    # blocks where they pay: host memory, one prompt (a batched half-precision product on a slice of heads can take
    # another kernel than on all of them; on a GPU the allocator caches and a block is only more launches)
    blocked = query_states.device.type == "cpu" and bsz == 1
    step = max(1, BLOCK_ELEMENTS // (window_size * k_len)) if blocked else heads
    onednn = blocked and _through_onednn(module, query_states, keys)
    if onednn:  # blocks of query heads within one KV head's: [heads × window, head_dim] rows by its keys
        spans = [(h, min(h + step, g + groups)) for g in range(0, heads, groups) for h in range(g, g + groups, step)]
    else:
        keys_t = repeat_kv(keys, groups).transpose(2, 3)
        spans = [(h, min(h + step, heads)) for h in range(0, heads, step)]
    for h, stop in spans:
        if onednn:
            rows = query_states[0, h:stop].reshape(-1, head_dim)
            block = packed_product(rows, keys[0, h // groups]).view(1, stop - h, window_size, k_len)
        else:
            block = torch.matmul(query_states[:, h:stop], keys_t[:, h:stop])
        block.div_(scale)
        block[..., k_len - window_size :].masked_fill_(mask, float("-inf"))
        if block.dtype == torch.float32:
            torch.softmax(block, dim=-1, out=weights[:, h:stop])
        else:  # softmax in float32, then the queries' dtype, as kvpress
            weights[:, h:stop].copy_(nn.functional.softmax(block, dim=-1, dtype=torch.float32))
    return weights[..., :-window_size]


@contextmanager
def exact_window_attention() -> Iterator[None]:
    """Within the block, every SnapKV window attention (SnapKV's own and the presses that call it) is
    :func:`window_attention`; kvpress's implementation is restored afterwards, also after an exception."""
    saved = SnapKVPress.__dict__["compute_window_attention"]
    SnapKVPress.compute_window_attention = staticmethod(window_attention)
    try:
        yield
    finally:
        SnapKVPress.compute_window_attention = saved


__all__ = ["BLOCK_ELEMENTS", "KVPRESS_WINDOW_ATTENTION", "exact_window_attention", "future_mask", "window_attention"]
