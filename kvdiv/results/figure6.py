"""Figure 6: branch TV by divergence-aligned depth within first-divergence cohorts, late minus early (paper §5.3)."""

from __future__ import annotations

from kvdiv.analysis.profiles import branch_tv_profiles, late_minus_early
from kvdiv.outputs.figure6 import plot_figure6, section
from kvdiv.results.base import Plot, Result, Table

LATE_EARLY = {"cohort_max_tau": "cohort_max_tau", "early": "early", "late": "late"}

RESULT = Result(
    name="figure6",
    kind="figure",
    label="Figure 6",
    title="Figure 6: branch TV by divergence-aligned depth",
    tables={
        "profiles": Table(branch_tv_profiles, {"cohort_max_tau": "cohort_max_tau"}),
        "late_minus_early": Table(late_minus_early, LATE_EARLY),
    },
    plot=Plot(plot_figure6, {"early": "early", "late": "late"}),
    section=section,
    paper=("retention50",),
    study="retention50",
)
