"""Snakemake script of rule `trajectories`: one (study, model, document) -> a per-document Zarr store."""

import logging
from pathlib import Path

from kvdiv.documents import read_jsonl
from kvdiv.trajectories.job import run_document
from kvdiv.joblog import job_log
from kvdiv.llm.loading import load_model

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

with job_log(snakemake.log[0]):  # tqdm progress and errors go to the log
    wc, params = snakemake.wildcards, snakemake.params
    records = {d.id: d for d in read_jsonl(snakemake.input.documents)}
    if wc.doc_id not in records:
        raise ValueError(f"{snakemake.input.documents}: no document with id {wc.doc_id!r}")
    document = records[wc.doc_id].to_record()

    spec = dict(params.model_spec)
    spec["threads"] = snakemake.threads  # the job's thread count, as scheduled
    logging.info("loading model %s", wc.model)
    # shadow: "minimal" links only the inputs into the job's directory: follow provenance.json to the real model dir
    models_dir = Path(snakemake.input.model).resolve().parent.parent
    loaded = load_model(wc.model, spec, models_dir)
    logging.info("document %s, actions %s, settings %s", wc.doc_id, list(params.actions), dict(params.settings))
    run_document(loaded, document, dict(params.actions), snakemake.output[0], **dict(params.settings))
    logging.info("wrote %s", snakemake.output[0])
