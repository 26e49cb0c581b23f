"""Figure 7 of arXiv 2609.16617 (the 90% retention study): exposure shares of the mismatch gap, the
prespecified late-minus-early branch-TV intervals (per model × action, pooled over strata; all steps and
strictly before EOS), and the EOS shares of the gap, by task family; and its report section (§5.4–5.6)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from kvdiv.analysis.inputs import POOLED, first_row, stratum_key
from kvdiv.outputs.report_cells import PaperTable, SectionContext, ci, count, paper_value, share
from kvdiv.outputs.style import action_colors, apply_style, save_figure


def _intervals(ax, frame: pl.DataFrame, labels: list[str], key: str, color: str, offset: float, label: str) -> None:
    lookup = {r[key]: r for r in frame.iter_rows(named=True)}
    est = np.array([100 * lookup[k]["estimate"] if k in lookup else np.nan for k in labels])
    lo = np.array([100 * lookup[k]["lower"] if k in lookup else np.nan for k in labels])
    hi = np.array([100 * lookup[k]["upper"] if k in lookup else np.nan for k in labels])
    x = np.arange(len(labels)) + offset
    ax.errorbar(
        x,
        est,
        yerr=[np.maximum(est - lo, 0), np.maximum(hi - est, 0)],
        fmt="o",
        ms=4,
        capsize=3,
        color=color,
        label=label,
    )
    ax.set_xticks(np.arange(len(labels)), labels)
    ax.set_xlim(-0.5, len(labels) - 0.5)


def plot_figure7(
    frames: dict[str, pl.DataFrame],
    pdf: str | Path,
    png: str | Path,
    dpi: int = 200,
    width: float = 7.5,
    row_height: float = 2.5,
) -> None:
    """Figure 7: one row per model; exposure share (left), late − early (middle), EOS share (right)."""
    apply_style()
    dec, lme, eos = frames["decomposition"], frames["late_minus_early"], frames["eos"]
    models = sorted(set(dec["model"].to_list()) | set(lme["model"].to_list()))
    if not models:
        raise ValueError("Figure 7 has no data")
    fig, axes = plt.subplots(len(models), 3, figsize=(width, row_height * len(models)), squeeze=False)
    for i, model in enumerate(models):
        d = dec.filter((pl.col("model") == model) & (pl.col("statistic") == "exposure_share"))
        families = sorted(set(d["family"].to_list()) - {POOLED}, key=stratum_key) + [POOLED]
        contrasts = list(dict.fromkeys(d["contrast"].to_list()))
        ax = axes[i, 0]
        for k, contrast in enumerate(contrasts):
            _intervals(ax, d.filter(pl.col("contrast") == contrast), families, "family", f"C{k}", 0.1 * k, contrast)
        ax.axhline(50, color="grey", lw=0.6, ls="--")
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(0, lo), max(100, hi))
        ax.set_ylabel("exposure share of gap (%)")
        ax.set_title(f"{model}: exposure share")
        ax.legend(frameon=False, fontsize=7)

        ax = axes[i, 1]
        pooled = lme.filter((pl.col("model") == model) & (pl.col("family") == POOLED))
        actions = sorted(pooled["action"].unique().to_list())
        for k, (stat, label) in enumerate(
            (("late_minus_early", "all steps"), ("late_minus_early_strict_pre_eos", "strict pre-EOS"))
        ):
            s = pooled.filter(pl.col("statistic") == stat)
            _intervals(ax, s, actions, "action", "black" if k == 0 else "grey", 0.15 * k, label)
        colors = action_colors(actions)
        for tick, action in zip(ax.get_xticklabels(), actions):
            tick.set_color(colors[action])
        ax.axhline(0, color="black", lw=0.6)
        ax.set_ylabel("late − early branch TV (pp)")
        ax.set_title(f"{model}: branch TV late − early")
        ax.legend(frameon=False, fontsize=7)

        ax = axes[i, 2]
        e = eos.filter((pl.col("model") == model) & (pl.col("statistic") == "eos_share"))
        fams = sorted(set(e["family"].to_list()) - {POOLED}, key=stratum_key) + [POOLED]
        for k, contrast in enumerate(list(dict.fromkeys(e["contrast"].to_list()))):
            _intervals(ax, e.filter(pl.col("contrast") == contrast), fams, "family", f"C{k}", 0.1 * k, contrast)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_ylabel("post-EOS share of gap (%)")
        ax.set_title(f"{model}: EOS share")
    fig.tight_layout()
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
                    if e:  # the paper gives its first model's EOS shares per family, its second's pooled
                        first, second = keys[0], keys[1]
                        t.add(
                            f"EOS share of gap (%), {fam}, {contrast}",
                            model,
                            e["n_documents"],
                            share(e, 2),
                            paper_value(p90, "eos_share_percent", first, fam) if fam != POOLED else "–",
                            paper_value(p90, "eos_share_percent", second) if fam == POOLED else "–",
                        )
            pooled = lme.filter((pl.col("model") == model) & (pl.col("family") == POOLED))
            main = pooled.filter(pl.col("statistic") == "late_minus_early")
            for r in main.iter_rows(named=True):
                t.add(
                    f"late − early branch TV (pp), {r['action']}",
                    model,
                    r["n_documents"],
                    ci(r),
                    paper_value(p90, "late_minus_early_branch_tv_pp_range"),
                    "",
                )
                s = first_row(pooled, action=r["action"], statistic="late_minus_early_strict_pre_eos")
                if s:
                    t.add(
                        f"strict pre-EOS late − early (pp), {r['action']}",
                        model,
                        s["n_documents"],
                        ci(s),
                        *(paper_value(p90, "strict_pre_eos_late_minus_early_pp", m) for m in keys),
                    )
            if main.height:
                t.add(
                    "prespecified late − early intervals above zero (action)",
                    model,
                    "–",
                    count(main["lower"], 0.0),
                    paper_value(p90, "prespecified_branch_tv_intervals_above_zero"),
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
                        paper_value(p90, "late_minus_early_positive_strata"),
                        "",
                    )
    return [context.heading(), "", f"![{context.item.label}]({context.figure})", "", t.markdown()]
