"""Where the chains end (kvdiv.analysis.endings): exact values on hand-set EOS flags, the same through a written cube,
agreement with the EOS hazard of a simulated cube within its standard error, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from kvdiv.analysis.endings import censored_quantiles, eos_summary, reference_summary, running_by_step
from kvdiv.analysis.inputs import Metrics
from kvdiv.estimands import first_eos_step
from kvdiv.metrics import compute_metrics
from kvdiv.trajectories.store import open_cube
from support.synthetic_cube import simulate_cube, write_cube

H = 8


def flags(first: int) -> np.ndarray:
    """Cumulative EOS flags of a chain whose first EOS is at step ``first`` (0: none within H)."""
    return np.arange(1, H + 1) >= first if first else np.zeros(H, dtype=bool)


def hand_cube():
    """Two actions, 3 documents (two ruler, one helmet), 2 replicates; first-EOS steps of x and y set by hand."""
    ds = simulate_cube({"a": 0.1, "b": 0.3}, n_documents=3, replicates=2, horizon=H, seed=1)
    # [document][action][replicate] = (first EOS of x, first EOS of y)
    steps = [
        [[(0, 0), (3, 0)], [(0, 5), (3, 3)]],
        [[(0, 0), (0, 0)], [(0, 0), (0, 8)]],
        [[(2, 2), (0, 1)], [(2, 0), (0, 0)]],
    ]
    ex, ey = ds["eos_x"].values.copy(), ds["eos_y"].values.copy()
    for d, by_action in enumerate(steps):
        for a, by_rep in enumerate(by_action):
            for r, (fx, fy) in enumerate(by_rep):
                ex[d, a, r], ey[d, a, r] = flags(fx), flags(fy)
    ds["eos_x"] = (ds["eos_x"].dims, ex)
    ds["eos_y"] = (ds["eos_y"].dims, ey)
    return ds


def test_first_eos_step_reads_cumulative_flags():
    eos = np.array([flags(3), flags(0), flags(1), flags(H)])
    assert first_eos_step(eos).tolist() == [3, 0, 1, H]
    assert first_eos_step(eos.reshape(2, 2, H)).tolist() == [[3, 0], [1, H]]
    with pytest.raises(ValueError, match="step axis of length >= 1"):
        first_eos_step(np.zeros((2, 0), dtype=bool))


def test_eos_summary_exact_on_hand_set_flags(tmp_path):
    ds = hand_cube()
    table = eos_summary(ds, n_boot=200, seed=3)
    a, b = (table.filter(table["action"] == name).row(0, named=True) for name in ("a", "b"))
    # action a: neither ended in pairs (d0,r0), (d1,r0), (d1,r1): document means 1/2, 1, 0 -> 1/2
    assert a["neither_ended"] == pytest.approx(0.5) and a["n_documents"] == 3 and a["n_pairs"] == 6
    assert a["x_ended"] == pytest.approx((0.5 + 0 + 0.5) / 3) and a["y_ended"] == pytest.approx((0 + 0 + 1) / 3)
    # x ends at 3 and 2 of 6 chains: q25 is the 2nd smallest step (⌈0.25·6⌉ = 2); the median and q75 lie past H
    assert (a["x_n_ended"], a["x_mean_step"]) == (2, 2.5)
    assert (a["x_q25_step"], a["x_median_step"], a["x_q75_step"]) == (3.0, None, None)
    assert (a["y_n_ended"], a["y_q25_step"], a["y_q75_step"]) == (2, 2.0, None)  # y ends at 2 and 1
    # action b: neither ended only in (d1,r0) and (d2,r1): document means 0, 1/2, 1/2 -> 1/3
    assert b["neither_ended"] == pytest.approx(1 / 3)
    assert b["y_n_ended"] == 3 and b["y_median_step"] == 8.0  # y ends at 3, 5 and 8 of 6: the 3rd smallest
    assert a["neither_lower"] <= a["neither_ended"] <= a["neither_upper"]
    assert 0.0 <= a["neither_lower"] < a["neither_upper"] <= 1.0  # documents differ: a real interval
    running = running_by_step(ds)
    ra = running.filter(running["action"] == "a")
    assert ra["step"].to_list() == list(range(H + 1))
    assert ra["both_running"][0] == 1.0 and ra["both_running"][H] == pytest.approx(a["neither_ended"])
    # after step 1: only y of (d2, r1) has ended -> document 2 at 1/2
    assert ra["both_running"][1] == pytest.approx((1 + 1 + 0.5) / 3)
    assert ra["x_running"][H] == pytest.approx(1 - a["x_ended"]) and ra["y_running"][2] == pytest.approx(1 - 1 / 3)
    assert np.all(np.diff(running.filter(running["action"] == "b")["both_running"].to_numpy()) <= 0)
    # the same numbers read from a written cube (verified on open), and grouped by family
    write_cube(ds, tmp_path / "cube.zarr")
    assert eos_summary(open_cube(tmp_path / "cube.zarr"), n_boot=200, seed=3).equals(table)
    by_family = eos_summary(ds, ("action", "family"), n_boot=50)
    helmet_a = by_family.filter((by_family["action"] == "a") & (by_family["family"] == "helmet")).row(0, named=True)
    assert helmet_a["n_documents"] == 1 and helmet_a["neither_ended"] == pytest.approx(1.0)  # document 1 only


def test_eos_shares_match_the_simulated_hazard():
    """Independent EOS flags with hazard h: a chain runs through H with probability (1 - h)^H, a pair with its square;
    the estimates lie within 4 standard errors (document means are independent across documents)."""
    h, horizon, n_docs, reps = 0.01, 64, 300, 2
    ds = simulate_cube({"a": 0.1}, n_documents=n_docs, replicates=reps, horizon=horizon, seed=5, eos_hazard=h)
    row = eos_summary(ds, n_boot=100).row(0, named=True)
    survive = (1 - h) ** horizon
    for value, p in ((row["neither_ended"], survive**2), (1 - row["x_ended"], survive), (1 - row["y_ended"], survive)):
        assert abs(value - p) < 4 * np.sqrt(p * (1 - p) / (n_docs * reps))
    running = running_by_step(ds)
    t = np.arange(horizon + 1)
    assert np.max(np.abs(running["x_running"].to_numpy() - (1 - h) ** t)) < 4 * np.sqrt(0.25 / (n_docs * reps))
    # quartiles over all chains: q25 = ⌈ln 0.75 / ln 0.99⌉ = 29 (SE ≈ sqrt(q(1−q)/n) / f ≈ 2.4 steps at n = 600);
    # only 47 % end within H = 64, so the median lies past H or near it, and q75 past H
    assert abs(row["x_q25_step"] - 29) <= 10
    assert (row["x_median_step"] is None or row["x_median_step"] >= 50) and row["x_q75_step"] is None


def test_endings_refuse_swrb_cubes_and_unknown_groups():
    swrb = simulate_cube({"a": 0.1}, n_documents=2, replicates=1, horizon=H, seed=2, swrb=True)
    with pytest.raises(ValueError, match="mode 'swrb'.*residual branch path"):
        eos_summary(swrb)
    with pytest.raises(ValueError, match="cannot group by 'document'"):
        running_by_step(hand_cube(), ("action", "document"))
    with pytest.raises(ValueError, match="mode 'swrb'"):
        eos_summary(compute_metrics(swrb, window=2)["replicates"])


def test_the_metrics_give_the_cubes_numbers_and_the_result_shows_them(tmp_path):
    """The metrics' first_eos_x/first_eos_y (rule metrics) give eos_summary and running_by_step exactly the cube's
    numbers; the endings result builds its tables, display and figure from them."""
    from kvdiv.results.registry import get_result

    ds = hand_cube()
    computed = compute_metrics(ds, window=2)
    metrics = computed["replicates"]
    cube_table = eos_summary(ds, ("model", "action"), n_boot=200, seed=3)
    metric_table = eos_summary(metrics, ("model", "action"), n_boot=200, seed=3)
    assert metric_table.equals(cube_table)
    assert running_by_step(metrics, ("action",)).equals(running_by_step(ds, ("action",)))
    result = get_result("endings")
    study = Metrics(metrics, computed["profiles_aligned"], computed["profiles_clock"])
    frames = result.build(study, n_boot=50, seed=1, confidence=0.95)
    assert set(frames) == {"numbers", "reference", "strata", "running"}
    shown = result.display(frames["numbers"])
    a = shown.filter(shown["action"] == "a").row(0, named=True)
    assert a["reach H, neither ended (%)"].startswith("50.0") and a["x first EOS q25 / median / q75"] == "3 / > 8 / > 8"
    result.plot.draw(frames, tmp_path / "e.pdf", tmp_path / "e.png", dpi=60)
    assert (tmp_path / "e.png").stat().st_size > 0


def test_metrics_refuse_unknown_groups_too():
    metrics = compute_metrics(hand_cube(), window=2)["replicates"]
    with pytest.raises(ValueError, match="cannot group by 'document'"):
        eos_summary(metrics, ("action", "document"))


def test_censored_quantiles_count_the_chains_that_never_end():
    """Type-1 quantiles over all chains, a chain without EOS ending after H: against the empirical distribution
    enumerated by hand."""
    assert censored_quantiles(np.array([0, 0, 0, 4])) == {"q25": 4.0, "median": None, "q75": None}
    assert censored_quantiles(np.array([1, 2, 3, 4])) == {"q25": 1.0, "median": 2.0, "q75": 3.0}
    assert censored_quantiles(np.array([5, 0, 2])) == {"q25": 2.0, "median": 5.0, "q75": None}
    assert censored_quantiles(np.array([], dtype=int)) == {"q25": None, "median": None, "q75": None}
    steps = np.array([3, 0, 7, 1, 0, 0, 2, 9])  # each quantile: the smallest s with a share >= q ended by s
    for name, q in (("q25", 0.25), ("median", 0.5), ("q75", 0.75)):
        reached = [s for s in range(1, 10) if np.mean((steps > 0) & (steps <= s)) >= q]
        assert censored_quantiles(steps)[name] == (float(reached[0]) if reached else None)


def test_reference_chains_are_counted_once_when_shared():
    """With reference_chain: shared a document × replicate has one x: reference_summary counts it once (3 × 2 = 6
    chains, not 12); per_action counts each action's; a 'shared' cube whose actions hold different x is refused."""
    ds = hand_cube()
    ex = ds["eos_x"].values.copy()
    ex[:, 1] = ex[:, 0]  # the same x for both actions
    ds["eos_x"] = (ds["eos_x"].dims, ex)
    ds.attrs["reference_chain"] = "shared"
    row = reference_summary(ds, ("model",), n_boot=100, seed=1).row(0, named=True)
    # x first EOS (action a): d0 (0, 3), d1 (0, 0), d2 (2, 0): reached per document 1/2, 1, 1/2
    assert (row["n_chains"], row["n_documents"], row["n_ended"]) == (6, 3, 2)
    assert row["reached"] == pytest.approx(2 / 3) and row["reached_lower"] <= row["reached"] <= row["reached_upper"]
    assert (row["q25_step"], row["median_step"]) == (3.0, None)
    metrics = compute_metrics(ds, window=2)["replicates"]
    assert metrics["reference_chain"].unique().to_list() == ["shared"]
    assert reference_summary(metrics, ("model",), n_boot=100, seed=1).equals(
        reference_summary(ds, ("model",), n_boot=100, seed=1)
    )
    ds.attrs["reference_chain"] = "per_action"
    assert reference_summary(ds, ("model",), n_boot=100, seed=1).row(0, named=True)["n_chains"] == 12
    bad = hand_cube()
    bad.attrs["reference_chain"] = "shared"
    ex = bad["eos_x"].values.copy()
    ex[0, 1, 0] = flags(4)  # action b's x of document 0, replicate 0 ends at 4, action a's does not end
    bad["eos_x"] = (bad["eos_x"].dims, ex)
    with pytest.raises(ValueError, match="different x chains"):
        reference_summary(bad, ("model",))
    with pytest.raises(ValueError, match="without 'action'"):
        reference_summary(ds, ("action",))
