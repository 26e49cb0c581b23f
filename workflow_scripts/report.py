"""Snakemake script of rule report_md: analysis tables -> results/report.md (kvdiv.report.build_report)."""

import logging

from kvdiv.report import build_report
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    analysis = {item: dict(paths) for item, paths in snakemake.params.analysis.items()}
    tables = {}
    for path in snakemake.input.tables:
        item, ext = path.rsplit("/", 1)[-1].split(".")
        analysis.setdefault(item, {})
        if ext == "csv":
            analysis[item]["numbers"] = path
        elif ext == "md":
            tables[item] = path
    build_report(analysis, tables, snakemake.params.figures, snakemake.params.setting, snakemake.output[0])
    logging.info("wrote %s", snakemake.output[0])
