"""Snakemake script of rule finite_estimates: naive and SWRB estimates per system (kvdiv.finite.sampling)."""

import logging

from tqdm import tqdm

from kvdiv.finite.system import load_system
from kvdiv.finite.study import estimate_table
from kvdiv.io import write_parquet
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]) as log:
    systems = [load_system(p) for p in snakemake.input.systems]
    params = snakemake.params
    logging.info("%d systems x (naive, swrb), %d replicates each", len(systems), params.replicates)
    with tqdm(total=len(systems), file=log, desc="finite estimates") as bar:
        table = estimate_table(
            systems,
            int(params.replicates),
            int(params.seed),
            int(params.window),
            float(params.alpha),
            progress=lambda name: bar.update(1),
        )
    write_parquet(table, snakemake.output[0])
    logging.info("wrote %s (%d rows)", snakemake.output[0], table.height)
