"""kvdiv.trajectories.answers and the scorer: hand-made continuations (kvdiv's byte tokenizer: id = byte + 3,
EOS = 2) with known scores and known ends of the first answer span, and the metrics' answer columns on a cube with
known tokens."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from kvdiv.documents.generate import Document
from kvdiv.documents.scoring import answer_found, score
from kvdiv.models.tokenization import bytes_tokenizer
from kvdiv.metrics import compute_metrics, join_answers
from kvdiv.trajectories.answers import answer_text, first_answer_end, score_cube, score_pair
from support.synthetic_cube import simulate_cube

EOS = 2


@pytest.fixture(scope="module")
def tok():
    return bytes_tokenizer()


def ids(text: str) -> list[int]:
    return [b + 3 for b in text.encode()]


def padded(text: str, horizon: int, eos_at: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Ids of ``text`` padded to H; with ``eos_at``, EOS at that step and absorbed EOS after it (flags as stored)."""
    seq = ids(text)
    if eos_at is not None:
        seq = seq[: eos_at - 1] + [EOS] * (horizon - eos_at + 1)
    seq = (seq + ids(" " * horizon))[:horizon]
    eos = np.zeros(horizon, dtype=bool)
    if eos_at is not None:
        eos[eos_at - 1 :] = True
    return np.array(seq), eos


def test_answer_found_follows_each_tasks_metric():
    # RULER string match: case-insensitive substring, any one reference
    assert answer_found("niah_multivalue", "the numbers are 12 and 7", ["7", "99"])
    assert not answer_found("niah_multivalue", "the numbers are 12", ["7", "99"])
    assert answer_found("common_words", "APPLE", ["apple"])
    # HELMET SubEM: normalised (punctuation and articles removed)
    assert answer_found("json_kv", "The value: a-b.", ["ab"])
    assert not answer_found("niah_multivalue", "The value: a-b.", ["ab"])
    assert score("niah_multivalue", "7 then 12", ["7", "12", "5", "9"]) == 0.5  # string-match all: a fraction
    # ordered recall: one whole item, normalised, as whole words
    assert answer_found("story_retelling", "On day 1, Nora found the Amber Lantern.", ["amber lantern", "red cup"])
    assert not answer_found("story_retelling", "the amber lanterns", ["amber lantern"])
    assert answer_found("register_listing", "shelf C-14", ["quiet-fox", "48213", "C-14"])
    # ROUGE-L (a rewritten passage): one whole sentence, not a shared word
    sentences = ["Nora found the red cup at the mill.", "Ivo lost the old hat at the pier."]
    assert answer_found("passage_editing", "1. Ivo lost the old hat at the pier", sentences)
    assert not answer_found("passage_editing", "Ivo lost the old hat", sentences)


def test_answer_text_stops_at_the_first_eos(tok):
    x, eos = padded("42 is it", 12, eos_at=3)
    assert answer_text(tok, x, eos) == "42"
    y, eos_y = padded("42 is it", 12)
    assert answer_text(tok, y, eos_y) == "42 is it    "


def test_first_answer_end_is_the_step_completing_the_first_gold_answer(tok):
    x, eos = padded("value 8317 and 99", 20)
    # "8317" occupies steps 7..10; "99" ends at 17: the first complete answer ends at step 10
    assert first_answer_end(tok, "niah_multivalue", x, eos, ["99", "8317"]) == 10
    assert first_answer_end(tok, "niah_multivalue", x, eos, ["5"]) is None
    # an answer after the EOS does not count
    x2, eos2 = padded("value 8317", 12, eos_at=8)
    assert first_answer_end(tok, "niah_multivalue", x2, eos2, ["8317"]) is None
    # SubEM: "A-B" normalises to "ab", complete at the B (step 3)
    x3, eos3 = padded("A-B!", 6)
    assert first_answer_end(tok, "json_kv", x3, eos3, ["ab"]) == 3


def test_score_pair(tok):
    x, eos_x = padded("it is 8317", 12)
    y, eos_y = padded("it is 8312", 12)
    got = score_pair(tok, "niah_multivalue", ["8317"], x, y, eos_x, eos_y)
    assert got == {"correct_x": 1.0, "correct_y": 0.0, "answer_changed": True, "answer_end": 10}
    same = score_pair(tok, "niah_multivalue", ["8317"], x, x, eos_x, eos_x)
    assert same["answer_changed"] is False and same["correct_y"] == 1.0
    assert score_pair(tok, "niah_multivalue", [], x, y, eos_x, eos_y)["correct_x"] is None


def known_cube():
    """Two documents, one action, three replicates, H = 12, with written tokens:

    doc 0 (answer 8317): r0 y = x (no divergence); r1 y changes the 7 (τ = 10 = answer_end: early, y wrong);
    r2 diverges after the answer (τ = 12 > 10: late, y right).
    doc 1 (answers 55, 66; string-match all): x holds 55 only (0.5, answer_end 2); r0 y diverges at step 1 with no
    answer (0.0); r1 y holds both (τ = 8, late, 1.0); r2: x = y, both end (EOS at 4) after '55 ' (0.5 each).
    """
    H = 12
    ds = simulate_cube({"act": 0.0}, n_documents=2, replicates=3, horizon=H, seed=0)
    x = np.zeros((2, 1, 3, H), dtype=np.int32)
    y = np.zeros_like(x)
    ex = np.zeros(x.shape, dtype=bool)
    ey = np.zeros_like(ex)
    rows = {
        (0, 0): (("it is 8317  ", None), ("it is 8317  ", None)),
        (0, 1): (("it is 8317  ", None), ("it is 8310  ", None)),
        (0, 2): (("it is 8317 a", None), ("it is 8317 b", None)),
        (1, 0): (("55 and more!", None), ("no idea.....", None)),
        (1, 1): (("55 and 11...", None), ("55 and 66...", None)),
        (1, 2): (("55 and 66...", 4), ("55 and 66...", 4)),
    }
    for (d, r), ((tx, ax), (ty, ay)) in rows.items():
        x[d, 0, r], ex[d, 0, r] = padded(tx, H, ax)
        y[d, 0, r], ey[d, 0, r] = padded(ty, H, ay)
    ds["x"].values[:] = x
    ds["y"].values[:] = y
    ds["eos_x"].values[:] = ex
    ds["eos_y"].values[:] = ey
    ds["match"].values[:] = x == y
    docs = [str(d) for d in ds["document"].values]
    tasks = {docs[0]: ("niah_multivalue", ["8317"]), docs[1]: ("niah_multivalue", ["55", "66"])}
    records = {
        doc: Document(
            id=doc, family="ruler", task=task, stratum="ruler_256", target_length=256, prompt="p", answers=answers
        )
        for doc, (task, answers) in tasks.items()
    }
    return ds, records


def test_metrics_answer_columns_on_a_cube_with_known_tokens(tok):
    ds, records = known_cube()
    answers = score_cube(ds, records, tok)
    order = {str(d): i for i, d in enumerate(ds["document"].values)}
    rep = compute_metrics(ds, window=2, answers=answers)["replicates"]
    rep = rep.with_columns(pl.col("document").replace_strict(order).alias("i")).sort("i", "replicate")
    got = rep.select("tau", "correct_x", "correct_y", "answer_changed", "answer_end", "diverged_before_answer").rows()
    assert got == [
        (None, 1.0, 1.0, False, 10, False),
        (10, 1.0, 0.0, True, 10, True),
        (12, 1.0, 1.0, False, 10, False),
        (1, 0.5, 0.0, True, 2, True),
        (8, 0.5, 1.0, True, 2, False),
        (None, 0.5, 0.5, False, 2, False),
    ]


def test_answers_of_another_cube_are_refused(tok):
    ds, records = known_cube()
    answers = score_cube(ds, records, tok)
    rep = compute_metrics(ds, window=2)["replicates"]
    with pytest.raises(ValueError, match="replicate 2"):
        join_answers(rep, answers.filter(pl.col("replicate") < 2))
    with pytest.raises(ValueError, match="more than one row"):
        join_answers(rep, pl.concat([answers, answers.head(1)]))
    with pytest.raises(KeyError, match="has no record"):
        score_cube(ds, {k: v for k, v in list(records.items())[:1]}, tok)
