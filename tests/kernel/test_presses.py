"""kvdiv.kernel.presses: actions (press specs → presses) and ProbabilisticPress: πps probabilities, exact-k sampling
with the given inclusion probabilities, Horvitz–Thompson unbiasedness, reduction to deterministic eviction."""

from __future__ import annotations

import math

import json

import kvpress
import pytest
import torch
from default_presses import DEFAULT_PRESSES

from kvdiv.kernel.presses.probabilistic_press import ProbabilisticPress
from kvdiv.kernel.presses.pips_design import inclusion_probabilities, systematic_sample
from kvdiv.kernel.presses.proposals import score_weights
from kvdiv.kernel.presses.registry import build_press, describe, press_arguments, press_classes, validate_action
from kvdiv.kernel.session import KernelSession
from kvdiv.kernel.prefill import REFERENCE
from kvdiv.settings import generation

# ---------------------------------------------------------------- actions


@pytest.mark.parametrize("name", list(DEFAULT_PRESSES))
def test_every_default_press_builds_validates_and_describes_itself(name):
    spec = DEFAULT_PRESSES[name]
    validate_action(spec, name)
    press = build_press(spec, name)
    assert type(press).__name__ == spec["press"]
    record = json.loads(json.dumps(describe(spec)))  # a provenance record stores as JSON
    assert record["press"] == spec["press"] and set(record["arguments"]) == set(press_arguments(spec["press"]))


def test_every_kvpress_press_is_nameable():
    classes = press_classes()
    exported = {
        n
        for n in dir(kvpress)
        if isinstance(getattr(kvpress, n), type)
        and issubclass(getattr(kvpress, n), kvpress.BasePress)
        and n != "BasePress"
    }
    assert exported | {"ProbabilisticPress"} == set(classes)
    assert {"SnapKVPress", "StreamingLLMPress", "KnormPress", "AdaKVPress"} <= set(classes)


@pytest.mark.parametrize(
    "spec, cls, attrs",
    [
        (
            {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 64},
            kvpress.SnapKVPress,
            {"compression_ratio": 0.5, "window_size": 64, "kernel_size": 5},
        ),
        (
            {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 0},
            kvpress.StreamingLLMPress,
            {"n_sink": 0},
        ),
        (
            {
                "press": "ProbabilisticPress",
                "compression_ratio": 0.5,
                "design": "pips",
                "proposal": "scorer",
                "scorer": "KnormPress",
                "correction": False,
            },
            ProbabilisticPress,
            {"design": "pips", "scorer": "KnormPress", "correction": False},
        ),
        (
            {"press": "ProbabilisticPress", "compression_ratio": 0.5, "proposal": "min_h", "budget": "global"},
            ProbabilisticPress,
            {"design": "multinomial", "proposal": "min_h", "budget": "global", "seed": 0},
        ),
    ],
)
def test_build_press(spec, cls, attrs):
    press = build_press(spec)
    assert type(press) is cls
    for k, v in attrs.items():
        assert getattr(press, k) == v
    assert build_press(spec) is not press  # a fresh instance per use


def test_nested_presses():
    press = build_press(
        {"press": "AdaKVPress", "alpha_safeguard": 0.3, "wraps": {"press": "KnormPress", "compression_ratio": 0.25}}
    )
    assert isinstance(press, kvpress.AdaKVPress) and isinstance(press.press, kvpress.KnormPress)
    assert press.compression_ratio == 0.25
    d = describe({"press": "AdaKVPress", "wraps": {"press": "KnormPress", "compression_ratio": 0.25}})
    assert d["press"] == "AdaKVPress" and d["arguments"]["press"]["press"] == "KnormPress"
    assert d["arguments"]["press"]["arguments"]["compression_ratio"] == 0.25


def test_describe_fills_defaults():
    d = describe({"press": "SnapKVPress", "compression_ratio": 0.5})
    assert d["press"] == "SnapKVPress" and d["module"].startswith("kvpress")
    assert d["arguments"] == {"compression_ratio": 0.5, "window_size": 64, "kernel_size": 5}
    assert d["kvpress_version"]
    p = describe({"press": "ProbabilisticPress", "compression_ratio": 0.5})
    assert "kept_indices" not in p["arguments"] and p["arguments"]["correction"] is True


def test_unknown_press_lists_valid_presses():
    with pytest.raises(ValueError) as err:
        build_press({"press": "SnapKV", "compression_ratio": 0.5}, name="snapkv_half")
    msg = str(err.value)
    assert "'snapkv_half'" in msg and "unknown press 'SnapKV'" in msg
    assert "SnapKVPress" in msg and "ProbabilisticPress" in msg and "StreamingLLMPress" in msg


def test_unknown_argument_lists_valid_arguments():
    with pytest.raises(ValueError) as err:
        validate_action({"press": "SnapKVPress", "compression_ratio": 0.5, "window": 64}, name="a")
    msg = str(err.value)
    assert "unknown argument 'window'" in msg
    assert "compression_ratio, window_size, kernel_size" in msg
    assert press_arguments("SnapKVPress") == ["compression_ratio", "window_size", "kernel_size"]


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"compression_ratio": 0.5}, "missing key 'press'"),
        (
            {"press": "SnapKVPress", "compression_ratio": 1.5},
            r"'compression_ratio' = 1.5 is out of range: it must lie in \[0, 1\)",
        ),
        (
            {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": -1},
            r"'window_size' = -1 is out of range: .*\[1, inf\)",
        ),
        ({"press": "SnapKVPress", "window_size": 0}, r"'window_size' = 0 is out of range"),
        (
            {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": -3},
            r"'n_sink' = -3 is out of range: .*\[0, inf\)",
        ),
        ({"press": "SnapKVPress", "compression_ratio": "0.5"}, "'compression_ratio' must be a number, got '0.5'"),
        ({"press": "SnapKVPress", "window_size": 64.5}, "'window_size' must be an integer"),
        ({"press": "StreamingLLMPress", "n_sink": True}, "'n_sink' must be an integer, got True"),
        ({"press": "ProbabilisticPress", "correction": "yes"}, "'correction' must be true or false"),
        (
            {
                "press": "ProbabilisticPress",
                "proposal": "scorer",
                "scorer": "SnapKVPress",
                "scorer_kwargs": {"window_size": -1},
            },
            r"scorer_kwargs.*'window_size' = -1 is out of range",
        ),
        (
            {"press": "AdaKVPress", "alpha_safeguard": 1.2, "wraps": {"press": "KnormPress"}},
            r"'alpha_safeguard' = 1.2 is out of range",
        ),
        ({"press": "KnormPress", "wraps": {"press": "KnormPress"}}, "unknown argument 'wraps'"),
        ({"press": "ProbabilisticPress", "proposal": "scorer", "scorer": "NoScorer"}, "valid scorers: .*SnapKVPress"),
        (
            {
                "press": "ProbabilisticPress",
                "proposal": "scorer",
                "scorer": "SnapKVPress",
                "scorer_kwargs": {"windows": 3},
            },
            "scorer_kwargs",
        ),
        ({"press": "ProbabilisticPress", "weighting": "cubic"}, "weighting'? must be one of linear, softmax"),
        ("SnapKVPress", "expected a mapping"),
    ],
)
def test_bad_actions(spec, match):
    with pytest.raises(ValueError, match=match):
        build_press(spec)


# ---------------------------------------------------------------- πps probabilities and sampling


def test_inclusion_probabilities_capping():
    w = torch.tensor([[10.0, 5.0, 1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    rho = inclusion_probabilities(w, 3)
    torch.testing.assert_close(rho.sum(-1), torch.full((2,), 3.0, dtype=torch.float64))
    assert (rho <= 1).all() and (rho >= 0).all()
    # row 0: 10 and 5 capped at 1, the remaining budget 1 spread over the three weights 1: 1/3 each
    torch.testing.assert_close(rho[0], torch.tensor([1, 1, 1 / 3, 1 / 3, 1 / 3, 0], dtype=torch.float64))
    torch.testing.assert_close(rho[1], torch.full((6,), 0.5, dtype=torch.float64))
    # fewer positive weights than the budget: those are sure, the rest share the remainder
    rho = inclusion_probabilities(torch.tensor([[2.0, 0.0, 0.0, 0.0, 0.0]]), 3)
    torch.testing.assert_close(rho[0], torch.tensor([1, 0.5, 0.5, 0.5, 0.5], dtype=torch.float64))


def test_score_weights():
    s = torch.tensor([[-3.0, -1.0, -2.0]])
    torch.testing.assert_close(score_weights(s, "linear"), torch.tensor([[0.0, 2.0, 1.0]], dtype=torch.float64))
    w = score_weights(s, "softmax", 0.5)
    torch.testing.assert_close(w, torch.softmax(s.double() / 0.5, -1))


def test_systematic_sample_inclusion_frequencies():
    """Exactly k kept every draw; kept frequencies match ρ within 4.5 standard errors."""
    g = torch.Generator().manual_seed(0)
    w = torch.rand(12, generator=g, dtype=torch.float64) ** 2 + torch.tensor([5.0] + [0.0] * 11, dtype=torch.float64)
    rho = inclusion_probabilities(w, 5)
    assert rho[0] == 1 and (rho[1:] < 1).all()
    n_draws = 20000
    idx = systematic_sample(rho.expand(n_draws, -1), torch.Generator().manual_seed(1))
    assert idx.shape == (n_draws, 5)
    kept = torch.zeros(n_draws, 12, dtype=torch.float64).scatter_(1, idx, 1.0)
    assert (kept.sum(1) == 5).all() and (kept[:, 0] == 1).all()
    freq = kept.mean(0)
    se = (rho * (1 - rho) / n_draws).sqrt()
    z = ((freq - rho) / se.clamp(min=1e-12))[1:]
    assert z.abs().max() < 4.5, z


def test_horvitz_thompson_unbiased():
    """Corrected numerator Σ_kept e^{s_i}/ρ_i v_i and denominator Σ_kept e^{s_i}/ρ_i are unbiased."""
    g = torch.Generator().manual_seed(2)
    n, k, d = 16, 6, 3
    s = torch.randn(n, generator=g, dtype=torch.float64) * 1.5  # attention logits q·k_i/√d
    v = torch.randn(n, d, generator=g, dtype=torch.float64)
    rho = inclusion_probabilities(torch.exp(s) + 0.05, k)  # scores ∝ attention, all ρ > 0
    n_draws = 20000
    idx = systematic_sample(rho.expand(n_draws, -1), torch.Generator().manual_seed(3))
    weight = torch.exp(s)[idx] / rho[idx]  # e^{s_i − log ρ_i}: the corrected logits' exponentials
    den = weight.sum(1)
    num = (weight.unsqueeze(-1) * v[idx]).sum(1)
    for est, truth in ((den, torch.exp(s).sum()), (num, (torch.exp(s)[:, None] * v).sum(0))):
        se = est.std(0) / math.sqrt(n_draws)
        z = (est.mean(0) - truth) / se
        assert z.abs().max() < 4.5, z
    # the uncorrected (plain sampled eviction) denominator is biased low by far more than its error
    plain = torch.exp(s)[idx].sum(1)
    assert (torch.exp(s).sum() - plain.mean()) / (plain.std() / math.sqrt(n_draws)) > 20


# ---------------------------------------------------------------- ProbabilisticPress in a session


@pytest.fixture(scope="module")
def llama(tiny_model_factory):
    return tiny_model_factory("llama", initializer_range=0.25)


def test_zero_one_probabilities_equal_deterministic_eviction(llama):
    """Scores with exactly k positive entries give ρ ∈ {0, 1}: the sample is the top-k set."""
    ids = torch.randint(10, 200, (40,), generator=torch.Generator().manual_seed(0))
    actions = {
        "streaming": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 3},
        "prob": {
            "press": "ProbabilisticPress",
            "compression_ratio": 0.5,
            "design": "pips",
            "proposal": "scorer",
            "scorer": "StreamingLLMPress",
            "scorer_kwargs": {"n_sink": 3},
            "seed": 11,
        },
        "prob_nc": {
            "press": "ProbabilisticPress",
            "compression_ratio": 0.5,
            "design": "pips",
            "proposal": "scorer",
            "scorer": "StreamingLLMPress",
            "scorer_kwargs": {"n_sink": 3},
            "correction": False,
        },
    }
    s = KernelSession(llama, ids, actions, generation(horizon=128))
    for layer, (a, b) in enumerate(zip(s.kept_indices("streaming"), s.kept_indices("prob"))):
        assert torch.equal(a.sort(-1).values, b)
        assert (s.prompt_cache("prob").bias[layer] == 0).all()  # log ρ = 0: the correction is void
    chains = [s.new_chain(name) for name in actions]
    laws = s.step(chains, [33, 33, 33])
    torch.testing.assert_close(laws[1], laws[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(laws[2], laws[0], atol=1e-6, rtol=0)


def test_probabilistic_press_bias_and_seed(llama):
    """The session's logit bias on kept entries is −log ρ (off with correction=False); seeds reproduce."""
    ids = torch.randint(10, 200, (40,), generator=torch.Generator().manual_seed(1))
    base = {
        "press": "ProbabilisticPress",
        "compression_ratio": 0.5,
        "design": "pips",
        "proposal": "scorer",
        "scorer": "KnormPress",
    }
    s = KernelSession(
        llama,
        ids,
        {
            "a": {**base, "seed": 1},
            "b": {**base, "seed": 1},
            "c": {**base, "seed": 2},
            "nc": {**base, "seed": 1, "correction": False},
        },
        generation(horizon=128),
    )
    press = s.presses["a"]
    for layer in range(s.n_layers):
        bias = s.prompt_cache("a").bias[layer]
        rho = press.probabilities[layer][0].gather(-1, press.kept_indices[layer][0])
        torch.testing.assert_close(bias, (-torch.log(rho)).to(bias.dtype))
        assert (bias >= 0).all() and (bias > 0).any()
        assert (s.prompt_cache("nc").bias[layer] == 0).all()
    assert all(torch.equal(x, y) for x, y in zip(s.kept_indices("a"), s.kept_indices("b")))
    assert not all(torch.equal(x, y) for x, y in zip(s.kept_indices("a"), s.kept_indices("c")))
    chains = [s.new_chain(n) for n in ("a", "nc", REFERENCE)]
    laws = s.step(chains, [40, 40, 40])
    assert (laws[0] - laws[1]).abs().max() > 1e-6  # the correction changes Q


# ---------------------------------------------------------------- the correction against an independent recomputation

PLAIN_ATTENTION = "kvdiv_test_plain"
_PLAIN_BIAS: dict[int, torch.Tensor] = {}


def _plain_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Textbook attention of one new query over the full cache with an additive per-layer bias [kv_heads, len]."""
    groups = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(groups, dim=1).to(torch.float64)
    v = value.repeat_interleave(groups, dim=1).to(torch.float64)
    bias = _PLAIN_BIAS[module.layer_idx].repeat_interleave(groups, dim=0)[None, :, None, :]
    weights = torch.softmax(query.to(torch.float64) @ k.transpose(-1, -2) * scaling + bias, dim=-1)
    return (weights @ v).to(query.dtype).transpose(1, 2).contiguous(), None


def _rho_by_bisection(w: torch.Tensor, k: int) -> torch.Tensor:
    """ρ_i = min(1, c·w_i) with Σρ = k, c found by bisection (independent of kvdiv's iterative capping)."""
    lo, hi = 0.0, 1.0
    while torch.clamp(hi * w, max=1).sum() < k:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if torch.clamp(mid * w, max=1).sum() < k else (lo, mid)
    return torch.clamp(hi * w, max=1)


def _independent_law(loaded, ids, kept, token, sign, temperature=1.0):
    """P(next | prompt, token) with every layer's attention a plain softmax over the kept prompt keys (per KV
    head) + the new token, kept entry i's logit shifted by sign · (−log ρ_i); evicted entries get −inf."""
    from transformers import AttentionInterface, DynamicCache

    AttentionInterface.register(PLAIN_ATTENTION, _plain_attention)
    model, n = loaded.model, ids.numel()
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids[None], past_key_values=cache, use_cache=True)
    for layer, (idx, log_rho) in kept.items():
        bias = torch.full((idx.shape[0], n + 1), float("-inf"), dtype=torch.float64)
        bias[:, n] = 0.0
        bias.scatter_(1, idx, -sign * log_rho)
        _PLAIN_BIAS[layer] = bias
    configs = [m.config for m in model.modules() if hasattr(m, "config")]
    saved = [c._attn_implementation for c in configs]
    try:
        for c in configs:
            c._attn_implementation = PLAIN_ATTENTION
        with torch.no_grad():
            logits = model(
                input_ids=torch.tensor([[token]]),
                past_key_values=cache,
                position_ids=torch.tensor([[n]]),
                use_cache=True,
            ).logits[0, -1]
    finally:
        for c, s in zip(configs, saved):
            c._attn_implementation = s
    return torch.softmax(logits.to(torch.float64) / temperature, dim=-1)


def test_correction_equals_independently_recomputed_attention(llama):
    """Q after ProbabilisticPress (KnormPress scores) == a plain re-implementation: full-cache keys from a
    separate prefill, the kept set read off the evicted cache's keys, ρ recomputed from the key norms by
    bisection, and softmax(q·k/√d − log ρ) over the kept keys — never the press's stored numbers."""
    from kvpress.utils import compute_n_kept
    from transformers import DynamicCache

    ids = torch.randint(10, 200, (48,), generator=torch.Generator().manual_seed(5))
    spec = {
        "press": "ProbabilisticPress",
        "compression_ratio": 0.5,
        "design": "pips",
        "proposal": "scorer",
        "scorer": "KnormPress",
        "weighting": "linear",
    }
    s = KernelSession(
        llama,
        ids,
        {"ht": spec, "plain": {**spec, "correction": False}},
        generation(master_seed=3, study_seed=4, horizon=128),
        document_id="doc",
    )
    cache = DynamicCache(config=llama.model.config)
    with torch.no_grad():
        llama.model(input_ids=ids[None], past_key_values=cache, use_cache=True)
    k = compute_n_kept(ids.numel(), 0.5)

    def kept_and_log_rho(action):
        out = {}
        for layer in range(s.n_layers):
            ref = cache.layers[layer].keys[0].to(torch.float64)  # [kv, n, d]
            own = s.prompt_cache(action).keys[layer].to(torch.float64)  # [kv, k, d]: what the evicted cache holds
            dist = (own[:, :, None, :] - ref[:, None, :, :]).abs().amax(-1)  # [kv, k, n]
            idx = dist.argmin(-1)
            assert dist.amin(-1).max() < 1e-5 and idx.shape == (s.kv_heads, k)
            assert all(len(set(row.tolist())) == k for row in idx)
            norms = torch.linalg.vector_norm(ref, dim=-1)
            w = norms.max(-1, keepdim=True).values - norms  # linear weighting of the scores −‖k_i‖
            rho = torch.stack([_rho_by_bisection(w[h], k) for h in range(s.kv_heads)])
            assert abs(float(rho.sum(-1).mean()) - k) < 1e-9 and (rho.gather(1, idx) > 0).all()
            out[layer] = (idx, torch.log(rho.gather(1, idx)))
        return out

    kept = kept_and_log_rho("ht")
    assert any(float(log_rho.min()) < -0.05 for _, log_rho in kept.values())  # the correction is not void
    laws = s.step([s.new_chain("ht"), s.new_chain("plain")], [77, 77])
    torch.testing.assert_close(laws[0], _independent_law(llama, ids, kept, 77, sign=1), atol=2e-6, rtol=0)
    # correction=False: plain sampled eviction (no bias on kept entries)
    plain = {layer: (idx, torch.zeros_like(lr)) for layer, (idx, lr) in kept_and_log_rho("plain").items()}
    torch.testing.assert_close(laws[1], _independent_law(llama, ids, plain, 77, sign=1), atol=2e-6, rtol=0)
    # the comparison tells the sign of the correction apart, and the correction from none
    assert (laws[0] - _independent_law(llama, ids, kept, 77, sign=-1)).abs().max() > 1e-3
    no_bias = {layer: (idx, torch.zeros_like(lr)) for layer, (idx, lr) in kept.items()}
    assert (laws[0] - _independent_law(llama, ids, no_bias, 77, sign=1)).abs().max() > 1e-3


def test_probabilistic_press_draws_per_document_and_records_the_seed(llama, tmp_path):
    """The draw seed is derive_seed(master, study, document, action, "ProbabilisticPress", seed): other documents
    or actions draw other evictions, the same document the same one, and the store records the seeds."""
    from kvdiv.trajectories.job import run_document
    from kvdiv.seeds import derive_seed
    from kvdiv.trajectories.store import read_document_store

    ids = torch.randint(10, 200, (40,), generator=torch.Generator().manual_seed(1))
    spec = {
        "press": "ProbabilisticPress",
        "compression_ratio": 0.5,
        "design": "pips",
        "proposal": "scorer",
        "scorer": "KnormPress",
        "seed": 9,
    }

    def kept(doc, action="p", master=1, study=2):
        s = KernelSession(
            llama, ids, {action: spec}, generation(master_seed=master, study_seed=study, horizon=128), document_id=doc
        )
        return s, [k.clone() for k in s.kept_indices(action)]

    s, a = kept("doc-0")
    assert s.presses["p"].draw_seed == derive_seed(1, 2, "doc-0", "p", "ProbabilisticPress", 9)
    assert s.press_seeds() == {
        "p": {
            "seed": 9,
            "draw_seed": s.presses["p"].draw_seed,
            "layer_seeds": [derive_seed(s.presses["p"].draw_seed, layer) for layer in range(2)],
        }
    }
    same = kept("doc-0")[1]
    assert all(torch.equal(x, y) for x, y in zip(a, same))
    for other in (
        kept("doc-1")[1],
        kept("doc-0", action="q")[1],
        kept("doc-0", master=5)[1],
        kept("doc-0", study=3)[1],
    ):
        assert not all(torch.equal(x, y) for x, y in zip(a, other))
    # the same prompt in two documents: the permutations and offsets differ, not only the kept sets
    seeds = {kept(f"doc-{i}")[0].presses["p"].layer_seed(0) for i in range(5)}
    assert len(seeds) == 5
    doc = {"id": "doc-0", "prompt": llama.tokenizer.decode(ids), "rendered": True, "answer_prefix": ""}
    path = run_document(
        llama,
        doc,
        {"p": spec},
        tmp_path / "d.zarr",
        generation(master_seed=1, study_seed=2, horizon=2, replicates=1),
        progress=False,
    )
    assert read_document_store(path)[0]["press_seeds"] == s.press_seeds()


@pytest.mark.parametrize(
    "spec, reason",
    [
        ({"press": "ThinKPress"}, "prunes key channels"),
        ({"press": "SimLayerKVPress"}, "evicts nothing"),
        ({"press": "LeverageScorePress"}, "unseeded random sketch"),
        ({"press": "KVzipPress"}, "extra forward"),
        ({"press": "AdaKVPress", "wraps": {"press": "ThinKPress"}}, "prunes key channels"),  # at any depth
        (
            {
                "press": "ProbabilisticPress",
                "compression_ratio": 0.5,
                "proposal": "scorer",
                "scorer": "LeverageScorePress",
            },
            "unseeded random sketch",
        ),
    ],
)
def test_presses_that_cannot_run_are_refused_with_the_reason(spec, reason):
    """They used to pass the start-up validation, then run with Q ≡ P (ThinK, SimLayerKV: mean TV 0), unreproducibly
    (LeverageScore) or fail inside the trajectory job (KVzip)."""
    from kvdiv.kernel.presses.registry import UNRUNNABLE

    with pytest.raises(ValueError, match=f"action 'bad[.a-z]*': .*cannot run in kvdiv: it .*{reason}"):
        validate_action(spec, "bad")
    assert set(UNRUNNABLE) <= set(press_classes())  # every entry names a press kvpress exports
    assert "ComposedPress" not in UNRUNNABLE  # README: it runs


@pytest.mark.parametrize(
    "spec, nothing",
    [
        ({"press": "SnapKVPress", "compression_ratio": 0.0}, True),
        ({"press": "AdaKVPress", "wraps": {"press": "SnapKVPress", "compression_ratio": 0.0}}, True),
        ({"press": "ComposedPress", "presses": [{"press": "KnormPress", "compression_ratio": 0.0}]}, True),
        ({"press": "ProbabilisticPress", "compression_ratio": 0.0}, True),
        ({"press": "SnapKVPress", "compression_ratio": 0.5}, False),
        ({"press": "AdaKVPress", "wraps": {"press": "SnapKVPress", "compression_ratio": 0.5}}, False),
        (
            {
                "press": "ComposedPress",
                "presses": [
                    {"press": "KnormPress", "compression_ratio": 0.0},
                    {"press": "SnapKVPress", "compression_ratio": 0.5},
                ],
            },
            False,
        ),
    ],
)
def test_an_action_that_evicts_nothing_is_flagged(spec, nothing):
    from kvdiv.kernel.presses.registry import check_evicts, evicts_nothing

    assert evicts_nothing(build_press(spec)) is nothing
    if nothing:
        with pytest.raises(ValueError, match="evicts nothing: Q ≡ P"):
            check_evicts(spec, "keep_all")
    else:
        check_evicts(spec, "act")
