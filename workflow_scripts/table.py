"""Snakemake script of rule table: metrics -> Table 2 or 3 as CSV, Markdown, LaTeX (kvdiv.analysis, kvdiv.tables)."""

import logging
from pathlib import Path

from kvdiv import analysis, tables
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

CAPTIONS = {
    "table2": "Table 2: generation-clock mismatch gaps (pp) by position block, per model × task family × length "
    "(pooled rows: all), with 95% cluster-bootstrap intervals over documents.",
    "table3": "Table 3: do generation positions 1–32 (observed mismatch gap, fixed-history TV gap) recover the "
    "full-horizon population-average gap within ±2 pp? Document-level MAE/RMSE of the predictions.",
}

with job_log(snakemake.log[0]):
    s = dict(snakemake.params.settings)
    item = snakemake.wildcards.item
    metrics = analysis.load_metrics(sorted({str(Path(p).parent) for p in snakemake.input.metrics}))
    if item == "table2":
        numbers = analysis.clock_block_gaps(metrics, s["contrasts"], s["blocks"], s["bootstrap"], s["seed"], s["confidence"])
        display = tables.table2_frame(numbers)
    elif item == "table3":
        numbers = analysis.prediction_table(
            metrics, s["contrast"], s["short_window"], s["bootstrap"], s["seed"], s["confidence"],
            folds=s["folds"], ridge_alpha=s["ridge_alpha"], criterion=s["criterion"],
        )
        display = tables.table3_frame(numbers)
    else:
        raise ValueError(f"unknown table {item!r}")
    out = snakemake.output
    tables.write_table(numbers, display, (out.csv, out.md, out.tex), CAPTIONS[item], f"tab:{item}")
    logging.info("%s: %d rows", item, numbers.height)
