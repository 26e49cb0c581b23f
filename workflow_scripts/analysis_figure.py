"""Snakemake script of rules analysis_figure5/6/7: metrics -> one figure's data (kvdiv.analysis.{item}_data)."""

import logging
from pathlib import Path

from kvdiv import analysis
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    s = dict(snakemake.params.settings)
    builder = getattr(analysis, f"{snakemake.params.item}_data")
    metrics = analysis.load_metrics(sorted({str(Path(p).parent) for p in snakemake.input.metrics}))
    frames = builder(metrics, n_boot=s.pop("bootstrap"), **s)
    analysis.write_frames(frames, dict(snakemake.output.items()))
    for name, frame in frames.items():
        logging.info("%s: %d rows", name, frame.height)
