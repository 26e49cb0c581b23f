"""Small finite-state systems shared by the tests of kvdiv.finite, kvdiv.finite.sampling and the CLI."""

from __future__ import annotations

import numpy as np

from kvdiv.finite.system import FiniteSystem, absorb_eos


def n_nodes(vocab: int, horizon: int) -> int:
    return sum(vocab**d for d in range(horizon))


def random_system(vocab: int, horizon: int, seed: int, mix: float = 0.3, eos: int | None = None) -> FiniteSystem:
    """History-dependent Dirichlet reference; intervention mixes in another Dirichlet draw with weight ``mix``."""
    rng = np.random.default_rng(seed)
    n = n_nodes(vocab, horizon)
    p = rng.dirichlet(np.ones(vocab), size=n)
    q = (1 - mix) * p + mix * rng.dirichlet(np.ones(vocab), size=n)
    if eos is not None:
        p, q = absorb_eos(p, vocab, horizon, eos), absorb_eos(q, vocab, horizon, eos)
    return FiniteSystem(vocab, horizon, p, q, eos=eos, name=f"random-v{vocab}h{horizon}-{seed}")


def iid_system(p0, q0, horizon: int) -> FiniteSystem:
    """History-independent kernels: P(·|h) = p0 and Q(·|h) = q0 at every history."""
    p0, q0 = np.asarray(p0, float), np.asarray(q0, float)
    n = n_nodes(len(p0), horizon)
    return FiniteSystem(len(p0), horizon, np.tile(p0, (n, 1)), np.tile(q0, (n, 1)), name="iid")


def brute_force(system: FiniteSystem):
    """Independent oracle: enumerate every coupled path pair with its probability.

    Returns (p_tau [H], joint [H, H] = P(x_t ≠ y_t, τ = j), laws_x, laws_y: {path tuple: prob}).
    """
    H, V = system.horizon, system.vocab
    p_tau = np.zeros(H)
    joint = np.zeros((H, H))
    laws_x: dict = {}
    laws_y: dict = {}

    def rec(hx, hy, prob, tau):
        t = len(hx) + 1
        if t > H:
            laws_x[hx] = laws_x.get(hx, 0.0) + prob
            laws_y[hy] = laws_y.get(hy, 0.0) + prob
            return
        p = system.reference[system.node(hx)]
        q = system.intervention[system.node(hy)]
        tv = 0.5 * np.abs(p - q).sum()
        for x in range(V):
            for y in range(V):
                k = min(p[x], q[x]) if x == y else 0.0
                if tv > 0:
                    k += max(p[x] - q[x], 0.0) * max(q[y] - p[y], 0.0) / tv
                if k <= 0:
                    continue
                new_tau = tau
                if x != y:
                    if tau == 0:
                        new_tau = t
                        p_tau[t - 1] += prob * k
                    joint[new_tau - 1, t - 1] += prob * k
                rec(hx + (x,), hy + (y,), prob * k, new_tau)

    rec((), (), 1.0, 0)
    return p_tau, joint, laws_x, laws_y
