"""One decode step of one or several :class:`~kvdiv.kernel.session.KernelSession` of one model in ONE batched forward.

Each session checks its chains and plans its attention runs (``KernelSession._prepare`` → :class:`StepPart`); the
step hands the model one :class:`~kvdiv.kernel.decode_attention.DecodePlan` with a part per session (its own buffers,
slots and runs, so its attention is computed exactly as in a step of its own), pads a CPU step to the rows that make
every row's bits independent of the others (:func:`kvdiv.models.prepacked.min_rows`), turns the logits into laws and
runs decode-time compression. :func:`observe_steps` lets a caller (a benchmark) see each step's rows, K/V entries
read and seconds without wrapping this function. docs/internals.md#kernel-pairs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Sequence

import torch

from kvdiv.kernel.attention_switch import switched_attention
from kvdiv.kernel.chain_slots import TAIL
from kvdiv.kernel.decode_attention import (
    ATTN_IMPLEMENTATION,
    DecodePart,
    DecodePlan,
    PromptPass,
    SlotCache,
    planned,
    prompt_block,
)
from kvdiv.kernel.decoding import HiddenCapture
from kvdiv.kernel.step_plan import Session
from kvdiv.models.prepacked import min_rows


@dataclass(frozen=True)
class StepRecord:
    """One batched decode step as an observer sees it: the rows of live chains the model ran (``rows``; ``padding``
    rows besides), the K/V entries its attention products read (``kv_entries``, per layer and KV head: the shared
    prompt once per block of chains, each chain's slot over its span) and its wall ``seconds`` (the device
    synchronised before and after while observed)."""

    rows: int
    padding: int
    kv_entries: int
    seconds: float


_OBSERVERS: list[Callable[[StepRecord], None]] = []


@contextlib.contextmanager
def observe_steps(callback: Callable[[StepRecord], None]) -> Iterator[None]:
    """Call ``callback`` with a :class:`StepRecord` after every batched forward of :func:`step_sessions` while inside
    the ``with`` block (steps whose chains have all ended run no forward and are not reported)."""
    _OBSERVERS.append(callback)
    try:
        yield
    finally:
        _OBSERVERS.remove(callback)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def step_sessions(
    requests: Sequence[tuple[Session, Sequence[int], Sequence[int] | torch.Tensor]],
) -> list[torch.Tensor]:
    """One decode step of several sessions of ONE model (e.g. one per document) in one batched forward.

    ``requests`` are (session, chains, tokens) as for :meth:`KernelSession.step`; returns each request's
    [len(chains), V] float64 laws. The sessions keep their own buffers, slots and attention runs
    (:class:`kvdiv.kernel.decode_attention.DecodePart`), so a session's attention is computed exactly as in a step
    of its own; only the model's dense layers see the rows of all sessions together.
    """
    if not requests:
        return []
    model = requests[0][0].model
    if any(session.model is not model for session, _, _ in requests):
        raise ValueError("step_sessions: every session must decode with the same model object")
    if len({id(session) for session, _, _ in requests}) != len(requests):
        raise ValueError("step_sessions: a session appears twice in one step")
    observed = list(_OBSERVERS)
    if observed:
        _synchronize(requests[0][0].device)
        start = time.perf_counter()
    parts = [session._prepare(chains, tokens) for session, chains, tokens in requests]
    running = [p for p in parts if p.active]
    if not running:
        return [p.out for p in parts]
    read = 0
    plan = DecodePlan(parts=[])
    ids, positions, row = [], [], 0
    starts = []  # each session's first row
    for p in running:
        s = p.session
        starts.append(row)
        for g in p.groups:
            slots = s._chains.pools[g.pool]
            prompt = None
            if g.pool == TAIL:
                sp = s._prompt
                prompt = PromptPass(sp.keys_t, sp.values, sp.bias, g.prompt_rows, prompt_block(s.device), sp.packed)
            n = len(g.active)
            plan.parts.append(
                DecodePart(row, row + n, slots.keys_t, slots.values, slots.bias, g.slots, g.lengths, g.runs, prompt)
            )
            entries = plan.parts[-1].entries_read()
            s.kv_entries_read += entries
            read += entries
            row += n
        ids.extend([a[3]] for a in p.active)
        positions.extend([a[2].position] for a in p.active)
    first = running[0].session
    dev = first.device
    # rows whose cache compresses during decoding: their attention inputs are captured for the press's hook
    decoding = {
        id(p)
        for p in running
        if p.session._decoding and not p.session._in_prompt and any(a[2].decode is not None for a in p.active)
    }
    live = row
    pad = _padding_rows(row, model, dev)
    if pad:
        plan.parts.append(_padding_part(first, row, pad))
        ids.extend([[0]] * pad)
        positions.extend([[0]] * pad)
        row += pad
    pos_t = torch.tensor(positions, dtype=torch.long, device=dev)
    ids_t = torch.tensor(ids, dtype=torch.long, device=dev)
    dummy_mask = torch.zeros(row, 1, 1, 1, dtype=first.dtype, device=dev)
    capture = HiddenCapture(first._attn if decoding else [])
    with planned(plan), capture, switched_attention(first._configs, ATTN_IMPLEMENTATION):
        logits = model(
            input_ids=ids_t,
            position_ids=pos_t,
            past_key_values=SlotCache(plan),
            attention_mask=dummy_mask,
            cache_position=pos_t[0],
            use_cache=True,
        ).logits[:, -1]
    for p, row0 in zip(running, starts):  # (the padding part, if any, comes last and is dropped)
        laws = p.session._law(logits[row0 : row0 + len(p.active)])
        for r, (_, i, ch, _) in enumerate(p.active):
            ch.length += 1
            ch.position += 1
            p.out[i] = laws[r]
        if id(p) in decoding:
            p.session._compress_during_decoding(p, row0, capture.inputs)
    if observed:
        _synchronize(dev)
        record = StepRecord(live, pad, read, time.perf_counter() - start)
        for callback in observed:
            callback(record)
    return [p.out for p in parts]


def _padding_rows(rows: int, model: torch.nn.Module, device: torch.device) -> int:
    """Rows to add to a CPU step of ``rows`` rows so that each row's bits do not depend on how many other rows (actions,
    replicates, documents) share its forward: CPU matrix products change kernels at small row counts (torch 2.13's
    sgemm for 1–3 rows at 1 thread and also 5–7 and 9–11 at 2; packed oneDNN weights for 1 row), so the minimum is
    measured for the model's Linear layers (:func:`kvdiv.models.prepacked.min_rows`). 0 on accelerators."""
    if device.type != "cpu":
        return 0
    return max(min_rows(model) - rows, 0)


def _padding_part(session: Session, row0: int, n: int) -> DecodePart:
    """``n`` throwaway rows (token 0 at position 0) attending to their own key only, in private one-entry buffers."""
    shape = (n, session.kv_heads, 1, session.head_dim)  # (keys transposed: [n, kv_heads, head_dim, 1])
    keys_t = [torch.zeros(shape, dtype=session.dtype, device=session.device).transpose(2, 3).contiguous()]
    keys_t += [torch.zeros_like(keys_t[0]) for _ in range(session.n_layers - 1)]
    values = [torch.zeros(shape, dtype=session.dtype, device=session.device) for _ in range(session.n_layers)]
    bias = [torch.zeros(shape[:3], dtype=torch.float32, device=session.device) for _ in range(session.n_layers)]
    slots = torch.arange(n, device=session.device)
    return DecodePart(row0, row0 + n, keys_t, values, bias, slots, torch.zeros_like(slots), [(0, n, 0, n, 1)])


__all__ = ["step_sessions"]
