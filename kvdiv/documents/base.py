"""The shape every synthetic task shares: a seeded instance whose prompt grows with a size parameter.

A task draws everything random once (keys, values, needle depths, word counts), then renders its user
message for any haystack size ``units`` plus ``pad`` filler words. The answers never depend on the size,
so :mod:`kvdiv.documents.length` can search the size that meets a token budget without redrawing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass
class Instance:
    """One drawn task instance.

    Attributes
    ----------
    render : callable (units, pad) -> str
        The user message with ``units`` haystack units and ``pad`` filler words (``pad`` is ignored
        when ``pads`` is false).
    answers : list of str
        The reference answers; each occurs verbatim in every rendering.
    answer_prefix : str
        Text that opens the assistant's reply (RULER-style), appended after the chat template.
    pads : bool
        Whether the task accepts filler-word padding for fine length control.
    max_units : int or None
        The largest haystack the task can build (None: unbounded).
    """

    render: Callable[[int, int], str]
    answers: list[str]
    answer_prefix: str = ""
    pads: bool = True
    max_units: int | None = None


@dataclass(frozen=True)
class Task:
    """A named task: how to draw an instance and how to score a prediction.

    Attributes
    ----------
    name : str
    build : callable (rng, target_length) -> Instance
    metric : str
        ``"all"`` (RULER string-match all: fraction of answers found), ``"part"`` (any answer found) or
        ``"subem"`` (HELMET substring exact match after normalisation).
    description : str
    """

    name: str
    build: Callable[[np.random.Generator, int], Instance]
    metric: str
    description: str


class Stream:
    """A lazily extended list of items drawn one at a time from one generator.

    Item ``i`` is the same however many items were requested before, so a haystack of ``n`` units is a
    prefix of the haystack of ``n + 1`` units.
    """

    def __init__(self, draw: Callable[[], Any], limit: int | None = None):
        self._draw = draw
        self._items: list[Any] = []
        self.limit = limit

    def take(self, n: int) -> list[Any]:
        """The first ``n`` items."""
        if self.limit is not None and n > self.limit:
            raise ValueError(f"requested {n} items from a stream limited to {self.limit}")
        while len(self._items) < n:
            self._items.append(self._draw())
        return self._items[:n]


def insert_at_depths(units: list[str], needles: list[str], depths: list[float]) -> list[str]:
    """Insert each needle before unit ``round(depth · len(units))`` (depth in [0, 1]), keeping needle order."""
    n = len(units)
    slots: dict[int, list[str]] = {}
    for needle, depth in sorted(zip(needles, depths), key=lambda p: p[1]):
        slots.setdefault(int(round(depth * n)), []).append(needle)
    out: list[str] = []
    for i in range(n + 1):
        out.extend(slots.get(i, ()))
        if i < n:
            out.append(units[i])
    return out


#: Prompt bytes besides a long-answer task's items, at most: chat markup, instruction, question, answer prefix.
OVERHEAD_BYTES = 360


def item_count(target_length: int, spacing: int, item_bytes: int, most: int = 40) -> int:
    """How many items a long-answer task lists at ``target_length`` prompt tokens.

    One item per ``spacing`` tokens of prompt (the answer grows with the context: at 2048 tokens and ``spacing`` 80,
    25 items), but never more than fit at one token per byte — ``item_bytes`` bytes each beside
    :data:`OVERHEAD_BYTES` — so the prompt fits a byte-level tokenizer's budget (the tiny test models'; real tokenizers
    pack several bytes per token); at least 2, at most ``most``.
    """
    return int(max(2, min(most, target_length // spacing, (target_length - OVERHEAD_BYTES) // item_bytes)))
