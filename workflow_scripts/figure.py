"""Snakemake script of rule figure: a figure item's analysis Parquet -> Figure 5, 6 or 7 as PDF + PNG (kvdiv.outputs)."""

import logging

from kvdiv.io import read_parquet
from kvdiv.joblog import job_log
from kvdiv.outputs.figures import plot_item

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    frames = {name: read_parquet(path) for name, path in snakemake.input.items()}
    out, params = snakemake.output, snakemake.params
    plot_item(snakemake.wildcards.item, frames, out.pdf, out.png, dpi=int(params.dpi), early=params.early, late=params.late)
    logging.info("wrote %s and %s", out.pdf, out.png)
