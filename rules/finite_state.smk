# stage: finite_state — the 24 enumerable kernel pairs of paper section 4.4 and Figure 4.
# systems (JSON) -> exact values (enumeration) + naive/SWRB estimates (Numba) -> comparison -> Figure 4.
FINITE_DIR = "results/finite_state"


rule finite_systems:
    output:
        get_finite_system_files(),
    params:
        suite=lambda wildcards: {k: v for k, v in get_finite_state().items() if k not in ("replicates", "window", "alpha")},
        code=script_code("finite_systems.py"),
    log:
        "logs/finite_systems/finite_systems.log",
    conda:
        ENV
    script:
        "../workflow_scripts/finite_systems.py"


rule finite_exact:
    input:
        systems=get_finite_system_files(),
    output:
        with_checksums([f"{FINITE_DIR}/exact.parquet"]),
    params:
        window=lambda wildcards: get_finite_state()["window"],
        code=script_code("finite_exact.py"),
    log:
        "logs/finite_exact/finite_exact.log",
    conda:
        ENV
    script:
        "../workflow_scripts/finite_exact.py"


rule finite_estimates:
    input:
        systems=get_finite_system_files(),
    output:
        with_checksums([f"{FINITE_DIR}/estimates.parquet"]),
    params:
        replicates=lambda wildcards: get_finite_state()["replicates"],
        seed=lambda wildcards: get_finite_state()["seed"],
        window=lambda wildcards: get_finite_state()["window"],
        alpha=lambda wildcards: get_finite_state()["alpha"],
        code=script_code("finite_estimates.py"),
    log:
        "logs/finite_estimates/finite_estimates.log",
    benchmark:
        "results/benchmarks/finite_estimates/finite_estimates.tsv"
    conda:
        ENV
    script:
        "../workflow_scripts/finite_estimates.py"


rule finite_compare:
    input:
        exact=f"{FINITE_DIR}/exact.parquet",
        estimates=f"{FINITE_DIR}/estimates.parquet",
        paper="kvdiv/data/paper_reported_values.yaml",
    output:
        **with_checksums({"comparison": f"{FINITE_DIR}/comparison.parquet"}),
        csv=report(f"{FINITE_DIR}/paper_comparison.csv", caption="../report/finite_state_table.rst", category="Finite-state study"),
        md=f"{FINITE_DIR}/paper_comparison.md",
    params:
        code=script_code("finite_compare.py"),
    log:
        "logs/finite_compare/finite_compare.log",
    conda:
        ENV
    script:
        "../workflow_scripts/finite_compare.py"


rule finite_figure4:
    input:
        comparison=f"{FINITE_DIR}/comparison.parquet",
        paper_table=f"{FINITE_DIR}/paper_comparison.csv",
    output:
        pdf=report(f"{FINITE_DIR}/figure4.pdf", caption="../report/figure4.rst", category="Finite-state study"),
        png=report(f"{FINITE_DIR}/figure4.png", caption="../report/figure4.rst", category="Finite-state study"),
    params:
        dpi=lambda wildcards: config["plotting"]["dpi"],
        code=script_code("finite_figure4.py"),
    log:
        "logs/finite_figure4/finite_figure4.log",
    conda:
        ENV
    script:
        "../workflow_scripts/finite_figure4.py"


FINAL_TARGETS.extend(
    [
        f"{FINITE_DIR}/figure4.png",
        f"{FINITE_DIR}/figure4.pdf",
        f"{FINITE_DIR}/paper_comparison.csv",
        f"{FINITE_DIR}/paper_comparison.md",
    ]
)
