"""Snakemake script of rule finite_systems: write the suite's system files (see kvdiv.finite.suite)."""

import logging
from pathlib import Path

from kvdiv.finite.system import save_system
from kvdiv.finite.suite import build_suite
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    systems = build_suite(dict(snakemake.params.suite))
    targets = {Path(p).stem: p for p in snakemake.output}
    for system in systems:
        save_system(system, targets[system.name])
        logging.info("wrote %s (V=%d, H=%d, eos=%s)", targets[system.name], system.vocab, system.horizon, system.eos)
