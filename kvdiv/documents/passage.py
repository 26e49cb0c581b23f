"""Passage editing (HELMET-style long generation, written for kvdiv): rewrite a passage in full with given edits.

A letter of ``n`` numbered lines — ``3. Nora carried the amber lantern at the harbor.`` — stands at a random depth in
filler text between the lines ``The letter begins here.`` and ``The letter ends here.`` (``n`` = :func:`item_count` of
the target length: 25 at 2048 tokens). The question asks to rewrite the whole letter with one character renamed and
one place replaced (each occurs); the answer prefix opens the rewritten letter as the letter opens. A full answer runs
to ~14 SmolLM2 tokens a line. The gold answers are the edited sentences, scored with ROUGE-L recall over words (metric
``rouge_l``): a copy that skips the edits misses the renamed words.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from kvdiv.documents import vocabulary
from kvdiv.documents.base import Instance, item_count
from kvdiv.documents.needles import _filler_units
from kvdiv.documents.story import draw_events

#: Tokens of prompt per sentence, and the most bytes one sentence takes, for :func:`~kvdiv.documents.base.item_count`.
SPACING, SENTENCE_BYTES = 80, 60
BEGIN, END = "The letter begins here.", "The letter ends here."


def build_passage_editing(rng: np.random.Generator, target_length: int) -> Instance:
    """Draw a letter of ``n`` sentences (a cast of three, four places) at a random depth, a renamed character and a
    replaced place; the answers are the edited sentences."""
    n = item_count(target_length, SPACING, SENTENCE_BYTES)
    names = [str(name) for name in rng.choice(vocabulary.NAMES, size=4, replace=False)]
    places = [str(place) for place in rng.choice(vocabulary.PLACES, size=5, replace=False)]
    cast, new_name = names[:3], names[3]
    events = draw_events(rng, n, cast)
    events = [(who, verb, obj, places[int(rng.integers(4))]) for who, verb, obj, _ in events]
    # the edits: the first sentence's character and the second's (or the first's) place, so each occurs
    old_name, old_place, new_place = events[0][0], events[min(1, n - 1)][3], places[4]
    sentences = [f"{who} {verb} the {obj} at the {place}." for who, verb, obj, place in events]
    edited = [
        f"{new_name if who == old_name else who} {verb} the {obj} at the {new_place if place == old_place else place}."
        for who, verb, obj, place in events
    ]
    depth = float(rng.uniform())
    units = partial(_filler_units, offset=int(rng.integers(len(vocabulary.FILLER_SENTENCES))))
    instruction = "The text below holds a letter. Read it closely: you will be asked to rewrite it."
    question = (
        f"Rewrite the whole letter above, all {n} sentences in their order, changing only this: write {new_name} "
        f"instead of {old_name} and {new_place} instead of {old_place}."
    )
    prefix = f"Here is the rewritten letter:\n{BEGIN}\n1."
    letter = "\n".join([BEGIN, *(f"{k}. {sentence}" for k, sentence in enumerate(sentences, 1)), END])

    def render(units_n: int, pad: int) -> str:
        body = units(units_n)
        at = int(round(depth * len(body)))
        before, after = " ".join(body[:at]), " ".join(body[at:])
        if pad:
            after = f"{after} {vocabulary.filler_pad(pad)}".lstrip()
        text = "\n".join(part for part in (before, letter, after) if part)
        return f"{instruction}\n\n{text}\n\n{question}"

    return Instance(render=render, answers=edited, answer_prefix=prefix, pads=True)
