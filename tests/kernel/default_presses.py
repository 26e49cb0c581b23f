"""The press list shared by the LLM tests (as kvpress shares ``tests/default_presses.py``): adding a press here adds
it to every parametrised test of tests/llm/ (kvpress's own prefill, HF decoding, batched decoding, building and
describing it). Settings suit the tiny test models (48-token prompts).
"""

DEFAULT_PRESSES = {
    "snapkv": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8},
    "streaming": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 2},
    "knorm": {"press": "KnormPress", "compression_ratio": 0.4},
    "expected": {"press": "ExpectedAttentionPress", "compression_ratio": 0.5},
    "tova": {"press": "TOVAPress", "compression_ratio": 0.3},
    "random": {"press": "RandomPress", "compression_ratio": 0.5, "seed": 3},
    "pyramid": {"press": "PyramidKVPress", "compression_ratio": 0.5, "window_size": 8},
    "adakv": {"press": "AdaKVPress", "wraps": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8}},
    "chunkkv": {"press": "ChunkKVPress", "chunk_length": 4, "wraps": {"press": "KnormPress", "compression_ratio": 0.5}},
    "keydiff": {"press": "KeyDiffPress", "compression_ratio": 0.5},
    "lagkv": {"press": "LagKVPress", "compression_ratio": 0.5, "n_sink": 2, "lag_size": 8},
    "criticaladakv": {
        "press": "CriticalAdaKVPress",
        "wraps": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8},
    },
    "cur": {"press": "CURPress", "compression_ratio": 0.5, "num_sinks": 2, "local_window_size": 4},
    "noncausal": {"press": "NonCausalAttnPress", "compression_ratio": 0.5, "chunk_size": 16},
    "cap": {"press": "CapPress", "compression_ratio": 0.5, "n_sink": 2},
    "block": {
        "press": "BlockPress",
        "block_size": 16,
        "wraps": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8},
    },
    "chunk": {"press": "ChunkPress", "chunk_length": 16, "wraps": {"press": "KnormPress", "compression_ratio": 0.5}},
    "entropychunkkv": {
        "press": "EntropyGatedChunkKVPress",
        "chunk_length": 8,
        "low_entropy_chunk_length": 4,
        "wraps": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8},
    },
    "composed": {
        "press": "ComposedPress",
        "presses": [
            {"press": "KnormPress", "compression_ratio": 0.3},
            {"press": "StreamingLLMPress", "compression_ratio": 0.3},
        ],
    },
    "prob": {
        "press": "ProbabilisticPress",
        "compression_ratio": 0.5,
        "design": "pips",
        "proposal": "scorer",
        "scorer": "SnapKVPress",
        "scorer_kwargs": {"window_size": 8},
        "seed": 7,
    },
    "prob_mn": {
        "press": "ProbabilisticPress",
        "compression_ratio": 0.5,
        "proposal": "min_h",
        "budget": "per_head",
        "seed": 7,
    },
    "prob_global": {
        "press": "ProbabilisticPress",
        "compression_ratio": 0.5,
        "proposal": "min",
        "budget": "global",
        "seed": 7,
    },
}
#: An action that evicts nothing: its kernel must equal the reference exactly.
NO_EVICTION = {"press": "SnapKVPress", "compression_ratio": 0.0, "window_size": 8}
