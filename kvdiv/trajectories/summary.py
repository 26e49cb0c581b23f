"""A trajectory store or cube in numbers: per action the replicates, divergence fraction P̂(τ ≤ H), mean
first-divergence step (mean τ over diverged replicates), mismatch rate M, mean δ_t, mean fixed-history TV and EOS
rates (the fraction of chains that emitted EOS by step H), and the table ``kvdiv inspect`` prints of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kvdiv.trajectories.store import (
    cube_coords,
    is_cube,
    read_attrs,
    read_cube_action,
    read_document_store,
    verify_store,
)


def document_study(document: dict) -> str | None:
    """The study of a document record: its ``study`` field, else the prefix of its id ``{study}-{stratum}-{i:04d}``."""
    if document.get("study"):
        return str(document["study"])
    doc_id, stratum = str(document.get("id") or ""), str(document.get("stratum") or "")
    suffix = f"-{stratum}-"
    if stratum and suffix in doc_id:
        return doc_id[: doc_id.rindex(suffix)] or None
    return None


def action_summary(
    match: np.ndarray, tv: np.ndarray, fixed_tv: np.ndarray, eos_x: np.ndarray, eos_y: np.ndarray
) -> dict[str, Any]:
    """Summary of arrays shaped (..., step); leading axes are flattened into replicates."""
    horizon = match.shape[-1]
    match = match.reshape(-1, horizon)
    diverged = ~match.all(axis=1)
    tau = np.argmax(~match, axis=1) + 1  # 1-based first mismatch (valid where diverged)
    return {
        "replicates": int(match.shape[0]),
        "divergence_fraction": float(diverged.mean()),
        "mean_tau": float(tau[diverged].mean()) if diverged.any() else None,
        "mismatch_rate": float((~match).mean()),
        "mean_tv": float(np.mean(tv)),
        "mean_fixed_tv": float(np.mean(fixed_tv)),
        "eos_rate_x": float(eos_x.reshape(-1, horizon)[:, -1].mean()),
        "eos_rate_y": float(eos_y.reshape(-1, horizon)[:, -1].mean()),
    }


def summarize(path: str | Path) -> dict[str, Any]:
    """A JSON-ready summary of a per-document store or a cube (verified first: an incomplete or corrupt store
    is a :class:`kvdiv.trajectories.store.CorruptStoreError` naming it and the array)."""
    path = Path(path)
    names = ("match", "tv", "fixed_tv", "eos_x", "eos_y")
    if is_cube(path):
        verify_store(path)
        attrs = read_attrs(path)
        coords = cube_coords(path)
        actions = [str(a) for a in coords["action"]]
        documents = [str(d) for d in coords["document"]]
        per_action = {}
        for a in actions:
            data = read_cube_action(path, a, verify=False)
            per_action[a] = action_summary(*(data[n] for n in names))
        kind = "cube"
    else:
        attrs, data = read_document_store(path)
        actions = list(data)
        documents = [str(attrs.get("document", {}).get("id", path.stem))]
        per_action = {a: action_summary(*(data[a][n] for n in names)) for a in actions}
        kind = "document"
    return {
        "store": str(path),
        "kind": kind,
        "study": attrs.get("study") or document_study(attrs.get("document") or {}),
        "model": attrs.get("model"),
        "mode": attrs.get("mode"),
        "horizon": attrs.get("horizon"),
        "temperature": attrs.get("temperature"),
        "evict_first_step": attrs.get("evict_first_step"),
        "reference_chain": attrs.get("reference_chain"),
        "documents": documents,
        "actions": per_action,
        "wall_time_s": attrs.get("wall_time_s"),
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def format_summary(summary: dict[str, Any]) -> str:
    """The human-readable table ``kvdiv inspect`` prints."""
    docs = summary["documents"]
    lines = [
        f"{summary['kind']} store {summary['store']}",
        f"model {summary['model']}  mode {summary['mode']}  H={summary['horizon']}  T={summary['temperature']}"
        + (f"  reference chain {summary['reference_chain']}" if summary.get("reference_chain") else "")
        + (f"  study {summary['study']}" if summary.get("study") else ""),
        f"documents: {len(docs)}" + (f" ({', '.join(docs[:5])}{', ...' if len(docs) > 5 else ''})" if docs else ""),
    ]
    cols = ["action", "replicates", "diverged", "mean tau", "mismatch", "mean tv", "fixed tv", "eos x", "eos y"]
    keys = [
        "replicates",
        "divergence_fraction",
        "mean_tau",
        "mismatch_rate",
        "mean_tv",
        "mean_fixed_tv",
        "eos_rate_x",
        "eos_rate_y",
    ]
    rows = [[a] + [_fmt(s[k]) for k in keys] for a, s in summary["actions"].items()]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)
