"""Documents: seeded task instances sized to a stratum's target length, and their JSONL files.

A document stores the **untemplated** user message (``prompt``) and the start of the answer (``answer_prefix``); every
model renders them with its own chat template (:mod:`kvdiv.documents.render`). Sizing uses the reference model's
rendering, so ``n_tokens`` counts that rendering. A stratum is (family, target length), named ``{family}_{length}``
(:func:`kvdiv.layout.stratum_name`). Document ``i`` of a stratum cycles through the stratum's tasks in a seeded order
(:func:`task_cycle`) and draws everything from ``derive_seed(master seed, study seed, "documents", stratum, i)``, so the
same seeds give identical bytes and two studies with different seeds get independent document sets. The record format is
fixed by docs/internals.md ("Documents").
"""

from __future__ import annotations

import json
import os
import string
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
from tqdm.auto import tqdm

from kvdiv.documents.length import check_context, count_tokens, fit_length
from kvdiv.documents.registry import family_tasks, get_task
from kvdiv.documents.render import build_prompt
from kvdiv.io import atomic_path, jsonl_records
from kvdiv.layout import document_id, parse_stratum
from kvdiv.names import MAX_COMPOSED_LENGTH, check_name
from kvdiv.seeds import derive_seed

RECORD_KEYS = (
    "id",
    "family",
    "task",
    "stratum",
    "target_length",
    "prompt",
    "answer_prefix",
    "rendered",
    "answers",
    "n_tokens",
    "tokenizer",
    "seed",
)
#: Keys a record may omit, with their defaults (``rendered`` may come from the config: see from_record).
RECORD_DEFAULTS = {"answer_prefix": ""}
#: The type of the other scalar fields of a record (checked when a record is read).
FIELD_TYPES = {
    "id": str,
    "family": str,
    "task": str,
    "stratum": str,
    "target_length": int,
    "n_tokens": int,
    "tokenizer": str,
    "seed": int,
}


@dataclass(frozen=True)
class Document:
    """One prompt of a study (the JSONL record of docs/internals.md).

    ``prompt`` is the untemplated user message, or with ``rendered`` the final text every model is fed
    unchanged; ``answer_prefix`` follows the model's generation prompt (empty when ``rendered``);
    ``n_tokens`` is the length of the reference model's rendering (``tokenizer`` names that model).
    """

    id: str
    family: str
    task: str
    stratum: str
    target_length: int
    prompt: str
    answer_prefix: str = ""
    rendered: bool = False
    answers: list[str] = field(default_factory=list)
    n_tokens: int = 0
    tokenizer: str = ""
    seed: int = 0
    question: str | None = None

    def to_record(self) -> dict:
        """The record as a dict in the documented key order (``question`` only when the document has one)."""
        record = asdict(self)
        if record["question"] is None:
            del record["question"]
        return record

    @classmethod
    def from_record(cls, record: dict, where: str = "record", rendered: bool | None = None) -> "Document":
        """Validate and build a document from a JSONL record (a missing or mistyped key is an error).

        ``rendered``: what the config declares for a user's file (``documents.rendered``); it fills a
        record without the field and must agree with a record that has one.
        """
        record = {**RECORD_DEFAULTS, **record}
        if rendered is not None:
            if "rendered" in record and record["rendered"] is not rendered:
                raise ValueError(
                    f"{where}: record says rendered={record['rendered']!r} but the config declares "
                    f"documents.rendered={rendered!r}"
                )
            record["rendered"] = rendered
        missing = [k for k in RECORD_KEYS if k not in record]
        if missing:
            raise ValueError(f"{where}: document record lacks key(s) {', '.join(missing)}")
        for key, kind in (("prompt", str), ("answer_prefix", str), ("rendered", bool)):
            if not isinstance(record[key], kind):
                raise ValueError(f"{where}: {key!r} must be a {kind.__name__}, got {record[key]!r}")
        if record["rendered"] and record["answer_prefix"]:
            raise ValueError(f"{where}: a rendered prompt cannot carry an answer_prefix (put it in the prompt)")
        if not isinstance(record["answers"], list) or not all(isinstance(a, str) for a in record["answers"]):
            raise ValueError(f"{where}: 'answers' must be a list of strings, got {record['answers']!r}")
        check_answers(record["answers"], where)
        for key, kind in FIELD_TYPES.items():
            value = record[key]
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
                raise ValueError(
                    f"{where}: field {key!r} must be {kind.__name__ if kind is not str else 'a string'}, got {value!r}"
                )
        try:
            check_name(record["id"], "document id", MAX_COMPOSED_LENGTH)  # the id names the document's files
        except ValueError as err:
            raise ValueError(f"{where}: field 'id': {err}") from None
        question = record.get("question")
        if question is not None and (not isinstance(question, str) or not question.strip()):
            raise ValueError(f"{where}: field 'question' must be a non-empty string (or absent), got {question!r}")
        return cls(**{k: record[k] for k in RECORD_KEYS}, question=question)


def check_answers(answers: Sequence[str], where: str) -> None:
    """Gold answers a scorer can use: none empty or made of whitespace and punctuation only (``""`` occurs in every
    text, and SubEM's normalisation drops punctuation: every continuation would score 1.0); the error names
    ``where`` (file and line)."""
    for i, answer in enumerate(answers):
        if not answer.strip(string.whitespace + string.punctuation):
            raise ValueError(
                f"{where}: field 'answers'[{i}] = {answer!r} is empty (or punctuation only): it would match every text"
            )


def document_seed(master_seed: int, study_seed: int, stratum: str, index: int) -> int:
    """Seed of document ``index`` of ``stratum`` in the study with ``study_seed``."""
    return derive_seed(master_seed, study_seed, "documents", stratum, index)


def task_cycle(
    family: str, tasks: Sequence[str] | None, master_seed: int, study_seed: int, stratum: str
) -> tuple[str, ...]:
    """The order in which a stratum's documents cycle through its tasks: a seeded permutation of the
    family's tasks (or of ``tasks``), so every task appears equally often (±1) in any stratum and small
    strata do not always draw the same first tasks."""
    names = family_tasks(family, tasks)
    order = np.random.default_rng(derive_seed(master_seed, study_seed, "tasks", stratum)).permutation(len(names))
    return tuple(names[i] for i in order)


def generate_prompt(
    task: str,
    *,
    seed: int,
    target_length: int,
    tokenizer,
    chat: Callable[[str], str] | None = None,
    max_context: int | None = None,
    model: str = "model",
    horizon: int,
) -> tuple[str, str, list[str], int]:
    """One task instance sized so that its rendering with ``chat`` has ``target_length`` tokens of ``tokenizer``.

    Parameters
    ----------
    task : task name (see :data:`kvdiv.documents.registry.TASKS`)
    seed : instance seed
    target_length : target prompt length in tokens (after the chat template)
    tokenizer : the model's tokenizer (anything with ``encode(text, add_special_tokens=False)``)
    chat : user message -> chat-templated text (None: no template)
    max_context, model, horizon : the model's context, its name for errors, and the horizon H of generated
        tokens it must keep free; ``target_length + horizon > max_context`` is an error

    Returns
    -------
    (message, answer_prefix, answers, n_tokens): the untemplated user message, the answer prefix, the
    answers, and the token count of ``build_prompt(message, answer_prefix, chat)``.
    """
    spec = get_task(task)
    check_context(target_length, max_context, model, horizon)
    inst = spec.build(np.random.default_rng(seed), target_length)

    def render(units: int, pad: int) -> str:
        return build_prompt(inst.render(units, pad), inst.answer_prefix, chat)

    units, pad, _, n_tokens = fit_length(
        render,
        lambda text: count_tokens(tokenizer, text),
        target_length,
        pads=inst.pads,
        max_units=inst.max_units,
        what=f"task {task!r} with the tokenizer of {model!r}",
    )
    return inst.render(units, pad), inst.answer_prefix, list(inst.answers), n_tokens


def generate_stratum(
    *,
    study: str,
    stratum: str,
    n_documents: int,
    master_seed: int,
    study_seed: int,
    tokenizer,
    tokenizer_name: str,
    chat: Callable[[str], str] | None = None,
    tasks: Sequence[str] | None = None,
    max_context: int | None = None,
    horizon: int,
    progress: bool = False,
    first: int = 0,
) -> list[Document]:
    """Documents ``first .. n_documents-1`` of one stratum of one study (ids ``{study}-{stratum}-{i:04d}``)."""
    family, length = parse_stratum(stratum)
    check_context(length, max_context, tokenizer_name, horizon)
    common = dict(
        study=study,
        stratum=stratum,
        master_seed=master_seed,
        study_seed=study_seed,
        tokenizer=tokenizer,
        tokenizer_name=tokenizer_name,
        chat=chat,
        tasks=tasks,
        max_context=max_context,
        horizon=horizon,
    )
    return [
        generate_document(i, **common)
        for i in tqdm(range(first, n_documents), desc=f"{study} {stratum}", disable=not progress)
    ]


def generate_document(
    index: int,
    *,
    study: str,
    stratum: str,
    master_seed: int,
    study_seed: int,
    tokenizer,
    tokenizer_name: str,
    chat: Callable[[str], str] | None = None,
    tasks: Sequence[str] | None = None,
    max_context: int | None = None,
    horizon: int,
) -> Document:
    """Document ``index`` of a stratum (id ``{study}-{stratum}-{index:04d}``): a pure function of the seeds,
    the stratum and the index, independent of how many documents the stratum has."""
    family, length = parse_stratum(stratum)
    seed = document_seed(master_seed, study_seed, stratum, index)
    task = task_cycle(family, tasks, master_seed, study_seed, stratum)
    task = task[index % len(task)]
    message, answer_prefix, answers, n_tokens = generate_prompt(
        task,
        seed=seed,
        target_length=length,
        tokenizer=tokenizer,
        chat=chat,
        max_context=max_context,
        model=tokenizer_name,
        horizon=horizon,
    )
    return Document(
        id=document_id(study, stratum, index),
        family=family,
        task=task,
        stratum=stratum,
        target_length=length,
        prompt=message,
        answer_prefix=answer_prefix,
        rendered=False,
        answers=answers,
        n_tokens=n_tokens,
        tokenizer=tokenizer_name,
        seed=seed,
    )


def dumps_jsonl(docs: Iterable[Document]) -> str:
    """The JSONL text of ``docs`` (one compact record per line, UTF-8, fixed key order)."""
    return "".join(json.dumps(d.to_record(), ensure_ascii=False) + "\n" for d in docs)


def write_jsonl(docs: Iterable[Document], path: str | os.PathLike) -> None:
    """Write ``docs`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(dumps_jsonl(docs), encoding="utf-8")


def read_jsonl_lines(path: str | os.PathLike, rendered: bool | None = None) -> list[tuple[int, Document]]:
    """``(line number, document)`` of every record of a documents JSONL file, validated: errors name the file,
    the line and the field (:func:`kvdiv.io.jsonl_records` for bad bytes or JSON); ``rendered`` as in
    :meth:`Document.from_record`."""
    return [
        (lineno, Document.from_record(record, where=f"{path}:{lineno}", rendered=rendered))
        for lineno, record in jsonl_records(path)
    ]


def read_jsonl(path: str | os.PathLike, rendered: bool | None = None) -> list[Document]:
    """Read and validate a documents JSONL file (ids must be unique); ``rendered`` as in
    :meth:`Document.from_record`."""
    docs = [doc for _, doc in read_jsonl_lines(path, rendered)]
    ids = [d.id for d in docs]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"{path}: duplicate document ids {', '.join(dup[:5])}")
    return docs
