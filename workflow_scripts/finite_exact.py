"""Snakemake script of rule finite_exact: exact values of every system by enumeration (kvdiv.finite)."""

import logging

from kvdiv.finite.system import load_system
from kvdiv.finite.study import exact_table
from kvdiv.io import write_parquet
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    systems = [load_system(p) for p in snakemake.input.systems]
    table = exact_table(systems, int(snakemake.params.window))
    write_parquet(table, snakemake.output[0])
    logging.info("exact values of %d systems:\n%s", table.height, table)
