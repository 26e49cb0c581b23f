"""Snakemake script of rule `trajectories`: one (study, model, document) -> a per-document Zarr store."""

import logging
import sys
from pathlib import Path

from kvdiv.documents import read_jsonl
from kvdiv.generation import run_document
from kvdiv.models import load_model

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 (tqdm progress and errors go to the log)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")

wc, params = snakemake.wildcards, snakemake.params  # noqa: F821
records = {d.id: d for d in read_jsonl(snakemake.input.documents)}  # noqa: F821
if wc.doc_id not in records:
    raise ValueError(f"{snakemake.input.documents}: no document with id {wc.doc_id!r}")  # noqa: F821
document = records[wc.doc_id].to_record()

spec = dict(params.model_spec)
spec["threads"] = snakemake.threads  # noqa: F821 (the job's thread count, as scheduled)
logging.info("loading model %s", wc.model)
# shadow: "minimal" links only the inputs into the job's directory: follow provenance.json to the real model dir
models_dir = Path(snakemake.input.model).resolve().parent.parent  # noqa: F821
loaded = load_model(wc.model, spec, models_dir)
logging.info("document %s, actions %s, settings %s", wc.doc_id, list(params.actions), dict(params.settings))
run_document(loaded, document, dict(params.actions), snakemake.output[0], **dict(params.settings))  # noqa: F821
logging.info("wrote %s", snakemake.output[0])  # noqa: F821
