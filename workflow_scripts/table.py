"""Snakemake script of rule table: metrics -> a table result as CSV, Markdown, LaTeX (kvdiv.results.registry)."""

import logging
from pathlib import Path

from kvdiv.analysis.inputs import load_metrics
from kvdiv.joblog import job_log
from kvdiv.results.registry import get_result, write_result_table

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    s = dict(snakemake.params.settings)
    item = snakemake.wildcards.item
    metrics = load_metrics(sorted({str(Path(p).parent) for p in snakemake.input.metrics}))
    numbers = get_result(item).build_table("numbers", metrics, n_boot=s.pop("bootstrap"), **s)
    out = snakemake.output
    write_result_table(item, numbers, (out.csv, out.md, out.tex))
    logging.info("%s: %d rows", item, numbers.height)
