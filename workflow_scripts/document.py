"""Snakemake script of rule document: write a block of a stratum's documents,
results/{study}/documents/{stratum}/{first}-{last}.jsonl (kvdiv.documents), with one tokenizer load."""

from kvdiv.models.tokenization import tokenizer_only_process

# a block needs the tokenizer, never the weights: transformers without torch (≈ 2.3 s less per block)
tokenizer_only_process()

import logging  # noqa: E402
from pathlib import Path  # noqa: E402

from kvdiv.settings import DocumentRequest  # noqa: E402
from kvdiv.documents.study import write_document_block  # noqa: E402
from kvdiv.joblog import job_log  # noqa: E402

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):
    p = snakemake.params
    request = DocumentRequest(
        study=snakemake.wildcards.study,
        stratum=snakemake.wildcards.stratum,
        first=int(p.first),
        count=int(p.n_documents),
        master_seed=int(p.master_seed),
        study_seed=int(p.study_seed),
        model=p.model,
        model_spec=dict(p.model_spec),
        source=dict(p.source),
        horizon=int(p.horizon),
        tasks=tuple(p.tasks) if p.tasks else None,
    )
    docs = write_document_block(snakemake.output[0], request, Path(snakemake.input.model).parent.parent, progress=False)
    for doc in docs:
        logging.info("%s %s: %d tokens (target %d)", doc.id, doc.task, doc.n_tokens, doc.target_length)
