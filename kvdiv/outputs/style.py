"""The one matplotlib style every kvdiv figure uses, and a helper that saves PDF + PNG atomically."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from kvdiv.io import atomic_path  # noqa: E402

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


def action_colors(actions) -> dict[str, str]:
    """A colour per action of one figure: the paper's actions keep theirs (:data:`ACTION_COLORS`), the others take
    the first :data:`PALETTE` colours no other action of the figure has (cycling only beyond the palette)."""
    actions = list(dict.fromkeys(actions))
    out = {a: ACTION_COLORS[a] for a in actions if a in ACTION_COLORS}
    free = [c for c in PALETTE if c not in set(out.values())] or list(PALETTE)
    for k, a in enumerate(a for a in actions if a not in out):
        out[a] = free[k % len(free)]
    return out


def apply_style() -> None:
    """Set kvdiv's rcParams."""
    plt.rcParams.update(RC)


def save_figure(fig, pdf_path: str | Path, png_path: str | Path | None = None, dpi: int = 200) -> None:
    """Save ``fig`` as PDF (and PNG) through temporary files renamed into place; closes the figure."""
    with atomic_path(pdf_path) as tmp:
        fig.savefig(tmp, format="pdf")
    if png_path is not None:
        with atomic_path(png_path) as tmp:
            fig.savefig(tmp, format="png", dpi=dpi)
    plt.close(fig)
