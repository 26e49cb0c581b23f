"""The Markdown record of benchmarks/swrb_llm.py: one function per section, each building its display frame (a polars
frame of text cells) from the benchmark's tables (benchmarks/swrb_analysis.py) and writing it with kvdiv's one table
writer (:func:`kvdiv.outputs.tables.to_markdown`); :func:`render` composes them in the record's order.

Numbers show 3 significant digits (:func:`number`: ``–`` for none, ``∞``), intervals ``est [lo, hi]``
(:func:`kvdiv.outputs.report_cells.ratio_ci`), retentions as percentages, z and t signed to 2 decimals. Imported by
the benchmark as ``from swrb_llm_tables import render`` (a script's folder is on ``sys.path``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import polars as pl

from kvdiv.outputs.report_cells import ratio_ci
from kvdiv.outputs.tables import to_markdown
from kvdiv.results.report import paper_values

#: kvdiv's finite suite (benchmarks/finite_samplers.md, 24 systems, 100 000 replicates per sampler).
FINITE_SUITE = {"variance_ratio_median": 52.1, "advantage_ratio_of_means": 17.6}

#: A column of a display frame: a key of the row (its value through :func:`number`) or a function of the row.
Cell = str | Callable[[Mapping], object]


def number(value: object, digits: int = 3) -> str:
    """A cell: a float to ``digits`` significant digits (``–`` for None or NaN, ``∞`` for ±inf), text as given,
    anything else as ``str``."""
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return "∞" if math.isinf(value) else f"{value:.{digits}g}"
    return str(value)


def percent(retention: float) -> str:
    """A retention as ``90%``, ``99.9%``."""
    return f"{100 * retention:g}%"


def signed(value: float) -> str:
    """A z or t statistic: signed, 2 decimals."""
    return f"{value:+.2f}"


def interval_of(stat: str) -> Callable[[Mapping], str]:
    """The cell ``est [lo, hi]`` of ``stat`` of a summary row (columns ``stat``, ``{stat}_lo``, ``{stat}_hi``)."""
    return lambda row: ratio_ci({"estimate": row[stat], "lower": row[f"{stat}_lo"], "upper": row[f"{stat}_hi"]})


def spread(row: Mapping) -> str:
    """The smallest to the largest cell's variance ratio of a summary row."""
    return f"{number(row['variance_ratio_min'])}–{number(row['variance_ratio_max'])}"


MEDIAN = interval_of("variance_ratio_median")
POOLED = interval_of("variance_ratio_of_means")
ADVANTAGE = interval_of("advantage_ratio_of_means")


def _value(cell: Cell, row: Mapping) -> str:
    return number(cell(row) if callable(cell) else row[cell])


def _of(cost: str, cell: Cell) -> Cell:
    """``cell`` of the ``cost`` summary row joined to a row; blank where none is (the all-cells row)."""
    return lambda row: _value(cell, row[cost]) if cost in row else ""


def display(rows: Iterable[Mapping], columns: Mapping[str, Cell]) -> pl.DataFrame:
    """The display frame: one text column per entry of ``columns`` (header → :data:`Cell`), one row per row."""
    rows = list(rows)
    return pl.DataFrame(
        {name: [_value(cell, r) for r in rows] for name, cell in columns.items()},
        schema={name: pl.String for name in columns},
    )


def table(rows: Iterable[Mapping], columns: Mapping[str, Cell]) -> str:
    """:func:`display` written as Markdown by :func:`kvdiv.outputs.tables.to_markdown`."""
    return to_markdown(display(rows, columns))


def header(s: Mapping) -> str:
    """Title, command, setup, machine and definitions, from the run's ``setup``."""
    return "\n".join(
        [
            f"# Complete vs residual-branch (SWRB) sampling on {s['model']} (CPU)",
            "",
            f"`{s['command']}` (script beside this file; {s['compute_min']:.0f} min of prefills and generate calls "
            "in all).",
            "",
            f"**Setup.** {s['documents']} synthetic documents ({', '.join(s['strata'])}; {s['per_family']} per "
            "family, generated with kvdiv.documents as the workflow does; "
            f"{s['prompt_tokens_min']}–{s['prompt_tokens_max']} prompt tokens after the chat template). Actions: "
            f"{', '.join(f'`{a}`' for a in s['actions'])} (SnapKV with a {s['window_size']}-token observation "
            "window; recent = StreamingLLMPress without sink tokens, as config/config.yaml's `recent_*`; "
            f"{s['high']}). H = {s['horizon']}, window L = {s['window']}, temperature 1, δ_1 = 0, tv_atol 1e-6. "
            f"R = {s['replicates']} replicates per (document, action) in each mode, {s['batch']} per `generate` call, "
            f"streams (seed {s['seed']}, mode-batch, document, action, replicate): the modes are independent. "
            f"Bootstrap: {s['bootstrap']} cluster resamples over documents, 95 % percentile intervals; enclosure "
            f"α = {s['alpha']}.",
            "",
            f"**Machine.** {s['machine']}; {s['threads']} torch threads; shared with other helpers' jobs (1-min load "
            f"average {s['load_min']:.1f}–{s['load_max']:.1f} at the end of each batch), so wall times are noisy; "
            "both modes of a document run in one process, alternating which goes first per batch.",
            "",
            "**Definitions** (benchmarks/swrb_analysis.py; the finite study's aggregates, "
            "kvdiv.estimands.variance_cost_aggregates): variance ratio = Var(M)/Var(Z_R) per (document, action) cell "
            "(per-replicate variances, ddof 1); evaluation ratio = mean over cells of c̄_swrb/c̄_complete with c = "
            "kernel-pair evaluations as the paper counts them (H complete, H + (H − J) swrb); advantage = ratio of "
            "means, mean(Var(M)·c̄_complete)/mean(Var(Z_R)·c̄_swrb). `rows` = rows forwarded as the generation code "
            "counts them (complete 2 per step before divergence, 3 after — the third is the fixed-history row; swrb 2 "
            "per scan step + 3 per branch step); `wall` = each action's share of its generate call per replicate. A "
            "cell where neither mode saw any divergence has no ratio (left out of min/median/max; counted in the "
            "ratios of means); a cell whose complete replicates never diverged has ratio 0 (`zero-var.` counts "
            "them): the pooled variance ratio mean(Var(M))/mean(Var(Z_R)) is robust to both.",
            "",
        ]
    )


def retention_section(sums: Mapping[str, pl.DataFrame]) -> str:
    """R_H per retention and over all cells, with the ratios and advantages in rows forwarded and wall time."""
    costs = {c: {r["retention"]: r for r in sums[f"retention_{c}"].iter_rows(named=True)} for c in ("rows", "wall_s")}
    rows = [
        r | {"label": percent(r["retention"])} | {c: by[r["retention"]] for c, by in costs.items()}
        for r in sums["retention_R_H"].iter_rows(named=True)
    ]
    rows.append(sums["all"].row(0, named=True) | {"label": "all"})
    columns: dict[str, Cell] = {
        "retention": "label",
        "cells": "cells",
        "zero-var.": "complete_zero_variance_cells",
        "docs": "documents",
        "median var. ratio [95% CI]": MEDIAN,
        "range": spread,
        "pooled var. ratio [CI]": POOLED,
        "eval. ratio [CI]": interval_of("evaluation_ratio_mean"),
        "advantage (evals) [CI]": ADVANTAGE,
    }
    for cost, name in (("rows", "rows"), ("wall_s", "wall")):
        columns[f"{name} ratio"] = _of(cost, "evaluation_ratio_mean")
        columns[f"advantage ({name}) [CI]"] = _of(cost, ADVANTAGE)
    return "\n".join(["## R_H per retention", "", table(rows, columns)])


def action_section(cells: pl.DataFrame, sums: Mapping[str, pl.DataFrame]) -> str:
    """R_H per action (with its mean D and mean M over cells) and per bin of the swrb estimate of P(divergence)."""
    means = cells.group_by("action").agg(pl.col("swrb_mean_D").mean(), pl.col("complete_mean_R_H").mean())
    per_action = sums["action"].join(means, on="action", how="left", maintain_order="left")
    ratios = {
        "median var. ratio [CI]": MEDIAN,
        "range": spread,
        "pooled var. ratio [CI]": POOLED,
        "eval. ratio": "evaluation_ratio_mean",
        "advantage (evals) [CI]": ADVANTAGE,
    }
    first = {"action": "action", "mean D": "swrb_mean_D", "mean M": "complete_mean_R_H", "cells": "cells"}
    return "\n".join(
        [
            "## R_H per action and by probability of divergence",
            "",
            table(per_action.iter_rows(named=True), first | ratios),
            "Cells grouped by their swrb estimate of P(divergence within H), D̄ = mean over replicates of D = 1 − S_H:",
            "",
            table(
                sums["divergence"].iter_rows(named=True),
                {"D̄": "divergence", "cells": "cells", "docs": "documents"} | ratios,
            ),
        ]
    )


def window_section(sums: Mapping[str, pl.DataFrame], window: int) -> str:
    """R_L and B_L per retention: the variance ratio and the advantage in evaluations."""
    rows = [r | {"key": key} for key in ("R_L", "B_L") for r in sums[f"retention_{key}"].iter_rows(named=True)]
    columns = {
        "quantity": "key",
        "retention": lambda r: percent(r["retention"]),
        "cells": "cells",
        "median var. ratio [CI]": MEDIAN,
        "range": spread,
        "advantage (evals) [CI]": ADVANTAGE,
    }
    title = f"## Window and capacity (L = {window}): M_L vs Z_L (R_L), capacity vs W_L (B_L)"
    return "\n".join([title, "", table(rows, columns)])


def risk_tv_section(cells: pl.DataFrame) -> str:
    """The complete mode's Σδ/H against Z_R and M: median variance ratios per retention."""
    ratios = (
        cells.group_by("retention")
        .agg(
            pl.col("variance_ratio_risk_tv").filter(pl.col("variance_ratio_risk_tv").is_not_nan()).median(),
            (pl.col("complete_var_risk_tv") / pl.col("complete_var_R_H"))
            .filter(pl.col("complete_var_R_H") > 0)
            .median()
            .alias("vs_M"),
        )
        .sort("retention")
    )
    columns = {
        "retention": lambda r: percent(r["retention"]),
        "median Var(risk_tv)/Var(Z_R)": "variance_ratio_risk_tv",
        "median Var(risk_tv)/Var(M)": "vs_M",
    }
    return "\n".join(
        [
            "## The complete mode's own TV-integrated estimator",
            "",
            "Complete mode records δ_t along the coupled path, so (1/H) Σ_t δ_t (`risk_tv`) is also unbiased for R_H "
            "at no extra cost. Median Var(risk_tv)/Var(Z_R) per retention (below 1: the complete mode's Σδ beats "
            "SWRB):",
            "",
            table(ratios.iter_rows(named=True), columns),
        ]
    )


def agreement_section(agree: pl.DataFrame) -> str:
    """Mean agreement of the two modes per retention and quantity (pooled z, across-cells t)."""
    columns = {
        "retention": lambda r: percent(r["retention"]),
        "quantity": "key",
        "cells": "cells",
        "mean complete": "complete_mean",
        "mean swrb": "swrb_mean",
        "pooled z": lambda r: signed(r["z"]),
        "t": lambda r: signed(r["t"]),
        "t p": "p",
        "zero-var.": "complete_zero_variance_cells",
        r"agrees (\|z\| < 3)": lambda r: "yes" if r["agrees"] else "**no**",
    }
    return "\n".join(
        [
            "## Mean agreement (unbiasedness on a real model)",
            "",
            "Over the cells (documents × actions) of a retention, with d = mean_complete − mean_swrb per cell: pooled "
            "z = Σ d / √(Σ (se_c² + se_s²)) with within-cell standard errors (criterion |z| < 3), and the "
            "across-cells t = mean(d)/(sd(d)/√n) on n − 1 df, which needs no within-cell se (a complete cell whose R "
            "replicates never diverged has se 0, an underestimate; the t in turn rejects too often when cell "
            "variances differ widely). `zero-var.`: cells whose complete replicates all had the same value. P_div: "
            "P(τ ≤ H), estimated by 1{τ ≤ H} (complete) and D (swrb).",
            "",
            table(agree.iter_rows(named=True), columns),
        ]
    )


def enclosure_section(enclosures: pl.DataFrame, alpha: float, window: int) -> str:
    """The (1 − α) enclosure of R_H per action beside the full-horizon estimates of both modes."""
    inside = {True: "yes", False: "no", None: "–"}
    columns = {
        "action": "action",
        "docs": "documents",
        "Z_L mean": "swrb_R_L",
        "W_L mean": "swrb_B_L",
        "enclosure": lambda r: f"[{r['enclosure_lower']:.3f}, {r['enclosure_upper']:.3f}]",
        "Z_R mean": "swrb_R_H",
        "M mean": "complete_R_H",
        "M inside": lambda r: inside[r["complete_R_H_inside"]],
    }
    return "\n".join(
        [
            f"## (1 − α) enclosure of R_H per action from sampled profiles (α = {alpha}, L = {window})",
            "",
            "[LCB(Z_L), UCB(Z_L + W_L)] at α/2 each over per-document means of the swrb replicates (paper §4.3; "
            "kvdiv.estimands.enclosure): an enclosure of the document-average R_H from a depth-L window. Beside it "
            "the swrb and complete estimates of R_H from the full horizon.",
            "",
            table(enclosures.iter_rows(named=True), columns),
        ]
    )


def variance_check_section(check: pl.DataFrame | None) -> str:
    """Var(M) estimated from swrb draws (the report's method) against the complete mode's measured Var(M)."""
    columns = {
        "retention": lambda r: percent(r["retention"]),
        "cells": "cells",
        "docs": "documents",
        "mean measured Var(M)": "measured",
        "mean estimated Var(M)": "estimated",
        "estimated/measured [CI]": lambda r: ratio_ci(
            {"estimate": r["ratio"], "lower": r["ratio_lower"], "upper": r["ratio_upper"]}
        ),
        "mean Var(Z_R)": "swrb",
        "pooled ratio, measured Var(M)": "pooled_ratio_measured",
        "pooled ratio, estimated Var(M)": "pooled_ratio_estimated",
    }
    body = (
        table(check.iter_rows(named=True), columns)
        if check is not None and check.height
        else "_No batch with `M_path`._\n"
    )
    return "\n".join(
        [
            "## The complete coupling's Var(M) estimated from swrb draws (the report's method)",
            "",
            "A study in `mode: swrb` has no complete draws; the report (item `swrb`) estimates Var(M) from the swrb "
            "rows as mean(D·M_path²) − (Z̄² − s²/n) (kvdiv.analysis.swrb_comparison.study_cells). Here, per "
            "retention, the mean over cells of that estimate beside the complete mode's measured Var(M) of the same "
            "cells, and their ratio (sums over a document's cells, cluster bootstrap over documents; 1 = right). Only "
            "batches run with `M_path` recorded count.",
            "",
            body,
        ]
    )


def finite_state_section(everything: Mapping, model: str, paper: Mapping) -> str:
    """The all-cells aggregates beside the paper's 24 finite systems and kvdiv's finite suite."""
    vr = paper.get("variance_ratio_naive_over_swrb", {})
    rows = [
        {
            "q": "variance ratio, median",
            "paper": vr.get("median"),
            "suite": FINITE_SUITE["variance_ratio_median"],
            "ours": everything["variance_ratio_median"],
        },
        {
            "q": "variance ratio, range",
            "paper": f"{number(vr.get('min'))}–{number(vr.get('max'))}",
            "suite": "–",
            "ours": spread(everything),
        },
        {
            "q": "evaluations swrb/complete",
            "paper": paper.get("mean_pair_evaluations_ratio"),
            "suite": "–",
            "ours": everything["evaluation_ratio_mean"],
        },
        {
            "q": "variance–cost advantage (ratio of means)",
            "paper": paper.get("variance_cost_advantage_ratio_of_means"),
            "suite": FINITE_SUITE["advantage_ratio_of_means"],
            "ours": everything["advantage_ratio_of_means"],
        },
    ]
    columns = {"quantity": "q", "paper, 24 finite systems": "paper", "kvdiv finite suite": "suite"}
    return "\n".join(
        ["## Beside the finite-state figures", "", table(rows, columns | {f"{model} (all cells)": "ours"})]
    )


def cells_section(cells: pl.DataFrame) -> str:
    """Every (document, action) cell: D̄, both modes' means and variances of R_H, the variance and cost ratios, z."""
    columns = {
        "document": "document",
        "action": "action",
        "D̄": "swrb_mean_D",
        "mean M": "complete_mean_R_H",
        "mean Z_R": "swrb_mean_R_H",
        "Var(M)": "complete_var_R_H",
        "Var(Z_R)": "swrb_var_R_H",
        "var. ratio": "variance_ratio_R_H",
        "eval. ratio": "evaluation_ratio",
        "rows ratio": "rows_ratio",
        "wall ratio": "wall_ratio",
        "z": lambda r: signed(r["z_R_H"]),
    }
    rows = cells.sort("document", "retention", "action").iter_rows(named=True)
    return "\n".join(["## Per (document, action) cells", "", table(rows, columns)])


def render(tables: Mapping, setup: Mapping) -> str:
    """The recorded Markdown (every number computed here; prose about the regime is added by hand below the
    generated part): the sections in order, from ``tables`` of :func:`swrb_analysis.benchmark_tables` and the run's
    ``setup`` (the keys :func:`header` reads)."""
    cells, sums = tables["cells"], tables["summaries"]
    return "\n".join(
        [
            header(setup),
            retention_section(sums),
            action_section(cells, sums),
            window_section(sums, setup["window"]),
            risk_tv_section(cells),
            agreement_section(tables["agreement"]),
            enclosure_section(tables["enclosures"], setup["alpha"], setup["window"]),
            variance_check_section(tables["variance_check"]),
            finite_state_section(
                sums["all"].row(0, named=True), setup["model"], paper_values().get("finite_state", {})
            ),
            cells_section(cells),
        ]
    )
