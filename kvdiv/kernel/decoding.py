"""Decode-time compression: kvpress's decoding presses run along each chain's own history.

kvpress's ``DecodingPress`` (also ``CompressionRatioDecodingPress`` and ``PrefillDecodingPress``'s decoding half) is a
forward hook keeping its state (step counts, buffered attention inputs per layer) on the press, one sequence at a time.
:class:`~kvdiv.kernel.session.KernelSession` decodes many chains per forward, each with its own cache, so the state
lives
here per chain (:class:`ChainState`) and :func:`run_decoding_hooks` calls the press's own ``forward_hook`` per chain and
layer after the forward, with the chain's state swapped onto the press and a stand-in cache of the chain's entries
(a cut after a layer's attention cannot change the later layers' inputs of the same forward, so after equals inside).
Semantics: docs/internals.md#decode-time-compression.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from kvdiv.kernel.presses.lazy_datasets import import_kvpress

import_kvpress()  # kvpress without `datasets` (kvdiv.kernel.presses.lazy_datasets)
from kvpress import DecodingPress  # noqa: E402,I001


@dataclass
class ChainState:
    """A chain's decode-time compression state, as kvpress's ``DecodingPress`` keeps it per layer: decode forwards
    since the layer's last compression and the buffered attention inputs ([1, 1, hidden] each); ``compressions``
    counts the chain's compression events (one per step at which any layer compressed)."""

    counts: defaultdict = field(default_factory=lambda: defaultdict(int))
    buffers: defaultdict = field(default_factory=lambda: defaultdict(list))
    compressions: int = 0

    def copy(self) -> "ChainState":
        """An independent copy (a forked chain): buffered tensors are shared, never mutated in place."""
        buffers = defaultdict(list, {layer: list(b) for layer, b in self.buffers.items()})
        return ChainState(defaultdict(int, self.counts), buffers, self.compressions)


class _ChainCacheLayer:
    """One layer of one chain as the hook sees ``cache.layers[i]``: ``keys``/``values`` [1, kv_heads, n, head_dim] of
    the entries the chain attends to (built on first read); a hook that compresses assigns new ones."""

    def __init__(self, entries):
        self._entries = entries
        self._keys = self._values = None
        self.assigned = False

    def _load(self):
        if self._keys is None:
            self._keys, self._values = self._entries()

    @property
    def keys(self):
        self._load()
        return self._keys

    @keys.setter
    def keys(self, value):
        self._load()
        self._keys, self.assigned = value, True

    @property
    def values(self):
        self._load()
        return self._values

    @values.setter
    def values(self, value):
        self._load()
        self._values, self.assigned = value, True


class _ChainCache:
    def __init__(self, layers: dict[int, _ChainCacheLayer]):
        self.layers = layers


class HiddenCapture:
    """Forward pre-hooks on the attention modules recording, per layer, the keyword inputs a decoding press's hook
    reads during one batched forward (``hidden_states`` [rows, 1, hidden], ``position_embeddings``); each row's
    position is the session's own."""

    def __init__(self, modules: Sequence[torch.nn.Module]):
        self.modules = list(modules)
        self.inputs: dict[int, dict[str, Any]] = {}
        self._handles: list = []

    def __enter__(self) -> "HiddenCapture":
        def hook(module, args, kwargs):
            hidden = kwargs.get("hidden_states", args[0] if args else None)
            self.inputs[module.layer_idx] = {
                "hidden_states": hidden,
                "position_embeddings": kwargs.get("position_embeddings"),
            }

        self._handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in self.modules]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def _row_kwargs(inputs: dict[str, Any], row: int, position_ids: torch.Tensor, cache: _ChainCache) -> dict[str, Any]:
    """The hook's kwargs for one row of the batched forward: that row's tensors, its own position (kvpress's decode
    path passes ``position_ids`` and ``cache_position`` of the one new token)."""
    hidden = inputs["hidden_states"][row : row + 1]
    pe = inputs["position_embeddings"]
    return {
        "hidden_states": hidden,
        "position_embeddings": None if pe is None else tuple(p[row : row + 1] for p in pe),
        "position_ids": position_ids,
        "cache_position": position_ids[0],
        "past_key_values": cache,
        "attention_mask": None,
        "use_cache": True,
    }


#: A chain's cache at one layer as a decoding press sees it: keys, values [kv_heads, n, head_dim] and logit bias
#: [kv_heads, n] of its entries in the cache's own order (entries no head attends left out).
Entries = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@torch.no_grad()
def run_decoding_hooks(
    press: DecodingPress,
    state: ChainState,
    modules: Sequence[torch.nn.Module],
    inputs: dict[int, dict[str, Any]],
    row: int,
    position: int,
    entries: Callable[[int], Entries],
    action: str,
) -> list[Entries] | None:
    """Run ``press``'s ``forward_hook`` for one chain (its ``row`` of the batched forward, the token it just appended at
    RoPE ``position``) on every layer, with the chain's ``state`` and its cache (``entries(layer)``, read only if the
    press reads it). Returns None when no layer compressed (or every compressed layer kept all its entries in place:
    still counted in ``state.compressions``), else every layer's new entries (a compressed layer's as the press left
    them, carrying each kept entry's bias; the others as they were)."""
    saved = press.hidden_states_buffer, press.layer_step_counts
    layers: dict[int, _ChainCacheLayer] = {}
    read: dict[int, Entries] = {}

    def load(layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        read[layer] = entries(layer)
        k, v, _ = read[layer]
        return k.unsqueeze(0).contiguous(), v.unsqueeze(0)

    position_ids = torch.tensor(
        [[position]], dtype=torch.long, device=inputs[modules[0].layer_idx]["hidden_states"].device
    )
    try:
        press.hidden_states_buffer, press.layer_step_counts = state.buffers, state.counts
        for module in modules:
            layer = module.layer_idx
            cache_layer = _ChainCacheLayer(lambda layer=layer: load(layer))
            layers[layer] = cache_layer
            kwargs = _row_kwargs(inputs[layer], row, position_ids, _ChainCache(layers))
            press.forward_hook(module, (), kwargs, (None, None))
    finally:
        press.hidden_states_buffer, press.layer_step_counts = saved
    compressed = {layer: cl for layer, cl in layers.items() if cl.assigned}
    if not compressed:
        return None
    state.compressions += 1
    out: list[Entries] = []
    moved = False
    for layer in range(len(modules)):
        k_old, v_old, b_old = read[layer] if layer in read else entries(layer)
        if layer not in compressed:
            out.append((k_old, v_old, b_old))
            continue
        moved = moved or not (
            torch.equal(compressed[layer].keys[0], k_old) and torch.equal(compressed[layer].values[0], v_old)
        )
        k_new = compressed[layer].keys[0].clone()
        v_new = compressed[layer].values[0].clone()
        if bool((b_old == 0).all()):
            b_new = torch.zeros(k_new.shape[:2], dtype=b_old.dtype, device=b_old.device)
        else:  # entries carrying a bias (a press's correction, head-wise masks): follow them to where they went
            idx = match_rows(k_old, k_new)
            if idx is None:
                raise RuntimeError(
                    f"action {action!r}: decode-time compression at layer {layer} returned keys that "
                    "are not a subset of the cache's; kvdiv cannot carry their attention bias"
                )
            b_new = b_old.gather(1, idx)
        out.append((k_new, v_new, b_new))
    return out if moved else None  # (a cut that keeps every entry in place changes nothing)


def match_rows(ref: torch.Tensor, sub: torch.Tensor) -> torch.Tensor | None:
    """Indices i with sub[h, j] == ref[h, i[h, j]] exactly, per head h; None if some row has no match."""
    gen = torch.Generator().manual_seed(0)
    r = torch.randn(ref.shape[-1], dtype=torch.float64, generator=gen).to(ref.device)
    a = ref.to(torch.float64) @ r
    b = sub.to(torch.float64) @ r
    order = torch.argsort(a, dim=-1)
    sorted_a = a.gather(-1, order).contiguous()
    # nearest projection (the products may round differently for different tensor shapes), then verify
    hi = torch.searchsorted(sorted_a, b.contiguous()).clamp(max=a.shape[-1] - 1)
    lo = (hi - 1).clamp(min=0)
    closer_lo = (sorted_a.gather(-1, lo) - b).abs() < (sorted_a.gather(-1, hi) - b).abs()
    idx = order.gather(-1, torch.where(closer_lo, lo, hi))
    gathered = ref.gather(1, idx.unsqueeze(-1).expand(-1, -1, ref.shape[-1]))
    if not torch.equal(gathered, sub):
        return None
    return idx


def real_entries(keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor) -> Entries:
    """The entries of a chain's cache ([kv_heads, n, head_dim], bias [kv_heads, n]) that some head attends to (not
    the padding of a shorter layer), as a decoding press sees them."""
    real = torch.isfinite(bias).any(0)
    if bool(real.all()):
        return keys, values, bias
    idx = real.nonzero().flatten()
    return keys[:, idx], values[:, idx], bias[:, idx]


__all__ = ["ChainState", "Entries", "HiddenCapture", "match_rows", "real_entries", "run_decoding_hooks"]
