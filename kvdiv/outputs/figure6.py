"""Figure 6 of arXiv 2609.16617: branch TV by divergence-aligned depth ℓ = t − τ within the first-divergence
cohort τ ≤ 64, per model × action (one line per stratum, pooled bold with its band), and the
late-minus-early window contrasts with bootstrap intervals per stratum × action; and its report section (§5.3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from kvdiv.analysis.inputs import POOLED, first_row, stratum_key
from kvdiv.outputs.report_cells import PaperTable, SectionContext, ci, count, paper_value
from kvdiv.outputs.style import action_colors, apply_style, save_figure


def plot_profiles(
    ax, profiles: pl.DataFrame, model: str, action: str, early: Sequence[int], late: Sequence[int]
) -> None:
    """Branch TV by depth for one model × action: thin lines per stratum, the pooled curve with its band."""
    sub = profiles.filter((pl.col("model") == model) & (pl.col("action") == action))
    strata = sorted(set(sub["stratum"].to_list()) - {POOLED}, key=stratum_key)
    cmap = plt.get_cmap("viridis", max(2, len(strata)))
    for k, stratum in enumerate(strata):
        s = sub.filter(pl.col("stratum") == stratum).sort("depth")
        ax.plot(s["depth"], s["tv"], color=cmap(k), lw=0.8, alpha=0.8, label=stratum.replace("_", " "))
    pooled = sub.filter(pl.col("stratum") == POOLED).sort("depth")
    color = action_colors([action])[action]
    if pooled.height:
        ax.plot(pooled["depth"], pooled["tv"], color="black", lw=1.8, label="pooled")
        ax.fill_between(
            pooled["depth"].to_numpy(),
            pooled["lower"].to_numpy(),
            pooled["upper"].to_numpy(),
            color=color,
            alpha=0.25,
            lw=0,
        )
    for window, name in ((early, "early"), (late, "late")):
        ax.axvspan(window[0] - 0.5, window[1] + 0.5, color="grey", alpha=0.12, lw=0)
        ax.text(
            (window[0] + window[1]) / 2,
            1.0,
            name,
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=7,
        )
    ax.set_xlabel("depth ℓ = t − τ")
    ax.set_ylabel("branch TV δ")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{model}: {action}", pad=12)


def plot_contrasts(ax, contrasts: pl.DataFrame, model: str, statistic: str = "late_minus_early") -> None:
    """Late-minus-early branch TV (pp) with intervals, per stratum (rows) and action (colours)."""
    sub = contrasts.filter((pl.col("model") == model) & (pl.col("statistic") == statistic))
    strata = sorted(set(sub["stratum"].to_list()) - {POOLED}, key=stratum_key) + [POOLED]
    actions = sorted(sub["action"].unique().to_list())
    colors = action_colors(actions)
    y = np.arange(len(strata))
    step = 0.7 / max(1, len(actions))
    for k, action in enumerate(actions):
        s = sub.filter(pl.col("action") == action)
        lookup = {r["stratum"]: r for r in s.iter_rows(named=True)}
        est = np.array([100 * lookup[st]["estimate"] if st in lookup else np.nan for st in strata])
        lo = np.array([100 * lookup[st]["lower"] if st in lookup else np.nan for st in strata])
        hi = np.array([100 * lookup[st]["upper"] if st in lookup else np.nan for st in strata])
        pos = y - 0.35 + step * (k + 0.5)
        ax.errorbar(
            est,
            pos,
            xerr=[np.maximum(est - lo, 0), np.maximum(hi - est, 0)],
            fmt="o",
            ms=3,
            capsize=2,
            color=colors[action],
            label=action,
        )
    ax.axvline(0, color="black", lw=0.6)
    ax.set_yticks(y, [s.replace("_", " ") for s in strata])
    ax.set_xlabel("late − early branch TV (pp)")
    ax.set_title(f"{model}: late − early")
    ax.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def plot_figure6(
    frames: dict[str, pl.DataFrame],
    pdf: str | Path,
    png: str | Path,
    early: Sequence[int],
    late: Sequence[int],
    dpi: int = 200,
    panel_width: float = 2.6,
    row_height: float = 2.6,
) -> None:
    """Figure 6: one row per model; one profile panel per action and a contrast panel."""
    apply_style()
    profiles, contrasts = frames["profiles"], frames["late_minus_early"]
    models = sorted(set(profiles["model"].to_list()) | set(contrasts["model"].to_list()))
    if not models:  # no chain diverged within the cohort: say so instead of failing the workflow
        fig, ax = plt.subplots(figsize=(4, 2))
        ax.axis("off")
        ax.text(
            0.5,
            0.5,
            "No first divergence within the cohort\n(τ ≤ analysis.cohort_max_tau): nothing to plot",
            ha="center",
            va="center",
        )
        save_figure(fig, pdf, png, dpi=dpi)
        return
    actions = sorted(set(profiles["action"].to_list()) | set(contrasts["action"].to_list()))
    ncol = len(actions) + 1
    fig, axes = plt.subplots(len(models), ncol, figsize=(panel_width * ncol, row_height * len(models)), squeeze=False)
    for i, model in enumerate(models):
        for j, action in enumerate(actions):
            plot_profiles(axes[i, j], profiles, model, action, early, late)
        plot_contrasts(axes[i, -1], contrasts, model)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles, labels, loc="lower center", ncol=min(len(labels), 7), frameon=False, bbox_to_anchor=(0.5, -0.02)
        )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save_figure(fig, pdf, png, dpi=dpi)


def reference_action(contrasts: Sequence[Sequence[str]], lme: pl.DataFrame | None) -> str:
    """The action the paper's Figure 6 headline is about: the b side of the first contrast present."""
    present = set(lme["action"].to_list()) if lme is not None and lme.height else set()
    for c in contrasts:
        if c[1] in present:
            return str(c[1])
    return sorted(present)[0] if present else "–"


def section(frames: Mapping[str, pl.DataFrame], setting: Mapping, paper: Mapping, context: SectionContext) -> list[str]:
    """The report's section of Figure 6 (§5.3): early and late branch TV of the reference action
    (:func:`reference_action`) and the count of positive late − early cells, beside the paper's ``retention50``."""
    t = PaperTable(context.model_keys)
    p50 = paper.get("retention50", {})
    ref_action = reference_action(setting.get("contrasts", []), frames.get("late_minus_early"))
    if frames:
        lme = frames["late_minus_early"]
        for model in sorted(lme["model"].unique().to_list()):
            for which in ("early", "late"):
                r = first_row(lme, model=model, stratum=POOLED, action=ref_action, statistic=which)
                if r:
                    t.add(
                        f"branch TV, τ ≤ {setting.get('cohort_max_tau', 64)}, {ref_action}, {which} window (%)",
                        model,
                        r["n_documents"],
                        ci(r),
                        *(
                            paper_value(p50, "branch_tv_snapkv_half_tau_le_64_percent", m, which)
                            for m in context.model_keys
                        ),
                    )
            cells = lme.filter(
                (pl.col("model") == model) & (pl.col("stratum") != POOLED) & (pl.col("statistic") == "late_minus_early")
            )
            if cells.height:
                t.add(
                    "late − early branch TV positive (stratum × action)",
                    model,
                    "–",
                    count(cells["estimate"], 0.0),
                    paper_value(p50, "late_minus_early_positive"),
                    "",
                )
    return [
        context.heading(),
        "",
        f"Early window: depths {setting.get('early')}; late window: depths {setting.get('late')}; "
        f"cohort τ ≤ {setting.get('cohort_max_tau')}.",
        "",
        f"![{context.item.label}]({context.figure})",
        "",
        t.markdown(),
    ]
