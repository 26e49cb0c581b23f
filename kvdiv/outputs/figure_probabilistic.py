"""The probabilistic-eviction figure (config/probabilistic.yaml): does decode-time correction delay divergence?

Per model, one row: the pooled gap of each contrast (probabilistic action − its SnapKV reference) split into its
exposure and branch-mismatch parts with the gap's bootstrap interval (Figure 5's decomposition, pooled over
strata), and first-divergence survival curves, one panel per reference action (the actions contrasted with it,
and itself), the legend giving each action's mean entry step among diverged chains.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from kvdiv.analysis.inputs import POOLED
from kvdiv.outputs.figure5 import BRANCH_COLOR, EXPOSURE_COLOR, plot_survival
from kvdiv.outputs.style import apply_style, save_figure

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
                return min(path[path.index(nxt):])
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
    mismatch gap (pp), the gap's interval as an error bar."""
    sub = decomposition.filter((pl.col("model") == model) & (pl.col("stratum") == POOLED))
    contrasts = list(dict.fromkeys(sub["contrast"].to_list()))

    def value(contrast: str, stat: str, col: str = "estimate") -> float:
        row = sub.filter((pl.col("contrast") == contrast) & (pl.col("statistic") == stat))
        return 100 * float(row[col][0]) if row.height else np.nan

    y = np.arange(len(contrasts))[::-1]
    exp = np.array([value(c, "exposure_part") for c in contrasts])
    br = np.array([value(c, "branch_part") for c in contrasts])
    gap = np.array([value(c, "gap") for c in contrasts])
    lo = np.array([value(c, "gap", "lower") for c in contrasts])
    hi = np.array([value(c, "gap", "upper") for c in contrasts])
    ax.barh(y, exp, 0.7, color=EXPOSURE_COLOR, label="exposure")
    ax.barh(y, br, 0.7, left=np.where(np.sign(br) == np.sign(exp), exp, 0), color=BRANCH_COLOR, label="branch mismatch")
    ax.errorbar(gap, y, xerr=[np.maximum(gap - lo, 0), np.maximum(hi - gap, 0)], fmt="o", color="black", ms=3,
                capsize=2, lw=0.8, label="gap (interval)")
    ax.axvline(0, color="black", lw=0.6)
    ax.set_yticks(y, contrasts)
    ax.set_xlabel("mismatch gap (pp), pooled")
    ax.set_title(f"{model}: gap = exposure + branch mismatch")
    ax.legend(frameon=False, fontsize=7)


def plot_probabilistic(frames: dict[str, pl.DataFrame], pdf: str | Path, png: str | Path, dpi: int = 200,
                       panel_width: float = 3.6, row_height: float = 3.4) -> None:
    """The figure: one row per model, pooled gap decomposition then one survival panel per reference action."""
    apply_style()
    survival, decomposition = frames["survival"], frames["decomposition"]
    models = sorted(survival["model"].unique().to_list())
    if not models:
        raise ValueError("the probabilistic figure has no data: the survival table is empty")
    contrasts = list(dict.fromkeys(decomposition["contrast"].to_list()))
    groups = reference_groups(contrasts, sorted(survival["action"].unique().to_list()))
    n_cols = 1 + len(groups)
    fig, axes = plt.subplots(len(models), n_cols, figsize=(panel_width * n_cols + 1.5, row_height * len(models)),
                             squeeze=False, gridspec_kw={"width_ratios": [1.5] + [1] * len(groups)})
    for i, model in enumerate(models):
        plot_pooled_gaps(axes[i, 0], decomposition, model)
        for j, (reference, actions) in enumerate(groups.items(), start=1):
            colors = {action: "black" if k == 0 else f"C{(k - 1) % 10}" for k, action in enumerate(actions)}
            plot_survival(axes[i, j], survival.filter(pl.col("action").is_in(actions)), model, frames.get("entry"),
                          colors=colors)
            axes[i, j].set_title(f"{model}: survival vs {reference}")
            axes[i, j].legend(frameon=False, fontsize=6)
    fig.tight_layout()
    save_figure(fig, pdf, png, dpi=dpi)
