"""Snakemake script of rule finite_figure4: render Figure 4 (kvdiv.results.figure4)."""

import logging

import polars as pl

from kvdiv.io import read_parquet
from kvdiv.joblog import job_log
from kvdiv.results.figure4 import plot_figure4

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    plot_figure4(
        read_parquet(snakemake.input.comparison),
        pl.read_csv(snakemake.input.paper_table),
        snakemake.output.pdf,
        snakemake.output.png,
        dpi=int(snakemake.params.dpi),
    )
    logging.info("wrote %s and %s", snakemake.output.pdf, snakemake.output.png)
