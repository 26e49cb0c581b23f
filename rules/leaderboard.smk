# stage: leaderboard — when the config has a `leaderboard` section: one study's metrics -> every action ranked by
# R_H per model, with intervals, as CSV, Markdown and a figure: the result `leaderboard` of the registry
# (kvdiv.results.leaderboard), built, written and drawn through the registry as every other result.
# Helpers: rules/common.smk (section "metrics, figures, tables, report").


rule leaderboard:
    priority: SHORT_JOB_PRIORITY
    input:
        metrics=lambda wildcards: [
            paths.metrics_file(get_leaderboard()["study"], wildcards.model, table) for table in layout.METRIC_TABLES
        ],
    output:
        csv=report(paths.leaderboard("{model}", "csv"), caption="../report/leaderboard.rst", category="Leaderboard"),
        md=paths.leaderboard("{model}", "md"),
        pdf=paths.leaderboard("{model}", "pdf"),
        png=report(paths.leaderboard("{model}", "png"), caption="../report/leaderboard.rst", category="Leaderboard"),
    params:
        settings=lambda wildcards: get_analysis_params("leaderboard", "numbers"),
        actions=lambda wildcards: get_action_specs(get_leaderboard()["study"]),
        dpi=lambda wildcards: config["plotting"]["dpi"],
        code=lambda wildcards: get_result_code("leaderboard.py", "leaderboard"),
    wildcard_constraints:
        model=NAME_REGEX,
    log:
        paths.log("leaderboard", "{model}"),
    conda:
        ENV
    script:
        "../workflow_scripts/leaderboard.py"


if get_leaderboard() is not None:
    FINAL_TARGETS.extend(
        paths.leaderboard(model, ext)
        for model in get_study_models(get_leaderboard()["study"])
        for ext in ("csv", "md", "pdf", "png")
    )
