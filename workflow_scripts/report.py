"""Snakemake script of rule report_md: analysis tables -> results/report.md and the claims table
results/tables/claims.{csv,md} (kvdiv.results.report.build_report)."""

import logging

from kvdiv.joblog import job_log
from kvdiv.results.report import build_report

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    params = snakemake.params
    analysis = {item: dict(paths) for item, paths in params.analysis.items()}
    analysis.update({item: {"numbers": paths["numbers"]} for item, paths in params.tables.items()})
    tables_md = {item: paths["markdown"] for item, paths in params.tables.items()}
    build_report(
        analysis,
        tables_md,
        params.figures,
        params.setting,
        snakemake.output[0],
        claims_out={"csv": snakemake.output.claims_csv, "md": snakemake.output.claims_md},
    )
    logging.info("wrote %s", snakemake.output[0])
