"""kvdiv.kernel.presses.window_attention: SnapKV's window attention with the same bits as kvpress's, and every prefill
that uses it (SnapKV, its wrappers, TOVA, a scorer proposal) giving the same caches as kvpress's own."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from default_presses import DEFAULT_PRESSES
from support.calls import record_calls
from support.sessions import assert_same_prompt_caches
from kvpress import SnapKVPress

import kvdiv.kernel.prefill as prefill_module
import kvdiv.kernel.presses.window_attention as window_module
from kvdiv.kernel.prefill import attention_layers, language_model
from kvdiv.kernel.prefill_attention import prefill_attention
from kvdiv.kernel.presses.window_attention import (
    KVPRESS_WINDOW_ATTENTION,
    exact_window_attention,
    future_mask,
    window_attention,
)
from kvdiv.kernel.session import KernelSession
from kvdiv.models.prepacked import unpack_linears
from kvdiv.settings import generation

#: presses whose prefill reaches SnapKV's window attention
WINDOW_PRESSES = ["snapkv", "pyramid", "adakv", "criticaladakv", "block", "entropychunkkv", "tova", "prob"]


def _layer_inputs(loaded, k_len: int, seed: int):
    """(attention module of layer 0, hidden states [1, k_len, d], keys [1, kv, k_len, hd], position embeddings)."""
    torch.manual_seed(seed)
    model = loaded.model
    attn = attention_layers(model)[0]
    hidden = torch.randn(1, k_len, model.config.hidden_size)
    keys = torch.randn(1, model.config.num_key_value_heads, k_len, attn.head_dim)
    positions = torch.arange(k_len)[None]
    embeddings = language_model(model).rotary_emb(hidden, positions)
    return attn, hidden, keys, embeddings


@pytest.fixture(scope="module")
def smollm2_shaped(tiny_model_factory):
    """A tiny Llama with SmolLM2's head counts (9 query heads on 3 KV heads) and the tiny configs' head_dim 16."""
    return tiny_model_factory("llama", hidden_size=576, num_attention_heads=9, num_key_value_heads=3)


@pytest.mark.parametrize("window, k_len", [(8, 48), (47, 48), (1, 5), (64, 200), (512, 704), (512, 513)])
def test_window_attention_has_kvpress_bits(smollm2_shaped, tiny_llama, tiny_qwen2, window, k_len):
    for loaded in (smollm2_shaped, tiny_llama, tiny_qwen2):
        attn, hidden, keys, embeddings = _layer_inputs(loaded, k_len, seed=window + k_len)
        theirs = KVPRESS_WINDOW_ATTENTION(attn, hidden, keys, window, embeddings)
        ours = window_attention(attn, hidden, keys, window, embeddings)
        assert ours.shape == theirs.shape == (1, loaded.model.config.num_attention_heads, window, k_len - window)
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("window, k_len", [(8, 48), (64, 200), (512, 704)])
@pytest.mark.parametrize("heads_per_block", [1, 2])
def test_window_attention_in_blocks_of_heads_has_kvpress_bits(
    smollm2_shaped, monkeypatch, window, k_len, heads_per_block
):
    """Blocks of one head, and of two (9 heads: four blocks and a leftover head), write the same bits as kvpress's
    one pass."""
    monkeypatch.setattr("kvdiv.kernel.presses.window_attention.BLOCK_ELEMENTS", heads_per_block * window * k_len)
    attn, hidden, keys, embeddings = _layer_inputs(smollm2_shaped, k_len, seed=window)
    theirs = KVPRESS_WINDOW_ATTENTION(attn, hidden, keys, window, embeddings)
    assert torch.equal(window_attention(attn, hidden, keys, window, embeddings), theirs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("block", [1, 2 * 64 * 200, 1 << 22])
def test_window_attention_in_half_precision_and_batches_has_kvpress_bits(
    smollm2_shaped, monkeypatch, dtype, batch, block
):
    """A half-precision model (softmax in float32, then the model's dtype, as kvpress) and two prompts at once, in
    blocks of one head and in one block."""
    monkeypatch.setattr("kvdiv.kernel.presses.window_attention.BLOCK_ELEMENTS", block)
    attn, hidden, keys, embeddings = _layer_inputs(smollm2_shaped, 200, seed=3)
    attn = copy.deepcopy(attn)
    unpack_linears(attn)  # oneDNN's packed half-precision weights need CPU features a machine may lack
    attn = attn.to(dtype)
    hidden, keys = hidden.expand(batch, -1, -1).to(dtype), keys.expand(batch, -1, -1, -1).to(dtype)
    hidden = hidden + torch.arange(batch, dtype=dtype)[:, None, None]  # the prompts differ
    embeddings = tuple(e.expand(batch, -1, -1).to(dtype) for e in embeddings)
    theirs = KVPRESS_WINDOW_ATTENTION(attn, hidden, keys, 64, embeddings)
    ours = window_attention(attn, hidden, keys, 64, embeddings)
    assert theirs.dtype == ours.dtype == dtype and ours.shape[0] == batch
    assert torch.equal(ours, theirs)


@pytest.fixture(scope="module")
def smollm2_heads(tiny_model_factory):
    """SmolLM2's attention exactly: 9 query heads on 3 KV heads of 64 dimensions."""
    return tiny_model_factory("llama", hidden_size=576, num_attention_heads=9, num_key_value_heads=3, head_dim=64)


def _float64_window_attention(attn, hidden, keys, window, embeddings):
    """kvpress's window attention on a float64 copy of the module and its inputs."""
    attn = copy.deepcopy(attn)
    unpack_linears(attn)
    as64 = tuple(e.double() for e in embeddings)
    return KVPRESS_WINDOW_ATTENTION(attn.double(), hidden.double(), keys.double(), window, as64)


@pytest.mark.parametrize("window, k_len", [(8, 48), (47, 48), (1, 5), (64, 200), (512, 704), (512, 513)])
@pytest.mark.parametrize("heads_per_block", [1, 2, 4, 9])
def test_window_attention_in_the_prefill_attention_goes_through_onednn(
    smollm2_heads, monkeypatch, window, k_len, heads_per_block
):
    """Inside the prefill's oneDNN attention the window's products go through oneDNN, one KV head's query heads per
    product (blocks of 2 heads: [2, 1] per KV head; of 4 or 9: one KV head's 3): every weight of every head within
    twice kvpress's own float32 error of float64, plus one ulp at 1."""
    monkeypatch.setattr(window_module, "BLOCK_ELEMENTS", heads_per_block * window * k_len)
    products = record_calls(monkeypatch, window_module, "packed_product")
    attn, hidden, keys, embeddings = _layer_inputs(smollm2_heads, k_len, seed=window + k_len)
    exact = _float64_window_attention(attn, hidden, keys, window, embeddings)
    theirs = KVPRESS_WINDOW_ATTENTION(attn, hidden, keys, window, embeddings)
    assert not products
    with torch.no_grad(), prefill_attention(smollm2_heads.model):
        ours = window_attention(attn, hidden, keys, window, embeddings)
    per_kv_head = [2, 1] if heads_per_block == 2 else [1, 1, 1] if heads_per_block == 1 else [3]
    assert [x.shape[0] for x, _ in products] == [heads * window for heads in per_kv_head * 3]
    bound = 2 * (theirs.double() - exact).abs().max().item() + torch.finfo(torch.float32).eps
    assert ours.shape == exact.shape and (ours.double() - exact).abs().max().item() <= bound


def test_window_attention_outside_the_prefill_attention_or_with_a_gradient_keeps_torch_products(
    smollm2_heads, monkeypatch
):
    """A window attention called outside the prefill's oneDNN attention, in another dtype, or with keys that keep a
    gradient, multiplies as kvpress does (its bits)."""
    monkeypatch.setattr(window_module, "packed_product", lambda *args: pytest.fail("oneDNN product"))
    attn, hidden, keys, embeddings = _layer_inputs(smollm2_heads, 200, seed=5)
    theirs = KVPRESS_WINDOW_ATTENTION(attn, hidden, keys, 64, embeddings)
    assert torch.equal(window_attention(attn, hidden, keys, 64, embeddings), theirs)
    with prefill_attention(smollm2_heads.model):
        grad_keys = keys.clone().requires_grad_()
        ours = window_attention(attn, hidden, grad_keys, 64, embeddings)
        assert ours.requires_grad and torch.equal(ours.detach(), theirs)


def test_a_wrong_mask_would_show(tiny_llama, monkeypatch):
    """The equality above can fail: a mask one diagonal off changes the weights."""
    attn, hidden, keys, embeddings = _layer_inputs(tiny_llama, 48, seed=1)
    theirs = KVPRESS_WINDOW_ATTENTION(attn, hidden, keys, 8, embeddings)
    off_by_one = lambda w, device: torch.ones(w, w, dtype=torch.bool, device=device).triu_(2)  # noqa: E731
    monkeypatch.setattr("kvdiv.kernel.presses.window_attention.future_mask", off_by_one)
    assert not torch.equal(window_attention(attn, hidden, keys, 8, embeddings), theirs)


def test_future_mask_is_kvpress_triu():
    """kvpress's mask over all k_len keys masks only the window's own columns, as future_mask does."""
    mask = future_mask(4, torch.device("cpu"))
    expected = torch.triu(torch.ones(4, 10) * float("-inf"), diagonal=7) == float("-inf")
    assert not expected[:, :6].any() and torch.equal(mask, expected[:, 6:])
    assert mask[-1].sum() == 0 and mask[0].tolist() == [False, True, True, True]


def test_exact_window_attention_installs_and_restores():
    assert SnapKVPress.__dict__["compute_window_attention"] is KVPRESS_WINDOW_ATTENTION
    with exact_window_attention():
        assert SnapKVPress.compute_window_attention is window_attention
    assert SnapKVPress.__dict__["compute_window_attention"] is KVPRESS_WINDOW_ATTENTION
    with pytest.raises(RuntimeError, match="inside"):
        with exact_window_attention():
            raise RuntimeError("inside")
    assert SnapKVPress.__dict__["compute_window_attention"] is KVPRESS_WINDOW_ATTENTION


@pytest.mark.parametrize("name", WINDOW_PRESSES)
def test_prefill_caches_equal_kvpress_own_window_attention(tiny_llama, monkeypatch, name):
    """Every action's prompt cache and initial law is bit for bit what kvpress's own window attention gives (with
    torch's products: the oneDNN ones are the next test's)."""
    monkeypatch.setattr(window_module, "_through_onednn", lambda *args: False)
    prompt = torch.randint(5, 200, (48,), generator=torch.Generator().manual_seed(3))
    actions = {name: DEFAULT_PRESSES[name]}
    calls = record_calls(monkeypatch, window_module, "window_attention")
    ours = KernelSession(tiny_llama, prompt, actions, generation(horizon=4))
    assert len(calls) >= ours.n_layers  # the prefill did go through it
    monkeypatch.setattr(prefill_module, "exact_window_attention", contextlib.nullcontext)
    theirs = KernelSession(tiny_llama, prompt, actions, generation(horizon=4))
    assert_same_prompt_caches(ours, theirs)


@pytest.mark.parametrize("name", ["snapkv", "tova", "prob"])
def test_a_packed_prefill_takes_the_window_products_through_onednn(smollm2_heads, monkeypatch, name):
    """On a packed float32 model the prefill's window products go through oneDNN (every layer, every KV head), and
    every action keeps the entries it keeps with kvpress's own window attention, with its prompt cache and initial law
    within float32 round-off."""
    prompt = torch.randint(5, 200, (96,), generator=torch.Generator().manual_seed(4))
    actions = {name: DEFAULT_PRESSES[name]}
    products = record_calls(monkeypatch, window_module, "packed_product")
    ours = KernelSession(smollm2_heads, prompt, actions, generation(horizon=4))
    assert len(products) >= ours.n_layers * smollm2_heads.model.config.num_key_value_heads
    monkeypatch.setattr(prefill_module, "exact_window_attention", contextlib.nullcontext)
    theirs = KernelSession(smollm2_heads, prompt, actions, generation(horizon=4))
    assert all(torch.equal(a, b) for a, b in zip(ours.kept_indices(name), theirs.kept_indices(name)))
    for cache in ours.caches:
        a, b = ours.prompt_cache(cache), theirs.prompt_cache(cache)
        for layer in range(ours.n_layers):
            torch.testing.assert_close(a.keys[layer], b.keys[layer], rtol=0, atol=1e-5)
            torch.testing.assert_close(a.values[layer], b.values[layer], rtol=0, atol=1e-5)
            assert torch.equal(a.bias[layer].isinf(), b.bias[layer].isinf())
        torch.testing.assert_close(ours.initial_probs(cache), theirs.initial_probs(cache), rtol=0, atol=1e-6)
