"""The complete-mode samplers: the recursive overlap–residual maximal coupling of every pair for all H steps.

Records x_t, y_t, δ_t and the fixed-history TV; before the first divergence a pair needs two rows (P at x, Q at x),
after it three (P at x, Q at y, Q at x). :func:`run_complete_shared` (``reference_chain: shared``, the default): one
reference chain x per replicate, every action's y coupled to it (paired contrasts, R reference rows per step);
:func:`run_complete` (``per_action``): each pair draws its own x and y. Both are generators
(:data:`kvdiv.trajectories.base.Sampler`) so one driver advances several documents in one forward per step.
Details: docs/estimators.md#the-coupling.
"""

from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from kvdiv.trajectories.base import Batch, Pairs, Sampler, Session, initial_laws
from kvdiv.trajectories.coupling import (
    COUPLE_UNIFORMS,
    SHARED_UNIFORMS,
    couple,
    couple_to_reference,
    reference_draw,
    tv_distance,
)


def run_complete(session: Session, pairs: Pairs, rngs, horizon: int, tv_atol: float, progress: bool) -> Sampler:
    """Fill ``pairs`` with the coupled chains of every pair (module docstring); returns no extra arrays."""
    n = len(pairs.keys)
    uniforms = np.stack([rng.random((horizon, COUPLE_UNIFORMS)) for rng in rngs])  # [n, H, 3]
    cx = [session.new_chain("reference") for _ in pairs.keys]
    cy = [session.new_chain(a) for a, _ in pairs.keys]
    cfx: list[int | None] = [None] * n
    p, q = initial_laws(session, pairs)
    qf = q
    try:
        for t in tqdm(range(1, horizon + 1), desc="coupled steps", disable=not progress, mininterval=5):
            x, y, tv = couple(p, q, uniforms[:, t - 1], tv_atol)
            pairs.x[:, t - 1], pairs.y[:, t - 1], pairs.tv[:, t - 1] = x, y, tv
            pairs.fixed_tv[:, t - 1] = tv_distance(p, qf, tv_atol)
            if t == horizon:
                break
            batch = Batch()
            rows = np.zeros((n, 3), dtype=np.int64)
            for k in range(n):
                if cfx[k] is None and x[k] != y[k]:
                    cfx[k] = session.fork(cy[k])  # history x_<t = y_<t, before y_t is appended
                rows[k, 0] = batch.add(cx[k], x[k])
                rows[k, 1] = batch.add(cy[k], y[k])
                rows[k, 2] = rows[k, 1] if cfx[k] is None else batch.add(cfx[k], x[k])
                pairs.rows[k] += 2 if cfx[k] is None else 3
            probs = yield batch.chains, batch.tokens
            p, q, qf = probs[rows[:, 0]], probs[rows[:, 1]], probs[rows[:, 2]]
    finally:
        session.release(cx + cy + [c for c in cfx if c is not None])
    return {}


def run_complete_shared(
    session: Session, pairs: Pairs, reference_rngs, rngs, horizon: int, tv_atol: float, progress: bool
) -> Sampler:
    """Fill ``pairs`` with every action's y chain coupled to one reference chain per replicate (module docstring).

    ``reference_rngs[r]`` drives replicate r's reference chain (1 uniform per step), ``rngs[k]`` pair k's acceptance
    and residual draws (2 per step): a pair's values depend only on its own and its replicate's streams, never on
    which other actions run. Rows per step: one per reference chain, one per pair (Q at y), one more per diverged
    pair (Q at x, the fixed-history law). ``pairs.rows`` charges each reference row equally to the pairs it serves.
    """
    n = len(pairs.keys)
    replicate = np.array([r for _, r in pairs.keys], dtype=np.int64)
    n_ref = len(reference_rngs)
    if n and replicate.max() >= n_ref:
        raise ValueError(f"{n_ref} reference streams for replicates up to {replicate.max()}")
    sharing = np.bincount(replicate, minlength=n_ref)[replicate]  # pairs per reference chain
    ref_u = np.stack([rng.random(horizon) for rng in reference_rngs])  # [R, H]
    uniforms = np.stack([rng.random((horizon, SHARED_UNIFORMS)) for rng in rngs])  # [n, H, 2]
    cx = [session.new_chain("reference") for _ in range(n_ref)]
    cy = [session.new_chain(a) for a, _ in pairs.keys]
    cfx: list[int | None] = [None] * n
    p0, q = initial_laws(session, pairs)
    p_ref = np.repeat(p0[:1], n_ref, axis=0)
    qf = q
    try:
        for t in tqdm(range(1, horizon + 1), desc="coupled steps", disable=not progress, mininterval=5):
            x_ref = reference_draw(p_ref, ref_u[:, t - 1])
            x = x_ref[replicate]
            p = p_ref[replicate]
            y, tv = couple_to_reference(p, q, x, uniforms[:, t - 1], tv_atol)
            pairs.x[:, t - 1], pairs.y[:, t - 1], pairs.tv[:, t - 1] = x, y, tv
            pairs.fixed_tv[:, t - 1] = tv_distance(p, qf, tv_atol)
            if t == horizon:
                break
            batch = Batch()
            ref_rows = np.array([batch.add(cx[r], x_ref[r]) for r in range(n_ref)], dtype=np.int64)
            rows = np.zeros((n, 2), dtype=np.int64)
            for k in range(n):
                if cfx[k] is None and x[k] != y[k]:
                    cfx[k] = session.fork(cy[k])  # history x_<t = y_<t, before y_t is appended
                rows[k, 0] = batch.add(cy[k], y[k])
                rows[k, 1] = rows[k, 0] if cfx[k] is None else batch.add(cfx[k], x[k])
                pairs.rows[k] += 1.0 / sharing[k] + (1 if cfx[k] is None else 2)
            probs = yield batch.chains, batch.tokens
            p_ref, q, qf = probs[ref_rows], probs[rows[:, 0]], probs[rows[:, 1]]
    finally:
        session.release(cx + cy + [c for c in cfx if c is not None])
    return {}
