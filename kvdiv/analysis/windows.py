"""Windows of generation positions or divergence-aligned depths ``[first, last]`` (Table 2's blocks, Table 3's
short window, Figures 6–7's early and late depths): checked against the horizon, and as polars filters."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def check_window(name: str, window: object, last: int, context: str = "") -> tuple[int, int]:
    """A window ``[first, last]`` of 1-based positions or depths with 1 ≤ first ≤ last ≤ ``last``, as a tuple;
    anything else (reversed, past the horizon, not two integers) is a ``ValueError`` naming ``name`` (and
    ``context``, e.g. which study's horizon bounds it)."""
    context = f" ({context})" if context else ""
    if (
        not isinstance(window, (list, tuple))
        or len(window) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in window)
    ):
        raise ValueError(f"{name} = {window!r} is not a window [first, last] of two integers{context}")
    first, end = window
    if first < 1 or first > end:
        raise ValueError(f"{name} = {list(window)} is not a window 1 <= first <= last{context}")
    if end > last:
        raise ValueError(f"{name} = {list(window)} reaches past {last}, the last position it can hold{context}")
    return int(first), int(end)


def in_window(depth: pl.Expr, window: Sequence[int]) -> pl.Expr:
    return (depth >= window[0]) & (depth <= window[1])
