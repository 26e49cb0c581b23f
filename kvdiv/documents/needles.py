"""Needle-in-a-haystack tasks (RULER-style; the multi-key variants also serve HELMET's synthetic recall).

A needle is a sentence ``The secret number for quiet-lantern is: 4821907.`` hidden in a haystack: filler text (the
*noise* haystack) or a stack of distractor needles with other keys (the *needle* haystack). Variants (after Hsieh et
al., 2024, "RULER: What's the real context size of your long-context language models?"): single key; multi-key (the
queried needle among distractor needles with other keys); multi-value (several needles with the same key, all values
asked); multi-query (several needles with distinct keys, all of them asked).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from kvdiv.documents import vocabulary
from kvdiv.documents.base import Instance, Stream, insert_at_depths, item_count

_KIND = {"number": ("number", "numbers"), "uuid": ("UUID", "UUIDs")}
#: Tokens of prompt per listed needle, and the most bytes a number needle takes, for :func:`item_count`.
NEEDLE_SPACING, NEEDLE_BYTES = 80, 56


@dataclass(frozen=True)
class NeedleConfig:
    """Shape of a needle task.

    Attributes
    ----------
    haystack : ``"noise"`` (filler sentences) or ``"needles"`` (distractor needles)
    value_kind : ``"number"`` (7 digits) or ``"uuid"``
    keys : needles with distinct keys placed in the text (the first ``queries`` of them are asked)
    values : needles (values) per queried key
    queries : keys asked
    listing : ask for a complete numbered list of the asked needles in order of appearance (every needle with its key
        when all keys are asked, every value of the key otherwise) instead of a question; the answers are then in
        order of appearance
    """

    haystack: str = "noise"
    value_kind: str = "number"
    keys: int = 1
    values: int = 1
    queries: int = 1
    listing: bool = False


def _join_keys(keys: list[str]) -> str:
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]


def build_needle_task(cfg: NeedleConfig, rng: np.random.Generator, target_length: int) -> Instance:
    """Draw a needle-task instance; haystack units are filler sentences or distractor needles."""
    singular, plural = _KIND[cfg.value_kind]
    keys = vocabulary.distinct_word_keys(rng, cfg.keys)
    needles: list[str] = []
    answers: list[str] = []
    asked_needles: list[int] = []  # indices of the needles whose values are answers
    used_values: set[str] = set()
    for j, key in enumerate(keys):
        for _ in range(cfg.values if j < cfg.queries else 1):
            val = vocabulary.value(rng, cfg.value_kind)
            while val in used_values:
                val = vocabulary.value(rng, cfg.value_kind)
            used_values.add(val)
            needles.append(f"The secret {singular} for {key} is: {val}.")
            if j < cfg.queries:
                answers.append(val)
                asked_needles.append(len(needles) - 1)
    depths = [float(d) for d in rng.uniform(0.0, 1.0, size=len(needles))]
    asked = keys[: cfg.queries]

    max_units = None
    if cfg.haystack == "needles":
        hay_rng = np.random.default_rng(rng.integers(2**63))
        used = set(keys)
        max_units = len(vocabulary.ADJECTIVES) * len(vocabulary.NOUNS) - len(used)

        def draw_distractor() -> str:
            (key,) = vocabulary.distinct_word_keys(hay_rng, 1, exclude=used)
            used.add(key)
            val = vocabulary.value(hay_rng, cfg.value_kind)
            while val in used_values:  # a distractor never repeats an answer
                val = vocabulary.value(hay_rng, cfg.value_kind)
            return f"The secret {singular} for {key} is: {val}."

        stream = Stream(draw_distractor, limit=max_units)
        units = stream.take
    elif cfg.haystack == "noise":
        offset = int(rng.integers(len(vocabulary.FILLER_SENTENCES)))
        units = partial(_filler_units, offset=offset)
    else:
        raise ValueError(f"unknown haystack {cfg.haystack!r}; expected 'noise' or 'needles'")

    many = cfg.values > 1 or cfg.queries > 1
    instruction = (
        f"Some secret {plural} are hidden in the text below. Memorize them: you will be asked about them afterwards."
    )
    if cfg.listing:
        question, prefix = _listing_question(cfg, plural, asked, len(answers))
        by_depth = sorted(range(len(answers)), key=lambda k: depths[asked_needles[k]])
        answers = [answers[k] for k in by_depth]  # in order of appearance
    elif cfg.queries > 1:
        question = f"What are the secret {plural} for {_join_keys(asked)} in the text above?"
        prefix = f"The secret {plural} for {_join_keys(asked)} in the text above are:"
    elif many:
        question = f"What are all the secret {plural} for {asked[0]} in the text above?"
        prefix = f"The secret {plural} for {asked[0]} in the text above are:"
    else:
        question = f"What is the secret {singular} for {asked[0]} in the text above?"
        prefix = f"The secret {singular} for {asked[0]} in the text above is:"

    def render(n: int, pad: int) -> str:
        body = insert_at_depths(units(n), needles, depths)
        text = " ".join(body)
        if pad:
            text = f"{text} {vocabulary.filler_pad(pad)}"
        return f"{instruction}\n\n{text}\n\n{question}"

    return Instance(render=render, answers=answers, answer_prefix=prefix, pads=True, max_units=max_units)


def _listing_question(cfg: NeedleConfig, plural: str, asked: list[str], n: int) -> tuple[str, str]:
    """The question and answer prefix of a listing needle task (``n`` needles asked); every key asked, the prefix opens
    the first line in the needles' own words, so the list runs on in that form (benchmarks/answer_lengths.md)."""
    singular = _KIND[cfg.value_kind][0]
    if cfg.queries > 1:
        if cfg.queries != cfg.keys or cfg.values != 1:
            raise ValueError("a listing needle task asks every key (queries == keys) with one value each")
        return (
            f"List every secret {singular} hidden in the text above with its key, all {n} of them, in the order they "
            f"appear, one numbered line each.",
            f"Here are all {n} secret {plural}, in the order they appear:\n1. The secret {singular} for",
        )
    return (
        f"List all {n} secret {plural} for {asked[0]} in the text above, in the order they appear, one numbered line "
        f"each.",
        f"Here are all {n} secret {plural} for {asked[0]}, in the order they appear:\n1.",
    )


def build_needle_list(cfg: NeedleConfig, rng: np.random.Generator, target_length: int) -> Instance:
    """A listing needle task (``cfg.listing``) whose needle count is :func:`~kvdiv.documents.base.item_count` of the
    target length (25 at 2048 tokens): every key asked when ``cfg.keys > 1``, every value of one key otherwise."""
    n = item_count(target_length, NEEDLE_SPACING, NEEDLE_BYTES)
    if cfg.keys > 1:
        cfg = dataclasses.replace(cfg, keys=n, queries=n, values=1, listing=True)
    else:
        cfg = dataclasses.replace(cfg, keys=1, queries=1, values=n, listing=True)
    return build_needle_task(cfg, rng, target_length)


def _filler_units(n: int, offset: int) -> list[str]:
    k = len(vocabulary.FILLER_SENTENCES)
    return [vocabulary.FILLER_SENTENCES[(offset + i) % k] for i in range(n)]


def scattered_render(
    rng: np.random.Generator, items: list[str], instruction: str, question: str
) -> Callable[[int, int], str]:
    """``render(units, pad)`` of a document whose ``items`` sit at sorted uniform depths of filler text (drawn from
    ``rng``: the depths, then the filler's starting sentence), between ``instruction`` and ``question``."""
    depths = [float(d) for d in np.sort(rng.uniform(0.0, 1.0, size=len(items)))]
    offset = int(rng.integers(len(vocabulary.FILLER_SENTENCES)))

    def render(units: int, pad: int) -> str:
        text = " ".join(insert_at_depths(_filler_units(units, offset), items, depths))
        if pad:
            text = f"{text} {vocabulary.filler_pad(pad)}"
        return f"{instruction}\n\n{text}\n\n{question}"

    return render


NEEDLE_TASKS: dict[str, tuple[NeedleConfig, str]] = {
    "niah_single_noise_number": (NeedleConfig("noise", "number"), "one number needle in filler text"),
    "niah_single_noise_uuid": (NeedleConfig("noise", "uuid"), "one UUID needle in filler text"),
    "niah_multikey_noise_number": (
        NeedleConfig("noise", "number", keys=4),
        "one queried number needle among 3 distractor needles in filler text",
    ),
    "niah_multikey_needle_number": (
        NeedleConfig("needles", "number"),
        "one queried number needle in a haystack of distractor number needles",
    ),
    "niah_multikey_needle_uuid": (
        NeedleConfig("needles", "uuid"),
        "one queried UUID needle in a haystack of distractor UUID needles",
    ),
    "niah_multivalue": (NeedleConfig("noise", "number", values=4), "4 number needles under one key, all asked"),
    "niah_multiquery": (
        NeedleConfig("noise", "number", keys=4, queries=4),
        "4 number needles under distinct keys, all asked",
    ),
}

#: Listing needle tasks (:func:`build_needle_list`): name → (shape, description).
NEEDLE_LIST_TASKS: dict[str, tuple[NeedleConfig, str]] = {
    "niah_multikey_list": (
        NeedleConfig("noise", "number", keys=2, queries=2, listing=True),
        "every keyed number needle in filler text with its key, in order (25 at 2048 tokens)",
    ),
    "niah_multivalue_list": (
        NeedleConfig("noise", "number", values=2, listing=True),
        "every number stored under one key, in order (25 at 2048 tokens)",
    ),
}
