# stage: metrics — per (study, model): the cube -> per-replicate metrics and profiles (kvdiv.metrics).
# Helpers: rules/common.smk (section "metrics, figures, tables, report").


rule metrics:
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
        code=script_code("metrics.py"),
    log:
        "logs/metrics/{study}/{model}.log",
    benchmark:
        "results/benchmarks/metrics/{study}/{model}.tsv"
    conda:
        ENV
    script:
        "../workflow_scripts/metrics.py"


FINAL_TARGETS.extend(f for study in get_studies() for f in get_metrics_files(study))
