"""How a trajectory job splits its documents into batches generated together (``documents_per_batch``): a fixed
size, one batch, or ``auto`` — as many documents as the memory budget holds, by the bytes of
:mod:`kvdiv.kernel.memory_plan` (each batch's stores are written and its sessions freed before the next)."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from kvdiv.settings import AUTO, AutoBatch, Generation
from kvdiv.trajectories.base import chains_needed

log = logging.getLogger("kvdiv.trajectories.job")


def batching(documents_per_batch: int | AutoBatch | str | None) -> int | AutoBatch | None:
    """``documents_per_batch`` checked: a positive integer, None (one batch), or ``"auto"``/:class:`AutoBatch`."""
    if documents_per_batch == AUTO:
        return AutoBatch()
    if documents_per_batch is not None and not isinstance(documents_per_batch, AutoBatch):
        if isinstance(documents_per_batch, bool) or not isinstance(documents_per_batch, int) or documents_per_batch < 1:
            raise ValueError(
                f"documents_per_batch must be a positive integer, 'auto' or None, got {documents_per_batch!r}"
            )
    return documents_per_batch


def job_budget(loaded: Any, documents_per_batch: int | AutoBatch | None) -> int | AutoBatch | None:
    """``documents_per_batch`` with an ``auto`` budget left to the default measured now, once for the whole job: the
    share of the memory free when the job starts (before any batch: memory its batches held and the allocator or the
    heap kept is not taken for memory in use by later groups of documents)."""
    if not isinstance(documents_per_batch, AutoBatch) or documents_per_batch.budget_bytes is not None:
        return documents_per_batch
    from kvdiv.kernel import memory_plan

    device = getattr(loaded, "device", None) or next(loaded.model.parameters()).device
    return AutoBatch(max(1, memory_plan.default_budget(device)))


def document_sizes(
    shape: Any,
    layout: str,
    lengths: Sequence[int],
    contexts: Sequence[int | None],
    actions: Mapping[str, Any],
    g: Generation,
    packed: bool = False,
) -> tuple[list[float], list[float]]:
    """Per document of ``lengths`` prompt tokens (``contexts``: the tokens compressed, None for the prompt less the
    first step's), the bytes its session holds while it generates in ``layout`` and the extra of its prefill
    (:mod:`kvdiv.kernel.memory_plan`, for a model of ``shape``: a ``CacheShape``; ``packed``: its shared prompt packed
    for oneDNN besides)."""
    from kvdiv.kernel import memory_plan

    chains = chains_needed(len(actions), g.replicates, g.mode, g.effective_reference_chain)
    held, peak = [], []
    for n, context in zip(lengths, contexts):
        compressed = context if context is not None else n - int(g.evict_first_step)
        held.append(memory_plan.document_bytes(shape, n, compressed, actions, chains, g.horizon, layout, packed))
        peak.append(memory_plan.prefill_bytes(shape, compressed, actions))
    return held, peak


def fixed_sizes(count: int, documents_per_batch: int | None) -> list[int]:
    """The sizes of consecutive batches of ``documents_per_batch`` (None: one batch) over ``count`` documents."""
    size = documents_per_batch or count
    return [min(size, count - first) for first in range(0, count, size)]


def batches(
    loaded: Any,
    members: Sequence[int],
    prompts: Sequence[Sequence[int]],
    contexts: Sequence[int | None],
    actions: Mapping[str, Any],
    g: Generation,
    documents_per_batch: int | AutoBatch | None,
) -> list[list[int]]:
    """Documents ``members`` in consecutive batches: of ``documents_per_batch`` (None: one batch), or as many as fit
    its budget (:class:`AutoBatch`; the bytes of :func:`document_sizes`, logged)."""
    if not isinstance(documents_per_batch, AutoBatch):
        sizes = fixed_sizes(len(members), documents_per_batch)
    else:
        from kvdiv.kernel import memory_plan
        from kvdiv.kernel.shared_prompt import packs_prompt

        shape = memory_plan.CacheShape.from_model(loaded.model)
        layout = (getattr(loaded, "spec", None) or {}).get("kv_layout", "shared")
        lengths = [len(prompts[d]) for d in members]
        weight = next(loaded.model.parameters())
        packed = packs_prompt(loaded.model, weight.dtype, weight.device)
        held, peak = document_sizes(shape, layout, lengths, [contexts[d] for d in members], actions, g, packed)
        budget = job_budget(loaded, documents_per_batch).budget_bytes
        sizes = memory_plan.batch_sizes(held, peak, budget)
        log.info(
            "documents_per_batch auto: budget %.2f GB, %.3f GB per document while generating (%s layout), "
            "%.3f GB more during a prefill: batches of %s",
            budget / 1e9,
            max(held) / 1e9,
            layout,
            max(peak) / 1e9,
            sizes,
        )
    out, first = [], 0
    for size in sizes:
        out.append(list(members[first : first + size]))
        first += size
    return out
