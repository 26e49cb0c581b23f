"""A document's prompt K/V stored once, and each action's evicted cache as a logit bias over it.

After the prefill (:mod:`kvdiv.kernel.prefill`) every action's compressed prompt cache is matched against the
reference's entries: where, per layer and KV head, it keeps a duplicate-free subset of them with keys and values
unchanged (kvpress's scorer presses, head-wise masks, PyramidKV's padding, ProbabilisticPress), the cache becomes a row
of :attr:`SharedPrompt.bias` — 0 on kept entries, the press's own bias where it sets one, −inf on evicted entries and
padding — over the one prompt copy (its length rounded up to :data:`PROMPT_ALIGN`). Any other cache stays a private
copy. Where the model's Linear layers are packed for oneDNN, the copy's keys and values are too (:func:`pack_prompt`).
How decoding reads it: :mod:`kvdiv.kernel.decode_attention`; docs/internals.md#kernel-pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import torch

from kvdiv.kernel.decoding import match_rows
from kvdiv.kernel.prefill import REFERENCE, Prefix
from kvdiv.kernel.presses.entry_gather import take_entries
from kvdiv.kernel.presses.protocol import IndexedPress
from kvdiv.models.prepacked import is_prepacked, pack_matrix, packed_pair_nbytes

#: The stored prompt's length is a multiple of this (zero keys and values, −inf bias past the prompt), so that every
#: row of the decode attention's logits over it starts aligned.
PROMPT_ALIGN = 64


@dataclass
class PackedPrompt:
    """The prompt copy's keys and values packed for oneDNN (:func:`kvdiv.models.prepacked.pack_matrix`), per layer and
    KV head: ``keys[layer][head]`` the [n_pad, head_dim] keys, ``values[layer][head]`` the [head_dim, n_pad] values
    transposed, so a block of queries' logits and their weighted values are packed products; ``sources[layer]`` the
    dense tensors' (address, version) they were packed from (changed since, they are stale: :meth:`current`)."""

    keys: list[list[torch.Tensor]]
    values: list[list[torch.Tensor]]
    sources: list[tuple[int, int, int, int]]

    def current(self, layer: int, keys_t: torch.Tensor, values: torch.Tensor) -> bool:
        """Whether ``layer``'s packed copies still match the dense ``keys_t`` and ``values``."""
        return self.sources[layer] == _source(keys_t, values)

    def nbytes(self) -> int:
        """Bytes held, at most (:func:`kvdiv.models.prepacked.packed_pair_nbytes`)."""
        total = 0
        for keys, values in zip(self.keys, self.values):
            (n_pad, head_dim), size = keys[0].shape, keys[0].element_size()
            total += len(keys) * packed_pair_nbytes(n_pad, head_dim, size)
        return total


def _source(keys_t: torch.Tensor, values: torch.Tensor) -> tuple[int, int, int, int]:
    return (keys_t.data_ptr(), keys_t._version, values.data_ptr(), values._version)


@dataclass
class SharedPrompt:
    """The prompt K/V of one document, stored once, and every shared cache's view of it.

    ``keys_t``/``values`` per layer; ``bias`` per layer [caches, kv_heads, n_pad]: row ``index[name]`` is cache
    ``name``'s additive logit bias over the prompt. ``kept[name]`` per layer [kv_heads, entries]: the prompt positions
    the cache holds in its own order (kvpress's top-k order; −1 on padding), ``entry_bias[name]`` per layer the bias of
    those entries, ``entries[name]`` the cache's length (its longest layer): enough to rebuild the cache as the press
    left it (:meth:`cache_prefix`). ``packed``: the copy packed for oneDNN (:func:`pack_prompt`), or None."""

    keys_t: list[torch.Tensor]
    values: list[torch.Tensor]
    length: int
    bias: list[torch.Tensor]
    index: dict[str, int]
    kept: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    entry_bias: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    entries: dict[str, int] = field(default_factory=dict)
    packed: PackedPrompt | None = None

    @property
    def padded_length(self) -> int:
        return int(self.values[0].shape[1])

    def nbytes(self) -> int:
        """Bytes held: the K/V copy (and its packed copy) and the caches' biases."""
        packed = 0 if self.packed is None else self.packed.nbytes()
        return packed + sum(t.numel() * t.element_size() for ts in (self.keys_t, self.values, self.bias) for t in ts)

    def cache_entries(self, name: str, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cache ``name``'s prompt part at ``layer`` as the press left it: keys, values [kv_heads, entries, head_dim]
        and bias [kv_heads, entries] in its own order (zeros and −inf on padding)."""
        idx = self.kept[name][layer]
        pad = idx < 0
        gather = idx.clamp(min=0).unsqueeze(-1).expand(-1, -1, self.values[layer].shape[-1])
        k = self.keys_t[layer].transpose(1, 2).gather(1, gather).masked_fill(pad.unsqueeze(-1), 0)
        v = self.values[layer].gather(1, gather).masked_fill(pad.unsqueeze(-1), 0)
        return k, v, self.entry_bias[name][layer].clone()

    def cache_prefix(self, name: str) -> Prefix:
        """Cache ``name``'s prompt part (:meth:`cache_entries`, every layer) as one private copy would hold it."""
        layers = [self.cache_entries(name, layer) for layer in range(len(self.values))]
        keys, values, bias = (list(x) for x in zip(*layers))
        return Prefix(keys, values, bias, self.entries[name], self.length)


class _Lookup:
    """One layer's reference keys, projected and sorted once, to find many actions' keys among them (as
    :func:`kvdiv.kernel.decoding.match_rows`, with the reference's side shared)."""

    def __init__(self, keys: torch.Tensor):
        self.keys = keys
        gen = torch.Generator().manual_seed(0)
        self.r = torch.randn(keys.shape[-1], dtype=torch.float64, generator=gen).to(keys.device)
        projected = keys.to(torch.float64) @ self.r
        self.order = torch.argsort(projected, dim=-1)
        self.sorted = projected.gather(-1, self.order).contiguous()

    def find(self, sub: torch.Tensor) -> torch.Tensor:
        """Per head, the reference position nearest each of ``sub``'s keys (to be verified by the caller)."""
        b = (sub.to(torch.float64) @ self.r).contiguous()
        hi = torch.searchsorted(self.sorted, b).clamp(max=self.sorted.shape[-1] - 1)
        lo = (hi - 1).clamp(min=0)
        closer_lo = (self.sorted.gather(-1, lo) - b).abs() < (self.sorted.gather(-1, hi) - b).abs()
        return self.order.gather(-1, torch.where(closer_lo, lo, hi))


def _kept_positions(
    press, layer: int, lookup: _Lookup, ref: Prefix, act: Prefix, kept_length: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Per head, the reference positions of the action's entries in its own order ([kv_heads, entries], −1 on
    padding) and whether each entry is real; None when the entries are not a duplicate-free subset of the reference's
    (same keys and values) with −inf bias on every padding entry."""
    n, entries = ref.length, act.keys[layer].shape[1]
    if isinstance(press, IndexedPress) and layer in press.kept_indices:
        idx = press.kept_indices[layer][0].to(ref.keys[layer].device)
        if idx.shape[-1] != kept_length or bool((idx >= n).any()):
            return None
    else:
        idx = lookup.find(act.keys[layer][:, :kept_length])
    full = torch.full((idx.shape[0], entries), -1, dtype=torch.long, device=idx.device)
    full[:, :kept_length] = idx
    real = full >= 0
    if not bool(real.all()) and not bool(torch.isneginf(act.bias[layer][~real]).all()):
        return None  # a padding entry that would be attended
    rows = full.clamp(min=0)[None]
    for mine, theirs in ((ref.keys[layer], act.keys[layer]), (ref.values[layer], act.values[layer])):
        got = take_entries(mine[None], rows)[0]
        if not (torch.equal(got, theirs) if bool(real.all()) else torch.equal(got[real], theirs[real])):
            return None
    kept = full.masked_fill(~real, -1).sort(dim=-1).values
    if bool(((kept[:, 1:] == kept[:, :-1]) & (kept[:, 1:] >= 0)).any()):
        return None  # an entry kept twice: not a mask
    return full, real


def share_prompt(
    prefixes: dict[str, Prefix],
    kept_lengths: Mapping[str, list[int]],
    presses: Mapping[str, object],
) -> SharedPrompt:
    """Store the reference prefix once (:class:`SharedPrompt`) and turn every action whose cache is a subset of it
    into a bias row; such actions leave ``prefixes`` (the others stay there, private copies). The reference's own
    prefix becomes views of the stored copy."""
    ref = prefixes[REFERENCE]
    n = ref.length
    n_pad = -(-n // PROMPT_ALIGN) * PROMPT_ALIGN
    shared: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
    found: dict[str, list] = {name: [] for name in prefixes if name != REFERENCE}
    for layer in range(len(ref.keys)):
        lookup = _Lookup(ref.keys[layer])
        for name, layers in found.items():
            if layers is not None:
                kept = _kept_positions(presses[name], layer, lookup, ref, prefixes[name], kept_lengths[name][layer])
                found[name] = None if kept is None else layers + [kept]
    for name, layers in found.items():
        if layers is not None:
            shared[name] = ([kept[0] for kept in layers], [kept[1] for kept in layers])
    names = [REFERENCE, *shared]
    keys_t, values, bias = [], [], []
    for layer in range(len(ref.keys)):
        k, v = ref.keys[layer], ref.values[layer]
        kv_heads, head_dim = k.shape[0], k.shape[-1]
        kt = torch.zeros(kv_heads, head_dim, n_pad, dtype=k.dtype, device=k.device)
        kt[:, :, :n] = k.transpose(1, 2)
        vv = torch.zeros(kv_heads, n_pad, head_dim, dtype=v.dtype, device=v.device)
        vv[:, :n] = v
        b = torch.full((len(names), kv_heads, n_pad), float("-inf"), dtype=torch.float32, device=k.device)
        b[0, :, :n] = ref.bias[layer]
        for row, name in enumerate(names[1:], start=1):
            idx, real = shared[name][0][layer], shared[name][1][layer]
            entry_bias = prefixes[name].bias[layer]
            heads = torch.arange(kv_heads, device=k.device).unsqueeze(-1).expand_as(idx)
            b[row][heads[real], idx[real]] = entry_bias[real]
        keys_t.append(kt)
        values.append(vv)
        bias.append(b)
        # the reference prefix now reads the stored copy (the prefill's cache tensors can go)
        ref.keys[layer], ref.values[layer] = kt[:, :, :n].transpose(1, 2), vv[:, :n]
    ref._keys_t = None
    prompt = SharedPrompt(keys_t, values, n, bias, {name: row for row, name in enumerate(names)})
    for name in names:
        prefix = prefixes[name]
        if name == REFERENCE:
            arange = torch.arange(n, device=ref.keys[0].device)
            prompt.kept[name] = [arange.expand(k.shape[0], n) for k in ref.keys]
        else:
            prompt.kept[name] = shared[name][0]
            del prefixes[name]
        prompt.entry_bias[name] = prefix.bias
        prompt.entries[name] = prefix.length
    return prompt


def packs_prompt(model: torch.nn.Module, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a session packs its shared prompt (:func:`pack_prompt`): where ``model``'s Linear layers are packed
    (a CPU float32 model whose spec keeps ``prepack`` on, kvdiv.models.prepacked), its caches float32 on a CPU."""
    return device.type == "cpu" and dtype == torch.float32 and is_prepacked(model)


def pack_prompt(prompt: SharedPrompt) -> None:
    """Pack ``prompt``'s keys and values (float32, CPU) for oneDNN, per layer and KV head (:class:`PackedPrompt`): a
    decode step's products over the prompt run against the packed copy, about twice as fast at a block's few rows as
    torch's batched matmul, which packs the prompt again at every call (benchmarks/shared_prompt.md)."""
    keys, values, sources = [], [], []
    for kt, v in zip(prompt.keys_t, prompt.values):
        keys.append([pack_matrix(kt[h].t()) for h in range(kt.shape[0])])
        values.append([pack_matrix(v[h].t()) for h in range(v.shape[0])])
        sources.append(_source(kt, v))
    prompt.packed = PackedPrompt(keys, values, sources)


def kept_positions(
    press, ref: Prefix, act: Prefix | None, prompt: SharedPrompt | None, name: str, kept_lengths: list[int], n: int
) -> list[torch.Tensor | None]:
    """Per layer, the prompt positions action ``name`` keeps ([kv_heads, kept], in its cache's order): a shared cache's
    recorded positions, else the press's own (``IndexedPress``) or its keys matched against the reference's first
    ``n`` (None for a layer whose keys are not among them); entries a head masks reported as −1 after its others."""
    out: list[torch.Tensor | None] = []
    for layer, kept in enumerate(kept_lengths):
        if act is None:  # the positions the shared prompt's bias row was built from
            idx, bias = prompt.kept[name][layer][:, :kept], prompt.entry_bias[name][layer]
        else:
            if isinstance(press, IndexedPress) and layer in press.kept_indices:
                idx = press.kept_indices[layer][0].to(ref.keys[layer].device)
            else:
                idx = match_rows(ref.keys[layer][:, :n], act.keys[layer][:, :kept])
            bias = act.bias[layer]
        if idx is not None:
            masked = torch.isneginf(bias[:, : idx.shape[1]])
            if masked.any():
                idx = torch.stack(
                    [
                        torch.cat([h[~m], torch.full((int(m.sum()),), -1, dtype=h.dtype, device=h.device)])
                        for h, m in zip(idx, masked)
                    ]
                )
        out.append(idx)
    return out


__all__ = [
    "PROMPT_ALIGN",
    "PackedPrompt",
    "SharedPrompt",
    "kept_positions",
    "pack_prompt",
    "packs_prompt",
    "share_prompt",
]
