"""Aggregation tasks (RULER-style): common-words and frequent-words extraction.

- Common words: a numbered list in which ten words recur ``c`` times each and every other word
  occurs once; the answer is the ten recurring words.
- Frequent words: a run of coded (pseudo-)words with Zipf-distributed counts; the answer is the three
  most frequent words, each strictly more frequent than every word below it.

The haystack size ``units`` is the number of once-only words (common words) or the nominal number of
words (frequent words); the list order is a seeded shuffle of (instance seed, size).
"""

from __future__ import annotations

import numpy as np

from kvdiv.documents import vocabulary
from kvdiv.documents.base import Instance, Stream, item_count


def new_word_drawer(word_rng: np.random.Generator, seen: set[str]):
    """A function drawing pseudo-words never drawn before nor in ``seen`` (which it extends)."""

    def draw() -> str:
        while True:
            w = vocabulary.pseudo_word(word_rng, 3)
            if w not in seen:
                seen.add(w)
                return w

    return draw


def build_common_words(rng: np.random.Generator, target_length: int, n_common: int = 10) -> Instance:
    """Ten words recur ``c = clip(target_length // 200, 2, 30)`` times; the rest occur once."""
    repeats = int(np.clip(target_length // 200, 2, 30))
    word_rng = np.random.default_rng(rng.integers(2**63))
    common = vocabulary.distinct_pseudo_words(word_rng, n_common)
    rare = Stream(new_word_drawer(word_rng, set(common)))
    shuffle_seed = int(rng.integers(2**63))
    instruction = "Below is a numbered list of words. Some words appear several times."
    question = f"Which {n_common} words appear most often in the list above? List them."
    prefix = f"The {n_common} most common words in the list are:"

    def render(n: int, pad: int) -> str:
        words = common * repeats + rare.take(n)
        order = np.random.default_rng([shuffle_seed, n]).permutation(len(words))
        listing = "\n".join(f"{i + 1}. {words[j]}" for i, j in enumerate(order))
        return f"{instruction}\n\n{listing}\n\n{question}"

    return Instance(render=render, answers=list(common), answer_prefix=prefix, pads=False)


#: Tokens of prompt per recurring word, and the most bytes its (up to 4) list entries take, for :func:`item_count`.
COMMON_SPACING, COMMON_BYTES = 80, 56


def build_common_words_list(rng: np.random.Generator, target_length: int) -> Instance:
    """Common words asked as a complete list: :func:`item_count` words (25 at 2048 tokens) recur 2–4 times each (drawn
    per word), every other word occurs once; the answer lists every recurring word with its count."""
    n_common = item_count(target_length, COMMON_SPACING, COMMON_BYTES)
    word_rng = np.random.default_rng(rng.integers(2**63))
    common = vocabulary.distinct_pseudo_words(word_rng, n_common)
    repeats = [int(c) for c in rng.integers(2, 5, size=n_common)]
    rare = Stream(new_word_drawer(word_rng, set(common)))
    shuffle_seed = int(rng.integers(2**63))
    instruction = "Below is a numbered list of words. Some words appear several times; all others appear once."
    question = (
        f"List every word that appears more than once in the list above, all {n_common} of them, one numbered line "
        f"each saying how many times it appears."
    )
    prefix = f"Here are all {n_common} words that appear more than once, with their counts:\n1. The word"
    recurring = [w for w, c in zip(common, repeats) for _ in range(c)]

    def render(n: int, pad: int) -> str:
        words = recurring + rare.take(n)
        order = np.random.default_rng([shuffle_seed, n]).permutation(len(words))
        listing = "\n".join(f"{i + 1}. {words[j]}" for i, j in enumerate(order))
        return f"{instruction}\n\n{listing}\n\n{question}"

    return Instance(render=render, answers=list(common), answer_prefix=prefix, pads=False)


def frequent_word_counts(n: int, alpha: float = 2.0, top: int = 3) -> np.ndarray:
    """Counts by rank for a nominal ``n`` words: ``max(1, floor(n·w_r))`` with Zipf weights ``w_r ∝ r^-alpha``
    over ``max(top + 1, n // 4)`` ranks, raised so the ``top`` ranks are strictly above everything below."""
    ranks = max(top + 1, n // 4)
    w = np.arange(1, ranks + 1, dtype=float) ** -alpha
    counts = np.maximum(1, np.floor(n * w / w.sum())).astype(int)
    for r in range(top - 1, -1, -1):
        counts[r] = max(counts[r], counts[r + 1] + 1)
    return counts


def build_frequent_words(rng: np.random.Generator, target_length: int, top: int = 3) -> Instance:
    """Coded words with Zipf counts; the ``top`` most frequent are the answer."""
    word_rng = np.random.default_rng(rng.integers(2**63))
    vocab = Stream(new_word_drawer(word_rng, set()))  # distinct words, by rank
    shuffle_seed = int(rng.integers(2**63))
    first = vocab.take(top)
    instruction = "Read the following coded text and keep track of how often each coded word occurs."
    question = f"What are the {top} most frequently appearing coded words in the text above?"
    prefix = f"The {top} most frequent coded words are:"

    def render(n: int, pad: int) -> str:
        counts = frequent_word_counts(n, top=top)
        words = vocab.take(len(counts))
        seq = np.repeat(np.arange(len(counts)), counts)
        seq = seq[np.random.default_rng([shuffle_seed, n]).permutation(len(seq))]
        return f"{instruction}\n\n{' '.join(words[i] for i in seq)}\n\n{question}"

    return Instance(render=render, answers=first, answer_prefix=prefix, pads=False)
