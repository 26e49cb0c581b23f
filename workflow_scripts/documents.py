"""Snakemake script of rule documents: write results/{study}/documents/{stratum}.jsonl (see kvdiv.documents)."""

import logging
import sys
from pathlib import Path

from kvdiv.documents.study import write_stratum

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with open(snakemake.log[0], "w") as log:
    sys.stderr = sys.stdout = log
    logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    p = snakemake.params
    docs = write_stratum(
        snakemake.output[0],
        study=snakemake.wildcards.study,
        stratum=snakemake.wildcards.stratum,
        n_documents=int(p.n_documents),
        master_seed=int(p.master_seed),
        study_seed=int(p.study_seed),
        model=p.model,
        model_spec=dict(p.model_spec),
        models_dir=str(Path(snakemake.input.model).parent.parent),
        source=dict(p.source),
        tasks=list(p.tasks) if p.tasks else None,
        reserve=int(p.reserve),
    )
    for d in docs:
        logging.info("%s %s: %d tokens (target %d)", d.id, d.task, d.n_tokens, d.target_length)
