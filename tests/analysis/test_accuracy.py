"""kvdiv.analysis.accuracy: the accuracy table against a direct computation of its document means and of its
cluster bootstrap (same resample counts, written out with numpy), and its refusals."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kvdiv.analysis.accuracy import STATISTICS, accuracy_table
from kvdiv.analysis.bootstrap import bootstrap_counts, stat_seed
from kvdiv.analysis.inputs import POOLED, Metrics


def replicates(seed: int = 3, n_docs: int = 9, n_rep: int = 4, horizon: int = 16) -> pl.DataFrame:
    """Random rows with consistent answer columns: scores in {0, 0.5, 1}, τ and answer_end drawn independently."""
    rng = np.random.default_rng(seed)
    rows = []
    for d in range(n_docs):
        stratum = ("ruler_256", "helmet_256")[d % 2]
        for action in ("a", "b"):
            for r in range(n_rep):
                tau = int(rng.integers(1, horizon + 1)) if rng.random() < 0.7 else None
                end = int(rng.integers(1, horizon + 1)) if rng.random() < 0.8 else None
                cx, cy = (float(v) for v in rng.choice([0.0, 0.5, 1.0], size=2))
                rows.append(
                    {
                        "model": "m",
                        "study": "s",
                        "document": f"s-{stratum}-{d:04d}",
                        "family": stratum[:-4],
                        "target_length": 256,
                        "stratum": stratum,
                        "action": action,
                        "replicate": r,
                        "tau": tau,
                        "correct_x": cx,
                        "correct_y": cy,
                        "answer_changed": cx != cy,
                        "answer_end": end,
                        "diverged_before_answer": None if end is None else (tau is not None and tau <= end),
                    }
                )
    return pl.DataFrame(rows)


def direct(rep: pl.DataFrame, action: str, stratum: str, n_boot: int, seed: int, confidence: float) -> dict:
    """Point estimates and percentile intervals computed from the rows with explicit loops over documents."""
    sub = rep.filter(pl.col("action") == action)
    if stratum != POOLED:
        sub = sub.filter(pl.col("stratum") == stratum)
    docs = sorted(set(sub["document"].to_list()))
    per = np.zeros((len(docs), 7))  # cx, cy, changed, early, late, cy·early, cy·late
    for i, doc in enumerate(docs):
        rows = sub.filter(pl.col("document") == doc).to_dicts()
        for row in rows:
            early = row["answer_end"] is not None and row["tau"] is not None and row["tau"] <= row["answer_end"]
            late = row["answer_end"] is not None and row["tau"] is not None and row["tau"] > row["answer_end"]
            per[i] += [
                row["correct_x"],
                row["correct_y"],
                row["answer_changed"],
                early,
                late,
                row["correct_y"] * early,
                row["correct_y"] * late,
            ]
        per[i] /= len(rows)

    def stats(m):  # m: [..., 7] means
        with np.errstate(invalid="ignore", divide="ignore"):
            return {
                "accuracy_x": m[..., 0],
                "accuracy_y": m[..., 1],
                "accuracy_gap": m[..., 0] - m[..., 1],
                "answer_changed": m[..., 2],
                "share_early": m[..., 3],
                "share_late": m[..., 4],
                "accuracy_y_early": m[..., 5] / m[..., 3],
                "accuracy_y_late": m[..., 6] / m[..., 4],
            }

    counts = bootstrap_counts(len(docs), n_boot, stat_seed(seed, "accuracy", "m", stratum, action)) / len(docs)
    point, boot = stats(per.mean(axis=0)), stats(counts @ per)
    alpha = (1 - confidence) / 2
    return {
        k: (float(point[k]), float(np.nanquantile(boot[k], alpha)), float(np.nanquantile(boot[k], 1 - alpha)))
        for k in STATISTICS
    }


def test_accuracy_table_equals_direct_computation():
    rep = replicates()
    table = accuracy_table(Metrics(rep, pl.DataFrame(), pl.DataFrame()), n_boot=300, seed=11, confidence=0.9)
    assert set(table["statistic"].unique()) == set(STATISTICS)
    for action in ("a", "b"):
        for stratum in ("ruler_256", "helmet_256", POOLED):
            want = direct(rep, action, stratum, 300, 11, 0.9)
            for stat, (est, lo, hi) in want.items():
                row = table.filter(
                    (pl.col("action") == action) & (pl.col("stratum") == stratum) & (pl.col("statistic") == stat)
                ).row(0, named=True)
                assert (row["estimate"], row["lower"], row["upper"]) == pytest.approx((est, lo, hi), abs=1e-12), (
                    action,
                    stratum,
                    stat,
                )
    n_docs = table.filter((pl.col("stratum") == POOLED))["n_documents"].unique().to_list()
    assert n_docs == [9]


def test_no_early_divergence_gives_no_conditional_accuracy():
    rep = replicates().with_columns(
        pl.lit(None, dtype=pl.Int64).alias("tau"), pl.col("diverged_before_answer").and_(False)
    )
    table = accuracy_table(Metrics(rep, pl.DataFrame(), pl.DataFrame()), n_boot=50, seed=1, confidence=0.95)
    cond = table.filter(pl.col("statistic").is_in(["accuracy_y_early", "accuracy_y_late"]))
    assert cond["estimate"].is_nan().all()
    assert table.filter(pl.col("statistic") == "share_early")["estimate"].to_list() == [0.0] * 6


def test_swrb_metrics_and_metrics_without_answers_are_refused():
    rep = replicates()
    with pytest.raises(ValueError, match="mode 'swrb'"):
        accuracy_table(Metrics(rep.with_columns(pl.lit(1.0).alias("z_r")), pl.DataFrame(), pl.DataFrame()), 10, 0, 0.95)
    with pytest.raises(ValueError, match="lack column 'correct_x'"):
        accuracy_table(Metrics(rep.drop("correct_x"), pl.DataFrame(), pl.DataFrame()), 10, 0, 0.95)
