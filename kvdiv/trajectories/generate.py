"""Coupled trajectory generation for one (model, document): every action, R replicates, H steps.

Reference kernel P(·|h) = the model with the full prompt cache; intervention kernel Q(·|h) = the
same model with the prompt cache evicted once by an action (arXiv 2609.16617, §3, §5). Both are
served by one :class:`kvdiv.llm.session.KernelSession` (one prefill); every chain of every action and
replicate advances in ONE batched ``session.step`` call per generation step.

The two modes (``mode`` of a study) are :mod:`~kvdiv.trajectories.complete` (the recursive overlap–residual
maximal coupling for all H steps) and :mod:`~kvdiv.trajectories.swrb` (residual-branch conditional Monte Carlo).

Step 1 uses ``session.initial_probs``: δ_1 = 0 unless the session evicts at the first step.

EOS: a model with several end ids has one EOS event. Every law (P at x, Q at y, Q at x) has the mass of
all ``eos_token_ids`` folded onto the absorbing id ``eos_token_ids[0]`` (:func:`kvdiv.trajectories.coupling.fold_eos`)
before coupling and before the fixed-history TV, so chains ending with different end ids match.

Randomness: replicate r of action a draws all its uniforms from ``derive_rng(*seed_parts, a, r)``
(seed_parts = master seed, study seed, document id), a fixed number per step, so its trajectory
does not depend on job order, thread count, or which other actions or replicates ran.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from kvdiv.seeds import derive_rng
from kvdiv.trajectories.base import MODES, ActionTrajectories, FoldedSession, Pairs, Session, eos_flags
from kvdiv.trajectories.complete import run_complete
from kvdiv.trajectories.swrb import run_swrb


def generate(
    session: Session,
    actions: Sequence[str],
    *,
    horizon: int,
    replicates: int,
    seed_parts: Sequence[int | str],
    eos_token_ids: Sequence[int],
    mode: str = "complete",
    tv_atol: float = 0.0,
    progress: bool = True,
) -> dict[str, ActionTrajectories]:
    """Coupled trajectories of every action for one document.

    Parameters
    ----------
    session : KernelSession (or :class:`kvdiv.testing.ToyKernelSession`)
        Serves P ("reference" cache) and Q (one cache per action) after one prefill.
    actions : action names known to the session.
    horizon : H, generated tokens per chain.
    replicates : R, coupled replicates per action.
    seed_parts : (master seed, study seed, document id); replicate streams append (action, r).
    eos_token_ids : the model's end ids, ``[0]`` the session's absorbing one: every law has their mass
        folded onto ``[0]`` before coupling and TV; flagged as EOS in ``eos_x``/``eos_y``.
    mode : "complete" or "swrb".
    tv_atol : δ below it counts as 0 (float round-off; see :mod:`kvdiv.trajectories.coupling`).

    Returns
    -------
    dict action → :class:`ActionTrajectories`.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if horizon < 1 or replicates < 1:
        raise ValueError(f"horizon and replicates must be >= 1, got {horizon}, {replicates}")
    if len(set(actions)) != len(actions) or not actions:
        raise ValueError(f"actions must be distinct and non-empty, got {list(actions)}")
    start = time.perf_counter()
    if len(set(eos_token_ids)) > 1:
        session = FoldedSession(session, eos_token_ids)
    pairs = Pairs(actions, replicates, horizon)
    rngs = [derive_rng(*seed_parts, a, r) for a, r in pairs.keys]
    if mode == "complete":
        extra = run_complete(session, pairs, rngs, horizon, tv_atol, progress)
    else:
        extra = run_swrb(session, pairs, rngs, horizon, tv_atol, progress)
    elapsed = time.perf_counter() - start
    total_rows = max(int(pairs.rows.sum()), 1)
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
            rows=int(pairs.rows[idx].sum()),
        )
        traj.wall_time_s = elapsed * traj.rows / total_rows
        if mode == "swrb":
            traj.overlap_tv = extra["overlap_tv"][idx].astype(np.float32)
            traj.branch_start = extra["branch_start"][idx].astype(np.int32)
        out[a] = traj
    return out
