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
from kvdiv.outputs.report_cells import BOTH_MODELS, PaperTable, SectionContext, ci, count, paper_value
from kvdiv.outputs.style import (
    late_early_axis,
    MAX_COLUMNS,
    PAGE_WIDTH,
    category_height,
    grid_shape,
    legend_below,
    new_figure,
    panel_grid,
    save_figure,
)
from kvdiv.analysis.profiles import branch_tv_profiles, late_minus_early
from kvdiv.results.base import Plot, Result, Table


#: The share of pairs still running (neither chain ended) by depth.
RUNNING_COLOR = "#d62728"
#: The depths past H − max τ, where only the pairs that diverged early enough are observed.
PARTIAL_COLOR = "0.75"
#: Shading of the early and late depth windows.
WINDOW_COLORS = {"early": "#6baed6", "late": "#fd8d3c"}


def strata_of(frame: pl.DataFrame) -> list[str]:
    """The strata drawn as their own lines or markers: none when there is one (the pooled curve holds it)."""
    strata = sorted(set(frame["stratum"].to_list()) - {POOLED}, key=stratum_key)
    return strata if len(strata) > 1 else []


def strata_colors(strata: Sequence[str]) -> dict[str, tuple]:
    """A viridis shade per stratum (the pooled cell is black)."""
    cmap = plt.get_cmap("viridis", max(2, len(strata)))
    return {stratum: cmap(k) for k, stratum in enumerate(strata)}


def plot_profiles(
    ax, profiles: pl.DataFrame, model: str, action: str, early: Sequence[int], late: Sequence[int]
) -> None:
    """Branch TV by depth for one model × action: thin lines per stratum, the pooled curve with its band, the
    early and late windows shaded."""
    sub = profiles.filter((pl.col("model") == model) & (pl.col("action") == action))
    colors = strata_colors(strata_of(profiles.filter(pl.col("model") == model)))
    for stratum, color in colors.items():
        s = sub.filter(pl.col("stratum") == stratum).sort("depth")
        ax.plot(s["depth"], s["tv"], color=color, lw=0.8, alpha=0.9)
    pooled = sub.filter(pl.col("stratum") == POOLED).sort("depth")
    if pooled.height:
        ax.fill_between(
            pooled["depth"].to_numpy(),
            pooled["lower"].to_numpy(),
            pooled["upper"].to_numpy(),
            color="black",
            alpha=0.15,
            lw=0,
        )
        ax.plot(pooled["depth"], pooled["tv"], color="black", lw=1.5)
        complete = pooled.filter(pl.col("complete")) if "complete" in pooled.columns else pooled
        if "running" in pooled.columns:  # the cohort's pairs with neither chain ended, where all of them are observed
            ax.plot(complete["depth"], complete["running"], color=RUNNING_COLOR, lw=1.0, ls="--")
        if complete.height < pooled.height:  # past H − max τ only the earlier-diverging pairs are observed
            ax.axvspan(complete["depth"].max() + 0.5, pooled["depth"].max() + 0.5, color=PARTIAL_COLOR, alpha=0.3, lw=0)
    for window, name in ((early, "early"), (late, "late")):
        ax.axvspan(window[0] - 0.5, window[1] + 0.5, color=WINDOW_COLORS[name], alpha=0.2, lw=0)
    ax.set_ylim(0, 1.02)
    ax.set_title(action)


def plot_contrasts(ax, contrasts: pl.DataFrame, model: str, statistic: str = "late_minus_early") -> None:
    """Late-minus-early branch TV (pp) with intervals, one row per action: pooled (black) and per stratum (shades
    of :func:`strata_colors`, offset within the row)."""
    sub = contrasts.filter((pl.col("model") == model) & (pl.col("statistic") == statistic))
    actions = sorted(sub["action"].unique().to_list())
    strata = strata_of(sub)
    colors = {**strata_colors(strata), POOLED: "black"}
    cells = [*strata, POOLED]
    y = np.arange(len(actions))[::-1]
    step = 0.7 / len(cells)
    for k, cell in enumerate(cells):
        lookup = {r["action"]: r for r in sub.filter(pl.col("stratum") == cell).iter_rows(named=True)}
        est, lo, hi = (
            np.array([100 * lookup[a][col] if a in lookup else np.nan for a in actions])
            for col in ("estimate", "lower", "upper")
        )
        pooled = cell == POOLED
        ax.errorbar(
            est,
            y + 0.35 - step * (k + 0.5),
            xerr=[np.maximum(est - lo, 0), np.maximum(hi - est, 0)],
            fmt="o",
            ms=3.5 if pooled else 2.5,
            capsize=2 if pooled else 0,
            lw=1.0 if pooled else 0.7,
            color=colors[cell],
        )
    late_early_axis(ax, y, actions, "late − early branch TV, per action (95% intervals)")


def legend_handles(strata: Sequence[str], early: Sequence[int], late: Sequence[int]) -> list:
    """Figure 6's legend: the strata's shades, the pooled curve and band, the two depth windows."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color=c, lw=1, label=s.replace("_", " ")) for s, c in strata_colors(strata).items()]
    handles.append(Line2D([], [], color="black", lw=1.5, label="pooled (band: 95% interval)"))
    handles.append(Line2D([], [], color=RUNNING_COLOR, lw=1.0, ls="--", label="pairs still running (share)"))
    handles.append(Patch(color=PARTIAL_COLOR, alpha=0.3, lw=0, label="ℓ > H − max τ: only pairs with τ ≤ H − ℓ"))
    for window, name in ((early, "early"), (late, "late")):
        handles.append(
            Patch(color=WINDOW_COLORS[name], alpha=0.35, lw=0, label=f"{name} window, ℓ = {window[0]}–{window[1]}")
        )
    return handles


def plot_figure6(
    frames: dict[str, pl.DataFrame],
    pdf: str | Path,
    png: str | Path,
    early: Sequence[int],
    late: Sequence[int],
    cohort_max_tau: int | None = None,
    dpi: int = 200,
    panel_width: float = PAGE_WIDTH / MAX_COLUMNS,
    row_height: float = 1.7,
) -> None:
    """Figure 6, one block per model: a profile panel per action (``panel_width`` × ``row_height`` inches, wrapped
    three to a row) with the share of the cohort's pairs still running, then the late − early contrasts, a row per
    action; the cohort and the windows are stated on the figure."""
    profiles, contrasts = frames["profiles"], frames["late_minus_early"]
    models = sorted(set(profiles["model"].to_list()) | set(contrasts["model"].to_list()))
    width = panel_width * MAX_COLUMNS
    if not models:  # no chain diverged within the cohort: say so instead of failing the workflow
        fig = new_figure(1.2, width)
        ax = fig.add_subplot()
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
    rows = grid_shape(len(actions))[0]
    blocks = [(rows * (row_height + 0.35) + 0.3, category_height(len(actions))) for _ in models]
    fig = new_figure(sum(a + b for a, b in blocks) + 0.5, width)
    subfigs = fig.subfigures(len(models), 1, height_ratios=[a + b for a, b in blocks], squeeze=False)[:, 0]
    for subfig, model in zip(subfigs, models):
        top, bottom = subfig.subfigures(2, 1, height_ratios=blocks[0])
        axes = panel_grid(top, len(actions), sharex=True, sharey=True)
        cols = grid_shape(len(actions))[1]
        for k, (ax, action) in enumerate(zip(axes, actions)):
            plot_profiles(ax, profiles, model, action, early, late)
            if k % cols == 0:
                ax.set_ylabel("branch TV δ")
            if k + cols >= len(actions):
                ax.set_xlabel("depth ℓ = t − τ")
        cohort = f"τ ≤ {cohort_max_tau}" if cohort_max_tau is not None else "first divergences"
        top.suptitle(
            f"{model}: branch TV by depth, cohort {cohort}; "
            f"early ℓ = {early[0]}–{early[1]}, late ℓ = {late[0]}–{late[1]}",
            fontsize=10,
        )
        plot_contrasts(bottom.add_subplot(), contrasts, model)
    strata = strata_of(pl.concat([profiles.select("stratum"), contrasts.select("stratum")]))
    legend_below(fig, legend_handles(strata, early, late), width=width)
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
                    paper_value(p50, "late_minus_early_positive") + BOTH_MODELS,
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


LATE_EARLY = {"cohort_max_tau": "cohort_max_tau", "early": "early", "late": "late"}

RESULT = Result(
    name="figure6",
    kind="figure",
    label="Figure 6",
    title="Figure 6: branch TV by divergence-aligned depth",
    tables={
        "profiles": Table(branch_tv_profiles, {"cohort_max_tau": "cohort_max_tau"}),
        "late_minus_early": Table(late_minus_early, LATE_EARLY),
    },
    plot=Plot(plot_figure6, {"early": "early", "late": "late", "cohort_max_tau": "cohort_max_tau"}),
    section=section,
    paper=("retention50",),
    study="retention50",
)
