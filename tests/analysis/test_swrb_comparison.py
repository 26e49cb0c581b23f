"""kvdiv.analysis.swrb_comparison: the finite study's aggregates with bootstrap intervals, the enclosure from sampled
profiles, and the analysis item ``swrb`` on synthetic swrb and complete cubes with known answers (the complete
coupling's Var(M) estimated from swrb draws). The benchmark's tables: tests/test_swrb_analysis_benchmark.py."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from kvdiv.results.registry import get_result
from kvdiv.analysis.inputs import Metrics
from kvdiv.analysis.swrb_comparison import (
    retention_summary,
    study_cells,
    study_enclosures,
)
from kvdiv.finite.study import suite_aggregates
from kvdiv.metrics import compute_metrics
from support.synthetic_cube import simulate_cube


def _cells(vc, vs, cc, cs, documents):
    return pl.DataFrame(
        {
            "document": documents,
            "action": [f"a{i}" for i in range(len(vc))],
            "retention": 0.9,
            "complete_var_R_H": vc,
            "swrb_var_R_H": vs,
            "complete_pair_evaluations": cc,
            "swrb_pair_evaluations": cs,
            "variance_ratio_R_H": [c / s if s else math.nan for c, s in zip(vc, vs)],
        }
    )


def test_advantage_is_the_finite_studys_ratio_of_means():
    """The summary's advantage is mean(Var(M)·c̄_complete)/mean(Var(Z_R)·c̄_swrb) — suite_aggregates' — not
    the mean or median of per-cell advantages; the evaluation ratio is the mean of per-cell ratios."""
    vc, vs = [4.0, 1.0, 9.0], [1.0, 0.5, 0.1]
    cc, cs = [128.0, 128.0, 128.0], [256.0, 140.0, 200.0]
    table = _cells(vc, vs, cc, cs, ["d0", "d1", "d2"])
    summary = retention_summary(table, n_boot=50, seed=1)
    row = summary.row(0, named=True)
    expected = np.mean(np.multiply(vc, cc)) / np.mean(np.multiply(vs, cs))
    assert row["advantage_ratio_of_means"] == pytest.approx(expected)
    per_cell = np.array(vc) / np.array(vs) / (np.array(cs) / np.array(cc))
    assert not math.isclose(expected, per_cell.mean()) and not math.isclose(expected, np.median(per_cell))
    finite = pl.DataFrame(
        {
            "variance_ratio": np.array(vc) / np.array(vs),
            "naive_variance": vc,
            "swrb_variance": vs,
            "naive_evaluations": cc,
            "swrb_evaluations": cs,
            "evaluation_ratio": np.array(cs) / np.array(cc),
            "advantage": per_cell,
        }
    )
    ref = suite_aggregates(finite)
    for key in (
        "variance_ratio_min",
        "variance_ratio_median",
        "variance_ratio_max",
        "evaluation_ratio_mean",
        "advantage_ratio_of_means",
    ):
        assert row[key] == pytest.approx(ref[key])
    assert row["advantage_ratio_of_means_lo"] <= row["advantage_ratio_of_means"] <= row["advantage_ratio_of_means_hi"]


def test_bootstrap_resamples_documents():
    """One document: every resample is that document, so intervals collapse onto the estimate; a cell with
    zero variance in both modes leaves the ratio statistics and stays in the ratio of means."""
    table = _cells([4.0, 1.0, 0.0], [1.0, 0.5, 0.0], [128.0] * 3, [200.0] * 3, ["d0", "d0", "d0"])
    table = table.with_columns(pl.Series("variance_ratio_R_H", [4.0, 2.0, math.nan]))
    row = retention_summary(table, n_boot=20, seed=2).row(0, named=True)
    assert row["zero_variance_cells"] == 1 and row["documents"] == 1
    assert row["variance_ratio_median"] == pytest.approx(3.0)
    assert row["advantage_ratio_of_means"] == pytest.approx((5.0 * 128) / (1.5 * 200))
    assert row["advantage_ratio_of_means_lo"] == pytest.approx(row["advantage_ratio_of_means_hi"])


# ------------------------------------------------------------------ the analysis item swrb on synthetic cubes
STRATA = ("ruler_256", "helmet_256")


def exact_constant_tv(horizon: int, e: float) -> dict[str, float]:
    """Exact moments under a constant-TV persistent perturbation (tests/support/synthetic_cube.py): mismatches at
    t = 2..H are iid Bernoulli(e), so Var(M) = (H − 1)e(1 − e)/H²; SWRB: D = 1 − (1 − e)^{H−1}, J = j with
    probability w_j/D, w_j = (1 − e)^{j−2}e, and Z_R = D(1 + e(H − J))/H, enumerated over j."""
    h = horizon
    j = np.arange(2, h + 1)
    w = (1 - e) ** (j - 2) * e
    d = w.sum()
    z = d * (1 + e * (h - j)) / h
    mean_z = float((w / d * z).sum())
    return {
        "R_H": e * (h - 1) / h,
        "mean_Z_R": mean_z,
        "var_M": (h - 1) * e * (1 - e) / h**2,
        "var_Z_R": float((w / d * z**2).sum() - mean_z**2),
        "evaluation_ratio": float(1 + (w / d * (h - j) / h).sum()),
    }


def _metrics(ds, window: int) -> Metrics:
    t = compute_metrics(ds, window)
    return Metrics(t["replicates"], t["profiles_aligned"], t["profiles_clock"])


@pytest.fixture(scope="module")
def swrb_study():
    e, h = {"rare": 0.01, "often": 0.3}, 16
    ds = simulate_cube(e, n_documents=40, replicates=60, horizon=h, seed=21, strata=STRATA, swrb=True)
    return e, h, _metrics(ds, window=4)


def test_exact_constant_tv_helper_is_unbiased():
    for e in (0.01, 0.3):
        ex = exact_constant_tv(16, e)
        assert ex["mean_Z_R"] == pytest.approx(ex["R_H"])  # E[Z_R] = R_H
        assert ex["var_Z_R"] < ex["var_M"]  # conditioning removes variance (Rao–Blackwell)


def test_study_cells_estimate_the_complete_couplings_variance(swrb_study):
    """Var̂(M) from swrb rows and Var(Z_R) per cell average to the exact Var(M) and Var(Z_R); costs per H too."""
    e, h, m = swrb_study
    cells = study_cells(m.replicates)
    assert cells.height == 40 * 2 and (cells["complete_pair_evaluations"] == 1).all()
    assert (cells["variance_ratio_R_H"] >= 0).all()  # per cell max(Var̂(M), 0)
    clipped = cells["complete_var_R_H"].clip(lower_bound=0) / cells["swrb_var_R_H"]
    assert np.allclose(cells["variance_ratio_R_H"].to_numpy(), clipped.to_numpy(), equal_nan=True)
    for action, value in e.items():
        ex = exact_constant_tv(h, value)
        part = cells.filter(pl.col("action") == action)
        for column, truth in (
            ("complete_var_R_H", ex["var_M"]),
            ("swrb_var_R_H", ex["var_Z_R"]),
            ("swrb_pair_evaluations", ex["evaluation_ratio"]),
            ("swrb_mean_R_H", ex["R_H"]),
            ("complete_mean_R_H", ex["R_H"]),
        ):
            v = part[column].to_numpy()
            se = v.std(ddof=1) / math.sqrt(v.size)
            assert abs(v.mean() - truth) < 4 * se + 1e-7, (action, column, v.mean(), truth, se)  # float32 TV
    # without the D weight the second moment is that of the branch path alone: too large for the rare action
    rare = m.replicates.filter(pl.col("action") == "rare")
    unweighted = rare.group_by("document").agg((pl.col("mismatch") ** 2).mean() - pl.col("z_r").mean() ** 2)
    assert unweighted["mismatch"].mean() > 3 * exact_constant_tv(h, e["rare"])["var_M"]


def test_swrb_variance_table_recovers_the_exact_ratios(swrb_study):
    e, h, m = swrb_study
    table = get_result("swrb").build_table("variance", m, n_boot=200, seed=3, confidence=0.95)
    assert set(table["action"]) == {"rare", "often", "all"} and (table["n_documents"] == 40).all()
    for action, value in e.items():
        ex = exact_constant_tv(h, value)
        rows = {r["statistic"]: r for r in table.filter(pl.col("action") == action).iter_rows(named=True)}
        for stat, truth in (
            ("variance_ratio_of_means", ex["var_M"] / ex["var_Z_R"]),
            ("evaluation_ratio_mean", ex["evaluation_ratio"]),
            ("advantage_ratio_of_means", ex["var_M"] / (ex["var_Z_R"] * ex["evaluation_ratio"])),
        ):
            r = rows[stat]
            se = (r["upper"] - r["lower"]) / (2 * 1.96)
            assert abs(r["estimate"] - truth) < 4 * se, (action, stat, r, truth)
        assert (
            rows["variance_ratio_min"]["estimate"]
            <= rows["variance_ratio_median"]["estimate"]
            <= rows["variance_ratio_max"]["estimate"]
        )
    # a complete-mode study has no SWRB draws: the table is empty with the same columns
    complete = _metrics(simulate_cube(e, n_documents=4, replicates=5, horizon=h, seed=2, strata=STRATA), window=4)
    empty = get_result("swrb").build_table("variance", complete, n_boot=20, seed=3, confidence=0.95)
    assert empty.height == 0 and empty.columns == table.columns


def test_enclosure_matches_an_independent_formula_on_a_known_profile_set():
    """Per-document means of (R_L, B_L) fixed by hand: the bounds are mean ∓ z·sd/√n at α/2, written out here."""
    from scipy.stats import norm

    r_l = {"d0": [0.1, 0.3], "d1": [0.2, 0.2], "d2": [0.5, 0.1], "d3": [0.0, 0.2]}
    b_l = {"d0": [0.1, 0.1], "d1": [0.0, 0.2], "d2": [0.3, 0.1], "d3": [0.2, 0.0]}
    rows = [
        {
            "model": "m",
            "document": d,
            "family": "ruler",
            "target_length": 256,
            "stratum": "ruler_256",
            "action": "a",
            "replicate": k,
            "risk_window": r_l[d][k],
            "capacity": b_l[d][k],
            "mismatch": r_l[d][k] + b_l[d][k] / 2,
            "weight": 1.0,
            "diverged": True,
            "tau": 1,
        }
        for d in r_l
        for k in range(2)
    ]
    frame = pl.DataFrame(rows)
    for c in (
        "occurrence",
        "exposure",
        "occupation",
        "risk_tv",
        "fixed_tv_mean",
        "mismatch_pre_eos",
        "mismatch_post_eos",
        "mismatch_strict_pre_eos",
    ):
        frame = frame.with_columns(pl.lit(0.0).alias(c))
    out = study_enclosures(frame, alpha=0.1, n_boot=50, seed=1, confidence=0.9).row(0, named=True)
    low = np.array([np.mean(v) for v in r_l.values()])
    high = low + np.array([np.mean(v) for v in b_l.values()])
    z = norm.ppf(1 - 0.05)
    assert out["enclosure_lower"] == pytest.approx(low.mean() - z * low.std(ddof=1) / 2)
    assert out["enclosure_upper"] == pytest.approx(high.mean() + z * high.std(ddof=1) / 2)
    assert out["R_L"] == pytest.approx(low.mean()) and out["n_documents"] == 4 and out["alpha"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="2 documents"):
        study_enclosures(frame.filter(pl.col("document") == "d0"), alpha=0.1, n_boot=5, seed=1, confidence=0.9)


@pytest.mark.parametrize("swrb", [True, False], ids=["swrb", "complete"])
def test_enclosure_holds_the_exact_risk_in_either_mode(swrb):
    """On cubes with a known R_H = e(H − 1)/H the enclosure at window L holds it and is narrower with a
    deeper window."""
    e, h = {"a": 0.05, "b": 0.2}, 32
    ds = simulate_cube(e, n_documents=30, replicates=20, horizon=h, seed=9, strata=STRATA, swrb=swrb)
    widths = {}
    for window in (4, 16):
        enc = get_result("swrb").build_table("enclosure", _metrics(ds, window), n_boot=100, seed=1, confidence=0.95)
        assert (enc["window"] == window).all() and np.allclose(enc["alpha"].to_numpy(), 0.05)
        for r in enc.iter_rows(named=True):
            truth = e[r["action"]] * (h - 1) / h
            assert r["enclosure_lower"] <= truth <= r["enclosure_upper"], (window, r)
            assert r["R_H_inside"] and r["R_H_lower"] <= truth <= r["R_H_upper"]
            widths[window, r["action"]] = r["enclosure_upper"] - r["enclosure_lower"]
    assert all(widths[16, a] < widths[4, a] for a in e)
