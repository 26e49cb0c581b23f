"""Task accuracy of a generated answer: RULER string match (all / part), HELMET SubEM, and the recalls of long answers.

- RULER (Hsieh et al., 2024): ``string_match_all`` = fraction of the references found (case-insensitive);
  ``string_match_part`` = 1 if any reference occurs.
- HELMET (Yen et al., 2024): ``substring_exact_match`` = 1 if some normalised reference occurs in the normalised
  prediction (lower case, punctuation and English articles removed, whitespace collapsed).
- Long answers: ``ordered_recall`` (the most reference items named, as whole words, in their order, over the items: an
  item-level LCS recall) and ``rouge_l_recall`` (word LCS with the joined references over their words).

Scores in [0, 1] (docs/usage.md#documents); :func:`answer_found`: does a text hold one gold answer (answer spans).
"""

from __future__ import annotations

import bisect
import re
import string
from typing import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse whitespace (SQuAD-style normalisation)."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def string_match_all(prediction: str, references: Sequence[str]) -> float:
    """Fraction of ``references`` found (case-insensitive substring) in ``prediction``."""
    if not references:
        raise ValueError("string_match_all needs at least one reference answer")
    pred = prediction.lower()
    return sum(r.lower() in pred for r in references) / len(references)


def string_match_part(prediction: str, references: Sequence[str]) -> float:
    """1.0 if any of ``references`` occurs (case-insensitive) in ``prediction``, else 0.0."""
    if not references:
        raise ValueError("string_match_part needs at least one reference answer")
    pred = prediction.lower()
    return float(any(r.lower() in pred for r in references))


def substring_exact_match(prediction: str, references: Sequence[str]) -> float:
    """HELMET SubEM: 1.0 if some normalised reference is a substring of the normalised prediction."""
    if not references:
        raise ValueError("substring_exact_match needs at least one reference answer")
    pred = normalize_answer(prediction)
    return float(any(normalize_answer(r) in pred for r in references))


def _word_positions(text: str, item: str) -> list[int]:
    """Start offsets of ``item`` in ``text`` as whole words (both already normalised)."""
    if not item:
        return []
    padded, needle = f" {text} ", f" {item} "
    out, i = [], padded.find(needle)
    while i >= 0:
        out.append(i)
        i = padded.find(needle, i + 1)
    return out


def ordered_recall(prediction: str, references: Sequence[str]) -> float:
    """Share of ``references`` named in order: the longest run of items i_1 < i_2 < … whose (normalised, whole-word)
    occurrences in the normalised prediction can be picked at increasing positions, over the number of items."""
    if not references:
        raise ValueError("ordered_recall needs at least one reference answer")
    pred = normalize_answer(prediction)
    hits = sorted((pos, -i) for i, ref in enumerate(references) for pos in _word_positions(pred, normalize_answer(ref)))
    # longest strictly increasing subsequence of item indices along the text (patience sorting); at one position
    # the larger index comes first, so two items never chain at the same place
    tails: list[int] = []
    for _, neg in hits:
        k = bisect.bisect_left(tails, -neg)
        tails[k : k + 1] = [-neg]
    return len(tails) / len(references)


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two word lists (O(len(a)·len(b)) time, O(len(b)) memory)."""
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)
    for word in a:
        diag = 0
        for j, other in enumerate(b, 1):
            diag, row[j] = row[j], diag + 1 if word == other else max(row[j], row[j - 1])
    return row[-1]


def rouge_l_recall(prediction: str, references: Sequence[str]) -> float:
    """ROUGE-L recall over normalised words: LCS(prediction, reference) / reference words, the reference being
    ``references`` joined by spaces (in order)."""
    ref = normalize_answer(" ".join(references)).split()
    if not ref:
        raise ValueError("rouge_l_recall needs a non-empty reference")
    return lcs_length(normalize_answer(prediction).split(), ref) / len(ref)


METRICS = {
    "all": string_match_all,
    "part": string_match_part,
    "subem": substring_exact_match,
    "ordered": ordered_recall,
    "rouge_l": rouge_l_recall,
}


def score(task: str, prediction: str, references: Sequence[str]) -> float:
    """Score ``prediction`` with the metric of ``task`` (string-match all for the RULER-style tasks,
    SubEM for JSON key–value retrieval; tasks of loaded real data fall back to string-match all)."""
    return METRICS[task_metric(task)](prediction, references)


def task_metric(task: str) -> str:
    """The metric name (a key of :data:`METRICS`) that scores ``task``: its registry entry's, string-match all for
    tasks kvdiv does not generate (loaded real data)."""
    from kvdiv.documents.registry import TASKS

    return TASKS[task].metric if task in TASKS else "all"


def answer_found(task: str, prediction: str, references: Sequence[str]) -> bool:
    """Whether ``prediction`` holds at least one of ``references`` as ``task``'s metric matches one answer
    (case-insensitive substring; SubEM: normalised substring; ordered recall and ROUGE-L: one whole answer, normalised,
    as whole words — for a rewritten passage one whole sentence)."""
    if not references:
        raise ValueError(f"task {task!r}: answer_found needs at least one reference answer")
    name = task_metric(task)
    if name in ("ordered", "rouge_l"):
        pred = normalize_answer(prediction)
        return any(_word_positions(pred, normalize_answer(r)) for r in references)
    metric = METRICS[name]
    return any(metric(prediction, [r]) > 0 for r in references)
