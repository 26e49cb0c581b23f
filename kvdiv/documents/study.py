"""A study's stratum of documents from the config pieces the ``documents`` rule passes.

Loads the reference tokenizer from the resolved model directory (kvdiv.llm), works out the
model's context and chat template, and generates (source ``synthetic``) or loads (``jsonl``,
``ruler``, ``helmet``) the stratum's documents.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kvdiv.documents.generate import Document, document_seed, generate_stratum, write_jsonl
from kvdiv.documents.render import chat_function

log = logging.getLogger(__name__)

SOURCES = ("synthetic", "jsonl", "ruler", "helmet")


def model_context(model_dir: str | os.PathLike, tokenizer, spec: dict) -> int:
    """The context length a resolved model holds (the spec's ``max_context`` first)."""
    from transformers import AutoConfig

    from kvdiv.llm.loading import max_context

    if spec.get("max_context"):
        return int(spec["max_context"])
    return max_context(AutoConfig.from_pretrained(model_dir, trust_remote_code=False, local_files_only=True), tokenizer, spec)


def stratum_documents(
    *,
    study: str,
    stratum: str,
    n_documents: int,
    master_seed: int,
    study_seed: int,
    model: str,
    model_spec: dict,
    models_dir: str | os.PathLike,
    source: dict | None = None,
    tasks: list[str] | None = None,
    horizon: int = 0,
    progress: bool = True,
    first: int = 0,
) -> list[Document]:
    """Documents ``first .. n_documents-1`` of one stratum, sized with the tokenizer of ``model``
    (resolved under ``models_dir``)."""
    from kvdiv.llm.loading import load_tokenizer, model_dir
    from kvdiv.llm.tokenization import uses_chat_template

    source = dict(source or {"source": "synthetic"})
    kind = source.get("source", "synthetic")
    if kind not in SOURCES:
        raise ValueError(f"study {study!r}: documents.source {kind!r} is not one of {', '.join(SOURCES)}")
    rendered = source.get("rendered")
    if kind == "jsonl" and rendered is None:
        raise ValueError(
            f"study {study!r}: documents.source 'jsonl' needs documents.rendered: true (the records' prompt is the "
            f"final chat-templated text) or false (it is the user message each model renders with its own template)"
        )
    if kind == "synthetic" and rendered:
        raise ValueError(f"study {study!r}: documents.rendered: true does not apply to synthetic documents (always messages)")
    tokenizer = load_tokenizer(model, model_spec, models_dir)
    chat = chat_function(tokenizer, uses_chat_template(tokenizer, model_spec))
    context = model_context(model_dir(model, models_dir), tokenizer, model_spec)
    log.info("study %s stratum %s: %d documents (%s), tokenizer of %r, max_context %d, chat template %s",
             study, stratum, n_documents, kind, model, context, chat is not None)
    common = dict(study=study, stratum=stratum, n_documents=n_documents, tokenizer=tokenizer, tokenizer_name=model)
    if kind == "synthetic":
        return generate_stratum(
            **common, master_seed=master_seed, study_seed=study_seed, chat=chat, tasks=tasks,
            max_context=context, horizon=horizon, progress=progress, first=first,
        )
    from kvdiv.documents import loaders

    if kind == "jsonl":
        if not source.get("path"):
            raise ValueError(f"study {study!r}: documents.source 'jsonl' needs documents.path")
        return loaders.own_documents(
            source["path"], **common, rendered=bool(rendered), chat=chat, max_context=context, horizon=horizon,
        )[first:]
    records = loaders.load_source(source, stratum=stratum)
    return loaders.select_documents(
        records, **common, seed=document_seed(master_seed, study_seed, stratum, 0), chat=chat,
        rendered=bool(rendered), max_context=context, horizon=horizon,
    )[first:]


def document_at(index: int, **kwargs) -> Document:
    """Document ``index`` of a stratum (the arguments of :func:`stratum_documents` but ``n_documents``):
    it does not depend on how many documents the stratum has."""
    kwargs.pop("n_documents", None)
    return stratum_documents(n_documents=index + 1, first=index, **kwargs)[0]


def write_document_block(path: str | os.PathLike, first: int, count: int, **kwargs) -> list[Document]:
    """Documents ``first .. first+count-1`` of a stratum (the arguments of :func:`stratum_documents` but
    ``n_documents``), generated in one process with one tokenizer load and written atomically to ``path``. Each is
    the document :func:`document_at` gives for its index: a block holds the same records however blocks are cut."""
    kwargs.pop("n_documents", None)
    docs = stratum_documents(n_documents=first + count, first=first, **kwargs)
    if len(docs) != count:
        raise ValueError(f"{path}: the source gave {len(docs)} documents for indices {first}..{first + count - 1}")
    write_jsonl(docs, Path(path))
    return docs


def write_stratum(path: str | os.PathLike, **kwargs) -> list[Document]:
    """:func:`stratum_documents`, written atomically to ``path``."""
    docs = stratum_documents(**kwargs)
    write_jsonl(docs, Path(path))
    return docs
