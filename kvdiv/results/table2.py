"""Table 2: generation-clock mismatch gaps by position block, per model × task family × length (paper §5.6)."""

from __future__ import annotations

import polars as pl

from kvdiv.analysis.blocks import clock_block_gaps
from kvdiv.outputs.table2 import section, table2_frame
from kvdiv.results.base import Result, Table

RESULT = Result(
    name="table2",
    kind="table",
    label="Table 2",
    title="Table 2: generation-clock gaps by position block",
    tables={"numbers": Table(clock_block_gaps, {"contrasts": "contrasts", "blocks": "blocks"})},
    display=table2_frame,
    caption="Table 2: generation-clock mismatch gaps (pp) by position block, per model × task family × length "
    "(pooled rows: all), with 95% cluster-bootstrap intervals over documents.",
    section=section,
    paper=("retention90",),
    schema={"length": pl.Utf8},
    study="retention90",
)
