"""Figure 4: naive coupled sampling vs residual-branch conditional Monte Carlo (SWRB) on the 24
enumerable systems of arXiv 2609.16617, §4.4.

Panels, one point per system against its exact divergence probability P(τ ≤ H):
(a) variance ratio Var(M)/Var(Z_R), (b) kernel-pair evaluation ratio c̄_SWRB/c̄_naive,
(c) variance–cost advantage (a)/(b); (d) the suite's aggregates beside the paper's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from kvdiv.outputs.style import legend_below, new_figure, panel_grid, save_figure

SHAPE_COLORS = ("#1b6ca8", "#d1495b", "#2e933c", "#8f5bb5", "#e08e0b")
KIND_MARKERS = {"persistent": "o", "history_dependent": "^"}
PAPER_COLOR = "#555555"


def _plain(value: float, _pos=None) -> str:
    """Tick labels as plain decimals (0.05, 0.1, 20, 100) rather than powers of ten."""
    return f"{value:g}"


def _plain_minor(value: float, _pos=None) -> str:
    """Label only the minor ticks 2, 3 and 5 × 10^k."""
    mantissa = value / 10 ** np.floor(np.log10(value))
    return f"{value:g}" if round(mantissa) in (2, 3, 5) and abs(mantissa - round(mantissa)) < 1e-6 else ""


def _shape_label(vocab: int, horizon: int) -> str:
    return f"V={vocab}, H={horizon}"


def plot_figure4(
    comparison: pl.DataFrame, paper_table: pl.DataFrame, pdf_path: str | Path, png_path: str | Path, dpi: int = 200
) -> None:
    """Render Figure 4 from :func:`kvdiv.finite.study.comparison_table` and
    :func:`kvdiv.finite.study.paper_comparison` outputs; saves PDF and PNG atomically."""
    paper = {q: (p, o) for q, p, o in paper_table.iter_rows()}
    vr_lo = paper["variance ratio naive/SWRB, min"][0]
    vr_med = paper["variance ratio naive/SWRB, median"][0]
    vr_hi = paper["variance ratio naive/SWRB, max"][0]
    ev_paper = paper["kernel-pair evaluations SWRB/naive (mean)"][0]
    adv_paper = paper["variance-cost advantage (ratio of means)"][0]

    shapes = comparison.select("vocab", "horizon").unique(maintain_order=True).sort("vocab", "horizon").rows()
    colors = {shape: SHAPE_COLORS[i % len(SHAPE_COLORS)] for i, shape in enumerate(shapes)}

    fig = new_figure(6.0)
    ax_var, ax_eval, ax_adv, ax_tab = panel_grid(fig, 4, columns=2)
    panels = (
        (ax_var, "variance_ratio", "Var(M) / Var($Z_R$)", "(a) variance ratio, naive / SWRB"),
        (ax_eval, "evaluation_ratio", "evaluations SWRB / naive", "(b) kernel-pair evaluations"),
        (ax_adv, "advantage", "variance × cost, naive / SWRB", "(c) variance–cost advantage"),
    )
    for ax, column, ylabel, title in panels:
        for row in comparison.iter_rows(named=True):
            kind = row["kind"] if row["kind"] in KIND_MARKERS else "persistent"
            color = colors[(row["vocab"], row["horizon"])]
            ax.scatter(
                row["P_diverge"],
                row[column],
                marker=KIND_MARKERS[kind],
                s=30,
                facecolors=color if not row["eos"] else "white",
                edgecolors=color,
                linewidths=1.1,
                zorder=3,
            )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
        ax.xaxis.set_minor_formatter(FuncFormatter(_plain_minor))
        ax.set_xlabel(r"exact $P(\tau \leq H)$")
        ax.set_ylabel(ylabel)
        ax.set_title(title, loc="left")
    for ax in (ax_var, ax_adv):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax_var.axhspan(vr_lo, vr_hi, color=PAPER_COLOR, alpha=0.10, lw=0, zorder=0)
    ax_var.axhline(vr_med, color=PAPER_COLOR, ls="--", lw=1, zorder=1)
    ax_var.text(
        0.98,
        0.97,
        f"paper: {vr_lo:g}–{vr_hi:g}\n(shaded), median {vr_med:g} (dashed)",
        transform=ax_var.transAxes,
        ha="right",
        va="top",
        fontsize=7,
        color=PAPER_COLOR,
    )
    ax_eval.axhline(ev_paper, color=PAPER_COLOR, ls="--", lw=1, zorder=1)
    ax_eval.text(
        0.98,
        0.04,
        f"paper: ×{ev_paper:g} (dashed)",
        transform=ax_eval.transAxes,
        ha="right",
        va="bottom",
        fontsize=7,
        color=PAPER_COLOR,
    )
    lo, hi = ax_eval.get_ylim()
    ax_eval.set_ylim(min(lo, 1.0), max(hi, ev_paper * 1.05))
    ax_adv.axhline(adv_paper, color=PAPER_COLOR, ls="--", lw=1, zorder=1)
    ax_adv.text(
        0.98,
        0.97,
        f"paper: {adv_paper:g} (dashed,\nratio of means)",
        transform=ax_adv.transAxes,
        ha="right",
        va="top",
        fontsize=7,
        color=PAPER_COLOR,
    )

    top = [Line2D([], [], ls="", marker="s", color=colors[s], label=_shape_label(*s)) for s in shapes]
    bottom = [
        Line2D([], [], ls="", marker=KIND_MARKERS["persistent"], color="k", label="persistent"),
        Line2D([], [], ls="", marker=KIND_MARKERS["history_dependent"], color="k", label="history-dependent"),
        Line2D([], [], ls="", marker="s", color="k", markerfacecolor="k", label="no EOS (filled)"),
        Line2D([], [], ls="", marker="s", color="k", markerfacecolor="white", label="absorbing EOS (hollow)"),
    ]
    n = max(len(top), len(bottom))  # two rows: the shapes' colours above, the markers' meanings below
    blank = Line2D([], [], ls="", label=" ")
    top, bottom = top + [blank] * (n - len(top)), bottom + [blank] * (n - len(bottom))
    legend_below(fig, [h for pair in zip(top, bottom) for h in pair], ncol=n)
    ax_tab.axis("off")
    ax_tab.set_title("(d) suite aggregates", loc="left")
    labels = {
        "systems": "systems",
        "variance ratio naive/SWRB, min": "variance ratio, min",
        "variance ratio naive/SWRB, median": "variance ratio, median",
        "variance ratio naive/SWRB, max": "variance ratio, max",
        "kernel-pair evaluations SWRB/naive (mean)": "evaluation ratio (mean)",
        "variance-cost advantage (ratio of means)": "variance–cost advantage",
    }
    cells = [[labels.get(q, q), f"{p:.3g}", f"{o:.3g}"] for q, p, o in paper_table.iter_rows()]
    table = ax_tab.table(
        cellText=cells,
        colLabels=["", "paper", "ours"],
        cellLoc="right",
        colLoc="right",
        colWidths=[0.62, 0.19, 0.19],
        bbox=[0.0, 0.05, 1.0, 0.9],
    )
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for (r, c), cell in table.get_celld().items():
        cell.set_edgecolor("#cccccc")
        cell.set_linewidth(0.5)
        if c == 0:
            cell.set_text_props(ha="left")
            cell._loc = "left"
        if r == 0:
            cell.set_text_props(weight="bold")
    save_figure(fig, pdf_path, png_path, dpi=dpi)
