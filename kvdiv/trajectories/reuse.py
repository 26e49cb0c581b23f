"""Chains computed once: each (document, action) result of a trajectory job is kept under the results root
(``cache/trajectories/<study>/<model>/<document>/<action>-<key>.zarr``: a one-action per-document store), so a job
rerun because an action or a document was added generates only what is new. The key (:func:`piece_key`) hashes
everything the result depends on: document and prompt ids, model, generation settings, the action's spec, the job's
code hash (the user's press files and their own modules included) and the versions of the packages computing the
kernels. An action's values do not depend on the other actions or documents of its job (seeded streams,
row-invariant forwards, attention spans: :func:`kvdiv.kernel.chain_slots.attention_runs`). A piece is read verified; a
missing, damaged or foreign one is recomputed. With a shared reference chain the job checks the recomputed chain
equals every reused piece's, and recomputes everything otherwise. Details: docs/internals.md#paths.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kvdiv.trajectories.base import ActionTrajectories

log = logging.getLogger(__name__)

#: Root attribute naming a cache piece's key (a piece is a per-document store with one action).
KEY_ATTR = "reuse_key"
#: Array names of a piece's action group restored into :class:`ActionTrajectories` (optional ones may be absent).
_OPTIONAL = ("overlap_tv", "branch_start")


def piece_key(
    *,
    document: Mapping[str, Any],
    prompt_ids: Sequence[int],
    model: Mapping[str, Any],
    generation: Mapping[str, Any],
    action: Mapping[str, Any],
    code: str,
) -> str:
    """The fingerprint (:func:`kvdiv.codehash.fingerprint`) of everything one (document, action) result depends on:
    ``code`` is the job's code hash (the workflow's: kvdiv's modules the job runs and the bytes of the user's press
    files and of their own modules, :meth:`kvdiv.config.lookups.Lookups.trajectory_code`); the versions of the
    packages that compute the kernels (:func:`software`) are added here."""
    from kvdiv.codehash import fingerprint

    return fingerprint(
        {
            "document": dict(document),
            "prompt_ids": [int(t) for t in prompt_ids],
            "model": dict(model),
            "generation": dict(generation),
            "action": dict(action),
            "code": str(code),
            "software": software(),
        }
    )


#: The installed packages whose code computes a cached result (an upgrade may change its bits).
SOFTWARE = ("torch", "transformers", "kvpress", "numpy")


@lru_cache(maxsize=1)
def software() -> dict[str, str]:
    """{package: installed version} of :data:`SOFTWARE`."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in SOFTWARE:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


@dataclass
class Piece:
    """One cached (document, action) result: its trajectories and the attributes the document store records."""

    trajectories: ActionTrajectories
    press_seeds: dict[str, Any] = field(default_factory=dict)  # {action: seeds} (empty for an unseeded press)
    effective_retention: dict[str, Any] = field(default_factory=dict)
    compressed_prompt_tokens: int | None = None
    prefill_s: float = 0.0


class TrajectoryCache:
    """The per-(document, action) pieces of one (study, model) under ``root`` (a directory; created on write)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def path(self, doc_id: str, action: str, key: str) -> Path:
        return self.root / doc_id / f"{action}-{key}.zarr"

    def get(self, doc_id: str, action: str, key: str) -> Piece | None:
        """The piece of (document, action) under ``key``, or None (absent, unreadable or of another key)."""
        from kvdiv.trajectories.store import read_document_store

        path = self.path(doc_id, action, key)
        if not path.is_dir():
            return None
        try:
            attrs, data = read_document_store(path)
            if attrs.get(KEY_ATTR) != key or list(data) != [action]:
                raise ValueError(f"holds {list(data)} under key {attrs.get(KEY_ATTR)!r}")
            arrays = data[action]
            traj = ActionTrajectories(
                **{name: np.asarray(arrays[name]) for name in ("x", "y", "tv", "fixed_tv", "match", "eos_x", "eos_y")},
                **{name: np.asarray(arrays[name]) for name in _OPTIONAL if name in arrays},
                wall_time_s=float(attrs["wall_time_s"][action]),
                reference_share=int(attrs.get("reference_share", 1)),
            )
            return Piece(
                traj,
                press_seeds=dict(attrs.get("press_seeds") or {}),
                effective_retention=dict(attrs.get("effective_retention") or {}),
                compressed_prompt_tokens=attrs.get("compressed_prompt_tokens"),
                prefill_s=float(attrs.get("prefill_s", 0.0)),
            )
        except Exception as err:  # a hostile or truncated piece is recomputed, never trusted
            log.warning("cache piece %s is not usable (%s): recomputing %s of %s", path, err, action, doc_id)
            return None

    def put(self, doc_id: str, action: str, key: str, piece: Piece) -> None:
        """Keep one piece (atomically; a failure to write only warns: the cache is an optimisation)."""
        from kvdiv.trajectories.store import write_document_store

        path = self.path(doc_id, action, key)
        attrs = {
            KEY_ATTR: key,
            "actions": {action: {}},
            "reference_share": piece.trajectories.reference_share,
            "press_seeds": piece.press_seeds,
            "effective_retention": piece.effective_retention,
            "compressed_prompt_tokens": piece.compressed_prompt_tokens,
            "prefill_s": piece.prefill_s,
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_document_store(path, {action: piece.trajectories}, attrs)
        except Exception as err:
            log.warning("could not keep cache piece %s (%s)", path, err)
            shutil.rmtree(path, ignore_errors=True)


def same_reference(reused: Mapping[str, Piece], computed: Mapping[str, ActionTrajectories]) -> bool:
    """Whether every reused piece's reference chain equals the one computed now (shared reference chain)."""
    if not computed:
        return True
    x = next(iter(computed.values())).x
    return all(np.array_equal(piece.trajectories.x, x) for piece in reused.values())
