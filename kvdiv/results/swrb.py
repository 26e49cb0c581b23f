"""The SWRB section: residual-branch estimation on the LLM study — variance–cost and the enclosure of R_H."""

from __future__ import annotations

from kvdiv.analysis.swrb_comparison import swrb_enclosure, swrb_variance
from kvdiv.outputs.swrb import section
from kvdiv.results.base import Result, Table

RESULT = Result(
    name="swrb",
    kind="section",
    label="SWRB",
    title="SWRB: residual-branch estimation on the LLM study — variance–cost and the enclosure of R_H",
    tables={"variance": Table(swrb_variance), "enclosure": Table(swrb_enclosure)},
    section=section,
    paper=("finite_state",),
    study="retention50",
)
