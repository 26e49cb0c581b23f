"""benchmarks/swrb_analysis.py, the complete-vs-swrb benchmark's tables: both modes unbiased against exact values on
a toy kernel session, the per-cell variance ratios and the mean-agreement check on known variances, the pooled z and
the across-cells t, and the enclosure per action from document means."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from kvdiv.estimands import enclosure
from kvdiv.metrics import trajectory_replicates
from support.toy_kernels import ToyKernelSession, constant_kernel
from kvdiv.trajectories.generate import generate
from kvdiv.settings import generation

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "swrb_analysis.py"
_spec = importlib.util.spec_from_file_location("swrb_analysis", SCRIPT)
swrb_analysis = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(swrb_analysis)
across_cells_t = swrb_analysis.across_cells_t
action_enclosures = swrb_analysis.action_enclosures
agreement_table = swrb_analysis.agreement_table
comparison_table = swrb_analysis.comparison_table
pooled_z = swrb_analysis.pooled_z
with_divergence = swrb_analysis.with_divergence

P0 = [0.5, 0.3, 0.2]
Q0 = [0.3, 0.3, 0.4]
E = 0.2  # TV(P0, Q0)


def exact_iid(horizon: int, window: int, e: float = E) -> dict[str, float]:
    """R_H, R_L, B_L of history-independent kernels with TV e from step 2 on (δ_1 = 0: step 1 from P)."""
    H, L = horizon, window
    p_tau = {j: (1 - e) ** (j - 2) * e for j in range(2, H + 1)}
    r_l = sum(p * (1 + e * min(L, H - j)) for j, p in p_tau.items()) / H
    b_l = sum(p * max(0, H - j - L) for j, p in p_tau.items()) / H
    return {"R_H": e * (H - 1) / H, "R_L": r_l, "B_L": b_l}


def test_exact_iid_helper_is_consistent():
    """With L ≥ H the window holds everything: R_L = R_H and B_L = 0."""
    ex = exact_iid(6, 6)
    assert ex["R_L"] == pytest.approx(ex["R_H"])
    assert ex["B_L"] == 0.0


def _both_modes(session_factory, actions, horizon, replicates, window, document="doc"):
    frames = []
    for mode, stream in (("complete", 1), ("swrb", 2)):
        session = session_factory()
        out = generate(
            session,
            actions,
            generation(master_seed=7, study_seed=stream, horizon=horizon, replicates=replicates, mode=mode),
            eos_token_ids=[],
            progress=False,
            document_id=document,
        )
        frame = trajectory_replicates(out, mode, window, document)
        # the reconstruction of rows equals what the session was handed (trajectory_replicates also checks the
        # generation's own count and raises on a mismatch)
        assert int(frame["rows"].sum()) == session.step_rows
        frames.append(frame)
    return pl.concat(frames)


def test_both_modes_are_unbiased_against_exact_values():
    """Means of M, M_L, capacity (complete) and Z_R, Z_L, W_L (swrb) match the exact R_H, R_L, B_L."""
    H, L, R = 8, 2, 3000
    factory = lambda: ToyKernelSession(constant_kernel(P0), {"q": constant_kernel(Q0)})  # noqa: E731
    frame = with_divergence(_both_modes(factory, ["q"], H, R, L))
    exact = exact_iid(H, L) | {"P_div": 1 - (1 - E) ** (H - 1)}
    table = comparison_table(frame, keys=("R_H", "R_L", "B_L", "P_div"))
    for key, value in exact.items():
        for mode in ("complete", "swrb"):
            mean, se = table[f"{mode}_mean_{key}"][0], table[f"{mode}_se_{key}"][0]
            assert abs(mean - value) < 4 * se + 1e-7, (key, mode, mean, value, se)  # float32 TVs
    # the complete mode's TV-integrated risk is exact per replicate here: δ_t = e from step 2 on
    assert table["complete_var_risk_tv"][0] == pytest.approx(0.0, abs=1e-20)
    # SWRB integrates out the agreement event: a large variance reduction for R_H
    assert table["variance_ratio_R_H"][0] > 2
    agree = agreement_table(table, by=("action",))
    assert agree["agrees"].all() and agree["p"].is_nan().all()  # one cell: no across-cells t


def synthetic_replicates(
    sd: dict[str, tuple[float, float]],
    means: dict[str, float],
    documents: int,
    replicates: int,
    seed: int,
    shift: float = 0.0,
) -> pl.DataFrame:
    """Normal per-replicate values: action → (sd complete, sd swrb); swrb means shifted by ``shift``."""
    rng = np.random.default_rng(seed)
    frames = []
    for d in range(documents):
        for action, (sc, ss) in sd.items():
            for mode, s, cost in (("complete", sc, 128.0), ("swrb", ss, 160.0)):
                mu = means[action] + (shift if mode == "swrb" else 0.0)
                values = {k: rng.normal(mu, s, replicates) for k in ("R_H", "R_L", "B_L")}
                frames.append(
                    pl.DataFrame(
                        {
                            "document": f"d{d}",
                            "action": action,
                            "mode": mode,
                            "replicate": np.arange(replicates),
                            **values,
                            "risk_tv": values["R_H"],
                            "pair_evaluations": np.full(replicates, cost),
                            "rows": np.full(replicates, 2 * cost),
                            "wall_s": np.full(replicates, cost / 100),
                        }
                    )
                )
    return pl.concat(frames)


def test_variance_ratios_and_agreement_on_known_variances():
    """Known variances give the ratio within its sampling error; equal means agree, a shift does not."""
    sd = {"a": (0.3, 0.1), "b": (0.2, 0.2)}
    means = {"a": 0.5, "b": 0.2}
    R = 4000
    frame = synthetic_replicates(sd, means, documents=3, replicates=R, seed=3)
    table = comparison_table(frame, retention={"a": 0.5, "b": 0.9})
    # log of a variance ratio of normals has sd √(2/(R−1) · 2)
    tol = 4 * math.sqrt(4 / (R - 1))
    for row in table.iter_rows(named=True):
        sc, ss = sd[row["action"]]
        assert abs(math.log(row["variance_ratio_R_H"]) - math.log(sc**2 / ss**2)) < tol
        assert row["evaluation_ratio"] == pytest.approx(160 / 128)
        assert row["advantage"] == pytest.approx(row["variance_ratio_R_H"] * 128 / 160)
    agree = agreement_table(table, by=("retention",))
    assert agree.height == 2 * 3
    assert (agree["z"].abs() < 4).all()
    assert agree["agrees"].all()
    assert (agreement_table(table, by=None)["p"] > 0.01).all()
    # a shift of the swrb means by ≈ 5 standard errors fails both checks
    shifted = comparison_table(
        synthetic_replicates(sd, means, 3, R, seed=3, shift=0.02), retention={"a": 0.5, "b": 0.9}
    )
    assert not agreement_table(shifted)["agrees"].any()
    assert (agreement_table(shifted, by=None)["p"] < 0.01).all()


def test_pooled_z_and_across_cells_t():
    assert pooled_z(np.array([1.0, -1.0, 2.0]), np.array([1.0, 1.0, 0.0])) == pytest.approx(2.0 / math.sqrt(2.0))
    d = np.array([1.0, 2.0, 3.0])
    t, p = across_cells_t(d)
    assert t == pytest.approx(2.0 / (1.0 / math.sqrt(3)))
    assert p == pytest.approx(2 * stats.t.sf(t, 2))
    assert across_cells_t(np.zeros(4)) == (0.0, 1.0)


def test_across_cells_standard_error_is_unbiased_with_unequal_variances():
    """E[sd(d)²/n] = Σσ_i²/n² = Var(mean d) for independent cells with their own variances (the t's premise)."""
    rng = np.random.default_rng(5)
    sds = np.array([0.001, 0.01, 0.1, 0.3, 0.05, 0.2, 0.02, 0.5])
    n = sds.size
    draws = rng.normal(0.0, sds, size=(20000, n))
    est = draws.var(axis=1, ddof=1) / n
    truth = float(np.sum(sds**2) / n**2)
    assert abs(est.mean() - truth) < 4 * est.std() / math.sqrt(len(est))
    t = np.array([across_cells_t(row)[0] for row in draws[:200]])
    assert np.allclose(t, draws[:200].mean(axis=1) / np.sqrt(est[:200]))


def test_action_enclosures_use_document_means():
    sd = {"a": (0.3, 0.1)}
    frame = synthetic_replicates(sd, {"a": 0.4}, documents=5, replicates=30, seed=4)
    enc = action_enclosures(frame, alpha=0.1).row(0, named=True)
    doc = (
        frame.filter(pl.col("mode") == "swrb")
        .group_by("document")
        .agg(pl.col("R_L").mean(), pl.col("B_L").mean())
        .sort("document")
    )
    lo, hi = enclosure(doc["R_L"].to_numpy(), doc["B_L"].to_numpy(), 0.1)
    assert (enc["enclosure_lower"], enc["enclosure_upper"]) == pytest.approx((lo, hi))
    assert enc["documents"] == 5
    with pytest.raises(ValueError, match="2 documents"):
        action_enclosures(frame.filter(pl.col("document") == "d0"))
