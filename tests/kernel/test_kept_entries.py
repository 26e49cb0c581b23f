"""``kept_entries``: a scorer press keeps a fixed number of entries (the literature's "SnapKV-512"), its compression
ratio computed per prompt from the entries compressed. Checked against kvpress run with that ratio: the same kept
positions, the same cache tensors, the same laws, bit for bit; and exactly K entries kept."""

from __future__ import annotations

import copy
import random

import pytest
import torch
from default_presses import DEFAULT_PRESSES
from support.sessions import kvpress_own_prefill
from kvpress.utils import compute_n_kept

from kvdiv.kernel.presses.registry import build_press, ratio_keeping, validate_action
from kvdiv.kernel.session import KernelSession
from kvdiv.settings import generation

PROMPT_LEN = 48
KEPT = 20


def with_kept_entries(spec, kept: int):
    """``spec`` with its scorer's compression_ratio replaced by kept_entries (top level, wrapped, first composed)."""
    spec = copy.deepcopy(spec)
    for part in (spec, spec.get("wraps"), *(spec.get("presses") or [])[:1]):
        if isinstance(part, dict) and "compression_ratio" in part:
            del part["compression_ratio"]
            part["kept_entries"] = kept
            return spec
    return None


def with_ratio(spec, ratio: float):
    spec = copy.deepcopy(spec)
    for part in (spec, spec.get("wraps"), *(spec.get("presses") or [])[:1]):
        if isinstance(part, dict) and "kept_entries" in part:
            del part["kept_entries"]
            part["compression_ratio"] = ratio
    return spec


KEPT_SPECS = {name: s for name, spec in DEFAULT_PRESSES.items() if (s := with_kept_entries(spec, KEPT)) is not None}


def test_every_scorer_press_of_the_press_list_takes_kept_entries():
    assert set(KEPT_SPECS) == set(DEFAULT_PRESSES)  # every default press has a scorer with a compression_ratio


def test_ratio_keeping_keeps_exactly_k():
    rng = random.Random(0)
    cases = [(n, k) for n in range(2, 300) for k in range(1, n)]
    cases += [(n, rng.randrange(1, n)) for n in (rng.randrange(300, 200_000) for _ in range(20_000))]
    for n, k in cases:
        r = ratio_keeping(n, k)
        assert 0 < r < 1 and int(n * (1 - r)) == k == compute_n_kept(n, r), (n, k, r)
    assert ratio_keeping(512, 512) == ratio_keeping(100, 512) == 0.0  # keeps everything: evicts nothing


@pytest.fixture(scope="module")
def llama(tiny_model_factory):
    return tiny_model_factory("llama", initializer_range=0.25)


def prompt(loaded, n: int = PROMPT_LEN, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, loaded.model.config.vocab_size, (n,), generator=g)
    eos = set(loaded.eos_token_ids)
    return torch.tensor([t if t not in eos else 11 for t in ids.tolist()])


@pytest.fixture(scope="module")
def sessions(llama):
    """The press list with kept_entries, and the same presses given kvpress's ratio for this prompt."""
    ids = prompt(llama)
    ratio = ratio_keeping(PROMPT_LEN, KEPT)
    kept = KernelSession(llama, ids, KEPT_SPECS, generation(horizon=8))
    ratios = KernelSession(llama, ids, {n: with_ratio(s, ratio) for n, s in KEPT_SPECS.items()}, generation(horizon=8))
    return kept, ratios


def kvpress_cache(loaded, ids, spec):
    """The cache kvpress's own prefill leaves with ``spec``'s press (with the attention and SnapKV window products
    kvdiv's prefill runs)."""
    model = loaded.model
    cache = kvpress_own_prefill(model, build_press(spec), ids)
    for layer in model.model.layers:
        layer.self_attn.masked_key_indices = None
    return cache


@pytest.mark.parametrize("name", list(KEPT_SPECS))
def test_kept_entries_is_kvpress_at_the_per_prompt_ratio(sessions, llama, name):
    kept, ratios = sessions
    ratio = ratio_keeping(PROMPT_LEN, KEPT)
    assert all(torch.equal(a, b) for a, b in zip(kept.kept_indices(name), ratios.kept_indices(name)))
    own = kvpress_cache(llama, kept.prompt_ids, with_ratio(KEPT_SPECS[name], ratio))
    for layer in range(kept.n_layers):
        k_own = own.layers[layer].keys[0]
        assert torch.equal(kept.prompt_cache(name).keys[layer][:, : k_own.shape[1]], k_own)
    chains = [s.new_chain(name) for s in (kept, ratios)]
    for token in (17, 42, 99):
        a, b = kept.step([chains[0]], [token])[0], ratios.step([chains[1]], [token])[0]
        assert torch.equal(a, b)
    kept.release(chains[:1])
    ratios.release(chains[1:])


@pytest.mark.parametrize("name", ["snapkv", "streaming", "knorm", "expected", "tova", "keydiff", "lagkv", "cap"])
def test_a_scorer_press_keeps_exactly_k_entries(sessions, name):
    kept, _ = sessions
    assert kept._kept_lengths[name] == [KEPT] * kept.n_layers


@pytest.mark.parametrize("n", [40, 48, 63])
def test_the_ratio_follows_the_prompt_and_the_entries_compressed(llama, n):
    """K kept of every prompt length; with evict_first_step (n − 1 compressed) and compressed_length (the context) the
    ratio is that of the entries compressed."""
    spec = {"press": "SnapKVPress", "kept_entries": KEPT, "window_size": 8}
    ids = prompt(llama, n, seed=n)
    for settings, options, compressed in (
        ({}, {}, n),
        ({"evict_first_step": True}, {}, n - 1),
        ({}, {"compressed_length": n - 9}, n - 9),
    ):
        s = KernelSession(llama, ids, {"a": spec}, generation(horizon=4, **settings), **options)
        assert s.presses["a"].compression_ratio == ratio_keeping(compressed, KEPT)
        assert s._kept_lengths["a"] == [KEPT] * s.n_layers


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"press": "SnapKVPress", "kept_entries": 8, "compression_ratio": 0.5}, "give exactly one"),
        ({"press": "SnapKVPress", "kept_entries": 0}, "kept_entries must be a positive integer"),
        ({"press": "SnapKVPress", "kept_entries": 8.0}, "kept_entries must be a positive integer"),
        ({"press": "SnapKVPress", "kept_entries": True}, "kept_entries must be a positive integer"),
        (
            {"press": "AdaKVPress", "kept_entries": 8, "wraps": {"press": "SnapKVPress"}},
            "not AdaKVPress: give it to the press it wraps",
        ),
        (
            {"press": "DecodingPress", "target_size": 64, "wraps": {"press": "KnormPress", "kept_entries": 8}},
            "the decoding press overrides",
        ),
        (
            {
                "press": "ComposedPress",
                "presses": [
                    {"press": "KnormPress", "compression_ratio": 0.3},
                    {"press": "KnormPress", "kept_entries": 8},
                ],
            },
            "only its first press",
        ),
        ({"press": "SnapKVPress", "wraps": {"press": "KnormPress", "allow_degenerate": True}}, "unknown argument"),
        ({"press": "AdaKVPress", "wraps": {"press": "KnormPress", "allow_degenerate": True}}, "applies to a whole"),
        ({"press": "KnormPress", "allow_degenerate": "yes"}, "allow_degenerate must be true or false"),
    ],
)
def test_bad_kept_entries(spec, match):
    with pytest.raises(ValueError, match=match):
        validate_action(spec, "a")


def test_kept_entries_needs_the_prompt_length():
    spec = {"press": "KnormPress", "kept_entries": 8}
    with pytest.raises(ValueError, match="the ratio depends on the prompt length"):
        build_press(spec)
    assert build_press(spec, prompt_length=32).compression_ratio == 0.75
    assert build_press({**spec, "allow_degenerate": True}, prompt_length=32).compression_ratio == 0.75
    validate_action(spec)  # at any prompt longer than K
