"""Snakemake script of rule finite_systems: write the suite's system files (see kvdiv.finite_suite)."""

import logging
import sys
from pathlib import Path

from kvdiv.finite import save_system
from kvdiv.finite_suite import build_suite

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with open(snakemake.log[0], "w") as log:
    sys.stderr = sys.stdout = log
    logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    systems = build_suite(dict(snakemake.params.suite))
    targets = {Path(p).stem: p for p in snakemake.output}
    for system in systems:
        save_system(system, targets[system.name])
        logging.info("wrote %s (V=%d, H=%d, eos=%s)", targets[system.name], system.vocab, system.horizon, system.eos)
