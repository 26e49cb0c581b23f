"""Figure 5's entry into divergence: first-divergence survival curves and entry times (mean τ among diverged
replicates, P(τ ≤ H)), with cluster-bootstrap bands, and their paired contrasts between actions (the claims of
§5.2 that SnapKV-half enters divergence later and less often, :mod:`kvdiv.results.claims`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kvdiv.analysis.bootstrap import cluster_bootstrap, result_rows, stat_seed
from kvdiv.analysis.inputs import (
    Metrics,
    applicable_contrasts,
    cells,
    contrast_name,
    document_means,
    paired,
    row_weight,
)


def survival_curves(metrics: Metrics, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """First-divergence survival S(t) = P(τ > t), t = 0..H, per model × action (pooled over strata)."""
    rep = metrics.replicates
    horizon = int(rep["horizon"].max())
    rows: list[dict] = []
    for (model, action), sub in sorted(rep.group_by(["model", "action"]), key=lambda kv: kv[0]):
        tau = sub["tau"].fill_null(horizon + 1).to_numpy()
        weight = sub.select(row_weight(sub).alias("w"))["w"].to_numpy() * np.ones(sub.height)
        docs = sub["document"].to_numpy()
        steps = np.arange(0, horizon + 1)
        alive = 1.0 - weight[:, None] * (tau[:, None] <= steps[None, :])  # swrb: P(τ ≤ t) ≈ D·1{J ≤ t}
        uniq, inv = np.unique(docs, return_inverse=True)
        per_doc = np.zeros((uniq.size, steps.size))
        np.add.at(per_doc, inv, alive)
        per_doc /= np.bincount(inv)[:, None]
        res = cluster_bootstrap(
            {"s": per_doc},
            lambda m: {"survival": m["s"]},
            n_boot,
            stat_seed(seed, "survival", model, action),
            confidence,
        )
        est, lo, hi = res["survival"]
        for k, t in enumerate(steps):
            rows.append(
                {
                    "model": model,
                    "action": action,
                    "step": int(t),
                    "survival": float(est[k]),
                    "lower": float(lo[k]),
                    "upper": float(hi[k]),
                    "n_documents": int(uniq.size),
                }
            )
    return pl.DataFrame(rows)


def entry_times(metrics: Metrics, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """Mean first-divergence step among diverged rows, and P(τ ≤ H), per model × stratum × action."""
    doc = document_means(metrics.replicates)
    rows: list[dict] = []

    def stat(m):
        return {"mean_tau_diverged": m["tau_sum"] / np.where(m["div"] > 0, m["div"], np.nan), "diverged": m["div"]}

    for action in sorted(doc["action"].unique().to_list()):
        for model, cell, sub in cells(doc.filter(pl.col("action") == action)):
            values = {"tau_sum": sub["tau_diverged_sum"].to_numpy(), "div": sub["diverged"].to_numpy()}
            res = cluster_bootstrap(values, stat, n_boot, stat_seed(seed, "entry", model, cell, action), confidence)
            rows += result_rows({"model": model, "stratum": cell, "action": action, "n_documents": sub.height}, res)
    return pl.DataFrame(rows)


def entry_contrasts(
    metrics: Metrics, contrasts: Sequence[Sequence[str]], n_boot: int, seed: int, confidence: float
) -> pl.DataFrame:
    """Per model × stratum × contrast a − b, paired over documents having both actions (one bootstrap resample
    moves a document's values of both): ``mean_tau_gap`` = mean τ among diverged of a minus that of b (steps), and
    ``diverged_gap`` = P(τ ≤ H) of a minus that of b."""
    doc = document_means(metrics.replicates)
    cols = ["tau_diverged_sum", "diverged"]

    def stat(m):
        tau_a = m["tau_diverged_sum_a"] / np.where(m["diverged_a"] > 0, m["diverged_a"], np.nan)
        tau_b = m["tau_diverged_sum_b"] / np.where(m["diverged_b"] > 0, m["diverged_b"], np.nan)
        return {"mean_tau_gap": tau_a - tau_b, "diverged_gap": m["diverged_a"] - m["diverged_b"]}

    rows: list[dict] = []
    for a, b in applicable_contrasts(contrasts, doc["action"].unique()):
        wide = paired(doc, a, b, cols)
        for model, cell, sub in cells(wide):
            values = {f"{c}_{s}": sub[f"{c}_{s}"].to_numpy() for c in cols for s in "ab"}
            seed_cell = stat_seed(seed, "entry_contrast", model, cell, a, b)
            res = cluster_bootstrap(values, stat, n_boot, seed_cell, confidence)
            rows += result_rows(
                {
                    "model": model,
                    "stratum": cell,
                    "contrast": contrast_name(a, b),
                    "action_a": a,
                    "action_b": b,
                    "n_documents": sub.height,
                },
                res,
            )
    return pl.DataFrame(rows)
