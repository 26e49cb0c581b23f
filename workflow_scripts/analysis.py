"""Snakemake script of rule analysis: a study's metrics -> one table of a figure item (kvdiv.analysis.items)."""

import logging
from pathlib import Path

from kvdiv.analysis.inputs import load_metrics
from kvdiv.analysis.items import build_table
from kvdiv.io import write_parquet
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    s = dict(snakemake.params.settings)
    item, table = snakemake.wildcards.item, snakemake.wildcards.table
    metrics = load_metrics(sorted({str(Path(p).parent) for p in snakemake.input.metrics}))
    frame = build_table(item, table, metrics, n_boot=s.pop("bootstrap"), **s)
    write_parquet(frame, snakemake.output.table)
    logging.info("%s/%s: %d rows", item, table, frame.height)
