"""Snakemake script of rule documents: gather a stratum's documents into results/{study}/documents/{stratum}.jsonl."""

import logging

from kvdiv.documents import read_jsonl, write_jsonl
from kvdiv.joblog import job_log

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    docs = [doc for path in snakemake.input for doc in read_jsonl(path)]
    write_jsonl(docs, snakemake.output[0])
    logging.info("%d documents -> %s", len(docs), snakemake.output[0])
