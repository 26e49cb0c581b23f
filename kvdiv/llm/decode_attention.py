"""The decode attention of :class:`kvdiv.llm.session.KernelSession`: one new query per chain against its slot buffers.

Decoding keeps, per layer, preallocated K/V buffers [slots, kv_heads, capacity, head_dim] with per-chain
valid lengths and an additive logit bias [slots, kv_heads, capacity] (−inf on padding, the log importance
weight on probabilistically kept entries, 0 elsewhere). A decode step advances several chains with
different caches in ONE batched forward through the model's own modules: the model is handed a
:class:`SlotCache` (it writes each row's new key/value at its chain's length and returns the whole layer
buffers), and attention goes through :func:`decode_attention`, registered with transformers'
``AttentionInterface`` as ``"kvdiv_decode"``, which reads contiguous slot ranges (views, no copies) of the
buffers as the step's :class:`DecodePlan` lists them (set with :func:`planned` for the step).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from transformers import AttentionInterface

ATTN_IMPLEMENTATION = "kvdiv_decode"

# the decode plan of the step in progress (set by planned(), read by the attention function)
_ACTIVE: dict[str, Any] = {"plan": None}


@dataclass
class DecodePlan:
    """The slots of one decode step: ``runs`` of (row0, row1, slot0, slot1, valid length) and each layer's bias."""

    runs: list[tuple[int, int, int, int, int]]
    bias: list[torch.Tensor]


@contextlib.contextmanager
def planned(plan: DecodePlan) -> Iterator[None]:
    """Make ``plan`` the one :func:`decode_attention` reads while the block runs."""
    _ACTIVE["plan"] = plan
    try:
        yield
    finally:
        _ACTIVE["plan"] = None


def decode_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Attention of one new query per chain against that chain's buffer rows, with the additive bias.

    ``key``/``value`` are the full layer buffers [slots, kv_heads, capacity, head_dim]; the plan lists runs
    of consecutive slots (batch rows row0:row1 ↔ slots s0:s1, valid length L) so each run is one SDPA call
    on buffer views.
    """
    plan = _ACTIVE["plan"]
    if plan is None:
        raise RuntimeError(f"attention implementation {ATTN_IMPLEMENTATION!r} is only usable inside KernelSession.step")
    if kwargs.get("softcap") is not None:
        raise NotImplementedError("kvdiv decoding does not support attention softcapping")
    layer = module.layer_idx
    bias = plan.bias[layer]
    batch, n_heads, _, head_dim = query.shape
    kv_heads = key.shape[1]
    groups = n_heads // kv_heads
    scale = head_dim**-0.5 if scaling is None else scaling
    # GQA without copies: the `groups` query heads sharing a KV head form that head's query rows;
    # (slot, kv head) pairs of a run are one batch dimension of views into the buffers
    q = query.reshape(batch * kv_heads, groups, head_dim)
    out = torch.empty_like(q)
    capacity = key.shape[2]
    for row0, row1, s0, s1, length in plan.runs:
        rows = slice(row0 * kv_heads, row1 * kv_heads)
        k = key[s0:s1].view(-1, capacity, head_dim)[:, :length]
        v = value[s0:s1].view(-1, capacity, head_dim)[:, :length]
        b = bias[s0:s1].view(-1, 1, capacity)[:, :, :length]
        # explicit matmul/softmax: unlike CPU SDPA kernels, identical rows give bit-identical results
        if q.dtype == torch.float32:
            logits = torch.baddbmm(b, q[rows], k.transpose(1, 2), alpha=scale)
        else:
            logits = torch.bmm(q[rows], k.transpose(1, 2)).float().mul_(scale).add_(b)
        weights = torch.softmax(logits, dim=-1).to(value.dtype)
        torch.bmm(weights, v, out=out[rows])
    return out.view(batch, n_heads, 1, head_dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTN_IMPLEMENTATION, decode_attention)


class SlotCache:
    """The cache object handed to the model during a decode step: writes each row's new K/V at its
    chain's length in the layer buffers ``keys``/``values`` and returns the whole buffers (the attention
    function slices them)."""

    is_compileable = False

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], slots: torch.Tensor, lengths: torch.Tensor):
        self.keys = keys
        self.values = values
        self.slots = slots
        self.lengths = lengths

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        self.keys[layer_idx][self.slots, :, self.lengths] = key_states[:, :, 0]
        self.values[layer_idx][self.slots, :, self.lengths] = value_states[:, :, 0]
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return int(self.lengths.max())
