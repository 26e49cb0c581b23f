"""Where the chains end (do the answers outlast H?): per model and action, the shares of pairs whose x and
whose y emitted EOS within H, the share that reach H with neither ended (95% cluster-bootstrap interval over
documents), the quartiles of the first-EOS steps over all chains (its numbers:
:mod:`kvdiv.analysis.endings`, from the metrics' ``first_eos_x``/``first_eos_y``); per stratum too, and the shares still
running by step, drawn as survival curves; and the full-cache chains x counted once each (``reference``: shared by
all actions with ``reference_chain: shared``), the share that reaches H without EOS. Complete-mode studies only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kvdiv.analysis.endings import eos_summary, reference_summary, running_by_step
from kvdiv.analysis.inputs import stratum_key
from kvdiv.outputs.report_cells import SectionContext
from kvdiv.outputs.tables import interval, to_markdown
from kvdiv.results.base import Plot, Result, Table


def running_table(metrics: Any, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """Per model × action and step t = 0..H: the shares of pairs whose x, y and both are still running (no bootstrap:
    the curves the figure draws)."""
    return running_by_step(metrics, ("model", "action"))


def _quartiles(row: Mapping[str, Any], prefix: str) -> str:
    """``q25 / median / q75`` of a first-EOS step over all chains; ``> H`` where a quartile is not reached by H."""
    horizon = row["horizon"]
    return " / ".join(
        f"{v:.0f}" if (v := row[f"{prefix}{q}_step"]) is not None else f"> {horizon}" for q in ("q25", "median", "q75")
    )


def endings_frame(table: pl.DataFrame) -> pl.DataFrame:
    """Display frame: one row per model (× stratum) × action, percent with intervals, first-EOS quartiles."""
    if table.is_empty():
        raise ValueError("the endings table has no rows: the study has no pairs")
    by = [c for c in ("model", "stratum", "action") if c in table.columns]
    rows = sorted(
        table.iter_rows(named=True),
        key=lambda r: tuple(stratum_key(r[c]) if c == "stratum" else r[c] for c in by),
    )
    return pl.DataFrame(
        [
            {
                **{c: r[c] for c in by},
                "documents": r["n_documents"],
                "pairs": r["n_pairs"],
                "x ended (%)": f"{100 * r['x_ended']:.1f}",
                "y ended (%)": f"{100 * r['y_ended']:.1f}",
                "reach H, neither ended (%)": interval(r["neither_ended"], r["neither_lower"], r["neither_upper"], 1),
                "x first EOS q25 / median / q75": _quartiles(r, "x_"),
                "y first EOS q25 / median / q75": _quartiles(r, "y_"),
            }
            for r in rows
        ]
    )


def reference_frame(table: pl.DataFrame) -> pl.DataFrame:
    """Display frame of the full-cache chains: one row per model (× stratum), each chain counted once."""
    by = [c for c in ("model", "stratum") if c in table.columns]
    rows = sorted(
        table.iter_rows(named=True), key=lambda r: tuple(stratum_key(r[c]) if c == "stratum" else r[c] for c in by)
    )
    return pl.DataFrame(
        [
            {
                **{c: r[c] for c in by},
                "documents": r["n_documents"],
                "full-cache chains": r["n_chains"],
                "reach H without EOS (%)": interval(r["reached"], r["reached_lower"], r["reached_upper"], 1),
                "ended within H": r["n_ended"],
                "first EOS q25 / median / q75": _quartiles(r, ""),
            }
            for r in rows
        ]
    )


def draw(frames: Mapping[str, pl.DataFrame], pdf: str | Path, png: str | Path, *, dpi: int) -> None:
    """Survival curves of the first EOS: per model a panel, per action the share of pairs with both chains running
    (solid) and the full-cache chain x running (dashed; drawn once in black when every action has the same x, as with
    ``reference_chain: shared``) after step t."""
    from matplotlib.lines import Line2D

    from kvdiv.outputs.style import action_colors, grid_shape, legend_below, new_figure, panel_grid, save_figure

    running = frames["running"]
    models = sorted(running["model"].unique().to_list())
    actions = sorted(running["action"].unique().to_list())
    colors = action_colors(actions)
    rows, _ = grid_shape(len(models))
    fig = new_figure(2.4 * rows + 0.9 + 0.18 * (len(actions) // 3))
    axes = panel_grid(fig, len(models), sharey=True)
    for ax, model in zip(axes, models):
        sub = running.filter(pl.col("model") == model)
        curves = {a: sub.filter(pl.col("action") == a).sort("step") for a in actions}
        curves = {a: c for a, c in curves.items() if c.height}
        x_curves = [c["x_running"].to_numpy() for c in curves.values()]
        one_x = all(x.shape == x_curves[0].shape and np.array_equal(x, x_curves[0]) for x in x_curves)
        for action, rows_a in curves.items():
            ax.plot(rows_a["step"], 100 * rows_a["both_running"], color=colors[action], drawstyle="steps-post")
            if not one_x:
                ax.plot(
                    rows_a["step"],
                    100 * rows_a["x_running"],
                    color=colors[action],
                    ls="--",
                    lw=0.9,
                    drawstyle="steps-post",
                )
        if one_x and curves:
            first = next(iter(curves.values()))
            ax.plot(first["step"], 100 * first["x_running"], color="black", ls="--", lw=1.0, drawstyle="steps-post")
        ax.set_title(model, fontsize=8)
        ax.set_xlabel("step t")
        ax.set_ylim(0, 102)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("pairs running (%)")
    handles = [Line2D([], [], color=colors[a], label=a) for a in actions]
    handles += [
        Line2D([], [], color="0.3", label="x and y running"),
        Line2D([], [], color="0.3", linestyle="--", label="x running (black: one x for all actions)"),
    ]
    legend_below(fig, handles)
    save_figure(fig, pdf, png, dpi=dpi)


def section(frames: Mapping[str, pl.DataFrame], setting: Mapping, paper: Mapping, context: SectionContext) -> list[str]:
    """The report's section "Where the chains end": per model and action the shares ended and reaching H, then the
    per-stratum table."""
    lines = [
        context.heading(),
        "",
        "Late depth windows and the late position blocks measure eviction, not answer length, only where the answers "
        "outlast them: the share of pairs (x, y) that reach H with neither chain ended, with 95% cluster-bootstrap "
        "intervals over documents, and the "
        "first-EOS steps (quartiles over all chains; > H: not reached within H). Per model and action:",
        "",
    ]
    table = frames.get("numbers")
    if table is None or table.is_empty():
        return lines + ["_The endings table was not built._", ""]
    lines += to_markdown(endings_frame(table)).splitlines()
    reference = frames.get("reference")
    if reference is not None and not reference.is_empty():
        lines += [
            "",
            "The full-cache chains x, each counted once (with `reference_chain: shared` every action of a document "
            "and replicate has the same x, repeated in the rows above): the share that reaches H without EOS, with "
            "its 95% interval over documents, and the first-EOS quartiles over all of them (> H: not reached).",
            "",
            *to_markdown(reference_frame(reference)).splitlines(),
        ]
    strata = frames.get("strata")
    if strata is not None and not strata.is_empty():
        lines += ["", "Per stratum:", "", *to_markdown(endings_frame(strata)).splitlines()]
    if context.figure:
        lines += ["", f"![{context.item.label}]({context.figure})"]
    return lines + [""]


RESULT = Result(
    name="endings",
    kind="figure",
    label="Endings",
    title="Endings: do the answers outlast H?",
    tables={
        "numbers": Table(eos_summary, fixed={"by": ["model", "action"]}),
        "reference": Table(reference_summary, fixed={"by": ["model"]}),
        "strata": Table(eos_summary, fixed={"by": ["model", "stratum", "action"]}),
        "running": Table(running_table),
    },
    plot=Plot(draw),
    display=endings_frame,
    caption="Per model × stratum × action: the shares of pairs whose full-cache chain x and evicted chain y emitted "
    "EOS within H, the share reaching H with neither ended (95% cluster-bootstrap interval over documents), and the "
    "quartiles of the first-EOS step over all chains (> H: not reached within H).",
    section=section,
    study="retention50",
)
