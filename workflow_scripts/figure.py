"""Snakemake script of rule figure: a result's analysis Parquet -> its figure as PDF + PNG (kvdiv.results.registry)."""

import logging

from kvdiv.io import read_parquet
from kvdiv.joblog import job_log
from kvdiv.results.registry import plot_result

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    frames = {name: read_parquet(path) for name, path in snakemake.input.items()}
    out, params = snakemake.output, snakemake.params
    plot_result(snakemake.wildcards.item, frames, out.pdf, out.png, dpi=int(params.dpi), **dict(params.settings))
    logging.info("wrote %s and %s", out.pdf, out.png)
