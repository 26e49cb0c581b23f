"""The prefill attention through oneDNN (kvdiv.kernel.prefill_attention): the causal law to float32 round-off against
float64 enumeration, on GQA shapes and every block boundary; torch's sdpa, bit for bit, for anything but a plain
causal prefill; swapped in only for packed sdpa models and restored; registered as sdpa is (kvpress's patch once)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from support.fresh import last_line
from transformers import DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import kvdiv.kernel.prefill_attention as pa
from kvdiv.kernel.prefill_attention import (
    ATTN_IMPLEMENTATION,
    QUERY_BLOCK,
    applies,
    causal_attention,
    prefill_attention,
    prefill_attention_forward,
)
from kvdiv.kernel.attention_switch import attention_implementation
from kvdiv.kernel.presses.logit_bias import BIAS_ATTENTION
from kvdiv.kernel.presses.probabilistic_press import ProbabilisticPress
from kvdiv.kernel.session import KernelSession
from kvdiv.models.prepacked import unpacked
from kvdiv.settings import generation

EPS32 = torch.finfo(torch.float32).eps


def exact_attention(query, key, value, scaling):
    """softmax(q·kᵀ·scaling + causal mask)·v in float64, by enumeration of each query's visible keys: [b, n, h, d]."""
    batch, heads, n, _ = query.shape
    groups = heads // key.shape[1]
    out = torch.empty(batch, n, heads, query.shape[-1], dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            k, v = key[b, h // groups].double(), value[b, h // groups].double()
            for i in range(n):
                w = torch.softmax(k[: i + 1] @ query[b, h, i].double() * scaling, 0)
                out[b, i, h] = w @ v[: i + 1]
    return out


def qkv(batch, heads, kv_heads, n, head_dim, seed=0):
    """Queries, keys and values laid out as transformers hands them over: [b, h, n, d] views of [b, n, h, d]."""
    g = torch.Generator().manual_seed(seed)

    def make(h):
        return (2 * torch.randn(batch, n, h, head_dim, generator=g)).transpose(1, 2)

    return make(heads), make(kv_heads), make(kv_heads)


@pytest.mark.parametrize(
    "batch, heads, kv_heads, n, head_dim",
    [
        (1, 9, 3, QUERY_BLOCK + 1, 64),  # SmolLM2's heads, one query past a block
        (2, 4, 2, 2 * QUERY_BLOCK + 5, 16),  # batch, groups of 2, a ragged last block
        (1, 4, 4, QUERY_BLOCK, 16),  # no GQA, exactly one block
        (1, 6, 2, QUERY_BLOCK - 1, 32),
        (1, 2, 1, 2, 8),  # the shortest prompt with a causal mask
    ],
)
def test_causal_attention_is_the_causal_law_to_float32_round_off(batch, heads, kv_heads, n, head_dim):
    """Every output within float32 round-off of the float64 law, as close as torch's own sdpa is to it (weights of
    at most 1 over at most n keys of |v| ≲ 8: a few hundred ulps of the largest value bound both)."""
    q, k, v = qkv(batch, heads, kv_heads, n, head_dim)
    scaling = head_dim**-0.5
    exact = exact_attention(q, k, v, scaling)
    ours = causal_attention(q, k, v, scaling)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, scale=scaling, enable_gqa=True
    ).transpose(1, 2)
    bound = 256 * EPS32 * float(v.abs().max())
    assert ours.shape == (batch, n, heads, head_dim)
    assert (ours.double() - exact).abs().max() <= bound
    assert (sdpa.double() - exact).abs().max() <= bound  # the bound is what float32 attention achieves
    # the causal mask: changing the last key and value changes no output but the last position's
    k2, v2 = k.clone(), v.clone()
    k2[:, :, -1] += 1.0
    v2[:, :, -1] -= 1.0
    moved = causal_attention(q, k2, v2, scaling)
    assert torch.equal(moved[:, :-1], ours[:, :-1])
    assert not torch.equal(moved[:, -1], ours[:, -1])


def test_causal_attention_runs_for_contiguous_queries_too():
    """Queries already [b, h, n, d]-contiguous (another model's layout) give the same values."""
    q, k, v = qkv(1, 4, 2, 50, 16, seed=3)
    assert torch.equal(
        causal_attention(q.contiguous(), k.contiguous(), v.contiguous(), 0.25), causal_attention(q, k, v, 0.25)
    )


@pytest.fixture
def counted(monkeypatch):
    """Calls of the oneDNN path while the test runs."""
    calls = []
    real = pa.causal_attention

    def counting(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(pa, "causal_attention", counting)
    return calls


class _Module(torch.nn.Module):
    is_causal = True
    num_key_value_groups = 2


class _NotCausal(_Module):
    is_causal = False


@pytest.mark.parametrize(
    "case",
    [
        "decode",
        "mask",
        "bfloat16",
        "window",
        "softcap",
        "dropout",
        "grad",
        "value_grad",
        "not_causal",
        "module_not_causal",
        "wider_values",
    ],
)
def test_anything_but_a_plain_causal_prefill_is_sdpa_bit_for_bit(case, counted):
    q, k, v = qkv(1, 4, 2, 20, 16, seed=1)
    module = _NotCausal() if case == "module_not_causal" else _Module()
    mask, kwargs = None, {}
    if case == "decode":
        q = q[:, :, -1:]
    elif case == "mask":
        mask = torch.ones(1, 1, 20, 20, dtype=torch.bool).tril()
        mask[..., :3] = False  # left padding
        mask[..., 0, 0] = True
    elif case == "bfloat16":
        q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    elif case == "window":
        kwargs["sliding_window"] = 8
    elif case == "softcap":
        kwargs["softcap"] = 30.0
    elif case == "dropout":
        kwargs["dropout"] = 0.5
    elif case == "grad":
        q.requires_grad_(True)
    elif case == "value_grad":  # (an adapter on v_proj alone): oneDNN's product has no backward
        v.requires_grad_(True)
    elif case == "not_causal":
        kwargs["is_causal"] = False
    elif case == "module_not_causal":  # is_causal=None defers to the module, as sdpa reads it
        kwargs["is_causal"] = None
    elif case == "wider_values":  # a value head wider than the query's (multi-head latent attention)
        v = torch.cat([v, v[..., :8]], dim=-1)
    torch.manual_seed(0)
    got, _ = prefill_attention_forward(module, q, k, v, mask, scaling=0.25, **kwargs)
    torch.manual_seed(0)
    if case in ("window", "softcap"):
        kwargs.pop("sliding_window", None), kwargs.pop("softcap", None)  # sdpa ignores both
    expected, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25, **kwargs)
    assert counted == []
    assert torch.equal(got, expected)


def test_a_plain_causal_prefill_takes_the_onednn_path(counted):
    q, k, v = qkv(1, 4, 2, 20, 16, seed=1)
    got, weights = prefill_attention_forward(_Module(), q, k, v, None, scaling=0.25)
    assert counted == [q.shape] and weights is None
    torch.testing.assert_close(got, sdpa_attention_forward(_Module(), q, k, v, None, scaling=0.25)[0])


@pytest.fixture(scope="module")
def llama(tiny_model_factory):
    return tiny_model_factory("llama", initializer_range=0.25)


def prompt_ids(loaded, n=150, seed=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(10, loaded.model.config.vocab_size, (n,), generator=g)


def test_swapped_in_for_a_packed_sdpa_model_and_restored(llama, counted):
    """A packed float32 CPU model runs it inside the block (every layer's prefill, none of its decode steps) and sdpa
    after it, also when the block raises; an unpacked model keeps sdpa throughout."""
    model = llama.model
    assert applies(model) and attention_implementation(model) == "sdpa"
    ids = prompt_ids(llama)
    cache = DynamicCache(config=model.config)
    with torch.no_grad(), prefill_attention(model) as swapped:
        assert swapped and attention_implementation(model) == ATTN_IMPLEMENTATION
        model(input_ids=ids[None], past_key_values=cache, use_cache=True)
        assert len(counted) == model.config.num_hidden_layers
        model(input_ids=ids[None, :1], past_key_values=cache, use_cache=True)  # a decode step: sdpa
        assert len(counted) == model.config.num_hidden_layers
    assert attention_implementation(model) == "sdpa"
    with pytest.raises(RuntimeError, match="inside"), prefill_attention(model):
        raise RuntimeError("inside")
    assert attention_implementation(model) == "sdpa"
    with unpacked(model):
        assert not applies(model)
        with torch.no_grad(), prefill_attention(model) as swapped:
            assert not swapped
            model(input_ids=ids[None])
    assert len(counted) == model.config.num_hidden_layers


def test_a_session_prefill_is_sdpas_law_to_round_off(llama):
    """The session's first laws (its prefill's last position) == a plain sdpa forward's, within float32 round-off of
    the logits."""
    ids = prompt_ids(llama)
    session = KernelSession(llama, ids, {}, generation(horizon=4))
    with torch.no_grad():
        logits = llama.model(ids[None]).logits[0, -1].double()
    torch.testing.assert_close(session.initial_probs("reference"), torch.softmax(logits, -1), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("decode_inside", [True, False])
def test_a_probabilistic_press_correction_applies_once_through_it(llama, counted, decode_inside):
    """A ProbabilisticPress prefilled the kvpress way (``with press(model):``) inside ``prefill_attention`` leaves its
    decode-time correction, and a decode step — through this attention (inside the block) or sdpa (after it) — applies
    it once: the law is sdpa's throughout, to round-off, and far from the uncorrected one."""
    model = llama.model
    ids = prompt_ids(llama, n=120)[None]

    def next_law(correction: bool, ours: bool, inside: bool) -> torch.Tensor:
        cache = DynamicCache(config=model.config)
        press = ProbabilisticPress(compression_ratio=0.5, seed=3, correction=correction)
        step = dict(input_ids=torch.tensor([[7]]), past_key_values=cache, position_ids=torch.tensor([[120]]))
        with torch.no_grad():
            with prefill_attention(model) if ours else contextlib.nullcontext():
                with press(model):
                    model(input_ids=ids, past_key_values=cache, use_cache=True)
                if inside:
                    return torch.softmax(model(**step).logits[0, -1].double(), -1)
            return torch.softmax(model(**step).logits[0, -1].double(), -1)

    sdpa = next_law(True, ours=False, inside=False)
    ours = next_law(True, ours=True, inside=decode_inside)
    assert len(counted) == model.config.num_hidden_layers  # the prefill ran the oneDNN path
    torch.testing.assert_close(ours, sdpa, atol=1e-6, rtol=1e-5)
    assert (next_law(False, ours=False, inside=False) - sdpa).abs().max() > 1e-3
    assert ATTN_IMPLEMENTATION in BIAS_ATTENTION


def test_a_probabilistic_press_works_on_a_model_of_its_own_in_a_fresh_interpreter():
    """Imported alone (no KernelSession, nothing that registers kvdiv's prefill attention first), a ProbabilisticPress
    applied the kvpress way to a plain transformers model prefills and decodes (its bias patch once looked up the
    prefill attention before anything registered it)."""
    code = (
        "import torch\n"
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "from kvdiv.kernel.presses.probabilistic_press import ProbabilisticPress\n"
        "torch.manual_seed(0)\n"
        "cfg = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,\n"
        "                  num_attention_heads=4, num_key_value_heads=2, attn_implementation='sdpa')\n"
        "model = LlamaForCausalLM(cfg).eval()\n"
        "with torch.no_grad(), ProbabilisticPress(compression_ratio=0.5)(model):\n"
        "    out = model(input_ids=torch.randint(0, 100, (1, 40)), use_cache=True)\n"
        "    model(input_ids=torch.tensor([[5]]), past_key_values=out.past_key_values)\n"
        "print('ok')\n"
    )
    assert last_line(code) == "ok"


@pytest.mark.parametrize("first", ["kvdiv.kernel.prefill_attention", "kvpress"])
def test_registered_wrapped_by_kvpress_once_whatever_is_imported_first(first):
    """kvpress's head-wise mask patch (which also clears a module's masked entries at each prefill) wraps the
    registered function exactly once, as it wraps sdpa, in either import order (a fresh interpreter each)."""
    code = (
        f"import {first}\n"
        "import kvpress\n"
        "import kvdiv.kernel.prefill_attention as p\n"
        "from kvpress.attention_patch import attention_patch\n"
        "from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS as fns\n"
        "fn = fns.get_interface(p.ATTN_IMPLEMENTATION, None)\n"
        "wrapper = attention_patch(len).__code__\n"
        "inner = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__)))['func']\n"
        "print(fn.__code__ is wrapper and inner is p.prefill_attention_forward)\n"
    )
    assert last_line(code) == "True"
