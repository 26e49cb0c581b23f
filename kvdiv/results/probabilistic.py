"""The probabilistic-eviction figure: does ProbabilisticPress's decode-time correction delay divergence?"""

from __future__ import annotations

from kvdiv.analysis.decomposition import gap_decomposition
from kvdiv.analysis.timing import entry_times, survival_curves
from kvdiv.outputs.figure_probabilistic import plot_probabilistic, section
from kvdiv.results.base import Plot, Result, Table

RESULT = Result(
    name="probabilistic",
    kind="figure",
    label="Probabilistic eviction",
    title="Probabilistic eviction: does decode-time correction delay divergence?",
    tables={
        "decomposition": Table(gap_decomposition, {"contrasts": "contrasts"}),
        "survival": Table(survival_curves),
        "entry": Table(entry_times),
    },
    plot=Plot(plot_probabilistic),
    section=section,
)
