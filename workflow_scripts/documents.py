"""Snakemake script of rule documents: gather a stratum's documents into results/{study}/documents/{stratum}.jsonl."""

import logging
import sys

from kvdiv.documents import read_jsonl, write_jsonl

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with open(snakemake.log[0], "w") as log:
    sys.stderr = sys.stdout = log
    logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    docs = [doc for path in snakemake.input for doc in read_jsonl(path)]
    write_jsonl(docs, snakemake.output[0])
    logging.info("%d documents -> %s", len(docs), snakemake.output[0])
