"""Figure 5 of arXiv 2609.16617: the mismatch gap between actions split into exposure and branch-mismatch
parts (per model × stratum × contrast), and first-divergence survival curves per action."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from kvdiv.analysis.inputs import POOLED, stratum_key
from kvdiv.outputs.style import ACTION_COLORS, apply_style, save_figure

EXPOSURE_COLOR = "#4c72b0"
BRANCH_COLOR = "#dd8452"


def _stat(frame: pl.DataFrame, statistic: str) -> pl.DataFrame:
    return frame.filter(pl.col("statistic") == statistic)


def plot_gap_bars(ax, decomposition: pl.DataFrame, model: str) -> None:
    """Stacked bars: exposure part and branch-mismatch part of each contrast's gap (pp), per stratum,
    with the gap's bootstrap interval as an error bar."""
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
        hatch = None if k == 0 else "//"
        ax.bar(pos, exp, width * 0.95, color=EXPOSURE_COLOR, hatch=hatch, edgecolor="white",
               label=f"exposure ({contrast})")
        ax.bar(pos, br, width * 0.95, bottom=np.where(np.sign(br) == np.sign(exp), exp, 0), color=BRANCH_COLOR,
               hatch=hatch, edgecolor="white", label=f"branch mismatch ({contrast})")
        ax.errorbar(pos, gap, yerr=[np.maximum(gap - lo, 0), np.maximum(hi - gap, 0)], fmt="none", ecolor="black",
                    capsize=2, lw=0.8)
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(x, [s.replace("_", " ") for s in strata], rotation=35, ha="right", rotation_mode="anchor")
    ax.set_ylabel("mismatch gap (pp)")
    ax.set_title(f"{model}: gap = exposure + branch mismatch")


def plot_survival(ax, survival: pl.DataFrame, model: str, entry: pl.DataFrame | None = None) -> None:
    """First-divergence survival P(τ > t) per action with bootstrap bands; the legend gives each action's
    mean entry step among diverged chains (pooled over strata)."""
    sub = survival.filter(pl.col("model") == model)
    for action in sorted(sub["action"].unique().to_list()):
        s = sub.filter(pl.col("action") == action).sort("step")
        color = ACTION_COLORS.get(action)
        label = action
        if entry is not None and entry.height:
            e = entry.filter((pl.col("model") == model) & (pl.col("action") == action) & (pl.col("stratum") == POOLED)
                             & (pl.col("statistic") == "mean_tau_diverged"))
            if e.height and np.isfinite(e["estimate"][0]):
                label = f"{action} (mean τ {e['estimate'][0]:.1f})"
        ax.step(s["step"], s["survival"], where="post", color=color, label=label)
        ax.fill_between(s["step"].to_numpy(), s["lower"].to_numpy(), s["upper"].to_numpy(), step="post", color=color,
                        alpha=0.2, lw=0)
    ax.set_xlabel("generation step t")
    ax.set_ylabel("P(no divergence by t)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{model}: first-divergence survival")
    ax.legend(frameon=False)


def plot_figure5(frames: dict[str, pl.DataFrame], pdf: str | Path, png: str | Path, dpi: int = 200,
                 width: float = 8.0, row_height: float = 3.2) -> None:
    """Figure 5: one row per model, gap decomposition (left) and survival curves (right)."""
    apply_style()
    models = sorted(frames["decomposition"]["model"].unique().to_list()) or sorted(frames["survival"]["model"].unique().to_list())
    if not models:
        raise ValueError("Figure 5 has no data: the decomposition and survival tables are empty")
    fig, axes = plt.subplots(len(models), 2, figsize=(width, row_height * len(models)), squeeze=False,
                             gridspec_kw={"width_ratios": [1.4, 1]})
    for i, model in enumerate(models):
        plot_gap_bars(axes[i, 0], frames["decomposition"], model)
        plot_survival(axes[i, 1], frames["survival"], model, frames.get("entry"))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    top = 1 - 0.5 / (row_height * len(models))
    fig.legend(handles, labels, loc="upper center", ncol=2, frameon=False, fontsize=7, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, top))
    save_figure(fig, pdf, png, dpi=dpi)
