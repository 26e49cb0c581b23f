"""What kvdiv asks of a press beyond kvpress's ``forward_hook``: optional, duck-typed protocols (a press provides the
members, no base class or registration), checked with ``isinstance``.

:class:`SeededPress` (the press draws at random: the session seeds it per document and reports its seeds),
:class:`BiasedPress` (a decode-time logit bias on its kept entries) and :class:`IndexedPress` (it records which prompt
positions it kept) for :class:`~kvdiv.kernel.session.KernelSession`; kvdiv's ``ProbabilisticPress`` implements all
three, a press implementing none is run as kvpress runs it. :class:`JudgedPress`: an own press states when it is not
itself (:mod:`kvdiv.kernel.presses.degenerate`). docs/internals.md#kernel-pairs, docs/own-presses.md.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class SeededPress(Protocol):
    """A press whose eviction draws at random from seeds: ``set_document`` is called once per document before the
    prefill (``seed_parts`` = master seed, study seed, document id); ``seed``, ``draw_seed`` and ``layer_seed(l)`` for
    every layer are reported by :meth:`~kvdiv.kernel.session.KernelSession.press_seeds` (the stores'
    ``press_seeds``)."""

    seed: int
    draw_seed: int | None

    def set_document(self, *seed_parts: int | str, action: str) -> int:
        """Seed this document's draws from ``seed_parts`` and the action's name; return the draw seed."""
        ...

    def layer_seed(self, layer: int | str) -> int:
        """The seed of layer ``layer``'s draw."""
        ...


@runtime_checkable
class BiasedPress(Protocol):
    """A press whose kept entries carry an additive decode-time attention-logit bias (added to the session's own)."""

    def attention_bias(self, layer: int) -> torch.Tensor | None:
        """[batch, kv_heads, kept] bias of layer ``layer``'s compressed entries, in the order of the keys the press
        wrote (−inf: padding, never attended); None: no bias for this layer."""
        ...


@runtime_checkable
class IndexedPress(Protocol):
    """A press that records the prompt positions it kept, so the session need not recover them by key matching."""

    #: per compressed layer: LongTensor [batch, kv_heads, kept] of kept prompt positions, in the order of the keys the
    #: press wrote (−1: padding); a layer missing from it is recovered by matching keys
    kept_indices: dict[int, torch.Tensor]


@runtime_checkable
class JudgedPress(Protocol):
    """A press that states its own degenerate cases (kvdiv's press kinds have theirs in
    :data:`kvdiv.kernel.presses.degenerate.RULES`): checked for every (study, action, stratum) when the workflow starts
    and for every document in its job."""

    def degenerate_reason(self, prompt_length: int) -> str | None:
        """Why the press, compressing ``prompt_length`` entries, is not itself (e.g. "keeps 40 entries, all of them
        pinned by its window"), or None."""
        ...


__all__ = ["BiasedPress", "IndexedPress", "JudgedPress", "SeededPress"]
