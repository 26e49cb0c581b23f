"""What both samplers share: the per-action records, the session protocol, EOS folding and pair bookkeeping.

A pair k is one (action a, replicate r) of coupled chains; :class:`ActionTrajectories` holds one action's R pairs
as arrays (replicate, step), step t at index t − 1 (the layout of a per-document store,
:mod:`kvdiv.trajectories.store`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generator, Protocol, Sequence

import numpy as np

from kvdiv.trajectories.coupling import fold_eos


#: A sampler of one document: yields each batched step's (chains, tokens), is sent back their laws
#: ([len(chains), V] float64, EOS folded), and returns its extra arrays (swrb: overlap_tv, branch_start).
Sampler = Generator[tuple[list[int], list[int]], np.ndarray, dict]


#: The ``eos_folding`` store attribute of models with several end ids.
EOS_FOLDING = "mass of every id in eos_token_ids folded onto eos_token_ids[0] before coupling and TV"


class Session(Protocol):
    """The part of the :class:`~kvdiv.kernel.session.KernelSession` API the samplers use (docs/internals.md)."""

    def initial_probs(self, cache: str) -> np.ndarray: ...
    def new_chain(self, cache: str) -> int: ...
    def fork(self, chain: int) -> int: ...
    def step(self, chains: Sequence[int], tokens: Sequence[int]) -> Any: ...
    def release(self, chains: Sequence[int]) -> None: ...


@dataclass
class ActionTrajectories:
    """Per-step records of one action's R replicates; arrays are (replicate, step), step t at index t−1."""

    x: np.ndarray  # int32: reference chain tokens
    y: np.ndarray  # int32: intervention chain tokens
    tv: np.ndarray  # float32: δ_t at the paired histories
    fixed_tv: np.ndarray  # float32: TV(P(·|x_<t), Q(·|x_<t))
    match: np.ndarray  # bool: x == y
    eos_x: np.ndarray  # bool: x chain has emitted EOS at some step ≤ t
    eos_y: np.ndarray  # bool
    overlap_tv: np.ndarray | None = None  # float32 (swrb): hazards along the overlap scan
    branch_start: np.ndarray | None = None  # int32 [R] (swrb): J, 0 when D = 0
    wall_time_s: float = 0.0
    rows: float = field(default=0.0, repr=False)  # kernel rows this action used (for the time split)
    reference_share: int = 1  # pairs of a replicate that share one reference chain (1: per_action, or swrb)


def chains_needed(n_actions: int, replicates: int, mode: str, reference_chain: str = "per_action") -> int:
    """The most chains alive at once: 3 per pair in complete mode (2 per pair + 1 per replicate with a shared
    reference), 4 in swrb (scan + snapshot)."""
    if mode == "complete" and reference_chain == "shared":
        return (2 * n_actions + 1) * replicates
    return (3 if mode == "complete" else 4) * n_actions * replicates


def to_numpy(probs: Any) -> np.ndarray:
    if hasattr(probs, "detach"):
        probs = probs.detach().to("cpu").numpy()
    return np.asarray(probs, dtype=np.float64)


def eos_flags(tokens: np.ndarray, eos_token_ids: Sequence[int]) -> np.ndarray:
    is_eos = np.isin(tokens, np.asarray(list(eos_token_ids), dtype=np.int64))
    return np.logical_or.accumulate(is_eos, axis=1) if tokens.shape[1] else is_eos


class FoldedSession:
    """A session whose laws have every EOS id's mass folded onto the absorbing id (module docstring)."""

    def __init__(self, session: Session, eos_token_ids: Sequence[int]):
        self.session = session
        self.eos_token_ids = list(eos_token_ids)

    def initial_probs(self, cache: str) -> np.ndarray:
        return fold_eos(to_numpy(self.session.initial_probs(cache)), self.eos_token_ids)

    def step(self, chains: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        return fold_eos(to_numpy(self.session.step(chains, tokens)), self.eos_token_ids)

    def new_chain(self, cache: str) -> int:
        return self.session.new_chain(cache)

    def fork(self, chain: int) -> int:
        return self.session.fork(chain)

    def release(self, chains: Sequence[int]) -> None:
        self.session.release(chains)


def step_together(requests: Sequence[tuple[Session, Sequence[int], Sequence[int]]]) -> list[np.ndarray]:
    """One step of several sessions: (session, chains, tokens) → each request's laws as float64 NumPy arrays.

    Sessions whose class provides ``step_together`` (:class:`kvdiv.kernel.session.KernelSession`: one batched
    forward for all of them) step together; others (toy sessions) step one by one. A :class:`FoldedSession`'s
    laws are folded after its inner session's step.
    """
    inner = [s.session if isinstance(s, FoldedSession) else s for s, _, _ in requests]
    together = getattr(type(inner[0]), "step_together", None) if inner else None
    if together is not None and len(inner) > 1 and all(type(s) is type(inner[0]) for s in inner):
        raw = together([(s, chains, tokens) for s, (_, chains, tokens) in zip(inner, requests)])
    else:
        raw = [s.step(chains, tokens) for s, (_, chains, tokens) in zip(inner, requests)]
    out = []
    for (session, _, _), probs in zip(requests, raw):
        probs = to_numpy(probs)
        out.append(fold_eos(probs, session.eos_token_ids) if isinstance(session, FoldedSession) else probs)
    return out


def drive(samplers: Sequence[Sampler], sessions: Sequence[Session]) -> list[dict]:
    """Run document samplers in lockstep: every step, the pending requests of all of them go to
    :func:`step_together` (one batched forward for sessions of one model); returns each sampler's result."""
    results: list[dict | None] = [None] * len(samplers)
    pending: dict[int, tuple[list[int], list[int]]] = {}
    for i, sampler in enumerate(samplers):
        try:
            pending[i] = next(sampler)
        except StopIteration as stop:
            results[i] = stop.value
    while pending:
        order = list(pending)
        laws = step_together([(sessions[i], *pending[i]) for i in order])
        for i, probs in zip(order, laws):
            try:
                pending[i] = samplers[i].send(probs)
            except StopIteration as stop:
                results[i] = stop.value
                del pending[i]
    return [r if r is not None else {} for r in results]


class Pairs:
    """Bookkeeping shared by both modes: pair k = (action a, replicate r)."""

    def __init__(self, actions: Sequence[str], replicates: int, horizon: int):
        self.keys = [(a, r) for a in actions for r in range(replicates)]
        n = len(self.keys)
        self.x = np.zeros((n, horizon), dtype=np.int64)
        self.y = np.zeros((n, horizon), dtype=np.int64)
        self.tv = np.zeros((n, horizon), dtype=np.float64)
        self.fixed_tv = np.zeros((n, horizon), dtype=np.float64)
        self.rows = np.zeros(n, dtype=np.float64)


class Batch:
    """Rows of one batched ``session.step`` call."""

    def __init__(self) -> None:
        self.chains: list[int] = []
        self.tokens: list[int] = []

    def add(self, chain: int, token: int) -> int:
        self.chains.append(chain)
        self.tokens.append(int(token))
        return len(self.chains) - 1


def initial_laws(session: Session, pairs: Pairs) -> tuple[np.ndarray, np.ndarray]:
    p0 = to_numpy(session.initial_probs("reference"))
    q0 = {a: to_numpy(session.initial_probs(a)) for a in {a for a, _ in pairs.keys}}
    p = np.repeat(p0[None, :], len(pairs.keys), axis=0)
    q = np.stack([q0[a] for a, _ in pairs.keys])
    return p, q
