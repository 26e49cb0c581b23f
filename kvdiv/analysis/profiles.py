"""Figures 6 and 7: branch TV by divergence-aligned depth within first-divergence cohorts, and late-minus-early
contrasts.

**Late minus early.** Within the cohort τ ≤ ``cohort_max_tau``, the mean branch TV δ_{τ+ℓ} over the late depth
window minus that over the early window (``analysis.early``/``late``; ℓ = t − τ), pooled as a ratio of document sums.
``strict pre-EOS`` keeps steps before the first EOS of either chain and is a within-document paired difference over
the documents with pre-EOS steps in both windows (their number is the row's ``n_documents``), so both windows describe
the same documents. The profiles carry ``running``, the share of the observed pairs with neither chain ended at each
depth, and ``complete``: every pair of the cohort is observed at that depth (ℓ ≤ H − ``cohort_max_tau``); past it
only the pairs with τ ≤ H − ℓ are, an earlier-diverging, shrinking set."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kvdiv.analysis.bootstrap import cluster_bootstrap, result_rows, stat_seed
from kvdiv.analysis.inputs import Metrics, cells, row_weight
from kvdiv.analysis.windows import in_window


def branch_tv_profiles(
    metrics: Metrics, cohort_max_tau: int, n_boot: int, seed: int, confidence: float
) -> pl.DataFrame:
    """Figure 6 curves: mean branch TV by depth ℓ within the cohort τ ≤ ``cohort_max_tau``, per model ×
    stratum × action, with bootstrap bands (ratio of document sums)."""
    al = metrics.aligned.filter(pl.col("tau") <= cohort_max_tau)
    if al.is_empty():
        return pl.DataFrame(
            schema={
                "model": pl.Utf8,
                "stratum": pl.Utf8,
                "action": pl.Utf8,
                "depth": pl.Int64,
                "tv": pl.Float64,
                "lower": pl.Float64,
                "upper": pl.Float64,
                "n_documents": pl.Int64,
                "running": pl.Float64,
                "complete": pl.Boolean,
            }
        )
    strata = metrics.documents.select("model", "document", "stratum")
    al = al.join(strata, on=["model", "document"], how="left")
    max_depth = int(metrics.replicates["horizon"].max()) - 1
    rows: list[dict] = []
    for action in sorted(al["action"].unique().to_list()):
        for model, cell, sub in cells(al.filter(pl.col("action") == action)):
            w = row_weight(sub)
            g = sub.group_by("document", "depth").agg(
                (pl.col("tv") * w).sum().alias("s"),
                w.sum().alias("n"),
                (pl.col("pre_eos").cast(pl.Float64) * w).sum().alias("r"),
            )
            docs = sorted(g["document"].unique().to_list())
            di = {d: i for i, d in enumerate(docs)}
            s = np.zeros((len(docs), max_depth))
            c = np.zeros((len(docs), max_depth))
            r = np.zeros((len(docs), max_depth))
            idx = np.array([di[d] for d in g["document"].to_list()])
            dep = g["depth"].to_numpy() - 1
            s[idx, dep] = g["s"].to_numpy()
            c[idx, dep] = g["n"].to_numpy()
            r[idx, dep] = g["r"].to_numpy()
            running = r.sum(0) / np.where(c.sum(0) > 0, c.sum(0), np.nan)  # pairs with neither chain ended
            res = cluster_bootstrap(
                {"s": s, "c": c},
                lambda m: {"tv": m["s"] / np.where(m["c"] > 0, m["c"], np.nan)},
                n_boot,
                stat_seed(seed, "profile", model, cell, action),
                confidence,
            )
            est, lo, hi = res["tv"]
            for k in range(max_depth):
                if c[:, k].sum() > 0:
                    rows.append(
                        {
                            "model": model,
                            "stratum": cell,
                            "action": action,
                            "depth": k + 1,
                            "tv": float(est[k]),
                            "lower": float(lo[k]),
                            "upper": float(hi[k]),
                            "n_documents": len(docs),
                            "running": float(running[k]),
                            "complete": k + 1 <= max_depth + 1 - cohort_max_tau,
                        }
                    )
    return pl.DataFrame(rows)


def late_minus_early(
    metrics: Metrics,
    cohort_max_tau: int,
    early: Sequence[int],
    late: Sequence[int],
    n_boot: int,
    seed: int,
    confidence: float,
    by: str = "stratum",
) -> pl.DataFrame:
    """Late-minus-early branch-TV contrasts (all steps, and strictly before EOS) per model × cell × action."""
    al = metrics.aligned.filter(pl.col("tau") <= cohort_max_tau)
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
    if al.is_empty():
        return pl.DataFrame(schema=schema)
    al = al.join(metrics.documents.select("model", "document", by), on=["model", "document"], how="left")
    in_early = in_window(pl.col("depth"), early)
    in_late = in_window(pl.col("depth"), late)
    pre = pl.col("pre_eos")
    w = row_weight(al)
    wtv = pl.col("tv") * w
    doc = al.group_by("model", "document", by, "action").agg(
        wtv.filter(in_early).sum().alias("se"),
        w.filter(in_early).sum().alias("ne"),
        wtv.filter(in_late).sum().alias("sl"),
        w.filter(in_late).sum().alias("nl"),
        wtv.filter(in_early & pre).sum().alias("pse"),
        w.filter(in_early & pre).sum().alias("pne"),
        wtv.filter(in_late & pre).sum().alias("psl"),
        w.filter(in_late & pre).sum().alias("pnl"),
    )

    def ratio(num, den):
        return num / np.where(den > 0, den, np.nan)

    def stat(m):
        early_tv, late_tv = ratio(m["se"], m["ne"]), ratio(m["sl"], m["nl"])
        return {
            "early": early_tv,
            "late": late_tv,
            "late_minus_early": late_tv - early_tv,
            "late_minus_early_strict_pre_eos": m["paired"],  # a mean over the documents with both windows
        }

    rows: list[dict] = []
    for action in sorted(doc["action"].unique().to_list()):
        for model, cell, sub in cells(doc.filter(pl.col("action") == action), by=by):
            values = {k: sub[k].cast(pl.Float64).to_numpy() for k in ("se", "ne", "sl", "nl")}
            pse, pne, psl, pnl = (sub[k].cast(pl.Float64).to_numpy() for k in ("pse", "pne", "psl", "pnl"))
            both = (pne > 0) & (pnl > 0)  # pre-EOS steps in both windows: the paired documents (NaN elsewhere)
            with np.errstate(invalid="ignore", divide="ignore"):
                values["paired"] = np.where(
                    both, psl / np.where(both, pnl, 1.0) - pse / np.where(both, pne, 1.0), np.nan
                )
            res = cluster_bootstrap(
                values, stat, n_boot, stat_seed(seed, "late_early", model, by, cell, action), confidence
            )
            cell_rows = result_rows({"model": model, by: cell, "action": action, "n_documents": sub.height}, res)
            for r in cell_rows:
                if r["statistic"] == "late_minus_early_strict_pre_eos":
                    r["n_documents"] = int(both.sum())
            rows += cell_rows
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
