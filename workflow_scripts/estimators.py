"""Snakemake script of rule estimators: cube -> metrics Parquet (kvdiv.estimators.write_metrics)."""

import logging
import sys
from pathlib import Path

from kvdiv.estimators import write_metrics

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with open(snakemake.log[0], "w") as log:
    sys.stderr = sys.stdout = log
    logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    write_metrics(
        snakemake.input.cube,
        Path(snakemake.output.replicates).parent,
        window=int(snakemake.params.window),
        model=snakemake.wildcards.model,
        study=snakemake.wildcards.study,
    )
