"""The trajectory job: for a batch of documents of one (study, model), render each document for the model, prefill
it once, sample every action of every document together (one forward per step for all documents), write one store
per document (what the rule ``trajectories`` runs, :func:`run_documents`; :func:`run_document` for one).

A store holds the same values whatever documents share its job (:func:`kvdiv.trajectories.generate.generate_documents`).

The prompt is the document's message rendered with the model's own chat template (or none:
:func:`kvdiv.documents.render.prompt_token_ids`); the ids fed are recorded in the store. Sampling streams derive
from (master seed, study seed, document id, action, replicate); a ProbabilisticPress's draw from (master seed,
study seed, document id, action).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from kvdiv.host_memory import release_freed_memory
from kvdiv.settings import AutoBatch, Generation
from kvdiv.trajectories import batching, checks
from kvdiv.trajectories.base import EOS_FOLDING, chains_needed
from kvdiv.trajectories.generate import generate_documents
from kvdiv.trajectories.reuse import Piece, TrajectoryCache, piece_key, same_reference
from kvdiv.trajectories.store import write_document_store
from kvdiv.watchdog import doing

log = logging.getLogger(__name__)

#: The ``seed.streams`` store attribute per ``reference_chain``.
STREAMS = {
    "shared": "reference chain: derive_seed(master, study, doc id, 'reference', replicate); "
    "each action's coupling to it: derive_seed(master, study, doc id, action, replicate)",
    "per_action": "derive_seed(master, study, doc id, action, replicate)",
}


def run_document(
    loaded: Any,
    document: Mapping[str, Any],
    actions: Mapping[str, Mapping[str, Any]],
    out: str | Path,
    generation: Generation,
    **options: Any,
) -> Path:
    """One document's trajectory job: :func:`run_documents` with a batch of one (``options``: its keyword-only
    arguments)."""
    return run_documents(loaded, [document], actions, [out], generation, **options)[0]


def run_documents(
    loaded: Any,
    documents: Sequence[Mapping[str, Any]],
    actions: Mapping[str, Mapping[str, Any]],
    outs: Sequence[str | Path],
    generation: Generation,
    *,
    progress: bool = True,
    cache: TrajectoryCache | None = None,
    code: str = "",
    documents_per_batch: int | AutoBatch | str | None = None,
) -> list[Path]:
    """One trajectory job over a batch of documents: render each for this model, prefill each once, generate every
    action of every document together (or in consecutive batches of ``documents_per_batch``, each batch's stores
    written and its memory freed before the next; ``"auto"`` or :class:`kvdiv.config.AutoBatch`: batches as large as
    a memory budget holds, :mod:`kvdiv.kernel.memory_plan`), write one store per document.

    ``loaded`` is a :class:`kvdiv.models.loading.LoadedModel`; each document a documents-JSONL record
    (docs/internals.md) whose message is rendered with the model's own chat template (or none:
    :func:`kvdiv.documents.render.render_prompt`); the prompt ids fed are recorded in its store, which goes to
    ``outs[d]`` atomically. ``generation`` (:class:`kvdiv.settings.Generation`) gives the seeds, H, R and the rest:
    sampling streams derive from (master seed, study seed,
    document id, action, replicate) and, with a shared reference chain, each replicate's reference chain from
    (master seed, study seed, document id, "reference", replicate); a ProbabilisticPress's draw from (master seed,
    study seed, document id, action). Every document is checked (keys, prompt + horizon within the context) before any
    prefill. ``compress``: ``prompt`` (the whole prompt) or ``context`` (all but the question and answer prefix, as
    kvpress's pipeline: :func:`kvdiv.documents.render.context_length`). ``cache``
    (:class:`kvdiv.trajectories.reuse.TrajectoryCache`; the workflow passes its results root's): each (document,
    action) result already in it under the same key is reused instead of generated, and each one generated is kept
    there; ``code`` (the job's code hash) is part of that key.
    """
    from kvdiv.documents.render import context_length, prompt_token_ids

    g = generation
    if not isinstance(g, Generation):
        raise TypeError(f"generation must be a kvdiv.settings.Generation, got {type(g).__name__}")
    horizon, compress = g.horizon, g.compress
    if len(documents) != len(outs) or not documents:
        raise ValueError(f"one output per document: {len(documents)} documents, {len(outs)} outputs")
    checks.check_action_values(actions)  # errors naming the bad thing, before any prefill (kvdiv.trajectories.checks)
    checks.check_model(loaded.model)
    vocab = checks.vocabulary_size(loaded.model)
    prompts, contexts = [], []
    for document in documents:
        for key in ("id", "prompt_ids" if "prompt_ids" in document else "prompt"):
            if key not in document:
                raise ValueError(f"document record lacks {key!r} (keys: {sorted(document)})")
        if "prompt_ids" in document:  # token ids given by the caller (kvdiv.compare), fed unchanged
            prompt_ids = [int(t) for t in document["prompt_ids"]]
        else:
            try:
                prompt_ids = prompt_token_ids(document, loaded.tokenizer, loaded.chat_template)
            except ValueError as err:  # a chat template's budget, a rendered prompt with an answer prefix
                raise ValueError(f"document {document['id']!r}: {err}") from None
        checks.check_prompt_ids(str(document["id"]), prompt_ids, vocab)
        n_prompt = len(prompt_ids)
        if n_prompt + horizon > loaded.max_context:
            raise ValueError(
                f"model {loaded.name!r}, document {document['id']!r}: its rendering has {n_prompt} prompt tokens; "
                f"+ horizon {horizon} = {n_prompt + horizon} exceeds the model's context of {loaded.max_context} "
                f"(the document was sized to {document.get('n_tokens')} tokens with the reference model "
                f"{document.get('tokenizer')!r})"
            )
        prompts.append(prompt_ids)
        if compress == "context" and "prompt_ids" in document:
            raise ValueError(
                f"document {document['id']!r}: compress: context needs the prompt's text (its question), not token ids"
            )
        contexts.append(
            context_length(document, loaded.tokenizer, loaded.chat_template, prompt_ids)
            if compress == "context"
            else None
        )
    ids = [str(document["id"]) for document in documents]
    if len(set(ids)) != len(ids):
        raise ValueError(f"a document appears twice in one job: {ids}")
    for doc_id, prompt_ids, context in zip(ids, prompts, contexts):
        _check_actions_itself(actions, doc_id, _compressed(len(prompt_ids), context, g.evict_first_step), horizon)
    checks.check_press_windows(actions, ids, prompts, contexts, evict_first_step=g.evict_first_step)
    # what the stores record (the reference chain the trajectories used: per_action in swrb mode), and the cache key
    recorded = g.record()
    reused: list[dict[str, Piece]] = [{} for _ in documents]
    keys: list[dict[str, str]] = [{} for _ in documents]
    if cache is not None:
        model_key = {
            "name": loaded.name,
            "spec": dict(loaded.spec),
            "weight_hash": loaded.weight_hash,
            "linear_kernel": loaded.linear_kernel,
            "eos_token_ids": [int(t) for t in loaded.eos_token_ids],
        }
        records = {name: action_record(spec) for name, spec in actions.items()}
        for d, (doc_id, document, prompt_ids) in enumerate(zip(ids, documents, prompts)):
            for name, record in records.items():
                keys[d][name] = piece_key(
                    document=document,
                    prompt_ids=prompt_ids,
                    model=model_key,
                    generation=recorded,
                    action=record,
                    code=code,
                )
                piece = cache.get(doc_id, name, keys[d][name])
                if piece is not None:
                    reused[d][name] = piece

    def write(d: int, done: Mapping[str, Any]) -> None:
        """Document d's store from what this job computed for it (``done``: trajectories, session, prefill_s; empty
        when every action was reused) and what it reused."""
        doc_id, document, out, prompt_ids = ids[d], documents[d], outs[d], prompts[d]
        if reused[d]:
            log.info(
                "document %s: reused %s from the cache; computed %s",
                doc_id,
                ", ".join(reused[d]) or "none",
                ", ".join(done.get("trajectories", {})) or "none",
            )
        session = done.get("session")
        fresh = _session_pieces(session, done.get("trajectories", {}), done.get("prefill_s", 0.0))
        pieces = {name: reused[d].get(name) or fresh[name] for name in actions}
        traj = {name: piece.trajectories for name, piece in pieces.items()}
        first = next(iter(pieces.values()))
        prefill = done["prefill_s"] if session is not None else first.prefill_s
        attrs = _attributes(
            loaded,
            document,
            actions,
            prompt_ids,
            g,
            compressed_length=session.compressed_length if session is not None else first.compressed_prompt_tokens,
            press_seeds={k: v for piece in pieces.values() for k, v in piece.press_seeds.items()},
            effective_retention={k: v for piece in pieces.values() for k, v in piece.effective_retention.items()},
        )
        attrs["prefill_s"] = prefill
        # this document's prefill + its share (by kernel rows) of the batch's generation
        attrs["wall_time_total_s"] = prefill + sum(t.wall_time_s for t in traj.values())
        paths[d] = write_document_store(out, traj, attrs, prompt_ids=prompt_ids)
        if cache is not None:
            for name, piece in fresh.items():
                cache.put(doc_id, name, keys[d][name], piece)

    paths: list[Path | None] = [None] * len(documents)
    groups: dict[tuple[str, ...], list[int]] = {}
    for d in range(len(documents)):
        groups.setdefault(tuple(a for a in actions if a not in reused[d]), []).append(d)
    # documents generated together, in batches of `documents_per_batch`: each batch's stores are written and its
    # sessions freed before the next batch starts (one model load, and memory reused, for the whole job)
    documents_per_batch = batching.job_budget(loaded, batching.batching(documents_per_batch))
    for needed, members in groups.items():
        if not needed:
            continue
        needed_actions = {a: actions[a] for a in needed}
        for batch in batching.batches(loaded, members, prompts, contexts, needed_actions, g, documents_per_batch):
            for d, result in zip(batch, _generate(loaded, batch, ids, prompts, contexts, actions, needed, g, progress)):
                if reused[d] and g.shared_reference and not same_reference(reused[d], result[0]):
                    log.warning(
                        "document %s: the reference chain recomputed now differs from the cached one: "
                        "recomputing every action (%s)",
                        ids[d],
                        ", ".join(actions),
                    )
                    reused[d] = {}
                    result = _generate(loaded, [d], ids, prompts, contexts, actions, tuple(actions), g, False)[0]
                write(d, dict(zip(("trajectories", "session", "prefill_s"), result)))
            result = None  # nothing of this batch outlives it
    for d in range(len(documents)):
        if paths[d] is None:  # every action reused
            write(d, {})
    return [p for p in paths if p is not None]


def _generate(
    loaded: Any,
    members: Sequence[int],
    ids: Sequence[str],
    prompts: Sequence[Sequence[int]],
    contexts: Sequence[int | None],
    actions: Mapping[str, Mapping[str, Any]],
    needed: Sequence[str],
    g: Generation,
    progress: bool,
) -> list[tuple[dict[str, Any], Any, float]]:
    """Prefill documents ``members`` and generate the actions ``needed`` for them together: per document its
    trajectories, its session and its prefill seconds."""
    from kvdiv.kernel.session import KernelSession

    specs = {name: actions[name] for name in needed}
    sessions, prefill_s = [], []
    for d in members:
        start = time.perf_counter()
        with doing(document=ids[d], phase="prefill"):  # a press that hangs is named (kvdiv.watchdog)
            session = KernelSession(
                loaded,
                torch.tensor(prompts[d], dtype=torch.long),
                specs,
                g,
                document_id=ids[d],
                max_chains=chains_needed(len(specs), g.replicates, g.mode, g.effective_reference_chain),
                compressed_length=contexts[d],
            )
        sessions.append(session)
        prefill_s.append(time.perf_counter() - start)
    release_freed_memory()  # the prefills' working memory, kept for reuse between layers, is not held while decoding
    with doing(documents=[ids[d] for d in members], phase="decoding"):
        trajectories = generate_documents(
            sessions,
            [ids[d] for d in members],
            list(specs),
            g,
            eos_token_ids=loaded.eos_token_ids,
            progress=progress,
        )
    return list(zip(trajectories, sessions, prefill_s))


def _compressed(prompt_tokens: int, context: int | None, evict_first_step: bool) -> int:
    """The entries the presses compress: the context (``compress: context``), else the prompt (less its last token
    with ``evict_first_step``)."""
    return context if context is not None else prompt_tokens - int(bool(evict_first_step))


def _check_actions_itself(actions: Mapping[str, Any], doc_id: str, n: int, horizon: int) -> None:
    """Refuse an action that cannot act at this document's own length (it evicts nothing, its scores choose none of
    the entries it keeps, a decoding press never cuts within H: kvdiv.kernel.presses.degenerate), unless it says
    ``allow_degenerate: true``; the start-up check applied the full rules at each stratum's length."""
    from kvdiv.kernel.presses.degenerate import action_reasons, allows_degenerate

    for name, reason in action_reasons(actions, n, horizon, strict=False).items():
        if not allows_degenerate(actions[name]):
            raise ValueError(
                f"document {doc_id!r}: action {name!r} at its {n} entries compressed: {reason} (give the action "
                "allow_degenerate: true to run it anyway)"
            )


def _session_pieces(session: Any, trajectories: Mapping[str, Any], prefill_s: float) -> dict[str, Piece]:
    """The actions generated in this job as cache pieces (with the attributes their session knows)."""
    if session is None:
        return {}
    seeds = session.press_seeds()
    retention = {
        name: press.effective_retention()
        for name, press in session.presses.items()
        if hasattr(press, "effective_retention")
    }
    return {
        name: Piece(
            traj,
            press_seeds={name: seeds[name]} if name in seeds else {},
            effective_retention={name: retention[name]} if name in retention else {},
            compressed_prompt_tokens=session.compressed_length,
            prefill_s=prefill_s,
        )
        for name, traj in trajectories.items()
    }


def _attributes(
    loaded: Any,
    document: Mapping[str, Any],
    actions: Mapping[str, Mapping[str, Any]],
    prompt_ids: Sequence[int],
    generation: Generation,
    *,
    compressed_length: int | None,
    press_seeds: Mapping[str, Any],
    effective_retention: Mapping[str, Any],
) -> dict[str, Any]:
    """A document store's root attributes (docs/internals.md), without the timings."""
    from kvdiv import __version__

    g = generation
    from kvdiv.environment import environment_record

    return {
        "kvdiv_version": __version__,
        "environment": environment_record(),  # package versions; whether this is the locked environment
        "model": loaded.name,
        "model_spec": dict(loaded.spec),
        "weight_hash": loaded.weight_hash,
        "linear_kernel": loaded.linear_kernel,
        "document": {k: v for k, v in document.items() if k not in ("prompt", "prompt_ids")},
        "actions": {name: action_record(spec) for name, spec in actions.items()},
        "horizon": g.horizon,
        "replicates": g.replicates,
        "temperature": g.temperature,
        "seed": {
            "master": g.master_seed,
            "study": g.study_seed,
            "streams": STREAMS[g.effective_reference_chain],
        },
        "mode": g.mode,
        "reference_chain": g.effective_reference_chain,
        "evict_first_step": g.evict_first_step,
        "tv_atol": g.tv_atol,
        "first_step": (
            "Q evaluated through the evicted cache (the question fed through it)"
            if g.compress == "context"
            else "Q evaluated through the evicted cache"
            if g.evict_first_step
            else "delta_1 = 0: step 1 drawn from the prefill's law under both kernels"
        ),
        "compress": g.compress,
        "compressed_prompt_tokens": compressed_length,
        "swrb_restore": "retention (reservoir-chosen snapshot of the scan chains)" if g.mode == "swrb" else None,
        "prompt_tokens": len(prompt_ids),
        "prompt_rendering": _rendering(document, loaded),
        "eos_token_ids": list(loaded.eos_token_ids),
        "eos_folding": EOS_FOLDING if len(loaded.eos_token_ids) > 1 else None,
        "press_seeds": {name: press_seeds[name] for name in actions if name in press_seeds},
        **_budgets(actions, compressed_length or len(prompt_ids), g.horizon),
        # presses that report what they kept (ProbabilisticPress: effective retention per layer/head)
        "effective_retention": {name: effective_retention[name] for name in actions if name in effective_retention},
    }


def _budgets(actions: Mapping[str, Any], n: int, horizon: int) -> dict[str, Any]:
    """``press_budget`` (per action: entries compressed, the ratio its press ran at, entries kept) and
    ``allow_degenerate`` (per action that says so: why it is not itself at this document, or None)."""
    from kvdiv.kernel.presses.degenerate import action_reasons, allows_degenerate, budget_record

    allowed = {name: spec for name, spec in actions.items() if allows_degenerate(spec)}
    reasons = action_reasons(allowed, n, horizon, strict=True)
    return {
        "press_budget": {name: budget_record(spec, n) for name, spec in actions.items()},
        "allow_degenerate": {name: reasons.get(name) for name in allowed},
    }


def action_record(spec: Any) -> dict[str, Any]:
    """The ``actions`` attribute of one action: its config spec, or for a press instance (:func:`kvdiv.compare`)
    ``{press: <class>, **its init fields}`` (nested presses likewise; values JSON can hold, others as repr)."""
    import dataclasses

    from kvpress import BasePress

    if not isinstance(spec, BasePress):
        return dict(spec)
    record: dict[str, Any] = {"press": type(spec).__name__}
    for f in dataclasses.fields(spec) if dataclasses.is_dataclass(spec) else ():
        if not f.init:
            continue
        value = getattr(spec, f.name)
        if isinstance(value, BasePress):
            record["wraps" if f.name == "press" else f.name] = action_record(value)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, BasePress) for v in value):
            record[f.name] = [action_record(v) for v in value]
        elif isinstance(value, (int, float, str, bool, type(None))) or (
            isinstance(value, (list, dict)) and _plain(value)
        ):
            record[f.name] = value
        else:
            record[f.name] = repr(value)
    return record


def _plain(value: Any) -> bool:
    import json

    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _rendering(document: Mapping[str, Any], loaded: Any) -> str:
    """How the stored prompt ids were made from the document (a store attribute)."""
    if "prompt_ids" in document:
        return "ids: token ids given by the caller, fed unchanged"
    if document.get("rendered", False):
        return "document: the record's prompt, already rendered, tokenized unchanged"
    if loaded.chat_template:
        return "chat_template: the model's chat template applied to the message, then the answer prefix"
    return "plain: the message, then the answer prefix after a blank line (no chat template)"
