"""The one matplotlib style every kvdiv figure uses: page width, panels wrapped three to a row, legends outside the
data (constrained layout), fixed colours for actions and for the parts of a gap; and a helper that saves PDF + PNG
atomically. tests/outputs/test_figure_legibility.py holds every figure to it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from kvdiv.io import atomic_path  # noqa: E402

#: Width of every figure (inches): a page's text width; with savefig's 0.1 in margin about 1520 px at the default
#: 200 dpi and 2290 px at the highest ``plotting.dpi`` the schema allows (300), under the 2400 px a page holds.
PAGE_WIDTH = 7.5
#: Panels per row at most; more panels wrap into further rows.
MAX_COLUMNS = 3
#: Height (inches) of one category row (a contrast, an action) of a panel whose categories are on the y axis.
ROW_INCHES = 0.22
#: Height (inches) a panel needs besides its category rows: title, x tick labels, x label.
PANEL_MARGIN = 0.95

RC = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 100,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,
}

# Fixed colours per action name (others cycle through the default palette).
ACTION_COLORS = {
    "snapkv_half": "#1f77b4",
    "snapkv_512": "#ff7f0e",
    "recent_half": "#2ca02c",
    "snapkv_90": "#1f77b4",
    "recent_90": "#2ca02c",
    "probabilistic_half": "#9467bd",
}


#: Colours for actions without a fixed one (matplotlib's tab10, then tab20's lighter shades).
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
)


#: The parts a gap (pp) is split into, by name: colour and legend label (Figures 5 and 7, the probabilistic figure).
PART_COLORS = {
    "exposure_part": ("#4c72b0", "exposure part"),
    "branch_part": ("#dd8452", "branch-mismatch part"),
    "pre_eos_part": ("#8c8c8c", "before the first EOS"),
    "post_eos_part": ("#8172b3", "after the first EOS"),
}


def action_colors(actions) -> dict[str, str]:
    """A colour per action of one figure: the paper's actions keep theirs (:data:`ACTION_COLORS`) unless an earlier
    action of the figure has it (snapkv_half and snapkv_90 share one), the others take the first :data:`PALETTE`
    colours no other action of the figure has (cycling only beyond the palette)."""
    actions = list(dict.fromkeys(actions))
    out: dict[str, str] = {}
    for a in actions:
        if a in ACTION_COLORS and ACTION_COLORS[a] not in out.values():
            out[a] = ACTION_COLORS[a]
    free = [c for c in PALETTE if c not in set(out.values())] or list(PALETTE)
    for k, a in enumerate(a for a in actions if a not in out):
        out[a] = free[k % len(free)]
    return out


def apply_style() -> None:
    """Set kvdiv's rcParams."""
    plt.rcParams.update(RC)


def new_figure(height: float, width: float = PAGE_WIDTH):
    """A figure ``width`` × ``height`` inches under constrained layout (decorations and outside legends get their
    room; nothing overlaps an axes' neighbours)."""
    apply_style()
    fig = plt.figure(figsize=(width, height), layout="constrained")
    fig.get_layout_engine().set(w_pad=0.04, h_pad=0.04, hspace=0.04, wspace=0.03)
    return fig


def grid_shape(n: int, columns: int = MAX_COLUMNS) -> tuple[int, int]:
    """Rows and columns of ``n`` panels wrapped ``columns`` to a row."""
    cols = max(1, min(n, columns))
    return math.ceil(max(n, 1) / cols), cols


def panel_grid(parent, n: int, *, columns: int = MAX_COLUMNS, sharex: bool = False, sharey: bool = False) -> list:
    """``n`` axes in ``parent`` (a figure or subfigure), wrapped ``columns`` to a row; with ``sharey`` only the first
    panel of a row keeps its y tick labels."""
    rows, cols = grid_shape(n, columns)
    grid = parent.add_gridspec(rows, cols)
    axes: list = []
    for k in range(n):
        r, c = divmod(k, cols)
        share = {}
        if sharex and axes:
            share["sharex"] = axes[0]
        if sharey and axes:
            share["sharey"] = axes[0]
        ax = parent.add_subplot(grid[r, c], **share)
        if sharey and c > 0:
            ax.tick_params(labelleft=False)
        axes.append(ax)
    return axes


def legend_columns(labels: Sequence[str], width: float = PAGE_WIDTH, fontsize: float = 7.5) -> int:
    """How many columns of ``labels`` fit side by side in ``width`` inches (a character ≈ 0.55 em, plus the handle)."""
    widest = max((len(label) for label in labels), default=1) * 0.55 * fontsize / 72 + 0.45
    return max(1, min(len(labels), int(0.95 * width // widest)))


def legend_below(
    parent, handles: Sequence, labels: Sequence[str] | None = None, width: float = PAGE_WIDTH, ncol: int | None = None
):
    """``parent``'s legend (a figure or subfigure) below all its panels, in ``ncol`` columns (default: as many as fit
    in ``width``)."""
    labels = [h.get_label() for h in handles] if labels is None else list(labels)
    ncol = ncol or legend_columns(labels, width)
    return parent.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=False, fontsize=7.5)


def legend_beside(ax, handles: Sequence | None = None, fontsize: float = 7):
    """``ax``'s legend to the right of its data area (constrained layout narrows the axes to make room)."""
    kwargs = {"handles": handles} if handles is not None else {}
    return ax.legend(
        loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False, fontsize=fontsize, **kwargs
    )


def legend_under(ax, handles: Sequence | None = None, fontsize: float = 7, below_points: float = 30):
    """``ax``'s legend under its x tick labels and x label (``below_points`` under the data area)."""
    kwargs = {"handles": handles} if handles is not None else {}
    return ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        borderaxespad=below_points / fontsize,
        frameon=False,
        fontsize=fontsize,
        **kwargs,
    )


def save_figure(fig, pdf_path: str | Path, png_path: str | Path | None = None, dpi: int = 200) -> None:
    """Save ``fig`` as PDF (and PNG) through temporary files renamed into place; closes the figure."""
    with atomic_path(pdf_path) as tmp:
        fig.savefig(tmp, format="pdf")
    if png_path is not None:
        with atomic_path(png_path) as tmp:
            fig.savefig(tmp, format="png", dpi=dpi)
    plt.close(fig)


def category_height(n: int, row: float = ROW_INCHES) -> float:
    """Height (inches) of a panel with ``n`` categories on its y axis, ``row`` inches each."""
    return row * max(n, 1) + PANEL_MARGIN


def parts_panel(ax, categories: Sequence[str], parts: dict, total, lower, upper, *, xlabel: str) -> None:
    """Horizontal stacked bars, one row per category (the first at the top), for quantities in pp: each part of
    ``parts`` (name → values; colours :data:`PART_COLORS`) stacked away from 0 on its own sign's side, and the
    ``total`` as a black dot with its interval [``lower``, ``upper``]."""
    import numpy as np

    ax.use_sticky_edges = False  # a margin beyond a bar's base too: a dot at 0 is not cut in half
    y = np.arange(len(categories))[::-1]
    positive, negative = np.zeros(len(y)), np.zeros(len(y))
    for name, values in parts.items():
        values = np.nan_to_num(np.asarray(values, dtype=float))
        left = np.where(values >= 0, positive, negative)
        ax.barh(y, values, 0.72, left=left, color=PART_COLORS[name][0], lw=0)
        positive += np.where(values >= 0, values, 0)
        negative += np.where(values < 0, values, 0)
    total, lower, upper = (np.asarray(v, dtype=float) for v in (total, lower, upper))
    ax.errorbar(
        total,
        y,
        xerr=[np.maximum(total - lower, 0), np.maximum(upper - total, 0)],
        fmt="o",
        ms=3,
        color="black",
        capsize=2,
        lw=0.8,
    )
    ax.axvline(0, color="black", lw=0.6)
    ax.set_yticks(y, categories)
    ax.set_ylim(-0.6, len(categories) - 0.4)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(xlabel)


def parts_handles(names: Sequence[str], total: str = "gap, 95% interval") -> list:
    """Legend entries of :func:`parts_panel`: the parts ``names`` drawn, then the total."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=PART_COLORS[n][0], label=PART_COLORS[n][1]) for n in names]
    return handles + [Line2D([], [], color="black", marker="o", ms=3, lw=0.8, label=total)]


def late_early_axis(ax, y: Sequence[float], actions: Sequence[str], title: str) -> None:
    """A panel of late − early branch TV per action (action i on row ``y[i]``): a zero line, the actions as y tick
    labels, the x axis (pp) clipped to ±100."""
    ax.axvline(0, color="black", lw=0.6)
    ax.set_yticks(y, actions)
    ax.set_ylim(-0.6, len(actions) - 0.4)
    ax.grid(axis="y", visible=False)
    lo, hi = ax.get_xlim()
    ax.set_xlim(max(lo, -100), min(hi, 100))
    ax.set_xlabel("late − early branch TV (pp)")
    ax.set_title(title)
