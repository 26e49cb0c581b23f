"""Snakemake script of rule finite_estimates: naive and SWRB estimates per system (kvdiv.finite_sampling)."""

import logging
import sys

from tqdm import tqdm

from kvdiv.finite import load_system
from kvdiv.finite_study import estimate_table
from kvdiv.io import atomic_path

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with open(snakemake.log[0], "w") as log:
    sys.stderr = sys.stdout = log
    logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    systems = [load_system(p) for p in snakemake.input.systems]
    params = snakemake.params
    logging.info("%d systems x (naive, swrb), %d replicates each", len(systems), params.replicates)
    with tqdm(total=len(systems), file=log, desc="finite estimates") as bar:
        table = estimate_table(
            systems, int(params.replicates), int(params.seed), int(params.window), float(params.alpha),
            progress=lambda name: bar.update(1),
        )
    with atomic_path(snakemake.output[0]) as tmp:
        table.write_parquet(tmp)
    logging.info("wrote %s (%d rows)", snakemake.output[0], table.height)
