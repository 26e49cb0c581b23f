"""Variable tracking (RULER-style): follow a chain of assignments ``VAR X = …`` through filler text.

A chain starts with ``VAR QWERT = 48213.`` and continues ``VAR ASDFG = VAR QWERT.`` for a few hops;
a distractor chain starting from another value is interleaved. The question names the value; the
answer is every variable of its chain (after Hsieh et al., 2024, RULER).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from kvdiv.documents import vocabulary
from kvdiv.documents.base import Instance, insert_at_depths, item_count
from kvdiv.documents.needles import _filler_units

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _variable_names(rng: np.random.Generator, n: int) -> list[str]:
    names: list[str] = []
    while len(names) < n:
        name = "".join(_LETTERS[i] for i in rng.integers(len(_LETTERS), size=5))
        if name not in names:
            names.append(name)
    return names


def build_variable_tracking(
    rng: np.random.Generator, target_length: int, hops: int = 4, chains: int = 2, listing: bool = False
) -> Instance:
    """Draw ``chains`` assignment chains of ``hops`` variables each; the first chain is asked (``listing``: as a
    complete numbered list of its assignments in order, the answers in chain order)."""
    names = _variable_names(rng, hops * chains)
    values: list[str] = []
    while len(values) < chains:
        v = vocabulary.number_value(rng, digits=5)
        if v not in values:
            values.append(v)
    statements: list[str] = []
    depths: list[float] = []
    for c in range(chains):
        chain = names[c * hops : (c + 1) * hops]
        # each chain's statements at increasing depths, so every assignment follows the one it copies
        d = np.sort(rng.uniform(0.0, 1.0, size=hops))
        for h, var in enumerate(chain):
            rhs = values[c] if h == 0 else f"VAR {chain[h - 1]}"
            statements.append(f"VAR {var} = {rhs}.")
            depths.append(float(d[h]))
    answers = names[:hops]
    offset = int(rng.integers(len(vocabulary.FILLER_SENTENCES)))
    units = partial(_filler_units, offset=offset)
    instruction = "Memorize every variable assignment in the text below; you will be asked to follow them."
    question = (
        f"Which variables are assigned the value {values[0]}, directly or through other variables, "
        f"in the text above? List all of them."
    )
    prefix = f"The variables that hold the value {values[0]} are:"
    if listing:
        question = (
            f"Follow the chain of variables that starts with the value {values[0]} in the text above: list all "
            f"{hops} of its assignments in order, one numbered line each, as 'VAR NAME = ...'."
        )
        prefix = f"Here are all {hops} assignments of the chain, in order:\n1. VAR"

    def render(n: int, pad: int) -> str:
        text = " ".join(insert_at_depths(units(n), statements, depths))
        if pad:
            text = f"{text} {vocabulary.filler_pad(pad)}"
        return f"{instruction}\n\n{text}\n\n{question}"

    return Instance(render=render, answers=answers, answer_prefix=prefix, pads=True)


#: Tokens of prompt per hop, and the most bytes a hop takes in both chains, for :func:`item_count`.
HOP_SPACING, HOP_BYTES = 80, 48


def build_variable_tracking_list(rng: np.random.Generator, target_length: int) -> Instance:
    """Variable tracking asked as a complete list: chains of :func:`item_count` hops (25 at 2048 tokens)."""
    return build_variable_tracking(
        rng, target_length, hops=item_count(target_length, HOP_SPACING, HOP_BYTES), listing=True
    )
