"""kvdiv.kernel.presses.degenerate: a rule per press kind for when an action cannot be itself at a prompt length (a test
per runnable kind, each on both sides of its boundary), and, on a tiny model, what the rules claim: below the boundary
the entries kept are exactly positional ones (kvpress's padding of pinned entries decides them), above it the scores
choose."""

from __future__ import annotations

import pytest
import torch

from kvdiv.kernel.presses.degenerate import degenerate_reason
from kvdiv.kernel.presses.registry import UNRUNNABLE, USER_PRESSES, builtin_press_classes, load_press_modules
from kvdiv.kernel.session import KernelSession
from kvdiv.settings import generation

SNAP8 = {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8}
H = 128

#: (press kind, spec, entries compressed, horizon, strict, what the reason says or None: the action is itself)
CASES = [
    ("SnapKVPress", SNAP8, 30, H, True, r"keeps 15 entries, and 8 are pinned by its observation window of 8: .*only 7"),
    ("SnapKVPress", SNAP8, 32, H, True, None),
    ("SnapKVPress", SNAP8, 20, H, False, None),  # in a job: its scores choose 2 entries
    ("SnapKVPress", SNAP8, 14, H, False, r"keeps 7 entries.*choose none of the kept entries"),
    ("SnapKVPress", SNAP8, 8, H, False, r"observation window of 8 cover all 8 entries"),
    ("SnapKVPress", {"press": "SnapKVPress", "kept_entries": 40, "window_size": 8}, 40, H, True, "evicts nothing"),
    ("SnapKVPress", {"press": "SnapKVPress", "compression_ratio": 0.0}, 100, H, True, "evicts nothing"),
    ("SnapKVPress", {"press": "SnapKVPress", "compression_ratio": 0.0}, 100, H, False, None),  # a library's no-op
    ("PyramidKVPress", {**SNAP8, "press": "PyramidKVPress"}, 30, H, True, "PyramidKVPress keeps 15 entries"),
    ("PyramidKVPress", {**SNAP8, "press": "PyramidKVPress"}, 32, H, True, None),
    ("TOVAPress", {"press": "TOVAPress", "compression_ratio": 0.5}, 2, H, True, "1 are pinned by its last entry"),
    ("TOVAPress", {"press": "TOVAPress", "compression_ratio": 0.5}, 4, H, True, None),
    ("StreamingLLMPress", {"press": "StreamingLLMPress", "compression_ratio": 0.5}, 8, H, True, "n_sink = 4 sinks"),
    ("StreamingLLMPress", {"press": "StreamingLLMPress", "compression_ratio": 0.5}, 10, H, True, None),
    (
        "StreamingLLMPress",
        {"press": "StreamingLLMPress", "compression_ratio": 0.99, "n_sink": 0},
        50,
        H,
        False,
        "no entry",
    ),
    ("ExpectedAttentionPress", {"press": "ExpectedAttentionPress", "compression_ratio": 0.5}, 8, H, True, "n_sink = 4"),
    ("ExpectedAttentionPress", {"press": "ExpectedAttentionPress", "compression_ratio": 0.5}, 10, H, True, None),
    ("CapPress", {"press": "CapPress", "compression_ratio": 0.5}, 8, H, True, "n_sink = 4"),
    ("CapPress", {"press": "CapPress", "compression_ratio": 0.5}, 10, H, True, None),
    ("CURPress", {"press": "CURPress", "compression_ratio": 0.5}, 8, H, True, "num_sinks = 4"),
    ("CURPress", {"press": "CURPress", "compression_ratio": 0.5}, 10, H, True, None),
    (
        "LagKVPress",
        {"press": "LagKVPress", "compression_ratio": 0.2, "n_sink": 2, "lag_size": 8},
        17,
        H,
        False,
        "recency",
    ),
    (
        "LagKVPress",
        {"press": "LagKVPress", "compression_ratio": 0.5, "n_sink": 2, "lag_size": 8},
        48,
        H,
        True,
        "only 8",
    ),
    ("LagKVPress", {"press": "LagKVPress", "compression_ratio": 0.2, "n_sink": 2, "lag_size": 8}, 48, H, True, None),
    ("KnormPress", {"press": "KnormPress", "compression_ratio": 0.99}, 50, H, False, "keeps no entry of 50"),
    ("KnormPress", {"press": "KnormPress", "compression_ratio": 0.5}, 4, H, True, None),
    ("KeyDiffPress", {"press": "KeyDiffPress", "compression_ratio": 0.99}, 50, H, True, "keeps no entry"),
    ("KeyDiffPress", {"press": "KeyDiffPress", "compression_ratio": 0.5}, 4, H, True, None),
    ("RandomPress", {"press": "RandomPress", "compression_ratio": 0.99, "seed": 0}, 50, H, True, "keeps no entry"),
    ("RandomPress", {"press": "RandomPress", "compression_ratio": 0.5, "seed": 0}, 4, H, True, None),
    ("NonCausalAttnPress", {"press": "NonCausalAttnPress", "compression_ratio": 0.99}, 50, H, True, "no entry"),
    ("NonCausalAttnPress", {"press": "NonCausalAttnPress", "compression_ratio": 0.5}, 4, H, True, None),
    ("AdaKVPress", {"press": "AdaKVPress", "wraps": SNAP8}, 30, H, True, "observation window of 8"),
    ("AdaKVPress", {"press": "AdaKVPress", "wraps": SNAP8}, 40, H, True, None),
    ("CriticalAdaKVPress", {"press": "CriticalAdaKVPress", "wraps": SNAP8}, 30, H, True, "observation window of 8"),
    ("CriticalAdaKVPress", {"press": "CriticalAdaKVPress", "wraps": SNAP8}, 40, H, True, None),
    ("ChunkKVPress", {"press": "ChunkKVPress", "wraps": SNAP8}, 30, H, True, "observation window of 8"),
    ("ChunkKVPress", {"press": "ChunkKVPress", "wraps": SNAP8}, 40, H, True, None),
    ("EntropyGatedChunkKVPress", {"press": "EntropyGatedChunkKVPress", "wraps": SNAP8}, 30, H, True, "window of 8"),
    ("EntropyGatedChunkKVPress", {"press": "EntropyGatedChunkKVPress", "wraps": SNAP8}, 40, H, True, None),
    ("BlockPress", {"press": "BlockPress", "block_size": 16, "wraps": SNAP8}, 30, H, True, "observation window of 8"),
    ("BlockPress", {"press": "BlockPress", "block_size": 16, "wraps": SNAP8}, 40, H, True, None),
    ("ChunkPress", {"press": "ChunkPress", "chunk_length": 32, "wraps": SNAP8}, 70, H, True, "chunks of 6 entries"),
    ("ChunkPress", {"press": "ChunkPress", "chunk_length": 32, "wraps": SNAP8}, 64, H, True, None),
    (
        "ComposedPress",
        {
            "press": "ComposedPress",
            "presses": [
                {"press": "KnormPress", "compression_ratio": 0.3},
                {"press": "StreamingLLMPress", "compression_ratio": 0.5},
            ],
        },  # noqa: E501
        12,
        H,
        True,
        r"presses\[1\] at 8 entries: StreamingLLMPress keeps 4 entries",
    ),
    (
        "ComposedPress",
        {
            "press": "ComposedPress",
            "presses": [
                {"press": "KnormPress", "compression_ratio": 0.3},
                {"press": "StreamingLLMPress", "compression_ratio": 0.5},
            ],
        },  # noqa: E501
        40,
        H,
        True,
        None,
    ),
    (
        "DecodingPress",
        {
            "press": "DecodingPress",
            "target_size": 64,
            "compression_interval": 16,
            "wraps": SNAP8 | {"compression_ratio": 0.0},
        },
        100,
        32,
        False,
        None,
    ),
    (
        "DecodingPress",
        {"press": "DecodingPress", "target_size": 116, "compression_interval": 16, "wraps": {"press": "KnormPress"}},
        100,
        32,
        False,
        "never evicts anything",
    ),
    (
        "DecodingPress",
        {"press": "DecodingPress", "target_size": 64, "compression_interval": 40, "wraps": {"press": "KnormPress"}},
        100,
        32,
        False,
        "beyond horizon 32",
    ),
    (
        "DecodingPress",
        {
            "press": "DecodingPress",
            "target_size": 20,
            "compression_interval": 20,
            "wraps": {"press": "SnapKVPress", "window_size": 16},
        },
        100,
        32,
        True,
        "keeps 20 entries, and 16 are pinned",
    ),
    (
        "CompressionRatioDecodingPress",
        {
            "press": "CompressionRatioDecodingPress",
            "target_compression_ratio": 0.0,
            "compression_interval": 16,
            "wraps": {"press": "KnormPress"},
        },
        100,
        32,
        False,
        "target_compression_ratio 0 keeps every entry",
    ),
    (
        "CompressionRatioDecodingPress",
        {
            "press": "CompressionRatioDecodingPress",
            "target_compression_ratio": 0.5,
            "compression_interval": 16,
            "wraps": {"press": "KnormPress"},
        },
        100,
        32,
        True,
        None,
    ),
    (
        "PrefillDecodingPress",
        {"press": "PrefillDecodingPress"},
        100,
        H,
        False,
        "without a prefilling_press or a decoding_press",
    ),
    (
        "PrefillDecodingPress",
        {"press": "PrefillDecodingPress", "prefilling_press": SNAP8},
        30,
        H,
        True,
        "prefilling_press: SnapKVPress keeps 15",
    ),
    (
        "PrefillDecodingPress",
        {
            "press": "PrefillDecodingPress",
            "prefilling_press": SNAP8,
            "decoding_press": {
                "press": "DecodingPress",
                "target_size": 70,
                "compression_interval": 16,
                "wraps": {"press": "KnormPress"},
            },
        },
        100,
        32,
        True,
        "never evicts",
    ),
    (
        "PrefillDecodingPress",
        {
            "press": "PrefillDecodingPress",
            "prefilling_press": SNAP8,
            "decoding_press": {
                "press": "DecodingPress",
                "target_size": 40,
                "compression_interval": 16,
                "wraps": {"press": "KnormPress"},
            },
        },
        100,
        32,
        True,
        None,
    ),
    (
        "ProbabilisticPress",
        {
            "press": "ProbabilisticPress",
            "compression_ratio": 0.5,
            "proposal": "scorer",
            "scorer": "SnapKVPress",
            "scorer_kwargs": {"window_size": 8},
        },
        30,
        H,
        True,
        "observation window of 8",
    ),
    (
        "ProbabilisticPress",
        {
            "press": "ProbabilisticPress",
            "compression_ratio": 0.5,
            "proposal": "scorer",
            "scorer": "SnapKVPress",
            "scorer_kwargs": {"window_size": 8},
        },
        32,
        H,
        True,
        None,
    ),
    ("ProbabilisticPress", {"press": "ProbabilisticPress", "compression_ratio": 0.99}, 50, H, False, "keeps no entry"),
    (
        "ProbabilisticPress",
        {"press": "ProbabilisticPress", "compression_ratio": 0.5, "kept_entries": 10},
        9,
        H,
        False,
        "kept_entries = 10 keeps all 9",
    ),
]


def test_every_runnable_press_kind_has_its_cases():
    runnable = {name for name in builtin_press_classes() if name not in UNRUNNABLE} - {"ScorerPress"}
    assert {kind for kind, *_ in CASES} == runnable
    for kind in runnable:  # each kind on both sides of its boundary
        outcomes = {expected is None for k, _, _, _, _, expected in CASES if k == kind}
        assert outcomes == {True, False}, kind


@pytest.mark.parametrize("kind, spec, n, horizon, strict, expected", CASES)
def test_the_rule_of_each_press_kind(kind, spec, n, horizon, strict, expected):
    if "kept_entries" in spec and "compression_ratio" in spec:
        spec = {k: v for k, v in spec.items() if k != "compression_ratio"}
    reason = degenerate_reason(spec, n, horizon, strict)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None
        assert __import__("re").search(expected, reason), reason


# ---------------------------------------------------------------- what the rules claim, on a model


@pytest.fixture(scope="module")
def llama(tiny_model_factory):
    return tiny_model_factory("llama", initializer_range=0.25)


def kept_sets(llama, spec, n=48):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(10, llama.model.config.vocab_size, (n,), generator=g)
    ids = torch.tensor([t if t not in llama.eos_token_ids else 11 for t in ids.tolist()])
    session = KernelSession(llama, ids, {"a": spec}, generation(horizon=4))
    return [{frozenset(head.tolist()) for head in layer} for layer in session.kept_indices("a")]


@pytest.mark.parametrize(
    "spec, positional",
    [
        ({"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 32}, set(range(24, 48))),
        ({"press": "TOVAPress", "compression_ratio": 47 / 48}, {47}),
        ({"press": "LagKVPress", "compression_ratio": 0.5, "n_sink": 2, "lag_size": 24}, {0, 1, *range(26, 48)}),
    ],
)
def test_below_its_boundary_a_press_keeps_positional_entries(llama, spec, positional):
    """SnapKV keeping 24 of 48 with a window of 32 keeps its last 24 positions in every layer and head (attention
    chooses nothing); TOVA keeping 1 keeps the last; LagKV below n_sink + 2 × lag_size keeps sinks + the most recent."""
    assert degenerate_reason(spec, 48, H, strict=False) is not None
    assert all(heads == {frozenset(positional)} for heads in kept_sets(llama, spec))


def test_streaming_llm_with_n_sink_at_least_kept_keeps_sinks_only(llama):
    spec = {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 30}
    assert degenerate_reason(spec, 48, H, strict=False) is not None
    assert all(kept <= frozenset(range(30)) for layer in kept_sets(llama, spec) for kept in layer)


def test_above_its_boundary_the_scores_choose(llama):
    spec = {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8}
    assert degenerate_reason(spec, 48, H) is None
    chosen = {kept - frozenset(range(40, 48)) for layer in kept_sets(llama, spec) for kept in layer}
    assert frozenset(range(24, 40)) not in chosen and len(chosen) > 1  # not the recency set; heads differ


# ---------------------------------------------------------------- own presses


OWN = """
from dataclasses import dataclass

from kvpress import ScorerPress, SnapKVPress


@dataclass
class JudgedOwnPress(ScorerPress):
    compression_ratio: float = 0.0
    window: int = 8

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        return -keys.norm(dim=-1)

    def degenerate_reason(self, prompt_length):
        kept = int(prompt_length * (1 - self.compression_ratio))
        return f"keeps {kept}, within its window of {self.window}" if kept <= self.window else None


@dataclass
class MySnapKVPress(SnapKVPress):
    pass


@dataclass
class UnjudgedOwnPress(ScorerPress):
    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        return -keys.norm(dim=-1)
"""


def test_own_presses_declare_their_rule_or_inherit_their_kind(tmp_path, monkeypatch):
    monkeypatch.setattr("kvdiv.kernel.presses.registry.USER_PRESSES", dict(USER_PRESSES))
    path = tmp_path / "own.py"
    path.write_text(OWN)
    load_press_modules([path])
    judged = {"press": "JudgedOwnPress", "compression_ratio": 0.5}
    assert degenerate_reason(judged, 16, H) == "keeps 8, within its window of 8"
    assert degenerate_reason(judged, 18, H) is None
    assert "observation window of 8" in degenerate_reason({**SNAP8, "press": "MySnapKVPress"}, 30, H)
    assert degenerate_reason({"press": "UnjudgedOwnPress", "compression_ratio": 0.5}, 30, H) is None
    assert "no entry" in degenerate_reason({"press": "UnjudgedOwnPress", "compression_ratio": 0.99}, 30, H)
