"""Record recall: list every record of a long register, a task whose answer is long (written for kvdiv).

The context holds ``records`` lines ``The code for <word key> is <number>.`` at increasing depths in filler text;
the question asks for all of them, in order. The answer runs to hundreds of tokens (about 13 per record on
SmolLM2's tokenizer) and each record must be read back from its own place in the context while the answer grows:
the generations where decode-time compression (kvpress's DecodingPress) can cut what is still needed
(config/decoding.yaml). Scored with string-match all: the fraction of the codes the answer holds.
"""

from __future__ import annotations


import numpy as np

from kvdiv.documents import vocabulary
from kvdiv.documents.base import Instance
from kvdiv.documents.needles import scattered_render


def build_record_recall(rng: np.random.Generator, target_length: int, records: int = 24) -> Instance:
    """Draw ``records`` (key, code) records at sorted random depths; the answers are the codes."""
    keys = vocabulary.distinct_word_keys(rng, records)
    codes: list[str] = []
    while len(codes) < records:
        code = vocabulary.number_value(rng, digits=5)
        if code not in codes:
            codes.append(code)
    statements = [f"The code for {key} is {code}." for key, code in zip(keys, codes)]
    instruction = "Memorize every code in the text below; you will be asked to list all of them."
    question = (
        "List every code in the text above, in the order they appear, one per line, as 'the code for <key> is <code>'."
    )
    prefix = "The codes, in order of appearance:\n"

    render = scattered_render(rng, statements, instruction, question)

    return Instance(render=render, answers=codes, answer_prefix=prefix, pads=True)
