"""Complete coupling vs residual-branch conditional Monte Carlo (SWRB) on a real model (arXiv 2609.16617, §4).

The finite-state study (:mod:`kvdiv.finite_study`) compares the two samplers on enumerable systems; this
module does the same for trajectories of an LLM (:func:`kvdiv.generation.generate`), per (document,
action), from R replicates of each mode drawn from independent streams.

**Per replicate** (:func:`replicate_frame`; window L, horizon H), the estimate of each quantity:

=====  ==============================================  ================================================
key    complete mode (one coupled sample)              swrb mode (conditional on the overlap path)
=====  ==============================================  ================================================
R_H    M = (1/H) Σ_t 1{x_t ≠ y_t}                      Z_R = D(1 + Σ_{t>J} δ_t)/H
R_L    M_L = (1{τ≤H} + Σ_{ℓ=1}^{min(L,H−τ)} 1{x_{τ+ℓ}≠y_{τ+ℓ}})/H   Z_L = D(1 + Σ_{t=J+1}^{min(J+L,H)} δ_t)/H
B_L    max(0, H − τ − L)/H · 1{τ ≤ H}                  W_L = D max(0, H − J − L)/H
=====  ==============================================  ================================================

(computed by :func:`kvdiv.estimators.replicate_counts` and :func:`kvdiv.estimators.swrb_estimators`, the
workflow's own estimators), and ``risk_tv`` = (1/H) Σ_t δ_t in complete mode (also unbiased for R_H).

**Costs per replicate.** ``pair_evaluations``, the paper's count of kernel-pair evaluations: H for a
complete sample, H + (H − J) for SWRB (J = 0, no branch: H). ``rows``: the rows the generation code hands to
``session.step`` (what a forward pass costs): complete 2(H − 1) + (H − τ)·1{τ ≤ H} (P at x, Q at y, and Q at
x after divergence, for the fixed-history TV); swrb 2(H − 1) for the scan + 3(H − J)·1{J > 0} for the branch.
Their sum over replicates is checked against the generation's own count. ``wall_s``: the action's share of
its ``generate`` call (apportioned by rows, :class:`kvdiv.generation.ActionTrajectories`) per replicate.

**Per (document, action)** (:func:`comparison_table`): means, per-replicate variances (ddof 1) and standard
errors of each mode, the variance ratio Var(complete)/Var(swrb) per key, cost ratios c̄_swrb/c̄_complete,
``advantage`` = variance ratio / evaluation ratio, and z = (mean_complete − mean_swrb)/√(se_c² + se_s²).

**Aggregates** (:func:`retention_summary`) use the finite study's definitions (:func:`kvdiv.finite_study.
suite_aggregates`, cells in place of systems): min/median/max of the variance ratios, the mean of the
per-cell cost ratios, and the variance–cost advantage as a ratio of means,
mean(Var(M)·c̄_complete) / mean(Var(Z_R)·c̄_swrb), and beside them the pooled variance ratio
mean(Var(M)) / mean(Var(Z_R)) (robust where rare divergence leaves a cell's complete replicates all 0); intervals are percentile intervals of a cluster
bootstrap over documents (:func:`kvdiv.analysis.bootstrap_counts`: a document's cells travel together).

**Agreement** (:func:`agreement_table`; E[M] = E[Z_R] = R_H, E[M_L] = E[Z_L] = R_L, E[capacity] = E[W_L] = B_L:
both modes are unbiased): per group of cells i with mean differences d_i = m̄_complete − m̄_swrb, the pooled
z = Σ d_i / √(Σ (se_c² + se_s²)) with within-cell standard errors (the criterion), and beside it the
across-cells t = mean(d)/(sd(d)/√n) on n − 1 df (:func:`across_cells_t`), which needs no within-cell standard
error — a complete cell whose R replicates never diverged has se 0, an underestimate.

**Enclosure** (:func:`action_enclosures`, paper §4.3): per action, the (1 − α) enclosure of the
document-average R_H, [LCB(Z_L), UCB(Z_L + W_L)] each at α/2, from per-document means of the sampled
profiles (:func:`kvdiv.finite_sampling.enclosure`; the spread across documents carries both the
between-document and the within-document variance).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import polars as pl
from scipy.stats import t as student_t

from kvdiv.analysis import bootstrap_counts
from kvdiv.estimators import replicate_counts, swrb_estimators
from kvdiv.finite_sampling import enclosure
from kvdiv.finite_study import suite_aggregates

MODES = ("complete", "swrb")
#: Quantities estimated per replicate in both modes (DESIGN.md: R_H, R_L, B_L).
KEYS = ("R_H", "R_L", "B_L")
#: Cost columns and the names their ratios and advantages take.
COSTS = {"pair_evaluations": "evaluation", "rows": "rows", "wall_s": "wall"}


def replicate_rows(mode: str, horizon: int, tau: np.ndarray, branch_start: np.ndarray | None = None) -> np.ndarray:
    """Rows handed to ``session.step`` per replicate (module docstring); ``tau`` 1-based, H + 1 = none."""
    H = int(horizon)
    if mode == "complete":
        tau = np.asarray(tau)
        return 2 * (H - 1) + np.where(tau <= H, H - tau, 0)
    if mode == "swrb":
        j = np.asarray(branch_start)
        return 2 * (H - 1) + np.where(j > 0, 3 * (H - j), 0)
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def pair_evaluations(mode: str, horizon: int, branch_start: np.ndarray | None = None, replicates: int = 0) -> np.ndarray:
    """Kernel-pair evaluations per replicate as the paper counts them: H (complete); H + (H − J) (swrb)."""
    H = int(horizon)
    if mode == "complete":
        return np.full(int(replicates), H, dtype=np.int64)
    if mode == "swrb":
        j = np.asarray(branch_start, dtype=np.int64)
        return H + np.where(j > 0, H - j, 0)
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def replicate_frame(trajectories: Mapping, mode: str, window: int, document: str) -> pl.DataFrame:
    """Per-replicate estimates and costs of one ``generate`` call (one document, every action).

    ``trajectories``: action → :class:`kvdiv.generation.ActionTrajectories` of ``mode``. Columns:
    document, action, mode, replicate, R_H, R_L, B_L, risk_tv (complete; null in swrb), D and J (swrb),
    tau (complete, null without divergence), pair_evaluations, rows, wall_s.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if int(window) < 1:
        raise ValueError(f"window L must be >= 1, got {window}")
    frames = []
    for action, traj in trajectories.items():
        mismatch = ~np.asarray(traj.match, dtype=bool)
        n, H = mismatch.shape
        tv = np.ascontiguousarray(traj.tv, dtype=np.float64)
        eos_any = np.asarray(traj.eos_x, dtype=bool) | np.asarray(traj.eos_y, dtype=bool)
        cols: dict[str, object] = {"replicate": np.arange(n, dtype=np.int32)}
        if mode == "complete":
            fixed = np.ascontiguousarray(traj.fixed_tv, dtype=np.float64)
            tau, _, sums = replicate_counts(mismatch, tv, fixed, eos_any, int(window))
            diverged = tau <= H
            occurrence = diverged / H
            cols |= {
                "R_H": sums[:, 0] / H,
                "R_L": occurrence + sums[:, 6] / H,
                "B_L": np.where(diverged, np.maximum(0, H - tau - window) / H, 0.0),
                "risk_tv": sums[:, 2] / H,
                "D": np.full(n, np.nan),
                "J": np.zeros(n, dtype=np.int32),
                "tau": np.where(diverged, tau, 0).astype(np.int32),
                "pair_evaluations": pair_evaluations(mode, H, replicates=n),
                "rows": replicate_rows(mode, H, tau),
            }
        else:
            if traj.overlap_tv is None or traj.branch_start is None:
                raise ValueError(f"action {action!r}: swrb trajectories lack overlap_tv/branch_start")
            j = np.asarray(traj.branch_start, dtype=np.int64)
            z = swrb_estimators(np.ascontiguousarray(traj.overlap_tv, dtype=np.float64), tv, j, int(window))
            cols |= {
                "R_H": z[:, 3],
                "R_L": z[:, 4],
                "B_L": z[:, 6],
                "risk_tv": np.full(n, np.nan),
                "D": z[:, 0],
                "J": j.astype(np.int32),
                "tau": np.zeros(n, dtype=np.int32),
                "pair_evaluations": pair_evaluations(mode, H, j),
                "rows": replicate_rows(mode, H, None, j),
            }
        counted = int(np.sum(cols["rows"]))
        if traj.rows and counted != int(traj.rows):
            raise RuntimeError(
                f"action {action!r} ({mode}): {counted} rows reconstructed from the trajectories but the generation "
                f"counted {traj.rows}; the row accounting of kvdiv.generation changed"
            )
        cols["wall_s"] = np.full(n, float(traj.wall_time_s) / n)
        frame = pl.DataFrame(cols).with_columns(
            pl.lit(str(document)).alias("document"), pl.lit(str(action)).alias("action"), pl.lit(mode).alias("mode"),
            pl.col("risk_tv").fill_nan(None), pl.col("D").fill_nan(None),
            pl.when(pl.col("tau") > 0).then(pl.col("tau")).otherwise(None).alias("tau"),
        )
        frames.append(frame)
    order = ["document", "action", "mode", "replicate", *KEYS, "risk_tv", "D", "J", "tau", *COSTS]
    return pl.concat(frames).select(order)


def _moments(values: np.ndarray) -> tuple[float, float, float]:
    n = len(values)
    mean = float(values.mean())
    var = float(values.var(ddof=1)) if n > 1 else math.nan
    return mean, var, math.sqrt(var / n) if n > 1 else math.nan


def _ratio(num: float, den: float) -> float:
    if den > 0:
        return num / den
    return math.nan if num == 0 or math.isnan(num) else math.inf


def comparison_table(replicates: pl.DataFrame, retention: Mapping[str, float] | None = None) -> pl.DataFrame:
    """One row per (document, action) from :func:`replicate_frame` rows of both modes (module docstring).

    Columns: document, action, retention (from ``retention``: action → kept fraction; null if absent),
    replicates_complete/_swrb; for K in R_H, R_L, B_L: ``{mode}_mean_K``, ``{mode}_var_K``, ``{mode}_se_K``,
    ``variance_ratio_K`` and ``z_K``; ``complete_var_risk_tv`` and ``variance_ratio_risk_tv`` (the
    complete mode's TV-integrated estimator against Z_R); mean costs ``{mode}_{cost}`` for pair_evaluations,
    rows, wall_s, the ratios ``evaluation_ratio``, ``rows_ratio``, ``wall_ratio`` (swrb/complete) and
    ``advantage``, ``advantage_rows``, ``advantage_wall`` (variance ratio of R_H / the cost ratio).
    """
    missing = [c for c in ("document", "action", "mode", *KEYS, "risk_tv", *COSTS) if c not in replicates.columns]
    if missing:
        raise KeyError(f"replicate frame lacks columns {missing}")
    rows = []
    for (document, action), cell in replicates.group_by(["document", "action"], maintain_order=True):
        by_mode = {m: cell.filter(pl.col("mode") == m) for m in MODES}
        for m, part in by_mode.items():
            if part.height < 2:
                raise ValueError(f"document {document!r}, action {action!r}: {part.height} {m} replicates (need >= 2)")
        row: dict[str, object] = {
            "document": document,
            "action": action,
            "retention": None if retention is None else retention.get(action),
            "replicates_complete": by_mode["complete"].height,
            "replicates_swrb": by_mode["swrb"].height,
        }
        for key in KEYS:
            for m in MODES:
                mean, var, se = _moments(by_mode[m][key].to_numpy().astype(float))
                row[f"{m}_mean_{key}"], row[f"{m}_var_{key}"], row[f"{m}_se_{key}"] = mean, var, se
            row[f"variance_ratio_{key}"] = _ratio(row[f"complete_var_{key}"], row[f"swrb_var_{key}"])
            se = math.hypot(row[f"complete_se_{key}"], row[f"swrb_se_{key}"])
            diff = row[f"complete_mean_{key}"] - row[f"swrb_mean_{key}"]
            row[f"z_{key}"] = diff / se if se > 0 else (0.0 if diff == 0 else math.copysign(math.inf, diff))
        _, row["complete_var_risk_tv"], _ = _moments(by_mode["complete"]["risk_tv"].to_numpy().astype(float))
        row["variance_ratio_risk_tv"] = _ratio(row["complete_var_risk_tv"], row["swrb_var_R_H"])
        for cost, name in COSTS.items():
            for m in MODES:
                row[f"{m}_{cost}"] = float(by_mode[m][cost].mean())
            row[f"{name}_ratio"] = _ratio(row[f"swrb_{cost}"], row[f"complete_{cost}"])
            suffix = "" if name == "evaluation" else f"_{name}"
            row[f"advantage{suffix}"] = _ratio(row["variance_ratio_R_H"], row[f"{name}_ratio"])
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def suite_frame(table: pl.DataFrame, key: str = "R_H", cost: str = "pair_evaluations") -> pl.DataFrame:
    """The cells of :func:`comparison_table` in the finite study's column names (naive = complete), so that
    :func:`kvdiv.finite_study.suite_aggregates` computes their aggregates."""
    if cost not in COSTS:
        raise ValueError(f"cost must be one of {list(COSTS)}, got {cost!r}")
    return table.select(
        pl.col(f"complete_var_{key}").alias("naive_variance"),
        pl.col(f"swrb_var_{key}").alias("swrb_variance"),
        pl.col(f"complete_{cost}").alias("naive_evaluations"),
        pl.col(f"swrb_{cost}").alias("swrb_evaluations"),
        pl.col(f"variance_ratio_{key}").alias("variance_ratio"),
    ).with_columns(
        (pl.col("swrb_evaluations") / pl.col("naive_evaluations")).alias("evaluation_ratio"),
    ).with_columns((pl.col("variance_ratio") / pl.col("evaluation_ratio")).alias("advantage"))


def _aggregates(table: pl.DataFrame, key: str, cost: str) -> dict[str, float]:
    """The finite study's aggregates (:func:`kvdiv.finite_study.suite_aggregates`) of the cells of ``table``.

    A cell whose modes both have zero variance (no divergence in any replicate) has no variance ratio: it is
    left out of min/median/max; it adds 0 to both sums of the ratio of means and counts in the cost ratio.
    """
    frame = suite_frame(table, key, cost)
    ratios = frame.filter(pl.col("variance_ratio").is_not_nan())
    with np.errstate(invalid="ignore", divide="ignore"):
        every = suite_aggregates(frame)
        spread = suite_aggregates(ratios) if ratios.height else {k: math.nan for k in every}
    return {
        "variance_ratio_min": spread["variance_ratio_min"],
        "variance_ratio_median": spread["variance_ratio_median"],
        "variance_ratio_max": spread["variance_ratio_max"],
        "evaluation_ratio_mean": every["evaluation_ratio_mean"],
        "advantage_ratio_of_means": every["advantage_ratio_of_means"],
        "variance_ratio_of_means": _ratio(float(frame["naive_variance"].mean()), float(frame["swrb_variance"].mean())),
    }


STATISTICS = ("variance_ratio_median", "variance_ratio_min", "variance_ratio_max", "evaluation_ratio_mean",
              "advantage_ratio_of_means", "variance_ratio_of_means")


def retention_summary(
    table: pl.DataFrame,
    *,
    key: str = "R_H",
    cost: str = "pair_evaluations",
    by: str = "retention",
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> pl.DataFrame:
    """Per group ``by`` (default: retention; ``None``: all cells): the finite study's aggregates of
    ``key``'s variance ratio and ``cost``, each with a percentile interval of a cluster bootstrap over
    documents (``{stat}_lo``, ``{stat}_hi``), plus the number of cells, documents, cells with zero variance in both
    modes (no ratio) and in the complete mode (ratio 0: no divergence among its R replicates).
    ``variance_ratio_of_means`` = mean Var(complete)/mean Var(swrb) over the cells (the advantage at equal cost).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    groups = [(None, table)] if by is None else table.sort(by).group_by(by, maintain_order=True)
    out = []
    for value, cell in groups:
        value = value[0] if isinstance(value, tuple) else value
        documents = cell["document"].unique(maintain_order=True).to_list()
        point = _aggregates(cell, key, cost)
        counts = bootstrap_counts(len(documents), int(n_boot), int(seed))
        parts = cell.partition_by("document", as_dict=True)
        parts = {k[0] if isinstance(k, tuple) else k: v for k, v in parts.items()}
        draws = {s: [] for s in STATISTICS}
        for weights in counts:
            resample = pl.concat([parts[d] for d, c in zip(documents, weights) for _ in range(int(c))])
            agg = _aggregates(resample, key, cost)
            for s in STATISTICS:
                draws[s].append(agg[s])
        row = {by or "group": value if by else "all", "cells": cell.height, "documents": len(documents),
               "zero_variance_cells": int(cell[f"variance_ratio_{key}"].is_nan().sum()),
               "complete_zero_variance_cells": int((cell[f"complete_var_{key}"] == 0).sum())}
        alpha = (1 - confidence) / 2
        for s in STATISTICS:
            d = np.asarray(draws[s], dtype=float)
            d = d[~np.isnan(d)]
            row[s] = point[s]
            row[f"{s}_lo"] = float(np.quantile(d, alpha)) if d.size else math.nan
            row[f"{s}_hi"] = float(np.quantile(d, 1 - alpha)) if d.size else math.nan
        out.append(row)
    return pl.DataFrame(out, infer_schema_length=None)


def pooled_z(mean_diff: np.ndarray, se: np.ndarray) -> float:
    """Pooled z of cells' mean differences with their within-cell standard errors: Σ diff / √(Σ se²)."""
    diff, se = np.asarray(mean_diff, float), np.asarray(se, float)
    total = math.sqrt(float(np.sum(se**2)))
    return float(diff.sum() / total) if total > 0 else (0.0 if not diff.any() else math.copysign(math.inf, diff.sum()))


def across_cells_t(mean_diff: np.ndarray) -> tuple[float, float]:
    """t = mean(d)/(sd(d)/√n) over independent cells and its two-sided p on n − 1 df.

    With independent differences d_i of mean 0 and any variances σ_i², E[sd²] = Σσ_i²/n, so sd²/n is an
    unbiased estimate of Var(mean d) that needs no within-cell standard error (those are 0 when a rare
    divergence never showed in a cell's R complete replicates).
    """
    d = np.asarray(mean_diff, float)
    n = d.size
    if n < 2:
        return math.nan, math.nan
    sd = float(d.std(ddof=1))
    if sd == 0:
        return (0.0, 1.0) if not d.any() else (math.copysign(math.inf, d.mean()), 0.0)
    t = float(d.mean() / (sd / math.sqrt(n)))
    return t, float(2 * student_t.sf(abs(t), n - 1))


def agreement_table(table: pl.DataFrame, by: Sequence[str] | None = ("retention",), keys: Iterable[str] = KEYS,
                    threshold: float = 3.0) -> pl.DataFrame:
    """Per group (``by``; None: all cells) and key: the mean of cells' complete and swrb means, the pooled z
    with within-cell standard errors (:func:`pooled_z`) and ``agrees`` = |z| < ``threshold``, the across-cells
    t and its p (:func:`across_cells_t`; with very unequal cell variances sd² has few effective degrees of
    freedom and the t on n − 1 df rejects too often), and the number of cells whose complete replicates
    have zero variance (their se is 0, an underestimate: rare divergence never showed)."""
    groups = [((), table)] if not by else table.sort(list(by)).group_by(list(by), maintain_order=True)
    out = []
    for values, cell in groups:
        for key in keys:
            diff = (cell[f"complete_mean_{key}"] - cell[f"swrb_mean_{key}"]).to_numpy()
            se = np.hypot(cell[f"complete_se_{key}"].to_numpy(), cell[f"swrb_se_{key}"].to_numpy())
            t, p = across_cells_t(diff)
            pooled = pooled_z(diff, se)
            out.append(
                (dict(zip(by, values)) if by else {"group": "all"})
                | {
                    "key": key,
                    "cells": cell.height,
                    "complete_mean": float(cell[f"complete_mean_{key}"].mean()),
                    "swrb_mean": float(cell[f"swrb_mean_{key}"].mean()),
                    "z": pooled,
                    "t": t,
                    "p": p,
                    "complete_zero_variance_cells": int((cell[f"complete_var_{key}"] == 0).sum()),
                    "agrees": bool(abs(pooled) < threshold),
                }
            )
    return pl.DataFrame(out, infer_schema_length=None)


def action_enclosures(replicates: pl.DataFrame, alpha: float = 0.05) -> pl.DataFrame:
    """Per action, the (1 − α) enclosure of the document-average R_H from swrb-mode sampled profiles
    (module docstring), beside the swrb estimates of R_L, B_L, R_H and the complete mode's mean M.

    Needs at least two documents per action.
    """
    doc = replicates.group_by(["action", "mode", "document"], maintain_order=True).agg(pl.col(k).mean() for k in KEYS)
    out = []
    for (action,), cell in doc.group_by(["action"], maintain_order=True):
        swrb = cell.filter(pl.col("mode") == "swrb").sort("document")
        complete = cell.filter(pl.col("mode") == "complete")
        if swrb.height < 2:
            raise ValueError(f"action {action!r}: the enclosure needs >= 2 documents in swrb mode, got {swrb.height}")
        lo, hi = enclosure(swrb["R_L"].to_numpy(), swrb["B_L"].to_numpy(), alpha)
        m = float(complete["R_H"].mean()) if complete.height else math.nan
        out.append({
            "action": action, "documents": swrb.height, "alpha": float(alpha),
            "swrb_R_L": float(swrb["R_L"].mean()), "swrb_B_L": float(swrb["B_L"].mean()),
            "swrb_R_H": float(swrb["R_H"].mean()), "complete_R_H": m,
            "enclosure_lower": lo, "enclosure_upper": hi,
            "complete_R_H_inside": bool(lo <= m <= hi) if not math.isnan(m) else None,
        })
    return pl.DataFrame(out, infer_schema_length=None)


__all__ = [
    "COSTS", "KEYS", "MODES", "STATISTICS", "action_enclosures", "agreement_table", "comparison_table",
    "across_cells_t", "pair_evaluations", "pooled_z", "replicate_frame", "replicate_rows", "retention_summary", "suite_frame",
]
