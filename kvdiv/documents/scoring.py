"""Task accuracy of a generated answer: RULER string match (all / part) and HELMET SubEM.

- RULER (Hsieh et al., 2024): ``string_match_all`` = fraction of reference answers that occur in the
  prediction (case-insensitive); ``string_match_part`` = 1 if any reference occurs.
- HELMET (Yen et al., 2024): ``substring_exact_match`` = 1 if some normalised reference occurs in the
  normalised prediction (lower case, punctuation and English articles removed, whitespace collapsed).

Scores are in [0, 1]; reports multiply by 100. :func:`answer_found` says whether a text already holds one gold
answer under the task's matching (the test behind the "first answer span" of :mod:`kvdiv.trajectories.answers`).
"""

from __future__ import annotations

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


METRICS = {"all": string_match_all, "part": string_match_part, "subem": substring_exact_match}


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
    (case-insensitive substring; SubEM: normalised substring)."""
    if not references:
        raise ValueError(f"task {task!r}: answer_found needs at least one reference answer")
    metric = METRICS[task_metric(task)]
    return any(metric(prediction, [r]) > 0 for r in references)
