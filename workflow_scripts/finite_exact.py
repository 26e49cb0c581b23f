"""Snakemake script of rule finite_exact: exact values of every system by enumeration (kvdiv.finite)."""

import logging
import sys

from kvdiv.finite import load_system
from kvdiv.finite_study import exact_table
from kvdiv.io import atomic_path

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with open(snakemake.log[0], "w") as log:
    sys.stderr = sys.stdout = log
    logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    systems = [load_system(p) for p in snakemake.input.systems]
    table = exact_table(systems, int(snakemake.params.window))
    with atomic_path(snakemake.output[0]) as tmp:
        table.write_parquet(tmp)
    logging.info("exact values of %d systems:\n%s", table.height, table)
