"""The per-document trajectory job: render the document for one model, prefill once, sample every action, write
the store (what rule ``trajectories`` runs).

The prompt is the document's message rendered with the model's own chat template (or none:
:func:`kvdiv.documents.render.prompt_token_ids`); the ids fed are recorded in the store. Sampling streams derive
from (master seed, study seed, document id, action, replicate); a ProbabilisticPress's draw from (master seed,
study seed, document id, action).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import torch

from kvdiv.trajectories.base import EOS_FOLDING, chains_needed
from kvdiv.trajectories.generate import generate
from kvdiv.trajectories.store import write_document_store


def run_document(
    loaded: Any,
    document: Mapping[str, Any],
    actions: Mapping[str, Mapping[str, Any]],
    out: str | Path,
    *,
    master_seed: int,
    study_seed: int,
    horizon: int,
    replicates: int,
    temperature: float = 1.0,
    mode: str = "complete",
    evict_first_step: bool = False,
    tv_atol: float = 1e-6,
    progress: bool = True,
) -> Path:
    """One trajectory job: render ``document`` for this model, prefill it once, generate every action,
    write the store.

    ``loaded`` is a :class:`kvdiv.llm.loading.LoadedModel`; ``document`` a documents-JSONL record
    (docs/internals.md) whose message is rendered with the model's own chat template (or none:
    :func:`kvdiv.documents.render.render_prompt`); the prompt ids fed are recorded in the store, which
    goes to ``out`` atomically. Sampling streams derive from (master_seed, study_seed, document id,
    action, replicate); a ProbabilisticPress's draw from (master_seed, study_seed, document id, action).
    """
    from kvdiv import __version__
    from kvdiv.documents.render import prompt_token_ids
    from kvdiv.llm.session import KernelSession

    for key in ("id", "prompt"):
        if key not in document:
            raise ValueError(f"document record lacks {key!r} (keys: {sorted(document)})")
    prompt_ids = prompt_token_ids(document, loaded.tokenizer, loaded.chat_template)
    n_prompt = len(prompt_ids)
    if n_prompt + horizon > loaded.max_context:
        raise ValueError(
            f"model {loaded.name!r}, document {document['id']!r}: its rendering has {n_prompt} prompt tokens; "
            f"+ horizon {horizon} = {n_prompt + horizon} exceeds the model's context of {loaded.max_context} "
            f"(the document was sized to {document.get('n_tokens')} tokens with the reference model {document.get('tokenizer')!r})"
        )
    seed_parts = (master_seed, study_seed, str(document["id"]))
    start = time.perf_counter()
    session = KernelSession(
        loaded,
        torch.tensor(prompt_ids, dtype=torch.long),
        actions,
        temperature=temperature,
        evict_first_step=evict_first_step,
        max_chains=chains_needed(len(actions), replicates, mode),
        horizon=horizon,
        seed_parts=seed_parts,
    )
    prefill_s = time.perf_counter() - start
    trajectories = generate(
        session,
        list(actions),
        horizon=horizon,
        replicates=replicates,
        seed_parts=seed_parts,
        eos_token_ids=loaded.eos_token_ids,
        mode=mode,
        tv_atol=tv_atol,
        progress=progress,
    )
    attrs = {
        "kvdiv_version": __version__,
        "model": loaded.name,
        "model_spec": dict(loaded.spec),
        "weight_hash": loaded.weight_hash,
        "document": {k: v for k, v in document.items() if k != "prompt"},
        "actions": {name: dict(spec) for name, spec in actions.items()},
        "horizon": horizon,
        "replicates": replicates,
        "temperature": temperature,
        "seed": {"master": master_seed, "study": study_seed, "streams": "derive_seed(master, study, doc id, action, replicate)"},
        "mode": mode,
        "evict_first_step": evict_first_step,
        "tv_atol": tv_atol,
        "first_step": "Q evaluated through the evicted cache" if evict_first_step else "delta_1 = 0: step 1 drawn from the prefill's law under both kernels",
        "swrb_restore": "retention (reservoir-chosen snapshot of the scan chains)" if mode == "swrb" else None,
        "prompt_tokens": n_prompt,
        "prompt_rendering": _rendering(document, loaded),
        "eos_token_ids": list(loaded.eos_token_ids),
        "eos_folding": EOS_FOLDING if len(loaded.eos_token_ids) > 1 else None,
        "press_seeds": session.press_seeds(),
        "prefill_s": prefill_s,
        # presses that report what they kept (ProbabilisticPress: effective retention per layer/head)
        "effective_retention": {
            name: press.effective_retention() for name, press in session.presses.items() if hasattr(press, "effective_retention")
        },
        "wall_time_total_s": time.perf_counter() - start,
    }
    return write_document_store(out, trajectories, attrs, prompt_ids=prompt_ids)


def _rendering(document: Mapping[str, Any], loaded: Any) -> str:
    """How the stored prompt ids were made from the document (a store attribute)."""
    if document.get("rendered", False):
        return "document: the record's prompt, already rendered, tokenized unchanged"
    if loaded.chat_template:
        return "chat_template: the model's chat template applied to the message, then the answer prefix"
    return "plain: the message, then the answer prefix after a blank line (no chat template)"
