"""kvdiv.metrics.trajectory_replicates: per-replicate estimates and costs of one generate call (both modes),
checked against the cube metrics of the same trajectories and against the samplers' own row count."""

from __future__ import annotations

import numpy as np
import pytest

from kvdiv.estimands import pair_evaluations
from kvdiv.metrics import replicate_rows, trajectory_replicates
from support.toy_kernels import ToyKernelSession, history_kernel, mixture_kernel
from kvdiv.trajectories.generate import generate
from kvdiv.settings import generation


def _toy():
    ref = history_kernel(3, seed=1)
    return ToyKernelSession(ref, {"q": mixture_kernel(ref, history_kernel(3, seed=2), 0.5)})


def test_costs_per_replicate():
    """Pair evaluations H (complete) and H + (H − J) (swrb); rows 2(H−1) + (H − τ) and 2(H−1) + 3(H − J)."""
    H = 5
    assert pair_evaluations("complete", H, replicates=3).tolist() == [5, 5, 5]
    assert pair_evaluations("swrb", H, np.array([0, 1, 5])).tolist() == [5, 9, 5]
    assert replicate_rows("complete", H, np.array([6, 1, 5])).tolist() == [8, 12, 8]
    assert replicate_rows("swrb", H, None, np.array([0, 1, 5])).tolist() == [8, 20, 8]
    with pytest.raises(ValueError, match="mode"):
        replicate_rows("naive", H, np.array([1]))
    with pytest.raises(ValueError, match="mode"):
        pair_evaluations("naive", H, replicates=1)


def test_swrb_columns_and_row_check():
    """swrb rows carry D and J; a wrong row count of the samplers is an error."""
    out = generate(
        _toy(),
        ["q"],
        generation(master_seed=1, study_seed=1, horizon=6, replicates=20, mode="swrb"),
        eos_token_ids=[],
        progress=False,
        document_id="d",
    )
    frame = trajectory_replicates(out, "swrb", 2, "d")
    assert frame["D"].min() > 0 and frame["J"].min() >= 2
    assert (frame["pair_evaluations"] == 6 + 6 - frame["J"]).all()
    out["q"].rows += 1
    with pytest.raises(RuntimeError, match="row accounting"):
        trajectory_replicates(out, "swrb", 2, "d")


def test_values_by_hand_on_complete_trajectories():
    """M, M_L (window L after τ, plus the occurrence) and the capacity recomputed from the tokens of each row."""
    H, L = 7, 2
    out = generate(
        _toy(),
        ["q"],
        generation(master_seed=3, study_seed=1, horizon=H, replicates=40, mode="complete"),
        eos_token_ids=[],
        progress=False,
        document_id="d",
    )
    frame = trajectory_replicates(out, "complete", L, "d")
    mismatch = ~out["q"].match
    for i, row in enumerate(frame.iter_rows(named=True)):
        m = mismatch[i]
        assert row["R_H"] == pytest.approx(m.sum() / H)
        assert row["risk_tv"] == pytest.approx(out["q"].tv[i].astype(float).sum() / H)
        if not m.any():
            assert row["tau"] is None and row["R_L"] == 0 and row["B_L"] == 0
            continue
        tau = int(np.argmax(m)) + 1
        assert row["tau"] == tau
        assert row["R_L"] == pytest.approx((1 + m[tau : tau + L].sum()) / H)
        assert row["B_L"] == pytest.approx(max(0, H - tau - L) / H)
