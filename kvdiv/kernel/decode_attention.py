"""The decode attention of :class:`kvdiv.kernel.session.KernelSession`: one new query per chain against the
document's shared prompt (where its cache is a bias over it) and its slot buffers.

:func:`decode_attention`, registered with transformers' ``AttentionInterface`` as ``"kvdiv_decode"``, reads the slot
buffers (views) that the step's :class:`DecodePlan` lists (one or two :class:`DecodePart` per session; set with
:func:`planned`) and the model is handed a :class:`SlotCache`. A part with a :class:`PromptPass` computes its chains'
logits over the one prompt copy in fixed blocks of :func:`prompt_block` chains, adds each chain's cache bias and takes
one softmax per chain over [prompt, its slot's span] (shared-prefix or cascade attention: Hydragen, arXiv
2402.05099; FlashInfer's cascade attention). How: docs/internals.md#kernel-pairs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from transformers import AttentionInterface

from kvdiv.kernel.presses.lazy_datasets import import_kvpress
from kvdiv.kernel.shared_prompt import PackedPrompt
from kvdiv.models.prepacked import packed_product

ATTN_IMPLEMENTATION = "kvdiv_decode"

# the decode plan of the step in progress (set by planned(), read by the attention function)
_ACTIVE: dict[str, Any] = {"plan": None}


def prompt_block(device: torch.device) -> int:
    """Chains per product over the shared prompt: a fixed number (the last block padded with zero queries), so a
    chain's logits come from products of one shape whatever other chains share its step. 8 on CPUs, where a product's
    cost is mostly fixed (packed for oneDNN, a block of 8 decodes every study of config/replication.yaml 7–15 % faster
    than a block of 4; benchmarks/shared_prompt.md), 16 on accelerators, where reading the prompt is the cost."""
    return 8 if device.type == "cpu" else 16


@dataclass
class PromptPass:
    """The shared prompt a part's rows read before their slots: per layer ``keys_t`` [kv_heads, head_dim, n_pad],
    ``values`` [kv_heads, n_pad, head_dim] and ``bias`` [caches, kv_heads, n_pad]; ``rows`` [part rows]: each row's
    cache (its row of ``bias``); ``block``: chains per product (:func:`prompt_block`); ``packed``: the same keys and
    values packed for oneDNN (:func:`kvdiv.kernel.shared_prompt.pack_prompt`), the products' operands where given."""

    keys_t: list[torch.Tensor]
    values: list[torch.Tensor]
    bias: list[torch.Tensor]
    rows: torch.Tensor
    block: int
    packed: PackedPrompt | None = None


@dataclass
class DecodePart:
    """One pool's share of a session's decode step: its batch rows ``row0:row1``, its per-layer buffers (``keys_t``
    [slots, kv_heads, head_dim, capacity], ``values`` [slots, kv_heads, capacity, head_dim], ``bias``), the slot and
    valid length each row writes its new key/value at, ``runs`` of (row0, row1, slot0, slot1, valid length)
    with rows relative to the part, and the shared prompt its rows read first (None: their slots hold everything)."""

    row0: int
    row1: int
    keys_t: list[torch.Tensor]
    values: list[torch.Tensor]
    bias: list[torch.Tensor]
    slots: torch.Tensor
    lengths: torch.Tensor
    runs: list[tuple[int, int, int, int, int]]
    prompt: PromptPass | None = None

    def entries_read(self) -> int:
        """K/V entries (per layer and KV head) its attention's products read: each run's slots over their span and,
        with a shared prompt, the prompt once per block of chains."""
        read = sum((s1 - s0) * span for _, _, s0, s1, span in self.runs)
        if self.prompt is not None:
            blocks = -(-(self.row1 - self.row0) // self.prompt.block)
            read += blocks * self.prompt.values[0].shape[1]
        return read


@dataclass
class DecodePlan:
    """The parts (one per session) of one decode step, in batch-row order."""

    parts: list[DecodePart]


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

    Each part of the plan has its own layer buffers [slots, kv_heads, capacity, head_dim] (``key``/``value``
    are ignored) and lists runs of consecutive slots (batch rows row0:row1 ↔ slots s0:s1, valid length L) so
    each run is one matmul/softmax/matmul on buffer views.
    """
    plan = _ACTIVE["plan"]
    if plan is None:
        raise RuntimeError(f"attention implementation {ATTN_IMPLEMENTATION!r} is only usable inside KernelSession.step")
    if kwargs.get("softcap") is not None:
        raise NotImplementedError("kvdiv decoding does not support attention softcapping")
    layer = module.layer_idx
    batch, n_heads, _, head_dim = query.shape
    scale = head_dim**-0.5 if scaling is None else scaling
    out = torch.empty(batch, n_heads, head_dim, dtype=query.dtype, device=query.device)
    for part in plan.parts:
        keys_t, values, bias = part.keys_t[layer], part.values[layer], part.bias[layer]
        kv_heads, capacity = values.shape[1], values.shape[2]
        groups = n_heads // kv_heads
        # GQA without copies: the `groups` query heads sharing a KV head form that head's query rows;
        # (slot, kv head) pairs of a run are one batch dimension of views into the buffers
        q = query[part.row0 : part.row1].reshape((part.row1 - part.row0) * kv_heads, groups, head_dim)
        o = out[part.row0 : part.row1].view(-1, groups, head_dim)
        if part.prompt is not None:
            _cascade(part, layer, q, o, scale)
            continue
        for row0, row1, s0, s1, length in part.runs:
            rows = slice(row0 * kv_heads, row1 * kv_heads)
            kt = keys_t[s0:s1].view(-1, head_dim, capacity)[:, :, :length]
            v = values[s0:s1].view(-1, capacity, head_dim)[:, :length]
            b = bias[s0:s1].view(-1, 1, capacity)[:, :, :length]
            # explicit matmul/softmax: unlike CPU SDPA kernels, identical rows give bit-identical results
            if q.dtype == torch.float32:
                logits = torch.baddbmm(b, q[rows], kt, alpha=scale)
            else:
                logits = torch.bmm(q[rows], kt).float().mul_(scale).add_(b)
            weights = torch.softmax(logits, dim=-1).to(values.dtype)
            torch.bmm(weights, v, out=o[rows])
    return out.view(batch, n_heads, 1, head_dim).transpose(1, 2).contiguous(), None


def _cascade(part: DecodePart, layer: int, q: torch.Tensor, o: torch.Tensor, scale: float) -> None:
    """A part whose rows read the shared prompt, then their slots: ``q`` [rows × kv_heads, groups, head_dim]
    (row-major), ``o`` the same shape, written. Per row and head one softmax over [its logits over the prompt + its
    cache's bias, its slot's span]; the prompt's products in fixed blocks of chains (:func:`prompt_block`), the
    slots' per run; against the packed prompt (one product per block and KV head) where the part has it."""
    pp = part.prompt
    keys_p, values_p = pp.keys_t[layer], pp.values[layer]
    keys_t, values, bias = part.keys_t[layer], part.values[layer], part.bias[layer]
    kv_heads, n_pad, head_dim = values_p.shape
    capacity = values.shape[2]
    groups = q.shape[1]
    rows = part.row1 - part.row0
    block = pp.block
    n_blocks = -(-rows // block)
    # queries by block and KV head: [blocks, kv_heads, block × groups, head_dim] (zero rows pad the last block)
    qb = q.new_zeros(n_blocks * block, kv_heads, groups, head_dim)
    qb[:rows] = q.view(rows, kv_heads, groups, head_dim)
    qb = qb.view(n_blocks, block, kv_heads, groups, head_dim).transpose(1, 2).reshape(n_blocks, kv_heads, -1, head_dim)
    packed = pp.packed if pp.packed is not None and pp.packed.current(layer, keys_p, values_p) else None
    # per block, (KV heads, their logits [block, heads, groups, n_pad]): the products' own outputs, not copied
    logits: list[list[tuple[slice, torch.Tensor]]] = []
    for b in range(n_blocks):
        if packed is None:
            out = torch.bmm(qb[b], keys_p).view(kv_heads, block, groups, n_pad).transpose(0, 1)
            logits.append([(slice(None), out)])
        else:  # (oneDNN's products have no batch dimension: one per KV head)
            keys_h = packed.keys[layer]
            logits.append(
                [
                    (slice(h, h + 1), packed_product(qb[b, h], keys_h[h]).view(block, 1, groups, n_pad))
                    for h in range(kv_heads)
                ]
            )
    bias_p = pp.bias[layer].index_select(0, pp.rows).unsqueeze(2)  # [rows, kv_heads, 1, n_pad]
    # the prompt's weights, laid out for the products with its values: [blocks, kv_heads, block, groups, n_pad]
    weights_p = torch.empty(n_blocks, kv_heads, block, groups, n_pad, dtype=values_p.dtype, device=q.device)
    if rows < n_blocks * block:
        weights_p[-1, :, rows - (n_blocks - 1) * block :] = 0  # (padding rows: finite, read and dropped)
    for row0, row1, s0, s1, span in part.runs:
        items = slice(row0 * kv_heads, row1 * kv_heads)
        kt = keys_t[s0:s1].view(-1, head_dim, capacity)[:, :, :span]
        v = values[s0:s1].view(-1, capacity, head_dim)[:, :span]
        b = bias[s0:s1].view(-1, 1, capacity)[:, :, :span]
        both = torch.empty(items.stop - items.start, groups, n_pad + span, dtype=torch.float32, device=q.device)
        both4 = both.view(row1 - row0, kv_heads, groups, n_pad + span)
        for blk, j0, j1 in _blocks(row0, row1, block):  # scaled prompt logits + the cache's bias, in one pass
            for heads, src in logits[blk]:
                src = src[j0 - blk * block : j1 - blk * block]
                torch.add(bias_p[j0:j1, heads], src, alpha=scale, out=both4[j0 - row0 : j1 - row0, heads, :, :n_pad])
        both[:, :, n_pad:] = torch.bmm(q[items], kt)
        both[:, :, n_pad:].mul_(scale).add_(b)
        weights = torch.softmax(both, dim=-1)
        torch.bmm(weights[:, :, n_pad:].to(values.dtype), v, out=o[items])
        weights4 = weights.view(row1 - row0, kv_heads, groups, n_pad + span)
        for blk, j0, j1 in _blocks(row0, row1, block):
            dst = weights_p[blk, :, j0 - blk * block : j1 - blk * block]
            dst.copy_(weights4[j0 - row0 : j1 - row0, :, :, :n_pad].transpose(0, 1))
    o4 = o.view(rows, kv_heads, groups, head_dim)
    for b in range(n_blocks):
        mine = min(block, rows - b * block)
        if packed is not None:
            for h in range(kv_heads):
                ob = packed_product(weights_p[b, h].view(-1, n_pad), packed.values[layer][h])
                o4[b * block : b * block + mine, h] += ob.view(block, groups, head_dim)[:mine]
            continue
        ob = torch.bmm(weights_p[b].view(kv_heads, -1, n_pad), values_p).view(kv_heads, block, groups, head_dim)
        o4[b * block : b * block + mine] += ob.transpose(0, 1)[:mine]


def _blocks(row0: int, row1: int, block: int) -> list[tuple[int, int, int]]:
    """(block, first row, end row) of the blocks rows ``row0:row1`` fall in, rows cut at the blocks' edges."""
    return [(b, max(row0, b * block), min(row1, (b + 1) * block)) for b in range(row0 // block, -(-row1 // block))]


# kvpress, when imported, wraps every attention function registered by then (kvpress.attention_patch: a wrapper that
# writes fake keys into `key` at a module's `masked_key_indices`, which here is a chain's slot buffer). Import it
# first, so that it patches before this registration whatever the import order elsewhere, and the function
# transformers calls for "kvdiv_decode" is always decode_attention itself (tests/kernel/test_session.py).
import_kvpress()
AttentionInterface.register(ATTN_IMPLEMENTATION, decode_attention)


class SlotCache:
    """The cache object handed to the model during a decode step: writes each row's new K/V at its chain's
    length in its part's layer buffers and returns the first part's buffers (:func:`decode_attention` reads
    every part's own buffers from the plan)."""

    is_compileable = False

    def __init__(self, plan: DecodePlan):
        self.plan = plan

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        for part in self.plan.parts:
            part.keys_t[layer_idx][part.slots, :, :, part.lengths] = key_states[part.row0 : part.row1, :, 0]
            part.values[layer_idx][part.slots, :, part.lengths] = value_states[part.row0 : part.row1, :, 0]
        first = self.plan.parts[0]
        return first.keys_t[layer_idx].transpose(2, 3), first.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return max(int(part.lengths.max()) for part in self.plan.parts)
