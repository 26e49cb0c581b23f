# stage: leaderboard — when the config has a `leaderboard` section: one study's metrics -> every action ranked by
# R_H per model, with intervals (kvdiv.analysis.leaderboard), as CSV, Markdown and a figure (kvdiv.outputs.leaderboard).
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
        steps=lambda wildcards: get_leaderboard()["steps"],
        actions=lambda wildcards: get_action_specs(get_leaderboard()["study"]),
        bootstrap=lambda wildcards: get_analysis()["bootstrap"],
        confidence=lambda wildcards: get_analysis()["confidence"],
        seed=lambda wildcards: config["seed"],
        dpi=lambda wildcards: config["plotting"]["dpi"],
        code=script_code("leaderboard.py"),
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
