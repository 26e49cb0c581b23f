"""Snakemake script of a trajectory batch rule: documents of one (study, model) -> one Zarr store per document."""

import os

# OpenMP threads sleep instead of spinning when idle (set before torch starts its runtime): beside other busy
# processes, spinning threads stall the step's barriers (benchmarks/threads_under_load.md)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from kvdiv.host_memory import retain_freed_memory  # noqa: E402

# freed tensors' pages are kept for the next layer's instead of handed back and faulted in again: the same values, a
# prefill with SnapKV actions 0.83-0.91 x the seconds (benchmarks/host_memory.md)
retain_freed_memory()

import logging  # noqa: E402
from pathlib import Path  # noqa: E402

from kvdiv.settings import Runtime  # noqa: E402
from kvdiv.documents import read_jsonl  # noqa: E402
from kvdiv.joblog import job_log  # noqa: E402
from kvdiv.models.loading import load_model  # noqa: E402
from kvdiv.kernel.presses.registry import load_press_modules  # noqa: E402
from kvdiv.layout import Layout  # noqa: E402
from kvdiv.trajectories.job import run_documents  # noqa: E402
from kvdiv.trajectories.reuse import TrajectoryCache  # noqa: E402
from kvdiv.watchdog import doing, time_budget  # noqa: E402

KEY = "time_budget.trajectory_job"

snakemake = snakemake  # noqa: F821, PLW0127 - injected by Snakemake

# the job's wall-time budget (config time_budget.trajectory_job; deliberately not a param: values do not depend on
# it): a press that never returns ends the job with an error naming the press, action and document (kvdiv.watchdog)
budget = snakemake.config["time_budget"]["trajectory_job"]
with job_log(snakemake.log[0]) as log, time_budget(budget, f"trajectory job {snakemake.rule}", KEY, log):
    params = snakemake.params
    records = {d.id: d for path in snakemake.input.documents for d in read_jsonl(path)}  # the blocks holding them
    missing = [doc_id for doc_id in params.documents if doc_id not in records]
    if missing:
        raise ValueError(f"{', '.join(snakemake.input.documents)}: no document with id {', '.join(map(repr, missing))}")
    documents = [records[doc_id].to_record() for doc_id in params.documents]

    with doing(importing=", ".join(map(repr, snakemake.input.press_modules))):
        load_press_modules(snakemake.input.press_modules)  # the user's own presses these actions name
    # as scheduled; documents_per_batch (and its memory budget) from the config, deliberately not a param (values do
    # not depend on it, so changing it must not rerun the job)
    configured = Runtime.split(snakemake.config["models"][params.model])[1]
    runtime = Runtime(
        threads=snakemake.threads,
        documents_per_job=len(documents),
        documents_per_batch=configured.documents_per_batch,
        memory_budget_gb=configured.memory_budget_gb,
    )
    generation = params.generation  # the study's kvdiv.settings.Generation, built once at start-up
    study, model = params.study, params.model
    logging.info("loading model %s (%s)", model, runtime)
    # shadow: "minimal" links only the inputs into the job's directory: follow provenance.json to the real model dir
    models_dir = Path(snakemake.input.model).resolve().parent.parent
    loaded = load_model(model, dict(params.model_spec), models_dir, runtime)
    logging.info(
        "study %s, documents %s, actions %s, settings %s",
        study,
        [d["id"] for d in documents],
        list(params.actions),
        generation,
    )
    # (document, action) results kept from earlier runs of this job (kvdiv.trajectories.reuse): outside the shadow
    # directory, under the working directory the workflow started in (rules/common.smk sets KVDIV_WORKDIR)
    workdir = Path(os.environ.get("KVDIV_WORKDIR", "."))
    cache = TrajectoryCache(workdir / Layout(snakemake.config["results"]).trajectory_cache(study, model))
    run_documents(
        loaded,
        documents,
        dict(params.actions),
        list(snakemake.output),
        generation,
        cache=cache,
        code=params.code,
        documents_per_batch=runtime.batching,
    )
    logging.info("wrote %s", list(snakemake.output))
