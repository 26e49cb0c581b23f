# stage: metrics — per (study, model): the cube -> every continuation scored (kvdiv.trajectories.answers) ->
# per-replicate metrics and profiles (kvdiv.metrics), the scores joined onto the replicates.
# Helpers: rules/common.smk (section "metrics, figures, tables, report").


rule answers:
    priority: SHORT_JOB_PRIORITY
    input:
        cube=paths.cube("{study}", "{model}"),
        documents=lambda wildcards: get_documents(wildcards.study),
        model=lambda wildcards: get_model_ready(wildcards.model),
    output:
        **with_checksums({"answers": paths.answers("{study}", "{model}")}),
    params:
        spec=lambda wildcards: get_model_params(wildcards.model),
        models_dir=paths.models_dir,
        code=script_code("answers.py"),
    wildcard_constraints:
        study=NAME_REGEX,
        model=NAME_REGEX,
    log:
        paths.log("answers", "{study}/{model}"),
    benchmark:
        paths.job_benchmark("answers", "{study}/{model}")
    conda:
        ENV
    script:
        "../workflow_scripts/answers.py"


rule metrics:
    priority: SHORT_JOB_PRIORITY
    input:
        cube=paths.cube("{study}", "{model}"),
        answers=paths.answers("{study}", "{model}"),
    output:
        **with_checksums(
            {
                "replicates": paths.metrics_file("{study}", "{model}", "replicates"),
                "aligned": paths.metrics_file("{study}", "{model}", "profiles_aligned"),
                "clock": paths.metrics_file("{study}", "{model}", "profiles_clock"),
            }
        ),
    params:
        window=lambda wildcards: get_analysis()["window"],
        code=script_code("metrics.py"),
    log:
        paths.log("metrics", "{study}/{model}"),
    benchmark:
        paths.job_benchmark("metrics", "{study}/{model}")
    conda:
        ENV
    script:
        "../workflow_scripts/metrics.py"


FINAL_TARGETS.extend(f for study in get_studies() for f in get_metrics_files(study))
