"""Does divergence change the answer? Task accuracy with the full and the evicted cache, per action.

From the answer columns of ``replicates.parquet``, per model × stratum (and pooled) × action, with cluster-bootstrap
intervals over documents: ``accuracy_x``, ``accuracy_y``, their gap, ``answer_changed``, the shares of early
(τ ≤ answer_end) and late divergence and the accuracy of y given each. Needs complete-mode metrics (swrb: a
``ValueError`` naming the study and the mode). Definitions: docs/estimators.md#answers-and-accuracy.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kvdiv.analysis.bootstrap import cluster_bootstrap, result_rows, stat_seed
from kvdiv.analysis.inputs import DOC_KEYS, Metrics, cells, is_swrb, study_names

#: The answer columns :func:`accuracy_table` needs in ``replicates.parquet``.
ANSWER_COLUMNS = ("correct_x", "correct_y", "answer_changed", "answer_end", "diverged_before_answer")
#: The statistics of :func:`accuracy_table`, in the order of its rows.
STATISTICS = (
    "accuracy_x",
    "accuracy_y",
    "accuracy_gap",
    "answer_changed",
    "share_early",
    "share_late",
    "accuracy_y_early",
    "accuracy_y_late",
)


def _check(replicates: pl.DataFrame) -> None:
    missing = [c for c in ANSWER_COLUMNS if c not in replicates.columns]
    if missing:
        raise ValueError(
            f"accuracy: the metrics of study {study_names(replicates)} lack column {missing[0]!r} "
            "(metrics written without the answers table; rerun rule metrics)"
        )
    if is_swrb(replicates):
        raise ValueError(
            f"accuracy: study {study_names(replicates)} ran in mode 'swrb', whose stored chains are "
            "the residual branch path, not samples of P and Q; feed the accuracy table a study in mode "
            "'complete' (config analysis.studies.accuracy)"
        )


def accuracy_document_means(replicates: pl.DataFrame) -> pl.DataFrame:
    """Per (model, document, action): replicate means of correct_x, correct_y, the answer change, the early and late
    divergence indicators and correct_y times each (rows of documents without gold answers left out)."""
    _check(replicates)
    rows = replicates.filter(pl.col("correct_x").is_not_null())
    early = pl.col("diverged_before_answer").fill_null(False)
    late = (pl.col("diverged_before_answer") == False).fill_null(False) & pl.col("tau").is_not_null()  # noqa: E712
    return (
        rows.group_by([*DOC_KEYS, "action"])
        .agg(
            pl.col("correct_x").mean().alias("cx"),
            pl.col("correct_y").mean().alias("cy"),
            pl.col("answer_changed").cast(pl.Float64).mean().alias("changed"),
            early.cast(pl.Float64).mean().alias("early"),
            late.cast(pl.Float64).mean().alias("late"),
            (early.cast(pl.Float64) * pl.col("correct_y")).mean().alias("cy_early"),
            (late.cast(pl.Float64) * pl.col("correct_y")).mean().alias("cy_late"),
            pl.len().alias("replicates"),
        )
        .sort("model", "document", "action")
    )


def _stat(m: dict) -> dict:
    return {
        "accuracy_x": m["cx"],
        "accuracy_y": m["cy"],
        "accuracy_gap": m["cx"] - m["cy"],
        "answer_changed": m["changed"],
        "share_early": m["early"],
        "share_late": m["late"],
        "accuracy_y_early": m["cy_early"] / np.where(m["early"] > 0, m["early"], np.nan),
        "accuracy_y_late": m["cy_late"] / np.where(m["late"] > 0, m["late"], np.nan),
    }


def accuracy_table(metrics: Metrics, n_boot: int, seed: int, confidence: float, by: str = "stratum") -> pl.DataFrame:
    """The :data:`STATISTICS` per model × ``by`` cell (and pooled ``all``) × action: columns model, ``by``, action,
    statistic, estimate, lower, upper, n_documents (proportions, 0–1)."""
    doc = accuracy_document_means(metrics.replicates)
    rows: list[dict] = []
    for action in sorted(doc["action"].unique().to_list()):
        for model, cell, sub in cells(doc.filter(pl.col("action") == action), by=by):
            values = {k: sub[k].to_numpy() for k in ("cx", "cy", "changed", "early", "late", "cy_early", "cy_late")}
            res = cluster_bootstrap(values, _stat, n_boot, stat_seed(seed, "accuracy", model, cell, action), confidence)
            rows += result_rows(
                {"model": model, by: cell, "action": action, "n_documents": sub.height},
                {name: res[name] for name in STATISTICS},
            )
    schema = {
        "model": pl.Utf8,
        by: pl.Utf8,
        "action": pl.Utf8,
        "n_documents": pl.Int64,
        "statistic": pl.Utf8,
        "estimate": pl.Float64,
        "lower": pl.Float64,
        "upper": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)
