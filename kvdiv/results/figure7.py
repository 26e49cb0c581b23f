"""Figure 7 of arXiv 2609.16617 (the 90% retention study): exposure shares of the mismatch gap, the
prespecified late-minus-early branch-TV intervals (per model × action, pooled over strata; all steps and
strictly before EOS), and the EOS shares of the gap, by task family; and its report section (§5.4–5.6)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from kvdiv.analysis.inputs import POOLED, first_row
from kvdiv.analysis.verdicts import min_documents
from kvdiv.outputs.report_cells import (
    BOTH_MODELS,
    paper_item,
    PaperTable,
    SectionContext,
    ci,
    count,
    paper_value,
    share,
)
from kvdiv.results.figure5 import GAP_PARTS, cells_of, gap_panels
from kvdiv.outputs.style import (
    late_early_axis,
    PAGE_WIDTH,
    ROW_INCHES,
    category_height,
    grid_shape,
    legend_below,
    new_figure,
    parts_handles,
    save_figure,
)
from kvdiv.analysis.decomposition import eos_shares, gap_decomposition
from kvdiv.analysis.profiles import late_minus_early
from kvdiv.results.base import Plot, Result, Table
from kvdiv.results.figure6 import LATE_EARLY as LATE_EARLY_SETTINGS


#: The late − early statistics of the middle panel: label and colour.
LATE_EARLY_STATISTICS = {
    "late_minus_early": ("late − early, all steps", "black"),
    "late_minus_early_strict_pre_eos": ("late − early, strictly before EOS", "#8c8c8c"),
}
EOS_PARTS = ("pre_eos_part", "post_eos_part")


#: The paper's 90%-study actions in the order of its reported pairs.
PAPER_ACTIONS_90 = ("snapkv_90", "recent_90")


def eos_parts(eos: pl.DataFrame) -> pl.DataFrame:
    """The EOS table with the gap's two parts as statistics: ``post_eos_part`` (the gap made after the first EOS of
    either chain, ``post_eos_gap``) and ``pre_eos_part`` (the rest of the gap), point estimates."""
    if not eos.height:
        return eos
    keys = [c for c in ("model", "family", "contrast") if c in eos.columns]
    wide = (
        eos.filter(pl.col("statistic").is_in(["gap", "post_eos_gap"]))
        .pivot(on="statistic", index=keys, values="estimate")
        .select(
            *keys,
            (pl.col("gap") - pl.col("post_eos_gap")).alias("pre_eos_part"),
            pl.col("post_eos_gap").alias("post_eos_part"),
        )
        .unpivot(index=keys, variable_name="statistic", value_name="estimate")
    )
    return pl.concat([eos.select(*keys, "statistic", "estimate", "lower", "upper"), wide], how="diagonal_relaxed")


def plot_late_minus_early(ax, lme: pl.DataFrame, model: str) -> None:
    """The prespecified late − early branch-TV contrasts (pp) pooled over strata, one row per action: all steps and
    strictly before EOS, each with its interval."""
    pooled = lme.filter((pl.col("model") == model) & (pl.col("family") == POOLED))
    actions = sorted(pooled["action"].unique().to_list())
    y = np.arange(len(actions))[::-1]
    for k, (stat, (label, color)) in enumerate(LATE_EARLY_STATISTICS.items()):
        lookup = {r["action"]: r for r in pooled.filter(pl.col("statistic") == stat).iter_rows(named=True)}
        est, lo, hi = (
            np.array([100 * lookup[a][col] if a in lookup else np.nan for a in actions])
            for col in ("estimate", "lower", "upper")
        )
        ax.errorbar(
            est,
            y + 0.15 - 0.3 * k,
            xerr=[np.maximum(est - lo, 0), np.maximum(hi - est, 0)],
            fmt="o",
            ms=3,
            capsize=2,
            lw=0.9,
            color=color,
            label=label,
        )
    late_early_axis(ax, y, actions, f"{model}: late − early branch TV, pooled (95% intervals)")


def legend_handles(drawn: Sequence[int] = (0, 1, 2)) -> list:
    """Figure 7's legend for the blocks ``drawn`` (0: exposure/branch parts, 1: EOS parts, 2: late − early): the
    parts of the gap, the gap, the two late − early statistics."""
    from matplotlib.lines import Line2D

    parts = (*(GAP_PARTS if 0 in drawn else ()), *(EOS_PARTS if 1 in drawn else ()))
    handles = parts_handles(parts) if parts else []
    if 2 in drawn:
        handles += [
            Line2D([], [], color=color, marker="o", ms=3, lw=0.9, label=label)
            for label, color in LATE_EARLY_STATISTICS.values()
        ]
    return handles


def plot_figure7(
    frames: dict[str, pl.DataFrame],
    pdf: str | Path,
    png: str | Path,
    dpi: int = 200,
    width: float = PAGE_WIDTH,
    row_height: float = ROW_INCHES,
) -> None:
    """Figure 7, one block per model: the gap split into exposure and branch-mismatch parts per task family and
    pooled, the gap split at the first EOS likewise (parts in pp, not shares: a share divides by a gap that may be
    near 0), and the late − early branch TV per action; ``row_height`` inches per contrast or action."""
    dec, lme, eos = frames["decomposition"], frames["late_minus_early"], eos_parts(frames["eos"])
    models = sorted(set(dec["model"].to_list()) | set(lme["model"].to_list()))
    if not models:
        raise ValueError("Figure 7 has no data")
    blocks = []
    for model in models:
        d, e = (f.filter(pl.col("model") == model) if f.height else f for f in (dec, eos))
        n_actions = lme.filter(pl.col("model") == model)["action"].n_unique()
        blocks.append(
            [
                grid_shape(len(cells_of(d, "family")))[0] * category_height(d["contrast"].n_unique(), row_height)
                if d.height
                else 0,
                grid_shape(len(cells_of(e, "family")))[0] * category_height(e["contrast"].n_unique(), row_height)
                if e.height
                else 0,
                category_height(n_actions, row_height) if n_actions else 0,
            ]
        )
    fig = new_figure(sum(map(sum, blocks)) + 0.3 * len(models) + 0.55, width)
    subfigs = fig.subfigures(len(models), 1, height_ratios=[sum(b) for b in blocks], squeeze=False)[:, 0]
    for subfig, model, heights in zip(subfigs, models, blocks):
        drawn = [(k, h) for k, h in enumerate(heights) if h]
        parts = subfig.subfigures(len(drawn), 1, height_ratios=[h for _, h in drawn], squeeze=False)[:, 0]
        for part, (k, _) in zip(parts, drawn):
            if k == 0:
                gap_panels(part, dec, model, "family")
                part.suptitle(f"{model}: mismatch gap = exposure part + branch-mismatch part", fontsize=10)
            elif k == 1:
                gap_panels(part, eos, model, "family", EOS_PARTS)
                part.suptitle(f"{model}: mismatch gap = part before + part after the first EOS", fontsize=10)
            else:
                plot_late_minus_early(part.add_subplot(), lme, model)
    drawn_blocks = {k for heights in blocks for k, h in enumerate(heights) if h}
    legend_below(fig, legend_handles(sorted(drawn_blocks)), width=width)
    save_figure(fig, pdf, png, dpi=dpi)


def section(frames: Mapping[str, pl.DataFrame], setting: Mapping, paper: Mapping, context: SectionContext) -> list[str]:
    """The report's section of Figure 7 (§5.4–5.6): per model, the gap, exposure and EOS shares of each contrast, the
    late − early branch TV per action (all steps and strictly before EOS) and the counts of positive cells, beside
    the paper's ``retention90`` values."""
    t = PaperTable(context.model_keys)
    p90 = paper.get("retention90", {})
    keys = context.model_keys
    if frames:
        dec, lme, eos = frames["decomposition"], frames["late_minus_early"], frames["eos"]
        for model in sorted(dec["model"].unique().to_list()):
            for contrast in list(dict.fromkeys(dec.filter(pl.col("model") == model)["contrast"].to_list())):
                g = first_row(dec, model=model, family=POOLED, contrast=contrast, statistic="gap")
                r = first_row(dec, model=model, family=POOLED, contrast=contrast, statistic="exposure_share")
                if g:
                    t.add(
                        f"mismatch gap (pp), {contrast}",
                        model,
                        g["n_documents"],
                        ci(g),
                        *(paper_value(p90, "mismatch_gap_pp", m) for m in keys),
                    )
                if r:
                    t.add(
                        f"exposure share of gap (%), {contrast}",
                        model,
                        r["n_documents"],
                        share(r),
                        *(paper_value(p90, "exposure_share_of_gap_percent", m) for m in keys),
                    )
                for fam in sorted(set(eos.filter(pl.col("model") == model)["family"].to_list())):
                    e = first_row(eos, model=model, family=fam, contrast=contrast, statistic="eos_share")
                    if e:  # the paper gives its first model's EOS shares per family, its second's as one range
                        first, second = keys[0], keys[1]  # over all its cells (so for every family and pooled)
                        t.add(
                            f"EOS share of gap (%), {fam}, {contrast}",
                            model,
                            e["n_documents"],
                            share(e, 2),
                            paper_value(p90, "eos_share_percent", first, fam) if fam != POOLED else "–",
                            paper_value(p90, "eos_share_percent", second),
                        )
            pooled = lme.filter((pl.col("model") == model) & (pl.col("family") == POOLED))
            main = pooled.filter(pl.col("statistic") == "late_minus_early")
            for r in main.iter_rows(named=True):
                t.add(
                    f"late − early branch TV (pp), {r['action']}",
                    model,
                    r["n_documents"],
                    ci(r),
                    paper_value(p90, "late_minus_early_branch_tv_pp_range") + BOTH_MODELS,
                    "",
                )
                s = first_row(pooled, action=r["action"], statistic="late_minus_early_strict_pre_eos")
                if s:
                    # the paper's pair per model is (SnapKV, recent): each action's own value, or none
                    index = PAPER_ACTIONS_90.index(r["action"]) if r["action"] in PAPER_ACTIONS_90 else 99
                    t.add(
                        f"strict pre-EOS late − early (pp; documents with both windows), {r['action']}",
                        model,
                        s["n_documents"],
                        ci(s),
                        *(paper_item(p90, index, "strict_pre_eos_late_minus_early_pp", m) for m in keys),
                    )
            if main.height:
                least = min_documents(float(setting.get("confidence", 0.95)))
                enough = main.filter(pl.col("n_documents") >= least)  # an interval of fewer has no coverage
                few = main.height - enough.height
                t.add(
                    "prespecified late − early intervals above zero (action)",
                    model,
                    "–",
                    count(enough["lower"], 0.0)
                    + (f" ({few} with fewer than {least} documents, not counted)" if few else ""),
                    paper_value(p90, "prespecified_branch_tv_intervals_above_zero") + BOTH_MODELS,
                    "",
                )
            strata = frames.get("late_minus_early_strata")
            if strata is not None and strata.height:
                cells = strata.filter(
                    (pl.col("model") == model)
                    & (pl.col("stratum") != POOLED)
                    & (pl.col("statistic") == "late_minus_early")
                )
                if cells.height:
                    t.add(
                        "late − early branch TV positive (stratum × action)",
                        model,
                        "–",
                        count(cells["estimate"], 0.0),
                        paper_value(p90, "late_minus_early_positive_strata") + BOTH_MODELS,
                        "",
                    )
    intro = (
        "A pair's *first EOS* is the earlier of its two chains' first EOS steps; the *EOS share* of a gap a − b is the "
        "part of it made at steps after that (where two ended chains agree by construction). *Strictly before EOS* "
        "keeps only the steps before it, paired within the documents that have such steps in both depth windows."
    )
    return [context.heading(), "", intro, "", f"![{context.item.label}]({context.figure})", "", t.markdown()]


RESULT = Result(
    name="figure7",
    kind="figure",
    label="Figure 7",
    title="Figure 7: the 90% retention study",
    tables={
        "decomposition": Table(gap_decomposition, {"contrasts": "contrasts"}, {"by": "family"}),
        "late_minus_early": Table(late_minus_early, LATE_EARLY_SETTINGS, {"by": "family"}),
        "late_minus_early_strata": Table(late_minus_early, LATE_EARLY_SETTINGS),
        "eos": Table(eos_shares, {"contrasts": "contrasts"}, {"by": "family"}),
    },
    plot=Plot(plot_figure7),
    section=section,
    paper=("retention90",),
    study="retention90",
)
