"""Snakemake script of rule leaderboard: a study's metrics of one model -> its divergence leaderboard (item
``leaderboard`` of kvdiv.analysis.items, kvdiv.outputs.leaderboard)."""

import logging
from pathlib import Path

from kvdiv.analysis.inputs import load_metrics
from kvdiv.analysis.items import build_table, get_item
from kvdiv.joblog import job_log
from kvdiv.outputs.leaderboard import write_leaderboard

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    p, out = snakemake.params, snakemake.output
    metrics = load_metrics([str(Path(snakemake.input.metrics[0]).parent)])
    table = build_table(
        "leaderboard", "numbers", metrics, n_boot=p.bootstrap, seed=p.seed, confidence=p.confidence, steps=list(p.steps)
    )
    write_leaderboard(
        table, dict(p.actions), (out.csv, out.md, out.pdf, out.png), caption=get_item("leaderboard").caption, dpi=p.dpi
    )
    logging.info("leaderboard of %s: %d actions", snakemake.wildcards.model, table.height)
