"""Figure 7 of arXiv 2609.16617 (the 90% retention study): exposure shares of the mismatch gap, the
prespecified late-minus-early branch-TV intervals (per model × action, pooled over strata; all steps and
strictly before EOS), and the EOS shares of the gap, by task family."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from kvdiv.analysis.inputs import POOLED, stratum_key
from kvdiv.outputs.style import action_colors, apply_style, save_figure


def _intervals(ax, frame: pl.DataFrame, labels: list[str], key: str, color: str, offset: float, label: str) -> None:
    lookup = {r[key]: r for r in frame.iter_rows(named=True)}
    est = np.array([100 * lookup[k]["estimate"] if k in lookup else np.nan for k in labels])
    lo = np.array([100 * lookup[k]["lower"] if k in lookup else np.nan for k in labels])
    hi = np.array([100 * lookup[k]["upper"] if k in lookup else np.nan for k in labels])
    x = np.arange(len(labels)) + offset
    ax.errorbar(x, est, yerr=[np.maximum(est - lo, 0), np.maximum(hi - est, 0)], fmt="o", ms=4, capsize=3, color=color,
                label=label)
    ax.set_xticks(np.arange(len(labels)), labels)
    ax.set_xlim(-0.5, len(labels) - 0.5)


def plot_figure7(frames: dict[str, pl.DataFrame], pdf: str | Path, png: str | Path, dpi: int = 200,
                 width: float = 7.5, row_height: float = 2.5) -> None:
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
        for k, (stat, label) in enumerate((("late_minus_early", "all steps"), ("late_minus_early_strict_pre_eos", "strict pre-EOS"))):
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
