# stage: metrics — per (study, model): the cube -> per-replicate metrics and profiles (kvdiv.metrics).
# Helpers: rules/common.smk (section "metrics, figures, tables, report").


rule metrics:
    input:
        cube=layout.cube("{study}", "{model}"),
    output:
        **with_checksums(
            {
                "replicates": layout.metrics_file("{study}", "{model}", "replicates"),
                "aligned": layout.metrics_file("{study}", "{model}", "profiles_aligned"),
                "clock": layout.metrics_file("{study}", "{model}", "profiles_clock"),
            }
        ),
    params:
        window=lambda wildcards: get_analysis()["window"],
        code=script_code("metrics.py"),
    log:
        layout.log("metrics", "{study}/{model}"),
    benchmark:
        layout.job_benchmark("metrics", "{study}/{model}")
    conda:
        ENV
    script:
        "../workflow_scripts/metrics.py"


FINAL_TARGETS.extend(f for study in get_studies() for f in get_metrics_files(study))
