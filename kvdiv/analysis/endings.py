"""Where the chains end: per action, the first-EOS steps of x and y and the share of pairs that reach H with neither
ended, from a cube or from a study's metrics (their replicates' ``first_eos_x``/``first_eos_y``, rule ``metrics``).

For a pair (document d, action a, replicate r) the **first-EOS step** of x is the smallest t in 1..H with
``eos_x[d, a, r, t]`` (the chain emitted EOS at step t; none within H: no step), likewise y. The pair **reaches H with
neither ended** when neither chain emits EOS in steps 1..H; it is **running at step t** (t = 0..H) while neither has
emitted EOS in steps 1..t. Shares are over pairs, pooled over the group's documents as the mean of document means
(each document weighs the same whatever its replicates), with cluster-bootstrap intervals over documents. With
``reference_chain: shared`` every action of a replicate has the same x, so x's rows repeat across actions.
Complete mode only: swrb stores hold the residual branch path, not samples of P and Q.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from kvdiv.analysis.bootstrap import cluster_bootstrap, stat_seed
from kvdiv.analysis.inputs import is_swrb
from kvdiv.estimands import first_eos_step

#: Quantiles of the first-EOS step that :func:`eos_summary` reports, over all chains of a group (a chain that does not
#: end within H counts as ending after H, so a quantile not reached by step H is null: "> H").
QUANTILES = {"q25": 0.25, "median": 0.5, "q75": 0.75}
#: Document coordinates a table may be grouped by besides the action (``model``: metrics only).
GROUPS = ("model", "family", "task", "stratum", "target_length")


def censored_quantiles(steps: np.ndarray) -> dict[str, float | None]:
    """:data:`QUANTILES` of first-EOS steps (0: the chain did not end within H, i.e. it ends after H): the smallest step
    s with at least a share q of the chains ended by s (the inverse of the empirical distribution); null when fewer
    than q have ended by H, and for no chains."""
    if steps.size == 0:
        return dict.fromkeys(QUANTILES)
    ended = np.sort(steps[steps > 0]).astype(float)
    out: dict[str, float | None] = {}
    for name, q in QUANTILES.items():
        k = int(np.ceil(q * steps.size - 1e-9))  # the k-th smallest step (1-based), k = ⌈q n⌉
        out[name] = float(ended[max(k, 1) - 1]) if k <= ended.size else None
    return out


def step_summary(steps: np.ndarray, prefix: str = "") -> dict[str, float | int | None]:
    """Of first-EOS steps (0: none within H): ``{prefix}n_ended``, the ``{prefix}mean_step`` of the chains that end,
    and ``{prefix}{q}_step`` for each of :data:`QUANTILES` over all of them (:func:`censored_quantiles`)."""
    ended = steps[steps > 0].astype(float)
    out: dict[str, float | int | None] = {
        f"{prefix}n_ended": int(ended.size),
        f"{prefix}mean_step": float(ended.mean()) if ended.size else None,
    }
    return out | {f"{prefix}{name}_step": value for name, value in censored_quantiles(steps).items()}


def _pairs(source: Any, by: Sequence[str]) -> tuple[pl.DataFrame, int]:
    """One row per pair: document, the ``by`` keys, replicate, first-EOS steps of x and y (0: none); and H.
    ``source``: a cube (xarray Dataset), or metrics (:class:`kvdiv.analysis.inputs.Metrics` or its replicates)."""
    unknown = [k for k in by if k != "action" and k not in GROUPS]
    if unknown:
        raise ValueError(f"endings: cannot group by {unknown[0]!r}; use 'action' and any of {', '.join(GROUPS)}")
    replicates = getattr(source, "replicates", source)
    if isinstance(replicates, pl.DataFrame):
        return _metric_pairs(replicates, by)
    ds = source
    mode = ds.attrs.get("mode", "complete")
    if mode != "complete":
        raise ValueError(
            f"endings: the cube of study {ds.attrs.get('study', '?')!r} ran in mode {mode!r}, whose stored chains are "
            f"the residual branch path, not samples of P and Q; the first-EOS steps need a study in mode 'complete'"
        )
    dims = ("document", "action", "replicate", "step")
    fx = first_eos_step(ds["eos_x"].transpose(*dims).values)
    fy = first_eos_step(ds["eos_y"].transpose(*dims).values)
    index = np.indices(fx.shape).reshape(3, -1)

    def values(name: str) -> np.ndarray:  # a coordinate as plain numpy (zarr strings come as numpy.StringDType)
        return np.array(ds[name].values.tolist())

    columns: dict[str, Any] = {
        "document": values("document")[index[0]],
        "action": values("action")[index[1]],
        "replicate": index[2],
        "first_eos_x": fx.reshape(-1),
        "first_eos_y": fy.reshape(-1),
    }
    for key in by:
        if key == "model":  # a cube holds one model (its attribute)
            columns[key] = np.full(fx.size, str(ds.attrs.get("model", "unknown")))
        elif key != "action":
            columns[key] = values(key)[index[0]]
    return pl.DataFrame(columns), int(ds.sizes["step"])


def _metric_pairs(replicates: pl.DataFrame, by: Sequence[str]) -> tuple[pl.DataFrame, int]:
    """:func:`_pairs` from a study's metric replicates (one row per document × action × replicate)."""
    if is_swrb(replicates):
        raise ValueError(
            "endings: these metrics come from a study in mode 'swrb', whose stored chains are the residual branch "
            "path, not samples of P and Q; the first-EOS steps need a study in mode 'complete'"
        )
    missing = [c for c in ("first_eos_x", "first_eos_y", "horizon", *by) if c not in replicates.columns]
    if missing:
        raise ValueError(f"endings: the metrics lack column {missing[0]!r} (metrics written by an older kvdiv?)")
    horizons = replicates["horizon"].unique().to_list()
    if len(horizons) != 1:
        raise ValueError(f"endings: the metrics mix horizons {sorted(horizons)}; one study has one H")
    pairs = replicates.select(
        "document",
        *by,
        "replicate",
        pl.col("first_eos_x").fill_null(0).cast(pl.Int64),
        pl.col("first_eos_y").fill_null(0).cast(pl.Int64),
    )
    return pairs, int(horizons[0])


def _groups(pairs: pl.DataFrame, by: Sequence[str]):
    keys = list(by)
    for values, sub in sorted(pairs.group_by(keys, maintain_order=True), key=lambda kv: tuple(map(str, kv[0]))):
        yield dict(zip(keys, values)), sub


def _document_means(sub: pl.DataFrame, columns: dict[str, pl.Expr]) -> dict[str, np.ndarray]:
    """Per document of ``sub``: the replicate means of each indicator in ``columns``, as arrays [n_documents]."""
    means = sub.group_by("document", maintain_order=True).agg(
        **{name: expr.cast(pl.Float64).mean() for name, expr in columns.items()}
    )
    return {name: means[name].to_numpy() for name in columns}


def eos_summary(
    cube: Any,
    by: Sequence[str] = ("action",),
    *,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> pl.DataFrame:
    """Per group of ``by`` (the action, and any of :data:`GROUPS`): the documents and pairs, the shares of pairs whose
    x ended, whose y ended, and that reach H with neither ended (``neither_ended``, with its cluster-bootstrap interval
    ``neither_lower``/``neither_upper``), and per chain the number of chains that end and their mean first-EOS step,
    and the :data:`QUANTILES` of the first-EOS step over all the group's chains (:func:`censored_quantiles`; null: not
    reached by H). With ``reference_chain: shared`` x repeats across actions: :func:`reference_summary` counts it once.
    ``cube``: the cube as an xarray Dataset (:func:`kvdiv.trajectories.store.open_cube`, which verifies it), or the
    study's metrics."""
    pairs, horizon = _pairs(cube, by)
    rows = []
    for keys, sub in _groups(pairs, by):
        x_ended, y_ended = pl.col("first_eos_x") > 0, pl.col("first_eos_y") > 0
        doc = _document_means(sub, {"x": x_ended, "y": y_ended, "neither": ~x_ended & ~y_ended})
        res = cluster_bootstrap(doc, lambda m: dict(m), n_boot, stat_seed(seed, "endings", *keys.values()), confidence)
        row = {**keys, "horizon": horizon, "n_documents": len(doc["x"]), "n_pairs": sub.height}
        row.update(x_ended=float(res["x"][0]), y_ended=float(res["y"][0]))
        row.update(
            neither_ended=float(res["neither"][0]),
            neither_lower=float(res["neither"][1]),
            neither_upper=float(res["neither"][2]),
        )
        for chain in ("x", "y"):
            row.update(step_summary(sub[f"first_eos_{chain}"].to_numpy(), f"{chain}_"))
        rows.append(row)
    return pl.DataFrame(rows, schema_overrides={f"{c}_{q}_step": pl.Float64 for c in "xy" for q in QUANTILES})


def _reference_chains(source: Any, by: Sequence[str]) -> tuple[pl.DataFrame, int]:
    """One row per full-cache chain x: document, the ``by`` keys (not the action), replicate, its first-EOS step; and
    H. With ``reference_chain: shared`` (the cube's attribute, the metrics' column) a document × replicate has one x
    for all actions (checked), else each action has its own."""
    if "action" in by:
        raise ValueError("endings: the full-cache chains are grouped without 'action' (shared across actions)")
    replicates = getattr(source, "replicates", source)
    if isinstance(replicates, pl.DataFrame):
        if "reference_chain" not in replicates.columns:
            raise ValueError("endings: the metrics lack column 'reference_chain' (metrics written by an older kvdiv?)")
        shared = set(replicates["reference_chain"].unique().to_list()) == {"shared"}
    else:
        shared = source.attrs.get("reference_chain") == "shared"
    pairs, horizon = _pairs(source, [*by, "action"])
    if not shared:
        return pairs.select("document", *by, "action", "replicate", "first_eos_x"), horizon
    keys = ["document", *by, "replicate"]
    chains = pairs.group_by(keys, maintain_order=True).agg(
        pl.col("first_eos_x").first(), pl.col("first_eos_x").n_unique().alias("_versions")
    )
    if chains["_versions"].max() != 1:
        raise ValueError("endings: reference_chain is 'shared' but a document's actions hold different x chains")
    return chains.drop("_versions"), horizon


def reference_summary(
    cube: Any,
    by: Sequence[str] = ("model",),
    *,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> pl.DataFrame:
    """Per group of ``by`` (any of :data:`GROUPS`, not the action): the full-cache chains x, each counted once (one
    per document × replicate with ``reference_chain: shared``): documents, chains, the share reaching H without EOS
    (``reached``, mean of document means, with its cluster-bootstrap interval), the chains that end, their mean
    first-EOS step, and the :data:`QUANTILES` of the first-EOS step over all chains (:func:`censored_quantiles`)."""
    chains, horizon = _reference_chains(cube, by)
    rows = []
    for keys, sub in _groups(chains, by):
        doc = _document_means(sub, {"reached": pl.col("first_eos_x") == 0})
        res = cluster_bootstrap(
            doc, lambda m: dict(m), n_boot, stat_seed(seed, "reference", *keys.values()), confidence
        )
        row = {**keys, "horizon": horizon, "n_documents": len(doc["reached"]), "n_chains": sub.height}
        row.update(
            reached=float(res["reached"][0]),
            reached_lower=float(res["reached"][1]),
            reached_upper=float(res["reached"][2]),
        )
        row.update(step_summary(sub["first_eos_x"].to_numpy()))
        rows.append(row)
    return pl.DataFrame(rows, schema_overrides={f"{q}_step": pl.Float64 for q in QUANTILES})


def running_by_step(cube: Any, by: Sequence[str] = ("action",)) -> pl.DataFrame:
    """Per group of ``by`` and step t = 0..H: the shares of pairs whose x, whose y, and whose both chains are still
    running after step t (no EOS in steps 1..t; 1 at t = 0), means of document means — the survival functions of the
    first-EOS steps; ``both_running`` at t = H is :func:`eos_summary`'s ``neither_ended``."""
    pairs, horizon = _pairs(cube, by)
    steps = np.arange(horizon + 1)
    frames = []
    for keys, sub in _groups(pairs, by):
        fx, fy = sub["first_eos_x"].to_numpy(), sub["first_eos_y"].to_numpy()
        x_run = (fx[:, None] == 0) | (fx[:, None] > steps[None, :])
        y_run = (fy[:, None] == 0) | (fy[:, None] > steps[None, :])
        docs, inverse = np.unique(sub["document"].to_numpy(), return_inverse=True)
        counts = np.bincount(inverse, minlength=docs.size)[:, None]

        def share(indicator: np.ndarray) -> np.ndarray:
            per_doc = np.zeros((docs.size, steps.size))
            np.add.at(per_doc, inverse, indicator.astype(float))
            return (per_doc / counts).mean(axis=0)

        frame = {
            **{k: [v] * steps.size for k, v in keys.items()},
            "step": steps,
            "x_running": share(x_run),
            "y_running": share(y_run),
            "both_running": share(x_run & y_run),
            "n_documents": [docs.size] * steps.size,
        }
        frames.append(pl.DataFrame(frame))
    return pl.concat(frames)
