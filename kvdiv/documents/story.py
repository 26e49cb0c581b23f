"""Story retelling (HELMET-style long generation, written for kvdiv): retell every event of a story, in order.

A story of ``n`` events — ``On day 3, Nora carried the amber lantern at the harbor.`` — told at increasing depths in
filler narration; ``n`` = :func:`~kvdiv.documents.base.item_count` of the target length (25 at 2048 tokens, 40 from
3200 on). The question asks for every event in order, one numbered line per day: a full answer runs to about 16
SmolLM2 tokens per event (~400 tokens at 2048). The gold answers are the events' objects (``amber lantern``, distinct
within a story) in story order, scored with ordered recall (metric ``ordered``): the share of the events whose object
the answer names, as whole words, in story order.
"""

from __future__ import annotations


import numpy as np

from kvdiv.documents import vocabulary
from kvdiv.documents.base import Instance, item_count
from kvdiv.documents.needles import scattered_render

#: Tokens of prompt per event, and the most bytes one event takes (``On day 40, Viktor measured the tranquil umbrella
#: at the lighthouse.``), for :func:`~kvdiv.documents.base.item_count`.
SPACING, EVENT_BYTES = 80, 72


def draw_events(rng: np.random.Generator, n: int, cast: list[str]) -> list[tuple[str, str, str, str]]:
    """``n`` events ``(name, verb, object, place)``: a name of ``cast``, a verb, a distinct object and a place each."""
    objects = vocabulary.distinct_objects(rng, n)
    return [
        (
            cast[rng.integers(len(cast))],
            vocabulary.VERBS[rng.integers(len(vocabulary.VERBS))],
            obj,
            vocabulary.PLACES[rng.integers(len(vocabulary.PLACES))],
        )
        for obj in objects
    ]


def build_story_retelling(rng: np.random.Generator, target_length: int) -> Instance:
    """Draw a cast of four, ``n`` events at sorted depths in filler narration; the answers are the events' objects."""
    n = item_count(target_length, SPACING, EVENT_BYTES)
    cast = [str(name) for name in rng.choice(vocabulary.NAMES, size=4, replace=False)]
    events = draw_events(rng, n, cast)
    sentences = [
        f"On day {k}, {who} {verb} the {obj} at the {place}." for k, (who, verb, obj, place) in enumerate(events, 1)
    ]
    instruction = f"Read the story below. It tells what {', '.join(cast[:-1])} and {cast[-1]} did on each of {n} days."
    question = (
        f"Retell the story above: list every event in order, one numbered line per day, from day 1 to day {n}, "
        f"saying who did what with which object and where."
    )
    prefix = "Here is every event of the story, day by day:\n1. On day 1,"

    render = scattered_render(rng, sentences, instruction, question)

    return Instance(render=render, answers=[obj for _, _, obj, _ in events], answer_prefix=prefix, pads=True)
