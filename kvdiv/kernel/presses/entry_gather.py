"""A press's kept K/V entries copied as whole rows: the same tensors as kvpress's ``gather``, at a tenth of its time.

kvpress's ``ScorerPress.compress`` (SnapKV, StreamingLLM, TOVA, Knorm, … and every scorer without its own compress)
keeps the top-scored entries with ``keys.gather(2, indices.expand(…, head_dim))``, which reads one index per element:
on a CPU 0.43 ms for a 4096-token SmolLM2 layer's keys, twice per action and layer. :func:`take_entries` copies
each kept entry's row with one ``index_select`` (0.05 ms): the same elements in the same order, so the same bits.
:func:`row_gather_compress` installs it for a block (the prefill, :func:`kvdiv.kernel.prefill.prefill_caches`);
tests/kernel/test_entry_gather.py holds the caches equal to kvpress's.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from kvpress.presses.scorer_press import ScorerPress
from kvpress.utils import compute_n_kept

#: kvpress's own ``ScorerPress.compress``, as imported (restored after :func:`row_gather_compress`)
KVPRESS_COMPRESS = ScorerPress.__dict__["compress"]


def take_entries(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``tensor`` [batch, heads, n, d] at ``indices`` [batch, heads, k] along n: [batch, heads, k, d], contiguous,
    equal to ``tensor.gather(2, indices[..., None].expand(-1, -1, -1, d))`` (fast for a contiguous ``tensor``; another
    is copied first). Indices of another shape, or outside [0, n), raise as ``gather`` would."""
    batch, heads, n, d = tensor.shape
    if indices.dim() != 3 or tuple(indices.shape[:2]) != (batch, heads):
        raise ValueError(f"indices of shape {tuple(indices.shape)} for entries of shape {tuple(tensor.shape)}")
    if indices.numel() and bool(((indices < 0) | (indices >= n)).any()):  # one check, one device sync
        raise IndexError(f"entry indices outside [0, {n})")
    offsets = torch.arange(batch * heads, device=indices.device).view(batch, heads, 1) * n
    rows = (indices + offsets).reshape(-1)
    return tensor.reshape(batch * heads * n, d).index_select(0, rows).view(batch, heads, indices.shape[-1], d)


def compress(self, module, hidden_states, keys, values, attentions, kwargs):
    """kvpress's ``ScorerPress.compress`` (kvpress 0.5.5) with its two gathers through :func:`take_entries` (kvpress
    expands the indices to ``module.head_dim``: the same where keys and values are that wide, as in every model)."""
    if self.compression_ratio == 0:
        return keys, values
    scores = self.score(module, hidden_states, keys, values, attentions, kwargs)
    n_kept = compute_n_kept(keys.shape[2], self.compression_ratio)
    indices = scores.topk(n_kept, dim=-1).indices
    return take_entries(keys, indices), take_entries(values, indices)


@contextmanager
def row_gather_compress() -> Iterator[None]:
    """Within the block, ``ScorerPress.compress`` (and every subclass that does not override it) is :func:`compress`;
    kvpress's is restored afterwards, also after an exception."""
    saved = ScorerPress.__dict__["compress"]
    ScorerPress.compress = compress
    try:
        yield
    finally:
        ScorerPress.compress = saved


__all__ = ["KVPRESS_COMPRESS", "compress", "row_gather_compress", "take_entries"]
