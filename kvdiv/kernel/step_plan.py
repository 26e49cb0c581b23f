"""The plan of one session's share of a decode step (:meth:`kvdiv.kernel.session.KernelSession._prepare`): check the
chains and tokens, absorb EOS, grow a pool whose chains outgrow it, and group the rows by pool — chains reading the
shared prompt first, then chains with a private copy — with each group's attention runs
(:func:`kvdiv.kernel.chain_slots.attention_runs`). docs/internals.md#kernel-pairs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from kvdiv.kernel.chain_slots import PRIVATE, TAIL, Chain, attention_runs

#: a :class:`kvdiv.kernel.session.KernelSession` (not imported: the session module imports this one)
Session = Any


@dataclass
class StepGroup:
    """The rows of one pool in a session's step: its ``active`` rows (slot, row in out, chain, token) sorted by slot,
    their attention ``runs``, slots and lengths, and (pool ``tail``) each row's row of the shared prompt's bias."""

    pool: str
    active: list[tuple[int, int, Chain, int]]
    runs: list[tuple[int, int, int, int, int]]
    slots: torch.Tensor
    lengths: torch.Tensor
    prompt_rows: torch.Tensor | None = None


@dataclass
class StepPart:
    """One session's rows of a (possibly shared) decode step: ``out`` [chains, V] laws (EOS rows filled), ``active``
    (slot, row in out, chain, token) of the rows run through the model in the order of its ``groups``."""

    session: Session
    out: torch.Tensor
    active: list[tuple[int, int, Chain, int]]
    groups: list[StepGroup] = field(default_factory=list)


def plan_step(session: Session, chains: Sequence[int], tokens: Sequence[int] | torch.Tensor) -> StepPart:
    """Check ``chains`` and ``tokens``, absorb EOS, grow the pools if needed and plan each pool's attention."""
    tokens = [int(t) for t in (tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens)]
    if len(tokens) != len(chains):
        raise ValueError(f"{len(chains)} chains but {len(tokens)} tokens")
    if len(set(chains)) != len(chains):
        raise ValueError("a chain appears twice in one step")
    vocab = session.vocab_size
    out = torch.empty(len(chains), vocab, dtype=torch.float64)
    active: list[tuple[int, int, Chain, int]] = []  # (slot, row in out, chain, token)
    for i, (c, t) in enumerate(zip(chains, tokens)):
        ch = session._chain(c)
        if not 0 <= t < vocab:
            raise ValueError(f"token {t} outside the vocabulary [0, {vocab})")
        if ch.done or (t in session._eos_set and not session._in_prompt):
            ch.done = True
            out[i] = session._eos_law
        else:
            active.append((ch.slot, i, ch, t))
    part = StepPart(session, out, [])
    if not active:
        return part
    window = session._window
    if window is not None and max(ch.position for _, _, ch, _ in active) >= window:
        raise NotImplementedError(
            f"position {max(ch.position for _, _, ch, _ in active)} reaches the model's sliding window "
            f"({window}); kvdiv decoding supports sliding-window layers only inside the window"
        )
    device = session.device
    for pool in (TAIL, PRIVATE):
        members = sorted((a for a in active if a[2].pool == pool), key=lambda a: a[0])
        if not members:
            continue
        slots_pool = session._chains.pools[pool]
        if max(ch.length for _, _, ch, _ in members) >= slots_pool.capacity:
            slots_pool.grow(slots_pool.n_slots, slots_pool.capacity + 128)
        slots = [a[0] for a in members]
        lengths = [a[2].length for a in members]
        runs = attention_runs(slots, lengths, slots_pool.capacity)
        for slot0, slot1, span in ((r[2], r[3], r[4]) for r in runs):  # what each run's attention reads
            for slot in range(slot0, slot1):
                slots_pool.ensure_finite(slot, span)
        group = StepGroup(
            pool,
            members,
            runs,
            torch.tensor(slots, dtype=torch.long, device=device),
            torch.tensor(lengths, dtype=torch.long, device=device),
        )
        if pool == TAIL:
            index = session._prompt.index
            group.prompt_rows = torch.tensor([index[a[2].cache] for a in members], dtype=torch.long, device=device)
        for b in slots_pool.bias:
            b[group.slots, :, group.lengths] = 0
        part.groups.append(group)
        part.active.extend(members)
    return part


__all__ = ["StepGroup", "StepPart", "plan_step"]
