"""The complete-mode sampler: the recursive overlap–residual maximal coupling of every pair for all H steps.

For t = 1..H it records x_t, y_t, δ_t = TV(P(·|x_<t), Q(·|y_<t)) (:func:`kvdiv.trajectories.coupling.couple`)
and the fixed-history TV TV(P(·|x_<t), Q(·|x_<t)). Before the first divergence x_<t = y_<t, so a pair needs
two rows (P at x, Q at x). At the divergence step the y chain is forked before y_t is appended and the fork
is fed x_t: from then on three rows (P at x, Q at y, Q at x).

:func:`run_complete` is a generator (:data:`kvdiv.trajectories.base.Sampler`): it yields each batched step's
(chains, tokens) and is sent back their laws, so one driver can advance the samplers of several documents in
one forward per step (:func:`kvdiv.trajectories.generate.generate_documents`).
"""

from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from kvdiv.trajectories.base import Batch, Pairs, Sampler, Session, initial_laws
from kvdiv.trajectories.coupling import COUPLE_UNIFORMS, couple, tv_distance


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
