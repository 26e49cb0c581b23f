# stage: figures/tables/report — metrics -> analysis tables (kvdiv.analysis, cluster bootstrap) ->
# Figures 5–7 (kvdiv.plotting), Tables 2–3 (kvdiv.tables) and results/report.md (kvdiv.report).
# Which study feeds which item is config analysis.studies; plotting options reach only the figure rules.

# Helpers: rules/common.smk (section "metrics, figures, tables, report").


rule analysis_figure5:
    input:
        metrics=lambda wildcards: get_metrics_files(get_analysis_study("figure5")),
    output:
        **with_checksums(get_analysis_outputs("figure5")),
    params:
        item="figure5",
        settings=lambda wildcards: get_analysis_params("figure5"),
        code=script_code("analysis_figure.py"),
    log:
        "logs/analysis_figure5/analysis_figure5.log",
    conda:
        ENV
    script:
        "../workflow_scripts/analysis_figure.py"


rule analysis_figure6:
    input:
        metrics=lambda wildcards: get_metrics_files(get_analysis_study("figure6")),
    output:
        **with_checksums(get_analysis_outputs("figure6")),
    params:
        item="figure6",
        settings=lambda wildcards: get_analysis_params("figure6"),
        code=script_code("analysis_figure.py"),
    log:
        "logs/analysis_figure6/analysis_figure6.log",
    conda:
        ENV
    script:
        "../workflow_scripts/analysis_figure.py"


rule analysis_figure7:
    input:
        metrics=lambda wildcards: get_metrics_files(get_analysis_study("figure7")),
    output:
        **with_checksums(get_analysis_outputs("figure7")),
    params:
        item="figure7",
        settings=lambda wildcards: get_analysis_params("figure7"),
        code=script_code("analysis_figure.py"),
    log:
        "logs/analysis_figure7/analysis_figure7.log",
    conda:
        ENV
    script:
        "../workflow_scripts/analysis_figure.py"


rule figure:
    input:
        unpack(lambda wildcards: get_analysis_outputs(wildcards.item)),
    output:
        pdf=report("results/figures/{item}.pdf", caption="../report/figure.rst", category="Figures"),
        png=report("results/figures/{item}.png", caption="../report/figure.rst", category="Figures"),
    params:
        early=lambda wildcards: get_analysis()["early"],
        late=lambda wildcards: get_analysis()["late"],
        dpi=lambda wildcards: config["plotting"]["dpi"],
        code=script_code("figure.py"),
    wildcard_constraints:
        item="figure5|figure6|figure7",
    log:
        "logs/figure/{item}.log",
    conda:
        ENV
    script:
        "../workflow_scripts/figure.py"


rule table:
    input:
        metrics=lambda wildcards: get_metrics_files(get_analysis_study(wildcards.item)),
    output:
        csv=report("results/tables/{item}.csv", caption="../report/table.rst", category="Tables"),
        md="results/tables/{item}.md",
        tex="results/tables/{item}.tex",
    params:
        settings=lambda wildcards: get_analysis_params(wildcards.item),
        code=script_code("table.py"),
    wildcard_constraints:
        item="table2|table3",
    log:
        "logs/table/{item}.log",
    conda:
        ENV
    script:
        "../workflow_scripts/table.py"


rule report_md:
    input:
        analysis=[path for item in ANALYSIS_TABLES for path in get_analysis_outputs(item).values()],
        tables=expand("results/tables/{item}.{ext}", item=["table2", "table3"], ext=["csv", "md"]),
    output:
        report("results/report.md", caption="../report/report.rst", category="Report"),
    params:
        analysis={item: get_analysis_outputs(item) for item in ANALYSIS_TABLES},
        figures={item: f"results/figures/{item}.png" for item in ANALYSIS_TABLES},
        setting=lambda wildcards: get_report_setting(),
        code=script_code("report.py"),
    log:
        "logs/report_md/report_md.log",
    conda:
        ENV
    script:
        "../workflow_scripts/report.py"


FINAL_TARGETS.extend(
    [f"results/figures/{item}.{ext}" for item in ANALYSIS_TABLES for ext in ("pdf", "png")]
    + [f"results/tables/{item}.{ext}" for item in ("table2", "table3") for ext in ("csv", "md", "tex")]
    + ["results/report.md"]
)
