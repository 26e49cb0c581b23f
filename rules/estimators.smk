# stage: estimators — per (study, model): the cube -> per-replicate metrics and profiles (kvdiv.estimators).
# Helpers: rules/common.smk (section "estimators, figures, tables, report").


rule estimators:
    input:
        cube="results/{study}/cube/{model}.zarr",
    output:
        **with_checksums(
            {
                "replicates": "results/{study}/metrics/{model}/replicates.parquet",
                "aligned": "results/{study}/metrics/{model}/profiles_aligned.parquet",
                "clock": "results/{study}/metrics/{model}/profiles_clock.parquet",
            }
        ),
    params:
        window=lambda wildcards: get_analysis()["window"],
        code=script_code("estimators.py"),
    log:
        "logs/estimators/{study}/{model}.log",
    benchmark:
        "results/benchmarks/estimators/{study}/{model}.tsv"
    conda:
        ENV
    script:
        "../workflow_scripts/estimators.py"


FINAL_TARGETS.extend(f for study in get_studies() for f in get_metrics_files(study))
