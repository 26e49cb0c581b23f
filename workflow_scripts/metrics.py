"""Snakemake script of rule metrics: cube (+ its scored continuations) -> metrics Parquet
(kvdiv.metrics.write_metrics)."""

from pathlib import Path

from kvdiv.metrics import write_metrics
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    write_metrics(
        snakemake.input.cube,
        Path(snakemake.output.replicates).parent,
        window=int(snakemake.params.window),
        model=snakemake.wildcards.model,
        study=snakemake.wildcards.study,
        answers=snakemake.input.answers,
    )
