"""A study's stratum of documents from a :class:`kvdiv.config.DocumentRequest` (what the ``document`` rule passes).

Loads the reference tokenizer from the resolved model directory (kvdiv.models), works out the
model's context and chat template, and generates (source ``synthetic``) or loads (``jsonl``,
``ruler``, ``helmet``) the stratum's documents.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kvdiv.settings import DocumentRequest
from kvdiv.documents.generate import Document, document_seed, generate_stratum, write_jsonl
from kvdiv.documents.render import chat_function

log = logging.getLogger(__name__)

SOURCES = ("synthetic", "jsonl", "ruler", "helmet")


def model_context(model_dir: str | os.PathLike, tokenizer, spec: dict) -> int:
    """The context length a resolved model holds (the spec's ``max_context`` first)."""
    from transformers import AutoConfig

    from kvdiv.models.model_files import max_context

    if spec.get("max_context"):
        return int(spec["max_context"])
    return max_context(
        AutoConfig.from_pretrained(model_dir, trust_remote_code=False, local_files_only=True), tokenizer, spec
    )


def stratum_documents(
    request: DocumentRequest, models_dir: str | os.PathLike, *, progress: bool = True
) -> list[Document]:
    """Documents ``request.first .. request.first + request.count - 1`` of one stratum, sized with the tokenizer
    of ``request.model`` (resolved under ``models_dir``); document i does not depend on how many are asked for."""
    from kvdiv.models.model_files import load_tokenizer, model_dir
    from kvdiv.models.tokenization import uses_chat_template

    study, stratum, first, horizon = request.study, request.stratum, request.first, request.horizon
    n_documents, master_seed, study_seed = request.first + request.count, request.master_seed, request.study_seed
    model, model_spec = request.model, dict(request.model_spec)
    tasks = list(request.tasks) if request.tasks else None
    source = dict(request.source or {"source": "synthetic"})
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
        raise ValueError(
            f"study {study!r}: documents.rendered: true does not apply to synthetic documents (always messages)"
        )
    tokenizer = load_tokenizer(model, model_spec, models_dir)
    chat = chat_function(tokenizer, uses_chat_template(tokenizer, model_spec))
    context = model_context(model_dir(model, models_dir), tokenizer, model_spec)
    log.info(
        "study %s stratum %s: %d documents (%s), tokenizer of %r, max_context %d, chat template %s",
        study,
        stratum,
        n_documents,
        kind,
        model,
        context,
        chat is not None,
    )
    common = dict(study=study, stratum=stratum, n_documents=n_documents, tokenizer=tokenizer, tokenizer_name=model)
    if kind == "synthetic":
        return generate_stratum(
            **common,
            master_seed=master_seed,
            study_seed=study_seed,
            chat=chat,
            tasks=tasks,
            max_context=context,
            horizon=horizon,
            progress=progress,
            first=first,
        )
    from kvdiv.documents import loaders

    if kind == "jsonl":
        if not source.get("path"):
            raise ValueError(f"study {study!r}: documents.source 'jsonl' needs documents.path")
        return loaders.own_documents(
            source["path"],
            **common,
            rendered=bool(rendered),
            chat=chat,
            max_context=context,
            horizon=horizon,
        )[first:]
    records = loaders.load_source(source, stratum=stratum)
    return loaders.select_documents(
        records,
        **common,
        seed=document_seed(master_seed, study_seed, stratum, 0),
        chat=chat,
        rendered=bool(rendered),
        max_context=context,
        horizon=horizon,
    )[first:]


def document_at(request: DocumentRequest, index: int, models_dir: str | os.PathLike) -> Document:
    """Document ``index`` of ``request``'s stratum: it does not depend on how many documents the stratum has."""
    return stratum_documents(request.replace(first=index, count=1), models_dir, progress=False)[0]


def write_document_block(
    path: str | os.PathLike, request: DocumentRequest, models_dir: str | os.PathLike, *, progress: bool = True
) -> list[Document]:
    """The documents of ``request``, generated in one process with one tokenizer load and written atomically to
    ``path``. Each is the document :func:`document_at` gives for its index: a block holds the same records however
    blocks are cut."""
    docs = stratum_documents(request, models_dir, progress=progress)
    if len(docs) != request.count:
        raise ValueError(
            f"{path}: the source gave {len(docs)} documents for indices "
            f"{request.first}..{request.first + request.count - 1}"
        )
    write_jsonl(docs, Path(path))
    return docs
