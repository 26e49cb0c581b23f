"""Figure 7: the 90% retention study — exposure shares, branch-TV contrasts, EOS shares (paper §5.4–5.5)."""

from __future__ import annotations

from kvdiv.analysis.decomposition import eos_shares, gap_decomposition
from kvdiv.analysis.profiles import late_minus_early
from kvdiv.outputs.figure7 import plot_figure7, section
from kvdiv.results.base import Plot, Result, Table
from kvdiv.results.figure6 import LATE_EARLY

RESULT = Result(
    name="figure7",
    kind="figure",
    label="Figure 7",
    title="Figure 7: the 90% retention study",
    tables={
        "decomposition": Table(gap_decomposition, {"contrasts": "contrasts"}, {"by": "family"}),
        "late_minus_early": Table(late_minus_early, LATE_EARLY, {"by": "family"}),
        "late_minus_early_strata": Table(late_minus_early, LATE_EARLY),
        "eos": Table(eos_shares, {"contrasts": "contrasts"}, {"by": "family"}),
    },
    plot=Plot(plot_figure7),
    section=section,
    paper=("retention90",),
    study="retention90",
)
