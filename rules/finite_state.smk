# stage: finite_state — the 24 enumerable kernel pairs of paper section 4.4 and Figure 4.
# systems (JSON) -> exact values (enumeration) + naive/SWRB estimates (Numba) -> comparison -> Figure 4.


rule finite_systems:
    priority: SHORT_JOB_PRIORITY
    output:
        get_finite_system_files(),
    params:
        suite=lambda wildcards: {k: v for k, v in get_finite_state().items() if k not in ("replicates", "window", "alpha")},
        code=script_code("finite_systems.py"),
    log:
        paths.log("finite_systems", "finite_systems"),
    conda:
        ENV
    script:
        "../workflow_scripts/finite_systems.py"


rule finite_exact:
    priority: SHORT_JOB_PRIORITY
    input:
        systems=get_finite_system_files(),
    output:
        with_checksums([paths.finite_file("exact.parquet")]),
    params:
        window=lambda wildcards: get_finite_state()["window"],
        code=script_code("finite_exact.py"),
    log:
        paths.log("finite_exact", "finite_exact"),
    conda:
        ENV
    script:
        "../workflow_scripts/finite_exact.py"


rule finite_estimates:
    priority: SHORT_JOB_PRIORITY
    input:
        systems=get_finite_system_files(),
    output:
        with_checksums([paths.finite_file("estimates.parquet")]),
    params:
        replicates=lambda wildcards: get_finite_state()["replicates"],
        seed=lambda wildcards: get_finite_state()["seed"],
        window=lambda wildcards: get_finite_state()["window"],
        alpha=lambda wildcards: get_finite_state()["alpha"],
        code=script_code("finite_estimates.py"),
    log:
        paths.log("finite_estimates", "finite_estimates"),
    benchmark:
        paths.job_benchmark("finite_estimates", "finite_estimates")
    conda:
        ENV
    script:
        "../workflow_scripts/finite_estimates.py"


rule finite_compare:
    priority: SHORT_JOB_PRIORITY
    input:
        exact=paths.finite_file("exact.parquet"),
        estimates=paths.finite_file("estimates.parquet"),
    output:
        **with_checksums({"comparison": paths.finite_file("comparison.parquet")}),
        csv=report(paths.finite_file("paper_comparison.csv"), caption="../report/finite_state_table.rst", category="Finite-state study"),
        md=paths.finite_file("paper_comparison.md"),
    params:
        # the paper's values are package data read by kvdiv.finite.paper: in the code hash, not a path input (the
        # checkout's path, spelt another way or moved, would change the input set and rerun the comparison)
        code=script_code("finite_compare.py"),
    log:
        paths.log("finite_compare", "finite_compare"),
    conda:
        ENV
    script:
        "../workflow_scripts/finite_compare.py"


rule finite_figure4:
    priority: SHORT_JOB_PRIORITY
    input:
        comparison=paths.finite_file("comparison.parquet"),
        paper_table=paths.finite_file("paper_comparison.csv"),
    output:
        pdf=report(paths.finite_file("figure4.pdf"), caption="../report/figure4.rst", category="Finite-state study"),
        png=report(paths.finite_file("figure4.png"), caption="../report/figure4.rst", category="Finite-state study"),
    params:
        dpi=lambda wildcards: config["plotting"]["dpi"],
        code=script_code("finite_figure4.py"),
    log:
        paths.log("finite_figure4", "finite_figure4"),
    conda:
        ENV
    script:
        "../workflow_scripts/finite_figure4.py"


FINAL_TARGETS.extend(
    [
        paths.finite_file("figure4.png"),
        paths.finite_file("figure4.pdf"),
        paths.finite_file("paper_comparison.csv"),
        paths.finite_file("paper_comparison.md"),
    ]
)
