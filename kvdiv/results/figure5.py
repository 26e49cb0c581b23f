"""Figure 5: entry into divergence and the gap decomposition (paper §5.2)."""

from __future__ import annotations

from kvdiv.analysis.decomposition import gap_decomposition
from kvdiv.analysis.timing import entry_contrasts, entry_times, survival_curves
from kvdiv.outputs.figure5 import plot_figure5, section
from kvdiv.results.base import Plot, Result, Table

RESULT = Result(
    name="figure5",
    kind="figure",
    label="Figure 5",
    title="Figure 5: entry into divergence and the gap decomposition",
    tables={
        "decomposition": Table(gap_decomposition, {"contrasts": "contrasts"}),
        "survival": Table(survival_curves),
        "entry": Table(entry_times),
        "entry_contrasts": Table(entry_contrasts, {"contrasts": "contrasts"}),
    },
    plot=Plot(plot_figure5),
    section=section,
    paper=("retention50",),
    study="retention50",
)
