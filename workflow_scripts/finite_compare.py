"""Snakemake script of rule finite_compare: per-system variance/evaluation ratios and our-vs-paper table."""

import logging

from kvdiv.finite.paper import paper_finite_values
from kvdiv.finite.study import comparison_table, paper_comparison, to_markdown
from kvdiv.io import atomic_path, read_parquet, write_parquet
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    comparison = comparison_table(read_parquet(snakemake.input.exact), read_parquet(snakemake.input.estimates))
    table = paper_comparison(comparison, paper_finite_values())
    out = snakemake.output
    write_parquet(comparison, out.comparison)
    with atomic_path(out.csv) as tmp:
        table.write_csv(tmp)
    with atomic_path(out.md) as tmp:
        tmp.write_text("# Finite-state study: ours vs arXiv 2609.16617 (section 4.4)\n\n" + to_markdown(table))
    logging.info("per-system comparison:\n%s\nours vs paper:\n%s", comparison, table)
