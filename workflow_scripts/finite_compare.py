"""Snakemake script of rule finite_compare: per-system variance/evaluation ratios and our-vs-paper table."""

import logging
import sys

import polars as pl
import yaml

from kvdiv.finite_study import comparison_table, paper_comparison, to_markdown
from kvdiv.io import atomic_path

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with open(snakemake.log[0], "w") as log:
    sys.stderr = sys.stdout = log
    logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    comparison = comparison_table(pl.read_parquet(snakemake.input.exact), pl.read_parquet(snakemake.input.estimates))
    with open(snakemake.input.paper) as fh:
        paper = yaml.safe_load(fh)["finite_state"]
    table = paper_comparison(comparison, paper)
    out = snakemake.output
    with atomic_path(out.comparison) as tmp:
        comparison.write_parquet(tmp)
    with atomic_path(out.csv) as tmp:
        table.write_csv(tmp)
    with atomic_path(out.md) as tmp:
        tmp.write_text("# Finite-state study: ours vs arXiv 2609.16617 (section 4.4)\n\n" + to_markdown(table))
    logging.info("per-system comparison:\n%s\nours vs paper:\n%s", comparison, table)
