"""kvdiv.results.claims: the one rulebook (direction, magnitude, Holm, documents needed) on hand-set intervals, and
synthetic cubes (tests/support/synthetic_cube.py, constant-TV persistent perturbations with known orderings) built to
make each direction and each magnitude verdict happen; the paper's values are attached to the right actions; shares
of gaps indistinguishable from 0 are "not identified"; the report opens with the claims section and writes the
claims table."""

from __future__ import annotations

import polars as pl
import pytest

from kvdiv.analysis import verdicts as rules
from kvdiv.results import claims
from kvdiv.results.claim_sources import Inputs
from kvdiv.results.registry import get_result
from kvdiv.analysis.decomposition import mark_identification
from kvdiv.analysis.inputs import POOLED, Metrics
from kvdiv.outputs.report_cells import NOT_IDENTIFIED_TEXT, SectionContext
from kvdiv.io import write_parquet
from kvdiv.metrics import compute_metrics
from kvdiv.results.report import build_report, paper_values
from support.synthetic_cube import simulate_cube

STRATA = ("ruler_256", "ruler_512", "helmet_256", "helmet_512")
CONTRASTS = [["snapkv_512", "snapkv_half"], ["recent_half", "snapkv_half"], ["recent_90", "snapkv_90"]]
SETTINGS = dict(
    n_boot=200, seed=1, confidence=0.95, contrasts=CONTRASTS, cohort_max_tau=32, early=[1, 8], late=[17, 24]
)
H = 64


def metrics_of(ds) -> Metrics:
    t = compute_metrics(ds, window=8)
    return Metrics(t["replicates"], t["profiles_aligned"], t["profiles_clock"])


def frames_of(e50: dict, e90: dict, n: int, seed: int, eos_hazard: float = 0.002, tv_growth: float = 0.0) -> dict:
    m50 = metrics_of(
        simulate_cube(e50, n, 2, H, seed=seed, strata=STRATA, study="retention50", model="tiny", tv_growth=tv_growth)
    )
    m90 = metrics_of(
        simulate_cube(
            e90,
            n,
            2,
            H,
            seed=seed + 1,
            strata=STRATA,
            eos_hazard=eos_hazard,
            study="retention90",
            model="tiny",
            tv_growth=tv_growth,
        )
    )
    return {
        "figure5": get_result("figure5").build(m50, **SETTINGS),
        "figure6": get_result("figure6").build(m50, **SETTINGS),
        "figure7": get_result("figure7").build(m90, **SETTINGS),
    }


def table_of(frames=None, table2=None, table3=None, paper=None, **kw) -> pl.DataFrame:
    numbers = {k: v for k, v in (("table2", table2), ("table3", table3)) if v is not None}
    paper_actions = kw.pop("paper_actions", {})
    return claims.claims_table(Inputs(frames or {}, numbers, paper or paper_values(), paper_actions), **kw)


def column(table: pl.DataFrame, claim: str, name: str = "direction", subject: str | None = None) -> list:
    sub = table.filter(pl.col("claim") == claim)
    if subject is not None:
        sub = sub.filter(pl.col("subject") == subject)
    assert sub.height, (claim, subject)
    return sub[name].to_list()


# ------------------------------------------------------------------------------------------------ the rulebook
def test_the_rules_hit_each_verdict():
    assert rules.sign_verdict(0.1, 0.3, +1) == "consistent" and rules.sign_verdict(-0.3, -0.1, -1) == "consistent"
    assert rules.sign_verdict(-0.3, -0.1, +1) == "contradicted" and rules.sign_verdict(-0.1, 0.3, +1) == "inconclusive"
    assert rules.sign_verdict(0.55, 0.7, +1, 0.5) == "consistent" and rules.sign_verdict(0.2, 0.45, +1, 0.5) == (
        "contradicted"
    )
    assert rules.sign_verdict(float("nan"), 1.0, +1) == "inconclusive"
    assert rules.equivalence_verdict(-0.01, 0.015, 0.02) == "consistent"
    assert rules.equivalence_verdict(0.03, 0.05, 0.02) == "contradicted"
    assert rules.equivalence_verdict(-0.01, 0.05, 0.02) == "inconclusive"
    # magnitude: overlap, wholly below, wholly above, no paper value; a reversed pair is still a range
    assert rules.magnitude_verdict(0.8, 0.95, 0.85, 0.9) == "inside"
    assert rules.magnitude_verdict(0.55, 0.7, 0.85, 0.9) == "below"
    assert rules.magnitude_verdict(0.92, 0.99, 0.85, 0.9) == "above"
    assert rules.magnitude_verdict(0.8, 0.95, 0.9, 0.85) == "inside"
    assert rules.magnitude_verdict(0.8, 0.95, None, None) == "no paper value"


def test_p_values_holm_and_documents_needed_follow_their_formulas():
    # an interval of ±1.96 SE: the standard error and the two-sided p of a 2 SE effect
    se = rules.standard_error(0.04 - 1.959964 * 0.01, 0.04 + 1.959964 * 0.01, 0.95)
    assert se == pytest.approx(0.01, rel=1e-6)
    assert rules.sign_p_value(0.04, 0.04 - 0.0196, 0.04 + 0.0196, 0.0, 0.95) == pytest.approx(6.33e-5, rel=1e-2)
    assert rules.sign_p_value(0.02, 0.0004, 0.0396, 0.0, 0.95) == pytest.approx(0.0455, abs=2e-4)  # z = 2
    # Holm, by hand: sorted 0.01, 0.03, 0.04 over m = 3 -> 0.03, max(0.03, 2 * 0.03), max(0.06, 1 * 0.04)
    assert rules.holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None])
    assert rules.holm([0.5, 0.5]) == [1.0, 1.0] and rules.holm([]) == []
    # n* = n ((z_.975 + z_.8) SE / |d|)^2: d = SE (z = 1) at n = 10 -> 10 * 2.8016^2 = 78.5 -> 79
    assert rules.documents_needed(0.01, 0.01 - 0.0196, 0.01 + 0.0196, 0.0, 10, 0.95) == 79
    assert rules.documents_needed(0.0, -0.01, 0.01, 0.0, 10, 0.95) is None  # no size decides a zero effect
    assert rules.documents_needed(1e-17, -0.01, 0.01, 0.0, 10, 0.95) is None  # nor one of 1e-17 (not 10^31)
    # equivalence: inside ±c with a tight interval is significant, a far estimate is significant outside
    p, side = rules.equivalence_p_value(0.0, -0.002, 0.002, 0.02, 0.95)
    assert side == "inside" and p < 1e-6
    p, side = rules.equivalence_p_value(0.06, 0.058, 0.062, 0.02, 0.95)
    assert side == "outside" and p < 1e-6


def test_shares_of_a_gap_indistinguishable_from_zero_are_marked():
    rows = [
        {"statistic": "gap", "estimate": 0.003, "lower": -0.16, "upper": 0.17},
        {"statistic": "exposure_share", "estimate": 19.4, "lower": -14.9, "upper": 8.7},
        {"statistic": "exposure_gap", "estimate": 0.1, "lower": 0.05, "upper": 0.2},
    ]
    marked = {r["statistic"]: r for r in mark_identification(rows)}
    assert marked["exposure_share"]["identified"] is False and marked["exposure_share"]["contains_estimate"] is False
    assert marked["gap"]["identified"] is True and marked["exposure_gap"]["contains_estimate"] is True
    rows[0].update(lower=0.01, upper=0.2)
    assert {r["statistic"]: r for r in mark_identification(rows)}["exposure_share"]["identified"] is True


# ------------------------------------------------------------------------------------------------ cubes
@pytest.fixture(scope="module")
def ordered():
    """SnapKV-half perturbs least (enters later, less often), recent-90 more than SnapKV-90; 60 documents."""
    return frames_of(
        {"snapkv_half": 0.01, "snapkv_512": 0.06, "recent_half": 0.08},
        {"snapkv_90": 0.02, "recent_90": 0.08},
        n=60,
        seed=3,
    )


def test_the_paper_ordering_is_consistent_in_direction(ordered):
    """The timing and gap claims are consistent in direction; C = e ≤ 8% lies below the null of 50% (contradicted) and
    far below the paper's 90–96% (magnitude below); constant TV has late − early branch TV 0: inconclusive."""
    t = table_of(ordered)
    assert list(t.columns) == list(claims.COLUMNS)
    assert column(t, "C1") == ["consistent", "consistent"] and column(t, "C2") == ["consistent", "consistent"]
    assert column(t, "C8") == ["consistent"]
    assert set(column(t, "C5")) == {"contradicted"} and set(column(t, "C5", "magnitude")) == {"below"}
    assert "inconclusive" in column(t, "C6") and "contradicted" not in column(t, "C6")
    assert set(column(t, "C10")) == {"consistent"}  # EOS flags are rare: most of the gap is pre-EOS
    c1 = t.filter(pl.col("claim") == "C1").row(0, named=True)
    assert c1["upper"] < 0 and c1["paper"] == "llama -18.68 steps, qwen -17.19 steps" and c1["test"] == "< 0"
    assert t.filter(pl.col("claim").is_in(["C1", "C2", "C3", "C8"]))["n_documents"].to_list() == [60] * 7
    # an inconclusive direction says how many documents would decide it; a decided one needs none
    undecided = t.filter(pl.col("direction") == "inconclusive")
    assert undecided.height and undecided["documents_needed"].drop_nulls().min() > 0
    assert (
        t.filter(pl.col("direction") != "inconclusive")["documents_needed"].null_count()
        == t.filter(pl.col("direction") != "inconclusive").height
    )
    # Holm is never more decisive than the row's own test at the same level
    decided = t.filter(pl.col("holm") != "inconclusive")
    assert (decided["holm"] == decided["direction"]).all()


def test_paper_values_are_attached_to_the_right_action_and_model(ordered):
    t = table_of(ordered)
    c6 = {r["subject"]: r for r in t.filter(pl.col("claim") == "C6").iter_rows(named=True)}
    assert c6["snapkv_half"]["paper"] == "llama 7.11 pp, qwen 10.48 pp"
    assert c6["snapkv_512"]["paper"] == "–" and c6["snapkv_512"]["magnitude"] == "no paper value"
    c7e = {r["subject"]: r["paper"] for r in t.filter(pl.col("claim") == "C7e").iter_rows(named=True)}
    assert c7e == {"snapkv_90": "llama 5.94 pp, qwen 8.26 pp", "recent_90": "llama 6.83 pp, qwen 7.51 pp"}
    c3 = {r["subject"]: r["paper"] for r in t.filter(pl.col("claim") == "C3").iter_rows(named=True)}
    assert c3["recent_half − snapkv_half"] == "llama 84.7%, qwen 87.3%"
    # a second reading of SnapKV-512 under another name reads the paper's snapkv_512 values
    renamed = {
        item: {
            name: frame.with_columns(pl.col(c).str.replace_all("snapkv_512", "snapkv_w512") for c in ("contrast",))
            if "contrast" in frame.columns
            else frame
            for name, frame in tables.items()
        }
        for item, tables in ordered.items()
    }
    mapped = table_of(renamed, paper_actions={"snapkv_w512": "snapkv_512"})
    unmapped = table_of(renamed)
    subject = "snapkv_w512 − snapkv_half"
    assert column(mapped, "C1", "paper", subject) == ["llama -18.68 steps, qwen -17.19 steps"]
    assert subject not in unmapped.filter(pl.col("claim") == "C1")["subject"].to_list()  # no paper direction
    flagged = table_of(ordered, degenerate={"snapkv_512": "keeps 288 entries, fewer than 2 × its window of 512"})
    assert all("degenerate action snapkv_512" in f for f in column(flagged, "C1", "flags", "snapkv_512 − snapkv_half"))


def test_figure5_section_reads_paper_values_through_paper_actions():
    """Figure 5's report rows of an action named apart from the paper's (snapkv_w512 for the paper's SnapKV-512) show
    the paper's values when analysis.paper_actions maps it, for the action and for its contrast; '–' when unmapped."""
    from kvdiv.results import figure5

    e50 = {"snapkv_half": 0.02, "snapkv_w512": 0.05, "recent_half": 0.08}
    m50 = metrics_of(simulate_cube(e50, 8, 1, H, seed=4, strata=STRATA, study="retention50", model="tiny"))
    settings = {**SETTINGS, "contrasts": [["snapkv_w512", "snapkv_half"], ["recent_half", "snapkv_half"]]}
    frames = get_result("figure5").build(m50, **settings)
    context = SectionContext(get_result("figure5"), "retention50", model_keys=("llama", "qwen"))

    def rows(setting: dict) -> dict[str, str]:
        text = "\n".join(figure5.section(frames, setting, paper_values(), context))
        return {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}

    mapped, unmapped = rows({"paper_actions": {"snapkv_w512": "snapkv_512"}}), rows({})
    tau = "mean first-divergence step among diverged, snapkv_w512"
    share_row = "exposure share of gap (%), snapkv_w512 − snapkv_half"
    assert mapped[tau].endswith("| 11.69 | 12.18 |") and unmapped[tau].endswith("| – | – |")
    assert mapped[share_row].endswith("| 86.3 | 89.9 |") and unmapped[share_row].endswith("| – | – |")
    recent = "exposure share of gap (%), recent_half − snapkv_half"
    assert mapped[recent] == unmapped[recent] and mapped[recent].endswith("| 84.7 | 87.3 |")


def test_the_reverse_ordering_is_contradicted():
    """SnapKV-half perturbs most and recent-90 least: the direction claims are contradicted; EOS flags common: the
    share of the (reversed) 90% gap made after the first EOS lies far above the paper's ≤ 12%."""
    f = frames_of(
        {"snapkv_half": 0.08, "snapkv_512": 0.01, "recent_half": 0.02},
        {"snapkv_90": 0.08, "recent_90": 0.02},
        n=60,
        seed=5,
        eos_hazard=0.08,
    )
    t = table_of(f)
    assert column(t, "C1") == ["contradicted", "contradicted"] and column(t, "C2") == ["contradicted"] * 2
    assert column(t, "C8") == ["contradicted"] and column(t, "C8", "magnitude") == ["below"]
    assert column(t, "C9", "magnitude_ours")[0] != NOT_IDENTIFIED_TEXT  # a gap identified: its share is a number
    assert column(t, "C10", "magnitude") == ["above"]


def test_equal_actions_are_inconclusive_and_their_shares_not_identified(tmp_path):
    """Every action the same perturbation, 12 documents (a fixed seed: a 95% interval excludes a true 0 in 5% of
    seeds): the gaps are indistinguishable from 0, so direction claims are inconclusive and every share is "not
    identified" — never a number — in the claims and in the report's Figure 5 table; the report opens with the claims
    section and writes the claims table as CSV and Markdown."""
    f = frames_of(
        {"snapkv_half": 0.02, "snapkv_512": 0.02, "recent_half": 0.02},
        {"snapkv_90": 0.02, "recent_90": 0.02},
        n=12,
        seed=7,
    )
    t = table_of(f)
    for claim in ("C1", "C2", "C3", "C8", "C9"):
        assert set(column(t, claim)) == {"inconclusive"}, claim
    for claim in ("C3", "C9"):
        assert set(column(t, claim, "magnitude")) == {"not identified"}
        assert set(column(t, claim, "magnitude_ours")) == {NOT_IDENTIFIED_TEXT}
    dec = f["figure5"]["decomposition"]
    pooled = dec.filter((pl.col("stratum") == POOLED) & (pl.col("statistic") == "exposure_share"))
    assert not pooled["identified"].any()

    analysis = {}
    for item, frames in f.items():
        analysis[item] = {name: tmp_path / "analysis" / item / f"{name}.parquet" for name in frames}
        for name, frame in frames.items():
            write_parquet(frame, analysis[item][name])
    setting = {
        "models": {"tiny": "random"},
        "studies": {
            "retention50": {
                "documents": 12,
                "documents_per_stratum": 3,
                "strata": list(STRATA),
                "horizon": H,
                "replicates": 2,
                "actions": ["snapkv_half"],
            }
        },
        "figure_studies": {"figure5": "retention50"},
        "contrasts": CONTRASTS,
        "bootstrap": 200,
        "confidence": 0.95,
    }
    out = {"csv": tmp_path / "tables" / "claims.csv", "md": tmp_path / "tables" / "claims.md"}
    text = build_report(analysis, {}, {}, setting, tmp_path / "report.md", claims_out=out)
    assert text.index("## Claims") < text.index("## This run versus the paper's setting") < text.index("## Figure 5")
    assert "Most direction verdicts are undecided" in text
    figure5 = text[text.index("## Figure 5") : text.index("## Figure 6")]
    assert f"| exposure share of gap (%), snapkv_512 − snapkv_half | tiny | 12 | {NOT_IDENTIFIED_TEXT} |" in figure5
    written = pl.read_csv(out["csv"])
    assert written.height == t.height and set(written["direction"].unique().to_list()) <= set(rules_verdicts())
    assert claims.claims_markdown(t) in out["md"].read_text()


def rules_verdicts() -> tuple[str, ...]:
    return (rules.CONSISTENT, rules.CONTRADICTED, rules.INCONCLUSIVE, rules.TOO_FEW)


def test_table2_and_table3_claims():
    """Table 2: paired block changes built to fall in HELMET and rise in RULER are consistent per model–length, the
    reverse contradicted; Table 3: a fixed-history difference inside ±2 pp is consistent, one outside contradicted,
    short-window rows are not the claim, the intercept baseline is its own row."""
    rows = []
    for family, change in (("helmet", -0.2), ("ruler", 0.2), (POOLED, -0.1)):
        for length in ("256", "512") if family != POOLED else (POOLED,):
            for block, c in (("1–32", 0.0), ("33–64", change / 2), ("65–128", change)):
                rows.append(
                    {
                        "model": "tiny",
                        "family": family,
                        "length": length,
                        "stratum": f"{family}_{length}" if family != POOLED else POOLED,
                        "contrast": "recent_90 − snapkv_90",
                        "block": block,
                        "gap": 0.3 + c,
                        "lower": 0.28 + c,
                        "upper": 0.32 + c,
                        "n_documents": 10,
                        "change": c,
                        "change_lower": c - 0.03,
                        "change_upper": c + 0.03,
                    }
                )
    t2 = pl.DataFrame(rows)
    t = table_of(table2=t2)
    assert column(t, "C11c") == ["consistent"] * 4 and column(t, "C11") == ["consistent"]
    assert column(t, "C11", "paper") == ["llama -7.78 pp, qwen -10.56 pp"] and column(t, "C11", "magnitude") == [
        "inside"  # -10 ± 3 pp overlaps the paper's -10.56 to -7.78 pp
    ]
    flipped = t2.with_columns(pl.col("change") * -1, pl.col("change_lower") * -1, pl.col("change_upper") * -1)
    flipped = flipped.with_columns(
        pl.min_horizontal("change_lower", "change_upper").alias("change_lower"),
        pl.max_horizontal("change_lower", "change_upper").alias("change_upper"),
    )
    assert column(table_of(table2=flipped), "C11c") == ["contradicted"] * 4

    def t3_row(predictor, method, d, half=0.005):
        return {
            "model": "tiny",
            "contrast": "snapkv_512 − snapkv_half",
            "predictor": predictor,
            "method": method,
            "n_documents": 20,
            "difference": d,
            "lower": d - half,
            "upper": d + half,
        }

    t3 = pl.DataFrame(
        [
            t3_row("fixed_history", "cell_mean", 0.001),
            t3_row("fixed_history", "ridge", 0.05),
            t3_row("fixed_history", "intercept", 0.0, 0.01),
            t3_row("short_window", "raw", 0.0),
        ]
    )
    t = table_of(table3=t3)
    assert column(t, "C12") == ["consistent", "contradicted"] and column(t, "C12", "test") == ["within ±2 pp"] * 2
    assert column(t, "C12b") == ["consistent"] and column(t, "C12", "holm") == ["consistent", "contradicted"]


def test_the_fewest_documents_that_carry_a_verdict():
    """min_documents is the smallest n whose range [min, max] covers the median with the stated confidence (the
    coverage 1 − 2^(1−n), checked by enumeration of the signs of n draws around the median)."""
    from itertools import product

    for confidence, least in ((0.5, 2), (0.9, 5), (0.95, 6), (0.99, 8)):
        assert rules.min_documents(confidence) == least

        def coverage(n):  # P(min < median < max): not all n draws on one side of the median
            signs = list(product((0, 1), repeat=n))
            return sum(0 < sum(s) < n for s in signs) / len(signs)

        assert coverage(least) >= confidence > coverage(least - 1)
    assert rules.too_few_documents(5, 0.95) and not rules.too_few_documents(6, 0.95)
    assert not rules.too_few_documents(None, 0.95)


def test_rows_of_too_few_documents_get_no_verdict():
    """A cell of 1 document (a zero-width interval beside the null) and of 4 (an interval wholly on the paper's side)
    get "too few documents" in direction and Holm and are flagged; 6 documents decide; documents needed is none for 1
    document (no variance) and at least 6 otherwise; an equivalence estimate of exactly 0 still gets its number."""

    def t3_row(method, d, half, n):
        return {
            "model": "tiny",
            "contrast": "snapkv_512 − snapkv_half",
            "predictor": "fixed_history",
            "method": method,
            "n_documents": n,
            "difference": d,
            "lower": d - half,
            "upper": d + half,
        }

    def t2_rows(n, change):
        return [
            {
                "model": "tiny",
                "family": "helmet",
                "length": "256",
                "stratum": "helmet_256",
                "contrast": "recent_90 − snapkv_90",
                "block": block,
                "gap": 0.3 + c,
                "lower": 0.28 + c,
                "upper": 0.32 + c,
                "n_documents": n,
                "change": c,
                "change_lower": c - (0.0 if n == 1 else 0.03),
                "change_upper": c + (0.0 if n == 1 else 0.03),
            }
            for block, c in (("1–32", 0.0), ("65–128", change))
        ]

    for n, expected in ((1, "too few documents"), (4, "too few documents"), (6, "consistent")):
        t = table_of(table2=pl.DataFrame(t2_rows(n, -0.2)))
        row = t.filter(pl.col("claim") == "C11c").row(0, named=True)
        assert (row["direction"], row["holm"]) == (expected, expected), n
        if n < 6:
            assert f"{n} document" in row["flags"] and f"fewer than {rules.min_documents(0.95)}" in row["flags"]
            assert row["p_value"] is None
            assert row["documents_needed"] is None if n == 1 else row["documents_needed"] >= 6
        else:
            assert row["flags"] == "" and row["documents_needed"] is None
    # the report states the least number at its own confidence (5 documents at 90 %), not a literal 6
    from kvdiv.results.report import _claims_section

    t = table_of(table2=pl.DataFrame(t2_rows(4, -0.2)), confidence=0.9)
    assert column(t, "C11c") == ["too few documents"]
    text = "\n".join(_claims_section(t, {"confidence": 0.9}))
    assert "cells of fewer than 5 documents" in text and "has 90% coverage" in text and "fewer than 6" not in text
    # C12 with a magnitude: a zero-width interval of 1 document inside ±2 pp decides nothing
    t = table_of(table3=pl.DataFrame([t3_row("cell_mean", 0.001, 0.0, 1), t3_row("ridge", 0.0, 0.03, 40)]))
    assert (
        column(t, "C12") == ["too few documents", "inconclusive"] and column(t, "C12", "holm")[0] == "too few documents"
    )
    assert column(t, "C12", "magnitude")[0] == "no paper value"
    needed = column(t, "C12", "documents_needed")
    # d = 0 against the margin 0.02: n* = 40 (2.8016 SE / 0.02)^2 with SE = 0.03 / 1.96
    assert needed[0] is None and needed[1] == pytest.approx(40 * (2.8016 * 0.03 / 1.959964 / 0.02) ** 2, abs=1)


def test_a_majority_is_tested_in_the_gaps_direction():
    """A gap a − b below 0 made wholly of exposure (exposure part = gap, branch part 0) is a majority: consistent, not
    the contradicted that 'exposure part − branch part > 0' read unsigned would give; a gap whose interval contains 0
    has no majority (inconclusive, flagged, documents needed from the gap too); the same rule for the EOS split."""

    def rows(stratum, gap, diff, n=40, half=0.02):
        out = []
        for statistic, value in (("gap", gap), ("exposure_minus_branch", diff), ("exposure_share", 1.0)):
            out.append(
                {
                    "model": "tiny",
                    "stratum": stratum,
                    "contrast": "snapkv_512 − snapkv_half",
                    "statistic": statistic,
                    "estimate": value,
                    "lower": value - half,
                    "upper": value + half,
                    "n_documents": n,
                    "identified": abs(gap) > half,
                }
            )
        return out

    frame = pl.DataFrame(rows(POOLED, -0.3, -0.3) + rows("ruler_256", -0.3, -0.3) + rows("helmet_256", 0.01, 0.01))
    t = table_of(frames={"figure5": {"decomposition": frame}})
    assert column(t, "C3") == ["consistent"] and column(t, "C3", "ours") == ["30.0 [28.0, 32.0]"]
    assert column(t, "C4", subject="ruler_256, snapkv_512 − snapkv_half") == ["consistent"]
    open_gap = t.filter((pl.col("claim") == "C4") & pl.col("subject").str.starts_with("helmet_256")).row(0, named=True)
    assert open_gap["direction"] == open_gap["holm"] == "inconclusive" and open_gap["p_value"] is None
    assert "no majority" in open_gap["flags"] and open_gap["documents_needed"] >= 40
    # the same gaps the other way round: a positive gap of pure exposure is consistent as before
    positive = pl.DataFrame(rows(POOLED, 0.3, 0.3))
    assert column(table_of(frames={"figure5": {"decomposition": positive}}), "C3") == ["consistent"]
    # a branch-made negative gap (exposure part 0, branch part = gap): exposure − branch = +0.3, signed −0.3
    branch = pl.DataFrame(rows(POOLED, -0.3, 0.3))
    assert column(table_of(frames={"figure5": {"decomposition": branch}}), "C3") == ["contradicted"]


def test_table3_section_names_the_contrast_and_the_papers_own_predictors():
    """Table 3's report rows name their contrast; the paper's fixed-history MAE / RMSE stand beside cell_mean and
    ridge only (not raw, not kvdiv's intercept baseline); its short-window value is labelled as an MAE."""
    from kvdiv.outputs.report_cells import SectionContext
    from kvdiv.results import table3

    rows = [
        {
            "model": "tiny",
            "contrast": contrast,
            "predictor": predictor,
            "method": method,
            "n_documents": 20,
            "difference": 0.0,
            "lower": -0.01,
            "upper": 0.01,
            "interval_within": True,
            "point_within": True,
            "mae": 0.05,
            "rmse": 0.07,
        }
        for contrast in ("snapkv_512 − snapkv_half", "snapkv_w512 − snapkv_half")
        for predictor, method in (
            ("short_window", "raw"),
            ("fixed_history", "raw"),
            ("fixed_history", "cell_mean"),
            ("fixed_history", "ridge"),
            ("fixed_history", "intercept"),
        )
    ]
    context = SectionContext(get_result("table3"), "retention50", model_keys=("llama", "qwen"))
    text = "\n".join(table3.section({"numbers": pl.DataFrame(rows)}, {}, paper_values(), context))
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if "document MAE" in line}
    assert len(lines) == 10  # one per contrast × predictor × method: none collapses into another
    w512 = "snapkv_w512 − snapkv_half"
    assert "8.73 / 11.04" in lines[f"{w512}, fixed_history/cell_mean: document MAE / RMSE (pp)"]
    assert "8.73 / 11.04" in lines[f"{w512}, fixed_history/ridge: document MAE / RMSE (pp)"]
    for method in ("raw", "intercept"):
        assert "8.73" not in lines[f"{w512}, fixed_history/{method}: document MAE / RMSE (pp)"]
    assert "MAE 4.09" in lines[f"{w512}, short_window/raw: document MAE / RMSE (pp)"]


@pytest.mark.parametrize("growth, expected", [(0.6, "consistent"), (-0.6, "contradicted")])
def test_branch_tv_that_rises_or_falls_with_depth(growth, expected):
    """TV drifting up (down) with the clock makes late − early branch TV positive (negative): C6, C7 and the paired
    pre-EOS C7e are consistent (contradicted) in direction on every pooled row; the stratum cells C6c/C7c agree
    wherever they decide (cells of 15 documents may stay inconclusive, never the opposite verdict)."""
    f = frames_of(
        {"snapkv_half": 0.2, "snapkv_512": 0.25, "recent_half": 0.3},
        {"snapkv_90": 0.2, "recent_90": 0.3},
        n=60,
        seed=11,
        tv_growth=growth,
    )
    t = table_of(f)
    for claim in ("C6", "C7", "C7e"):
        assert set(column(t, claim)) == {expected}, (claim, column(t, claim), column(t, claim, "ours"))
    for claim in ("C6c", "C7c"):
        assert set(column(t, claim)) <= {expected, "inconclusive"} and expected in column(t, claim), claim


def test_verdict_counts_list_the_most_frequent_first_and_ties_by_name():
    """The report's verdict summary is the same text whatever order polars groups the rows in (two verdicts of 9 rows
    each once swapped places between two runs of the smoke config)."""
    rows = ["no paper value"] * 3 + ["too few documents"] * 3 + ["inside"] * 5 + ["below"] * 1 + ["above"] * 3
    expected = ["inside", "above", "no paper value", "too few documents", "below"]
    for seed in range(20):
        frame = pl.DataFrame({"magnitude": rows}).sample(fraction=1.0, shuffle=True, seed=seed)
        counts = claims.verdict_counts(frame, "magnitude")
        assert list(counts) == expected
        assert counts == {"inside": 5, "above": 3, "no paper value": 3, "too few documents": 3, "below": 1}
