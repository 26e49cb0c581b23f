"""The divergence leaderboard of one model as CSV (numbers), Markdown (formatted) and a figure (PDF + PNG).

Its numbers are :func:`kvdiv.analysis.leaderboard.leaderboard_table`'s (sorted by R_H); each action is described by
its press (a wrapper as ``Wrapper(Inner)``) and its retention 1 − compression_ratio (of the innermost press that
has one), from the study's action specs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from kvdiv.outputs.style import apply_style, save_figure
from kvdiv.outputs.tables import interval, write_table

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


def plot_leaderboard(table: pl.DataFrame, pdf: str | Path, png: str | Path, *, dpi: int = 200) -> None:
    """One row per action (sorted by R_H, best at the top); panels: R_H, P(τ ≤ H), mean τ among diverged and
    accuracy of y, each with its interval."""
    apply_style()
    h = max(_steps(table))
    panels = [
        ("risk", "R_H (%)", 100),
        (f"diverged_by_{h}", f"P(τ ≤ {h}) (%)", 100),
        ("mean_tau_diverged", "mean τ among diverged", 1),
        ("accuracy_y", "accuracy of y (%)", 100),
    ]
    labels = [
        f"{a} ({p})" for a, p in zip(table["action"], table["press"] if "press" in table.columns else table["action"])
    ]
    n = len(labels)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(3.0 * len(panels) + 2.5, 0.28 * n + 1.2), sharey=True, squeeze=False
    )
    y = np.arange(n)[::-1]
    kept = table["retention"].to_list() if "retention" in table.columns else [None] * n
    colors = ["#1f77b4" if r is not None and r >= 0.75 else "#d62728" if r is not None else "#7f7f7f" for r in kept]
    for ax, (name, title, scale) in zip(axes[0], panels):
        est = table[name].cast(pl.Float64).fill_null(np.nan).to_numpy() * scale
        lo = table[f"{name}_lower"].cast(pl.Float64).fill_null(np.nan).to_numpy() * scale
        hi = table[f"{name}_upper"].cast(pl.Float64).fill_null(np.nan).to_numpy() * scale
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
        ax.set_title(title)
    axes[0][0].set_yticks(y, labels)
    axes[0][0].set_ylim(-0.7, n - 0.3)
    fig.suptitle(
        f"Divergence leaderboard: {table['model'][0]} (sorted by R_H; blue: retention ≥ 75%, red: below)",
        y=1.0,
        va="bottom",
    )
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
    (:func:`kvdiv.outputs.tables.write_table`; ``caption``: the item's, :mod:`kvdiv.analysis.items`), the figure by
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
