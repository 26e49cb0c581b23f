"""kvdiv.analysis and kvdiv.outputs (tables, figures 5-7, report) on synthetic cubes with known answers:
the cluster bootstrap (seeded determinism, coverage at the nominal rate), the symmetric gap decomposition,
late-minus-early contrasts, Table 2/3 builders, figures and the report."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kvdiv.analysis import blocks, bootstrap, decomposition, inputs, prediction, profiles, timing
from kvdiv.results.registry import get_result
from kvdiv.io import write_parquet
from kvdiv.outputs import tables
from kvdiv.metrics import compute_metrics
from kvdiv.results.figure5 import plot_figure5
from kvdiv.results.figure6 import plot_figure6
from kvdiv.results.figure7 import plot_figure7
from kvdiv.results.table2 import table2_frame
from kvdiv.results.table3 import table3_frame
from kvdiv.results.report import build_report, paper_values
from support.synthetic_cube import simulate_cube

STRATA = ("ruler_256", "ruler_512", "helmet_256", "helmet_512")
CONTRASTS = [["snapkv_512", "snapkv_half"], ["recent_half", "snapkv_half"], ["recent_90", "snapkv_90"]]
EARLY, LATE = [1, 16], [49, 64]


def metrics_of(ds) -> inputs.Metrics:
    t = compute_metrics(ds, window=16)
    return inputs.Metrics(t["replicates"], t["profiles_aligned"], t["profiles_clock"])


@pytest.fixture(scope="module")
def study50():
    rng = np.random.default_rng(7)
    n = 16
    e = {"snapkv_half": rng.uniform(0.02, 0.05, n), "snapkv_512": rng.uniform(0.08, 0.12, n), "recent_half": 0.14}
    ds = simulate_cube(
        e,
        n_documents=n,
        replicates=3,
        horizon=128,
        seed=3,
        strata=STRATA,
        eos_hazard=0.004,
        study="retention50",
        model="tiny",
    )
    return e, metrics_of(ds)


# ------------------------------------------------------------------------------------------- bootstrap
def test_bootstrap_is_seeded_and_deterministic():
    x = np.random.default_rng(0).normal(size=30)
    stat = lambda m: {"mean": m["x"]}  # noqa: E731
    a = bootstrap.cluster_bootstrap({"x": x}, stat, 200, seed=5, confidence=0.9)["mean"]
    b = bootstrap.cluster_bootstrap({"x": x}, stat, 200, seed=5, confidence=0.9)["mean"]
    c = bootstrap.cluster_bootstrap({"x": x}, stat, 200, seed=6, confidence=0.9)["mean"]
    assert [float(v) for v in a] == [float(v) for v in b]
    assert float(a[1]) != float(c[1])
    assert float(a[0]) == pytest.approx(x.mean())
    assert a[1] < a[0] < a[2]


def test_bootstrap_interval_covers_truth_at_nominal_rate():
    rng = np.random.default_rng(1)
    trials, n, truth, level = 300, 40, 0.3, 0.9
    covered = 0
    for k in range(trials):
        x = truth + rng.normal(scale=0.2, size=n)
        _, lo, hi = bootstrap.cluster_bootstrap({"x": x}, lambda m: {"m": m["x"]}, 300, seed=k, confidence=level)["m"]
        covered += lo <= truth <= hi
    se = np.sqrt(level * (1 - level) / trials)
    # the percentile interval is slightly narrow at n = 40 (a factor sqrt((n-1)/n) on the spread)
    assert abs(covered / trials - level) < 3 * se + 0.01


def test_survival_and_entry_shapes(study50):
    _, m = study50
    surv = timing.survival_curves(m, 50, 1, 0.95)
    for _, s in surv.group_by("action"):
        v = s.sort("step")["survival"].to_numpy()
        assert v[0] == 1.0 and np.all(np.diff(v) <= 1e-12)
    entry = timing.entry_times(m, 50, 1, 0.95)
    pooled = entry.filter((pl.col("stratum") == inputs.POOLED) & (pl.col("statistic") == "mean_tau_diverged"))
    taus = dict(zip(pooled["action"], pooled["estimate"]))
    # a smaller persistent TV enters divergence later; recent_half (TV 0.14 from step 2) within 4 standard errors
    # of the exact E[τ | τ ≤ H] (tests/test_analysis_exact.py pins entry times to well below one step)
    assert taus["snapkv_half"] > taus["snapkv_512"] > taus["recent_half"]
    j = np.arange(2, 129)
    p_tau = 0.14 * 0.86 ** (j - 2)
    row = pooled.filter(pl.col("action") == "recent_half").row(0, named=True)
    se = (row["upper"] - row["lower"]) / (2 * 1.96)
    assert abs(row["estimate"] - (j * p_tau).sum() / p_tau.sum()) < 4 * se


# ------------------------------------------------------------------------------------------- decomposition
def test_decomposition_is_exact_symmetric_and_shares_sum_to_one():
    rng = np.random.default_rng(2)
    a = {k: rng.uniform(0.05, 0.6, 50) for k in ("occurrence", "exposure", "occupation", "mismatch")}
    b = {k: rng.uniform(0.05, 0.6, 50) for k in ("occurrence", "exposure", "occupation", "mismatch")}
    ab = decomposition.decomposition_stat(
        {**{f"{k}_a": v for k, v in a.items()}, **{f"{k}_b": v for k, v in b.items()}}
    )
    ba = decomposition.decomposition_stat(
        {**{f"{k}_a": v for k, v in b.items()}, **{f"{k}_b": v for k, v in a.items()}}
    )
    np.testing.assert_allclose(ab["exposure_part"] + ab["branch_part"], ab["gap"], atol=1e-12)
    np.testing.assert_allclose(ab["exposure_share"] + ab["branch_share"], 1.0, atol=1e-9)
    np.testing.assert_allclose(ab["exposure_share"], ba["exposure_share"], atol=1e-12)
    np.testing.assert_allclose(ab["branch_part"], -ba["branch_part"], atol=1e-12)
    # equal mismatch rates C: the whole gap is exposure; equal exposure and occurrence: all branch mismatch
    same_c = decomposition.decomposition_stat(
        {
            "occurrence_a": 0.01,
            "exposure_a": 0.5,
            "occupation_a": 0.45,
            "mismatch_a": 0.46,
            "occurrence_b": 0.01,
            "exposure_b": 0.3,
            "occupation_b": 0.27,
            "mismatch_b": 0.28,
        }
    )
    assert same_c["exposure_share"] == pytest.approx(1.0) and same_c["branch_share"] == pytest.approx(0.0)
    same_e = decomposition.decomposition_stat(
        {
            "occurrence_a": 0.01,
            "exposure_a": 0.5,
            "occupation_a": 0.45,
            "mismatch_a": 0.46,
            "occurrence_b": 0.01,
            "exposure_b": 0.5,
            "occupation_b": 0.35,
            "mismatch_b": 0.36,
        }
    )
    assert same_e["branch_share"] == pytest.approx(1.0)


def test_gap_decomposition_table(study50):
    e, m = study50
    dec = decomposition.gap_decomposition(m, CONTRASTS, 100, 4, 0.95)
    assert set(dec["contrast"]) == {
        "snapkv_512 − snapkv_half",
        "recent_half − snapkv_half",
    }  # the 90% contrast is absent
    assert set(dec["stratum"]) == set(STRATA) | {inputs.POOLED}
    wide = dec.pivot(on="statistic", index=["model", "stratum", "contrast"], values="estimate")
    np.testing.assert_allclose(wide["exposure_share"] + wide["branch_share"], 1.0, atol=1e-9)
    np.testing.assert_allclose(wide["gap"], wide["mismatch_gap"], atol=1e-12)  # R = O + Π per row
    pooled = wide.filter((pl.col("stratum") == inputs.POOLED) & (pl.col("contrast") == "recent_half − snapkv_half"))
    # constant-TV actions: C_a ≈ e_a, so the rate of recent_half is its TV (within a few standard errors)
    assert pooled["rate_a"][0] == pytest.approx(0.14, abs=0.02)
    # shuffling the input rows changes nothing (documents are sorted before resampling)
    shuffled = inputs.Metrics(m.replicates.sample(fraction=1.0, shuffle=True, seed=3), m.aligned, m.clock)
    assert decomposition.gap_decomposition(shuffled, CONTRASTS, 100, 4, 0.95).equals(dec)


# ------------------------------------------------------------------------------------------- Figure 6/7 data
def test_late_minus_early_recovers_a_known_rise():
    ds = simulate_cube({"snapkv_half": 0.2}, n_documents=8, replicates=4, horizon=128, seed=9, strata=STRATA)
    slope = 0.001
    ds["tv"] = ds["tv"] + (slope * ds["step"]).astype(np.float32)
    m = metrics_of(ds)
    lme = profiles.late_minus_early(m, 64, EARLY, LATE, 100, 1, 0.95)
    pooled = lme.filter((pl.col("stratum") == inputs.POOLED) & (pl.col("statistic") == "late_minus_early"))
    # every cohort row (τ ≤ 64) has every depth ≤ 64, so late − early = slope × (56.5 − 8.5) exactly
    assert pooled["estimate"][0] == pytest.approx(slope * 48, abs=1e-5)
    prof = profiles.branch_tv_profiles(m, 64, 50, 1, 0.95)
    assert prof.height > 0 and {"depth", "tv", "lower", "upper", "n_documents"} <= set(prof.columns)


def test_eos_share_without_eos_is_zero(study50):
    _, m = study50
    no_eos = m.replicates.with_columns(pl.lit(0.0).alias("mismatch_post_eos"))
    eos = decomposition.eos_shares(inputs.Metrics(no_eos, m.aligned, m.clock), CONTRASTS, 50, 1, 0.95)
    assert (eos.filter(pl.col("statistic") == "eos_share")["estimate"] == 0).all()
    real = decomposition.eos_shares(m, CONTRASTS, 50, 1, 0.95)
    assert set(real["family"]) == {"ruler", "helmet", inputs.POOLED}


# ------------------------------------------------------------------------------------------- Tables
def test_table2_block_gaps_match_tv_difference(study50):
    e, m = study50
    with pytest.raises(ValueError, match=r"analysis.blocks\[3\] = \[200, 300\] reaches past 128"):
        blocks.clock_block_gaps(m, CONTRASTS, [[1, 32], [33, 64], [65, 128], [200, 300]], 200, 2, 0.95)
    with pytest.raises(ValueError, match=r"analysis.blocks\[1\] = \[64, 33\] is not a window 1 <= first <= last"):
        blocks.clock_block_gaps(m, CONTRASTS, [[1, 32], [64, 33]], 200, 2, 0.95)
    gaps = blocks.clock_block_gaps(m, CONTRASTS, [[1, 32], [33, 64], [65, 128]], 200, 2, 0.95)
    assert set(gaps["block"]) == {"1–32", "33–64", "65–128"}
    pooled = gaps.filter(
        (pl.col("stratum") == inputs.POOLED)
        & (pl.col("contrast") == "recent_half − snapkv_half")
        & (pl.col("block") == "65–128")
    )
    truth = 0.14 - e["snapkv_half"].mean()
    half = (pooled["upper"][0] - pooled["lower"][0]) / 2
    assert abs(pooled["gap"][0] - truth) < 2 * half + 0.01
    display = table2_frame(gaps)
    assert display.columns[:5] == ["model", "contrast", "family", "length", "documents"]
    assert "positions 1–32 (pp)" in display.columns


def test_table2_family_pooled_rows_are_the_family_document_means(study50):
    _, m = study50
    gaps = blocks.clock_block_gaps(m, CONTRASTS, [[1, 32], [33, 64], [65, 128]], 50, 2, 0.95)
    fam = gaps.filter(pl.col("length") == inputs.POOLED).filter(pl.col("family") != inputs.POOLED)
    docs = m.documents
    assert set(fam["family"]) == {"ruler", "helmet"}
    assert set(fam["stratum"]) == {"ruler_all", "helmet_all"}
    assert fam.height == 2 * 2 * 3  # family × contrast (two present) × block
    clock = m.clock.join(docs.select("model", "document", "family"), on=["model", "document"])
    for r in fam.iter_rows(named=True):
        assert r["n_documents"] == docs.filter(pl.col("family") == r["family"]).height == 8
        lo, hi = (int(x) for x in r["block"].split("–"))
        a, b = r["contrast"].split(" − ")
        per_doc = (
            clock.filter((pl.col("family") == r["family"]) & pl.col("step").is_between(lo, hi))
            .group_by("document", "action")
            .agg(pl.col("mismatch").mean())
            .pivot(on="action", index="document", values="mismatch")
        )
        assert r["gap"] == pytest.approx(float((per_doc[a] - per_doc[b]).mean()), abs=1e-12)
        assert r["lower"] <= r["gap"] <= r["upper"]
    display = table2_frame(gaps)
    rows = display.filter(pl.col("contrast") == "recent_half − snapkv_half")
    assert rows["family"].to_list() == ["helmet"] * 3 + ["ruler"] * 3 + ["all"]
    assert rows["length"].to_list() == ["256", "512", "all", "256", "512", "all", "all"]


def test_block_pattern_counts_on_a_hand_made_frame():
    rows = []
    spec = {  # (model, family, length): gaps at blocks 1–32, 33–64, 65–128
        ("m1", "helmet", "256"): (0.10, 0.12, 0.05),  # falls (last < first) though not monotone
        ("m1", "helmet", "512"): (0.10, 0.08, 0.10),  # equal: not a fall
        ("m2", "helmet", "256"): (0.10, 0.07, 0.02),  # falls
        ("m2", "helmet", "512"): (0.10, 0.07, float("nan")),  # no data
        ("m1", "ruler", "256"): (0.01, 0.03, 0.05),  # rises
        ("m2", "ruler", "256"): (0.05, 0.03, 0.01),  # falls: not a rise
        ("m1", "all", "all"): (0.5, 0.0, 0.9),  # pooled rows are ignored
        ("m1", "helmet", "all"): (0.5, 0.6, 0.9),
    }
    for (model, family, length), gaps in spec.items():
        for block, gap in zip(("65–128", "1–32", "33–64"), (gaps[2], gaps[0], gaps[1])):  # row order must not matter
            rows.append(
                {
                    "model": model,
                    "family": family,
                    "length": length,
                    "stratum": f"{family}_{length}",
                    "contrast": "a − b",
                    "block": block,
                    "gap": gap,
                    "lower": gap,
                    "upper": gap,
                    "n_documents": 4,
                }
            )
    counts = blocks.block_pattern_counts(pl.DataFrame(rows)).sort("family")
    assert counts["family"].to_list() == ["helmet", "ruler"]
    assert counts["direction"].to_list() == ["fall", "rise"]
    assert counts["hits"].to_list() == [2, 1]
    assert counts["comparisons"].to_list() == [3, 2]
    assert counts["missing"].to_list() == [1, 0]
    assert counts["n_documents"].to_list() == [12, 8]
    assert counts["models"].to_list() == ["m1, m2", "m1, m2"]
    assert set(counts["first_block"]) == {"1–32"} and set(counts["last_block"]) == {"65–128"}


def test_cross_fit_predictions_recover_exact_models():
    rng = np.random.default_rng(4)
    n = 60
    f = rng.normal(size=n)
    cells = np.array(["a", "b", "c"])[np.arange(n) % 3]
    offset = {"a": 0.1, "b": -0.2, "c": 0.05}
    y = f + np.array([offset[c] for c in cells])
    folds = prediction._folds(n, 5, 0)
    pred = prediction.cross_fit_predictions(y, f, cells, folds, alpha=0.0)
    np.testing.assert_allclose(pred["cell_mean"], y, atol=1e-12)
    np.testing.assert_allclose(pred["ridge"], y, atol=1e-9)
    np.testing.assert_allclose(pred["raw"], f)


def test_table3_and_writers(study50, tmp_path):
    _, m = study50
    t3 = prediction.prediction_table(m, ["snapkv_512", "snapkv_half"], [1, 32], 100, 3, 0.95, folds=4)
    assert t3.height == 8  # 2 predictors × 4 methods (raw, cell_mean, ridge, the intercept baseline), one model
    assert {"mae", "rmse", "interval_within", "point_within", "difference"} <= set(t3.columns)
    assert (t3["rmse"] >= t3["mae"] - 1e-12).all()
    display = table3_frame(t3)
    paths = [tmp_path / "t3.csv", tmp_path / "t3.md", tmp_path / "t3.tex"]
    tables.write_table(t3, display, paths, "Table 3", "tab:3")
    assert pl.read_csv(paths[0]).height == 8
    assert paths[1].read_text().count("\n|") >= 7
    assert r"\begin{tabular}" in paths[2].read_text() and r"\_" in paths[2].read_text()
    with pytest.raises(ValueError, match="table3_contrast"):
        prediction.prediction_table(m, ["recent_90", "snapkv_90"], [1, 32], 10, 3, 0.95)
    # a list of pairs: each pair's rows, equal to its own table (both readings of SnapKV-512 in one Table 3)
    pairs = [["snapkv_512", "snapkv_half"], ["recent_half", "snapkv_half"]]
    both = prediction.prediction_table(m, pairs, [1, 32], 100, 3, 0.95, folds=4)
    other = prediction.prediction_table(m, pairs[1], [1, 32], 100, 3, 0.95, folds=4)
    assert both.equals(pl.concat([t3, other])) and both["contrast"].n_unique() == 2
    with pytest.raises(ValueError, match="list of such pairs"):
        prediction.prediction_table(m, [["snapkv_512"]], [1, 32], 10, 3, 0.95)


# ------------------------------------------------------------------------------------------- figures, report
def test_figures_tables_and_report(study50, tmp_path):
    _, m50 = study50
    ds90 = simulate_cube(
        {"snapkv_90": 0.03, "recent_90": 0.09},
        12,
        2,
        128,
        seed=4,
        strata=STRATA,
        eos_hazard=0.01,
        study="retention90",
        model="tiny",
    )
    m90 = metrics_of(ds90)
    settings = dict(n_boot=50, seed=1, confidence=0.95, contrasts=CONTRASTS, cohort_max_tau=64, early=EARLY, late=LATE)
    f5 = get_result("figure5").build(m50, **settings)
    f6 = get_result("figure6").build(m50, **settings)
    f7 = get_result("figure7").build(m90, **settings)
    for frames in (f5, f6, f7):
        assert all(f.height > 0 for f in frames.values())
    analysis = {}
    for item, frames in (("figure5", f5), ("figure6", f6), ("figure7", f7)):
        paths = {name: tmp_path / "analysis" / item / f"{name}.parquet" for name in frames}
        for name, frame in frames.items():
            write_parquet(frame, paths[name])
        analysis[item] = paths
    figs = tmp_path / "figures"
    plot_figure5(f5, figs / "figure5.pdf", figs / "figure5.png", dpi=60)
    plot_figure6(f6, figs / "figure6.pdf", figs / "figure6.png", early=EARLY, late=LATE, dpi=60)
    plot_figure7(f7, figs / "figure7.pdf", figs / "figure7.png", dpi=60)
    for k in (5, 6, 7):
        assert (figs / f"figure{k}.pdf").read_bytes()[:4] == b"%PDF"
        assert (figs / f"figure{k}.png").read_bytes()[:4] == b"\x89PNG"
    t2 = blocks.clock_block_gaps(m90, CONTRASTS, [[1, 32], [33, 64], [65, 128]], 50, 1, 0.95)
    t3 = prediction.prediction_table(m50, ["snapkv_512", "snapkv_half"], [1, 32], 50, 1, 0.95)
    for name, numbers, display in (("table2", t2, table2_frame(t2)), ("table3", t3, table3_frame(t3))):
        paths = [tmp_path / "tables" / f"{name}.{ext}" for ext in ("csv", "md", "tex")]
        tables.write_table(numbers, display, paths, name, f"tab:{name}")
        analysis[name] = {"numbers": paths[0]}
    dsw = simulate_cube(
        {"snapkv_90": 0.03, "recent_90": 0.09}, 8, 6, 32, seed=5, strata=STRATA, swrb=True, study="swrb90", model="tiny"
    )
    sw = get_result("swrb").build(metrics_of(dsw), **settings)
    assert all(f.height > 0 for f in sw.values())
    analysis["swrb"] = {name: tmp_path / "analysis" / "swrb" / f"{name}.parquet" for name in sw}
    for name, frame in sw.items():
        write_parquet(frame, analysis["swrb"][name])
    setting = {
        "models": {"tiny": "random"},
        "studies": {
            "retention50": {
                "documents": 16,
                "documents_per_stratum": 4,
                "strata": list(STRATA),
                "horizon": 128,
                "replicates": 3,
                "actions": ["snapkv_half", "snapkv_512", "recent_half"],
                "mode": "complete",
            },
            "swrb90": {
                "documents": 8,
                "documents_per_stratum": 2,
                "strata": list(STRATA),
                "horizon": 32,
                "replicates": 6,
                "actions": ["snapkv_90", "recent_90"],
                "mode": "swrb",
            },
        },
        "figure_studies": {"figure5": "retention50", "figure7": "retention90", "swrb": "swrb90"},
        "contrasts": CONTRASTS,
        "cohort_max_tau": 64,
        "early": EARLY,
        "late": LATE,
        "bootstrap": 50,
        "confidence": 0.95,
    }
    out = tmp_path / "report.md"
    text = build_report(
        analysis,
        {k: tmp_path / "tables" / f"{k}.md" for k in ("table2", "table3")},
        {k: figs / f"{k}.png" for k in ("figure5", "figure6", "figure7")},
        setting,
        out,
    )
    paper = paper_values()
    finite = paper["finite_state"]
    section = text[text.index(f"## {get_result('swrb').title} (swrb90, mode swrb)") :]
    assert "| variance–cost advantage (ratio of means) | tiny | all (mean D" in section
    assert f"| {finite['variance_cost_advantage_ratio_of_means']} |" in section
    assert f"| {finite['variance_ratio_naive_over_swrb']['median']} |" in section
    assert "**Enclosure of R_H from sampled profiles**" in section and "| recent_90 | tiny | 8 |" in section
    # the same study in complete mode: no variance rows, the paper's figures named in the text
    write_parquet(sw["variance"].clear(), analysis["swrb"]["variance"])
    setting["studies"]["swrb90"]["mode"] = "complete"
    other = build_report(
        analysis,
        {k: tmp_path / "tables" / f"{k}.md" for k in ("table2", "table3")},
        {k: figs / f"{k}.png" for k in ("figure5", "figure6", "figure7")},
        setting,
        tmp_path / "r2.md",
    )
    assert "The study swrb90 runs in mode complete: its rows hold no SWRB draws" in other
    assert f"median {finite['variance_ratio_naive_over_swrb']['median']}" in other
    assert out.read_text() == text
    assert str(paper["retention50"]["exposure_share_of_gap_percent"]["snapkv_512_minus_snapkv_half"]["llama"]) in text
    assert str(paper["retention90"]["mismatch_gap_pp"]["qwen"]) in text
    assert "the models are tiny, not the paper's" in text and "uses 16 documents, not 288" in text
    assert "![Figure 5](figures/figure5.png)" in text
    assert "HELMET model–length comparisons whose gap falls across later blocks" in text
    assert "RULER model–length comparisons whose gap rises across later blocks" in text and "(stratum × action)" in text
    assert paper["retention90"]["table2_pattern"] in text
    assert "| exposure share of gap (%), recent_half − snapkv_half | tiny | 16 |" in text


def test_swrb_cubes_give_the_complete_mode_population_values():
    """swrb rows are D-weighted: O, E, Π, R, survival and cohort branch TV match the exact values of a
    constant-TV persistent perturbation (and hence a complete-mode study) within bootstrap errors."""
    h, e = 32, {"a": 0.05, "b": 0.15}
    ds = simulate_cube(e, n_documents=30, replicates=40, horizon=h, seed=12, strata=STRATA, swrb=True)
    m = metrics_of(ds)
    j = np.arange(2, h + 1)
    exact = {}
    for name, v in e.items():
        p_tau = v * (1 - v) ** (j - 2)
        exact[name] = {"occurrence": p_tau.sum() / h, "exposure": (p_tau * (h - j)).sum() / h}
        exact[name]["occupation"] = v * exact[name]["exposure"]
    dec = decomposition.gap_decomposition(m, [["b", "a"]], 200, 1, 0.95)
    pooled = {r["statistic"]: r for r in dec.filter(pl.col("stratum") == inputs.POOLED).iter_rows(named=True)}
    truth = {
        "gap": (e["b"] - e["a"]) * (h - 1) / h,
        "exposure_gap": exact["b"]["exposure"] - exact["a"]["exposure"],
        "occurrence_gap": exact["b"]["occurrence"] - exact["a"]["occurrence"],
        "rate_a": e["b"],
        "rate_b": e["a"],
    }
    for stat, value in truth.items():
        r = pooled[stat]
        se = max((r["upper"] - r["lower"]) / (2 * 1.96), 1e-9)
        assert abs(r["estimate"] - value) < 4 * se + 1e-6, stat  # float32 TV
    surv = timing.survival_curves(m, 200, 1, 0.95).filter((pl.col("action") == "a") & (pl.col("step") == 10))
    se = (surv["upper"][0] - surv["lower"][0]) / (2 * 1.96)
    assert abs(surv["survival"][0] - (1 - e["a"]) ** 9) < 4 * se
    prof = profiles.branch_tv_profiles(m, 16, 50, 1, 0.95).filter(pl.col("stratum") == inputs.POOLED)
    np.testing.assert_allclose(prof["tv"], np.where(prof["action"] == "a", e["a"], e["b"]), rtol=1e-5)


def test_misconfigured_contrasts_and_empty_cohorts(study50, tmp_path):
    _, m = study50
    with pytest.raises(ValueError, match="analysis.contrasts"):
        decomposition.gap_decomposition(m, [["recent_90", "snapkv_90"]], 10, 1, 0.95)
    empty = get_result("figure6").build(
        m, n_boot=10, seed=1, confidence=0.95, cohort_max_tau=0, early=EARLY, late=LATE
    )  # no τ ≤ 0
    assert all(f.height == 0 for f in empty.values())
    plot_figure6(empty, tmp_path / "f6.pdf", tmp_path / "f6.png", early=EARLY, late=LATE, dpi=50)
    assert (tmp_path / "f6.png").stat().st_size > 0


def test_decomposition_when_one_action_never_diverges():
    m = {
        "occurrence_a": 0.02,
        "exposure_a": 0.4,
        "occupation_a": 0.3,
        "mismatch_a": 0.32,
        "occurrence_b": 0.0,
        "exposure_b": 0.0,
        "occupation_b": 0.0,
        "mismatch_b": 0.0,
    }
    out = decomposition.decomposition_stat(m)
    assert out["exposure_share"] == pytest.approx(1.0) and out["gap"] == pytest.approx(0.32)
    assert np.isnan(out["rate_b"]) and out["rate_a"] == pytest.approx(0.75)


def test_every_action_of_a_figure_gets_its_own_colour():
    """The paper's actions keep their colours; others take colours no other action of the figure has (a config with
    seven actions, as config/decoding.yaml, drew two pairs of curves in one colour before)."""
    from kvdiv.outputs.style import ACTION_COLORS, PALETTE, action_colors

    actions = ["dec_256_128", "dec_256_32", "dec_512_128", "dec_512_32", "recent_half", "snapkv_half", "both"]
    colors = action_colors(actions)
    assert len(set(colors.values())) == len(actions)
    assert (
        colors["snapkv_half"] == ACTION_COLORS["snapkv_half"] and colors["recent_half"] == ACTION_COLORS["recent_half"]
    )
    many = action_colors([f"a{i}" for i in range(len(PALETTE) + 2)])  # beyond the palette: cycles
    assert len(set(many.values())) == len(PALETTE)


def test_table2_pre_eos_gaps_and_their_paired_change(study50):
    """Each block's pre-EOS gap and its paired change from the first block (a mean of within-document differences
    equals the difference of the blocks' means when every document has both); the display shows both gaps."""
    _, m = study50
    gaps = blocks.clock_block_gaps(m, CONTRASTS, [[1, 32], [33, 64], [65, 128]], 50, 2, 0.95)
    for (model, stratum, contrast), g in gaps.group_by("model", "stratum", "contrast"):
        by_block = {r["block"]: r for r in g.iter_rows(named=True)}
        first, last = by_block["1–32"], by_block["65–128"]
        assert last["change_pre_eos"] == pytest.approx(last["gap_pre_eos"] - first["gap_pre_eos"], abs=1e-12)
        assert last["change_pre_eos_lower"] <= last["change_pre_eos"] <= last["change_pre_eos_upper"]
        assert first["change_pre_eos"] == 0.0
    display = table2_frame(gaps)
    assert "positions 65–128, strictly before EOS (pp)" in display.columns
    assert display.height == gaps.select("model", "contrast", "stratum").unique().height
