"""Snakemake script of rule document: write a block of a stratum's documents,
results/{study}/documents/{stratum}/{first}-{last}.jsonl (kvdiv.documents), with one tokenizer load."""

from kvdiv.models.tokenization import tokenizer_only_process

# a block needs the tokenizer, never the weights: transformers without torch (≈ 2.3 s less per block)
tokenizer_only_process()

import logging  # noqa: E402
from pathlib import Path  # noqa: E402

from kvdiv.documents.study import write_document_block  # noqa: E402
from kvdiv.joblog import job_log  # noqa: E402

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    request = snakemake.params.request  # a kvdiv.settings.DocumentRequest, built once at start-up
    docs = write_document_block(snakemake.output[0], request, Path(snakemake.input.model).parent.parent, progress=False)
    for doc in docs:
        logging.info("%s %s: %d tokens (target %d)", doc.id, doc.task, doc.n_tokens, doc.target_length)
