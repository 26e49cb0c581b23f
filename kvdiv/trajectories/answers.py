"""Does divergence change the answer? Every stored continuation scored with its document's own scorer.

Per (document, action, replicate) of a cube: each chain's answer text (decoded ids before its first EOS) scored with
:func:`kvdiv.documents.scoring.score` against the document's gold ``answers`` — ``correct_x``, ``correct_y``,
``answer_changed`` — and ``answer_end``, the step that ends x's first gold-answer span. :mod:`kvdiv.metrics` joins
these onto ``replicates.parquet``. Rule ``answers`` writes ``results/{study}/answers/{model}.parquet``.
Definitions: docs/estimators.md#answers-and-accuracy.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kvdiv.documents.generate import Document, read_jsonl
from kvdiv.documents.scoring import answer_found, score
from kvdiv.io import write_parquet
from kvdiv.layout import MODELS_DIR
from kvdiv.trajectories.store import open_cube, read_attrs

log = logging.getLogger(__name__)

#: The columns this module adds to ``replicates.parquet`` (besides the keys document, action, replicate).
ANSWER_COLUMNS = ("correct_x", "correct_y", "answer_changed", "answer_end")


def eos_step(eos: np.ndarray) -> int | None:
    """The 1-based step of a chain's first EOS from its ``eos_x``/``eos_y`` flags (None: no EOS within H)."""
    eos = np.asarray(eos, dtype=bool)
    return int(np.argmax(eos)) + 1 if eos.any() else None


def answer_text(tokenizer: Any, ids: Sequence[int], eos: np.ndarray) -> str:
    """The chain's answer text: its ids before its first EOS, decoded without special tokens."""
    end = eos_step(eos)
    kept = [int(i) for i in (ids if end is None else ids[: end - 1])]
    return tokenizer.decode(kept, skip_special_tokens=True)


def first_answer_end(
    tokenizer: Any, task: str, ids: Sequence[int], eos: np.ndarray, answers: Sequence[str]
) -> int | None:
    """The end of the first answer span of a chain: the smallest step t whose prefix x_1..x_t (cut at an EOS)
    holds one of ``answers`` (None when the whole answer text holds none)."""
    if not answers or not answer_found(task, answer_text(tokenizer, ids, eos), answers):
        return None
    end = eos_step(eos)
    last = len(ids) if end is None else end - 1
    for t in range(1, last + 1):
        if answer_found(task, tokenizer.decode([int(i) for i in ids[:t]], skip_special_tokens=True), answers):
            return t
    return None  # unreachable: the full prefix holds one


def score_pair(
    tokenizer: Any,
    task: str,
    answers: Sequence[str],
    x: Sequence[int],
    y: Sequence[int],
    eos_x: np.ndarray,
    eos_y: np.ndarray,
) -> dict[str, Any]:
    """The :data:`ANSWER_COLUMNS` of one pair (null scores when the document has no gold answers)."""
    if not answers:
        return {"correct_x": None, "correct_y": None, "answer_changed": None, "answer_end": None}
    cx = score(task, answer_text(tokenizer, x, eos_x), answers)
    cy = score(task, answer_text(tokenizer, y, eos_y), answers)
    return {
        "correct_x": cx,
        "correct_y": cy,
        "answer_changed": cx != cy,
        "answer_end": first_answer_end(tokenizer, task, x, eos_x, answers),
    }


def score_cube(ds: Any, documents: Mapping[str, Document], tokenizer: Any) -> pl.DataFrame:
    """One row per (document, action, replicate) of the cube dataset ``ds`` with the :data:`ANSWER_COLUMNS`.

    ``documents``: document id → its record (the gold answers and task); a cube document without a record is a
    ``KeyError`` naming it.
    """
    doc_ids = [str(d) for d in np.asarray(ds["document"].values).tolist()]
    actions = [str(a) for a in np.asarray(ds["action"].values).tolist()]
    missing = [d for d in doc_ids if d not in documents]
    if missing:
        raise KeyError(
            f"cube document {missing[0]!r} has no record in the documents given "
            f"({len(missing)} of {len(doc_ids)} missing)"
        )
    dims = ("document", "action", "replicate", "step")
    arrays = {n: np.asarray(ds[n].transpose(*dims).values) for n in ("x", "y", "eos_x", "eos_y")}
    n_r = arrays["x"].shape[2]
    rows: list[dict[str, Any]] = []
    for d, doc_id in enumerate(doc_ids):
        doc = documents[doc_id]
        for a, action in enumerate(actions):
            for r in range(n_r):
                scored = score_pair(
                    tokenizer,
                    doc.task,
                    doc.answers,
                    arrays["x"][d, a, r],
                    arrays["y"][d, a, r],
                    arrays["eos_x"][d, a, r],
                    arrays["eos_y"][d, a, r],
                )
                rows.append({"document": doc_id, "action": action, "replicate": r, **scored})
    schema = {
        "document": pl.Utf8,
        "action": pl.Utf8,
        "replicate": pl.Int32,
        "correct_x": pl.Float64,
        "correct_y": pl.Float64,
        "answer_changed": pl.Boolean,
        "answer_end": pl.Int32,
    }
    return pl.DataFrame(rows, schema=schema)


def read_documents(paths: Iterable[str | os.PathLike]) -> dict[str, Document]:
    """Document id → record of the documents JSONL files ``paths`` (a study's ``results/{study}/documents/*.jsonl``)."""
    out: dict[str, Document] = {}
    for path in paths:
        for doc in read_jsonl(path):
            out[doc.id] = doc
    return out


def write_answers(
    cube: str | os.PathLike,
    documents: Iterable[str | os.PathLike],
    out: str | os.PathLike,
    *,
    model: str | None = None,
    spec: Mapping[str, Any] | None = None,
    models_dir: str | os.PathLike = MODELS_DIR,
    tokenizer: Any = None,
) -> Path:
    """Score every continuation of ``cube`` (verified) against the documents JSONL files and write the Parquet
    ``out`` (with its checksum). ``tokenizer`` defaults to that of ``model`` (spec ``spec``; both default to the
    cube's ``model`` and ``model_spec`` attributes), loaded from ``models_dir``."""
    ds = open_cube(cube)
    if tokenizer is None:
        from kvdiv.models.model_files import load_tokenizer

        attrs = read_attrs(cube)
        name = model or str(attrs["model"])
        tokenizer = load_tokenizer(name, dict(spec if spec is not None else attrs.get("model_spec") or {}), models_dir)
    frame = score_cube(ds, read_documents(documents), tokenizer)
    write_parquet(frame, out)
    log.info("wrote %s (%d rows)", out, frame.height)
    return Path(out)
