"""The figure of each analysis item: item name → its plotting function (one module per figure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from kvdiv.outputs.figure5 import plot_figure5
from kvdiv.outputs.figure6 import plot_figure6
from kvdiv.outputs.figure7 import plot_figure7

#: Figure item (kvdiv.analysis.items) → plotting function.
PLOTS = {"figure5": plot_figure5, "figure6": plot_figure6, "figure7": plot_figure7}


def plot_item(item: str, frames: Mapping[str, pl.DataFrame], pdf: str | Path, png: str | Path, *, dpi: int,
              early: Sequence[int], late: Sequence[int]) -> None:
    """Draw figure item ``item`` from its analysis tables to ``pdf`` and ``png`` (the depth windows ``early`` and
    ``late`` are marked on Figure 6)."""
    if item not in PLOTS:
        raise KeyError(f"unknown figure {item!r}; figures: {', '.join(PLOTS)}")
    extra = {"early": early, "late": late} if item == "figure6" else {}
    PLOTS[item](frames, pdf, png, dpi=dpi, **extra)
