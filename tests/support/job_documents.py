"""Documents and actions for trajectory-job tests on the tiny random models (tests/trajectories): prompts of a few
hundred bytes, their documents-JSONL records, and actions covering prefill and decode-time eviction."""

from __future__ import annotations

ACTIONS = {
    "snapkv_half": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8},
    "recent_half": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 0},
    "keep_all": {"press": "StreamingLLMPress", "compression_ratio": 0.0, "n_sink": 0},
    # decode-time compression along each chain's own history (a cut at forwards 3 and 6 changes laws 5 and 8)
    "knorm_decoding": {
        "press": "DecodingPress",
        "compression_interval": 3,
        "target_size": 40,
        "wraps": {"press": "KnormPress"},
    },
    "keep_decoding": {  # a decoding press that never cuts (Q ≡ P), deliberately: the invariant's test case
        "press": "DecodingPress",
        "compression_interval": 3,
        "target_size": 10**6,
        "wraps": {"press": "KnormPress"},
        "allow_degenerate": True,
    },
}
PROMPTS = [
    "The key for the blue door is 4812. Remember it. " * 3 + "What is the key for the blue door?",
    "A list of fruit: apple, pear, plum, fig, lime, kiwi. " * 5 + "Name the third fruit.",
    "Short note: call Ana at noon. What time is the call?",
    "The key for the red door is 1234. Remember it. " * 3 + "What is the key for the red door?",
]


def record(d: int, **changes) -> dict:
    """The documents-JSONL record of ``PROMPTS[d]`` (stratum ruler_64), with ``changes`` applied."""
    return {
        "id": f"st-ruler_64-{d:04d}",
        "family": "ruler",
        "task": "niah",
        "stratum": "ruler_64",
        "target_length": 64,
        "prompt": PROMPTS[d],
        "answer_prefix": "Answer:",
        "rendered": False,
        "answers": ["4812"],
        "n_tokens": 0,
        "tokenizer": "tiny",
        "seed": d,
        **changes,
    }
