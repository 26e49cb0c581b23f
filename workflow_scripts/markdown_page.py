"""Snakemake script of rules report_page and table_page: a Markdown result -> one self-contained HTML page
(kvdiv.outputs.pages), what Snakemake's HTML report shows inline."""

import logging

from kvdiv.joblog import job_log
from kvdiv.outputs.pages import write_markdown_page

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    write_markdown_page(snakemake.input[0], snakemake.output[0], snakemake.params.title)
    logging.info("wrote %s", snakemake.output[0])
