"""Figure 5 of arXiv 2609.16617: the mismatch gap between actions split into exposure and branch-mismatch
parts (per model × stratum × contrast), and first-divergence survival curves per action; and its report section
(entry into divergence and the gap decomposition beside the paper's §5.2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl

from kvdiv.analysis.inputs import POOLED, first_row, stratum_key
from kvdiv.outputs.report_cells import BOTH_MODELS, PaperTable, SectionContext, ci, count, num, paper_value, share
from kvdiv.outputs.style import (
    PAGE_WIDTH,
    PART_COLORS,
    action_colors,
    category_height,
    grid_shape,
    legend_below,
    legend_beside,
    new_figure,
    panel_grid,
    parts_handles,
    parts_panel,
    save_figure,
)
from kvdiv.outputs.tables import pp
from kvdiv.analysis.decomposition import gap_decomposition
from kvdiv.analysis.timing import entry_contrasts, entry_times, survival_curves
from kvdiv.results.base import Plot, Result, Table
from kvdiv.results.claim_sources import paper_key

EXPOSURE_COLOR = PART_COLORS["exposure_part"][0]
BRANCH_COLOR = PART_COLORS["branch_part"][0]


def _stat(frame: pl.DataFrame, statistic: str) -> pl.DataFrame:
    return frame.filter(pl.col("statistic") == statistic)


#: The parts Figure 5 splits a gap into (:data:`kvdiv.outputs.style.PART_COLORS`).
GAP_PARTS = ("exposure_part", "branch_part")


def cells_of(frame: pl.DataFrame, key: str = "stratum") -> list[str]:
    """The cells of a by-``key`` table in drawing order: its strata (families) and the pooled cell; the pooled cell
    alone when there is one stratum (the two hold the same documents)."""
    strata = sorted(set(frame[key].to_list()) - {POOLED}, key=stratum_key)
    return strata + [POOLED] if len(strata) > 1 or not strata else [POOLED]


def cell_title(cell: str, frame: pl.DataFrame, key: str = "stratum") -> str:
    """A cell's panel title: its name, the pooled cell as "pooled" (naming the one stratum it holds, if one)."""
    if cell != POOLED:
        return cell.replace("_", " ")
    strata = sorted(set(frame[key].to_list()) - {POOLED})
    return (
        f"pooled ({strata[0].replace('_', ' ')})"
        if len(strata) == 1
        else f"pooled over {key == 'family' and 'families' or 'strata'}"
    )


def plot_gap_bars(
    ax, decomposition: pl.DataFrame, model: str, cell: str = POOLED, key: str = "stratum", parts=GAP_PARTS
) -> list[str]:
    """One cell's gaps (pp), one row per contrast: the ``parts`` stacked (exposure and branch-mismatch parts by
    default) and the gap with its bootstrap interval (:func:`kvdiv.outputs.style.parts_panel`). Returns the
    contrasts in row order (top first)."""
    sub = decomposition.filter(pl.col("model") == model)
    contrasts = list(dict.fromkeys(sub["contrast"].to_list()))
    sub = sub.filter(pl.col(key) == cell)

    def values(stat: str, col: str = "estimate") -> np.ndarray:
        s = _stat(sub, stat)
        lookup = dict(zip(s["contrast"].to_list(), s[col].to_list()))
        return 100 * np.array([lookup.get(c, np.nan) for c in contrasts], dtype=float)

    split = {name: values(name) for name in parts}
    parts_panel(
        ax, contrasts, split, values("gap"), values("gap", "lower"), values("gap", "upper"), xlabel="mismatch gap (pp)"
    )
    ax.set_title(cell_title(cell, decomposition, key))
    return contrasts


def gap_panels(parent, frame: pl.DataFrame, model: str, key: str = "stratum", parts=GAP_PARTS) -> list:
    """One :func:`plot_gap_bars` panel per cell of ``frame`` (strata or families, then pooled) in ``parent``,
    wrapped three to a row, sharing the contrasts (y) and the gap axis (x, clipped to ±100 pp)."""
    cells = cells_of(frame.filter(pl.col("model") == model), key)
    axes = panel_grid(parent, len(cells), sharex=True, sharey=True)
    for ax, cell in zip(axes, cells):
        plot_gap_bars(ax, frame, model, cell, key, parts)
        if ax is not axes[0]:
            ax.set_ylabel("")
    lo, hi = axes[0].get_xlim()
    axes[0].set_xlim(max(lo, -100), min(hi, 100))
    return axes


def gap_legend_handles(contrasts: list[str] | None = None) -> list:
    """Legend entries of :func:`plot_gap_bars`: the two parts' colours, then the gap's marker (``contrasts``: unused,
    the contrasts are the rows' labels)."""
    return parts_handles(GAP_PARTS)


def plot_survival(
    ax, survival: pl.DataFrame, model: str, entry: pl.DataFrame | None = None, colors: dict[str, str] | None = None
) -> None:
    """First-divergence survival P(τ > t) per action with bootstrap bands; the legend (beside the panel) gives each
    action's mean entry step among diverged chains (pooled over strata). ``colors``: action → colour (default: the
    style's fixed colours, others distinct: :func:`kvdiv.outputs.style.action_colors`)."""
    sub = survival.filter(pl.col("model") == model)
    actions = sorted(sub["action"].unique().to_list())
    colors = {**action_colors(actions), **(colors or {})}
    for action in actions:
        s = sub.filter(pl.col("action") == action).sort("step")
        color = colors[action]
        label = action
        if entry is not None and entry.height:
            e = entry.filter(
                (pl.col("model") == model)
                & (pl.col("action") == action)
                & (pl.col("stratum") == POOLED)
                & (pl.col("statistic") == "mean_tau_diverged")
            )
            if e.height and np.isfinite(e["estimate"][0]):
                label = f"{action} (mean τ {e['estimate'][0]:.1f})"
        ax.step(s["step"], s["survival"], where="post", color=color, label=label)
        ax.fill_between(
            s["step"].to_numpy(),
            s["lower"].to_numpy(),
            s["upper"].to_numpy(),
            step="post",
            color=color,
            alpha=0.15,
            lw=0,
        )
    ax.set_xlabel("generation step t")
    ax.set_ylabel("P(no divergence by t)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{model}: first-divergence survival")
    legend_beside(ax)


def plot_figure5(
    frames: dict[str, pl.DataFrame],
    pdf: str | Path,
    png: str | Path,
    dpi: int = 200,
    width: float = PAGE_WIDTH,
    row_height: float = 2.4,
) -> None:
    """Figure 5, one block per model: the gap decomposition per stratum and pooled (one panel each, wrapped three to
    a row, a row per contrast), then the survival curves (``row_height`` inches at least, legend beside)."""
    models = sorted(frames["decomposition"]["model"].unique().to_list()) or sorted(
        frames["survival"]["model"].unique().to_list()
    )
    if not models:
        raise ValueError("Figure 5 has no data: the decomposition and survival tables are empty")
    dec, survival = frames["decomposition"], frames["survival"]
    blocks = []
    for model in models:
        sub = dec.filter(pl.col("model") == model)
        rows = grid_shape(len(cells_of(sub)))[0] if sub.height else 0
        n_actions = survival.filter(pl.col("model") == model)["action"].n_unique()
        blocks.append((rows * category_height(sub["contrast"].n_unique()), max(row_height, 0.17 * n_actions + 0.7)))
    fig = new_figure(sum(a + b for a, b in blocks) + 0.45, width)
    subfigs = fig.subfigures(len(models), 1, height_ratios=[a + b for a, b in blocks], squeeze=False)[:, 0]
    for subfig, model, (gap_height, surv_height) in zip(subfigs, models, blocks):
        top, bottom = (
            subfig.subfigures(2, 1, height_ratios=[max(gap_height, 1e-3), surv_height])
            if gap_height
            else (None, subfig)
        )
        if top is not None:
            gap_panels(top, dec, model)
            top.suptitle(f"{model}: mismatch gap = exposure part + branch-mismatch part", fontsize=10)
        plot_survival(bottom.add_subplot(), survival, model, frames.get("entry"))
    legend_below(fig, gap_legend_handles())
    save_figure(fig, pdf, png, dpi=dpi)


def section(frames: Mapping[str, pl.DataFrame], setting: Mapping, paper: Mapping, context: SectionContext) -> list[str]:
    """The report's section of Figure 5 (§5.2): per model, mean τ among diverged and divergence by H per action,
    the gap and its exposure share per contrast, the exposure-majority count and the range of C, beside the
    paper's ``retention50`` values."""
    t = PaperTable(context.model_keys)
    p50 = paper.get("retention50", {})
    keys = context.model_keys
    theirs = setting.get("paper_actions") or {}  # our action → the paper's (both readings of SnapKV-512)
    if frames:
        entry, dec = frames["entry"], frames["decomposition"]
        for model in sorted(entry["model"].unique().to_list()):
            for action in sorted(entry["action"].unique().to_list()):
                r = first_row(entry, model=model, stratum=POOLED, action=action, statistic="mean_tau_diverged")
                if r:
                    t.add(
                        f"mean first-divergence step among diverged, {action}",
                        model,
                        r["n_documents"],
                        num(r),
                        *(
                            paper_value(p50, "mean_first_divergence_step_among_diverged", m, paper_key(theirs, action))
                            for m in keys
                        ),
                    )
                r = first_row(entry, model=model, stratum=POOLED, action=action, statistic="diverged")
                if r:
                    t.add(
                        f"diverged by step H (%), {action}",
                        model,
                        r["n_documents"],
                        ci(r),
                        *(paper_value(p50, "diverged_by_step_128_percent", m, paper_key(theirs, action)) for m in keys),
                    )
            for contrast in list(dict.fromkeys(dec.filter(pl.col("model") == model)["contrast"].to_list())):
                r = first_row(dec, model=model, stratum=POOLED, contrast=contrast, statistic="exposure_share")
                g = first_row(dec, model=model, stratum=POOLED, contrast=contrast, statistic="gap")
                if g:
                    t.add(f"mismatch gap (pp), {contrast}", model, g["n_documents"], ci(g))
                if r:
                    key = paper_key(theirs, r["action_a"], r["action_b"])
                    t.add(
                        f"exposure share of gap (%), {contrast}",
                        model,
                        r["n_documents"],
                        share(r),
                        *(paper_value(p50, "exposure_share_of_gap_percent", key, m) for m in keys),
                    )
            cells = dec.filter(
                (pl.col("model") == model) & (pl.col("stratum") != POOLED) & (pl.col("statistic") == "exposure_share")
            )
            if cells.height:
                ok = cells.filter(pl.col("identified")) if "identified" in cells.columns else cells
                unidentified = cells.height - ok.height
                t.add(
                    "decompositions with exposure majority (stratum × contrast)",
                    model,
                    "–",
                    count(ok["estimate"], 0.5)
                    + (f" ({unidentified} not identified: gap indistinguishable from 0)" if unidentified else ""),
                    paper_value(p50, "decompositions_with_exposure_majority") + BOTH_MODELS,
                    "",
                )
            rates = dec.filter(
                (pl.col("model") == model)
                & (pl.col("stratum") != POOLED)
                & pl.col("statistic").is_in(["rate_a", "rate_b"])
            )["estimate"].drop_nans()
            if rates.len():
                t.add(
                    "post-divergence mismatch rate C, range over cells (%)",
                    model,
                    "–",
                    f"[{pp(rates.min())}, {pp(rates.max())}]",
                    paper_value(p50, "post_divergence_mismatch_percent_range") + BOTH_MODELS,
                    "",
                )
    return [
        context.heading(),
        "",
        "Exposure share = (ΔO + ΔE·C̄)/ΔR, branch-mismatch share = Ē·ΔC/ΔR (midpoint split of Π = E·C; the two "
        "shares sum to 1 and do not depend on the order of the two actions).",
        "",
        f"![{context.item.label}]({context.figure})",
        "",
        t.markdown(),
    ]


RESULT = Result(
    name="figure5",
    kind="figure",
    label="Figure 5",
    title="Figure 5: entry into divergence and the gap decomposition",
    tables={
        "decomposition": Table(gap_decomposition, {"contrasts": "contrasts"}),
        "survival": Table(survival_curves),
        "entry": Table(entry_times),
        "entry_contrasts": Table(entry_contrasts, {"contrasts": "contrasts"}),
    },
    plot=Plot(plot_figure5),
    section=section,
    paper=("retention50",),
    study="retention50",
)
