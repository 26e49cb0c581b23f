"""JSON key–value retrieval (HELMET-style synthetic recall): find one UUID value under a UUID key.

The haystack is a JSON object of random UUID → UUID pairs; the queried pair sits at a random depth
(after Yen et al., 2024, "HELMET: How to evaluate long-context language models effectively and
thoroughly", and Liu et al., 2023, "Lost in the middle"). Fine length padding is a paragraph of filler
words between the instruction and the JSON data.
"""

from __future__ import annotations

import json

import numpy as np

from kvdiv.documents import vocabulary
from kvdiv.documents.base import Instance, Stream


def build_json_kv(rng: np.random.Generator, target_length: int) -> Instance:
    """Draw the queried pair, its depth and a stream of distractor pairs."""
    key, val = vocabulary.uuid_value(rng), vocabulary.uuid_value(rng)
    depth = float(rng.uniform())
    pair_rng = np.random.default_rng(rng.integers(2**63))
    pairs = Stream(lambda: (vocabulary.uuid_value(pair_rng), vocabulary.uuid_value(pair_rng)))
    instruction = "Extract the value stored under the given key in the JSON object below. Keys and values are UUIDs."

    def render(n: int, pad: int) -> str:
        items = [p for p in pairs.take(n) if p[0] != key]
        items.insert(int(round(depth * len(items))), (key, val))
        data = json.dumps(dict(items), ensure_ascii=False)
        padding = f"{vocabulary.filler_pad(pad)}\n\n" if pad else ""
        return f'{instruction}\n\n{padding}JSON data:\n{data}\n\nKey: "{key}"\nCorresponding value:'

    return Instance(render=render, answers=[val], answer_prefix="", pads=True)
