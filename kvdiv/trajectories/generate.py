"""Coupled trajectory generation for one (model, document), or several documents of one model together: every
action, R replicates, H steps.

Both kernels are served by one :class:`kvdiv.kernel.session.KernelSession`; the two modes are
:mod:`~kvdiv.trajectories.complete` and :mod:`~kvdiv.trajectories.swrb`. Several documents
(:func:`generate_documents`): one session each, all rows through ONE forward per step
(:func:`kvdiv.trajectories.base.drive`, :func:`kvdiv.kernel.session.step_sessions`); a document's values do not depend
on which documents share its forward. Streams: ``reference_chain="shared"`` (complete mode, default) draws
replicate r's reference from ``derive_rng(*seed_parts, "reference", r)`` and action a's coupling from
``(*seed_parts, a, r)``; details: docs/estimators.md#kernel-pairs-from-a-model.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from kvdiv.seeds import derive_rng
from kvdiv.settings import Generation
from kvdiv.trajectories.base import ActionTrajectories, FoldedSession, Pairs, Session, drive, eos_flags
from kvdiv.trajectories.complete import run_complete, run_complete_shared
from kvdiv.trajectories.swrb import run_swrb


def generate(
    session: Session,
    actions: Sequence[str],
    generation: Generation,
    *,
    document_id: str,
    eos_token_ids: Sequence[int],
    progress: bool = True,
) -> dict[str, ActionTrajectories]:
    """Coupled trajectories of every action for one document.

    Parameters
    ----------
    session : KernelSession (or a test double such as tests/support's toy sessions)
        Serves P ("reference" cache) and Q (one cache per action) after one prefill.
    actions : action names known to the session.
    generation : the settings (:class:`kvdiv.settings.Generation`): H, R, mode, ``tv_atol`` (δ below it counts as
        0), ``reference_chain`` and the seeds: replicate streams are ``derive_rng(*generation.seed_parts(document_id),
        action, r)`` (and ``"reference", r`` for a shared reference chain).
    document_id : the document's id (part of every stream).
    eos_token_ids : the model's end ids, ``[0]`` the session's absorbing one: every law has their mass
        folded onto ``[0]`` before coupling and TV; flagged as EOS in ``eos_x``/``eos_y``.

    Returns
    -------
    dict action → :class:`ActionTrajectories`.
    """
    return generate_documents(
        [session], [document_id], actions, generation, eos_token_ids=eos_token_ids, progress=progress
    )[0]


def generate_documents(
    sessions: Sequence[Session],
    document_ids: Sequence[str],
    actions: Sequence[str],
    generation: Generation,
    *,
    eos_token_ids: Sequence[int],
    progress: bool = True,
) -> list[dict[str, ActionTrajectories]]:
    """Coupled trajectories of every action for several documents of one model, advanced together.

    ``sessions[d]`` serves document ``document_ids[d]`` (its prefill); the other arguments are :func:`generate`'s.
    Returns one dict action → :class:`ActionTrajectories` per document, each equal value for value to
    :func:`generate` on that document alone; ``wall_time_s`` splits the generation's time over documents and actions
    by their share of kernel rows.
    """
    g = generation
    if not isinstance(g, Generation):
        raise TypeError(f"generation must be a kvdiv.settings.Generation, got {type(g).__name__}")
    horizon, replicates, mode, tv_atol = g.horizon, g.replicates, g.mode, g.tv_atol
    if len(set(actions)) != len(actions) or not actions:
        raise ValueError(f"actions must be distinct and non-empty, got {list(actions)}")
    if len(sessions) != len(document_ids) or not sessions:
        raise ValueError(f"one document id per session: {len(sessions)} sessions, {len(document_ids)} ids")
    seed_parts = [g.seed_parts(doc_id) for doc_id in document_ids]
    start = time.perf_counter()
    if len(set(eos_token_ids)) > 1:
        sessions = [FoldedSession(session, eos_token_ids) for session in sessions]
    shared = g.shared_reference
    documents = [Pairs(actions, replicates, horizon) for _ in sessions]
    samplers = []
    for d, (session, pairs, parts) in enumerate(zip(sessions, documents, seed_parts)):
        rngs = [derive_rng(*parts, a, r) for a, r in pairs.keys]
        if shared:
            references = [derive_rng(*parts, "reference", r) for r in range(replicates)]
            samplers.append(
                run_complete_shared(session, pairs, references, rngs, horizon, tv_atol, progress and d == 0)
            )
        else:
            run = run_complete if mode == "complete" else run_swrb
            samplers.append(run(session, pairs, rngs, horizon, tv_atol, progress and d == 0))
    extras = drive(samplers, sessions)
    elapsed = time.perf_counter() - start
    total_rows = max(sum(float(pairs.rows.sum()) for pairs in documents), 1.0)
    share = len(actions) if shared else 1
    return [
        _trajectories(pairs, extra, actions, eos_token_ids, mode, elapsed / total_rows, share)
        for pairs, extra in zip(documents, extras)
    ]


def _trajectories(
    pairs: Pairs,
    extra: dict,
    actions: Sequence[str],
    eos_token_ids: Sequence[int],
    mode: str,
    seconds_per_row: float,
    reference_share: int = 1,
) -> dict[str, ActionTrajectories]:
    """One document's pairs as per-action records (the layout of a store)."""
    out: dict[str, ActionTrajectories] = {}
    for a in actions:
        idx = np.array([k for k, (b, _) in enumerate(pairs.keys) if b == a])
        x, y = pairs.x[idx], pairs.y[idx]
        traj = ActionTrajectories(
            x=x.astype(np.int32),
            y=y.astype(np.int32),
            tv=pairs.tv[idx].astype(np.float32),
            fixed_tv=pairs.fixed_tv[idx].astype(np.float32),
            match=x == y,
            eos_x=eos_flags(x, eos_token_ids),
            eos_y=eos_flags(y, eos_token_ids),
            rows=float(pairs.rows[idx].sum()),
            reference_share=reference_share,
        )
        traj.wall_time_s = seconds_per_row * traj.rows
        if mode == "swrb":
            traj.overlap_tv = extra["overlap_tv"][idx].astype(np.float32)
            traj.branch_start = extra["branch_start"][idx].astype(np.int32)
        out[a] = traj
    return out
