"""Verdicts of contrasts against the paper's direction (kvdiv.analysis.verdicts): the rule on hand-made intervals,
on synthetic studies built to hit each verdict, the check of analysis.directions, and the report's column."""

from __future__ import annotations

import polars as pl
import pytest

from kvdiv.analysis import inputs
from kvdiv.results.registry import get_result
from kvdiv.analysis.verdicts import check_directions, contrast_verdicts, verdict
from kvdiv.io import write_parquet
from kvdiv.metrics import compute_metrics
from kvdiv.results.report import build_report
from support.synthetic_cube import simulate_cube


@pytest.mark.parametrize(
    "lower, upper, direction, expected",
    [
        (-0.3, -0.1, "lower", "consistent"),
        (0.1, 0.3, "higher", "consistent"),
        (0.1, 0.3, "lower", "contradicted"),
        (-0.3, -0.1, "higher", "contradicted"),
        (-0.2, 0.1, "lower", "inconclusive"),
        (-0.2, 0.1, "higher", "inconclusive"),
        (-0.2, 0.0, "lower", "inconclusive"),  # touching 0 does not exclude it
        (0.0, 0.2, "higher", "inconclusive"),
        (0.0, 0.0, "lower", "inconclusive"),
        (float("nan"), 0.1, "lower", "inconclusive"),
        (None, None, "higher", "inconclusive"),
        (-0.3, -0.1, None, "no claim"),
    ],
)
def test_verdict_rule(lower, upper, direction, expected):
    assert verdict(lower, upper, direction) == expected


def test_verdict_rejects_bad_input():
    with pytest.raises(ValueError, match="direction must be one of lower, higher"):
        verdict(-1, 1, "down")
    with pytest.raises(ValueError, match="lower > upper"):
        verdict(1, -1, "lower")


def test_check_directions_names_the_bad_entry():
    contrasts = [["a", "b"], ["c", "b"]]
    assert check_directions([["a", "b", "lower"], ["c", "b", "higher"]], contrasts) == {
        "a − b": "lower",
        "c − b": "higher",
    }
    assert check_directions([], contrasts) == {}
    for bad, match in [
        ([["a", "b", "down"]], r"directions\[0\].*direction must be one of lower, higher"),
        ([["b", "a", "lower"]], r"directions\[0\].*\[b, a\] is not in analysis.contrasts"),
        ([["a", "b"]], r"directions\[0\].*expected \[a, b, direction\]"),
        ([["a", "b", "lower"], ["a", "b", "higher"]], r"directions\[1\].*twice"),
    ]:
        with pytest.raises(ValueError, match=match):
            check_directions(bad, contrasts)


# Synthetic study: constant per-step TV e per action. A larger e diverges earlier and more often, hence a larger
# mismatch risk, so the gap's sign follows the TVs; "same" has the same e as "base" on the same coupled draws.
TVS = {"base": 0.04, "better": 0.005, "worse": 0.12, "same": 0.04}
CONTRASTS = [["better", "base"], ["worse", "base"], ["same", "base"], ["better", "worse"]]
DIRECTIONS = [["better", "base", "lower"], ["worse", "base", "lower"], ["same", "base", "lower"]]


@pytest.fixture(scope="module")
def decomposition():
    ds = simulate_cube(TVS, n_documents=40, replicates=2, horizon=64, seed=5, study="probabilistic", model="tiny")
    t = compute_metrics(ds, window=16)
    metrics = inputs.Metrics(t["replicates"], t["profiles_aligned"], t["profiles_clock"])
    return get_result("probabilistic").build(metrics, n_boot=200, seed=3, confidence=0.95, contrasts=CONTRASTS)


def test_synthetic_studies_hit_each_verdict(decomposition):
    dec = decomposition["decomposition"]
    table = contrast_verdicts(dec, check_directions(DIRECTIONS, CONTRASTS))
    got = dict(zip(table["contrast"].to_list(), table["verdict"].to_list()))
    assert got == {
        "better − base": "consistent",
        "worse − base": "contradicted",
        "same − base": "inconclusive",
        "better − worse": "no claim",
    }
    row = table.filter(pl.col("contrast") == "better − base").row(0, named=True)
    assert row["upper"] < 0 and row["direction"] == "lower" and row["n_documents"] == 40
    same = table.filter(pl.col("contrast") == "same − base").row(0, named=True)
    assert same["lower"] <= 0 <= same["upper"]


def test_report_gives_each_contrast_its_verdict(decomposition, tmp_path):
    paths = {}
    for name, frame in decomposition.items():
        paths[name] = tmp_path / f"{name}.parquet"
        write_parquet(frame, paths[name])
    setting = {
        "models": {"tiny": "random"},
        "studies": {},
        "figure_studies": {"probabilistic": "probabilistic"},
        "contrasts": CONTRASTS,
        "directions": DIRECTIONS,
        "bootstrap": 200,
        "confidence": 0.95,
    }
    text = build_report({"probabilistic": paths}, {}, {}, setting, tmp_path / "report.md")
    assert "excludes 0 in the paper's direction" in text
    for contrast, direction, result in [
        ("better − base", "gap < 0", "consistent"),
        ("worse − base", "gap < 0", "contradicted"),
        ("same − base", "gap < 0", "inconclusive"),
        ("better − worse", "–", "no claim"),
    ]:
        line = next(x for x in text.splitlines() if x.startswith(f"| {contrast} | tiny |"))
        assert line.endswith(f"| {direction} | {result} |"), line


def test_contrast_verdicts_need_enough_documents():
    """The same interval wholly below 0 is consistent from 6 documents and gets no verdict from 5 (min_documents)."""
    rows = [
        {
            "model": "m",
            "stratum": inputs.POOLED,
            "contrast": f"a{n} − b",
            "statistic": "gap",
            "estimate": -0.2,
            "lower": -0.3,
            "upper": -0.1,
            "n_documents": n,
        }
        for n in (5, 6)
    ]
    table = contrast_verdicts(pl.DataFrame(rows), {"a5 − b": "lower", "a6 − b": "lower"})
    assert table["verdict"].to_list() == ["too few documents", "consistent"]
