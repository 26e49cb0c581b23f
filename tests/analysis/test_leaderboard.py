"""kvdiv.analysis.leaderboard and kvdiv.results.leaderboard: the ranking on a synthetic cube whose actions have known
divergence hazards, point estimates against a direct computation from the rows, and the written files."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kvdiv.analysis.inputs import Metrics
from kvdiv.analysis.leaderboard import leaderboard_table
from kvdiv.metrics import compute_metrics
from kvdiv.results.leaderboard import display_frame, press_name, retention, write_leaderboard, read_markdown
from support.synthetic_cube import simulate_cube

HAZARDS = {"low": 0.01, "mid": 0.05, "high": 0.2}


@pytest.fixture(scope="module")
def metrics():
    ds = simulate_cube(HAZARDS, n_documents=12, replicates=40, horizon=32, seed=5)
    rep = compute_metrics(ds, window=4)["replicates"]
    rng = np.random.default_rng(0)
    cy = rng.choice([0.0, 1.0], size=rep.height)
    rep = rep.with_columns(
        pl.Series("correct_x", np.ones(rep.height)),
        pl.Series("correct_y", cy),
        pl.Series("answer_changed", cy != 1.0),
        pl.lit(None, dtype=pl.Int32).alias("answer_end"),
        pl.lit(None, dtype=pl.Boolean).alias("diverged_before_answer"),
    )
    return Metrics(rep, pl.DataFrame(), pl.DataFrame())


def test_ranking_follows_the_known_hazards(metrics):
    table = leaderboard_table(metrics, n_boot=200, seed=1, confidence=0.95, steps=[8, 16])
    assert table["action"].to_list() == ["low", "mid", "high"] and table["rank"].to_list() == [1, 2, 3]
    # constant hazard e from step 2 on: P(τ ≤ h) = 1 − (1 − e)^(h−1), C = e; intervals cover them
    for row in table.iter_rows(named=True):
        e = HAZARDS[row["action"]]
        for h in (8, 16, 32):
            p = 1 - (1 - e) ** (h - 1)
            assert row[f"diverged_by_{h}_lower"] - 0.02 <= p <= row[f"diverged_by_{h}_upper"] + 0.02, (row["action"], h)
        assert row["mismatch_rate_lower"] - 0.01 <= e <= row["mismatch_rate_upper"] + 0.01
        assert row["accuracy_x"] == 1.0


def test_point_estimates_equal_direct_means(metrics):
    table = leaderboard_table(metrics, n_boot=50, seed=1, confidence=0.95, steps=[8])
    rep = metrics.replicates
    for row in table.iter_rows(named=True):
        sub = rep.filter(pl.col("action") == row["action"])
        docs = sub.group_by("document").agg(
            pl.col("mismatch").mean(),
            pl.col("exposure").mean(),
            pl.col("occupation").mean(),
            pl.col("diverged").cast(pl.Float64).mean(),
            (pl.col("tau").fill_null(0)).cast(pl.Float64).mean().alias("tau"),
            (pl.col("tau") <= 8).fill_null(False).cast(pl.Float64).mean().alias("by8"),
            pl.col("correct_y").mean(),
        )
        assert row["risk"] == pytest.approx(docs["mismatch"].mean())
        assert row["exposure"] == pytest.approx(docs["exposure"].mean())
        assert row["mismatch_rate"] == pytest.approx(docs["occupation"].mean() / docs["exposure"].mean())
        assert row["mean_tau_diverged"] == pytest.approx(docs["tau"].mean() / docs["diverged"].mean())
        assert row["diverged_by_8"] == pytest.approx(docs["by8"].mean())
        assert row["diverged_by_32"] == pytest.approx(docs["diverged"].mean())
        assert row["accuracy_y"] == pytest.approx(docs["correct_y"].mean())
        assert row["n_documents"] == 12


def test_steps_outside_the_horizon_are_refused(metrics):
    with pytest.raises(ValueError, match="step 40 is outside 1..H = 32"):
        leaderboard_table(metrics, n_boot=10, seed=1, confidence=0.95, steps=[40])


def test_write_leaderboard(metrics, tmp_path):
    table = leaderboard_table(metrics, n_boot=50, seed=1, confidence=0.95)
    actions = {
        "low": {"press": "AdaKVPress", "wraps": {"press": "SnapKVPress", "compression_ratio": 0.1}},
        "mid": {"press": "KnormPress", "compression_ratio": 0.5},
        "high": {"press": "RandomPress", "compression_ratio": 0.5},
    }
    assert press_name(actions["low"]) == "AdaKVPress(SnapKVPress)" and retention(actions["low"]) == pytest.approx(0.9)
    decoding = {
        "press": "DecodingPress",
        "target_size": 512,
        "compression_interval": 32,
        "wraps": {"press": "KnormPress", "compression_ratio": 0.5},
    }  # the scorer's own ratio is overridden
    assert press_name(decoding) == "DecodingPress(KnormPress; target_size 512, compression_interval 32)"
    assert retention(decoding) is None
    both = {
        "press": "PrefillDecodingPress",
        "prefilling_press": {"press": "SnapKVPress", "compression_ratio": 0.75},
        "decoding_press": decoding,
    }
    assert press_name(both) == (
        "PrefillDecodingPress(SnapKVPress, DecodingPress(KnormPress; target_size 512, compression_interval 32))"
    )
    assert retention(both) == pytest.approx(0.25)
    ratio = {
        "press": "CompressionRatioDecodingPress",
        "target_compression_ratio": 0.4,
        "base_press": {"press": "TOVAPress"},
    }
    assert press_name(ratio) == "CompressionRatioDecodingPress(TOVAPress; target_compression_ratio 0.4)"
    assert retention(ratio) == pytest.approx(0.6)
    paths = [tmp_path / f"synthetic.{ext}" for ext in ("csv", "md", "pdf", "png")]
    numbers = write_leaderboard(table, actions, paths, caption="cap", dpi=60)
    csv = pl.read_csv(paths[0])
    assert csv["action"].to_list() == ["low", "mid", "high"] and csv["press"][0] == "AdaKVPress(SnapKVPress)"
    assert csv["risk"].to_list() == pytest.approx(numbers["risk"].to_list())
    md = paths[1].read_text()
    assert md.startswith("cap\n") and "| 1 | low | AdaKVPress(SnapKVPress) | 90% | 12 |" in md
    assert all(p.stat().st_size > 1000 for p in paths[2:])
    assert display_frame(numbers).columns[:5] == ["rank", "action", "press", "retention", "documents"]


def test_read_markdown_recovers_the_numbers_to_the_digits_printed(metrics, tmp_path):
    """A leaderboard kept only as Markdown (docs/decoding-smollm2) is redrawn from read_markdown: every number of
    the CSV back to within half the last printed digit (0.05 pp, 0.05 step), missing values missing."""
    table = leaderboard_table(metrics, n_boot=50, seed=1, confidence=0.95, steps=[8])
    actions = {a: {"press": "KnormPress", "compression_ratio": 0.5} for a in HAZARDS}
    actions["low"] = {"press": "DecodingPress", "target_size": 64, "compression_interval": 8}
    paths = [tmp_path / f"lb.{ext}" for ext in ("csv", "md", "pdf", "png")]
    numbers = write_leaderboard(table, actions, paths, caption="cap", dpi=50)
    back = read_markdown(paths[1], "synthetic")
    assert back.columns == numbers.columns and back["action"].to_list() == numbers["action"].to_list()
    for col in numbers.columns:
        if numbers[col].dtype == pl.Float64 and col != "retention":
            tol = 0.05 if col.startswith("mean_tau") else 0.0005
            a, b = numbers[col].to_numpy(), back[col].cast(pl.Float64).to_numpy()
            assert np.array_equal(np.isnan(a), np.isnan(b)) and np.nanmax(np.abs(a - b)) <= tol + 1e-12, col
    assert back["retention"].to_list() == [None, 0.5, 0.5] and back["press"][0] == numbers["press"][0]
    with pytest.raises(ValueError, match="no Markdown table"):
        read_markdown(paths[0], "synthetic")
