"""Metrics over a cube: per-replicate divergence metrics and profiles (arXiv 2609.16617, §3–§5); rule ``metrics``
writes them to ``results/{study}/metrics/{model}/``.

Per row (document, action, replicate): τ, ``diverged``, ``occurrence``, ``exposure``, ``occupation``,
``mismatch_rate``, ``mismatch`` (M), ``risk_tv``, the EOS split, ``fixed_tv_mean``, ``risk_window``/``capacity``
(window ``analysis.window``), in swrb mode D and the SWRB estimators, ``weight`` (1, or D in swrb mode) and the
answer columns of :mod:`kvdiv.trajectories.answers`; profiles by depth (``profiles_aligned``) and by step
(``profiles_clock``); :func:`trajectory_replicates` for in-memory trajectories.
Formulas: docs/estimators.md#per-row-metrics; the files: docs/outputs.md#metrics.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import polars as pl
import xarray as xr

from kvdiv.estimands import COMPLETE_COLUMNS, SWRB_COLUMNS, first_eos_step, pair_evaluations
from kvdiv.io import read_parquet, write_parquet
from kvdiv.layout import METRIC_TABLES
from kvdiv.metric_kernels import (
    CUBE_VARIABLES,
    replicate_counts,
    COMPLETE_METRICS,
    complete_estimators,
    SWRB_METRICS,
    swrb_estimators,
    aligned_profile,
)
from kvdiv.trajectories.store import DOCUMENT_COORDS, open_cube

log = logging.getLogger(__name__)


def _plain(values) -> np.ndarray:
    """Coordinate values as a plain numpy array (strings of any numpy string dtype become ``str``)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "OTUS":
        return np.array([str(v) for v in arr.tolist()], dtype=str)
    return arr


def _array(ds: xr.Dataset, name: str, dims: tuple[str, ...]) -> np.ndarray:
    if name not in ds:
        raise KeyError(f"cube has no variable {name!r} (has {sorted(ds.data_vars)})")
    return np.ascontiguousarray(ds[name].transpose(*dims).values)


def join_answers(replicates: pl.DataFrame, answers: pl.DataFrame) -> pl.DataFrame:
    """``replicates`` with the answer columns of ``answers`` (one row per document, action, replicate; see
    :mod:`kvdiv.trajectories.answers`) and ``diverged_before_answer``; a row of either without its partner is a
    ``ValueError`` naming it."""
    keys = ["document", "action", "replicate"]
    columns = ["correct_x", "correct_y", "answer_changed", "answer_end"]
    missing = [c for c in keys + columns if c not in answers.columns]
    if missing:
        raise ValueError(f"the answers table lacks column {missing[0]!r}")
    answers = answers.select(
        pl.col("document").cast(pl.Utf8), pl.col("action").cast(pl.Utf8), pl.col("replicate").cast(pl.Int32), *columns
    )
    if answers.select(keys).is_duplicated().any():
        raise ValueError("the answers table has more than one row for a (document, action, replicate)")
    joined = replicates.join(answers.with_columns(pl.lit(True).alias("_scored")), on=keys, how="left")
    unmatched = joined.filter(pl.col("_scored").is_null())
    extra = answers.join(replicates.select(keys), on=keys, how="anti")
    for frame, what in ((unmatched, "the cube's row"), (extra, "the answers table's row")):
        if frame.height:
            r = frame.row(0, named=True)
            raise ValueError(
                f"{what} (document {r['document']!r}, action {r['action']!r}, replicate {r['replicate']}) "
                "has no partner: the answers were scored on another cube"
            )
    joined = joined.drop("_scored")
    before = (
        pl.when(pl.col("answer_end").is_null())
        .then(None)
        .otherwise(pl.col("tau").is_not_null() & (pl.col("tau") <= pl.col("answer_end")))
    )
    return joined.with_columns(before.alias("diverged_before_answer"))


def compute_metrics(
    ds: xr.Dataset, window: int, model: str | None = None, study: str | None = None, answers: pl.DataFrame | None = None
) -> dict[str, pl.DataFrame]:
    """All metric tables of one cube (see the module docstring); ``answers``: the cube's scored continuations
    (:mod:`kvdiv.trajectories.answers`), joined onto the replicates.

    Returns ``{"replicates": ..., "profiles_aligned": ..., "profiles_clock": ...}``.
    """
    if window < 1:
        raise ValueError(f"analysis.window must be >= 1, got {window}")
    dims4 = ("document", "action", "replicate", "step")
    for dim in dims4:
        if dim not in ds.dims:
            raise KeyError(f"cube lacks dimension {dim!r} (has {list(ds.dims)})")
    n_d, n_a, n_r, steps = (ds.sizes[d] for d in dims4)
    if "horizon" not in ds.attrs:
        raise KeyError("cube lacks the attribute 'horizon' (H, recorded by the trajectory job)")
    horizon = int(ds.attrs["horizon"])  # H as the trajectories recorded it, never re-derived
    if horizon != steps:
        raise ValueError(f"cube's horizon attribute {horizon} differs from its {steps} steps: a damaged cube")
    model = model or str(ds.attrs.get("model", "unknown"))
    study = study or str(ds.attrs.get("study", "unknown"))
    arrays = {name: _array(ds, name, dims4) for name in CUBE_VARIABLES}
    n = n_d * n_a * n_r
    mismatch = ~arrays["match"].astype(bool).reshape(n, horizon)
    tv = arrays["tv"].astype(np.float64).reshape(n, horizon)
    fixed_tv = arrays["fixed_tv"].astype(np.float64).reshape(n, horizon)
    eos_any = (arrays["eos_x"].astype(bool) | arrays["eos_y"].astype(bool)).reshape(n, horizon)

    tau, first_eos, sums = replicate_counts(mismatch, tv, fixed_tv, eos_any, window)
    diverged = tau <= horizon
    estimates = complete_estimators(tau, sums, horizon, window)
    complete = {name: estimates[:, COMPLETE_COLUMNS.index(column)] for name, column in COMPLETE_METRICS.items()}
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(complete["exposure"] > 0, complete["occupation"] / complete["exposure"], np.nan)

    doc_idx, act_idx, rep_idx = np.unravel_index(np.arange(n), (n_d, n_a, n_r))
    documents = _plain(ds["document"].values)
    actions = _plain(ds["action"].values)
    meta = {c: _plain(ds[c].values) for c in DOCUMENT_COORDS if c in ds.coords}
    columns = {
        "model": np.full(n, model),
        "study": np.full(n, study),
        "document": documents[doc_idx],
        **{c: v[doc_idx] for c, v in meta.items()},
        "action": actions[act_idx],
        "replicate": rep_idx.astype(np.int32),
        "horizon": np.full(n, horizon, dtype=np.int32),
        "window": np.full(n, window, dtype=np.int32),
        # one x per document × replicate for all actions ("shared") or one per action (the endings result counts x once)
        "reference_chain": np.full(n, str(ds.attrs.get("reference_chain", "per_action"))),
        "diverged": diverged,
        "occurrence": complete["occurrence"],
        "exposure": complete["exposure"],
        "occupation": complete["occupation"],
        "mismatch_rate": rate,
        "mismatch": complete["mismatch"],
        "risk_tv": sums[:, 2] / horizon,
        "fixed_tv_mean": sums[:, 3] / horizon,
        "mismatch_pre_eos": sums[:, 4] / horizon,
        "mismatch_post_eos": (sums[:, 0] - sums[:, 4]) / horizon,
        "mismatch_strict_pre_eos": sums[:, 5] / horizon,
        "risk_window": complete["risk_window"],
        "capacity": complete["capacity"],
    }
    # each chain's own first EOS step (null: none within H), the endings result's input (kvdiv.analysis.endings)
    own_eos = {
        f"first_eos_{chain}": first_eos_step(arrays[f"eos_{chain}"].astype(bool).reshape(n, horizon))
        for chain in ("x", "y")
    }
    replicates = pl.DataFrame(columns).with_columns(
        *[pl.Series(name, steps, dtype=pl.Int32).set(pl.Series(steps == 0), None) for name, steps in own_eos.items()],
        pl.Series("tau", np.where(diverged, tau, 0), dtype=pl.Int32).set(pl.Series(~diverged), None),
        pl.Series("first_eos", np.where(first_eos <= horizon, first_eos, 0), dtype=pl.Int32).set(
            pl.Series(first_eos > horizon), None
        ),
        pl.col("mismatch_rate").fill_nan(None),
    )
    swrb = "overlap_tv" in ds or ds.attrs.get("mode") == "swrb"
    weight = np.ones(n)
    if swrb:
        overlap = _array(ds, "overlap_tv", dims4).astype(np.float64).reshape(n, horizon)
        start = _array(ds, "branch_start", dims4[:3]).astype(np.int64).reshape(n)
        z = swrb_estimators(overlap, tv, start, window)
        weight = z[:, SWRB_COLUMNS.index("D")]
        replicates = replicates.with_columns(
            pl.Series("branch_start", start.astype(np.int32)),
            *(pl.Series(name, z[:, SWRB_COLUMNS.index(column)]) for name, column in SWRB_METRICS.items()),
        )
    replicates = replicates.with_columns(pl.Series("weight", weight))
    if answers is not None:
        replicates = join_answers(replicates, answers)

    row, depth, a_tv, a_m, a_pre = aligned_profile(tau, tv.astype(np.float32), mismatch, first_eos)
    aligned = pl.DataFrame(
        {
            "model": np.full(row.size, model),
            "document": documents[doc_idx[row]],
            "action": actions[act_idx[row]],
            "replicate": rep_idx[row].astype(np.int32),
            "tau": tau[row].astype(np.int32),
            "depth": depth,
            "step": (tau[row] + depth).astype(np.int32),
            "tv": a_tv,
            "mismatch": a_m,
            "pre_eos": a_pre,
            "weight": weight[row],
        }
    )

    shape = (n_d, n_a, n_r, horizon)
    if swrb:
        steps = np.arange(1, horizon + 1)
        survival_before = np.cumprod(np.concatenate([np.ones((n, 1)), 1.0 - overlap[:, :-1]], axis=1), axis=1)
        per_row = {
            "mismatch": weight[:, None] * mismatch,
            "tv": survival_before * overlap + weight[:, None] * (steps[None, :] > start[:, None]) * tv,
            "fixed_tv": np.full((n, horizon), np.nan),
            "eos": np.full((n, horizon), np.nan),
            "mismatch_pre_eos": np.full((n, horizon), np.nan),
        }
    else:
        # mismatch_pre_eos: a mismatch strictly before the first EOS of either chain (eos flags hold from it on)
        per_row = {
            "mismatch": mismatch,
            "tv": tv,
            "fixed_tv": fixed_tv,
            "eos": eos_any,
            "mismatch_pre_eos": mismatch & ~eos_any,
        }
    clock_means = {k: v.astype(np.float64).reshape(shape).mean(axis=2) for k, v in per_row.items()}
    d_i, a_i, t_i = np.unravel_index(np.arange(n_d * n_a * horizon), (n_d, n_a, horizon))
    clock = pl.DataFrame(
        {
            "model": np.full(d_i.size, model),
            "document": documents[d_i],
            "action": actions[a_i],
            "step": (t_i + 1).astype(np.int32),
            **{k: pl.Series(k, v.reshape(-1)).fill_nan(None) for k, v in clock_means.items()},
            "replicates": np.full(d_i.size, n_r, dtype=np.int32),
        }
    )
    return {"replicates": replicates, "profiles_aligned": aligned, "profiles_clock": clock}


def replicate_rows(
    mode: str, horizon: int, tau: np.ndarray, branch_start: np.ndarray | None = None, reference_share: int = 1
) -> np.ndarray:
    """Rows the samplers hand to ``session.step`` per replicate (kvdiv.trajectories): complete (1 + 1/A)(H − 1) +
    (H − τ)·1{τ ≤ H} (P at x shared by the A = ``reference_share`` actions of a shared reference chain, 1 when
    per action; Q at y; and Q at x after divergence for the fixed-history TV); swrb 2(H − 1) for the scan +
    3(H − J)·1{J > 0} for the branch. ``tau`` 1-based, H + 1 = none."""
    h = int(horizon)
    if mode == "complete":
        tau = np.asarray(tau)
        rows = (h - 1) * (1 + 1.0 / reference_share) + np.where(tau <= h, h - tau, 0)
        return rows.astype(np.float64)
    if mode == "swrb":
        j = np.asarray(branch_start)
        return (2 * (h - 1) + np.where(j > 0, 3 * (h - j), 0)).astype(np.float64)
    raise ValueError(f"mode must be 'complete' or 'swrb', got {mode!r}")


#: The columns of :func:`trajectory_replicates`.
TRAJECTORY_COLUMNS = (
    "document",
    "action",
    "mode",
    "replicate",
    "R_H",
    "R_L",
    "B_L",
    "risk_tv",
    "D",
    "J",
    "tau",
    "M_path",
    "pair_evaluations",
    "rows",
    "wall_s",
)


def trajectory_replicates(trajectories: dict, mode: str, window: int, document: str) -> pl.DataFrame:
    """Per-replicate estimates and costs of one ``generate`` call (one document, every action; module docstring).

    ``trajectories``: action → :class:`kvdiv.trajectories.base.ActionTrajectories` of ``mode``. Columns
    :data:`TRAJECTORY_COLUMNS`: R_H, R_L, B_L (complete: M, M_L, capacity; swrb: Z_R, Z_L, W_L), ``risk_tv`` = Σδ/H
    (complete; null in swrb), D and J (swrb), τ (complete; null without divergence), ``M_path`` (swrb: the mismatch
    rate along the sampled branch path, whose D-weighted moments are the complete coupling's; null in complete),
    ``pair_evaluations``
    (:func:`kvdiv.estimands.pair_evaluations`), ``rows`` (:func:`replicate_rows`, checked against the count of the
    samplers) and ``wall_s`` (the action's share of the call's time per replicate).
    """
    if mode not in ("complete", "swrb"):
        raise ValueError(f"mode must be 'complete' or 'swrb', got {mode!r}")
    if int(window) < 1:
        raise ValueError(f"window L must be >= 1, got {window}")
    frames = []
    for action, traj in trajectories.items():
        mismatch = ~np.asarray(traj.match, dtype=bool)
        n, horizon = mismatch.shape
        tv = np.ascontiguousarray(traj.tv, dtype=np.float64)
        eos_any = np.asarray(traj.eos_x, dtype=bool) | np.asarray(traj.eos_y, dtype=bool)
        cols: dict[str, object] = {"replicate": np.arange(n, dtype=np.int32)}
        if mode == "complete":
            fixed = np.ascontiguousarray(traj.fixed_tv, dtype=np.float64)
            tau, _, sums = replicate_counts(mismatch, tv, fixed, eos_any, int(window))
            diverged = tau <= horizon
            z = complete_estimators(tau, sums, horizon, int(window))
            cols |= {
                "R_H": z[:, COMPLETE_COLUMNS.index("M")],
                "R_L": z[:, COMPLETE_COLUMNS.index("M_L")],
                "B_L": z[:, COMPLETE_COLUMNS.index("W_L")],
                "risk_tv": sums[:, 2] / horizon,
                "D": np.full(n, np.nan),
                "J": np.zeros(n, dtype=np.int32),
                "tau": np.where(diverged, tau, 0).astype(np.int32),
                "M_path": np.full(n, np.nan),
                "pair_evaluations": pair_evaluations(mode, horizon, replicates=n),
                "rows": replicate_rows(mode, horizon, tau, reference_share=traj.reference_share),
            }
        else:
            if traj.overlap_tv is None or traj.branch_start is None:
                raise ValueError(f"action {action!r}: swrb trajectories lack overlap_tv/branch_start")
            j = np.asarray(traj.branch_start, dtype=np.int64)
            z = swrb_estimators(np.ascontiguousarray(traj.overlap_tv, dtype=np.float64), tv, j, int(window))
            cols |= {
                "R_H": z[:, SWRB_COLUMNS.index("Z_R")],
                "R_L": z[:, SWRB_COLUMNS.index("Z_L")],
                "B_L": z[:, SWRB_COLUMNS.index("W_L")],
                "risk_tv": np.full(n, np.nan),
                "D": z[:, SWRB_COLUMNS.index("D")],
                "J": j.astype(np.int32),
                "tau": np.zeros(n, dtype=np.int32),
                "M_path": mismatch.sum(axis=1) / horizon,
                "pair_evaluations": pair_evaluations(mode, horizon, j),
                "rows": replicate_rows(mode, horizon, None, j),
            }
        counted = float(np.sum(cols["rows"]))
        if traj.rows and not np.isclose(counted, float(traj.rows), rtol=1e-9, atol=1e-6):
            raise RuntimeError(
                f"action {action!r} ({mode}): {counted} rows reconstructed from the trajectories but the samplers "
                f"counted {traj.rows}; the row accounting of kvdiv.trajectories changed"
            )
        cols["wall_s"] = np.full(n, float(traj.wall_time_s) / n)
        frames.append(
            pl.DataFrame(cols).with_columns(
                pl.lit(str(document)).alias("document"),
                pl.lit(str(action)).alias("action"),
                pl.lit(mode).alias("mode"),
                pl.col("risk_tv").fill_nan(None),
                pl.col("D").fill_nan(None),
                pl.col("M_path").fill_nan(None),
                pl.when(pl.col("tau") > 0).then(pl.col("tau")).otherwise(None).alias("tau"),
            )
        )
    return pl.concat(frames).select(TRAJECTORY_COLUMNS)


def write_metrics(
    cube: str | Path,
    out_dir: str | Path,
    window: int,
    model: str | None = None,
    study: str | None = None,
    answers: str | Path | None = None,
) -> dict[str, Path]:
    """Compute the metrics of cube store ``cube`` and write the Parquet files of :data:`kvdiv.layout.METRIC_TABLES`
    into ``out_dir`` (``{table}.parquet``, as :func:`kvdiv.layout.metrics_file` names them); ``answers``: the
    Parquet of the cube's scored continuations (:func:`kvdiv.layout.answers`), joined onto the replicates."""
    ds = open_cube(cube)
    log.info("cube %s: %s", cube, dict(ds.sizes))
    scored = read_parquet(answers) if answers is not None else None
    tables = compute_metrics(ds, window, model=model, study=study, answers=scored)
    out_dir = Path(out_dir)
    paths = {}
    for name in METRIC_TABLES:
        frame = tables[name]
        path = out_dir / f"{name}.parquet"
        write_parquet(frame, path)  # + its checksum file, which the next rule verifies
        log.info("wrote %s (%d rows)", path, frame.height)
        paths[name] = path
    return paths
