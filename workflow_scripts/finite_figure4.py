"""Snakemake script of rule finite_figure4: render Figure 4 (kvdiv.plotting.figure4)."""

import logging
import sys

import polars as pl

from kvdiv.plotting.figure4 import plot_figure4

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with open(snakemake.log[0], "w") as log:
    sys.stderr = sys.stdout = log
    logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    plot_figure4(
        pl.read_parquet(snakemake.input.comparison),
        pl.read_csv(snakemake.input.paper_table),
        snakemake.output.pdf,
        snakemake.output.png,
        dpi=int(snakemake.params.dpi),
    )
    logging.info("wrote %s and %s", snakemake.output.pdf, snakemake.output.png)
