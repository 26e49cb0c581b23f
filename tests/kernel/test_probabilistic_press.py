"""ProbabilisticPress, multinomial design: exact identities by enumerating the multinomial law on tiny
heads (unbiased importance weights, unbiased SNIS numerator and denominator, the ratio's O(1/m) bias,
the expected-distinct budget), proposals against eager attention weights, the decode-time correction
against an independent recomputation, and the global budget on SmolLM2.

The πps design's tests live in tests/test_actions.py."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from support.calls import record_calls
from transformers import AttentionInterface, DynamicCache

from kvdiv.kernel.presses.registry import build_press
from kvdiv.kernel.session import KernelSession
from kvdiv.kernel.decode_attention import ATTN_IMPLEMENTATION
from kvdiv.kernel.prefill import REFERENCE
from kvdiv.kernel.presses.probabilistic_press import ProbabilisticPress
from kvdiv.kernel.presses.multinomial_design import (
    MAX_DRAWS,
    allocate_draws,
    distinct_variance,
    draws_law,
    expected_distinct,
    importance_log_weights,
    kept_from_counts,
    multinomial_counts,
)
from kvdiv.seeds import derive_rng, derive_seed
from kvdiv.settings import generation

PI = np.array([0.4, 0.3, 0.2, 0.1])  # a tiny head's proposal
LOGITS = np.array([1.2, -0.4, 0.3, 2.0])  # decode-time attention logits s_i of its entries
VALUES = np.array([[1.0, -2.0], [0.5, 3.0], [-1.5, 0.2], [2.5, 1.0]])
GENERATED = (np.exp(0.7) * np.array([0.3, -0.6]), np.exp(0.7))  # one generated entry: e^{s} v and e^{s}


def multinomial_law(m: int, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every count vector c of Multinomial(m, π) (stars and bars) and its exact probability."""
    n = len(pi)
    bars = np.array(list(itertools.combinations(range(m + n - 1), n - 1))).reshape(-1, n - 1)
    edges = np.hstack([np.full((len(bars), 1), -1), bars, np.full((len(bars), 1), m + n - 1)])
    counts = np.diff(edges, axis=1) - 1
    log_coef = math.lgamma(m + 1) - np.vectorize(math.lgamma)(counts + 1).sum(1)
    prob = np.exp(log_coef + (counts * np.log(pi)).sum(1))
    assert counts.sum(1).tolist() == [m] * len(counts) and abs(prob.sum() - 1) < 1e-12
    return counts, prob


def weights(counts: np.ndarray, m: int, pi: np.ndarray) -> np.ndarray:
    """w_i = c_i/(mπ_i) from the press's importance_log_weights (0 for undrawn entries)."""
    log_w = importance_log_weights(
        torch.as_tensor(counts), torch.full(counts.shape[:-1], m), torch.as_tensor(pi).expand(counts.shape)
    )
    return torch.exp(log_w).numpy()


def snis_moments(m: int):
    """Exact E[N̂], E[D̂], E[ô] of the corrected attention of the tiny head with one generated entry."""
    counts, prob = multinomial_law(m, PI)
    w = weights(counts, m, PI) * np.exp(LOGITS)  # corrected unnormalised attention of each kept entry
    num = w @ VALUES  # [outcomes, d]
    den = w.sum(1)
    out = (num + GENERATED[0]) / (den + GENERATED[1])[:, None]
    return prob @ num, prob @ den, prob @ out


# ---------------------------------------------------------------- exact enumeration on a tiny head


@pytest.mark.parametrize("m", [1, 2, 5, 12])
def test_importance_weights_unbiased(m):
    """E[c_i/(mπ_i)] = 1 for every entry, exactly over the multinomial law."""
    counts, prob = multinomial_law(m, PI)
    np.testing.assert_allclose(prob @ weights(counts, m, PI), np.ones(len(PI)), rtol=0, atol=1e-12)
    assert (weights(counts, m, PI)[counts == 0] == 0).all()


@pytest.mark.parametrize("m", [1, 3, 8])
def test_snis_numerator_and_denominator_unbiased(m):
    """E[N̂] = Σ e^{s_i} v_i and E[D̂] = Σ e^{s_i} exactly; without weights (plain sampled eviction) they are not."""
    num, den, _ = snis_moments(m)
    np.testing.assert_allclose(num, np.exp(LOGITS) @ VALUES, rtol=1e-12)
    np.testing.assert_allclose(den, np.exp(LOGITS).sum(), rtol=1e-12)
    counts, prob = multinomial_law(m, PI)
    plain = prob @ ((counts > 0) * np.exp(LOGITS)).sum(1)
    assert np.exp(LOGITS).sum() - plain > 0.1


def test_snis_ratio_bias_shrinks_like_one_over_m():
    """m·(E[ô] − o) → (o·Var(Y) − Cov(X, Y)) / (μ_Y + b)², with error O(1/m): exact expectations, m = 10…160."""
    e = np.exp(LOGITS)
    full = (e @ VALUES + GENERATED[0]) / (e.sum() + GENERATED[1])
    # single-draw estimates X = e^{s_I} v_I / π_I, Y = e^{s_I} / π_I with I ~ π
    x, y = (e / PI)[:, None] * VALUES, e / PI
    mu_x, mu_y = PI @ x, PI @ y
    var_y = PI @ (y - mu_y) ** 2
    cov_xy = PI @ ((x - mu_x) * (y - mu_y)[:, None])
    limit = (full * var_y - cov_xy) / (mu_y + GENERATED[1]) ** 2
    assert np.abs(limit).min() > 1e-3  # the bias is not trivially zero
    errors = []
    for m in (20, 40, 80, 160):
        _, _, mean = snis_moments(m)
        errors.append(np.abs(m * (mean - full) - limit).max())
    # the O(1/m) remainder of m·bias halves as m doubles (ratios 0.63, 0.53, 0.51 here) and is small at m = 160
    ratios = np.array(errors[1:]) / np.array(errors[:-1])
    assert ((ratios > 0.45) & (ratios < 0.65)).all() and 0.45 < ratios[-1] < 0.55, (errors, ratios)
    assert errors[-1] < 0.02 * np.abs(limit).max()


@pytest.mark.parametrize("m", [1, 2, 3, 6, 9])
def test_expected_and_variance_of_distinct_match_enumeration(m):
    counts, prob = multinomial_law(m, PI)
    distinct = (counts > 0).sum(1)
    assert float(expected_distinct(torch.tensor(PI), m)) == pytest.approx(prob @ distinct, abs=1e-12)
    variance = prob @ distinct**2 - (prob @ distinct) ** 2
    assert float(distinct_variance(torch.tensor(PI), m)) == pytest.approx(variance, abs=1e-12)


def enumerated_distinct(m: int, pi: np.ndarray) -> float:
    counts, prob = multinomial_law(m, pi)
    return float(prob @ (counts > 0).sum(1))


@pytest.mark.parametrize("target", [1.0, 1.6, 2.5, 3.2, 3.9])
def test_draws_law_meets_the_expected_distinct_target(target):
    """m = m⁻ + Bernoulli(f): m⁻ brackets the target and the mixture's E|S| (by enumeration) is the target."""
    m_lo, f = draws_law(torch.tensor(PI), target)
    lo, hi = enumerated_distinct(int(m_lo), PI), enumerated_distinct(int(m_lo) + 1, PI)
    assert lo <= target + 1e-12 and (hi > target or int(m_lo) == 1 and target <= 1)
    assert (1 - float(f)) * lo + float(f) * hi == pytest.approx(target, abs=1e-10)
    _, expected = allocate_draws(torch.tensor(PI), target, 0.5)
    assert float(expected) == pytest.approx(target, abs=1e-10)


def test_shared_draws_meet_the_summed_target():
    """One m for several heads: the heads' E|S| (enumerated) sum to the target; a flat head keeps more."""
    flat = np.full(4, 0.25)
    pis = torch.tensor(np.stack([PI, flat]))
    m_lo, f = draws_law(pis, 5.0, shared=True)
    assert m_lo.shape == ()
    e = [
        (1 - float(f)) * enumerated_distinct(int(m_lo), p) + float(f) * enumerated_distinct(int(m_lo) + 1, p)
        for p in (PI, flat)
    ]
    assert sum(e) == pytest.approx(5.0, abs=1e-10) and e[1] > e[0]
    m, expected = allocate_draws(pis, 5.0, 0.3, shared=True)
    assert m.tolist() == [m[0].item()] * 2 and np.allclose(expected.numpy(), e, atol=1e-10)
    # per-row targets: each head meets its own
    _, expected = allocate_draws(pis, torch.tensor([2.0, 3.0]), torch.tensor([0.1, 0.9]))
    np.testing.assert_allclose(expected.numpy(), [2.0, 3.0], atol=1e-10)


def test_out_of_reach_target_stops_at_max_draws():
    """An entry with π = 0 is never drawn: a target of every entry is out of reach, m = MAX_DRAWS."""
    pi = torch.tensor([0.5, 0.5, 0.0])
    m_lo, f = draws_law(pi, 3.0)
    assert int(m_lo) == MAX_DRAWS and float(f) == 0
    assert float(expected_distinct(pi, m_lo)) == pytest.approx(2.0)


def test_allocated_draws_realise_the_target_on_average():
    """Over random coins and multinomial counts, the mean number of kept entries is the target (4.5 SE)
    and the mean count of entry i is E[m]·π_i."""
    rng = np.random.default_rng(5)
    pi = torch.tensor(np.random.default_rng(0).dirichlet(np.full(30, 0.3)))
    target, reps = 11.5, 4000
    m, _ = allocate_draws(pi.expand(reps, -1), target, torch.tensor(rng.random(reps)))
    counts = multinomial_counts(pi.expand(reps, -1), m, rng)
    assert (counts.sum(1) == m).all()
    kept = (counts > 0).sum(1).double()
    assert abs(kept.mean() - target) < 4.5 * kept.std() / math.sqrt(reps)
    # Var(c_i) = E[m]π_i(1 − π_i) + π_i²·Var(m), Var(m) ≤ 1/4 (m is m⁻ or m⁻ + 1)
    mean_m = m.double().mean()
    se = ((mean_m * pi * (1 - pi) + pi**2 / 4) / reps).sqrt()
    z = (counts.double().mean(0) - mean_m * pi) / se
    assert z.abs().max() < 4.5


def test_kept_from_counts_pads_with_minus_one():
    counts = torch.tensor([[[0, 3, 0, 1], [2, 0, 0, 0]]])
    assert kept_from_counts(counts).tolist() == [[[1, 3], [0, -1]]]


# ---------------------------------------------------------------- the press in a session (tiny Llama, GQA 2)


@pytest.fixture(scope="module")
def llama(tiny_model_factory):
    return tiny_model_factory("llama", initializer_range=0.25)


def ids_of(n: int, seed: int) -> torch.Tensor:
    return torch.randint(10, 200, (n,), generator=torch.Generator().manual_seed(seed))


def eager_attention(loaded, ids):
    """Per layer: eager attention weights [heads, n, n] (the model's own) and the values [kv_heads, n, d]."""
    model = loaded.model
    configs = {id(m.config): m.config for m in model.modules() if hasattr(m, "config")}
    saved = {k: c._attn_implementation for k, c in configs.items()}
    cache = DynamicCache(config=model.config)
    try:
        for c in configs.values():
            c._attn_implementation = "eager"
        with torch.no_grad():
            out = model(input_ids=ids[None], past_key_values=cache, use_cache=True, output_attentions=True)
    finally:
        for k, c in configs.items():
            c._attn_implementation = saved[k]
    return [a[0].double() for a in out.attentions], [layer.values[0].double() for layer in cache.layers]


@pytest.mark.parametrize(
    "proposal, history_size", [("min", None), ("h2o", None), ("min_h", None), ("h2o_h", None), ("min_h", 7), ("h2o", 5)]
)
def test_proposals_equal_eager_attention(llama, proposal, history_size):
    """π from the press's own query/key computation == the formula applied to the model's eager attention
    weights: last row × ‖v‖; mean rows (H2O); harmonic h_j ∝ 1/(age+1) over the last W rows; GQA groups averaged."""
    ids = ids_of(30, 4)
    n = len(ids)
    spec = {"press": "ProbabilisticPress", "compression_ratio": 0.5, "proposal": proposal}
    if history_size:
        spec["history_size"] = history_size
    if proposal == "h2o":  # the plain accumulated sum here; the normalised one: test_h2o_normalised_by_queries
        spec["h2o_normalization"] = "none"
    session = KernelSession(llama, ids, {"p": spec}, generation(horizon=128))
    press = session.presses["p"]
    attentions, values = eager_attention(llama, ids)
    W = history_size or n
    ages = np.arange(W - 1, -1, -1)
    h = {"min": None, "h2o": np.ones(W), "min_h": 1 / (ages + 1), "h2o_h": 1 / (ages + 1)}[proposal]
    for layer, (attn, v) in enumerate(zip(attentions, values)):
        kv_heads = v.shape[0]
        grouped = attn.reshape(kv_heads, attn.shape[0] // kv_heads, n, n).mean(1)  # [kv, rows, keys]
        if proposal == "min":
            weight = grouped[:, -1]
        else:
            hh = torch.tensor(h / h.sum())
            weight = torch.einsum("krn,r->kn", grouped[:, n - W :], hh)
        if proposal in ("min", "min_h"):
            weight = weight * v.norm(dim=-1)
        expected = weight / weight.sum(-1, keepdim=True)
        torch.testing.assert_close(press.probabilities[layer][0], expected, rtol=1e-4, atol=1e-9)


PER_HEAD = {"press": "ProbabilisticPress", "compression_ratio": 0.5, "proposal": "min_h", "budget": "per_head"}


@pytest.mark.parametrize("history_size", [None, 5, 40])
def test_h2o_normalised_by_queries(llama, history_size):
    """π_H2O with ``h2o_normalization: queries`` (the default) == a direct enumeration on the model's eager
    attention: for each key i, the mean of Ā_j(i) over the history queries j that see it (j ≥ i, among the last
    W), normalised; with all queries also == kvpress's ObservedAttentionPress scores, normalised."""
    from kvpress import ObservedAttentionPress

    ids = ids_of(30, 4)
    n = len(ids)
    spec = {"press": "ProbabilisticPress", "compression_ratio": 0.5, "proposal": "h2o"}
    if history_size:
        spec["history_size"] = history_size
    press = KernelSession(llama, ids, {"p": spec}, generation(horizon=128)).presses["p"]
    plain = KernelSession(llama, ids, {"p": {**spec, "h2o_normalization": "none"}}, generation(horizon=128)).presses[
        "p"
    ]
    attentions, values = eager_attention(llama, ids)
    W = min(history_size or n, n)
    for layer, (attn, v) in enumerate(zip(attentions, values)):
        kv_heads = v.shape[0]
        grouped = attn.reshape(kv_heads, attn.shape[0] // kv_heads, n, n).mean(1).numpy()  # [kv, query, key]
        expected = np.zeros((kv_heads, n))
        for h in range(kv_heads):
            for i in range(n):
                seeing = [j for j in range(n - W, n) if j >= i]
                expected[h, i] = sum(grouped[h, j, i] for j in seeing) / len(seeing)
        expected /= expected.sum(-1, keepdims=True)
        np.testing.assert_allclose(press.probabilities[layer][0].numpy(), expected, rtol=1e-4, atol=1e-9)
        if history_size is None or history_size >= n:
            keys = torch.zeros(1, kv_heads, n, 4)
            score = ObservedAttentionPress().score(None, None, keys, None, attn[None].float(), {})[0].double()
            torch.testing.assert_close(
                press.probabilities[layer][0], score / score.sum(-1, keepdim=True), rtol=1e-4, atol=1e-9
            )
        # the two normalisations differ (early keys are seen by more queries)
        assert (press.probabilities[layer][0] - plain.probabilities[layer][0]).abs().max() > 1e-3


def test_actions_sharing_a_proposal_compute_it_once_per_layer(llama, monkeypatch):
    """In one prefill, presses asking for the same attention proposal share one computation per layer (the
    memo of ``shared_proposals``), and every press's π equals the π it gets alone in its own session."""
    from kvdiv.kernel.presses import proposals as pp  # where the presses compute π

    calls = record_calls(monkeypatch, pp, "mean_attention")
    ids = ids_of(40, 5)
    base = {"press": "ProbabilisticPress", "proposal": "min_h", "seed": 1}
    actions = {
        "half": {**base, "compression_ratio": 0.5},
        "half_corr_off": {**base, "compression_ratio": 0.5, "correction": False},
        "ninety": {**base, "compression_ratio": 0.9, "budget": "per_head"},
        "h2o": {**base, "compression_ratio": 0.5, "proposal": "h2o"},
    }
    together = KernelSession(llama, ids, actions, generation(horizon=128))
    n_layers = len(together.presses["half"].probabilities)
    assert len(calls) == 2 * n_layers  # min_h once per layer for three actions, h2o once per layer
    for name, spec in actions.items():
        alone_session = KernelSession(llama, ids, {name: spec}, generation(horizon=128))
        alone = alone_session.presses[name]
        for layer in range(n_layers):
            assert torch.equal(together.presses[name].probabilities[layer], alone.probabilities[layer]), (name, layer)
        for kept, kept_alone in zip(together.kept_indices(name), alone_session.kept_indices(name)):
            assert (kept is None and kept_alone is None) or torch.equal(kept, kept_alone), name
    # outside a session's prefill nothing is shared
    calls.clear()
    module, hidden, keys, values, pos = _layer_inputs(llama, ids)
    for _ in range(2):
        pp.proposal_distribution("min_h", module, hidden, keys, values, pos)
    assert len(calls) == 2


def _layer_inputs(loaded, ids):
    """Layer 0's attention module, its input hidden states, keys, values and position embeddings for ``ids``."""
    model = loaded.model
    seen = {}
    attn = model.model.layers[0].self_attn

    def hook(module, args, kwargs, output):
        cache = kwargs["past_key_values"]
        seen.update(
            hidden=kwargs["hidden_states"],
            keys=cache.layers[0].keys,
            values=cache.layers[0].values,
            pos=kwargs["position_embeddings"],
        )

    handle = attn.register_forward_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            model(input_ids=ids[None], past_key_values=DynamicCache(config=model.config), use_cache=True)
    finally:
        handle.remove()
    return attn, seen["hidden"], seen["keys"], seen["values"], seen["pos"]


SESSION_ACTIONS = {
    "mn": {**PER_HEAD, "seed": 3},
    "mn_off": {**PER_HEAD, "seed": 3, "correction": False},
    "mn_other_seed": {**PER_HEAD, "seed": 4},
    "mn_t1": {**PER_HEAD, "seed": 3, "is_temperature": 1.0},
    "mn_t0": {**PER_HEAD, "seed": 3, "is_temperature": 0.0},
    "mn_thalf": {**PER_HEAD, "seed": 3, "is_temperature": 0.5},
    "global": {
        "press": "ProbabilisticPress",
        "compression_ratio": 0.6,
        "proposal": "min",
        "budget": "global",
        "seed": 3,
    },
    "scorer": {"press": "ProbabilisticPress", "compression_ratio": 0.5, "proposal": "scorer", "scorer": "KnormPress"},
    "pips": {"press": "ProbabilisticPress", "compression_ratio": 0.5, "design": "pips", "proposal": "min", "seed": 3},
}


@pytest.fixture(scope="module")
def session(llama):
    return KernelSession(llama, ids_of(64, 7), SESSION_ACTIONS, generation(horizon=128))


def independent_bias(press: ProbabilisticPress, layer: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Head ``head``'s kept prompt positions and their correction, recomputed from the press's kept
    indices, counts, draws m and π (not from its stored biases)."""
    row = press.kept_indices[layer][0, head]
    keep = row >= 0
    kept = row[keep]
    pi = press.probabilities[layer][0, head, kept]
    if not press.correction:
        return kept, torch.zeros_like(pi)
    if press.design == "pips":
        return kept, -press.is_temperature * torch.log(pi)
    counts = press.counts[layer][0, head][keep].double()
    return kept, press.is_temperature * (torch.log(counts) - math.log(int(press.draws[layer][0, head])) - torch.log(pi))


@pytest.mark.parametrize("name", ["mn", "mn_off", "mn_thalf", "global", "scorer", "pips"])
def test_correction_attention_equals_independent_recomputation(session, name, monkeypatch):
    """One decode step: every layer's attention output == softmax over the kept prompt keys with
    log(c_i/(mπ_i)) added (−log ρ_i for pips; nothing with correction off) plus the new token's key."""
    captured = {}
    original = AttentionInterface._global_mapping[ATTN_IMPLEMENTATION]

    def spy(module, query, key, value, *args, **kwargs):
        out, w = original(module, query, key, value, *args, **kwargs)
        captured[module.layer_idx] = (query.detach().clone(), out.detach().clone(), module.scaling)
        return out, w

    monkeypatch.setitem(AttentionInterface._global_mapping, ATTN_IMPLEMENTATION, spy)
    press = session.presses[name]
    chain = session.new_chain(name)
    ch = session._chains.chain(chain)
    slots, at = session._chains.pools[ch.pool], ch.length  # where its slot takes the new token's key and value
    session.step([chain], [42])
    ref = session.prompt_cache(REFERENCE)
    for layer in range(session.n_layers):
        query, out, scale = captured[layer]
        new_key = slots.keys[layer][ch.slot, :, at].double()
        new_value = slots.values[layer][ch.slot, :, at].double()
        for h in range(session.kv_heads):
            kept, bias = independent_bias(press, layer, h)
            keys = torch.cat([ref.keys[layer][h, kept].double(), new_key[h][None]])
            values = torch.cat([ref.values[layer][h, kept].double(), new_value[h][None]])
            bias = torch.cat([bias, torch.zeros(1, dtype=torch.float64)])
            groups = query.shape[1] // session.kv_heads
            q = query[0, h * groups : (h + 1) * groups, 0].double()
            expected = torch.softmax(q @ keys.T * scale + bias, dim=-1) @ values
            torch.testing.assert_close(
                out[0, 0, h * groups : (h + 1) * groups].double(), expected, atol=2e-5, rtol=1e-4
            )
    session.release([chain])


def test_correction_off_is_plain_sampled_eviction(session):
    """Same seed with and without correction: same kept entries and keys; zero bias on kept entries,
    −inf on padding; the weights log(c/(mπ)) are not all zero, so the correction changes Q."""
    on, off = session.presses["mn"], session.presses["mn_off"]
    for layer in range(session.n_layers):
        assert torch.equal(on.kept_indices[layer], off.kept_indices[layer])
        assert torch.equal(on.counts[layer], off.counts[layer])
        assert torch.equal(session.prompt_cache("mn").keys[layer], session.prompt_cache("mn_off").keys[layer])
        bias = session.prompt_cache("mn_off").bias[layer]
        padding = torch.zeros_like(bias, dtype=torch.bool)
        padding[:, : on.kept_indices[layer].shape[-1]] = on.kept_indices[layer][0] < 0
        padding[:, on.kept_indices[layer].shape[-1] :] = True
        assert torch.isinf(bias[padding]).all() and (bias[~padding] == 0).all()
        assert (session.prompt_cache("mn").bias[layer][~padding] != 0).any()
    chains = [session.new_chain("mn"), session.new_chain("mn_off")]
    laws = session.step(chains, [42, 42])
    session.release(chains)
    assert (laws[0] - laws[1]).abs().max() > 1e-6


def test_is_temperature_interpolates_the_correction(session):
    """is_temperature 1 is today's correction exactly (same bias tensors, identical decode laws); 0 is no
    correction exactly (the laws of correction=False); 0.5 biases the kept entries by half the log weights and
    gives laws different from both."""
    chains = {name: session.new_chain(name) for name in ("mn", "mn_t1", "mn_off", "mn_t0", "mn_thalf")}
    laws = dict(zip(chains, session.step(list(chains.values()), [42] * len(chains))))
    session.release(list(chains.values()))
    assert torch.equal(laws["mn_t1"], laws["mn"]) and torch.equal(laws["mn_t0"], laws["mn_off"])
    assert (laws["mn"] - laws["mn_off"]).abs().max() > 1e-6
    assert (laws["mn_thalf"] - laws["mn"]).abs().max() > 1e-7 and (laws["mn_thalf"] - laws["mn_off"]).abs().max() > 1e-7
    for layer in range(session.n_layers):
        for name in ("mn_t1", "mn_t0", "mn_off", "mn_thalf"):
            assert torch.equal(session.presses[name].log_weights[layer], session.presses["mn"].log_weights[layer])
        assert torch.equal(session.prompt_cache("mn_t1").bias[layer], session.prompt_cache("mn").bias[layer])
        assert torch.equal(session.prompt_cache("mn_t0").bias[layer], session.prompt_cache("mn_off").bias[layer])
        log_w = session.presses["mn"].log_weights[layer]
        kept = torch.isfinite(log_w)
        half = session.presses["mn_thalf"].attention_bias(layer)
        assert torch.equal(half[kept], 0.5 * log_w[kept]) and torch.equal(half[~kept], log_w[~kept])


def test_default_budget_is_the_papers_global():
    """multinomial defaults to the paper's global budget, pips to per_head (its only budget); both selectable."""
    assert ProbabilisticPress().budget == "global"
    assert build_press({"press": "ProbabilisticPress", "compression_ratio": 0.5}).budget == "global"
    assert ProbabilisticPress(design="pips").budget == "per_head"
    assert ProbabilisticPress(budget="per_head").budget == "per_head"
    assert ProbabilisticPress().h2o_normalization == "queries" and ProbabilisticPress().is_temperature == 1.0


def test_budgets_and_records(session):
    """per_head: every head's E|S| is k; global: one m for every layer and head and Σ E|S| = L·H·k,
    heads differ; the records are JSON-serialisable and count what the caches keep."""
    n = session.prompt_length
    per_head, glob = session.presses["mn"], session.presses["global"]
    k = 32  # compute_n_kept(64, 0.5)
    for layer in range(session.n_layers):
        np.testing.assert_allclose(per_head.expected_kept[layer].numpy(), k, atol=1e-9)
    k_global = 25  # compute_n_kept(64, 0.6)
    m = torch.stack([glob.draws[layer] for layer in range(session.n_layers)])
    assert (m == m.flatten()[0]).all()
    total = sum(float(glob.expected_kept[layer].sum()) for layer in range(session.n_layers))
    assert total == pytest.approx(k_global * session.n_layers * session.kv_heads, abs=1e-8)
    for name in ("mn", "global", "pips", "scorer"):
        record = json.loads(json.dumps(session.presses[name].effective_retention()))
        kept = [
            [int((idx >= 0).sum()) for idx in session.kept_indices(name)[layer]] for layer in range(session.n_layers)
        ]
        assert record["per_head"] == [[c / n for c in row] for row in kept]
        assert record["effective"] == pytest.approx(sum(map(sum, kept)) / (n * session.n_layers * session.kv_heads))
    record = glob.effective_retention()
    assert record["expected"] == pytest.approx(k_global / n, abs=1e-12) and record["target"] == k_global / n
    assert len({x for row in record["per_head"] for x in row}) > 1
    assert session.presses["pips"].effective_retention()["per_head"] == [[k / n] * session.kv_heads] * session.n_layers


def test_seed_reproduces_draws(session, llama):
    again = KernelSession(
        llama,
        session.prompt_ids,
        {"mn": SESSION_ACTIONS["mn"], "global": SESSION_ACTIONS["global"]},
        generation(horizon=128),
    )
    for name in ("mn", "global"):
        assert all(torch.equal(a, b) for a, b in zip(again.kept_indices(name), session.kept_indices(name)))
    assert not all(torch.equal(a, b) for a, b in zip(session.kept_indices("mn"), session.kept_indices("mn_other_seed")))


def test_multinomial_draws_per_document(llama):
    """In a trajectory job the draw seed is per document (issue 9): the multinomial design's counts and the
    global budget's rounding coin follow it — the same document draws the same cache, another one not."""
    ids = ids_of(40, 2)
    actions = {"g": SESSION_ACTIONS["global"], "h": SESSION_ACTIONS["mn"]}

    def kept(doc):
        s = KernelSession(llama, ids, actions, generation(master_seed=1, study_seed=2, horizon=128), document_id=doc)
        return s, {name: [k.clone() for k in s.kept_indices(name)] for name in actions}

    s0, a = kept("doc-0")
    _, same = kept("doc-0")
    _, other = kept("doc-1")
    for name in actions:
        assert all(torch.equal(x, y) for x, y in zip(a[name], same[name]))
        assert not all(torch.equal(x, y) for x, y in zip(a[name], other[name]))
    press = s0.presses["g"]
    assert press.draw_seed is not None and s0.press_seeds()["g"]["draw_seed"] == press.draw_seed
    assert press.layer_seed(0) == derive_seed(press.draw_seed, 0)


def test_run_document_records_effective_retention(tiny_llama, tmp_path):
    from kvdiv.trajectories.job import run_document
    from kvdiv.trajectories.store import read_document_store

    doc = {"id": "d-0", "prompt": "The key for the blue door is 4812. Remember it. " * 3}
    actions = {
        "prob": SESSION_ACTIONS["global"],
        "snap": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 4},
    }
    path = run_document(
        tiny_llama,
        doc,
        actions,
        tmp_path / "d.zarr",
        generation(master_seed=1, study_seed=2, horizon=2, replicates=1),
        progress=False,
    )
    attrs, _ = read_document_store(path)
    assert list(attrs["effective_retention"]) == ["prob"]
    record = attrs["effective_retention"]["prob"]
    n_layers, kv_heads = tiny_llama.model.config.num_hidden_layers, tiny_llama.model.config.num_key_value_heads
    assert record["prompt_entries"] == attrs["prompt_tokens"] and record["budget"] == "global"
    assert record["expected"] == pytest.approx(record["target"], abs=1e-12)
    assert np.array(record["per_head"]).shape == (n_layers, kv_heads) == np.array(record["draws"]).shape


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"design": "stratified"}, "design'? must be one of multinomial, pips"),
        ({"proposal": "snapkv"}, "proposal'? must be one of min, h2o, min_h, h2o_h, scorer"),
        ({"budget": "layer"}, "budget'? must be one of per_head, global"),
        ({"design": "pips", "budget": "global"}, "budget 'global' needs design 'multinomial'"),
        (
            {"proposal": "min", "history_size": 8},
            "history_size is only used with proposal 'h2o', 'min_h', 'h2o_h', not 'min'",
        ),
        ({"proposal": "h2o", "history_size": 0}, "history_size.*(must be a positive integer|out of range)"),
        ({"scorer": "SnapKVPress"}, "scorer is only used with proposal 'scorer'"),
        ({"proposal": "scorer"}, "unknown scorer None"),
        ({"correction": "yes"}, "correction'? must be true or false"),
        ({"is_temperature": 1.5}, "is_temperature.*(must be a number in \\[0, 1\\]|out of range)"),
        ({"is_temperature": -0.1}, "is_temperature.*(must be a number in \\[0, 1\\]|out of range)"),
        ({"is_temperature": "hot"}, "is_temperature.*must be a number"),
        ({"is_temperature": 0.5, "correction": False}, "is_temperature is only used with correction true"),
        (
            {"proposal": "h2o", "h2o_normalization": "keys"},
            "h2o_normalization.*(must be one of queries, none|not one of)",
        ),
        ({"proposal": "min", "h2o_normalization": "none"}, "h2o_normalization is only used with proposal 'h2o'"),
        ({"seed": -1}, "seed.*(must be a non-negative integer|out of range)"),
        ({"compression_ratio": 1.0}, "compression_ratio.*(must be in|out of range)"),
    ],
)
def test_bad_arguments_name_the_argument(spec, match):
    """Through an action spec (kvdiv.kernel.presses.registry's checks, then the press's own) and built directly."""
    with pytest.raises(ValueError, match=match):
        build_press({"press": "ProbabilisticPress", **spec})
    with pytest.raises(ValueError, match=match):
        ProbabilisticPress(**spec)


# ---------------------------------------------------------------- SmolLM2: the global budget on a real prompt


@pytest.fixture(scope="module")
def smollm2_prompt(smollm2):
    from kvdiv.documents import generate_prompt
    from kvdiv.documents.render import chat_function, prompt_token_ids

    chat = chat_function(smollm2.tokenizer, smollm2.chat_template)
    message, prefix, _, _ = generate_prompt(
        "niah_single_noise_number", seed=1, target_length=1000, tokenizer=smollm2.tokenizer, chat=chat, horizon=0
    )
    return torch.tensor(
        prompt_token_ids({"prompt": message, "answer_prefix": prefix}, smollm2.tokenizer, smollm2.chat_template)
    )


RATIOS = (0.1, 0.5, 0.9)
PAPER_TOLERANCE = 5e-4  # effective vs target retention ratio (arXiv 2608.28293)


def test_global_budget_meets_the_target_on_smollm2(smollm2, smollm2_prompt):
    """Global budget on SmolLM2 (30 layers × 3 KV heads) at compression 0.1, 0.5, 0.9: the controller's
    expected retention is the target (far inside the paper's 5e-4); the realised retention of one draw lies
    within 4.5 exact standard deviations of it; the mean over 64 redraws lies within 5e-4 and 4.5 SE."""
    actions = {
        f"r{r}": {"press": "ProbabilisticPress", "compression_ratio": r, "proposal": "min", "budget": "global"}
        for r in RATIOS
    }
    session = KernelSession(smollm2, smollm2_prompt, actions, generation(horizon=1))
    for r in RATIOS:
        press = session.presses[f"r{r}"]
        record = press.effective_retention()
        n = record["prompt_entries"]
        layers = sorted(press.probabilities)
        pis = torch.stack([press.probabilities[layer][0] for layer in layers])  # [L, H, n]
        cells = pis.shape[0] * pis.shape[1] * n
        target_total = record["target"] * cells
        assert abs(record["expected"] - record["target"]) < 1e-9
        # exact SD of the realised total: law of total variance over the rounding coin of m
        m_lo, f = draws_law(pis, target_total, shared=True)
        e_lo, e_hi = float(expected_distinct(pis, m_lo).sum()), float(expected_distinct(pis, m_lo + 1).sum())
        v_lo, v_hi = float(distinct_variance(pis, m_lo).sum()), float(distinct_variance(pis, m_lo + 1).sum())
        f = float(f)
        sd = math.sqrt((1 - f) * v_lo + f * v_hi + f * (1 - f) * (e_hi - e_lo) ** 2) / cells
        assert abs(record["effective"] - record["target"]) < 4.5 * sd
        # 64 redraws of the same controller (the press's own functions, fresh seeds)
        realised = []
        for seed in range(64):
            m, _ = allocate_draws(pis, target_total, derive_rng(seed, "budget").random(), shared=True)
            realised.append(float((multinomial_counts(pis, m, derive_rng(seed, 0)) > 0).sum()) / cells)
        mean = float(np.mean(realised))
        assert abs(mean - record["target"]) < min(PAPER_TOLERANCE, 4.5 * sd / 8), (r, mean, record["target"], sd)


def test_schema_documents_the_press_arguments_and_defaults():
    """kvdiv/data/schema.yaml's $defs/ProbabilisticPress is the press's argument table (kvdiv.kernel.presses.arguments,
    which the start-up check and the press read), and lists every argument of the press with the press's default."""
    import dataclasses
    from pathlib import Path

    import yaml

    from kvdiv.kernel.presses.arguments import schema_properties

    schema = yaml.safe_load((Path(__file__).resolve().parents[2] / "kvdiv" / "data" / "schema.yaml").read_text())
    documented = schema["$defs"]["ProbabilisticPress"]["properties"]
    expected = schema_properties("ProbabilisticPress")
    lines = [
        f"      {k}: " + yaml.safe_dump(v, default_flow_style=True, width=10**6).strip() for k, v in expected.items()
    ]
    assert documented == expected, "regenerate $defs/ProbabilisticPress/properties:\n" + "\n".join(lines)
    fields = {f.name: f for f in dataclasses.fields(ProbabilisticPress) if f.init}
    assert set(documented) == set(fields)
    for name, f in fields.items():
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        assert documented[name]["default"] == default, name
        assert documented[name]["description"]


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"budget": "layer"}, "budget' must be one of per_head, global"),
        ({"history_size": 2.5, "proposal": "h2o"}, "history_size' must be an integer"),
        ({"seed": -1}, r"seed' = -1 is out of range: it must lie in \[0, inf\)"),
    ],
)
def test_the_start_up_check_reads_the_press_table(spec, match):
    """check_argument (every argument of every action at start-up) applies the table's rules to ProbabilisticPress,
    not the generic name-based ones: the same rules as the press's own __post_init__."""
    from kvdiv.kernel.presses.arguments import check_argument

    (field, value), *_ = spec.items()
    with pytest.raises(ValueError, match=f"action 'p': ProbabilisticPress argument '{match}"):
        check_argument(ProbabilisticPress, field, value, "p")
    with pytest.raises(ValueError, match=match.split("'")[0]):
        ProbabilisticPress(**spec)


def test_scorer_kwargs_the_scorer_ignores_are_refused():
    """compression_ratio in scorer_kwargs was silently dropped (the press's own budget sets the scorer's)."""
    spec = {"proposal": "scorer", "scorer": "SnapKVPress", "compression_ratio": 0.5}
    with pytest.raises(ValueError, match="scorer_kwargs.compression_ratio is ignored"):
        ProbabilisticPress(**spec, scorer_kwargs={"window_size": 8, "compression_ratio": 0.9})
    assert ProbabilisticPress(**spec, scorer_kwargs={"window_size": 8})._scorer.compression_ratio == 0.5


# ------------------------------------------- the correction under `with press(model)` and in kvpress's pipeline


def spy_attention(monkeypatch):
    """Capture (layer, query, key, value, output) of every non-prefill call of the model's sdpa attention function
    (outermost: after the press patched it)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from kvdiv.kernel.presses.logit_bias import patch_attention_functions

    patch_attention_functions()  # (a press patches on entry; done first, the spy stays outermost)
    calls = []
    inner = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def spy(module, query, key, value, *args, **kwargs):
        out, w = inner(module, query, key, value, *args, **kwargs)
        if query.shape[2] != key.shape[2]:
            calls.append(
                (
                    module.layer_idx,
                    query.detach().clone(),
                    key.detach().clone(),
                    value.detach().clone(),
                    out.detach().clone(),
                    module.scaling,
                )
            )
        return out, w

    spy._kvdiv_logit_bias_patched = True  # it wraps the patched function: a press entering later must not re-wrap it
    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "sdpa", spy)
    return calls


def reference_kv(model, ids):
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids[None], past_key_values=cache, use_cache=True)
    return [(layer.keys[0].double(), layer.values[0].double()) for layer in cache.layers]


def check_calls_against_independent(press, calls, reference):
    """Every captured decode/question call: each query row's output == softmax over the kept prompt entries (the full
    prompt's keys at the press's kept positions) with the independently recomputed correction, plus the entries after
    the prompt (causal), times the values."""
    assert calls
    for layer, query, key, value, out, scale in calls:
        ref_k, ref_v = reference[layer]
        P = press.kept_indices[layer].shape[-1]
        q_len, n = query.shape[2], key.shape[2]
        kv_heads = key.shape[1]
        groups = query.shape[1] // kv_heads
        for h in range(kv_heads):
            kept, bias = independent_bias(press, layer, h)
            for i in range(q_len):
                visible = n - q_len + i + 1  # causal: keys 0 .. n - q_len + i
                keys = torch.cat([ref_k[h, kept], key[0, h, P:visible].double()])
                values = torch.cat([ref_v[h, kept], value[0, h, P:visible].double()])
                b = torch.cat([bias, torch.zeros(visible - P, dtype=torch.float64)])
                q = query[0, h * groups : (h + 1) * groups, i].double()
                expected = torch.softmax(q @ keys.T * scale + b, dim=-1) @ values
                torch.testing.assert_close(
                    out[0, i, h * groups : (h + 1) * groups].double(), expected, atol=2e-5, rtol=1e-4
                )


@pytest.mark.parametrize("name", ["mn", "mn_off", "global", "pips"])
def test_correction_under_with_press_equals_independent_recomputation(llama, name, monkeypatch):
    """kvpress's usage, without torch.no_grad(): prefill under ``with press(model)``, decode after the block. Every
    layer's attention == the independent recomputation (correction on: log(c/(mπ)), −log ρ; off: none), and the
    next-token law == the KernelSession's for the same press and seed (so correction=True never silently vanishes)."""
    model = llama.model
    ids = ids_of(64, 7)
    reference = reference_kv(model, ids)
    press = build_press(SESSION_ACTIONS[name])
    cache = DynamicCache(config=model.config)
    with press(model):
        model(input_ids=ids[None], past_key_values=cache, use_cache=True)  # no no_grad: the numpy() bug is fixed
    calls = spy_attention(monkeypatch)
    # the new token's RoPE position is the prompt length (as kvpress's pipeline passes it), not the compressed length
    logits = (
        model(
            input_ids=torch.tensor([[42]]),
            past_key_values=cache,
            position_ids=torch.tensor([[len(ids)]]),
            use_cache=True,
        )
        .logits[0, -1]
        .detach()
    )
    check_calls_against_independent(press, calls, reference)
    session = KernelSession(llama, ids, {name: SESSION_ACTIONS[name]}, generation(horizon=128))
    chain = session.new_chain(name)
    law = session.step([chain], [42])[0]
    torch.testing.assert_close(torch.log_softmax(logits.double(), -1), torch.log(law), atol=1e-4, rtol=0)


def test_correction_changes_the_logits_under_with_press(llama):
    """The issue's reproduction: correction=True and False differ after a 64-token prefill (they were identical)."""
    model, ids = llama.model, ids_of(64, 7)
    logits = {}
    for correction in (True, False):
        press = ProbabilisticPress(compression_ratio=0.5, correction=correction, seed=1)
        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            with press(model):
                model(input_ids=ids[None], past_key_values=cache, use_cache=True)
            logits[correction] = model(input_ids=torch.tensor([[42]]), past_key_values=cache).logits[0, -1]
    assert (torch.log_softmax(logits[True], -1) - torch.log_softmax(logits[False], -1)).abs().max() > 1e-3


def test_correction_in_kvpress_pipeline_equals_independent_recomputation(llama, monkeypatch):
    """kvpress's pipeline: the context is compressed under the press, the question and the answer are decoded after
    it; every one of those attention calls carries the correction (independent recomputation)."""
    from kvpress import KVPressTextGenerationPipeline

    pipe = KVPressTextGenerationPipeline(model=llama.model, tokenizer=llama.tokenizer)
    press = build_press(SESSION_ACTIONS["mn"])
    context = "".join(chr(97 + int(i) % 26) for i in ids_of(60, 3))
    inputs = pipe.preprocess(context, ["which letter?"], answer_prefix="", max_context_length=10**6)
    calls = spy_attention(monkeypatch)
    pipe(context, question="which letter?", press=press, max_new_tokens=3)
    reference = reference_kv(llama.model, inputs["context_ids"][0])
    assert any(c[1].shape[2] > 1 for c in calls)  # the question's forward went through the patched attention
    check_calls_against_independent(press, calls, reference)


def test_correction_refused_where_the_attention_cannot_carry_it(llama):
    """An attention implementation without an additive mask (eager, flash): ``with press(model)`` raises, naming
    where the correction applies; correction=False is plain sampled eviction there."""
    model = llama.model
    configs = {id(m.config): m.config for m in model.modules() if hasattr(m, "config")}
    saved = {k: c._attn_implementation for k, c in configs.items()}
    try:
        for c in configs.values():
            c._attn_implementation = "eager"
        with pytest.raises(NotImplementedError, match=r"sdpa.*'eager'.*KernelSession"):
            with ProbabilisticPress(compression_ratio=0.5, correction=True)(model):
                pass
        with ProbabilisticPress(compression_ratio=0.5, correction=False)(model):
            pass
    finally:
        for k, c in configs.items():
            c._attn_implementation = saved[k]
