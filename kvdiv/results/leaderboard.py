"""The divergence leaderboard of one model as CSV (numbers), Markdown (formatted) and a figure (PDF + PNG).

Its numbers are :func:`kvdiv.analysis.leaderboard.leaderboard_table`'s (sorted by R_H); each action is described by
its press (a wrapper as ``Wrapper(Inner)``) and its retention 1 − compression_ratio (of the innermost press that
has one), from the study's action specs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import re
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.ticker import MaxNLocator

from kvdiv.outputs.style import legend_below, new_figure, panel_grid, save_figure
from kvdiv.outputs.tables import interval, write_table
from kvdiv.analysis.leaderboard import leaderboard_table
from kvdiv.results.base import Plot, Result, Table

#: Display name and unit of each leaderboard statistic ("pct": percent of a proportion; "step": a step count).
COLUMNS = {
    "mean_tau_diverged": ("mean τ among diverged", "step"),
    "risk": ("R_H (%)", "pct"),
    "exposure": ("exposure E_H (%)", "pct"),
    "mismatch_rate": ("mismatch rate C (%)", "pct"),
    "accuracy_y": ("accuracy y (%)", "pct"),
    "accuracy_x": ("accuracy x (%)", "pct"),
}


#: Arguments of a decoding press shown in its name (how much it keeps, how often it cuts).
DECODING_ARGUMENTS = ("target_size", "target_compression_ratio", "compression_interval")


def press_name(spec: Mapping[str, Any]) -> str:
    """``SnapKVPress``; a wrapper ``AdaKVPress(SnapKVPress)``; a decoding press with its budget,
    ``DecodingPress(KnormPress; target_size 512, compression_interval 32)``; ``PrefillDecodingPress(SnapKVPress,
    DecodingPress(...))``."""
    parts = [
        press_name(spec[key]) for key in ("prefilling_press", "decoding_press") if isinstance(spec.get(key), Mapping)
    ]
    inner = spec.get("wraps", spec.get("base_press"))
    if isinstance(inner, Mapping):
        parts.append(press_name(inner))
    settings = ", ".join(f"{key} {spec[key]}" for key in DECODING_ARGUMENTS if key in spec)
    inside = ", ".join(parts) + (f"; {settings}" if settings else "")
    return f"{spec['press']}({inside})" if inside else str(spec["press"])


def retention(spec: Mapping[str, Any]) -> float | None:
    """1 − compression_ratio of the action (its own, else its wrapped press's, else a PrefillDecodingPress's prefill
    press's; a CompressionRatioDecodingPress's 1 − target_compression_ratio); None when it has none (a DecodingPress
    keeps a number of entries, ``target_size``, shown in its name)."""
    for key in ("compression_ratio", "target_compression_ratio"):
        if key in spec:
            return 1.0 - float(spec[key])
    if spec.get("press") == "DecodingPress" or "target_size" in spec:  # its scorer's own ratio is overridden
        return None
    for key in ("wraps", "prefilling_press"):
        if isinstance(spec.get(key), Mapping):
            return retention(spec[key])
    return None


def describe_actions(table: pl.DataFrame, actions: Mapping[str, Mapping[str, Any]]) -> pl.DataFrame:
    """``table`` with columns ``press`` and ``retention`` after ``action`` (from the action specs)."""
    press = [press_name(actions[a]) if a in actions else "?" for a in table["action"]]
    kept = [retention(actions[a]) if a in actions else None for a in table["action"]]
    out = table.with_columns(pl.Series("press", press, dtype=pl.Utf8), pl.Series("retention", kept, dtype=pl.Float64))
    first = ["model", "rank", "action", "press", "retention", "n_documents"]
    return out.select(*first, pl.exclude(first))


def _steps(table: pl.DataFrame) -> list[int]:
    return sorted(
        int(c.removeprefix("diverged_by_"))
        for c in table.columns
        if c.startswith("diverged_by_") and not c.endswith(("_lower", "_upper"))
    )


def display_frame(table: pl.DataFrame) -> pl.DataFrame:
    """The formatted leaderboard: one row per action (percent and steps with intervals)."""

    def cell(row: dict, name: str, unit: str) -> str:
        if unit == "pct":
            return interval(row[name], row[f"{name}_lower"], row[f"{name}_upper"], 1)
        vals = [row[name], row[f"{name}_lower"], row[f"{name}_upper"]]
        f = [("–" if v is None or v != v else f"{v:.1f}") for v in vals]
        return f"{f[0]} [{f[1]}, {f[2]}]"

    columns = {f"diverged_by_{h}": (f"diverged by step {h} (%)", "pct") for h in _steps(table)} | COLUMNS
    rows = []
    for row in table.iter_rows(named=True):
        out = {
            "rank": row["rank"],
            "action": row["action"],
            "press": row.get("press", ""),
            "retention": "–" if row.get("retention") is None else f"{100 * row['retention']:.0f}%",
            "documents": row["n_documents"],
        }
        out.update({label: cell(row, name, unit) for name, (label, unit) in columns.items()})
        rows.append(out)
    return pl.DataFrame(rows)


def read_markdown(path: str | Path, model: str) -> pl.DataFrame:
    """The numbers of a leaderboard Markdown file (:func:`display_frame` under its caption) of ``model``, as
    :func:`describe_actions` returns them, to the digits printed (0.1 pp, 0.1 step): to redraw a figure where only
    the Markdown was kept (docs/decoding-smollm2)."""
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    if len(lines) < 3:
        raise ValueError(f"{path}: no Markdown table")
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    names = {f"diverged by step {h} (%)": (f"diverged_by_{h}", "pct") for h in re.findall(r"by step (\d+)", lines[0])}
    names |= {label: (name, unit) for name, (label, unit) in COLUMNS.items()}
    number = r"(–|-?[\d.]+)"

    def value(text: str, scale: float) -> float | None:
        return None if text == "–" else float(text) / scale

    rows = []
    for line in lines[2:]:
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|"))))
        kept = cells["retention"]
        row = {
            "model": model,
            "rank": int(cells["rank"]),
            "action": cells["action"],
            "press": cells["press"],
            "retention": None if kept == "–" else float(kept.rstrip("%")) / 100,
            "n_documents": int(cells["documents"]),
        }
        for label, (name, unit) in names.items():
            match = re.fullmatch(rf"{number} \[{number}, {number}\]", cells.get(label, ""))
            if match is None:
                raise ValueError(f"{path}: column {label!r} of {cells['action']!r} is not 'estimate [lower, upper]'")
            scale = 100 if unit == "pct" else 1
            for suffix, text in zip(("", "_lower", "_upper"), match.groups()):
                row[name + suffix] = value(text, scale)
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


#: Retention (1 − compression ratio) at or above which an action's markers are drawn in the first colour.
RETENTION_THRESHOLD = 0.75
#: Marker colour of each retention class: (colour, its name, what it means). The figure's legend is written from
#: these, so its key always matches the markers.
RETENTION_CLASSES = {
    "high": ("#1f77b4", "blue", f"retention ≥ {RETENTION_THRESHOLD:.0%}"),
    "low": ("#d62728", "red", f"retention < {RETENTION_THRESHOLD:.0%}"),
    "none": ("#7f7f7f", "grey", "no fixed retention (a decoding press: its budget is in its name)"),
}
#: Characters per line of an action's press description under its name.
LABEL_WIDTH = 44


def retention_class(kept: float | None) -> str:
    """The :data:`RETENTION_CLASSES` key of an action's retention (None: the action keeps no fixed fraction)."""
    if kept is None or kept != kept:
        return "none"
    return "high" if kept >= RETENTION_THRESHOLD else "low"


def action_label(action: str, press: str | None) -> str:
    """An action's row label: its name, then its press description wrapped to :data:`LABEL_WIDTH` characters."""
    if not press or press == action:
        return action
    unbroken = re.sub(r"(\w) (\d)", "\\1\u00a0\\2", press)  # "target_size 512" stays on one line
    return "\n".join([action, *textwrap.wrap(unbroken, LABEL_WIDTH, break_on_hyphens=False)])


def plot_leaderboard(table: pl.DataFrame, pdf: str | Path, png: str | Path, *, dpi: int = 200) -> None:
    """One row per action (sorted by R_H, best at the top), labelled with its press; panels: R_H, P(τ ≤ H), mean τ
    among diverged and accuracy of y, each with its interval; marker colours by retention
    (:data:`RETENTION_CLASSES`, keyed in the legend below)."""
    from matplotlib.lines import Line2D

    h = max(_steps(table))
    panels = [
        ("risk", "R_H (%)", 100),
        (f"diverged_by_{h}", f"P(τ ≤ {h}) (%)", 100),
        ("mean_tau_diverged", "mean τ\namong diverged", 1),
        ("accuracy_y", "accuracy\nof y (%)", 100),
    ]
    presses = table["press"].to_list() if "press" in table.columns else [None] * table.height
    labels = [action_label(a, p) for a, p in zip(table["action"], presses)]
    lines = np.array([label.count("\n") + 1 for label in labels])
    heights = 0.13 * lines + 0.1  # inches per row: its label's lines
    y = -(np.cumsum(heights) - heights / 2)
    kept = table["retention"].to_list() if "retention" in table.columns else [None] * table.height
    classes = [retention_class(r) for r in kept]
    colors = [RETENTION_CLASSES[c][0] for c in classes]
    fig = new_figure(heights.sum() + 1.5)
    axes = panel_grid(fig, len(panels), columns=len(panels), sharey=True)
    for ax, (name, title, scale) in zip(axes, panels):
        est, lo, hi = (
            table[col].cast(pl.Float64).fill_null(np.nan).to_numpy() * scale
            for col in (name, f"{name}_lower", f"{name}_upper")
        )
        ax.errorbar(
            est,
            y,
            xerr=[np.maximum(est - lo, 0), np.maximum(hi - est, 0)],
            fmt="none",
            ecolor="#999999",
            capsize=2,
            lw=1,
        )
        ax.scatter(est, y, c=colors, s=14, zorder=3)
        ax.set_title(title, fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.grid(axis="y", visible=False)
    axes[0].set_yticks(y, labels, fontsize=7)
    axes[0].set_ylim(y[-1] - heights[-1] / 2, 0)
    present = [c for c in RETENTION_CLASSES if c in classes]
    handles = [
        Line2D([], [], ls="", marker="o", ms=4, color=RETENTION_CLASSES[c][0], label=RETENTION_CLASSES[c][2])
        for c in present
    ]
    legend_below(fig, handles)
    fig.suptitle(f"Divergence leaderboard: {table['model'][0]}, sorted by R_H (lowest first)", fontsize=10)
    save_figure(fig, pdf, png, dpi=dpi)


def write_leaderboard(
    table: pl.DataFrame,
    actions: Mapping[str, Mapping[str, Any]],
    paths: Sequence[str | Path],
    *,
    caption: str,
    dpi: int = 200,
) -> pl.DataFrame:
    """Write one model's leaderboard to ``paths`` = (csv, md, pdf, png): the CSV and Markdown by the one table writer
    (:func:`kvdiv.outputs.tables.write_table`; ``caption``: the result's), the figure by
    :func:`plot_leaderboard`. Returns the numbers written to the CSV."""
    if table.is_empty():
        raise ValueError("the leaderboard has no rows: the study's metrics hold no action")
    models = table["model"].unique().to_list()
    if len(models) != 1:
        raise ValueError(f"write_leaderboard draws one model's leaderboard, got {sorted(models)}")
    numbers = describe_actions(table, actions)
    csv, md, pdf, png = (Path(p) for p in paths)
    write_table(numbers, display_frame(numbers), (csv, md), caption)
    plot_leaderboard(numbers, pdf, png, dpi=dpi)
    return numbers


RESULT = Result(
    name="leaderboard",
    kind="leaderboard",
    label="Divergence leaderboard",
    title="Divergence leaderboard: which action keeps the full-cache continuation longest?",
    tables={"numbers": Table(leaderboard_table, {"steps": "steps"})},
    plot=Plot(plot_leaderboard),
    display=display_frame,
    caption="Divergence leaderboard: every action ranked by R_H (the mean share of the H steps at which the "
    "evicted continuation y differs from the full-cache one x; lowest first), with the divergence fraction "
    "P(τ ≤ h) by "
    "step, the mean first-divergence step among diverged pairs, the exposure E_H, the post-divergence mismatch "
    "rate C = Π_H/E_H and the task accuracy of y and x (the document's own scorer), with 95% cluster-bootstrap "
    "intervals over documents.",
    config="leaderboard",
)
