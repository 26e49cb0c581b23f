"""The swrb-mode sampler: residual-branch conditional Monte Carlo (SWRB), batched over pairs.

An overlap scan for all H steps (hazards ``overlap_tv``), the branch start J ~ w_j/D chosen during the scan by
weighted reservoir sampling (the state at u_<J kept by forking the scan's chains), residual draws at J and the
coupled continuation to H. ``branch_start`` = J (1-based), 0 when D = 0. Cost: H + (H − J) batched steps. The
estimators over these paths are :mod:`kvdiv.estimands`. :func:`run_swrb` is a generator
(:data:`kvdiv.trajectories.base.Sampler`), as :func:`kvdiv.trajectories.complete.run_complete`.
The mathematics: docs/estimators.md#residual-branch-estimation-swrb.
"""

from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from kvdiv.trajectories.base import Batch, Pairs, Sampler, Session, initial_laws
from kvdiv.trajectories.coupling import COUPLE_UNIFORMS, couple, overlap_draw, residual_draw, tv_distance


def run_swrb(session: Session, pairs: Pairs, rngs, horizon: int, tv_atol: float, progress: bool) -> Sampler:
    """Fill ``pairs`` along each pair's sampled path (module docstring); returns ``overlap_tv`` and ``branch_start``."""
    n = len(pairs.keys)
    scan_u = np.stack([rng.random((horizon, 2)) for rng in rngs])  # overlap draw, reservoir
    branch_u = np.stack([rng.random((horizon, COUPLE_UNIFORMS)) for rng in rngs])  # residual at J, continuation
    ux = [session.new_chain("reference") for _ in pairs.keys]
    uy = [session.new_chain(a) for a, _ in pairs.keys]
    snap: list[tuple[int, int] | None] = [None] * n
    snap_laws: list[tuple[np.ndarray, np.ndarray] | None] = [None] * n
    branch_start = np.zeros(n, dtype=np.int64)
    overlap_tv = np.zeros((n, horizon), dtype=np.float64)
    u_path = np.zeros((n, horizon), dtype=np.int64)
    survival = np.ones(n)  # S_{j-1}
    weight_sum = np.zeros(n)  # Σ_{i≤j} w_i
    live: list[int] = []
    try:
        # 1. overlap scan with reservoir choice of J (retention snapshot before u_J is appended)
        p, q = initial_laws(session, pairs)
        bar = tqdm(total=2 * horizon, desc="swrb steps", disable=not progress, mininterval=5)
        for t in range(1, horizon + 1):
            u, hazard = overlap_draw(p, q, scan_u[:, t - 1, 0], tv_atol)
            u_path[:, t - 1], overlap_tv[:, t - 1] = u, hazard
            w = survival * hazard
            weight_sum += w
            for k in np.flatnonzero(w > 0):
                if scan_u[k, t - 1, 1] * weight_sum[k] < w[k]:
                    if snap[k] is not None:
                        session.release(list(snap[k]))
                        snap[k] = None
                    snap[k] = (session.fork(ux[k]), session.fork(uy[k]))
                    snap_laws[k] = (p[k].copy(), q[k].copy())
                    branch_start[k] = t
            survival = survival * (1.0 - hazard)
            bar.update()
            if t < horizon:
                probs = yield ux + uy, [int(v) for v in np.concatenate([u, u])]
                pairs.rows += 2
                p, q = probs[:n], probs[n:]
        session.release(ux + uy)
        ux, uy = [], []

        # 2. the sampled path: u before J, residual draws at J, coupled continuation after J
        pairs.x[:], pairs.y[:] = u_path, u_path
        pairs.tv[:], pairs.fixed_tv[:] = overlap_tv, overlap_tv
        chains: dict[int, list[int]] = {}  # k -> [cx, cy, cfx]
        laws: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for t in range(1, horizon + 1):
            starting = np.flatnonzero(branch_start == t)
            if len(starting):
                pj = np.stack([snap_laws[k][0] for k in starting])
                qj = np.stack([snap_laws[k][1] for k in starting])
                xj, yj = residual_draw(pj, qj, branch_u[starting, t - 1, 1:])
                pairs.x[starting, t - 1], pairs.y[starting, t - 1] = xj, yj
            running = [k for k in chains]
            if running:
                idx = np.array(running)
                p = np.stack([laws[k][0] for k in running])
                q = np.stack([laws[k][1] for k in running])
                qf = np.stack([laws[k][2] for k in running])
                x, y, tv = couple(p, q, branch_u[idx, t - 1], tv_atol)
                pairs.x[idx, t - 1], pairs.y[idx, t - 1], pairs.tv[idx, t - 1] = x, y, tv
                pairs.fixed_tv[idx, t - 1] = tv_distance(p, qf, tv_atol)
            for k in starting:
                sx, sy = snap[k]
                snap[k] = None
                chains[int(k)] = [sx, sy, session.fork(sy)]  # the fork will carry x (fixed history)
                live.extend(chains[int(k)])
            bar.update()
            if t == horizon or not chains:
                continue
            batch = Batch()
            order = list(chains)
            rows = np.zeros((len(order), 3), dtype=np.int64)
            for i, k in enumerate(order):
                cx, cy, cf = chains[k]
                rows[i] = (
                    batch.add(cx, pairs.x[k, t - 1]),
                    batch.add(cy, pairs.y[k, t - 1]),
                    batch.add(cf, pairs.x[k, t - 1]),
                )
                pairs.rows[k] += 3
            probs = yield batch.chains, batch.tokens
            for i, k in enumerate(order):
                laws[k] = (probs[rows[i, 0]], probs[rows[i, 1]], probs[rows[i, 2]])
        bar.close()
    finally:
        session.release(ux + uy + live + [c for s in snap if s is not None for c in s])
    return {"overlap_tv": overlap_tv, "branch_start": branch_start}
