"""Figure 5 of arXiv 2609.16617: the mismatch gap between actions split into exposure and branch-mismatch
parts (per model × stratum × contrast), and first-divergence survival curves per action; and its report section
(entry into divergence and the gap decomposition beside the paper's §5.2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from kvdiv.analysis.inputs import POOLED, first_row, stratum_key
from kvdiv.outputs.report_cells import PaperTable, SectionContext, ci, count, num, paper_value, share
from kvdiv.outputs.style import action_colors, apply_style, save_figure
from kvdiv.outputs.tables import pp

EXPOSURE_COLOR = "#4c72b0"
BRANCH_COLOR = "#dd8452"


def _stat(frame: pl.DataFrame, statistic: str) -> pl.DataFrame:
    return frame.filter(pl.col("statistic") == statistic)


#: Hatches telling the contrasts of one panel apart (cycled beyond their number).
CONTRAST_HATCHES = (None, "//", "..", "xx", "\\\\", "++", "oo", "--")


def contrast_hatch(k: int) -> str | None:
    """The hatch of the ``k``-th contrast of a panel."""
    return CONTRAST_HATCHES[k % len(CONTRAST_HATCHES)]


def plot_gap_bars(ax, decomposition: pl.DataFrame, model: str) -> list[str]:
    """Stacked bars: exposure part and branch-mismatch part of each contrast's gap (pp), per stratum,
    with the gap's bootstrap interval as an error bar; contrasts told apart by hatch (:func:`contrast_hatch`).
    Returns the contrasts in bar order."""
    sub = decomposition.filter(pl.col("model") == model)
    contrasts = list(dict.fromkeys(sub["contrast"].to_list()))
    strata = sorted(set(sub["stratum"].to_list()) - {POOLED}, key=stratum_key) + [POOLED]
    width = 0.8 / max(1, len(contrasts))
    x = np.arange(len(strata))
    for k, contrast in enumerate(contrasts):
        c = sub.filter(pl.col("contrast") == contrast)

        def values(stat: str, col: str = "estimate") -> np.ndarray:
            s = _stat(c, stat)
            lookup = dict(zip(s["stratum"].to_list(), s[col].to_list()))
            return 100 * np.array([lookup.get(st, np.nan) for st in strata], dtype=float)

        exp, br = values("exposure_part"), values("branch_part")
        gap, lo, hi = values("gap"), values("gap", "lower"), values("gap", "upper")
        pos = x - 0.4 + width * (k + 0.5)
        hatch = contrast_hatch(k)
        ax.bar(pos, exp, width * 0.95, color=EXPOSURE_COLOR, hatch=hatch, edgecolor="white")
        ax.bar(
            pos,
            br,
            width * 0.95,
            bottom=np.where(np.sign(br) == np.sign(exp), exp, 0),
            color=BRANCH_COLOR,
            hatch=hatch,
            edgecolor="white",
        )
        ax.errorbar(
            pos,
            gap,
            yerr=[np.maximum(gap - lo, 0), np.maximum(hi - gap, 0)],
            fmt="none",
            ecolor="black",
            capsize=2,
            lw=0.8,
        )
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(x, [s.replace("_", " ") for s in strata], rotation=35, ha="right", rotation_mode="anchor")
    ax.set_ylabel("mismatch gap (pp)")
    ax.set_title(f"{model}: gap = exposure + branch mismatch")
    return contrasts


def gap_legend_handles(contrasts: list[str]) -> list:
    """Legend entries of :func:`plot_gap_bars`: the two parts' colours, then one hatch per contrast."""
    from matplotlib.patches import Patch

    handles = [
        Patch(facecolor=EXPOSURE_COLOR, label="exposure part"),
        Patch(facecolor=BRANCH_COLOR, label="branch-mismatch part"),
    ]
    handles += [
        Patch(facecolor="0.88", edgecolor="0.35", hatch=contrast_hatch(k), label=c) for k, c in enumerate(contrasts)
    ]
    return handles


def plot_survival(
    ax, survival: pl.DataFrame, model: str, entry: pl.DataFrame | None = None, colors: dict[str, str] | None = None
) -> None:
    """First-divergence survival P(τ > t) per action with bootstrap bands; the legend gives each action's
    mean entry step among diverged chains (pooled over strata). ``colors``: action → colour (default: the style's
    fixed colours, others distinct: :func:`kvdiv.outputs.style.action_colors`)."""
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
            alpha=0.2,
            lw=0,
        )
    ax.set_xlabel("generation step t")
    ax.set_ylabel("P(no divergence by t)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{model}: first-divergence survival")
    if len(sub["action"].unique()) > 3:  # beside the curves, not over them
        ax.legend(frameon=False, fontsize=6.5, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    else:
        ax.legend(frameon=False)


def plot_figure5(
    frames: dict[str, pl.DataFrame],
    pdf: str | Path,
    png: str | Path,
    dpi: int = 200,
    width: float = 8.0,
    row_height: float = 3.2,
) -> None:
    """Figure 5: one row per model, gap decomposition (left) and survival curves (right)."""
    apply_style()
    models = sorted(frames["decomposition"]["model"].unique().to_list()) or sorted(
        frames["survival"]["model"].unique().to_list()
    )
    if not models:
        raise ValueError("Figure 5 has no data: the decomposition and survival tables are empty")
    n_actions = frames["survival"]["action"].n_unique() if frames["survival"].height else 0
    wide = n_actions > 3  # the survival legend goes beside its panel
    handles = gap_legend_handles(list(dict.fromkeys(frames["decomposition"]["contrast"].to_list())))
    ncol = 3 if len(handles) > 4 else 2
    legend_height = 0.18 * -(-len(handles) // ncol) + 0.15  # inches below the panels, growing with its rows
    height = row_height * len(models) + legend_height
    fig, axes = plt.subplots(
        len(models),
        2,
        figsize=(width + (2.2 if wide else 0), height),
        squeeze=False,
        gridspec_kw={"width_ratios": [1.4, 1]},
    )
    for i, model in enumerate(models):
        plot_gap_bars(axes[i, 0], frames["decomposition"], model)
        plot_survival(axes[i, 1], frames["survival"], model, frames.get("entry"))
    fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False, fontsize=7, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, legend_height / height, 1, 1))
    save_figure(fig, pdf, png, dpi=dpi)


def section(frames: Mapping[str, pl.DataFrame], setting: Mapping, paper: Mapping, context: SectionContext) -> list[str]:
    """The report's section of Figure 5 (§5.2): per model, mean τ among diverged and divergence by H per action,
    the gap and its exposure share per contrast, the exposure-majority count and the range of C, beside the
    paper's ``retention50`` values."""
    t = PaperTable(context.model_keys)
    p50 = paper.get("retention50", {})
    keys = context.model_keys
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
                        *(paper_value(p50, "mean_first_divergence_step_among_diverged", m, action) for m in keys),
                    )
                r = first_row(entry, model=model, stratum=POOLED, action=action, statistic="diverged")
                if r:
                    t.add(
                        f"diverged by step H (%), {action}",
                        model,
                        r["n_documents"],
                        ci(r),
                        *(paper_value(p50, "diverged_by_step_128_percent", m, action) for m in keys),
                    )
            for contrast in list(dict.fromkeys(dec.filter(pl.col("model") == model)["contrast"].to_list())):
                key = contrast.replace(" − ", "_minus_")
                r = first_row(dec, model=model, stratum=POOLED, contrast=contrast, statistic="exposure_share")
                g = first_row(dec, model=model, stratum=POOLED, contrast=contrast, statistic="gap")
                if g:
                    t.add(f"mismatch gap (pp), {contrast}", model, g["n_documents"], ci(g))
                if r:
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
                    paper_value(p50, "decompositions_with_exposure_majority"),
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
                    paper_value(p50, "post_divergence_mismatch_percent_range"),
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
