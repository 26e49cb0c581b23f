"""Snakemake script of rule figure: analysis Parquet -> Figure 5, 6 or 7 as PDF + PNG (kvdiv.plotting)."""

import logging

from kvdiv.io import read_parquet
from kvdiv.joblog import job_log
from kvdiv.plotting.figure5 import plot_figure5
from kvdiv.plotting.figure6 import plot_figure6
from kvdiv.plotting.figure7 import plot_figure7

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    frames = {name: read_parquet(path) for name, path in snakemake.input.items()}
    item, out, dpi = snakemake.wildcards.item, snakemake.output, int(snakemake.params.dpi)
    if item == "figure5":
        plot_figure5(frames, out.pdf, out.png, dpi=dpi)
    elif item == "figure6":
        plot_figure6(frames, out.pdf, out.png, early=snakemake.params.early, late=snakemake.params.late, dpi=dpi)
    elif item == "figure7":
        plot_figure7(frames, out.pdf, out.png, dpi=dpi)
    else:
        raise ValueError(f"unknown figure {item!r}")
    logging.info("wrote %s and %s", out.pdf, out.png)
