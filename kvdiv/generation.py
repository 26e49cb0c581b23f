"""Coupled trajectory generation for one (model, document): every action, R replicates, H steps.

Reference kernel P(·|h) = the model with the full prompt cache; intervention kernel Q(·|h) = the
same model with the prompt cache evicted once by an action (arXiv 2609.16617, §3, §5). Both are
served by one :class:`kvdiv.llm.session.KernelSession` (one prefill); every chain of every action and
replicate advances in ONE batched ``session.step`` call per generation step.

complete mode — the recursive overlap–residual maximal coupling (:func:`kvdiv.coupling.couple`)
    for t = 1..H, recording x_t, y_t, δ_t = TV(P(·|x_<t), Q(·|y_<t)) and the fixed-history TV
    TV(P(·|x_<t), Q(·|x_<t)). Before the first divergence x_<t = y_<t, so a pair needs two rows
    (P at x, Q at x). At the divergence step the y chain is forked before y_t is appended and the
    fork is fed x_t: from then on three rows (P at x, Q at y, Q at x).

swrb mode — residual-branch conditional Monte Carlo:
    1. overlap scan u_t ~ m_t/(1 − δ_t) for all H steps, hazards δ_t (``overlap_tv``);
    2. S_t = Π_{s≤t}(1 − δ_s), w_j = S_{j−1} δ_j, D = Σ_j w_j = 1 − S_H;
    3. J ~ w_j/D, chosen *during* the scan by single-item weighted reservoir sampling: at step j
       the candidate is replaced with probability w_j / Σ_{i≤j} w_i, which leaves J = j with
       probability w_j/D. The state at u_<J is restored by **retention**: on replacement the
       scan's two chains are forked before u_j is appended (at most one snapshot pair per
       replicate is alive), together with the laws (P, Q) at u_<J;
    4. residual draws x_J ~ (p−q)⁺/δ_J, y_J ~ (q−p)⁺/δ_J and the coupled continuation to H.
    ``branch_start`` = J (1-based), 0 when D = 0 (then x = y = u for all H steps).
    Cost: H + (H − J) batched steps (the continuation of all replicates shares step calls).

Step 1 uses ``session.initial_probs``: δ_1 = 0 unless the session evicts at the first step.

EOS: a model with several end ids has one EOS event. Every law (P at x, Q at y, Q at x) has the mass of
all ``eos_token_ids`` folded onto the absorbing id ``eos_token_ids[0]`` (:func:`kvdiv.coupling.fold_eos`)
before coupling and before the fixed-history TV, so chains ending with different end ids match.

Randomness: replicate r of action a draws all its uniforms from ``derive_rng(*seed_parts, a, r)``
(seed_parts = master seed, study seed, document id), a fixed number per step, so its trajectory
does not depend on job order, thread count, or which other actions or replicates ran.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from kvdiv.coupling import COUPLE_UNIFORMS, couple, fold_eos, overlap_draw, residual_draw, tv_distance
from kvdiv.seeds import derive_rng

MODES = ("complete", "swrb")
#: The ``eos_folding`` store attribute of models with several end ids.
EOS_FOLDING = "mass of every id in eos_token_ids folded onto eos_token_ids[0] before coupling and TV"


class Session(Protocol):
    """The part of the KernelSession API that generation uses (docs/internals.md)."""

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
    rows: int = field(default=0, repr=False)  # kernel rows this action used (for the time split)


def chains_needed(n_actions: int, replicates: int, mode: str) -> int:
    """The most chains alive at once: 3 per pair in complete mode, 4 in swrb (scan + snapshot)."""
    return (3 if mode == "complete" else 4) * n_actions * replicates


def _to_numpy(probs: Any) -> np.ndarray:
    if hasattr(probs, "detach"):
        probs = probs.detach().to("cpu").numpy()
    return np.asarray(probs, dtype=np.float64)


def _eos_flags(tokens: np.ndarray, eos_token_ids: Sequence[int]) -> np.ndarray:
    is_eos = np.isin(tokens, np.asarray(list(eos_token_ids), dtype=np.int64))
    return np.logical_or.accumulate(is_eos, axis=1) if tokens.shape[1] else is_eos


class _FoldedSession:
    """A session whose laws have every EOS id's mass folded onto the absorbing id (module docstring)."""

    def __init__(self, session: Session, eos_token_ids: Sequence[int]):
        self.session = session
        self.eos_token_ids = list(eos_token_ids)

    def initial_probs(self, cache: str) -> np.ndarray:
        return fold_eos(_to_numpy(self.session.initial_probs(cache)), self.eos_token_ids)

    def step(self, chains: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        return fold_eos(_to_numpy(self.session.step(chains, tokens)), self.eos_token_ids)

    def new_chain(self, cache: str) -> int:
        return self.session.new_chain(cache)

    def fork(self, chain: int) -> int:
        return self.session.fork(chain)

    def release(self, chains: Sequence[int]) -> None:
        self.session.release(chains)


class _Pairs:
    """Bookkeeping shared by both modes: pair k = (action a, replicate r)."""

    def __init__(self, actions: Sequence[str], replicates: int, horizon: int):
        self.keys = [(a, r) for a in actions for r in range(replicates)]
        n = len(self.keys)
        self.x = np.zeros((n, horizon), dtype=np.int64)
        self.y = np.zeros((n, horizon), dtype=np.int64)
        self.tv = np.zeros((n, horizon), dtype=np.float64)
        self.fixed_tv = np.zeros((n, horizon), dtype=np.float64)
        self.rows = np.zeros(n, dtype=np.int64)


class _Batch:
    """Rows of one batched ``session.step`` call."""

    def __init__(self) -> None:
        self.chains: list[int] = []
        self.tokens: list[int] = []

    def add(self, chain: int, token: int) -> int:
        self.chains.append(chain)
        self.tokens.append(int(token))
        return len(self.chains) - 1


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
    tv_atol : δ below it counts as 0 (float round-off; see :mod:`kvdiv.coupling`).

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
        session = _FoldedSession(session, eos_token_ids)
    pairs = _Pairs(actions, replicates, horizon)
    rngs = [derive_rng(*seed_parts, a, r) for a, r in pairs.keys]
    if mode == "complete":
        extra = _run_complete(session, pairs, rngs, horizon, tv_atol, progress)
    else:
        extra = _run_swrb(session, pairs, rngs, horizon, tv_atol, progress)
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
            eos_x=_eos_flags(x, eos_token_ids),
            eos_y=_eos_flags(y, eos_token_ids),
            rows=int(pairs.rows[idx].sum()),
        )
        traj.wall_time_s = elapsed * traj.rows / total_rows
        if mode == "swrb":
            traj.overlap_tv = extra["overlap_tv"][idx].astype(np.float32)
            traj.branch_start = extra["branch_start"][idx].astype(np.int32)
        out[a] = traj
    return out


def _initial(session: Session, pairs: _Pairs) -> tuple[np.ndarray, np.ndarray]:
    p0 = _to_numpy(session.initial_probs("reference"))
    q0 = {a: _to_numpy(session.initial_probs(a)) for a in {a for a, _ in pairs.keys}}
    p = np.repeat(p0[None, :], len(pairs.keys), axis=0)
    q = np.stack([q0[a] for a, _ in pairs.keys])
    return p, q


def _run_complete(session: Session, pairs: _Pairs, rngs, horizon: int, tv_atol: float, progress: bool) -> dict:
    n = len(pairs.keys)
    uniforms = np.stack([rng.random((horizon, COUPLE_UNIFORMS)) for rng in rngs])  # [n, H, 3]
    cx = [session.new_chain("reference") for _ in pairs.keys]
    cy = [session.new_chain(a) for a, _ in pairs.keys]
    cfx: list[int | None] = [None] * n
    p, q = _initial(session, pairs)
    qf = q
    try:
        for t in tqdm(range(1, horizon + 1), desc="coupled steps", disable=not progress, mininterval=5):
            x, y, tv = couple(p, q, uniforms[:, t - 1], tv_atol)
            pairs.x[:, t - 1], pairs.y[:, t - 1], pairs.tv[:, t - 1] = x, y, tv
            pairs.fixed_tv[:, t - 1] = tv_distance(p, qf, tv_atol)
            if t == horizon:
                break
            batch = _Batch()
            rows = np.zeros((n, 3), dtype=np.int64)
            for k in range(n):
                if cfx[k] is None and x[k] != y[k]:
                    cfx[k] = session.fork(cy[k])  # history x_<t = y_<t, before y_t is appended
                rows[k, 0] = batch.add(cx[k], x[k])
                rows[k, 1] = batch.add(cy[k], y[k])
                rows[k, 2] = rows[k, 1] if cfx[k] is None else batch.add(cfx[k], x[k])
                pairs.rows[k] += 2 if cfx[k] is None else 3
            probs = _to_numpy(session.step(batch.chains, batch.tokens))
            p, q, qf = probs[rows[:, 0]], probs[rows[:, 1]], probs[rows[:, 2]]
    finally:
        session.release(cx + cy + [c for c in cfx if c is not None])
    return {}


def _run_swrb(session: Session, pairs: _Pairs, rngs, horizon: int, tv_atol: float, progress: bool) -> dict:
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
        p, q = _initial(session, pairs)
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
                probs = _to_numpy(session.step(ux + uy, np.concatenate([u, u])))
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
            batch = _Batch()
            order = list(chains)
            rows = np.zeros((len(order), 3), dtype=np.int64)
            for i, k in enumerate(order):
                cx, cy, cf = chains[k]
                rows[i] = (batch.add(cx, pairs.x[k, t - 1]), batch.add(cy, pairs.y[k, t - 1]), batch.add(cf, pairs.x[k, t - 1]))
                pairs.rows[k] += 3
            probs = _to_numpy(session.step(batch.chains, batch.tokens))
            for i, k in enumerate(order):
                laws[k] = (probs[rows[i, 0]], probs[rows[i, 1]], probs[rows[i, 2]])
        bar.close()
    finally:
        session.release(ux + uy + live + [c for s in snap if s is not None for c in s])
    return {"overlap_tv": overlap_tv, "branch_start": branch_start}


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
    from kvdiv.store import write_document_store

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
