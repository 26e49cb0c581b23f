"""kvdiv.analysis pinned by cubes whose answers are known exactly.

Every test here was checked against a deliberately planted error (an off-by-one window or cohort edge, a
wrong column, a dropped swrb weight): the cubes put jumps exactly where such errors would read the wrong
value, so they fail. Hand-built cubes go through the real estimators (kvdiv.metrics.compute_metrics).

- cohort profiles and late − early: branch TV jumps at depths 17 and 49, rows with τ = 64 and τ = 65 differ;
- swrb-weighted profiles, late − early, gap decomposition and survival with history-dependent TV, against
  complete-mode values from exact enumeration of a toy kernel pair;
- Table 3: fixed_tv, tv and mismatch differ and jump at positions 1/2 and 32/33;
- Table 2: mismatch (and TV) jump at steps 32/33 and 64/65;
- entry times: within 4 standard errors (from the bootstrap interval) of the exact E[τ | τ ≤ H], an error
  far smaller than one step.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import xarray as xr

from kvdiv.analysis import blocks, decomposition, inputs, prediction, profiles, timing
from kvdiv.metrics import compute_metrics
from support.synthetic_cube import simulate_cube
from kvdiv.settings import generation

DIMS = ("document", "action", "replicate", "step")


def make_cube(
    match,
    tv,
    *,
    fixed_tv=None,
    eos=None,
    strata=("ruler_256", "helmet_256"),
    actions=None,
    overlap_tv=None,
    branch_start=None,
    study="exact",
) -> xr.Dataset:
    """A cube (docs/internals.md "Cube") from explicit arrays [document, action, replicate, step]."""
    match = np.asarray(match, dtype=bool)
    d, a, r, h = match.shape
    x = np.zeros(match.shape, dtype=np.int32)
    y = np.where(match, x, 1).astype(np.int32)
    eos = np.zeros(match.shape, dtype=bool) if eos is None else np.asarray(eos, dtype=bool)
    stratum = [strata[i % len(strata)] for i in range(d)]
    data = {
        "x": (DIMS, x),
        "y": (DIMS, y),
        "match": (DIMS, match),
        "eos_x": (DIMS, eos),
        "eos_y": (DIMS, np.zeros_like(eos)),
        "tv": (DIMS, np.asarray(tv, dtype=np.float32)),
        "fixed_tv": (DIMS, np.asarray(tv if fixed_tv is None else fixed_tv, dtype=np.float32)),
    }
    if overlap_tv is not None:
        data["overlap_tv"] = (DIMS, np.asarray(overlap_tv, dtype=np.float32))
        data["branch_start"] = (DIMS[:3], np.asarray(branch_start, dtype=np.int32))
    coords = {
        "document": [f"{study}-doc{i:04d}" for i in range(d)],
        "action": list(actions or [f"a{i}" for i in range(a)]),
        "replicate": np.arange(r),
        "step": np.arange(1, h + 1),
        "family": ("document", [s.rsplit("_", 1)[0] for s in stratum]),
        "task": ("document", ["t"] * d),
        "target_length": ("document", [int(s.rsplit("_", 1)[1]) for s in stratum]),
        "stratum": ("document", stratum),
        "prompt_tokens": ("document", [100] * d),
    }
    attrs = {"model": "toy", "study": study, "horizon": h, "mode": "swrb" if overlap_tv is not None else "complete"}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def metrics_of(ds: xr.Dataset, window: int = 4) -> inputs.Metrics:
    t = compute_metrics(ds, window=window)
    return inputs.Metrics(t["replicates"], t["profiles_aligned"], t["profiles_clock"])


def rows_of(frame: pl.DataFrame, **where) -> pl.DataFrame:
    for key, value in where.items():
        frame = frame.filter(pl.col(key) == value)
    return frame


def one(frame: pl.DataFrame, column: str = "estimate", **where) -> float:
    sub = rows_of(frame, **where)
    assert sub.height == 1, (where, sub)
    return float(sub[column][0])


# ----------------------------------------------------------------------------------- cohort profiles, late − early
H128 = 128
TAUS = [[2, 30, 64, 65, 100], [5, 64, 64, 65, 20], [10, 40, 65, 65, 64], [3, 63, 64, 66, 90]]


def branch_tv(depth: np.ndarray, tau: int, doc: int) -> np.ndarray:
    """Branch TV at depth ℓ: jumps at ℓ = 17 and ℓ = 49; rows with τ = 64 and τ = 65 are shifted differently."""
    base = np.where(depth <= 16, 0.1, np.where(depth <= 48, 0.3, 0.6))
    return base + {64: 0.05, 65: 0.2}.get(tau, 0.0) + 0.01 * doc


@pytest.fixture(scope="module")
def cohort_cube():
    d, r = len(TAUS), len(TAUS[0])
    steps = np.arange(1, H128 + 1)
    match = np.ones((d, 1, r, H128), dtype=bool)
    tv = np.zeros((d, 1, r, H128))
    eos = np.zeros((d, 1, r, H128), dtype=bool)
    for i, taus in enumerate(TAUS):
        for k, tau in enumerate(taus):
            after = steps > tau
            match[i, 0, k] = steps < tau
            match[i, 0, k, after] = (steps[after] % 3) != 0  # mismatches after τ too (not read by the profile)
            tv[i, 0, k, tau - 1] = 0.9  # depth 0: must never enter a depth window
            tv[i, 0, k, after] = branch_tv(steps[after] - tau, tau, i)
    eos[0, 0, 0, 39:] = True  # row (doc 0, τ = 2): first EOS at t = 40, so strict pre-EOS depths are < 38
    eos[2, 0, 4, 99:] = True  # row (doc 2, τ = 64): first EOS at t = 100
    return make_cube(match, tv, eos=eos, actions=["a"]), tv, eos


def expected_cohort(tv, eos, cohort, depths, strict=False, docs=None):
    num = den = 0.0
    for i, taus in enumerate(TAUS):
        if docs is not None and i not in docs:
            continue
        for k, tau in enumerate(taus):
            if tau > cohort:
                continue
            first_eos = int(np.argmax(eos[i, 0, k])) + 1 if eos[i, 0, k].any() else H128 + 1
            for depth in depths:
                t = tau + depth
                if t <= H128 and (not strict or t < first_eos):
                    num += tv[i, 0, k, t - 1]
                    den += 1
    return num / den


def expected_paired(tv, eos, cohort, early, late, docs=None):
    """The strict pre-EOS late − early as a within-document paired mean: (mean, number of documents with pre-EOS
    steps in both windows)."""
    diffs = []
    for i in range(len(TAUS)):
        if docs is not None and i not in docs:
            continue
        windows = []
        for depths in (early, late):
            num = den = 0.0
            for k, tau in enumerate(TAUS[i]):
                first_eos = int(np.argmax(eos[i, 0, k])) + 1 if eos[i, 0, k].any() else H128 + 1
                for depth in depths:
                    t = tau + depth
                    if tau <= cohort and t <= H128 and t < first_eos:
                        num, den = num + tv[i, 0, k, t - 1], den + 1
            windows.append(num / den if den else None)
        if None not in windows:
            diffs.append(windows[1] - windows[0])
    return float(np.mean(diffs)), len(diffs)


def test_cohort_profiles_pin_depths_and_the_cohort_cutoff(cohort_cube):
    ds, tv, eos = cohort_cube
    m = metrics_of(ds)
    prof = profiles.branch_tv_profiles(m, 64, 20, 1, 0.95)
    pooled = rows_of(prof, stratum=inputs.POOLED, action="a").sort("depth")
    assert pooled["depth"].to_list() == list(range(1, H128 - 2 + 1))  # the smallest τ is 2: depths 1..126
    want = [expected_cohort(tv, eos, 64, [depth]) for depth in pooled["depth"].to_list()]
    np.testing.assert_allclose(pooled["tv"].to_numpy(), want, atol=1e-6)
    # the jumps sit where they were planted, the cohort holds τ = 64 and not τ = 65
    assert pooled.filter(pl.col("depth") == 17)["tv"][0] - pooled.filter(pl.col("depth") == 16)["tv"][0] > 0.15
    # depth 64 by hand: the 13 rows with τ ≤ 64 (base 0.6, +0.05 for τ = 64, +0.01 per document index)
    by_hand = (0.6 + 0.6 + 0.65) + (0.61 + 0.66 + 0.66 + 0.61) + (0.62 + 0.62 + 0.67) + (0.63 + 0.63 + 0.68)
    assert one(prof, "tv", stratum=inputs.POOLED, depth=64) == pytest.approx(by_hand / 13, abs=1e-6)
    ruler = rows_of(prof, stratum="ruler_256").sort("depth")  # documents 0 and 2
    np.testing.assert_allclose(
        ruler["tv"].to_numpy(),
        [expected_cohort(tv, eos, 64, [dp], docs={0, 2}) for dp in ruler["depth"].to_list()],
        atol=1e-6,
    )


def test_late_minus_early_pins_window_edges_and_the_cohort(cohort_cube):
    ds, tv, eos = cohort_cube
    m = metrics_of(ds)
    early, late = list(range(1, 17)), list(range(49, 65))
    for by, cell, docs in (
        ("stratum", inputs.POOLED, None),
        ("stratum", "helmet_256", {1, 3}),
        ("family", "ruler", {0, 2}),
    ):
        lme = profiles.late_minus_early(m, 64, [1, 16], [49, 64], 20, 1, 0.95, by=by)
        got = {
            s: one(lme, statistic=s, **{by: cell})
            for s in ("early", "late", "late_minus_early", "late_minus_early_strict_pre_eos")
        }
        e, lt = expected_cohort(tv, eos, 64, early, docs=docs), expected_cohort(tv, eos, 64, late, docs=docs)
        assert got["early"] == pytest.approx(e, abs=1e-6)
        assert got["late"] == pytest.approx(lt, abs=1e-6)
        assert got["late_minus_early"] == pytest.approx(lt - e, abs=1e-6)
        strict, n_paired = expected_paired(tv, eos, 64, early, late, docs=docs)
        assert got["late_minus_early_strict_pre_eos"] == pytest.approx(strict, abs=1e-6)
        row = lme.filter((pl.col("statistic") == "late_minus_early_strict_pre_eos") & (pl.col(by) == cell))
        assert row["n_documents"].to_list() == [n_paired]
    # a cohort of τ ≤ 65 is a different number (the planted τ = 65 rows enter)
    wider = profiles.late_minus_early(m, 65, [1, 16], [49, 64], 20, 1, 0.95)
    assert one(wider, statistic="early", stratum=inputs.POOLED) == pytest.approx(
        expected_cohort(tv, eos, 65, early), abs=1e-6
    )
    assert abs(expected_cohort(tv, eos, 65, early) - expected_cohort(tv, eos, 64, early)) > 0.01


# ----------------------------------------------------------------------------------- swrb against exact enumeration
V, H6, COHORT, EARLY, LATE = 3, 6, 4, [1, 1], [2, 3]


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


_TABLE = np.random.default_rng(31).normal(size=(V + 1, H6, V)) * 1.5
_OTHER = np.random.default_rng(32).normal(size=(V + 1, H6, V)) * 1.5


def toy_p(h):
    return _softmax(_TABLE[h[-1] if h else V, len(h)])


def _toy_q(eps_of):
    def q(h):
        eps = eps_of(h)
        return (1 - eps) * toy_p(h) + eps * _softmax(_OTHER[h[-1] if h else V, len(h)])

    return q


# history-dependent perturbations: the TV along a path depends on its tokens, so D varies a lot between
# replicates and an unweighted swrb mean is biased
TOY_Q = {
    "strong": _toy_q(lambda h: 0.9 if h and h[-1] == 0 else 0.05),
    "weak": _toy_q(lambda h: 0.5 if len(h) % 2 and h[-1] != 1 else 0.02),
}


def enumerate_coupling(q_kernel):
    """Every joint path of the complete coupling (δ_1 = 0: step 1 from P under both kernels):
    (probability, τ (0: none), per-step mismatch [H], per-step δ [H])."""
    out = []

    def rec(x, y, prob, mism, deltas):
        t = len(x) + 1
        if t > H6:
            tau = next((s + 1 for s, m in enumerate(mism) if m), 0)
            out.append((prob, tau, np.array(mism), np.array(deltas)))
            return
        p = toy_p(x)
        q = toy_p(y) if t == 1 else q_kernel(y)
        m = np.minimum(p, q)
        d = 0.5 * np.abs(p - q).sum()
        for z in range(V):
            if m[z] > 0:
                rec(x + (z,), y + (z,), prob * m[z], mism + [False], deltas + [d])
        if d > 0:
            rp, rq = (p - m) / d, (q - m) / d
            for a in range(V):
                for b in range(V):
                    if rp[a] > 0 and rq[b] > 0:
                        rec(x + (a,), y + (b,), prob * d * rp[a] * rq[b], mism + [True], deltas + [d])

    rec((), (), 1.0, [], [])
    return out


def exact_values(paths):
    """Complete-mode population values from the enumerated paths."""
    prob = np.array([p[0] for p in paths])
    assert prob.sum() == pytest.approx(1.0, abs=1e-12)
    tau = np.array([p[1] for p in paths])
    mism = np.stack([p[2] for p in paths])
    delta = np.stack([p[3] for p in paths])
    div = tau > 0
    occ = (prob * div).sum() / H6
    exposure = (prob * div * (H6 - tau)).sum() / H6
    occupation = sum(pr * m[t:].sum() for pr, t, m in zip(prob, tau, mism) if t > 0) / H6
    mismatch = (prob[:, None] * mism).sum() / H6

    def cohort_mean(depths):
        num = den = 0.0
        for pr, t, d in zip(prob, tau, delta):
            if 0 < t <= COHORT:
                for dp in depths:
                    if t + dp <= H6:
                        num += pr * d[t + dp - 1]
                        den += pr
        return num / den

    return {
        "occurrence": occ,
        "exposure": exposure,
        "occupation": occupation,
        "mismatch": mismatch,
        "profile": {dp: cohort_mean([dp]) for dp in range(1, H6 - 1)},  # τ ≥ 2 (δ_1 = 0)
        "early": cohort_mean(range(EARLY[0], EARLY[1] + 1)),
        "late": cohort_mean(range(LATE[0], LATE[1] + 1)),
        "survival": {t: float((prob * ((tau == 0) | (tau > t))).sum()) for t in range(H6 + 1)},
    }


@pytest.fixture(scope="module")
def toy_metrics():
    return build_toy_metrics()


def build_toy_metrics():
    """Metrics of swrb and complete cubes of the toy pair (30 documents × 250 replicates per action) and the
    exact values."""
    from kvdiv.trajectories.generate import generate
    from support.toy_kernels import ToyKernelSession

    n_doc, reps = 30, 250
    out = {}
    for mode in ("swrb", "complete"):
        session = ToyKernelSession(toy_p, TOY_Q)
        traj = generate(
            session,
            list(TOY_Q),
            generation(master_seed=5, study_seed=6, horizon=H6, replicates=n_doc * reps, mode=mode),
            eos_token_ids=[],
            progress=False,
            document_id=mode,
        )

        def stack(name):
            return np.stack(
                [getattr(traj[a], name).reshape(n_doc, reps, *getattr(traj[a], name).shape[1:]) for a in TOY_Q], axis=1
            )

        swrb = mode == "swrb"
        ds = make_cube(
            stack("match"),
            stack("tv"),
            fixed_tv=stack("fixed_tv"),
            actions=list(TOY_Q),
            overlap_tv=stack("overlap_tv") if swrb else None,
            branch_start=stack("branch_start") if swrb else None,
            study=f"toy_{mode}",
        )
        out[mode] = metrics_of(ds, window=2)
    exact = {a: exact_values(enumerate_coupling(q)) for a, q in TOY_Q.items()}
    return out, exact


def _se(row) -> float:
    return max((row["upper"] - row["lower"]) / (2 * 1.96), 1e-9)


def within(estimate, lower, upper, truth, k=4.0):
    se = max((upper - lower) / (2 * 1.96), 1e-9)
    return abs(estimate - truth) < k * se, (estimate, truth, se)


@pytest.mark.parametrize("mode", ["swrb", "complete"])
def test_weighted_profiles_and_contrasts_match_exact_enumeration(toy_metrics, mode):
    metrics, exact = toy_metrics
    m = metrics[mode]
    prof = profiles.branch_tv_profiles(m, COHORT, 300, 2, 0.95)
    lme = profiles.late_minus_early(m, COHORT, EARLY, LATE, 300, 2, 0.95)
    for action, ex in exact.items():
        for r in rows_of(prof, stratum=inputs.POOLED, action=action).iter_rows(named=True):
            ok, info = within(r["tv"], r["lower"], r["upper"], ex["profile"][r["depth"]])
            assert ok, (mode, action, r["depth"], info)
        for stat, truth in (
            ("early", ex["early"]),
            ("late", ex["late"]),
            ("late_minus_early", ex["late"] - ex["early"]),
        ):
            r = rows_of(lme, stratum=inputs.POOLED, action=action, statistic=stat).row(0, named=True)
            ok, info = within(r["estimate"], r["lower"], r["upper"], truth)
            assert ok, (mode, action, stat, info)
    # history dependence is real: the profiles are not flat
    assert abs(exact["strong"]["late"] - exact["strong"]["early"]) > 0.03
    assert abs(exact["weak"]["late"] - exact["weak"]["early"]) > 0.03


@pytest.mark.parametrize("mode", ["swrb", "complete"])
def test_weighted_decomposition_and_survival_match_exact_enumeration(toy_metrics, mode):
    metrics, exact = toy_metrics
    m = metrics[mode]
    a, b = exact["strong"], exact["weak"]
    dec = decomposition.gap_decomposition(m, [["strong", "weak"]], 300, 3, 0.95)
    rate = lambda e: e["occupation"] / e["exposure"]  # noqa: E731
    truth = {
        "gap": a["mismatch"] - b["mismatch"],
        "occurrence_gap": a["occurrence"] - b["occurrence"],
        "exposure_gap": a["exposure"] - b["exposure"],
        "rate_a": rate(a),
        "rate_b": rate(b),
    }
    for stat, value in truth.items():
        r = rows_of(dec, stratum=inputs.POOLED, statistic=stat).row(0, named=True)
        ok, info = within(r["estimate"], r["lower"], r["upper"], value)
        assert ok, (mode, stat, info)
    surv = timing.survival_curves(m, 300, 3, 0.95)
    for action, ex in exact.items():
        for r in rows_of(surv, action=action).iter_rows(named=True):
            if r["step"] == 0:
                continue
            ok, info = within(r["survival"], r["lower"], r["upper"], ex["survival"][r["step"]])
            assert ok, (mode, action, r["step"], info)


# ------------------------------------------------------------------------------------------- Table 3
H64 = 64


@pytest.fixture(scope="module")
def table3_cube():
    """Two actions, 10 documents, 2 replicates: mismatch, tv and fixed_tv are different step functions that
    jump at positions 1/2 and 32/33 and differ between documents."""
    d, r = 10, 2
    steps = np.arange(1, H64 + 1)
    match = np.ones((d, 2, r, H64), dtype=bool)
    fixed = np.zeros((d, 2, r, H64))
    tv = np.zeros((d, 2, r, H64))
    rng = np.random.default_rng(3)
    for i in range(d):
        for a in range(2):
            for k in range(r):
                level_early, level_late = rng.uniform(0.02, 0.3), rng.uniform(0.3, 0.6)
                fixed[i, a, k] = np.where(steps <= 32, level_early, level_late)
                fixed[i, a, k, 0] = 0.5 + 0.1 * a  # step 1 stands out
                tv[i, a, k] = 0.1 + 0.5 * fixed[i, a, k] ** 2 + 0.15 * a  # another column, another gap a − b
                early_every, late_every = (3 + a + k + i % 2), (2 + a)
                match[i, a, k] = np.where(steps <= 32, steps % early_every != 0, steps % late_every != 0)
                match[i, a, k, 0] = a == 1  # step 1 mismatches for action 0 only
    return make_cube(match, tv, fixed_tv=fixed, actions=["a", "b"]), match, fixed


def test_table3_pins_positions_1_to_32_and_the_fixed_history_column(table3_cube):
    ds, match, fixed = table3_cube
    m = metrics_of(ds)
    t3 = prediction.prediction_table(m, ["a", "b"], [1, 32], 50, 1, 0.95, folds=5)
    mism = ~match
    y = mism[:, 0].mean(axis=(-1, -2)) - mism[:, 1].mean(axis=(-1, -2))  # full-horizon gap per document
    feats = {
        "short_window": mism[:, 0, :, :32].mean(axis=(-1, -2)) - mism[:, 1, :, :32].mean(axis=(-1, -2)),
        "fixed_history": fixed[:, 0, :, :32].mean(axis=(-1, -2)) - fixed[:, 1, :, :32].mean(axis=(-1, -2)),
    }
    for name, f in feats.items():
        raw = rows_of(t3, predictor=name, method="raw").row(0, named=True)
        assert raw["population_gap"] == pytest.approx(y.mean(), abs=1e-7)
        assert raw["predicted_gap"] == pytest.approx(f.mean(), abs=1e-6)
        assert raw["difference"] == pytest.approx(f.mean() - y.mean(), abs=1e-6)
        assert raw["mae"] == pytest.approx(np.abs(f - y).mean(), abs=1e-6)
        assert raw["rmse"] == pytest.approx(np.sqrt(((f - y) ** 2).mean()), abs=1e-6)
        assert raw["n_documents"] == 10
        for method in ("cell_mean", "ridge"):  # calibrated methods predict the same population gap
            assert one(t3, "population_gap", predictor=name, method=method) == pytest.approx(y.mean(), abs=1e-7)
    # the planted jumps make neighbouring windows and the other TV column give other numbers
    tv = ds["tv"].values
    assert (
        abs(
            feats["fixed_history"].mean()
            - (tv[:, 0, :, :32].mean(axis=(-1, -2)) - tv[:, 1, :, :32].mean(axis=(-1, -2))).mean()
        )
        > 0.05
    )
    assert (
        abs(
            feats["fixed_history"].mean()
            - (fixed[:, 0, :, :33].mean(axis=(-1, -2)) - fixed[:, 1, :, :33].mean(axis=(-1, -2))).mean()
        )
        > 1e-3
    )
    t3_31 = prediction.prediction_table(m, ["a", "b"], [2, 32], 20, 1, 0.95)
    assert (
        abs(one(t3_31, "predicted_gap", predictor="fixed_history", method="raw") - feats["fixed_history"].mean()) > 1e-3
    )


def test_table3_refuses_swrb_studies():
    ds = simulate_cube(
        {"a": 0.05, "b": 0.1}, n_documents=4, replicates=2, horizon=16, seed=1, swrb=True, study="retention50"
    )
    with pytest.raises(
        ValueError,
        match=r"Table 3: study 'retention50' ran in mode 'swrb'.*fixed-history predictor "
        r"is undefined.*analysis.studies.table3",
    ):
        prediction.prediction_table(metrics_of(ds), ["a", "b"], [1, 8], 10, 1, 0.95)


# ------------------------------------------------------------------------------------------- Table 2
def test_table2_pins_block_edges():
    """Mismatch (and TV) change exactly at steps 32/33 and 64/65; per stratum, family and model the block gaps
    are the exact block means."""
    d, r = 6, 4
    steps = np.arange(1, H128 + 1)
    strata = ("ruler_256", "ruler_512", "helmet_256")
    levels = {  # replicates (of 4) that mismatch at a step, per block, by action and family
        ("a", "ruler"): (1, 3, 2),
        ("b", "ruler"): (0, 1, 4),
        ("a", "helmet"): (2, 2, 0),
        ("b", "helmet"): (4, 0, 1),
    }
    block = np.where(steps <= 32, 0, np.where(steps <= 64, 1, 2))
    match = np.ones((d, 2, r, H128), dtype=bool)
    for i in range(d):
        family = strata[i % 3].split("_")[0]
        for a, name in enumerate("ab"):
            k = np.array(levels[(name, family)])[block]
            match[i, a] = np.arange(r)[:, None] >= k[None, :]  # replicates 0..k−1 mismatch at that step
    tv = (~match).mean(axis=2, keepdims=True).repeat(r, axis=2)
    m = metrics_of(make_cube(match, tv, strata=strata, actions=["a", "b"]))
    gaps = blocks.clock_block_gaps(m, [["a", "b"]], [[1, 32], [33, 64], [65, 128]], 20, 1, 0.95)
    labels = ["1–32", "33–64", "65–128"]
    for family in ("ruler", "helmet"):
        want = [(levels[("a", family)][j] - levels[("b", family)][j]) / r for j in range(3)]
        for stratum in (s for s in strata if s.startswith(family)):
            got = [one(gaps, "gap", stratum=stratum, block=lab) for lab in labels]
            np.testing.assert_allclose(got, want, atol=1e-12)
        got = [one(gaps, "gap", stratum=f"{family}_all", block=lab) for lab in labels]
        np.testing.assert_allclose(got, want, atol=1e-12)
    pooled = [one(gaps, "gap", stratum=inputs.POOLED, block=lab) for lab in labels]
    weights = {"ruler": 4 / 6, "helmet": 2 / 6}
    np.testing.assert_allclose(
        pooled,
        [sum(w * (levels[("a", f)][j] - levels[("b", f)][j]) / r for f, w in weights.items()) for j in range(3)],
        atol=1e-12,
    )


# ------------------------------------------------------------------------------------------- entry times
def test_entry_times_within_standard_errors_of_the_exact_value():
    """Constant TV e from step 2: P(τ = j) = e(1 − e)^{j−2}. The mean entry time among diverged rows must sit within
    4 bootstrap standard errors of the exact E[τ | τ ≤ H], and those errors are far below one step, so a τ
    off-by-one fails."""
    e, h = 0.1, 32  # P(τ ≤ H) = 1 − 0.9^31 ≈ 0.96: the truncation at H matters
    ds = simulate_cube({"a": e}, n_documents=40, replicates=100, horizon=h, seed=11)
    entry = timing.entry_times(metrics_of(ds), 400, 5, 0.95)
    j = np.arange(2, h + 1)
    p_tau = e * (1 - e) ** (j - 2)
    for stat, truth in (("mean_tau_diverged", (j * p_tau).sum() / p_tau.sum()), ("diverged", p_tau.sum())):
        r = rows_of(entry, stratum=inputs.POOLED, action="a", statistic=stat).row(0, named=True)
        se = _se(r)
        assert abs(r["estimate"] - truth) < 4 * se, (stat, r["estimate"], truth, se)
    assert _se(rows_of(entry, stratum=inputs.POOLED, statistic="mean_tau_diverged").row(0, named=True)) < 0.2
