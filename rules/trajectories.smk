# stage: trajectories — per (study, model, document) one coupled-generation job writing a Zarr store
# (kvdiv.trajectories.job.run_document; layout in docs/internals.md), then per (study, model) the cube.
# Each job renders the document's user message with its own model's chat template (kvdiv.documents.render),
# checks prompt + horizon against that model's context, and records the prompt ids it fed in the store.
# Document ids are known from the config alone (get_document_ids in rules/documents.smk), so the DAG
# needs no checkpoint; each job reads its record from its own document file
# (results/{study}/documents/{stratum}/{doc_id}.json), so adding a document reruns no other job. Stores are written to a
# temporary directory and renamed into place, inside a shadow directory: a killed job leaves nothing
# that Snakemake takes as complete. Helpers: rules/common.smk (get_trajectory_*, get_cube).


rule trajectories:
    input:
        documents=lambda wildcards: get_document_file(wildcards.study, wildcards.doc_id),
        model=lambda wildcards: get_model_ready(wildcards.model),
    output:
        directory(layout.trajectory_store("{study}", "{model}", "{doc_id}")),
    wildcard_constraints:
        study=NAME_REGEX,
        doc_id=NAME_REGEX,
    shadow:
        "minimal"
    threads: lambda wildcards: get_model_spec(wildcards.model)["threads"]
    resources:
        gpu=lambda wildcards: get_trajectory_gpus(wildcards.model),
    params:
        model_spec=lambda wildcards: get_model_spec(wildcards.model),
        actions=lambda wildcards: get_action_specs(wildcards.study),
        settings=lambda wildcards: get_trajectory_settings(wildcards.study),
        code=script_code("trajectories.py"),
    log:
        layout.log("trajectories", "{study}/{model}/{doc_id}"),
    benchmark:
        layout.job_benchmark("trajectories", "{study}/{model}/{doc_id}")
    conda:
        ENV
    script:
        "../workflow_scripts/trajectories.py"


rule cube:
    input:
        stores=lambda wildcards: get_trajectory_stores(wildcards.study, wildcards.model),
    output:
        directory(layout.cube("{study}", "{model}")),
    wildcard_constraints:
        study=NAME_REGEX,
    params:
        code=script_code("cube.py"),
    log:
        layout.log("cube", "{study}/{model}"),
    benchmark:
        layout.job_benchmark("cube", "{study}/{model}")
    conda:
        ENV
    script:
        "../workflow_scripts/cube.py"


FINAL_TARGETS.extend(get_cube(study, model) for study in get_studies() for model in get_study_models(study))
