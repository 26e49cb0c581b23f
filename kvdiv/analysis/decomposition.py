"""Figures 5 and 7: the gap between two actions split into exposure and branch-mismatch shares, and the share of
the gap made after the first EOS.

ΔR = ΔO + ΔE·C̄ + Ē·ΔC exactly (midpoints C̄, Ē: the Shapley split of a product of two factors); the exposure share
(ΔO + ΔE·C̄)/ΔR and the branch-mismatch share Ē·ΔC/ΔR sum to 1 and do not depend on the order of a and b.
A share whose gap interval contains 0 is not identified (rows carry ``identified`` and ``contains_estimate``).
The mathematics: docs/estimators.md#gap-decomposition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
)

#: Statistics that divide by the ``gap`` of their cell.
SHARES = ("exposure_share", "branch_share", "eos_share")


def mark_identification(rows: list[dict]) -> list[dict]:
    """Rows of one cell with ``identified`` and ``contains_estimate`` (module docstring): a share is identified when
    its cell's ``gap`` interval excludes 0."""
    gap = next((r for r in rows if r["statistic"] == "gap"), None)
    gap_ok = (
        gap is not None
        and np.isfinite(gap["lower"])
        and np.isfinite(gap["upper"])
        and (gap["lower"] > 0 or gap["upper"] < 0)
    )
    out = []
    for r in rows:
        inside = not (np.isfinite(r["estimate"]) and np.isfinite(r["lower"]) and np.isfinite(r["upper"])) or (
            r["lower"] <= r["estimate"] <= r["upper"]
        )
        out.append(
            {**r, "identified": bool(gap_ok) if r["statistic"] in SHARES else True, "contains_estimate": bool(inside)}
        )
    return out


def decomposition_stat(m: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The symmetric gap decomposition (module docstring) from population means of both actions."""
    o_a, e_a, p_a = m["occurrence_a"], m["exposure_a"], m["occupation_a"]
    o_b, e_b, p_b = m["occurrence_b"], m["exposure_b"], m["occupation_b"]
    raw_a = np.where(e_a > 0, p_a / np.where(e_a > 0, e_a, 1.0), np.nan)
    raw_b = np.where(e_b > 0, p_b / np.where(e_b > 0, e_b, 1.0), np.nan)
    # an action with no exposure has no rate: it takes the other's (ΔC = 0, the gap is all exposure)
    c_a = np.where(np.isfinite(raw_a), raw_a, np.where(np.isfinite(raw_b), raw_b, 0.0))
    c_b = np.where(np.isfinite(raw_b), raw_b, c_a)
    gap = (o_a + p_a) - (o_b + p_b)
    exposure_part = (o_a - o_b) + (e_a - e_b) * (c_a + c_b) / 2
    branch_part = (e_a + e_b) / 2 * (c_a - c_b)
    safe = np.where(gap != 0, gap, np.nan)
    return {
        "gap": gap,
        "mismatch_gap": m["mismatch_a"] - m["mismatch_b"],
        "occurrence_gap": o_a - o_b,
        "exposure_gap": e_a - e_b,
        "rate_a": raw_a,
        "rate_b": raw_b,
        "exposure_part": exposure_part,
        "branch_part": branch_part,
        # a majority claim as a difference (exposure part − branch part > 0), not as a share of a gap near 0
        "exposure_minus_branch": exposure_part - branch_part,
        "exposure_share": exposure_part / safe,
        "branch_share": branch_part / safe,
    }


def gap_decomposition(
    metrics: Metrics, contrasts: Sequence[Sequence[str]], n_boot: int, seed: int, confidence: float, by: str = "stratum"
) -> pl.DataFrame:
    """Figure 5/7 data: per model × cell × contrast, the gap and its exposure/branch-mismatch split."""
    doc = document_means(metrics.replicates)
    cols = ["occurrence", "exposure", "occupation", "mismatch"]
    rows: list[dict] = []
    pairs = applicable_contrasts(contrasts, doc["action"].unique())
    if not pairs:
        raise ValueError(
            f"analysis.contrasts {[list(c) for c in contrasts]}: no pair has both actions among this "
            f"study's actions {sorted(doc['action'].unique().to_list())}"
        )
    for a, b in pairs:
        wide = paired(doc, a, b, cols)
        for model, cell, sub in cells(wide, by=by):
            values = {f"{c}_{s}": sub[f"{c}_{s}"].to_numpy() for c in cols for s in "ab"}
            res = cluster_bootstrap(
                values, decomposition_stat, n_boot, stat_seed(seed, "decomposition", model, by, cell, a, b), confidence
            )
            keys = {
                "model": model,
                by: cell,
                "contrast": contrast_name(a, b),
                "action_a": a,
                "action_b": b,
                "n_documents": sub.height,
            }
            rows += mark_identification(result_rows(keys, res))
    return pl.DataFrame(rows)


def eos_shares(
    metrics: Metrics, contrasts: Sequence[Sequence[str]], n_boot: int, seed: int, confidence: float, by: str = "family"
) -> pl.DataFrame:
    """Share of the mismatch gap a − b made after the first EOS of either chain, per model × cell × contrast."""
    doc = document_means(metrics.replicates)
    cols = ["mismatch", "mismatch_post_eos"]

    def stat(m):
        gap = m["mismatch_a"] - m["mismatch_b"]
        post = m["mismatch_post_eos_a"] - m["mismatch_post_eos_b"]
        return {
            "gap": gap,
            "post_eos_gap": post,
            "eos_share": post / np.where(gap != 0, gap, np.nan),
            # "most of the gap is made before the first EOS" as a difference: pre-EOS part − post-EOS part
            "pre_minus_post_eos": gap - 2 * post,
        }

    rows: list[dict] = []
    for a, b in applicable_contrasts(contrasts, doc["action"].unique()):
        wide = paired(doc, a, b, cols)
        for model, cell, sub in cells(wide, by=by):
            values = {f"{c}_{s}": sub[f"{c}_{s}"].to_numpy() for c in cols for s in "ab"}
            res = cluster_bootstrap(values, stat, n_boot, stat_seed(seed, "eos", model, by, cell, a, b), confidence)
            keys = {"model": model, by: cell, "contrast": contrast_name(a, b), "n_documents": sub.height}
            rows += mark_identification(result_rows(keys, res))
    return pl.DataFrame(rows)
