"""Complete coupling vs residual-branch conditional Monte Carlo (SWRB) on a real model (arXiv 2609.16617, §4).

The finite-state study (:mod:`kvdiv.finite.study`) compares the two samplers on enumerable systems; this module does
the same for trajectories of an LLM, per (document, action) cell: both modes run (:func:`comparison_table`,
benchmarks/swrb_llm.py), or one swrb-mode study whose draws also estimate the complete coupling's Var(M)
(:func:`study_cells`); aggregates (:func:`retention_summary`), agreement (:func:`agreement_table`) and the
enclosure of R_H (:func:`action_enclosures`, :func:`study_enclosures`). The analysis items ``swrb`` are
:func:`swrb_variance` and :func:`swrb_enclosure`. The mathematics: docs/estimators.md#on-a-real-model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import polars as pl
from scipy.stats import t as student_t

from kvdiv.analysis.bootstrap import bootstrap_counts, cluster_bootstrap, stat_seed
from kvdiv.analysis.inputs import POOLED, Metrics, document_means, is_swrb
from kvdiv.estimands import enclosure, variance_cost_aggregates

MODES = ("complete", "swrb")
#: Quantities estimated per replicate in both modes: the mismatch risk by H (R_H), in the window (R_L), the capacity (B_L).
KEYS = ("R_H", "R_L", "B_L")
#: Cost columns and the names their ratios and advantages take.
COSTS = {"pair_evaluations": "evaluation", "rows": "rows", "wall_s": "wall"}


def _moments(values: np.ndarray) -> tuple[float, float, float]:
    n = len(values)
    mean = float(values.mean())
    var = float(values.var(ddof=1)) if n > 1 else math.nan
    return mean, var, math.sqrt(var / n) if n > 1 else math.nan


def _ratio(num: float, den: float) -> float:
    if den > 0:
        return num / den
    return math.nan if num == 0 or math.isnan(num) else math.inf


def comparison_table(replicates: pl.DataFrame, retention: Mapping[str, float] | None = None,
                     keys: Sequence[str] = KEYS) -> pl.DataFrame:
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
            row[f"variance_ratio_{key}"] = _ratio(row[f"complete_var_{key}"], row[f"swrb_var_{key}"])
            se = math.hypot(row[f"complete_se_{key}"], row[f"swrb_se_{key}"])
            diff = row[f"complete_mean_{key}"] - row[f"swrb_mean_{key}"]
            row[f"z_{key}"] = diff / se if se > 0 else (0.0 if diff == 0 else math.copysign(math.inf, diff))
        _, row["complete_var_risk_tv"], _ = _moments(by_mode["complete"]["risk_tv"].to_numpy().astype(float))
        row["variance_ratio_risk_tv"] = _ratio(row["complete_var_risk_tv"], row["swrb_var_R_H"])
        for cost, name in COSTS.items():
            for m in MODES:
                row[f"{m}_{cost}"] = float(by_mode[m][cost].mean())
            row[f"{name}_ratio"] = _ratio(row[f"swrb_{cost}"], row[f"complete_{cost}"])
            suffix = "" if name == "evaluation" else f"_{name}"
            row[f"advantage{suffix}"] = _ratio(row["variance_ratio_R_H"], row[f"{name}_ratio"])
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def with_divergence(replicates: pl.DataFrame) -> pl.DataFrame:
    """Add ``P_div``, each mode's per-replicate estimate of P(τ ≤ H): 1{τ ≤ H} (complete), D (swrb)."""
    return replicates.with_columns(
        pl.when(pl.col("mode") == "complete").then(pl.col("tau").is_not_null().cast(pl.Float64))
        .otherwise(pl.col("D")).alias("P_div"))


def _aggregates(table: pl.DataFrame, key: str, cost: str) -> dict[str, float]:
    """The finite study's aggregates (:func:`kvdiv.estimands.variance_cost_aggregates`) of the cells of ``table``.

    A cell whose modes both have zero variance (no divergence in any replicate) has no variance ratio: it is
    left out of min/median/max; it adds 0 to both sums of the ratio of means and counts in the cost ratio.
    """
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {list(COSTS)}, got {cost!r}")
    columns = [f"complete_var_{key}", f"swrb_var_{key}", f"complete_{cost}", f"swrb_{cost}"]
    every = variance_cost_aggregates(*(table[c].to_numpy() for c in columns))
    ratios = table.filter(pl.col(f"variance_ratio_{key}").is_not_nan())
    spread = variance_cost_aggregates(*(ratios[c].to_numpy() for c in columns)) if ratios.height else \
        {k: math.nan for k in every}
    return {
        "variance_ratio_min": spread["variance_ratio_min"],
        "variance_ratio_median": spread["variance_ratio_median"],
        "variance_ratio_max": spread["variance_ratio_max"],
        "evaluation_ratio_mean": every["evaluation_ratio_mean"],
        "advantage_ratio_of_means": every["advantage_ratio_of_means"],
        "variance_ratio_of_means": _ratio(float(table[columns[0]].mean()), float(table[columns[1]].mean())),
    }


STATISTICS = ("variance_ratio_median", "variance_ratio_min", "variance_ratio_max", "evaluation_ratio_mean",
              "advantage_ratio_of_means", "variance_ratio_of_means")


def retention_summary(
    table: pl.DataFrame,
    *,
    key: str = "R_H",
    cost: str = "pair_evaluations",
    by: str = "retention",
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> pl.DataFrame:
    """Per group ``by`` (default: retention; ``None``: all cells): the finite study's aggregates of
    ``key``'s variance ratio and ``cost``, each with a percentile interval of a cluster bootstrap over
    documents (``{stat}_lo``, ``{stat}_hi``), plus the number of cells, documents, cells with zero variance in both
    modes (no ratio) and in the complete mode (ratio 0: no divergence among its R replicates).
    ``variance_ratio_of_means`` = mean Var(complete)/mean Var(swrb) over the cells (the advantage at equal cost).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    groups = [(None, table)] if by is None else table.sort(by).group_by(by, maintain_order=True)
    out = []
    for value, cell in groups:
        value = value[0] if isinstance(value, tuple) else value
        documents = cell["document"].unique(maintain_order=True).to_list()
        point = _aggregates(cell, key, cost)
        counts = bootstrap_counts(len(documents), int(n_boot), int(seed))
        parts = cell.partition_by("document", as_dict=True)
        parts = {k[0] if isinstance(k, tuple) else k: v for k, v in parts.items()}
        draws = {s: [] for s in STATISTICS}
        for weights in counts:
            resample = pl.concat([parts[d] for d, c in zip(documents, weights) for _ in range(int(c))])
            agg = _aggregates(resample, key, cost)
            for s in STATISTICS:
                draws[s].append(agg[s])
        row = {by or "group": value if by else "all", "cells": cell.height, "documents": len(documents),
               "zero_variance_cells": int(cell[f"variance_ratio_{key}"].is_nan().sum()),
               "complete_zero_variance_cells": int((cell[f"complete_var_{key}"] == 0).sum())}
        alpha = (1 - confidence) / 2
        for s in STATISTICS:
            d = np.asarray(draws[s], dtype=float)
            d = d[~np.isnan(d)]
            row[s] = point[s]
            row[f"{s}_lo"] = float(np.quantile(d, alpha)) if d.size else math.nan
            row[f"{s}_hi"] = float(np.quantile(d, 1 - alpha)) if d.size else math.nan
        out.append(row)
    return pl.DataFrame(out, infer_schema_length=None)


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


def agreement_table(table: pl.DataFrame, by: Sequence[str] | None = ("retention",), keys: Iterable[str] = KEYS,
                    threshold: float = 3.0) -> pl.DataFrame:
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
        out.append({
            "action": action, "documents": swrb.height, "alpha": float(alpha),
            "swrb_R_L": float(swrb["R_L"].mean()), "swrb_B_L": float(swrb["B_L"].mean()),
            "swrb_R_H": float(swrb["R_H"].mean()), "complete_R_H": m,
            "enclosure_lower": lo, "enclosure_upper": hi,
            "complete_R_H_inside": bool(lo <= m <= hi) if not math.isnan(m) else None,
        })
    return pl.DataFrame(out, infer_schema_length=None)


def study_cells(replicates: pl.DataFrame) -> pl.DataFrame:
    """Per (model, document, action) of a swrb-mode study's ``replicates.parquet``: the complete coupling's Var̂(M)
    estimated from the swrb rows and Var(Z_R) (module docstring), in :func:`comparison_table`'s column names for
    R_H, with costs per H: ``complete_pair_evaluations`` = 1, ``swrb_pair_evaluations`` = 1 + mean(exposure).
    Also ``swrb_mean_R_H`` (mean Z_R), ``complete_mean_R_H`` (mean D·M, the same expectation) and ``swrb_mean_D``.
    ``complete_var_R_H`` is the unbiased estimate (negative in some cells with few replicates; the ratios of means
    use it), the per-cell ``variance_ratio_R_H`` uses max(Var̂(M), 0)."""
    needed = ("z_r", "weight", "mismatch", "exposure", "model", "document", "action")
    missing = [c for c in needed if c not in replicates.columns]
    if missing:
        raise KeyError(f"swrb metrics lack columns {missing} (is the study in mode: swrb?)")
    cells = (
        replicates.group_by("model", "document", "action")
        .agg(
            pl.len().alias("replicates_swrb"),
            pl.col("z_r").mean().alias("swrb_mean_R_H"),
            pl.col("z_r").var(ddof=1).alias("swrb_var_R_H"),
            (pl.col("weight") * pl.col("mismatch")).mean().alias("complete_mean_R_H"),
            (pl.col("weight") * pl.col("mismatch") ** 2).mean().alias("second_moment_M"),
            (1.0 + pl.col("exposure")).mean().alias("swrb_pair_evaluations"),
            pl.col("weight").mean().alias("swrb_mean_D"),
        )
        .sort("model", "document", "action")
    )
    if (cells["replicates_swrb"] < 2).any():
        raise ValueError("the variance of Z_R needs >= 2 replicates per (document, action)")
    return cells.with_columns(
        (pl.col("second_moment_M") - pl.col("swrb_mean_R_H") ** 2 + pl.col("swrb_var_R_H") / pl.col("replicates_swrb"))
        .alias("complete_var_R_H"),
        pl.lit(1.0).alias("complete_pair_evaluations"),
    ).with_columns(
        pl.struct("complete_var_R_H", "swrb_var_R_H")
        .map_elements(lambda r: _ratio(max(r["complete_var_R_H"], 0.0), r["swrb_var_R_H"]), return_dtype=pl.Float64)
        .alias("variance_ratio_R_H"),
    ).drop("second_moment_M")


def swrb_rows_as_metrics(replicates: pl.DataFrame, horizon: int) -> pl.DataFrame:
    """The swrb rows of a benchmark frame (:func:`kvdiv.metrics.trajectory_replicates`, with ``M_path``) in the
    column names of a study's ``replicates.parquet`` that :func:`study_cells` reads (z_r, weight = D, mismatch =
    M_path, exposure = (H − J)/H)."""
    h = int(horizon)
    return replicates.filter((pl.col("mode") == "swrb") & pl.col("M_path").is_not_null()).select(
        pl.lit("benchmark").alias("model"), "document", "action",
        pl.col("R_H").alias("z_r"), pl.col("D").fill_null(0.0).alias("weight"), pl.col("M_path").alias("mismatch"),
        pl.when(pl.col("J") > 0).then((h - pl.col("J")) / h).otherwise(0.0).alias("exposure"),
    )


def complete_variance_check(replicates: pl.DataFrame, horizon: int, retention: Mapping[str, float], n_boot: int,
                            seed: int, confidence: float = 0.95) -> pl.DataFrame:
    """Per retention: the complete mode's measured Var(M) beside the Var̂(M) that :func:`study_cells` estimates from
    the swrb rows of the same cells (module docstring), as means over cells and their ratio estimated/measured
    with a cluster-bootstrap interval over documents (1 when the estimate is right), and the mean Var(Z_R) with the
    pooled variance ratios it gives with either Var(M). Cells without ``M_path`` rows are left out."""
    rows = swrb_rows_as_metrics(replicates, horizon)
    schema = {"retention": pl.Float64, "cells": pl.Int64, "documents": pl.Int64, "measured": pl.Float64,
              "estimated": pl.Float64, "ratio": pl.Float64, "ratio_lower": pl.Float64, "ratio_upper": pl.Float64,
              "swrb": pl.Float64, "pooled_ratio_measured": pl.Float64, "pooled_ratio_estimated": pl.Float64}
    if not rows.height:
        return pl.DataFrame(schema=schema)
    estimated = study_cells(rows).select("document", "action", pl.col("complete_var_R_H").alias("estimated"),
                                         pl.col("swrb_var_R_H").alias("swrb"))
    measured = (replicates.filter(pl.col("mode") == "complete").group_by("document", "action")
                .agg(pl.col("R_H").var(ddof=1).alias("measured")))
    cells = estimated.join(measured, on=["document", "action"], how="inner").with_columns(
        pl.col("action").replace_strict(dict(retention), default=None, return_dtype=pl.Float64).alias("retention"))
    out = []
    for (ret,), part in cells.sort("retention", "document").group_by(["retention"], maintain_order=True):
        doc = part.group_by("document", maintain_order=True).agg(pl.col("measured").sum(), pl.col("estimated").sum())
        res = cluster_bootstrap({"m": doc["measured"].to_numpy(), "e": doc["estimated"].to_numpy()},
                                lambda m: {"ratio": m["e"] / m["m"]}, n_boot, stat_seed(seed, "variance_check", ret),
                                confidence)["ratio"]
        out.append({"retention": ret, "cells": part.height, "documents": doc.height,
                    "measured": float(part["measured"].mean()), "estimated": float(part["estimated"].mean()),
                    "ratio": float(res[0]), "ratio_lower": float(res[1]), "ratio_upper": float(res[2]),
                    "swrb": float(part["swrb"].mean()),
                    "pooled_ratio_measured": _ratio(float(part["measured"].mean()), float(part["swrb"].mean())),
                    "pooled_ratio_estimated": _ratio(float(part["estimated"].mean()), float(part["swrb"].mean()))})
    return pl.DataFrame(out, schema=schema)


#: The statistics of :func:`swrb_variance`, in its row order.
VARIANCE_STATISTICS = ("variance_ratio_median", "variance_ratio_min", "variance_ratio_max", "variance_ratio_of_means",
                       "evaluation_ratio_mean", "advantage_ratio_of_means")


def swrb_variance(metrics: Metrics, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """The ``swrb/variance`` table: per model × action (and all actions, ``action`` = "all") of a swrb-mode study,
    the variance–cost aggregates of :func:`retention_summary` over the cells of :func:`study_cells` (R_H,
    kernel-pair evaluations), long format: model, action, statistic, estimate, lower, upper, n_documents, cells,
    mean_D. Empty (same columns) for a complete-mode study: its rows hold no SWRB draws."""
    schema = {"model": pl.Utf8, "action": pl.Utf8, "statistic": pl.Utf8, "estimate": pl.Float64, "lower": pl.Float64,
              "upper": pl.Float64, "n_documents": pl.Int64, "cells": pl.Int64, "mean_D": pl.Float64}
    if not is_swrb(metrics.replicates):
        return pl.DataFrame(schema=schema)
    cells = study_cells(metrics.replicates)
    rows = []
    for model in sorted(cells["model"].unique().to_list()):
        part = cells.filter(pl.col("model") == model)
        groups = [(a, part.filter(pl.col("action") == a)) for a in sorted(part["action"].unique().to_list())]
        for action, sub in [*groups, (POOLED, part)]:
            summary = retention_summary(sub, by=None, n_boot=n_boot, seed=stat_seed(seed, "swrb_variance", model, action),
                                        confidence=confidence).row(0, named=True)
            for stat in VARIANCE_STATISTICS:
                rows.append({"model": model, "action": action, "statistic": stat, "estimate": summary[stat],
                             "lower": summary[f"{stat}_lo"], "upper": summary[f"{stat}_hi"],
                             "n_documents": summary["documents"], "cells": summary["cells"],
                             "mean_D": float(sub["swrb_mean_D"].mean())})
    return pl.DataFrame(rows, schema=schema)


def study_enclosures(replicates: pl.DataFrame, alpha: float, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """Per model × action of a study (either mode): the (1 − α) enclosure of the document-average R_H from the
    per-document means of the sampled profiles (module docstring), beside the estimates of R_L, B_L and R_H
    (document means; R_H with a cluster-bootstrap interval) and whether the R_H estimate lies inside."""
    doc = document_means(replicates)
    rows = []
    for (model, action), sub in sorted(doc.group_by(["model", "action"]), key=lambda kv: kv[0]):
        sub = sub.sort("document")
        if sub.height < 2:
            raise ValueError(f"model {model!r}, action {action!r}: the enclosure needs >= 2 documents, got {sub.height}")
        lo, hi = enclosure(sub["risk_window"].to_numpy(), sub["capacity"].to_numpy(), alpha)
        res = cluster_bootstrap({"r": sub["mismatch"].to_numpy()}, lambda m: {"R_H": m["r"]}, n_boot,
                                stat_seed(seed, "swrb_enclosure", model, action), confidence)
        est, r_lo, r_hi = (float(v) for v in res["R_H"])
        rows.append({"model": model, "action": action, "n_documents": sub.height, "alpha": float(alpha),
                     "R_L": float(sub["risk_window"].mean()), "B_L": float(sub["capacity"].mean()),
                     "enclosure_lower": lo, "enclosure_upper": hi, "R_H": est, "R_H_lower": r_lo, "R_H_upper": r_hi,
                     "R_H_inside": bool(lo <= est <= hi)})
    return pl.DataFrame(rows)


def swrb_enclosure(metrics: Metrics, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """The ``swrb/enclosure`` table: :func:`study_enclosures` at α = 1 − ``confidence`` (window L: the metrics'
    ``analysis.window``, column ``window``)."""
    out = study_enclosures(metrics.replicates, 1.0 - confidence, n_boot, seed, confidence)
    window = int(metrics.replicates["window"].max()) if "window" in metrics.replicates.columns else None
    return out.with_columns(pl.lit(window, dtype=pl.Int32).alias("window"))


__all__ = [
    "COSTS", "KEYS", "MODES", "STATISTICS", "VARIANCE_STATISTICS", "across_cells_t", "action_enclosures",
    "agreement_table", "comparison_table", "complete_variance_check", "pooled_z", "retention_summary", "study_cells",
    "study_enclosures", "swrb_enclosure", "swrb_rows_as_metrics", "swrb_variance", "with_divergence",
]
