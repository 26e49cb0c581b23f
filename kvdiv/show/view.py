"""One pair of continuations as a structured view, and the store reading behind ``kvdiv show``.

A pair is the x (full cache) and y (evicted) chains of one (document, action, replicate) of a trajectory store, each
decoded token by token with the store's model tokenizer; τ = the first t with x_t ≠ y_t (None when they agree for
all H steps), EOS absorbing, and in swrb mode J the branch start (the overlap path before it). :func:`pair_view`
is pure (arrays + tokenizer → :class:`PairView`); :func:`load_pair` reads a verified store (per-document or cube),
loads the tokenizer of the store's model and builds the view. What the view shows: docs/outputs.md#kvdiv-show.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kvdiv.layout import MODELS_DIR

#: Where resolved models live unless the caller says otherwise (``results/models/{model}``).
DEFAULT_MODELS_DIR = MODELS_DIR
#: Document metadata shown above a pair, in this order (per-document stores: the ``document`` attribute;
#: cubes: the document coordinates).
DOCUMENT_FIELDS = ("task", "family", "stratum", "target_length", "prompt_tokens", "answers", "answer_prefix")


@dataclass(frozen=True)
class Token:
    """One generated token of a chain.

    ``text`` is the token's share of the chain's decoded text: the texts of a chain's tokens join to
    ``tokenizer.decode`` of its ids exactly (a token that leaves a character incomplete, such as the first
    byte of a multi-byte UTF-8 character, has ``""`` and the token that completes it carries it).
    """

    step: int  # t, 1-based
    id: int
    text: str
    eos: bool  # this is the chain's first EOS
    absorbed: bool  # a step after the chain's EOS
    known: bool = True  # False: an id beyond the tokenizer (a padding row of the model's vocabulary); decodes to ""


@dataclass(frozen=True)
class Chain:
    """One decoded chain: ``name`` "x" (full cache) or "y" (evicted), its tokens, text and EOS step."""

    name: str
    label: str
    tokens: tuple[Token, ...]
    text: str  # tokenizer.decode(ids)
    eos_step: int | None  # the step of its first EOS (None: no EOS within H)

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    @property
    def absorbed(self) -> int:
        """Number of absorbed steps (after the EOS)."""
        return sum(t.absorbed for t in self.tokens)


@dataclass(frozen=True)
class PairHeader:
    """Where a pair comes from and what its document asks (shown above the pair)."""

    store: str
    kind: str  # "document" (a per-document store) or "cube"
    model: str
    mode: str  # "complete" or "swrb"
    action: str
    replicate: int
    replicates: int
    document: str
    document_index: int = 0  # within the store (cubes hold several)
    documents: int = 1
    study: str | None = None
    temperature: float | None = None
    action_spec: Mapping[str, Any] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)  # DOCUMENT_FIELDS that the store has
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PairView:
    """x and y of one (document, action, replicate), decoded, with δ_t, τ, J and EOS marked."""

    header: PairHeader
    x: Chain
    y: Chain
    tv: np.ndarray  # δ_t, shape (H,)
    fixed_tv: np.ndarray | None  # TV(P(·|x_<t), Q(·|x_<t)), shape (H,)
    overlap_tv: np.ndarray | None  # swrb: hazards along the overlap scan, shape (H,)
    tau: int | None  # first divergence step (None: x = y for all H steps)
    branch_start: int | None  # swrb: J (0 when D = 0); None in complete mode

    @property
    def horizon(self) -> int:
        return int(self.tv.shape[0])


def token_texts(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token's share of ``tokenizer.decode(ids)``; the shares join to it exactly.

    Token k's share is what the decoded prefix ids[:k+1] adds to the text so far, once that prefix's text is
    a prefix of the full text; until then (an incomplete multi-byte character decodes to U+FFFD, a clean-up
    rule may still change it) the share is ``""`` and a later token carries the text.
    """
    ids = [int(i) for i in ids]
    full = tokenizer.decode(ids)
    texts, done = [], 0
    for k in range(1, len(ids) + 1):
        prefix = full if k == len(ids) else tokenizer.decode(ids[:k])
        if len(prefix) >= done and full.startswith(prefix):
            texts.append(prefix[done:])
            done = len(prefix)
        else:
            texts.append("")
    return texts


def first_divergence(match: np.ndarray) -> np.ndarray:
    """τ along the last axis (1-based first step with x ≠ y), 0 where the chains agree for all H steps."""
    match = np.asarray(match, dtype=bool)
    diverged = ~match.all(axis=-1)
    return np.where(diverged, np.argmax(~match, axis=-1) + 1, 0)


def chain_view(name: str, label: str, ids: np.ndarray, eos: np.ndarray, tokenizer: Any) -> Chain:
    """A decoded chain; ``eos[t-1]`` says the chain has emitted EOS by step t (the store's ``eos_x``/``eos_y``)."""
    ids = np.asarray(ids).astype(np.int64)
    eos = np.asarray(eos, dtype=bool)
    eos_step = int(np.argmax(eos)) + 1 if eos.any() else None
    texts = token_texts(tokenizer, ids.tolist())
    size = len(tokenizer)
    tokens = tuple(
        Token(
            step=t, id=int(i), text=s, eos=eos_step == t, absorbed=eos_step is not None and t > eos_step, known=i < size
        )
        for t, (i, s) in enumerate(zip(ids, texts), start=1)
    )
    return Chain(name=name, label=label, tokens=tokens, text="".join(texts), eos_step=eos_step)


def pair_view(arrays: Mapping[str, Any], tokenizer: Any, header: PairHeader) -> PairView:
    """The view of one pair from its per-step arrays (docs/internals.md names, shape (H,)).

    ``arrays`` holds ``x``, ``y``, ``tv``, ``eos_x``, ``eos_y`` and optionally ``match`` (default x == y),
    ``fixed_tv``, ``overlap_tv`` and ``branch_start`` (a scalar: swrb mode). A negative token id is a
    ``ValueError`` naming the store, action and replicate; ids beyond the tokenizer (models whose vocabulary
    has padding rows, or another model's tokenizer) decode to ``""`` as ``tokenizer.decode`` has them, are
    marked ``known=False`` and counted in a note.
    """
    where = f"{header.store}: action {header.action!r}, replicate {header.replicate}"
    missing = [n for n in ("x", "y", "tv", "eos_x", "eos_y") if n not in arrays]
    if missing:
        raise ValueError(f"{where}: array {missing[0]!r} is missing")
    x, y = np.asarray(arrays["x"]), np.asarray(arrays["y"])
    tv = np.asarray(arrays["tv"], dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or x.shape != tv.shape:
        raise ValueError(
            f"{where}: x, y and tv must be one step axis each, got shapes {x.shape}, {y.shape}, {tv.shape}"
        )
    for name, ids in (("x", x), ("y", y)):
        if ids.size and ids.min() < 0:
            raise ValueError(f"{where}: {name} holds the negative token id {int(ids.min())}")
    size = len(tokenizer)
    beyond = int((x >= size).sum() + (y >= size).sum())
    if beyond:
        note = (
            f"{beyond} token ids beyond the tokenizer's {size} tokens, shown as [id N]: padding rows of the model's "
            "vocabulary, or the models directory holds another model under this name"
        )
        header = replace(header, notes=(*header.notes, note))
    match = np.asarray(arrays["match"], dtype=bool) if "match" in arrays else x == y
    tau = int(first_divergence(match)) or None
    optional = {n: np.asarray(arrays[n], dtype=np.float64) for n in ("fixed_tv", "overlap_tv") if n in arrays}
    branch = arrays.get("branch_start")
    return PairView(
        header=header,
        x=chain_view("x", "full cache", x, arrays["eos_x"], tokenizer),
        y=chain_view("y", f"evicted by {header.action}", y, arrays["eos_y"], tokenizer),
        tv=tv,
        fixed_tv=optional.get("fixed_tv"),
        overlap_tv=optional.get("overlap_tv"),
        tau=tau,
        branch_start=None if branch is None else int(branch),
    )


# --------------------------------------------------------------------------------------------
# Reading a store
# --------------------------------------------------------------------------------------------


@dataclass
class StoreData:
    """A verified store's attributes and arrays, with its actions, documents and replicate count.

    ``arrays`` of a per-document store: {action: {name: (replicate, step) array}}; of a cube: {name: array}
    with dims (document, action, replicate, step) and its coordinates.
    """

    path: Path
    kind: str
    attrs: dict[str, Any]
    actions: list[str]
    documents: list[str]
    replicates: int
    arrays: dict[str, Any]

    def pair_arrays(self, action: int, document: int, replicate: int) -> dict[str, np.ndarray]:
        """The per-step arrays (and swrb ``branch_start``) of one (action, document, replicate) by index."""
        if self.kind == "document":
            group = self.arrays[self.actions[action]]
            return {name: values[replicate] for name, values in group.items()}
        return {
            name: values[document, action, replicate]
            for name, values in self.arrays.items()
            if np.ndim(values) >= 3 and name not in ("document", "action", "replicate", "step")
        }

    def document_info(self, document: int) -> dict[str, Any]:
        """The document's metadata (DOCUMENT_FIELDS the store has; cubes have no answers), with the question and
        answers from the document's own file when the workflow's documents lie beside the store
        (:func:`document_from_files`)."""
        info = self._stored_info(document)
        extra = document_from_files(self.path, self.kind, self.documents[document], info.get("stratum"))
        if extra.get("answers") and "answers" not in info:
            info["answers"] = extra["answers"]
            if extra.get("answer_prefix") and "answer_prefix" not in info:
                info["answer_prefix"] = extra["answer_prefix"]
        if extra.get("prompt"):
            info["question"] = question_of(str(extra["prompt"]))
        return info

    def _stored_info(self, document: int) -> dict[str, Any]:
        if self.kind == "document":
            record = dict(self.attrs.get("document") or {})
            record["prompt_tokens"] = self.attrs.get("prompt_tokens")
            return {k: record[k] for k in DOCUMENT_FIELDS if record.get(k) not in (None, "")}
        info: dict[str, Any] = {}
        for name in DOCUMENT_FIELDS:
            if name in self.arrays and np.ndim(self.arrays[name]) == 1:
                value = self.arrays[name][document]
                value = value.item() if hasattr(value, "item") else value
                if value not in ("", -1, None):
                    info[name] = value
        return info


def read_store(path: str | os.PathLike) -> StoreData:
    """A per-document store or a cube, verified (:mod:`kvdiv.trajectories.store`: a store that is incomplete or corrupt
    is a ``CorruptStoreError`` naming it and the array)."""
    from kvdiv.trajectories.store import is_cube, read_document_store, read_store_arrays

    path = Path(path)
    if is_cube(path):
        attrs, arrays = read_store_arrays(path)
        actions = [str(a) for a in arrays["action"]]
        documents = [str(d) for d in arrays["document"]]
        return StoreData(path, "cube", attrs, actions, documents, int(arrays["x"].shape[2]), arrays)
    attrs, data = read_document_store(path)
    document = str((attrs.get("document") or {}).get("id", path.stem))
    actions = list(data)
    replicates = int(data[actions[0]]["x"].shape[0]) if actions else 0
    return StoreData(path, "document", attrs, actions, [document], replicates, data)


def _listing(names: Sequence[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def select(data: StoreData, action: str | None, replicate: int, document: str | None) -> tuple[int, int, int]:
    """Indices of (action, document, replicate); defaults: the first action and document. Errors name the
    store and list the valid actions or documents (or the replicate range)."""
    if not data.actions:
        raise ValueError(f"{data.path}: the store has no actions")
    if action is None:
        a = 0
    elif action in data.actions:
        a = data.actions.index(action)
    else:
        raise KeyError(f"{data.path}: no action {action!r}; its actions: {_listing(data.actions)}")
    if document is None:
        d = 0
    elif document in data.documents:
        d = data.documents.index(document)
    elif data.kind == "document":
        raise KeyError(f"{data.path}: is the store of document {data.documents[0]!r}, not {document!r}")
    else:
        raise KeyError(f"{data.path}: no document {document!r}; its documents: {_listing(data.documents)}")
    if not 0 <= replicate < data.replicates:
        raise IndexError(
            f"{data.path}: action {data.actions[a]!r} has no replicate {replicate}: "
            f"the store has {data.replicates} (0..{data.replicates - 1})"
        )
    return a, d, replicate


def store_tokenizer(data: StoreData, models_dir: str | os.PathLike = DEFAULT_MODELS_DIR) -> tuple[Any, tuple[str, ...]]:
    """The tokenizer of the store's model, loaded from ``models_dir/{model}``
    (:func:`kvdiv.models.loading.load_tokenizer`), and notes (a resolved model whose weight hash differs from the
    store's)."""
    from kvdiv.layout import PROVENANCE
    from kvdiv.models.model_files import load_tokenizer, read_provenance

    model, spec = data.attrs.get("model"), data.attrs.get("model_spec") or {}
    if not model:
        raise ValueError(f"{data.path}: no 'model' attribute: not a kvdiv trajectory store")
    try:
        tokenizer = load_tokenizer(str(model), dict(spec), models_dir)
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"{data.path}: cannot load the tokenizer of its model {model!r}: {err} "
            f"(--models-dir names another models directory)"
        ) from err
    notes: tuple[str, ...] = ()
    directory = Path(models_dir) / str(model)
    stored = data.attrs.get("weight_hash")
    if stored and (directory / PROVENANCE).is_file():
        resolved = read_provenance(directory).get("weight_hash")
        if resolved and resolved != stored:
            notes = (
                f"{directory} holds weights {str(resolved)[:12]}..., the store was made with {str(stored)[:12]}...: "
                "the tokenizer may not be the store's",
            )
    return tokenizer, notes


def header_for(data: StoreData, action: int, document: int, replicate: int, notes: tuple[str, ...] = ()) -> PairHeader:
    """The :class:`PairHeader` of one pair of ``data``."""
    attrs = data.attrs
    name = data.actions[action]
    temperature = attrs.get("temperature")
    return PairHeader(
        store=str(data.path),
        kind=data.kind,
        model=str(attrs.get("model")),
        mode=str(attrs.get("mode", "complete")),
        action=name,
        replicate=replicate,
        replicates=data.replicates,
        document=data.documents[document],
        document_index=document,
        documents=len(data.documents),
        study=attrs.get("study"),
        temperature=None if temperature is None else float(temperature),
        action_spec=dict((attrs.get("actions") or {}).get(name) or {}),
        info=data.document_info(document),
        notes=notes,
    )


#: The longest question `kvdiv show` prints (characters; a longer one is cut with an ellipsis).
QUESTION_CHARS = 400


def document_from_files(store: Path, kind: str, doc_id: str, stratum: str | None) -> dict[str, Any]:
    """The record of document ``doc_id`` from the workflow's documents beside ``store``
    (``results/{study}/documents/{stratum}/{doc_id}.json``; the store is ``results/{study}/cube/{model}.zarr`` or
    ``results/{study}/trajectories/{model}/{doc_id}.zarr``), or ``{}`` when there is none or it does not read."""
    import json

    if not stratum:
        return {}
    study_dir = Path(store).resolve().parent.parent if kind == "cube" else Path(store).resolve().parent.parent.parent
    path = study_dir / "documents" / str(stratum) / f"{doc_id}.json"
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        record = json.loads(lines[0]) if lines else {}
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return record if isinstance(record, dict) and record.get("id") == doc_id else {}


def question_of(prompt: str) -> str:
    """The question of a document's message: its last paragraph (cut to :data:`QUESTION_CHARS`)."""
    paragraphs = [p.strip() for p in prompt.strip().split("\n\n") if p.strip()]
    question = paragraphs[-1] if paragraphs else ""
    return question if len(question) <= QUESTION_CHARS else question[: QUESTION_CHARS - 1] + "…"


def load_pair(
    store: str | os.PathLike,
    *,
    action: str | None = None,
    replicate: int = 0,
    document: str | None = None,
    models_dir: str | os.PathLike = DEFAULT_MODELS_DIR,
    tokenizer: Any = None,
) -> PairView:
    """The view of one pair of a per-document store or a cube (verified first).

    ``action`` and ``document`` default to the store's first; ``tokenizer`` defaults to the store's model's
    from ``models_dir``.
    """
    data = read_store(store)
    a, d, r = select(data, action, replicate, document)
    notes: tuple[str, ...] = ()
    if tokenizer is None:
        tokenizer, notes = store_tokenizer(data, models_dir)
    return pair_view(data.pair_arrays(a, d, r), tokenizer, header_for(data, a, d, r, notes))
