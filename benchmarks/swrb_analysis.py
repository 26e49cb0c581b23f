"""The complete-vs-swrb benchmark's tables (benchmarks/swrb_llm.py): both modes' replicates per (document, action)
cell of :func:`kvdiv.metrics.trajectory_replicates` (:func:`comparison_table`), their agreement
(:func:`agreement_table`), the enclosure of R_H per action (:func:`action_enclosures`), the check of the
complete coupling's Var(M) estimated from swrb draws (:func:`complete_variance_check`), the summaries the record prints
(:func:`summaries`) and all of them from the replicates at once (:func:`benchmark_tables`). The study's own analysis
(the report's section SWRB) is :mod:`kvdiv.analysis.swrb_comparison`; the mathematics:
docs/estimators.md#on-a-real-model. Imported by the benchmark as ``from swrb_analysis import ...`` (a script's folder
is on ``sys.path``) and by tests/test_swrb_analysis_benchmark.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import polars as pl
from scipy.stats import t as student_t

from kvdiv.analysis.bootstrap import cluster_bootstrap, stat_seed
from kvdiv.analysis.swrb_comparison import COSTS, ratio, retention_summary, study_cells
from kvdiv.estimands import enclosure

MODES = ("complete", "swrb")
#: Quantities estimated per replicate in both modes: the mismatch risk by H (R_H), in the window (R_L), the capacity
#: (B_L).
KEYS = ("R_H", "R_L", "B_L")


def _moments(values: np.ndarray) -> tuple[float, float, float]:
    n = len(values)
    mean = float(values.mean())
    var = float(values.var(ddof=1)) if n > 1 else math.nan
    return mean, var, math.sqrt(var / n) if n > 1 else math.nan


def comparison_table(
    replicates: pl.DataFrame, retention: Mapping[str, float] | None = None, keys: Sequence[str] = KEYS
) -> pl.DataFrame:
    """One row per (document, action) from :func:`kvdiv.metrics.trajectory_replicates` rows of both modes (module
    docstring).

    Columns: document, action, retention (from ``retention``: action → kept fraction; null if absent),
    replicates_complete/_swrb; for K in ``keys`` (R_H, R_L, B_L and any other column estimated by both modes, such
    as :func:`with_divergence`'s ``P_div``): ``{mode}_mean_K``, ``{mode}_var_K``, ``{mode}_se_K``,
    ``variance_ratio_K`` and ``z_K``; ``complete_var_risk_tv`` and ``variance_ratio_risk_tv`` (the
    complete mode's TV-integrated estimator against Z_R); mean costs ``{mode}_{cost}`` for pair_evaluations,
    rows, wall_s, the ratios ``evaluation_ratio``, ``rows_ratio``, ``wall_ratio`` (swrb/complete) and
    ``advantage``, ``advantage_rows``, ``advantage_wall`` (variance ratio of R_H / the cost ratio).
    """
    keys = list(dict.fromkeys(["R_H", *keys]))
    missing = [c for c in ("document", "action", "mode", *keys, "risk_tv", *COSTS) if c not in replicates.columns]
    if missing:
        raise KeyError(f"replicate frame lacks columns {missing}")
    rows = []
    for (document, action), cell in replicates.group_by(["document", "action"], maintain_order=True):
        by_mode = {m: cell.filter(pl.col("mode") == m) for m in MODES}
        for m, part in by_mode.items():
            if part.height < 2:
                raise ValueError(f"document {document!r}, action {action!r}: {part.height} {m} replicates (need >= 2)")
        row: dict[str, object] = {
            "document": document,
            "action": action,
            "retention": None if retention is None else retention.get(action),
            "replicates_complete": by_mode["complete"].height,
            "replicates_swrb": by_mode["swrb"].height,
        }
        for key in keys:
            for m in MODES:
                mean, var, se = _moments(by_mode[m][key].to_numpy().astype(float))
                row[f"{m}_mean_{key}"], row[f"{m}_var_{key}"], row[f"{m}_se_{key}"] = mean, var, se
            row[f"variance_ratio_{key}"] = ratio(row[f"complete_var_{key}"], row[f"swrb_var_{key}"])
            se = math.hypot(row[f"complete_se_{key}"], row[f"swrb_se_{key}"])
            diff = row[f"complete_mean_{key}"] - row[f"swrb_mean_{key}"]
            row[f"z_{key}"] = diff / se if se > 0 else (0.0 if diff == 0 else math.copysign(math.inf, diff))
        _, row["complete_var_risk_tv"], _ = _moments(by_mode["complete"]["risk_tv"].to_numpy().astype(float))
        row["variance_ratio_risk_tv"] = ratio(row["complete_var_risk_tv"], row["swrb_var_R_H"])
        for cost, name in COSTS.items():
            for m in MODES:
                row[f"{m}_{cost}"] = float(by_mode[m][cost].mean())
            row[f"{name}_ratio"] = ratio(row[f"swrb_{cost}"], row[f"complete_{cost}"])
            suffix = "" if name == "evaluation" else f"_{name}"
            row[f"advantage{suffix}"] = ratio(row["variance_ratio_R_H"], row[f"{name}_ratio"])
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def with_divergence(replicates: pl.DataFrame) -> pl.DataFrame:
    """Add ``P_div``, each mode's per-replicate estimate of P(τ ≤ H): 1{τ ≤ H} (complete), D (swrb)."""
    return replicates.with_columns(
        pl.when(pl.col("mode") == "complete")
        .then(pl.col("tau").is_not_null().cast(pl.Float64))
        .otherwise(pl.col("D"))
        .alias("P_div")
    )


def pooled_z(mean_diff: np.ndarray, se: np.ndarray) -> float:
    """Pooled z of cells' mean differences with their within-cell standard errors: Σ diff / √(Σ se²)."""
    diff, se = np.asarray(mean_diff, float), np.asarray(se, float)
    total = math.sqrt(float(np.sum(se**2)))
    return float(diff.sum() / total) if total > 0 else (0.0 if not diff.any() else math.copysign(math.inf, diff.sum()))


def across_cells_t(mean_diff: np.ndarray) -> tuple[float, float]:
    """t = mean(d)/(sd(d)/√n) over independent cells and its two-sided p on n − 1 df.

    With independent differences d_i of mean 0 and any variances σ_i², E[sd²] = Σσ_i²/n, so sd²/n is an
    unbiased estimate of Var(mean d) that needs no within-cell standard error (those are 0 when a rare
    divergence never showed in a cell's R complete replicates).
    """
    d = np.asarray(mean_diff, float)
    n = d.size
    if n < 2:
        return math.nan, math.nan
    sd = float(d.std(ddof=1))
    if sd == 0:
        return (0.0, 1.0) if not d.any() else (math.copysign(math.inf, d.mean()), 0.0)
    t = float(d.mean() / (sd / math.sqrt(n)))
    return t, float(2 * student_t.sf(abs(t), n - 1))


def agreement_table(
    table: pl.DataFrame, by: Sequence[str] | None = ("retention",), keys: Iterable[str] = KEYS, threshold: float = 3.0
) -> pl.DataFrame:
    """Per group (``by``; None: all cells) and key: the mean of cells' complete and swrb means, the pooled z
    with within-cell standard errors (:func:`pooled_z`) and ``agrees`` = |z| < ``threshold``, the across-cells
    t and its p (:func:`across_cells_t`; with very unequal cell variances sd² has few effective degrees of
    freedom and the t on n − 1 df rejects too often), and the number of cells whose complete replicates
    have zero variance (their se is 0, an underestimate: rare divergence never showed)."""
    groups = [((), table)] if not by else table.sort(list(by)).group_by(list(by), maintain_order=True)
    out = []
    for values, cell in groups:
        for key in keys:
            diff = (cell[f"complete_mean_{key}"] - cell[f"swrb_mean_{key}"]).to_numpy()
            se = np.hypot(cell[f"complete_se_{key}"].to_numpy(), cell[f"swrb_se_{key}"].to_numpy())
            t, p = across_cells_t(diff)
            pooled = pooled_z(diff, se)
            out.append(
                (dict(zip(by, values)) if by else {"group": "all"})
                | {
                    "key": key,
                    "cells": cell.height,
                    "complete_mean": float(cell[f"complete_mean_{key}"].mean()),
                    "swrb_mean": float(cell[f"swrb_mean_{key}"].mean()),
                    "z": pooled,
                    "t": t,
                    "p": p,
                    "complete_zero_variance_cells": int((cell[f"complete_var_{key}"] == 0).sum()),
                    "agrees": bool(abs(pooled) < threshold),
                }
            )
    return pl.DataFrame(out, infer_schema_length=None)


def action_enclosures(replicates: pl.DataFrame, alpha: float = 0.05) -> pl.DataFrame:
    """Per action, the (1 − α) enclosure of the document-average R_H from the swrb replicates of a benchmark
    (:func:`kvdiv.metrics.trajectory_replicates` rows; module docstring), beside the swrb estimates of R_L, B_L, R_H
    and the complete mode's mean M. Needs at least two documents per action.
    """
    doc = replicates.group_by(["action", "mode", "document"], maintain_order=True).agg(pl.col(k).mean() for k in KEYS)
    out = []
    for (action,), cell in doc.group_by(["action"], maintain_order=True):
        swrb = cell.filter(pl.col("mode") == "swrb").sort("document")
        complete = cell.filter(pl.col("mode") == "complete")
        if swrb.height < 2:
            raise ValueError(f"action {action!r}: the enclosure needs >= 2 documents in swrb mode, got {swrb.height}")
        lo, hi = enclosure(swrb["R_L"].to_numpy(), swrb["B_L"].to_numpy(), alpha)
        m = float(complete["R_H"].mean()) if complete.height else math.nan
        out.append(
            {
                "action": action,
                "documents": swrb.height,
                "alpha": float(alpha),
                "swrb_R_L": float(swrb["R_L"].mean()),
                "swrb_B_L": float(swrb["B_L"].mean()),
                "swrb_R_H": float(swrb["R_H"].mean()),
                "complete_R_H": m,
                "enclosure_lower": lo,
                "enclosure_upper": hi,
                "complete_R_H_inside": bool(lo <= m <= hi) if not math.isnan(m) else None,
            }
        )
    return pl.DataFrame(out, infer_schema_length=None)


def swrb_rows_as_metrics(replicates: pl.DataFrame, horizon: int) -> pl.DataFrame:
    """The swrb rows of a benchmark frame (:func:`kvdiv.metrics.trajectory_replicates`, with ``M_path``) in the
    column names of a study's ``replicates.parquet`` that :func:`kvdiv.analysis.swrb_comparison.study_cells` reads
    (z_r, weight = D, mismatch = M_path, exposure = (H − J)/H)."""
    h = int(horizon)
    return replicates.filter((pl.col("mode") == "swrb") & pl.col("M_path").is_not_null()).select(
        pl.lit("benchmark").alias("model"),
        "document",
        "action",
        pl.col("R_H").alias("z_r"),
        pl.col("D").fill_null(0.0).alias("weight"),
        pl.col("M_path").alias("mismatch"),
        pl.when(pl.col("J") > 0).then((h - pl.col("J")) / h).otherwise(0.0).alias("exposure"),
    )


def complete_variance_check(
    replicates: pl.DataFrame,
    horizon: int,
    retention: Mapping[str, float],
    n_boot: int,
    seed: int,
    confidence: float = 0.95,
) -> pl.DataFrame:
    """Per retention: the complete mode's measured Var(M) beside the Var̂(M) that :func:`study_cells` estimates from
    the swrb rows of the same cells (module docstring), as means over cells and their ratio estimated/measured
    with a cluster-bootstrap interval over documents (1 when the estimate is right), and the mean Var(Z_R) with the
    pooled variance ratios it gives with either Var(M). Cells without ``M_path`` rows are left out."""
    rows = swrb_rows_as_metrics(replicates, horizon)
    schema = {
        "retention": pl.Float64,
        "cells": pl.Int64,
        "documents": pl.Int64,
        "measured": pl.Float64,
        "estimated": pl.Float64,
        "ratio": pl.Float64,
        "ratio_lower": pl.Float64,
        "ratio_upper": pl.Float64,
        "swrb": pl.Float64,
        "pooled_ratio_measured": pl.Float64,
        "pooled_ratio_estimated": pl.Float64,
    }
    if not rows.height:
        return pl.DataFrame(schema=schema)
    estimated = study_cells(rows).select(
        "document", "action", pl.col("complete_var_R_H").alias("estimated"), pl.col("swrb_var_R_H").alias("swrb")
    )
    measured = (
        replicates.filter(pl.col("mode") == "complete")
        .group_by("document", "action")
        .agg(pl.col("R_H").var(ddof=1).alias("measured"))
    )
    cells = estimated.join(measured, on=["document", "action"], how="inner").with_columns(
        pl.col("action").replace_strict(dict(retention), default=None, return_dtype=pl.Float64).alias("retention")
    )
    out = []
    for (ret,), part in cells.sort("retention", "document").group_by(["retention"], maintain_order=True):
        doc = part.group_by("document", maintain_order=True).agg(pl.col("measured").sum(), pl.col("estimated").sum())
        res = cluster_bootstrap(
            {"m": doc["measured"].to_numpy(), "e": doc["estimated"].to_numpy()},
            lambda m: {"ratio": m["e"] / m["m"]},
            n_boot,
            stat_seed(seed, "variance_check", ret),
            confidence,
        )["ratio"]
        out.append(
            {
                "retention": ret,
                "cells": part.height,
                "documents": doc.height,
                "measured": float(part["measured"].mean()),
                "estimated": float(part["estimated"].mean()),
                "ratio": float(res[0]),
                "ratio_lower": float(res[1]),
                "ratio_upper": float(res[2]),
                "swrb": float(part["swrb"].mean()),
                "pooled_ratio_measured": ratio(float(part["measured"].mean()), float(part["swrb"].mean())),
                "pooled_ratio_estimated": ratio(float(part["estimated"].mean()), float(part["swrb"].mean())),
            }
        )
    return pl.DataFrame(out, schema=schema)


def summaries(cells: pl.DataFrame, n_boot: int, seed: int) -> dict[str, pl.DataFrame]:
    """Every summary table the record prints (:func:`kvdiv.analysis.swrb_comparison.retention_summary` of the
    :func:`comparison_table` cells with ``swrb_mean_D``): ``retention_{R_H, R_L, B_L}``, ``retention_{rows, wall_s}``
    (R_H against those costs), ``action``, ``divergence`` (bins of D̄) and ``all``."""
    d_bins = cells.with_columns(
        pl.when(pl.col("swrb_mean_D") < 0.5)
        .then(pl.lit("D < 0.5"))
        .when(pl.col("swrb_mean_D") < 0.95)
        .then(pl.lit("0.5 ≤ D < 0.95"))
        .otherwise(pl.lit("D ≥ 0.95"))
        .alias("divergence")
    )
    out = {}
    for key in KEYS:
        out[f"retention_{key}"] = retention_summary(cells, key=key, n_boot=n_boot, seed=seed)
    for cost in ("rows", "wall_s"):
        out[f"retention_{cost}"] = retention_summary(cells, cost=cost, n_boot=n_boot, seed=seed)
    out["action"] = retention_summary(cells, by="action", n_boot=n_boot, seed=seed)
    out["divergence"] = retention_summary(d_bins, by="divergence", n_boot=n_boot, seed=seed)
    out["all"] = retention_summary(cells, by=None, n_boot=n_boot, seed=seed)
    return out


def benchmark_tables(
    replicates: pl.DataFrame, retention: Mapping[str, float], horizon: int, n_boot: int, seed: int, alpha: float
) -> dict[str, pl.DataFrame]:
    """The benchmark's tables from both modes' replicates (``retention``: action → kept fraction): ``replicates``
    (with ``P_div`` and ``M_path``), ``cells`` (:func:`comparison_table` with ``swrb_mean_D``), ``summaries``,
    ``agreement``, ``enclosures`` and ``variance_check``."""
    replicates = with_divergence(replicates)
    if "M_path" not in replicates.columns:  # batches written before M_path existed lack it
        replicates = replicates.with_columns(pl.lit(None, dtype=pl.Float64).alias("M_path"))
    cells = comparison_table(replicates, retention, keys=(*KEYS, "P_div"))
    d = (
        replicates.filter(pl.col("mode") == "swrb")
        .group_by("document", "action")
        .agg(pl.col("D").mean().alias("swrb_mean_D"))
    )
    cells = cells.join(d, on=["document", "action"], how="left")
    return {
        "replicates": replicates,
        "cells": cells,
        "summaries": summaries(cells, n_boot, seed),
        "agreement": agreement_table(cells, keys=(*KEYS, "P_div")),
        "enclosures": action_enclosures(replicates, alpha=alpha),
        "variance_check": complete_variance_check(replicates, horizon, retention, n_boot, seed),
    }
