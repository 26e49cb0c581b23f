"""The recursive overlap–residual maximal coupling, one step at a time, batched over rows (arXiv 2609.16617, §3).

δ_t = TV(p, q); with probability 1 − δ_t a common draw from min(p, q)/(1 − δ_t), otherwise residual draws
x_t ~ (p − q)⁺/δ_t, y_t ~ (q − p)⁺/δ_t. Every draw is an inverse-CDF lookup of a supplied or seeded uniform, a fixed
number per row and step (3 for :func:`couple`, 1 for :func:`overlap_draw`, 2 for :func:`residual_draw`). A δ below
``tv_atol`` counts as 0 (float round-off of batched decoding). :func:`fold_eos` folds several end ids onto one.
Shared reference (:func:`reference_draw`, :func:`couple_to_reference`): x_t ~ p, y_t = x_t with probability
min(1, q(x_t)/p(x_t)), else from (q − p)⁺/δ_t — the same joint law per pair. The mathematics, the numerics and
``tv_atol``: docs/estimators.md#the-coupling.
"""

from __future__ import annotations

import numpy as np

from kvdiv.estimands import tv

#: Uniforms one :func:`couple` step consumes per row: branch choice, x draw, y draw.
COUPLE_UNIFORMS = 3
#: Uniforms one :func:`reference_draw` consumes per reference chain (x draw).
REFERENCE_UNIFORMS = 1
#: Uniforms one :func:`couple_to_reference` step consumes per row: acceptance of x, residual draw of y.
SHARED_UNIFORMS = 2


def _as_laws(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.atleast_2d(np.asarray(p, dtype=np.float64))
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    return _nonnegative(p), _nonnegative(q)


def _nonnegative(a: np.ndarray) -> np.ndarray:
    """``a`` with negative entries clipped to 0; ``a`` itself (no copy) when it has none, as softmax laws do."""
    return np.clip(a, 0.0, None) if a.size and a.min() < 0.0 else a


def _uniforms(rng: np.random.Generator | np.ndarray, n: int, k: int) -> np.ndarray:
    if isinstance(rng, np.random.Generator):
        return rng.random((n, k))
    u = np.asarray(rng, dtype=np.float64).reshape(n, k)
    if np.any((u < 0.0) | (u >= 1.0)):
        raise ValueError("uniforms must lie in [0, 1)")
    return u


def categorical(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws from unnormalised non-negative ``weights`` [n, V] with uniforms ``u`` [n].

    Returns int64 [n]. A zero-weight index is never returned (rows with no mass return the
    argmax, i.e. index 0 of an all-zero row; callers only pass rows with positive mass).
    """
    cdf = np.cumsum(weights, axis=1)
    target = u * cdf[:, -1]
    idx = np.sum(cdf <= target[:, None], axis=1)
    # Round-off can push the target onto the total: fall back to the last index with mass.
    last = weights.shape[1] - 1 - np.argmax(weights[:, ::-1] > 0, axis=1)
    return np.minimum(idx, last)


def fold_eos(laws: np.ndarray, eos_token_ids) -> np.ndarray:
    """Several end ids are one EOS event: the mass of every id in ``eos_token_ids[1:]`` moved onto the
    absorbing id ``eos_token_ids[0]``, row by row (a copy; ``laws`` itself when there is one id).

    Applied to every law before coupling and before the fixed-history TV, so "P ended with id A, Q with
    id B" is a match and contributes nothing to δ_t.
    """
    ids = list(dict.fromkeys(int(i) for i in eos_token_ids))
    if len(ids) < 2:
        return laws
    out = np.array(laws, dtype=np.float64, copy=True)
    out[..., ids[0]] += out[..., ids[1:]].sum(axis=-1)
    out[..., ids[1:]] = 0.0
    return out


def tv_distance(p: np.ndarray, q: np.ndarray, tv_atol: float) -> np.ndarray:
    """δ = :func:`kvdiv.estimands.tv` per row of two laws, clipped to [0, 1] (0 below ``tv_atol``); float64 [n]."""
    p, q = _as_laws(p, q)
    delta = np.clip(tv(p, q), 0.0, 1.0)
    return np.where(delta < tv_atol, 0.0, delta)


def couple(
    p: np.ndarray, q: np.ndarray, rng: np.random.Generator | np.ndarray, tv_atol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step of the maximal coupling for every row.

    Parameters
    ----------
    p, q : float64 [n, V]
        Next-token laws of the reference chain (at x_<t) and the intervention chain (at y_<t).
    rng : Generator or float [n, 3]
        A seeded generator, or the step's uniforms (branch choice, x draw, y draw) per row.
    tv_atol : float
        δ below it counts as 0 (see the module docstring).

    Returns
    -------
    x, y : int64 [n]
        Coupled tokens: x ~ p, y ~ q, and x == y exactly when the common branch was taken.
    tv : float64 [n]
        δ_t = TV(p, q), as ½ the sum of the two residual masses the draw uses (= :func:`kvdiv.estimands.tv`).
    """
    p, q = _as_laws(p, q)
    n = p.shape[0]
    u = _uniforms(rng, n, COUPLE_UNIFORMS)
    overlap = np.minimum(p, q)
    res_p = p - overlap
    res_q = q - overlap
    mass_overlap = overlap.sum(axis=1)
    mass_p = res_p.sum(axis=1)
    mass_q = res_q.sum(axis=1)
    delta = np.clip(0.5 * (mass_p + mass_q), 0.0, 1.0)
    total = mass_overlap + 0.5 * (mass_p + mass_q)
    residual_ok = (mass_p > 0) & (mass_q > 0)
    negligible = delta < tv_atol
    common = ((u[:, 0] * total < mass_overlap) | ~residual_ok | negligible) & (mass_overlap > 0)
    delta = np.where(negligible, 0.0, delta)
    # each draw only for the rows that use it (row by row, so the same values as over every row)
    x, y = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    shared, split = np.flatnonzero(common), np.flatnonzero(~common)
    if shared.size:
        weights = np.where(negligible[shared, None], p[shared], overlap[shared])
        x[shared] = y[shared] = categorical(weights, u[shared, 1])
    if split.size:
        x[split] = categorical(res_p[split], u[split, 1])
        y[split] = categorical(res_q[split], u[split, 2])
    return x, y, delta


def reference_draw(p: np.ndarray, rng: np.random.Generator | np.ndarray) -> np.ndarray:
    """x_t ~ p for every row (the shared reference chain's own draw, :data:`REFERENCE_UNIFORMS` uniform per row)."""
    p = np.clip(np.atleast_2d(np.asarray(p, dtype=np.float64)), 0.0, None)
    return categorical(p, _uniforms(rng, p.shape[0], REFERENCE_UNIFORMS)[:, 0])


def couple_to_reference(
    p: np.ndarray, q: np.ndarray, x: np.ndarray, rng: np.random.Generator | np.ndarray, tv_atol: float
) -> tuple[np.ndarray, np.ndarray]:
    """One step of the maximal coupling given the reference token: y_t for every row (module docstring).

    Parameters
    ----------
    p, q : float64 [n, V]
        Laws of the reference chain (at x_<t) and the intervention chain (at y_<t).
    x : int [n]
        x_t, drawn from p (:func:`reference_draw`).
    rng : Generator or float [n, 2]
        A seeded generator, or the step's uniforms (acceptance, residual draw) per row.
    tv_atol : float
        δ below it counts as 0: y_t = x_t (as :func:`couple` takes the common draw).

    Returns
    -------
    y : int64 [n]
        y_t = x_t with probability min(1, q(x_t)/p(x_t)), else a draw from (q − p)⁺ (≠ x_t).
    tv : float64 [n]
        δ_t, computed as :func:`couple` computes it.
    """
    p, q = _as_laws(p, q)
    n = p.shape[0]
    x = np.asarray(x, dtype=np.int64).reshape(n)
    u = _uniforms(rng, n, SHARED_UNIFORMS)
    overlap = np.minimum(p, q)
    scratch = np.subtract(p, overlap)
    mass_p = scratch.sum(axis=1)
    mass_q = np.subtract(q, overlap, out=scratch).sum(axis=1)
    delta = np.clip(0.5 * (mass_p + mass_q), 0.0, 1.0)
    negligible = delta < tv_atol
    # each law normalised by its own mass (float32 laws do not sum to 1 exactly)
    sum_p, sum_q = p.sum(axis=1), q.sum(axis=1)
    px, qx = p[np.arange(n), x], q[np.arange(n), x]
    accept = u[:, 0] * px * sum_q < qx * sum_p
    y = x.copy()
    # the residual only for the rows that reject x_t (row by row, so the same values as over every row)
    rejected = np.flatnonzero(~(accept | negligible))
    if rejected.size:
        sp, sq = sum_p[rejected], sum_q[rejected]
        res_q = np.clip(
            q[rejected] / np.where(sq > 0, sq, 1.0)[:, None] - p[rejected] / np.where(sp > 0, sp, 1.0)[:, None],
            0.0,
            None,
        )
        residual_ok = (res_q.sum(axis=1) > 0) & (mass_p[rejected] > 0) & (mass_q[rejected] > 0)
        y[rejected] = np.where(residual_ok, categorical(res_q, u[rejected, 1]), x[rejected])
    return y, np.where(negligible, 0.0, delta)


def overlap_draw(
    p: np.ndarray, q: np.ndarray, rng: np.random.Generator | np.ndarray, tv_atol: float
) -> tuple[np.ndarray, np.ndarray]:
    """One step of the SWRB overlap scan: u_t ~ m/(1 − δ_t) with m = min(p, q).

    Returns the common token (int64 [n]) and the hazard δ_t (float64 [n]). Where the overlap has no
    mass (δ_t = 1, the path has survival 0 from here on and never carries weight) the token is drawn
    from p so the scan can continue. A δ_t below ``tv_atol`` is 0 and u_t is drawn from p.
    """
    p, q = _as_laws(p, q)
    u = _uniforms(rng, p.shape[0], 1)[:, 0]
    overlap = np.minimum(p, q)
    delta = np.clip(tv(p, q), 0.0, 1.0)
    negligible = delta < tv_atol
    has_overlap = (overlap.sum(axis=1) > 0) & ~negligible
    weights = np.where(has_overlap[:, None], overlap, p)
    return categorical(weights, u), np.where(negligible, 0.0, delta)


def residual_draw(p: np.ndarray, q: np.ndarray, rng: np.random.Generator | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Independent residual draws x ~ (p − q)⁺/δ, y ~ (q − p)⁺/δ (SWRB at the branch point J).

    Rows must have δ > 0 (a raised ``ValueError`` names the rows that do not).
    """
    p, q = _as_laws(p, q)
    u = _uniforms(rng, p.shape[0], 2)
    overlap = np.minimum(p, q)
    res_p, res_q = p - overlap, q - overlap
    bad = (res_p.sum(axis=1) <= 0) | (res_q.sum(axis=1) <= 0)
    if np.any(bad):
        raise ValueError(f"residual draw needs δ > 0; rows {np.flatnonzero(bad).tolist()} have no residual mass")
    return categorical(res_p, u[:, 0]), categorical(res_q, u[:, 1])
