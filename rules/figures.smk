# stage: figures/tables/report — metrics -> analysis tables (kvdiv.analysis builders, cluster bootstrap) ->
# Figures 5–7 and Tables 2–3 and results/report.md (with the sections such as swrb whose tables rule analysis writes
# but no figure draws). Every rule here is generic: what a result computes, draws, writes and reports is its module
# in kvdiv.results (the registry, kvdiv.results.registry); each job takes only the settings its result declares for
# that table or plot, and its code param hashes its own result's module; which study feeds which result is config
# analysis.studies.

# Helpers: rules/common.smk (section "metrics, figures, tables, report").


rule analysis:
    priority: SHORT_JOB_PRIORITY
    input:
        metrics=lambda wildcards: get_metrics_files(get_analysis_study(wildcards.item)),
    output:
        **with_checksums({"table": paths.analysis_table("{item}", "{table}")}),
    params:
        settings=lambda wildcards: get_analysis_params(wildcards.item, wildcards.table),
        code=lambda wildcards: get_result_code("analysis.py", wildcards.item),
    wildcard_constraints:
        item="|".join(ANALYSED_ITEMS),
        table=r"[a-z0-9_]+",
    log:
        paths.log("analysis", "{item}/{table}"),
    conda:
        ENV
    script:
        "../workflow_scripts/analysis.py"


rule figure:
    priority: SHORT_JOB_PRIORITY
    input:
        unpack(lambda wildcards: get_analysis_outputs(wildcards.item)),
    output:
        pdf=report(paths.figure("{item}", "pdf"), caption="../report/figure.rst", category="Figures"),
        png=report(paths.figure("{item}", "png"), caption="../report/figure.rst", category="Figures"),
    params:
        settings=lambda wildcards: get_plot_params(wildcards.item),
        dpi=lambda wildcards: config["plotting"]["dpi"],
        code=lambda wildcards: get_result_code("figure.py", wildcards.item),
    wildcard_constraints:
        item="|".join(FIGURE_ITEMS),
    log:
        paths.log("figure", "{item}"),
    conda:
        ENV
    script:
        "../workflow_scripts/figure.py"


rule table:
    priority: SHORT_JOB_PRIORITY
    input:
        metrics=lambda wildcards: get_metrics_files(get_analysis_study(wildcards.item)),
    output:
        csv=paths.table("{item}", "csv"),
        md=paths.table("{item}", "md"),
        tex=paths.table("{item}", "tex"),
    params:
        settings=lambda wildcards: get_analysis_params(wildcards.item, "numbers"),
        code=lambda wildcards: get_result_code("table.py", wildcards.item),
    wildcard_constraints:
        item="|".join(TABLE_ITEMS),
    log:
        paths.log("table", "{item}"),
    conda:
        ENV
    script:
        "../workflow_scripts/table.py"


rule report_md:
    priority: SHORT_JOB_PRIORITY
    input:
        analysis=[path for item in ANALYSED_ITEMS for path in get_analysis_outputs(item).values()],
        tables=[paths.table(item, ext) for item in TABLE_ITEMS for ext in ("csv", "md")],
    output:
        paths.report,
        claims_csv=paths.table("claims", "csv"),
        claims_md=paths.table("claims", "md"),
    params:
        analysis={item: get_analysis_outputs(item) for item in ANALYSED_ITEMS},
        tables={item: {"numbers": paths.table(item, "csv"), "markdown": paths.table(item, "md")} for item in TABLE_ITEMS},
        figures={item: paths.figure(item, "png") for item in FIGURE_ITEMS},
        setting=lambda wildcards: get_report_setting(),
        code=get_report_code(),
    log:
        paths.log("report_md", "report_md"),
    conda:
        ENV
    script:
        "../workflow_scripts/report.py"


# Snakemake's HTML report shows images, PDF and HTML inline and offers anything else as a download: report.md and
# each table's Markdown are also rendered as one self-contained page each (kvdiv.outputs.pages; the report's figures
# inlined), and those pages are what `snakemake --report` displays. Local rules: a second of work, never a cluster job.
localrules:
    report_page,
    table_page,


rule report_page:
    priority: SHORT_JOB_PRIORITY
    input:
        report=paths.report,
        figures=[paths.figure(item, "png") for item in FIGURE_ITEMS],
    output:
        report(paths.report_page, caption="../report/report.rst", category="Report"),
    params:
        title="kvdiv report",
        code=script_code("markdown_page.py"),
    log:
        paths.log("report_page", "report"),
    conda:
        ENV
    script:
        "../workflow_scripts/markdown_page.py"


rule table_page:
    priority: SHORT_JOB_PRIORITY
    input:
        paths.table("{item}", "md"),
    output:
        report(paths.table("{item}", "html"), caption="../report/table.rst", category="Tables"),
    wildcard_constraints:
        item="|".join(TABLE_ITEMS + ("claims",)),
    params:
        title=lambda wildcards: f"kvdiv {wildcards.item}",
        code=script_code("markdown_page.py"),
    log:
        paths.log("table_page", "{item}"),
    conda:
        ENV
    script:
        "../workflow_scripts/markdown_page.py"


FINAL_TARGETS.extend(
    [paths.figure(item, ext) for item in FIGURE_ITEMS for ext in ("pdf", "png")]
    + [paths.table(item, ext) for item in TABLE_ITEMS for ext in ("csv", "md", "tex", "html")]
    + [paths.report, paths.report_page] + [paths.table("claims", ext) for ext in ("csv", "md", "html")]
)


rule gallery:
    priority: SHORT_JOB_PRIORITY
    input:
        cube=paths.cube("{study}", "{model}"),
        model=lambda wildcards: get_model_ready(wildcards.model),
    output:
        html=report(paths.gallery("{study}", "{model}"), caption="../report/gallery.rst", category="Galleries",
                    subcategory="{study}", labels={"study": "{study}", "model": "{model}"}),
    params:
        models_dir=paths.models_dir,
        code=script_code("gallery.py"),
    wildcard_constraints:
        study=NAME_REGEX,
        model=NAME_REGEX,
    log:
        paths.log("gallery", "{study}/{model}"),
    conda:
        ENV
    script:
        "../workflow_scripts/gallery.py"


FINAL_TARGETS.extend(paths.gallery(study, model) for study in get_studies() for model in get_study_models(study))
