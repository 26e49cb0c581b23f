"""Synthetic cubes with known answers, in the cube format of docs/internals.md ("Cube"), for tests and benchmarks.

A *constant-TV persistent perturbation* with TV ``e`` (history independent, δ_1 = 0 as deployed)
is simulated under the overlap–residual coupling of arXiv 2609.16617: at step t ≥ 2 the chains
disagree with probability δ_t = e whatever happened before. Then, with τ the first disagreement,
Π_H = e·E_H and C_H = e (H ≥ 2), which the estimator tests check. Documents may carry their own
``e`` so that gaps between actions and strata are known. EOS flags are drawn independently of the
tokens (the synthetic chains are not absorbing); they only exercise the EOS split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from kvdiv.layout import document_id, parse_stratum
from kvdiv.trajectories import store
from kvdiv.trajectories.store import DOCUMENT_COORDS


def simulate_cube(
    tv_by_action: Mapping[str, float | Sequence[float]],
    n_documents: int,
    replicates: int,
    horizon: int,
    seed: int,
    strata: Sequence[str] = ("ruler_256", "helmet_256"),
    vocab: int = 50,
    eos_hazard: float = 0.0,
    swrb: bool = False,
    study: str = "synthetic",
    model: str = "synthetic",
    tv_growth: float = 0.0,
) -> xr.Dataset:
    """Simulate a cube of coupled chains under a constant-TV persistent perturbation per action.

    Parameters
    ----------
    tv_by_action
        Action name → e (one value for all documents, or one value per document).
    n_documents, replicates, horizon
        Cube sizes D, R, H.
    seed
        Seed of the numpy Generator.
    strata
        Stratum names ``{family}_{length}``, cycled over documents.
    eos_hazard
        Per-step probability that a chain emits EOS (flags only).
    swrb
        Write a swrb-mode cube: ``overlap_tv`` (= e after step 1) and a branch start J drawn from
        w_j/D; the path (x, y, tv) is the branch path (agreement before J, coupled after).
    tv_growth
        TV drifting with the generation clock: δ_t = clip(e + tv_growth · (t − 2) / (H − 2), 0, 1) for t ≥ 2 (still
        history independent), so branch TV rises with divergence-aligned depth for tv_growth > 0 and falls for < 0;
        0 (the default) is the constant-TV perturbation above.
    """
    rng = np.random.default_rng(seed)
    actions = list(tv_by_action)
    n_a = len(actions)
    shape = (n_documents, n_a, replicates, horizon)
    e = np.empty((n_documents, n_a))
    for a, name in enumerate(actions):
        e[:, a] = np.broadcast_to(np.asarray(tv_by_action[name], dtype=float), (n_documents,))
    tv = np.broadcast_to(e[:, :, None, None], shape).astype(np.float32).copy()
    if tv_growth:
        clock = np.maximum(np.arange(horizon) - 1, 0) / max(horizon - 2, 1)  # 0 at steps 1–2, 1 at step H
        tv = np.clip(tv + np.float32(tv_growth) * clock.astype(np.float32), 0.0, 1.0).astype(np.float32)
    tv[..., 0] = 0.0  # step 1: both kernels share the prefill logits
    mismatch = rng.random(shape) < tv
    branch_start = np.zeros(shape[:3], dtype=np.int32)
    overlap_tv = tv.copy()
    if swrb:
        tv64 = tv.astype(np.float64)
        survival = np.cumprod(1.0 - tv64, axis=-1)
        prev = np.concatenate([np.ones(shape[:3] + (1,)), survival[..., :-1]], axis=-1)
        w = prev * tv64
        d = w.sum(-1)
        u = rng.random(shape[:3]) * d
        j = (np.cumsum(w, axis=-1) < u[..., None]).sum(-1) + 1  # 1-based J ~ w_j / D
        j = np.where(d > 0, np.minimum(j, horizon), 0)
        branch_start[:] = j
        steps = np.arange(1, horizon + 1)
        mismatch = np.where(steps < j[..., None], False, mismatch)
        mismatch = np.where(steps == j[..., None], True, mismatch) & (j[..., None] > 0)
    x = rng.integers(0, vocab, size=shape, dtype=np.int32)
    y = np.where(mismatch, (x + 1 + rng.integers(0, vocab - 1, size=shape, dtype=np.int32)) % vocab, x).astype(np.int32)
    eos_x = np.cumsum(rng.random(shape) < eos_hazard, axis=-1) > 0
    eos_y = np.cumsum(rng.random(shape) < eos_hazard, axis=-1) > 0
    stratum = [strata[i % len(strata)] for i in range(n_documents)]
    docs = [document_id(study, stratum[i], i) for i in range(n_documents)]
    family, length = zip(*(parse_stratum(s) for s in stratum))
    dims = ("document", "action", "replicate", "step")
    data = {
        "x": (dims, x),
        "y": (dims, y),
        "tv": (dims, tv),
        "fixed_tv": (dims, tv.copy()),
        "match": (dims, ~mismatch),
        "eos_x": (dims, eos_x),
        "eos_y": (dims, eos_y),
    }
    if swrb:
        data["overlap_tv"] = (dims, overlap_tv)
        data["branch_start"] = (dims[:3], branch_start)
    coords = {
        "document": docs,
        "action": actions,
        "replicate": np.arange(replicates),
        "step": np.arange(1, horizon + 1),
        "family": ("document", list(family)),
        "task": ("document", [f"{f}_task" for f in family]),
        "target_length": ("document", list(length)),
        "stratum": ("document", stratum),
        "prompt_tokens": ("document", [n - 3 for n in length]),
    }
    attrs = {
        "model": model,
        "study": study,
        "horizon": horizon,
        "temperature": 1.0,
        "seed": seed,
        "mode": "swrb" if swrb else "complete",
        "evict_first_step": False,
        "actions": {a: {"press": "synthetic", "tv": float(e[:, i].mean())} for i, a in enumerate(actions)},
    }
    return xr.Dataset(data, coords=coords, attrs=attrs)


def write_cube(ds: xr.Dataset, path) -> None:
    """Write ``ds`` (from :func:`simulate_cube`) as a cube store at ``path`` through
    :func:`kvdiv.trajectories.store.write_cube` (atomically, every chunk written, sealed with checksums), the writer of
    the workflow's cubes."""
    dims = ("document", "action", "replicate", "step")
    data = {name: np.ascontiguousarray(ds[name].transpose(*dims[: ds[name].ndim]).values) for name in ds.data_vars}
    coords = {name: ds[name].values.tolist() for name in DOCUMENT_COORDS}
    store.write_cube(
        path,
        data,
        [str(d) for d in ds["document"].values],
        [str(a) for a in ds["action"].values],
        coords,
        dict(ds.attrs),
    )
