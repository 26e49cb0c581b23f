"""Snakemake script of rule leaderboard: a study's metrics of one model -> its divergence leaderboard, the result
``leaderboard`` of the registry (kvdiv.results.leaderboard): built, written and drawn as every result."""

import logging
from pathlib import Path

from kvdiv.analysis.inputs import load_metrics
from kvdiv.joblog import job_log
from kvdiv.results.leaderboard import describe_actions
from kvdiv.results.registry import get_result, plot_result, write_result_table

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    p, out = snakemake.params, snakemake.output
    s = dict(p.settings)
    metrics = load_metrics([str(Path(snakemake.input.metrics[0]).parent)])
    table = get_result("leaderboard").build_table("numbers", metrics, n_boot=s.pop("bootstrap"), **s)
    if table.is_empty():
        raise ValueError("the leaderboard has no rows: the study's metrics hold no action")
    numbers = describe_actions(table, dict(p.actions))  # each action's press and retention, from its spec
    write_result_table("leaderboard", numbers, (out.csv, out.md))
    plot_result("leaderboard", numbers, out.pdf, out.png, dpi=int(p.dpi))
    logging.info("leaderboard of %s: %d actions", snakemake.wildcards.model, table.height)
