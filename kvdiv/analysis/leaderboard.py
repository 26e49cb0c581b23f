"""A divergence leaderboard of eviction actions: which press keeps the full-cache continuation longest?

Per model × action, pooled over the study's documents, with cluster-bootstrap intervals over documents, from the
study's ``replicates.parquet``: ``diverged_by_{h}``, ``mean_tau_diverged``, ``risk`` (R_H), ``exposure``,
``mismatch_rate`` and ``accuracy_y``/``accuracy_x``, sorted by R_H (lowest first).
Definitions: docs/estimators.md#leaderboard-statistics.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kvdiv.analysis.accuracy import ANSWER_COLUMNS, accuracy_document_means
from kvdiv.analysis.bootstrap import cluster_bootstrap, stat_seed
from kvdiv.analysis.inputs import Metrics, document_means, is_swrb, row_weight

#: The statistics of :func:`leaderboard_table` besides the ``diverged_by_{h}`` columns, in display order.
STATISTICS = ("mean_tau_diverged", "risk", "exposure", "mismatch_rate", "accuracy_y", "accuracy_x")


def diverged_by(replicates: pl.DataFrame, steps: Sequence[int]) -> pl.DataFrame:
    """Per (model, document, action): the weighted replicate mean of 1{τ ≤ h} (``diverged_by_{h}``) for each h."""
    w = row_weight(replicates)
    return replicates.group_by(["model", "document", "action"]).agg(
        *(
            ((pl.col("tau").is_not_null() & (pl.col("tau") <= h)).cast(pl.Float64) * w).mean().alias(f"diverged_by_{h}")
            for h in steps
        )
    )


def _stat(m: dict) -> dict:
    out = {k: m[k] for k in m if k.startswith("diverged_by_")}
    with np.errstate(invalid="ignore", divide="ignore"):
        out.update(
            {
                "mean_tau_diverged": m["tau_diverged_sum"] / np.where(m["diverged"] > 0, m["diverged"], np.nan),
                "risk": m["mismatch"],
                "exposure": m["exposure"],
                "mismatch_rate": m["occupation"] / np.where(m["exposure"] > 0, m["exposure"], np.nan),
                "accuracy_y": m["cy"],
                "accuracy_x": m["cx"],
            }
        )
    return out


def leaderboard_table(
    metrics: Metrics, n_boot: int, seed: int, confidence: float, steps: Sequence[int] = ()
) -> pl.DataFrame:
    """One row per model × action, sorted by model then R_H: columns model, action, n_documents, rank (1 = lowest
    R_H within the model), and for each statistic ``{name}``, ``{name}_lower``, ``{name}_upper`` (proportions; τ in
    steps). ``steps``: the steps h of ``diverged_by_{h}`` (H is always included)."""
    rep = metrics.replicates
    horizon = int(rep["horizon"].max())
    bad = [h for h in steps if not 1 <= int(h) <= horizon]
    if bad:
        raise ValueError(f"leaderboard.steps: step {bad[0]} is outside 1..H = {horizon}")
    hs = sorted({int(h) for h in steps} | {horizon})
    doc = document_means(rep).join(diverged_by(rep, hs), on=["model", "document", "action"], how="left")
    if all(c in rep.columns for c in ANSWER_COLUMNS) and not is_swrb(rep):
        acc = accuracy_document_means(rep).select("model", "document", "action", "cx", "cy")
        doc = doc.join(acc, on=["model", "document", "action"], how="left")
    else:
        doc = doc.with_columns(pl.lit(None, dtype=pl.Float64).alias("cx"), pl.lit(None, dtype=pl.Float64).alias("cy"))
    names = [f"diverged_by_{h}" for h in hs] + list(STATISTICS)
    keys = [
        "diverged",
        "tau_diverged_sum",
        "mismatch",
        "exposure",
        "occupation",
        "cx",
        "cy",
        *(f"diverged_by_{h}" for h in hs),
    ]
    rows: list[dict] = []
    for (model, action), sub in sorted(doc.group_by(["model", "action"]), key=lambda kv: kv[0]):
        sub = sub.sort("document")
        values = {k: sub[k].cast(pl.Float64).fill_null(np.nan).to_numpy() for k in keys}
        res = cluster_bootstrap(values, _stat, n_boot, stat_seed(seed, "leaderboard", model, action), confidence)
        row = {"model": model, "action": action, "n_documents": sub.height}
        for name in names:
            est, lo, hi = res[name]
            row.update({name: float(est), f"{name}_lower": float(lo), f"{name}_upper": float(hi)})
        rows.append(row)
    frame = pl.DataFrame(rows).sort("model", "risk", "action")
    return frame.with_columns(pl.col("risk").rank("ordinal").over("model").cast(pl.Int32).alias("rank")).select(
        "model", "rank", "action", "n_documents", pl.exclude("model", "rank", "action", "n_documents")
    )
