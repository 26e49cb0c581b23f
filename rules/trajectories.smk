# stage: trajectories — per (study, model) and batch of documents one coupled-generation job writing one Zarr store
# per document (kvdiv.trajectories.job.run_documents; layout in docs/internals.md), then per (study, model) the cube.
# A batch is a block of a stratum's documents by index (the model's `documents_per_job`, get_trajectory_batches in
# rules/common.smk), or the same block of `strata_per_job` consecutive strata: one process loads the model once,
# prefills each document, and advances the chains of all its documents in one forward per step; a store holds the same
# values whatever batch it was written in. Each job renders every document's user message with its own model's chat
# template (kvdiv.documents.render), checks prompt + horizon against that model's context, and records the prompt ids
# it fed in each store. Document ids are known from the config alone (get_document_ids), so the DAG needs no
# checkpoint; a job reads its records from the document blocks holding them
# (results/{study}/documents/{stratum}/{first}-{last}.jsonl), so adding a document reruns only its block's jobs.
# Snakemake output patterns cannot vary in number, so one rule is defined per batch (named
# trajectories_<study>_<model>_<batch>, its job counted as a `trajectories` job by tests/workflow); its resources are
# those set for `trajectories` (set-resources of a workflow profile, e.g. profiles/slurm) plus gpu; its priority is
# its estimated cost (longest batches first, so a run does not end on one long job; every other rule's jobs outrank
# every batch: SHORT_JOB_PRIORITY). Stores are written to temporary directories and renamed into place, inside a
# shadow directory: a killed job leaves nothing that Snakemake takes as complete. Helpers: rules/common.smk
# (get_trajectory_*, get_cube).


for _study in get_studies():
    for _model in get_study_models(_study):
        for _batch, _doc_ids in get_trajectory_batches(_study, _model):

            rule:
                name:
                    get_trajectory_rule_name(_study, _model, _batch)
                input:
                    documents=get_documents_blocks_of(_study, _doc_ids),
                    model=get_model_ready(_model),
                    press_modules=get_study_press_modules(_study),
                output:
                    [directory(get_trajectory_store(_study, _model, doc_id)) for doc_id in _doc_ids],
                shadow:
                    "minimal"
                threads: get_model_spec(_model)["threads"]
                priority: get_trajectory_priority(_study, _doc_ids)
                resources:
                    **get_trajectory_resources(_model),
                params:
                    study=_study,
                    model=_model,
                    documents=_doc_ids,
                    model_spec=get_model_params(_model),
                    actions=get_action_specs(_study),
                    generation=get_generation(_study),
                    code=get_trajectory_code(_study),
                log:
                    paths.log("trajectories", f"{_study}/{_model}/{_batch}"),
                benchmark:
                    paths.job_benchmark("trajectories", f"{_study}/{_model}/{_batch}")
                conda:
                    ENV
                script:
                    "../workflow_scripts/trajectories.py"


rule cube:
    priority: SHORT_JOB_PRIORITY
    input:
        stores=lambda wildcards: get_trajectory_stores(wildcards.study, wildcards.model),
    output:
        directory(paths.cube("{study}", "{model}")),
    wildcard_constraints:
        study=NAME_REGEX,
    params:
        code=script_code("cube.py"),
    log:
        paths.log("cube", "{study}/{model}"),
    benchmark:
        paths.job_benchmark("cube", "{study}/{model}")
    conda:
        ENV
    script:
        "../workflow_scripts/cube.py"


FINAL_TARGETS.extend(get_cube(study, model) for study in get_studies() for model in get_study_models(study))
