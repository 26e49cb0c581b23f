"""Table 3: do generation positions 1–32 or the fixed-history TV recover the full-horizon gap?

Features from positions 1–32 only (``short_window``: the observed mismatch gap; ``fixed_history``: the
fixed-history TV gap); methods ``raw``, ``cell_mean`` and ``ridge`` (calibrated ones fitted out-of-fold over
documents) and the baseline ``intercept`` (the training documents' mean gap, no feature: what any calibrated predictor
recovers by construction); a predictor *recovers* the gap when the bootstrap interval of mean(ŷ) − mean(y) lies
within ±``criterion`` (2 pp). Each bootstrap resample of documents refits the calibrated predictors (new folds over
its documents), so the interval includes the fit's variability. The method: docs/estimators.md#table-3-predictors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kvdiv.analysis.bootstrap import bootstrap_counts, stat_seed
from kvdiv.analysis.inputs import (
    Metrics,
    applicable_contrasts,
    contrast_pairs,
    contrast_name,
    document_means,
    is_swrb,
    paired,
    study_names,
)
from kvdiv.analysis.windows import in_window


def _folds(n: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.permutation(np.arange(n) % max(1, min(k, n)))


def cross_fit_predictions(
    y: np.ndarray, feature: np.ndarray, cells: np.ndarray, folds: np.ndarray, alpha: float
) -> dict[str, np.ndarray]:
    """Out-of-fold predictions ŷ of the full-horizon gap from one feature: raw, cell_mean, ridge."""
    n = y.size
    pred = {"raw": feature.copy(), "cell_mean": np.empty(n), "ridge": np.empty(n), "intercept": np.empty(n)}
    levels = np.unique(cells)
    onehot = (cells[:, None] == levels[None, :]).astype(float)
    design = np.column_stack([feature, onehot[:, 1:]]) if levels.size > 1 else feature[:, None]
    for f in np.unique(folds):
        test, train = folds == f, folds != f
        if not train.any():  # a single fold: fit on everything
            train = np.ones(n, dtype=bool)
        resid = y[train] - feature[train]
        overall = resid.mean()
        pred["intercept"][test] = y[train].mean()
        for lev in levels:
            sel = train & (cells == lev)
            offset = (y[sel] - feature[sel]).mean() if sel.any() else overall
            pred["cell_mean"][test & (cells == lev)] = feature[test & (cells == lev)] + offset
        x_tr = design[train]
        mu, sd = x_tr.mean(0), x_tr.std(0)
        sd = np.where(sd > 0, sd, 1.0)
        z_tr = (x_tr - mu) / sd
        y_mu = y[train].mean()
        coef = np.linalg.solve(z_tr.T @ z_tr + alpha * np.eye(z_tr.shape[1]), z_tr.T @ (y[train] - y_mu))
        pred["ridge"][test] = y_mu + ((design[test] - mu) / sd) @ coef
    return pred


def _refit_intervals(
    y: np.ndarray,
    feature: np.ndarray,
    cells: np.ndarray,
    n_folds: int,
    alpha: float,
    n_boot: int,
    seed: int,
    confidence: float,
) -> dict[str, tuple[float, float]]:
    """Percentile intervals of mean(ŷ) − mean(y) per method over a cluster bootstrap of documents that refits the
    predictors on every resample: its documents get new folds (a resampled document's copies share a fold), and the
    cross-fitted predictions of the resample give its difference."""
    n = y.size
    counts = bootstrap_counts(n, n_boot, seed)
    draws: dict[str, list[float]] = {}
    for b in range(n_boot):
        idx = np.repeat(np.arange(n), counts[b])
        fold_of = _folds(n, n_folds, stat_seed(seed, "refit", b))
        pred = cross_fit_predictions(y[idx], feature[idx], cells[idx], fold_of[idx], alpha)
        for method, yhat in pred.items():
            draws.setdefault(method, []).append(float(yhat.mean() - y[idx].mean()))
    tail = (1.0 - confidence) / 2.0
    return {m: (float(np.quantile(d, tail)), float(np.quantile(d, 1 - tail))) for m, d in draws.items()}


def prediction_table(
    metrics: Metrics,
    contrast: Sequence,
    short_window: Sequence[int],
    n_boot: int,
    seed: int,
    confidence: float,
    folds: int = 5,
    ridge_alpha: float = 1.0,
    criterion: float = 0.02,
) -> pl.DataFrame:
    """Table 3 for ``contrast``: one pair ``[a, b]`` or a list of pairs (the rows of each, in order; see
    :func:`contrast_table`)."""
    frames = [
        contrast_table(metrics, pair, short_window, n_boot, seed, confidence, folds, ridge_alpha, criterion)
        for pair in contrast_pairs(contrast)
    ]
    return pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0]


def contrast_table(
    metrics: Metrics,
    contrast: Sequence[str],
    short_window: Sequence[int],
    n_boot: int,
    seed: int,
    confidence: float,
    folds: int = 5,
    ridge_alpha: float = 1.0,
    criterion: float = 0.02,
) -> pl.DataFrame:
    """Table 3 of one contrast: does the positions-1–32 window or the fixed-history TV recover the full-horizon gap?

    Needs complete-mode metrics: in swrb mode the stores hold no fixed-history TV along the reference
    continuation x (only the branch path), so the fixed-history predictor is undefined and a
    ``ValueError`` naming the study and the mode is raised instead of a table of NaN.
    """
    a, b = contrast
    rep = metrics.replicates
    if is_swrb(rep):
        raise ValueError(
            f"Table 3: study {study_names(rep)} ran in mode 'swrb', where the fixed-history predictor "
            f"is undefined (swrb stores carry no fixed-history TV along the reference continuation x); feed Table 3 "
            f"a study in mode 'complete' (config analysis.studies.table3)"
        )
    doc = document_means(metrics.replicates)
    if not applicable_contrasts([contrast], doc["action"].unique()):
        raise ValueError(f"analysis.table3_contrast {list(contrast)!r}: actions not in the study's metrics")
    wide = paired(doc, a, b, ["mismatch"])
    short = (
        metrics.clock.filter(in_window(pl.col("step"), short_window))
        .group_by("model", "document", "action")
        .agg(pl.col("mismatch").mean(), pl.col("fixed_tv").mean())
    )
    sw = (
        short.filter(pl.col("action") == a)
        .select("model", "document", pl.col("mismatch").alias("sa"), pl.col("fixed_tv").alias("fa"))
        .join(
            short.filter(pl.col("action") == b).select(
                "model", "document", pl.col("mismatch").alias("sb"), pl.col("fixed_tv").alias("fb")
            ),
            on=["model", "document"],
        )
    )
    wide = wide.join(sw, on=["model", "document"]).sort("model", "document")
    rows: list[dict] = []
    for model in sorted(wide["model"].unique().to_list()):
        sub = wide.filter(pl.col("model") == model)
        y = (sub["mismatch_a"] - sub["mismatch_b"]).to_numpy()
        features = {
            "short_window": (sub["sa"] - sub["sb"]).to_numpy(),
            "fixed_history": (sub["fa"] - sub["fb"]).to_numpy(),
        }
        cells = sub["stratum"].to_numpy().astype(str)
        fold = _folds(y.size, folds, stat_seed(seed, "table3_folds", model))
        for fname, feat in features.items():
            predictions = cross_fit_predictions(y, feat, cells, fold, ridge_alpha)
            intervals = _refit_intervals(
                y, feat, cells, folds, ridge_alpha, n_boot, stat_seed(seed, "table3", model, fname), confidence
            )
            for method, yhat in predictions.items():
                d_lo, d_hi = intervals[method]
                err = yhat - y
                d_est = float(yhat.mean() - y.mean())
                rows.append(
                    {
                        "model": model,
                        "contrast": contrast_name(a, b),
                        "predictor": fname,
                        "method": method,
                        "n_documents": int(y.size),
                        "population_gap": float(y.mean()),
                        "predicted_gap": float(yhat.mean()),
                        "difference": d_est,
                        "lower": float(d_lo),
                        "upper": float(d_hi),
                        "point_within": bool(abs(d_est) <= criterion),
                        "interval_within": bool(-criterion <= d_lo and d_hi <= criterion),
                        "mae": float(np.abs(err).mean()),
                        "rmse": float(np.sqrt((err**2).mean())),
                    }
                )
    return pl.DataFrame(rows)
