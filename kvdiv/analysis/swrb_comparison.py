"""Complete coupling vs residual-branch conditional Monte Carlo (SWRB) on a real model (arXiv 2609.16617, §4).

The finite-state study (:mod:`kvdiv.finite.study`) compares the two samplers on enumerable systems; this module does
the same for a swrb-mode study, whose draws also estimate the complete coupling's Var(M) per (document, action) cell
(:func:`study_cells`), with the finite study's aggregates (:func:`retention_summary`) and the enclosure of R_H
(:func:`study_enclosures`). The result ``swrb``'s tables are :func:`swrb_variance` and :func:`swrb_enclosure`; the
benchmark that runs both modes (benchmarks/swrb_llm.py) keeps its own tables in benchmarks/swrb_analysis.py.
The mathematics: docs/estimators.md#on-a-real-model.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from kvdiv.analysis.bootstrap import bootstrap_counts, cluster_bootstrap, stat_seed
from kvdiv.analysis.inputs import POOLED, Metrics, document_means, is_swrb
from kvdiv.estimands import enclosure, variance_cost_aggregates

#: Cost columns and the names their ratios and advantages take.
COSTS = {"pair_evaluations": "evaluation", "rows": "rows", "wall_s": "wall"}


def ratio(num: float, den: float) -> float:
    """num/den; for den ≤ 0: NaN when num is 0 or NaN, else +inf (a variance or cost ratio)."""
    if den > 0:
        return num / den
    return math.nan if num == 0 or math.isnan(num) else math.inf


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
    spread = (
        variance_cost_aggregates(*(ratios[c].to_numpy() for c in columns))
        if ratios.height
        else {k: math.nan for k in every}
    )
    return {
        "variance_ratio_min": spread["variance_ratio_min"],
        "variance_ratio_median": spread["variance_ratio_median"],
        "variance_ratio_max": spread["variance_ratio_max"],
        "evaluation_ratio_mean": every["evaluation_ratio_mean"],
        "advantage_ratio_of_means": every["advantage_ratio_of_means"],
        "variance_ratio_of_means": ratio(float(table[columns[0]].mean()), float(table[columns[1]].mean())),
    }


STATISTICS = (
    "variance_ratio_median",
    "variance_ratio_min",
    "variance_ratio_max",
    "evaluation_ratio_mean",
    "advantage_ratio_of_means",
    "variance_ratio_of_means",
)


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
        row = {
            by or "group": value if by else "all",
            "cells": cell.height,
            "documents": len(documents),
            "zero_variance_cells": int(cell[f"variance_ratio_{key}"].is_nan().sum()),
            "complete_zero_variance_cells": int((cell[f"complete_var_{key}"] == 0).sum()),
        }
        alpha = (1 - confidence) / 2
        for s in STATISTICS:
            d = np.asarray(draws[s], dtype=float)
            d = d[~np.isnan(d)]
            row[s] = point[s]
            row[f"{s}_lo"] = float(np.quantile(d, alpha)) if d.size else math.nan
            row[f"{s}_hi"] = float(np.quantile(d, 1 - alpha)) if d.size else math.nan
        out.append(row)
    return pl.DataFrame(out, infer_schema_length=None)


def study_cells(replicates: pl.DataFrame) -> pl.DataFrame:
    """Per (model, document, action) of a swrb-mode study's ``replicates.parquet``: the complete coupling's Var̂(M)
    estimated from the swrb rows and Var(Z_R) (module docstring), in the column names of the benchmark's
    ``comparison_table`` (benchmarks/swrb_analysis.py) for R_H, with costs per H: ``complete_pair_evaluations`` = 1,
    ``swrb_pair_evaluations`` = 1 + mean(exposure).
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
    return (
        cells.with_columns(
            (
                pl.col("second_moment_M")
                - pl.col("swrb_mean_R_H") ** 2
                + pl.col("swrb_var_R_H") / pl.col("replicates_swrb")
            ).alias("complete_var_R_H"),
            pl.lit(1.0).alias("complete_pair_evaluations"),
        )
        .with_columns(
            pl.struct("complete_var_R_H", "swrb_var_R_H")
            .map_elements(lambda r: ratio(max(r["complete_var_R_H"], 0.0), r["swrb_var_R_H"]), return_dtype=pl.Float64)
            .alias("variance_ratio_R_H"),
        )
        .drop("second_moment_M")
    )


#: The statistics of :func:`swrb_variance`, in its row order.
VARIANCE_STATISTICS = (
    "variance_ratio_median",
    "variance_ratio_min",
    "variance_ratio_max",
    "variance_ratio_of_means",
    "evaluation_ratio_mean",
    "advantage_ratio_of_means",
)


def swrb_variance(metrics: Metrics, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """The ``swrb/variance`` table: per model × action (and all actions, ``action`` = "all") of a swrb-mode study,
    the variance–cost aggregates of :func:`retention_summary` over the cells of :func:`study_cells` (R_H,
    kernel-pair evaluations), long format: model, action, statistic, estimate, lower, upper, n_documents, cells,
    mean_D. Empty (same columns) for a complete-mode study: its rows hold no SWRB draws."""
    schema = {
        "model": pl.Utf8,
        "action": pl.Utf8,
        "statistic": pl.Utf8,
        "estimate": pl.Float64,
        "lower": pl.Float64,
        "upper": pl.Float64,
        "n_documents": pl.Int64,
        "cells": pl.Int64,
        "mean_D": pl.Float64,
    }
    if not is_swrb(metrics.replicates):
        return pl.DataFrame(schema=schema)
    cells = study_cells(metrics.replicates)
    rows = []
    for model in sorted(cells["model"].unique().to_list()):
        part = cells.filter(pl.col("model") == model)
        groups = [(a, part.filter(pl.col("action") == a)) for a in sorted(part["action"].unique().to_list())]
        for action, sub in [*groups, (POOLED, part)]:
            summary = retention_summary(
                sub, by=None, n_boot=n_boot, seed=stat_seed(seed, "swrb_variance", model, action), confidence=confidence
            ).row(0, named=True)
            for stat in VARIANCE_STATISTICS:
                rows.append(
                    {
                        "model": model,
                        "action": action,
                        "statistic": stat,
                        "estimate": summary[stat],
                        "lower": summary[f"{stat}_lo"],
                        "upper": summary[f"{stat}_hi"],
                        "n_documents": summary["documents"],
                        "cells": summary["cells"],
                        "mean_D": float(sub["swrb_mean_D"].mean()),
                    }
                )
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
            raise ValueError(
                f"model {model!r}, action {action!r}: the enclosure needs >= 2 documents, got {sub.height}"
            )
        lo, hi = enclosure(sub["risk_window"].to_numpy(), sub["capacity"].to_numpy(), alpha)
        res = cluster_bootstrap(
            {"r": sub["mismatch"].to_numpy()},
            lambda m: {"R_H": m["r"]},
            n_boot,
            stat_seed(seed, "swrb_enclosure", model, action),
            confidence,
        )
        est, r_lo, r_hi = (float(v) for v in res["R_H"])
        rows.append(
            {
                "model": model,
                "action": action,
                "n_documents": sub.height,
                "alpha": float(alpha),
                "R_L": float(sub["risk_window"].mean()),
                "B_L": float(sub["capacity"].mean()),
                "enclosure_lower": lo,
                "enclosure_upper": hi,
                "R_H": est,
                "R_H_lower": r_lo,
                "R_H_upper": r_hi,
                "R_H_inside": bool(lo <= est <= hi),
            }
        )
    return pl.DataFrame(rows)


def swrb_enclosure(metrics: Metrics, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """The ``swrb/enclosure`` table: :func:`study_enclosures` at α = 1 − ``confidence`` (window L: the metrics'
    ``analysis.window``, column ``window``)."""
    out = study_enclosures(metrics.replicates, 1.0 - confidence, n_boot, seed, confidence)
    window = int(metrics.replicates["window"].max()) if "window" in metrics.replicates.columns else None
    return out.with_columns(pl.lit(window, dtype=pl.Int32).alias("window"))


__all__ = [
    "COSTS",
    "STATISTICS",
    "VARIANCE_STATISTICS",
    "ratio",
    "retention_summary",
    "study_cells",
    "study_enclosures",
    "swrb_enclosure",
    "swrb_variance",
]
