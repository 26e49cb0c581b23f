"""Snakemake script of rule resolve_model: materialise results/models/{model}/ (see kvdiv.models.sources)."""

import logging
from pathlib import Path

from kvdiv.models.sources import resolve_model
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    name = snakemake.wildcards.model
    out_dir = Path(snakemake.output[0]).parent
    logging.info("resolving model %s (%s) into %s", name, snakemake.params.spec["source"], out_dir)
    resolve_model(name, dict(snakemake.params.spec), out_dir, seed=snakemake.params.seed)
    logging.info("done: %s", (out_dir / "provenance.json").read_text())
