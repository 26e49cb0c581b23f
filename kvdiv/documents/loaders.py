"""Optional loaders for real documents: your own JSONL, RULER's generated files, HELMET's data.

Never used by the tests and never reached without a study asking for them (``documents.source`` ``jsonl``,
``ruler`` or ``helmet``); an unavailable source is a clear error, never a silent fallback to synthetic data. Each
loader yields plain records ``{"task", "text", "answers"}``; :func:`select_documents` renders them as the reference
model would, counts tokens with its tokenizer, keeps those within the target length and picks the longest ones (ties
broken by a seeded shuffle). Documents keep the message (:mod:`kvdiv.documents.render`).
Config: docs/usage.md#documents.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from kvdiv.documents.generate import Document, check_answers
from kvdiv.documents.length import check_context, count_tokens
from kvdiv.documents.render import render_with
from kvdiv.io import jsonl_records
from kvdiv.models.chat_templates import MAX_CHARS
from kvdiv.layout import document_id, parse_stratum, stratum_name

TEXT_FIELDS = ("input", "prompt", "context", "text")
#: Fewest tokens a document's rendered prompt may have (a trajectory prefills all but the last, then feeds it).
MIN_PROMPT_TOKENS = 2
#: Most characters a document's prompt may have: what one chat-template rendering may produce.
MAX_PROMPT_CHARS = MAX_CHARS
ANSWER_FIELDS = ("outputs", "answers", "answer", "output")


def _first(record: dict, names: tuple[str, ...], what: str, where: str):
    for name in names:
        if name in record:
            return record[name]
    raise ValueError(f"{where}: record has no {what} field (looked for {', '.join(names)}; has {', '.join(record)})")


def _as_answers(value, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and value and all(isinstance(v, (str, int)) for v in value):
        answers = [str(v) for v in value]
        check_answers(answers, where)
        return answers
    raise ValueError(f"{where}: answers must be a string or a non-empty list of strings, got {value!r}")


def normalise_record(record: dict, task: str, where: str) -> dict:
    """``{"task", "text", "answers"}`` from a RULER-style (``input``/``outputs``) or HELMET-style
    (``context`` + ``question`` / ``answer``) record."""
    text = _first(record, TEXT_FIELDS, "text", where)
    question = None
    if "question" in record and "input" not in record:
        question = str(record["question"])
        text = f"{text}\n\n{question}"
    answers = _as_answers(_first(record, ANSWER_FIELDS, "answer", where), where)
    return {"task": str(record.get("task", task)), "text": str(text), "answers": answers, "question": question}


def read_records(path: str | os.PathLike, task: str) -> Iterator[dict]:
    """Records of a JSONL file (RULER writes ``{"index", "input", "outputs", "length"}`` per line)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"document source file {path} is a directory; name a JSONL file in it")
    if not path.is_file():
        raise FileNotFoundError(f"document source file {path} does not exist")
    for lineno, record in jsonl_records(path):  # bad bytes or JSON: an error naming the file and line
        yield normalise_record(record, task, f"{path}:{lineno}")


def dataset_records(dataset: str, task: str, *, name: str | None = None, split: str = "test") -> Iterator[dict]:
    """Records of a Hugging Face dataset (``datasets.load_dataset(dataset, name, split=split)``)."""
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - datasets is a dependency of this environment
        raise RuntimeError("loading real documents needs the `datasets` package (pip install datasets)") from err
    try:
        ds = datasets.load_dataset(dataset, name, split=split)
    except Exception as err:  # network, missing config, ...
        raise RuntimeError(
            f"could not load dataset {dataset!r} (config {name!r}, split {split!r}): {err}. Real RULER/HELMET data "
            f"need network access or a local copy; set documents.path to a JSONL file instead, or use "
            f"documents.source: synthetic"
        ) from err
    for i, record in enumerate(ds):
        yield normalise_record(dict(record), task, f"{dataset}[{i}]")


def select_documents(
    records: list[dict],
    *,
    study: str,
    stratum: str,
    n_documents: int,
    seed: int,
    tokenizer,
    tokenizer_name: str,
    chat: Callable[[str], str] | None,
    rendered: bool = False,
    max_context: int | None = None,
    horizon: int,
) -> list[Document]:
    """The ``n_documents`` longest records that fit the stratum's target length (after the reference
    model's rendering with ``chat``, or as they are when ``rendered``)."""
    family, length = parse_stratum(stratum)
    check_context(length, max_context, tokenizer_name, horizon)
    rng = np.random.default_rng(seed)
    scored = []
    for rec, tie in zip(records, rng.permutation(len(records))):
        n = count_tokens(tokenizer, render_with({"prompt": rec["text"], "rendered": rendered}, chat))
        if MIN_PROMPT_TOKENS <= n <= length:  # a record that renders to nothing cannot be a prompt
            scored.append((length - n, int(tie), rec, rec["text"], n))
    if len(scored) < n_documents:
        raise ValueError(
            f"stratum {stratum!r}: only {len(scored)} of {len(records)} loaded records fit in {length} tokens of "
            f"{tokenizer_name!r}; {n_documents} are needed"
        )
    scored.sort(key=lambda s: (s[0], s[1]))
    return [
        Document(
            id=document_id(study, stratum, i),
            family=family,
            task=rec["task"],
            stratum=stratum,
            target_length=length,
            prompt=prompt,
            rendered=rendered,
            answers=rec["answers"],
            n_tokens=n,
            tokenizer=tokenizer_name,
            seed=seed,
            question=rec.get("question") or None,
        )
        for i, (_, _, rec, prompt, n) in enumerate(scored[:n_documents])
    ]


#: Fields of a record of the user's own documents (source jsonl) that kvdiv derives when a record omits them: the
#: stratum (from ``family`` and ``target_length``), the token count and tokenizer (recounted with the reference
#: model anyway) and the id (renamed ``{study}-{stratum}-{i:04d}`` anyway). The others are required.
DERIVED_FIELDS = ("id", "stratum", "n_tokens", "tokenizer")
#: Fields every record of the user's own documents must have (``rendered`` may come from the config).
OWN_REQUIRED = ("family", "task", "target_length", "seed", "prompt", "answers")


def own_record(record: dict, where: str, rendered: bool | None = None) -> Document:
    """A record of the user's own JSONL as a document, the :data:`DERIVED_FIELDS` it omits filled in; a given
    ``stratum`` must agree with its family and target length. Errors name ``where`` (file:line) and the field."""
    record = dict(record)
    missing = [key for key in OWN_REQUIRED if key not in record]
    if missing:
        raise ValueError(
            f"{where}: document record lacks field(s) {', '.join(missing)} (required: {', '.join(OWN_REQUIRED)})"
        )
    family, length = record["family"], record["target_length"]
    if not isinstance(family, str):
        raise ValueError(f"{where}: field 'family' must be a string, got {family!r}")
    if not isinstance(length, int) or isinstance(length, bool):
        raise ValueError(f"{where}: field 'target_length' must be int, got {length!r}")
    record.setdefault("stratum", stratum_name(family, length))
    record.setdefault("id", f"line-{where.rpartition(':')[2] or 0}")
    record.setdefault("n_tokens", 0)
    record.setdefault("tokenizer", "")
    doc = Document.from_record(record, where=where, rendered=rendered)
    check_own_stratum(doc, where)
    if not doc.prompt.strip():
        raise ValueError(f"{where}: field 'prompt' is empty")
    if len(doc.prompt) > MAX_PROMPT_CHARS:
        raise ValueError(
            f"{where}: field 'prompt' has {len(doc.prompt)} characters, more than the {MAX_PROMPT_CHARS} a prompt may "
            "have (a rendering's budget, kvdiv.models.chat_templates.MAX_CHARS)"
        )
    return doc


def check_own_stratum(doc: Document, where: str) -> None:
    """A record's ``family`` and ``target_length`` agree with its ``stratum`` (an error naming the field)."""
    try:
        family, length = parse_stratum(doc.stratum)
    except ValueError as err:
        raise ValueError(f"{where}: field 'stratum': {err}") from None
    if doc.family != family:
        raise ValueError(
            f"{where}: field 'family' is {doc.family!r}, but stratum {doc.stratum!r} is of family {family!r}"
        )
    if doc.target_length != length:
        raise ValueError(
            f"{where}: field 'target_length' is {doc.target_length}, but stratum {doc.stratum!r} has length {length}"
        )


def read_own_documents(path: str | os.PathLike, rendered: bool | None = None) -> list[tuple[int, Document]]:
    """``(line number, document)`` of every record of a user's documents JSONL (:func:`own_record`)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"documents file {path} is a directory, not a JSONL file")
    if not path.is_file():
        raise FileNotFoundError(f"documents file {path} does not exist")
    return [(lineno, own_record(record, f"{path}:{lineno}", rendered)) for lineno, record in jsonl_records(path)]


def check_own_documents(path: str | os.PathLike, *, strata: list[str], n_documents: int, rendered: bool) -> None:
    """What the workflow checks of a user's JSONL when it starts: every record complete and well typed
    (:func:`own_record`), and each stratum with at least ``n_documents`` records (token counts need the reference
    model and are checked by the document jobs)."""
    counts: dict[str, int] = {}
    for _, doc in read_own_documents(path, rendered=rendered):
        counts[doc.stratum] = counts.get(doc.stratum, 0) + 1
    for stratum in strata:
        if counts.get(stratum, 0) < n_documents:
            raise ValueError(
                f"{path}: stratum {stratum!r} has {counts.get(stratum, 0)} documents; documents_per_stratum = "
                f"{n_documents} are needed (strata in the file: {', '.join(sorted(counts)) or 'none'})"
            )


def own_documents(
    path: str | os.PathLike,
    *,
    study: str,
    stratum: str,
    n_documents: int,
    tokenizer,
    tokenizer_name: str,
    rendered: bool,
    chat: Callable[[str], str] | None = None,
    max_context: int | None = None,
    horizon: int,
) -> list[Document]:
    """The first ``n_documents`` of a user's JSONL in kvdiv's own format whose ``stratum`` matches,
    re-counted with the reference model's rendering and renamed ``{study}-{stratum}-{i:04d}``.

    ``rendered`` is the config's declaration (``documents.rendered``): whether each record's ``prompt`` is
    final text or a user message (see :meth:`Document.from_record`). Each record must agree with its stratum
    (``family`` and ``target_length``) and fit it (at most ``target_length`` tokens of the reference model's
    rendering); an error names the file, the line and the field."""
    _, length = parse_stratum(stratum)
    check_context(length, max_context, tokenizer_name, horizon)
    docs = [(lineno, d) for lineno, d in read_own_documents(path, rendered=rendered) if d.stratum == stratum]
    if len(docs) < n_documents:
        raise ValueError(f"{path}: stratum {stratum!r} has {len(docs)} documents; {n_documents} are needed")
    out = []
    for i, (lineno, d) in enumerate(docs[:n_documents]):
        where = f"{path}:{lineno}"
        n = count_tokens(tokenizer, render_with(d.to_record(), chat))
        if n < MIN_PROMPT_TOKENS:
            raise ValueError(
                f"{where}: field 'prompt' renders to {n} token(s) of {tokenizer_name!r}; a prompt needs at least "
                f"{MIN_PROMPT_TOKENS}"
            )
        if n > length:
            raise ValueError(
                f"{where}: field 'prompt' has {n} tokens of {tokenizer_name!r} (rendered), more than the stratum's "
                f"target_length {length}"
            )
        if max_context is not None and n + horizon > max_context:
            raise ValueError(f"{where}: document {d.id!r} has {n} tokens; model {tokenizer_name!r} holds {max_context}")
        out.append(
            Document(
                id=document_id(study, stratum, i),
                family=d.family,
                task=d.task,
                stratum=stratum,
                target_length=length,
                prompt=d.prompt,
                answer_prefix=d.answer_prefix,
                rendered=d.rendered,
                answers=d.answers,
                n_tokens=n,
                tokenizer=tokenizer_name,
                seed=d.seed,
                question=d.question,
            )
        )
    return out


def source_file(source: dict, *, stratum: str) -> Path | None:
    """The local file a ``documents`` config section reads for ``stratum`` (``path``, with ``{stratum}``,
    ``{family}`` and ``{length}`` filled for sources ``ruler``/``helmet``), or None (synthetic, a dataset id).

    The ``document`` rule takes it as an input, so editing the file reruns the documents built from it.
    """
    kind = source.get("source", "synthetic")
    if kind not in ("jsonl", "ruler", "helmet") or not source.get("path"):
        return None
    if kind == "jsonl":
        return Path(source["path"])
    family, length = parse_stratum(stratum)
    return Path(str(source["path"]).format(stratum=stratum, family=family, length=length))


def load_source(source: dict, *, stratum: str) -> list[dict]:
    """Records for ``stratum`` from a ``documents`` config section (source ``ruler`` or ``helmet``).

    ``path`` (a JSONL file; ``{stratum}``, ``{family}`` and ``{length}`` are substituted) or ``dataset``
    (a ``datasets`` id, with ``dataset_config`` / ``split``; the same substitutions apply) names the data.
    """
    family, length = parse_stratum(stratum)
    kind = source.get("source")
    if kind not in ("ruler", "helmet"):
        raise ValueError(f"load_source handles documents.source 'ruler' or 'helmet', got {kind!r}")
    fill = dict(stratum=stratum, family=family, length=length)
    task = source.get("task", kind)
    if source.get("path"):
        return list(read_records(source_file(source, stratum=stratum), task))
    if source.get("dataset"):
        name = source.get("dataset_config")
        return list(
            dataset_records(
                str(source["dataset"]).format(**fill),
                task,
                name=None if name is None else str(name).format(**fill),
                split=source.get("split", "test"),
            )
        )
    raise ValueError(
        f"documents.source {kind!r} needs documents.path (a JSONL file) or documents.dataset (a datasets id)"
    )
