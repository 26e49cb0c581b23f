"""Bytes a document's :class:`~kvdiv.kernel.session.KernelSession` holds, by cache layout, and batches of documents
sized by a memory budget (``documents_per_batch: auto``, docs/usage.md#how-jobs-run).

Counted from the model's shapes, as the session allocates (docs/internals.md#kernel-pairs): ``shared`` one prompt copy
(two where it is packed for oneDNN), a bias row per cache, a slot of ≈ H entries per chain (a decoding action's chains
bounded by whole copies); ``slots`` every cache's prompt part (with transposed keys) and a whole copy per chain. A
prefill needs more for a while (its cache, every action's compressed copy, activations, a SnapKV window's attention):
counted once per batch, for its largest document. Not counted: the model's weights (the budget is what is free after
loading it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: Share of the free memory a batch may plan for when no budget is configured: of the machine's available memory on a
#: CPU, of the accelerator's free memory otherwise.
DEFAULT_SHARE = {"cpu": 0.6, "accelerator": 0.85}
ALIGN = 64


def _round(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class CacheShape:
    """What a K/V entry costs: decoder layers, KV heads, head width, attention heads, hidden and MLP widths, vocabulary,
    and the bytes of one element (the model's dtype)."""

    layers: int
    kv_heads: int
    head_dim: int
    heads: int
    hidden: int
    intermediate: int
    vocab: int
    element_bytes: int

    @classmethod
    def from_config(cls, config: Any, element_bytes: int) -> "CacheShape":
        """From a transformers config (its text config for a multimodal one)."""
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        heads = text.num_attention_heads
        return cls(
            layers=text.num_hidden_layers,
            kv_heads=getattr(text, "num_key_value_heads", None) or heads,
            head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
            heads=heads,
            hidden=text.hidden_size,
            intermediate=text.intermediate_size,
            vocab=text.vocab_size,
            element_bytes=element_bytes,
        )

    @classmethod
    def from_model(cls, model: Any) -> "CacheShape":
        return cls.from_config(model.config, next(model.parameters()).element_size())

    @property
    def entry_bytes(self) -> int:
        """Keys and values of one entry, every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.element_bytes

    @property
    def bias_bytes(self) -> int:
        """One float32 logit bias per layer and KV head."""
        return 4 * self.layers * self.kv_heads


def retention(spec: Mapping[str, Any] | Any, compressed: int | None = None) -> float:
    """The share of the prompt an action's cache keeps: 1 − its ``compression_ratio`` where its spec names one
    (or its wrapped press's), ``kept_entries`` / ``compressed`` where it keeps a fixed number (with the entries
    compressed given), else 1 (a bound)."""
    if not isinstance(spec, Mapping):
        ratio = getattr(spec, "compression_ratio", None)
        return 1.0 if not isinstance(ratio, (int, float)) else 1.0 - float(ratio)
    kept = spec.get("kept_entries")
    if isinstance(kept, int) and not isinstance(kept, bool):
        return min(1.0, kept / compressed) if compressed else 1.0
    for key in ("compression_ratio", "target_compression_ratio"):
        if isinstance(spec.get(key), (int, float)) and not isinstance(spec.get(key), bool):
            return 1.0 - float(spec[key])
    for key in ("wraps", "press", "prefilling_press"):
        if isinstance(spec.get(key), Mapping):
            return retention(spec[key], compressed)
    return 1.0


def decodes(spec: Mapping[str, Any] | Any, compressed: int) -> bool:
    """Whether an action compresses while decoding (its press, or a part of it, a kvpress decoding press), built as
    for a prompt of ``compressed`` entries (a ``kept_entries`` spec needs the length)."""
    from kvdiv.kernel.presses.registry import build_press, decoding_press

    press = build_press(spec, prompt_length=compressed) if isinstance(spec, Mapping) else spec
    return decoding_press(press) is not None


def document_bytes(
    shape: CacheShape,
    prompt: int,
    compressed: int,
    actions: Mapping[str, Any],
    chains: int,
    horizon: int,
    layout: str = "shared",
    packed: bool = False,
) -> int:
    """Bytes a session of ``prompt`` tokens (``compressed`` of them compressed, the rest fed after) holds for its
    caches and ``chains`` chains (the most alive at once) while it generates ``horizon`` tokens; ``packed``: the shared
    prompt has a oneDNN copy besides (:func:`kvdiv.kernel.shared_prompt.packs_prompt`)."""
    entry, bias = shape.entry_bytes, shape.bias_bytes
    fed = prompt - compressed
    n_caches = 1 + len(actions)
    laws = 3 * chains * shape.vocab * 8  # a step's float64 laws and the coupling's copies
    if layout == "slots":
        kept = compressed * (1 + sum(retention(spec, compressed) for spec in actions.values()))
        prefixes = kept * (entry + entry // 2 + bias) + fed * n_caches * (entry + bias)
        capacity = _round(compressed + fed + 1 + horizon + 1)
        return prefixes + chains * capacity * (entry + bias) + laws
    private = [name for name, spec in actions.items() if decodes(spec, compressed)]
    shared = n_caches - len(private)
    n_pad = _round(compressed)
    prompt_bytes = n_pad * entry + shared * n_pad * bias
    if packed:  # per layer and KV head, the keys [n_pad, head_dim] and values [head_dim, n_pad] as oneDNN holds them
        from kvdiv.models.prepacked import packed_pair_nbytes

        hd, size = shape.head_dim, shape.element_bytes
        prompt_bytes += shape.layers * shape.kv_heads * packed_pair_nbytes(n_pad, hd, size)
    tail_slots = math.ceil(chains * shared / n_caches)
    tails = tail_slots * _round(fed + 1 + horizon + 1) * (entry + bias) + fed * shared * (entry + bias)
    private_slots = chains - tail_slots
    privates = private_slots * _round(prompt + 1 + horizon + 1) * (entry + bias)
    return prompt_bytes + tails + privates + laws


def prefill_bytes(shape: CacheShape, compressed: int, actions: Mapping[str, Any]) -> int:
    """What a prefill of ``compressed`` tokens needs beyond its session's bytes, for a while: the prefill cache and
    every action's compressed copy, the forward's activations ([n, hidden] several times, the MLP's [n, intermediate]
    three times) and a SnapKV-style window's attention weights ([heads, window, n] float32)."""
    n = compressed
    copies = n * shape.entry_bytes * (1 + sum(retention(spec, n) for spec in actions.values()))
    activations = n * (6 * shape.hidden + 3 * shape.intermediate) * max(shape.element_bytes, 4)
    windows = [
        spec.get("window_size", 64)
        for spec in _flatten(actions.values())
        if isinstance(spec, Mapping) and "window_size" in spec
    ]
    window = 4 * shape.heads * max(windows, default=64) * n
    return copies + activations + window


def _flatten(specs) -> list:
    out = []
    for spec in specs:
        out.append(spec)
        if isinstance(spec, Mapping):
            out.extend(_flatten([v for v in spec.values() if isinstance(v, Mapping)]))
            out.extend(_flatten([x for v in spec.values() if isinstance(v, list) for x in v if isinstance(x, Mapping)]))
    return out


def free_bytes(device: Any) -> int:
    """Memory free now: the accelerator's, or the machine's available memory
    (:func:`kvdiv.kernel.chain_slots.available_bytes`); a ValueError naming ``memory_budget_gb`` where it is unknown."""
    import torch

    from kvdiv.kernel.chain_slots import available_bytes

    cuda = getattr(device, "type", "cpu") == "cuda"
    free = available_bytes(device if cuda else torch.device("cpu"))
    if free is None:
        raise ValueError(
            f"documents_per_batch: auto sizes batches by the memory free on {device}, which this machine does not "
            "report: set the model spec's memory_budget_gb (GB a job's batches may hold) or a number of "
            "documents_per_batch"
        )
    return free


def default_budget(device: Any) -> int:
    """:data:`DEFAULT_SHARE` of the memory free now on ``device``."""
    kind = "cpu" if getattr(device, "type", "cpu") == "cpu" else "accelerator"
    return int(DEFAULT_SHARE[kind] * free_bytes(device))


def batch_sizes(document: Sequence[int], prefill: Sequence[int], budget: int) -> list[int]:
    """Consecutive batches (their sizes, in order) of documents whose bytes (``document[d]`` while generating, plus
    the largest ``prefill[d]`` of the batch once) fit in ``budget``; a document that does not fit alone is a batch
    of one."""
    sizes, used, extra, count = [], 0, 0, 0
    for held, peak in zip(document, prefill):
        if count and used + held + max(extra, peak) > budget:
            sizes.append(count)
            used, extra, count = 0, 0, 0
        used, extra, count = used + held, max(extra, peak), count + 1
    if count:
        sizes.append(count)
    return sizes


def batch_bytes(document: Sequence[int], prefill: Sequence[int], sizes: Sequence[int]) -> list[int]:
    """What each of the consecutive batches of ``sizes`` documents needs, as :func:`batch_sizes` counts it: its
    documents' bytes while generating and its largest prefill once."""
    out, first = [], 0
    for size in sizes:
        out.append(sum(document[first : first + size]) + max(prefill[first : first + size]))
        first += size
    return out


__all__ = [
    "CacheShape",
    "batch_bytes",
    "DEFAULT_SHARE",
    "batch_sizes",
    "decodes",
    "default_budget",
    "document_bytes",
    "free_bytes",
    "prefill_bytes",
    "retention",
]
