"""Snakemake script of rule analysis: a study's metrics -> one table of a result (kvdiv.results.registry)."""

import logging
from pathlib import Path

from kvdiv.analysis.inputs import load_metrics
from kvdiv.io import write_parquet
from kvdiv.joblog import job_log
from kvdiv.results.registry import get_result

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    s = dict(snakemake.params.settings)
    item, table = snakemake.wildcards.item, snakemake.wildcards.table
    metrics = load_metrics(sorted({str(Path(p).parent) for p in snakemake.input.metrics}))
    frame = get_result(item).build_table(table, metrics, n_boot=s.pop("bootstrap"), **s)
    write_parquet(frame, snakemake.output.table)
    logging.info("%s/%s: %d rows", item, table, frame.height)
