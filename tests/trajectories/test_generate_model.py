"""Coupled generation with the real KernelSession on tiny random models (no download)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import xarray as xr

from kvdiv.trajectories.generate import generate
from kvdiv.trajectories.job import run_document
from kvdiv.kernel.session import KernelSession
from kvdiv.trajectories.store import read_document_store, read_prompt_ids
from kvdiv.settings import generation

ACTIONS = {
    "snapkv_half": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8},
    "recent_half": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 0},
    "keep_all": {"press": "StreamingLLMPress", "compression_ratio": 0.0, "n_sink": 0},
}
H, R = 12, 3
TV_ATOL = 1e-6  # float32 round-off of batched decoding (run_document's default)
PROMPT = "The key for the blue door is 4812. Remember it. " * 3 + "What is the key for the blue door?"


def prompt_ids(loaded) -> torch.Tensor:
    return torch.tensor(loaded.tokenizer(PROMPT, add_special_tokens=False)["input_ids"])


def run(loaded, actions, mode="complete", seed=("doc3",), temperature=1.0, ids=None):
    """Couple ``actions`` on the prompt; the default document id "doc3" gives streams under which some pairs of the
    tiny Llama diverge within H in both modes at temperature 1.5 (divergence is rare on it)."""
    ids = prompt_ids(loaded) if ids is None else ids
    g = generation(
        master_seed=1, study_seed=2, horizon=H, replicates=R, mode=mode, tv_atol=TV_ATOL, temperature=temperature
    )
    session = KernelSession(loaded, ids, {a: ACTIONS[a] for a in actions}, g)
    document_id = "-".join(map(str, seed))
    out = generate(
        session, list(actions), g, document_id=document_id, eos_token_ids=loaded.eos_token_ids, progress=False
    )
    return session, out


@pytest.mark.parametrize("mode", ["complete", "swrb"])
def test_store_invariants_on_a_tiny_model(tiny_llama, mode):
    session, out = run(tiny_llama, list(ACTIONS), mode=mode, temperature=1.5)
    assert session._chains.chains == {}  # every chain released
    diverged_any = False
    for name, t in out.items():
        assert np.array_equal(t.match, t.x == t.y)
        assert np.all((t.tv >= 0) & (t.tv <= 1)) and np.all((t.fixed_tv >= 0) & (t.fixed_tv <= 1))
        assert np.all(t.tv[:, 0] == 0)  # δ_1 = 0: step 1 is drawn from the prefill's law
        for r in range(R):
            mism = np.flatnonzero(~t.match[r])
            if len(mism):
                diverged_any = True
                j = mism[0]
                assert np.array_equal(t.x[r, :j], t.y[r, :j]) and t.tv[r, j] > 0
                assert t.fixed_tv[r, j] == t.tv[r, j]  # same history up to τ
        if name == "keep_all":  # 100% retention ⇒ δ ≡ 0 and identical chains
            assert np.all(t.match) and np.all(t.tv == 0) and np.all(t.fixed_tv == 0)
            if mode == "swrb":
                assert np.all(t.branch_start == 0)
    assert diverged_any


def test_rerun_and_other_actions_do_not_change_a_trajectory(tiny_qwen2):
    _, all3 = run(tiny_qwen2, list(ACTIONS), temperature=1.5)
    _, again = run(tiny_qwen2, list(ACTIONS), temperature=1.5)
    _, alone = run(tiny_qwen2, ["recent_half"], temperature=1.5)
    for name in ("x", "y", "tv", "fixed_tv", "match", "eos_x"):
        for a in ACTIONS:
            assert np.array_equal(getattr(all3[a], name), getattr(again[a], name)), (a, name)
    a, b = all3["recent_half"], alone["recent_half"]
    assert np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y)
    np.testing.assert_allclose(a.tv, b.tv, atol=1e-5)  # batch composition may move float round-off only


def test_run_document_renders_for_its_model_and_records_the_ids(tiny_llama, tmp_path):
    """The job renders the message with its own model's template, records exactly the ids it fed, and the
    store can be recomputed from those ids alone."""
    doc = {
        "id": "st-ruler_64-0000",
        "family": "ruler",
        "task": "niah",
        "stratum": "ruler_64",
        "target_length": 64,
        "prompt": PROMPT,
        "answer_prefix": "Answer:",
        "rendered": False,
        "answers": ["4812"],
        "n_tokens": 0,
        "tokenizer": "tiny",
        "seed": 1,
    }
    path = run_document(
        tiny_llama,
        doc,
        {"snapkv_half": ACTIONS["snapkv_half"]},
        tmp_path / "d.zarr",
        generation(master_seed=1, study_seed=2, horizon=H, replicates=R),
        progress=False,
    )
    attrs, data = read_document_store(path)
    ids = read_prompt_ids(path)
    rendering = "<|im_start|>user\n" + PROMPT + "<|im_end|>\n<|im_start|>assistant\nAnswer:"  # ChatML, by hand
    assert (
        ids.dtype == np.int32 and ids.tolist() == tiny_llama.tokenizer(rendering, add_special_tokens=False)["input_ids"]
    )
    assert attrs["prompt_tokens"] == ids.size and "prompt" not in attrs["document"]
    assert attrs["prompt_rendering"].startswith("chat_template") and attrs["press_seeds"] == {}
    assert xr.open_zarr(path, consolidated=False)["prompt_ids"].dims == ("prompt_token",)
    assert attrs["weight_hash"] == tiny_llama.weight_hash and attrs["mode"] == "complete"
    assert data["snapkv_half"]["x"].shape == (R, H)
    _, direct = run(tiny_llama, ["snapkv_half"], seed=("st-ruler_64-0000",), ids=torch.as_tensor(ids, dtype=torch.long))
    assert np.array_equal(direct["snapkv_half"].y, data["snapkv_half"]["y"])
    # an already rendered document is fed unchanged
    path = run_document(
        tiny_llama,
        {**doc, "answer_prefix": "", "rendered": True},
        {"snapkv_half": ACTIONS["snapkv_half"]},
        tmp_path / "r.zarr",
        generation(master_seed=1, study_seed=2, horizon=2, replicates=1),
        progress=False,
    )
    assert read_prompt_ids(path).tolist() == prompt_ids(tiny_llama).tolist()
    assert read_document_store(path)[0]["prompt_rendering"].startswith("document")
    n = ids.size
    with pytest.raises(
        ValueError,
        match=rf"model '{tiny_llama.name}', document 'st-ruler_64-0000': its rendering has {n} "
        rf"prompt tokens; \+ horizon 4000 = {n + 4000} exceeds the model's context of 4096",
    ):
        run_document(
            tiny_llama,
            doc,
            {"snapkv_half": ACTIONS["snapkv_half"]},
            tmp_path / "e.zarr",
            generation(master_seed=1, study_seed=2, horizon=4000, replicates=1),
            progress=False,
        )
    assert not (tmp_path / "e.zarr").exists()


def _merged_chisquare(samples: np.ndarray, law: np.ndarray, min_expected: float = 5.0) -> float:
    """Chi-square p-value of token samples against ``law``, cells with small expectation merged."""
    from scipy import stats

    n = len(samples)
    counts = np.bincount(samples, minlength=len(law)).astype(float)
    big = law * n >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(law[big] * n, law[~big].sum() * n)
    keep = exp > 0
    assert obs[~keep].sum() == 0
    return stats.chisquare(obs[keep], exp[keep] * obs.sum() / exp[keep].sum()).pvalue


def test_coupled_chains_keep_their_marginals(tiny_llama):
    """x_1, x_2 ~ P and y_1, y_2 ~ Q (evicting from step 1), against laws computed by the session itself."""
    R, T = 2000, 0.5
    actions = {"snapkv_half": ACTIONS["snapkv_half"]}
    session = KernelSession(
        tiny_llama,
        prompt_ids(tiny_llama),
        actions,
        generation(horizon=3, temperature=T, evict_first_step=True),
        max_chains=3 * R,
    )
    p0 = session.initial_probs("reference").numpy()
    q0 = session.initial_probs("snapkv_half").numpy()
    vocab = len(p0)
    support = np.flatnonzero((p0 > 1e-4) | (q0 > 1e-4))
    rows = [session.new_chain(c) for c in ("reference", "snapkv_half") for _ in support]
    laws = session.step(rows, list(support) * 2).numpy()
    session.release(rows)
    p1 = np.zeros(vocab)
    q1 = np.zeros(vocab)
    for i, a in enumerate(support):  # second-token marginals: Σ_a law(a) · law(·|a)
        p1 += p0[a] * laws[i]
        q1 += q0[a] * laws[len(support) + i]
    out = generate(
        session,
        ["snapkv_half"],
        generation(master_seed=5, study_seed=6, horizon=2, replicates=R),
        eos_token_ids=tiny_llama.eos_token_ids,
        progress=False,
        document_id="marg",
    )["snapkv_half"]
    delta1 = 0.5 * np.abs(p0 - q0).sum()  # the kernels differ at step 1: P(x_1 ≠ y_1) = δ_1
    assert delta1 > 0.005 and np.allclose(out.tv[:, 0], delta1, atol=1e-6)
    assert abs(np.mean(~out.match[:, 0]) - delta1) < 4 * np.sqrt(delta1 * (1 - delta1) / R)
    assert _merged_chisquare(out.x[:, 0], p0) > 1e-3 and _merged_chisquare(out.y[:, 0], q0) > 1e-3
    assert _merged_chisquare(out.x[:, 1], p1 / p1.sum()) > 1e-3 and _merged_chisquare(out.y[:, 1], q1 / q1.sum()) > 1e-3


def test_swrb_and_complete_estimate_the_same_divergence_and_risk(tiny_llama):
    """Means of 1{τ ≤ H} vs D and of M vs Z_R from independent streams agree within 4 standard errors (SnapKV at 50%,
    P(τ ≤ H) ≈ 0.12 here)."""
    action, horizon, replicates = "snapkv_half", 10, 300
    out = {}
    for mode, stream in (("complete", 1), ("swrb", 2)):
        g = generation(
            master_seed=4,
            study_seed=stream,
            horizon=horizon,
            replicates=replicates,
            mode=mode,
            tv_atol=TV_ATOL,
            temperature=0.7,
        )
        session = KernelSession(tiny_llama, prompt_ids(tiny_llama), {action: ACTIONS[action]}, g)
        out[mode] = generate(
            session, [action], g, document_id="doc", eos_token_ids=tiny_llama.eos_token_ids, progress=False
        )[action]
    c, s = out["complete"], out["swrb"]
    diverged = (~c.match).any(axis=1).astype(float)
    survival = np.prod(1.0 - s.overlap_tv.astype(np.float64), axis=1)
    d = np.where(s.branch_start > 0, 1.0 - survival, 0.0)
    m = (~c.match).mean(axis=1)
    branch = np.array([s.tv[r, j:].astype(np.float64).sum() if j > 0 else 0.0 for r, j in enumerate(s.branch_start)])
    z = d * (1.0 + branch) / horizon
    for name, a, b in (("P(tau <= H)", diverged, d), ("R_H", m, z)):
        se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
        assert name == "R_H" or 0.05 < a.mean() < 0.95  # the check has power
        assert abs(a.mean() - b.mean()) < 4 * se, (name, a.mean(), b.mean(), se)
