"""The probabilistic-eviction figure (config/probabilistic.yaml): does decode-time correction delay divergence?

Per model, one row: the pooled gap of each contrast (probabilistic action − its SnapKV reference) split into its
exposure and branch-mismatch parts with the gap's bootstrap interval (Figure 5's decomposition, pooled over
strata), and first-divergence survival curves, one panel per reference action (the actions contrasted with it,
and itself), the legend giving each action's mean entry step among diverged chains. Its report section: per action
divergence by H and mean τ, per contrast the gap, its exposure share and a verdict against the paper's direction.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import polars as pl

from kvdiv.analysis.inputs import POOLED, contrast_name, first_row
from kvdiv.analysis.verdicts import RULE, contrast_verdicts
from kvdiv.results.figure5 import gap_legend_handles, plot_gap_bars, plot_survival
from kvdiv.outputs.report_cells import SectionContext, ci, num, share
from kvdiv.outputs.style import (
    MAX_COLUMNS,
    PAGE_WIDTH,
    category_height,
    grid_shape,
    legend_below,
    legend_under,
    new_figure,
    save_figure,
)
from kvdiv.analysis.decomposition import gap_decomposition
from kvdiv.analysis.timing import entry_times, survival_curves
from kvdiv.results.base import Plot, Result, Table

#: How the analysis names a contrast [a, b] (kvdiv.analysis.inputs.contrast_name).
CONTRAST_SEPARATOR = " − "


def reference_groups(contrasts: list[str], actions: list[str]) -> dict[str, list[str]]:
    """Survival panels: root reference action → [root, the actions contrasted with it, directly or through a chain
    (a − b with b itself contrasted with the root, e.g. corrected − uncorrected − SnapKV)], in contrast order.
    Actions in no contrast form their own panel, so every action is drawn exactly once."""
    pairs = [tuple(c.split(CONTRAST_SEPARATOR)) for c in contrasts]
    reference_of: dict[str, str] = {}
    for a, b in pairs:
        reference_of.setdefault(a, b)

    def root(action: str) -> str:
        path = [action]
        while path[-1] in reference_of:
            nxt = reference_of[path[-1]]
            if nxt in path:  # contrasts in a cycle: its alphabetically first action is the root
                return min(path[path.index(nxt) :])
            path.append(nxt)
        return path[-1]

    groups: dict[str, list[str]] = {}
    for a, b in pairs:
        for action in (b, a):
            group = groups.setdefault(root(action), [root(action)])
            if action not in group:
                group.append(action)
    drawn = {a for group in groups.values() for a in group}
    for action in actions:
        if action not in drawn:
            groups[action] = [action]
    return groups


def plot_pooled_gaps(ax, decomposition: pl.DataFrame, model: str) -> None:
    """Horizontal stacked bars per contrast (pooled over strata): exposure and branch-mismatch parts of the
    mismatch gap (pp), the gap's interval as an error bar (Figure 5's pooled panel)."""
    plot_gap_bars(ax, decomposition, model, POOLED)
    ax.set_title(f"{model}: mismatch gap, pooled over strata")


def plot_probabilistic(
    frames: dict[str, pl.DataFrame],
    pdf: str | Path,
    png: str | Path,
    dpi: int = 200,
    panel_width: float = PAGE_WIDTH / MAX_COLUMNS,
    row_height: float = 1.8,
) -> None:
    """The figure, one block per model: the pooled gap decomposition (a row per contrast), then one survival panel
    per reference action (``panel_width`` × ``row_height`` inches, wrapped three to a row, its legend under it)."""
    survival, decomposition = frames["survival"], frames["decomposition"]
    models = sorted(survival["model"].unique().to_list())
    if not models:
        raise ValueError("the probabilistic figure has no data: the survival table is empty")
    contrasts = list(dict.fromkeys(decomposition["contrast"].to_list()))
    groups = reference_groups(contrasts, sorted(survival["action"].unique().to_list()))
    rows, cols = grid_shape(len(groups))
    sizes = [len(g) for g in groups.values()]
    legend_rows = [max(sizes[r * cols : (r + 1) * cols]) for r in range(rows)]
    row_heights = [row_height + 0.75 + 0.13 * n for n in legend_rows]  # the panel, its labels and its legend
    survival_height = sum(row_heights)
    gap_height = category_height(len(contrasts)) if contrasts else 0.0
    width = panel_width * MAX_COLUMNS
    fig = new_figure(len(models) * (gap_height + survival_height) + 0.35, width)
    subfigs = fig.subfigures(len(models), 1, squeeze=False)[:, 0]
    for subfig, model in zip(subfigs, models):
        if gap_height:
            top, bottom = subfig.subfigures(2, 1, height_ratios=[gap_height, survival_height])
            plot_pooled_gaps(top.add_subplot(), decomposition, model)
        else:
            bottom = subfig
        grid = bottom.add_gridspec(rows, cols, height_ratios=row_heights)
        for k, (reference, actions) in enumerate(groups.items()):
            ax = bottom.add_subplot(grid[divmod(k, cols)])
            colors = {action: "black" if j == 0 else f"C{(j - 1) % 10}" for j, action in enumerate(actions)}
            plot_survival(
                ax, survival.filter(pl.col("action").is_in(actions)), model, frames.get("entry"), colors=colors
            )
            ax.set_title(f"survival vs {reference}")
            if k % cols:
                ax.set_ylabel("")
            legend_under(ax, fontsize=6.5)
    legend_below(fig, gap_legend_handles(), width=width)
    save_figure(fig, pdf, png, dpi=dpi)


PROBABILISTIC_INTRO = (
    "Does decode-time correction delay divergence? Each ProbabilisticPress action samples the prompt entries it "
    "keeps from its proposal (π_min: last-query attention × ‖v‖; π_min-h: the same over the prompt's recent queries "
    "under a harmonic prior) and, with correction, adds log(c_i/(m·π_i)) to each kept entry's attention logit at "
    "every decode step. The eviction draw is random per document (seeded from the master seed, study, document and "
    "action) and recorded in each store's `press_seeds`; the gap of a contrast a − b is the pooled mismatch risk "
    "R_H of a minus that of b, split as in Figure 5 (exposure = entering divergence earlier or more often, branch "
    "mismatch = disagreeing more once diverged). A negative gap against SnapKV means the probabilistic action "
    "keeps the full-cache continuation longer or closer."
)


def section(frames: Mapping[str, pl.DataFrame], setting: Mapping, paper: Mapping, context: SectionContext) -> list[str]:
    """The report's section of the probabilistic-eviction study (analysis item ``probabilistic``,
    config/probabilistic.yaml): heading, what the study asks, the figure, and two tables (pooled over strata,
    95% cluster-bootstrap intervals): per action, divergence by H and mean τ among diverged; per contrast, the
    mismatch gap with its interval, its exposure share, the paper's direction (config ``analysis.directions``,
    ``setting["directions"]``: [a, b, lower|higher]) and the verdict (:mod:`kvdiv.analysis.verdicts`).
    """
    directions = {contrast_name(a, b): d for a, b, d in setting.get("directions", [])}
    parts = ["", context.heading(), "", PROBABILISTIC_INTRO, "", f"![probabilistic eviction]({context.figure})", ""]
    entry, dec = frames.get("entry"), frames.get("decomposition")
    if entry is None or not entry.height:
        return parts + ["_No rows: the analysis tables are empty._", ""]
    parts += ["| action | model | documents | diverged by H (%) | mean τ among diverged |", "|---|---|---|---|---|"]
    for model in sorted(entry["model"].unique().to_list()):
        for action in list(dict.fromkeys(entry.filter(pl.col("model") == model)["action"].to_list())):
            d = first_row(entry, model=model, stratum=POOLED, action=action, statistic="diverged")
            t = first_row(entry, model=model, stratum=POOLED, action=action, statistic="mean_tau_diverged")
            n = (d or t or {}).get("n_documents", "–")
            parts.append(f"| {action} | {model} | {n} | {ci(d)} | {num(t, 1) if t else '–'} |")
    parts.append("")
    if dec is not None and dec.height:
        verdicts = contrast_verdicts(dec, directions)
        claimed = {"lower": "gap < 0", "higher": "gap > 0"}
        parts += [
            f"Verdict of each contrast against the paper's direction (config `analysis.directions`): {RULE}.",
            "",
            "| contrast | model | documents | mismatch gap (pp) | exposure share of gap (%) | paper's direction "
            "| verdict |",
            "|---|---|---|---|---|---|---|",
        ]
        for model in sorted(dec["model"].unique().to_list()):
            for contrast in list(dict.fromkeys(dec.filter(pl.col("model") == model)["contrast"].to_list())):
                g = first_row(dec, model=model, stratum=POOLED, contrast=contrast, statistic="gap")
                s = first_row(dec, model=model, stratum=POOLED, contrast=contrast, statistic="exposure_share")
                v = first_row(verdicts, model=model, contrast=contrast)
                n = (g or {}).get("n_documents", "–")
                direction = claimed.get((v or {}).get("direction"), "–")
                parts.append(
                    f"| {contrast} | {model} | {n} | {ci(g)} | {share(s)} | {direction} | "
                    f"{(v or {}).get('verdict', '–')} |"
                )
        parts.append("")
    return parts


RESULT = Result(
    name="probabilistic",
    kind="figure",
    label="Probabilistic eviction",
    title="Probabilistic eviction: does decode-time correction delay divergence?",
    tables={
        "decomposition": Table(gap_decomposition, {"contrasts": "contrasts"}),
        "survival": Table(survival_curves),
        "entry": Table(entry_times),
    },
    plot=Plot(plot_probabilistic),
    section=section,
)
