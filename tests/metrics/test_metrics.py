"""kvdiv.metrics: hand-made rows with known τ etc., the per-row identity R = O + Π, the constant-TV
persistent perturbation (Π = e·E, C = e), and the SWRB estimators against their exact expectations."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import xarray as xr

from kvdiv.layout import METRIC_TABLES
from kvdiv.metrics import compute_metrics, write_metrics
from support.synthetic_cube import simulate_cube, write_cube
from kvdiv.settings import generation


def hand_cube() -> xr.Dataset:
    """One document, one action, three replicates, H = 8, with hand-written patterns."""
    mismatch = np.array(
        [
            [0, 0, 1, 0, 1, 1, 0, 0],  # τ = 3
            [0, 0, 0, 0, 0, 0, 0, 0],  # never diverges
            [0, 0, 0, 0, 0, 0, 0, 1],  # τ = H
        ],
        dtype=bool,
    )
    tv = np.tile(np.linspace(0.0, 0.7, 8, dtype=np.float32), (3, 1))
    eos_x = np.zeros((3, 8), dtype=bool)
    eos_x[0, 4:] = True  # row 0: x emits EOS at step 5
    eos_y = np.zeros((3, 8), dtype=bool)
    eos_y[2, 1:] = True  # row 2: y emits EOS at step 2
    dims = ("document", "action", "replicate", "step")
    x = np.zeros((3, 8), dtype=np.int32)
    y = x + mismatch
    arrays = {
        "x": x,
        "y": y,
        "tv": tv,
        "fixed_tv": tv / 2,
        "match": ~mismatch,
        "eos_x": eos_x,
        "eos_y": eos_y,
    }
    data = {k: (dims, v[None, None]) for k, v in arrays.items()}
    coords = {
        "document": ["d0"],
        "action": ["act"],
        "replicate": [0, 1, 2],
        "step": np.arange(1, 9),
        "stratum": ("document", ["ruler_256"]),
        "family": ("document", ["ruler"]),
    }
    return xr.Dataset(data, coords=coords, attrs={"model": "m", "study": "s", "horizon": 8})


def test_hand_made_rows():
    out = compute_metrics(hand_cube(), window=2)
    rows = out["replicates"].sort("replicate")
    assert rows["tau"].to_list() == [3, None, 8]
    assert rows["diverged"].to_list() == [True, False, True]
    h = 8
    np.testing.assert_allclose(rows["mismatch"], [3 / h, 0, 1 / h])
    np.testing.assert_allclose(rows["occurrence"], [1 / h, 0, 1 / h])
    np.testing.assert_allclose(rows["exposure"], [5 / h, 0, 0])
    np.testing.assert_allclose(rows["occupation"], [2 / h, 0, 0])
    assert rows["mismatch_rate"].to_list()[0] == pytest.approx(2 / 5)
    assert rows["mismatch_rate"].to_list()[1:] == [None, None]
    assert rows["first_eos"].to_list() == [5, None, 2]
    assert rows["first_eos_x"].to_list() == [5, None, None] and rows["first_eos_y"].to_list() == [None, None, 2]
    np.testing.assert_allclose(rows["mismatch_pre_eos"], [2 / h, 0, 0])
    np.testing.assert_allclose(rows["mismatch_strict_pre_eos"], [1 / h, 0, 0])
    np.testing.assert_allclose(rows["mismatch_post_eos"], [1 / h, 0, 1 / h])
    # window L = 2 after τ = 3: steps 4, 5 → one mismatch; capacity max(0, 8 − 3 − 2)/8
    np.testing.assert_allclose(rows["risk_window"], [2 / h, 0, 1 / h])
    np.testing.assert_allclose(rows["capacity"], [3 / h, 0, 0])
    tv = np.linspace(0.0, 0.7, 8)
    np.testing.assert_allclose(rows["risk_tv"], tv.sum() / h, rtol=1e-6)
    np.testing.assert_allclose(rows["fixed_tv_mean"], tv.sum() / 2 / h, rtol=1e-6)

    aligned = out["profiles_aligned"].sort("replicate", "depth")
    first = aligned.filter(pl.col("replicate") == 0)
    assert first["depth"].to_list() == [1, 2, 3, 4, 5]
    assert first["step"].to_list() == [4, 5, 6, 7, 8]
    np.testing.assert_allclose(first["tv"], tv[3:], rtol=1e-6)
    assert first["mismatch"].to_list() == [False, True, True, False, False]
    assert first["pre_eos"].to_list() == [True, False, False, False, False]
    assert aligned.filter(pl.col("replicate") != 0).height == 0  # τ = H has no depth ≥ 1

    clock = out["profiles_clock"].sort("step")
    assert clock.height == 8
    np.testing.assert_allclose(clock["mismatch"], [0, 0, 1 / 3, 0, 1 / 3, 1 / 3, 0, 1 / 3])


@pytest.fixture(scope="module")
def persistent():
    e = {"weak": 0.04, "strong": 0.15}
    ds = simulate_cube(e, n_documents=40, replicates=25, horizon=48, seed=11, eos_hazard=0.01)
    return e, ds, compute_metrics(ds, window=8)["replicates"]


def test_row_identities(persistent):
    _, _, rows = persistent
    np.testing.assert_allclose(rows["mismatch"], rows["occurrence"] + rows["occupation"], atol=1e-12)
    np.testing.assert_allclose(rows["mismatch"], rows["mismatch_pre_eos"] + rows["mismatch_post_eos"], atol=1e-12)
    assert (rows["mismatch_strict_pre_eos"] <= rows["mismatch_pre_eos"]).all()
    assert (rows["risk_window"] <= rows["mismatch"] + 1e-12).all()
    assert (rows["mismatch"] <= rows["risk_window"] + rows["capacity"] + 1e-12).all()
    assert rows.height == 40 * 2 * 25


@pytest.mark.parametrize("action", ["weak", "strong"])
def test_constant_tv_gives_occupation_e_times_exposure(persistent, action):
    e, _, rows = persistent
    rows = rows.filter(pl.col("action") == action)
    h = 48
    diff = (rows["occupation"] - e[action] * rows["exposure"]).to_numpy()
    assert abs(diff.mean()) < 4 * diff.std(ddof=1) / np.sqrt(diff.size)
    # R_H = e (H − 1)/H exactly (δ_1 = 0), and the TV-integrated risk equals it row by row
    m = rows["mismatch"].to_numpy()
    exact = e[action] * (h - 1) / h
    assert abs(m.mean() - exact) < 4 * m.std(ddof=1) / np.sqrt(m.size)
    np.testing.assert_allclose(rows["risk_tv"], exact, rtol=1e-5)
    # exposure: E[(H − τ)/H; τ ≤ H] for τ − 1 ~ Geometric(e) on 1..H−1
    j = np.arange(2, h + 1)
    p_tau = e[action] * (1 - e[action]) ** (j - 2)
    ex = rows["exposure"].to_numpy()
    assert abs(ex.mean() - (p_tau * (h - j) / h).sum()) < 4 * ex.std(ddof=1) / np.sqrt(ex.size)


def test_swrb_estimators_are_unbiased_and_beat_naive():
    e, h, window = 0.05, 32, 4
    ds = simulate_cube({"a": e}, n_documents=20, replicates=100, horizon=h, seed=5, swrb=True)
    rows = compute_metrics(ds, window=window)["replicates"]
    np.testing.assert_allclose(rows["z_r"], rows["z_o"] + rows["z_pi"], atol=1e-12)
    np.testing.assert_allclose(rows["z_r"], rows["z_l"] + rows["z_t"], atol=1e-12)
    j = np.arange(2, h + 1)
    p_tau = e * (1 - e) ** (j - 2)
    exact = {
        "z_r": e * (h - 1) / h,
        "z_o": p_tau.sum() / h,
        "z_l": (p_tau * (1 + e * np.minimum(window, h - j))).sum() / h,
        "w_l": (p_tau * np.maximum(0, h - j - window)).sum() / h,
    }
    for col, value in exact.items():
        z = rows[col].to_numpy()
        se = max(z.std(ddof=1) / np.sqrt(z.size), 1e-12)
        assert abs(z.mean() - value) < 4 * se + 1e-9, col
    # generation-clock profile: per-row unbiased estimates of P(x_t ≠ y_t) = E[δ_t] = e for t ≥ 2
    clock = compute_metrics(ds, window=window)["profiles_clock"].filter(pl.col("step") >= 2)
    for col in ("mismatch", "tv"):
        v = clock[col].to_numpy()  # 20 documents × 31 steps of 100-replicate means
        assert abs(v.mean() - e) < 4 * v.std(ddof=1) / np.sqrt(20), col
    assert clock["fixed_tv"].null_count() == clock.height
    # the naive coupled estimator M for the same kernel pair has the larger variance
    naive = compute_metrics(simulate_cube({"a": e}, 20, 100, h, seed=6), window=window)["replicates"]["mismatch"]
    assert rows["z_r"].var() < naive.var()


def test_write_metrics_roundtrip(tmp_path):
    ds = simulate_cube({"a": 0.1, "b": 0.3}, n_documents=4, replicates=2, horizon=16, seed=3)
    write_cube(ds, tmp_path / "cube.zarr")
    paths = write_metrics(tmp_path / "cube.zarr", tmp_path / "metrics", window=4, model="m1", study="s1")
    assert sorted(p.name for p in paths.values()) == sorted(f"{table}.parquet" for table in METRIC_TABLES)
    rows = pl.read_parquet(paths["replicates"])
    assert rows.height == 4 * 2 * 2
    assert set(rows["model"]) == {"m1"} and set(rows["stratum"]) == {"ruler_256", "helmet_256"}
    clock = pl.read_parquet(paths["profiles_clock"])
    assert clock.height == 4 * 2 * 16
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_metrics(tmp_path / "missing.zarr", tmp_path / "m2", window=4)


def test_metrics_on_generated_cubes_agree_across_modes(tmp_path):
    """Real pipeline pieces: coupled generation with toy kernels → per-document stores → cube (kvdiv.trajectories.store)
    → metrics. The naive mean of M (complete mode) and the SWRB mean of Z_R estimate the same R_H."""
    from kvdiv.trajectories.generate import generate
    from kvdiv.trajectories.store import build_cube, write_document_store
    from support.toy_kernels import ToyKernelSession, history_kernel, mixture_kernel

    vocab, eos, h, reps = 5, 4, 6, 1500
    ref = history_kernel(vocab, seed=1)
    kernels = {"a": mixture_kernel(ref, history_kernel(vocab, seed=2), 0.5), "b": ref}
    rows = {}
    for mode in ("complete", "swrb"):
        session = ToyKernelSession(ref, kernels, eos_token_ids=[eos])
        out = generate(
            session,
            ["a", "b"],
            generation(master_seed=1, study_seed=2, horizon=h, replicates=reps, mode=mode),
            eos_token_ids=[eos],
            progress=False,
            document_id=mode,
        )
        doc = {"id": f"st-ruler_16-{mode}", "family": "ruler", "task": "t", "stratum": "ruler_16", "target_length": 16}
        attrs = {
            "kvdiv_version": "0",
            "model": "toy",
            "model_spec": {},
            "weight_hash": "h",
            "document": doc,
            "actions": {"a": {"press": "P"}, "b": {"press": "P"}},
            "horizon": h,
            "temperature": 1.0,
            "seed": [1, 2],
            "mode": mode,
            "evict_first_step": False,
            "prompt_tokens": 10,
        }
        store = write_document_store(tmp_path / f"{mode}.zarr", out, attrs)
        build_cube("st", "toy", [store], tmp_path / f"cube_{mode}.zarr")
        paths = write_metrics(tmp_path / f"cube_{mode}.zarr", tmp_path / f"metrics_{mode}", window=2)
        rows[mode] = pl.read_parquet(paths["replicates"])
        if mode == "complete":
            mismatch = out["a"].x != out["a"].y
            tau = np.where(mismatch.any(1), mismatch.argmax(1) + 1, 0)
            got = rows[mode].filter(pl.col("action") == "a").sort("replicate")["tau"].fill_null(0).to_numpy()
            np.testing.assert_array_equal(got, tau)
    complete = rows["complete"].filter(pl.col("action") == "a")
    swrb = rows["swrb"].filter(pl.col("action") == "a")
    np.testing.assert_allclose(complete["mismatch"], complete["occurrence"] + complete["occupation"], atol=1e-12)
    m, z = complete["mismatch"].to_numpy(), swrb["z_r"].to_numpy()
    se = np.sqrt(m.var(ddof=1) / m.size + z.var(ddof=1) / z.size)
    assert abs(m.mean() - z.mean()) < 4 * se
    assert z.var() < m.var()
    # the identical kernel pair never diverges
    assert rows["complete"].filter(pl.col("action") == "b")["diverged"].sum() == 0
    assert (rows["swrb"].filter(pl.col("action") == "b")["z_r"] == 0).all()
