"""The full-cache reference chains alone: plain sampling from P, no action, no coupling.

Replicate r of a document samples x_t ~ P(· | x_<t) with the uniforms of the stream
``derive_rng(master seed, study seed, document id, "reference", r)``, one per step, as the shared-reference coupling
(:func:`kvdiv.trajectories.complete.run_complete_shared`) draws its reference chain: with the same prompt ids, seeds
and EOS ids, the tokens equal the ``x`` that a ``reference_chain: shared`` study stores for that replicate, whatever its
actions. What it is for: looking at the answers a model gives (how long they run, where they end) at a fraction of a
coupled run's cost (benchmarks/answer_lengths.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvdiv.seeds import derive_rng
from kvdiv.trajectories.base import FoldedSession, Sampler, Session, drive, eos_flags, to_numpy
from kvdiv.trajectories.coupling import reference_draw


def run_reference(session: Session, reference_rngs: Sequence[np.random.Generator], horizon: int) -> Sampler:
    """Sample one reference chain per stream in ``reference_rngs`` for ``horizon`` steps; returns ``{"x": [R, H]}``."""
    n = len(reference_rngs)
    ref_u = np.stack([rng.random(horizon) for rng in reference_rngs])  # [R, H], as run_complete_shared draws them
    chains = [session.new_chain("reference") for _ in range(n)]
    p = np.repeat(to_numpy(session.initial_probs("reference"))[None, :], n, axis=0)
    x = np.zeros((n, horizon), dtype=np.int64)
    try:
        for t in range(1, horizon + 1):
            x[:, t - 1] = reference_draw(p, ref_u[:, t - 1])
            if t == horizon:
                break
            p = yield chains, [int(v) for v in x[:, t - 1]]
    finally:
        session.release(chains)
    return {"x": x}


def reference_chains(
    sessions: Sequence[Session],
    seed_parts: Sequence[Sequence[int | str]],
    replicates: int,
    horizon: int,
    *,
    eos_token_ids: Sequence[int],
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ``replicates`` reference chains of each document, all documents advanced in one forward per step.

    ``sessions[d]`` serves document d (a :class:`~kvdiv.kernel.session.KernelSession`; its actions are not used),
    ``seed_parts[d]`` = (master seed, study seed, document id). Returns per document ``(x, eos)``: int64 tokens and
    the bool flags "the chain has emitted EOS by step t", both [replicates, horizon] (as ``x`` / ``eos_x`` of a
    store). Several end ids are folded onto the first, as the coupled samplers fold them.
    """
    if len(sessions) != len(seed_parts) or not sessions:
        raise ValueError(f"one seed_parts per session: {len(sessions)} sessions, {len(seed_parts)} seed_parts")
    if replicates < 1 or horizon < 1:
        raise ValueError(f"replicates and horizon must be >= 1, got {replicates} and {horizon}")
    if len(set(eos_token_ids)) > 1:
        sessions = [FoldedSession(session, eos_token_ids) for session in sessions]
    samplers = [
        run_reference(session, [derive_rng(*parts, "reference", r) for r in range(replicates)], horizon)
        for session, parts in zip(sessions, seed_parts)
    ]
    results = drive(samplers, sessions)
    return [(res["x"], eos_flags(res["x"], eos_token_ids)) for res in results]
