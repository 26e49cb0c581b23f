"""Register listing (HELMET-style long generation, written for kvdiv): list every record of a register with its fields.

``n`` records — ``Register entry 7: owner quiet-lantern, code 48213, shelf C-14.`` — at increasing depths in filler
text (``n`` = :func:`~kvdiv.documents.base.item_count` of the target length: 25 at 2048 tokens, 40 from 3200 on). The
question asks for every record in order with all three fields, one numbered line each: about 20 SmolLM2 tokens a
record (~500 tokens at 2048). The gold answers are the fields in register order (owner, code, shelf of record 1, then
record 2, ...; owners, codes and shelves each distinct), scored with ordered recall (metric ``ordered``): the share of
the fields the answer names, as whole words, in register order — a record listed without its shelf counts two of
its three fields.
"""

from __future__ import annotations


import numpy as np

from kvdiv.documents import vocabulary
from kvdiv.documents.base import Instance, item_count
from kvdiv.documents.needles import scattered_render

#: Tokens of prompt per record, and the most bytes one record takes, for :func:`~kvdiv.documents.base.item_count`.
SPACING, RECORD_BYTES = 80, 72
_SHELF_LETTERS = "ABCDEFGHJKLMNPRSTUVWXYZ"


def draw_records(rng: np.random.Generator, n: int) -> list[tuple[str, str, str]]:
    """``n`` records (owner, code, shelf): distinct word keys, distinct 5-digit codes, distinct shelves ``C-14``."""
    owners = vocabulary.distinct_word_keys(rng, n)
    codes: list[str] = []
    while len(codes) < n:
        code = vocabulary.number_value(rng, digits=5)
        if code not in codes:
            codes.append(code)
    shelves: list[str] = []
    while len(shelves) < n:
        shelf = f"{_SHELF_LETTERS[rng.integers(len(_SHELF_LETTERS))]}-{int(rng.integers(10, 100))}"
        if shelf not in shelves:
            shelves.append(shelf)
    return list(zip(owners, codes, shelves))


def build_register_listing(rng: np.random.Generator, target_length: int) -> Instance:
    """Draw ``n`` records at sorted depths in filler text; the answers are their fields, record by record."""
    n = item_count(target_length, SPACING, RECORD_BYTES)
    records = draw_records(rng, n)
    lines = [f"Register entry {k}: owner {o}, code {c}, shelf {s}." for k, (o, c, s) in enumerate(records, 1)]
    instruction = f"The text below holds the {n} entries of a register. Read them all: you will be asked to list them."
    question = (
        f"List every entry of the register above, from entry 1 to entry {n}, one numbered line per entry with all "
        f"its fields: owner, code and shelf."
    )
    prefix = "Here are all the entries of the register:\nRegister entry 1: owner"

    render = scattered_render(rng, lines, instruction, question)
    answers = [field for record in records for field in record]
    return Instance(render=render, answers=answers, answer_prefix=prefix, pads=True)
