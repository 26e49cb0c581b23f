"""The paper's analysis (arXiv 2609.16617, §5): Figures 5–7 data and Tables 2–3, from metric Parquet files.

Every interval is a percentile interval of a **cluster bootstrap over documents**: documents are
resampled with replacement (all replicates and steps of a document travel together) ``n_boot`` times
with a seed derived from (seed, the statistic's name, its cell), so each interval is reproducible and
independent of which other cells were computed. Statistics are smooth functions of document means
(ratios of document sums are ratios of means), computed on every resample.

Units: proportions (0–1) throughout; tables and the report print percentage points.

**Gap decomposition (Figure 5, Figure 7).** For actions a, b with population occurrence O, exposure E,
occupation Π = E·C (C the post-divergence mismatch rate) and risk R = O + Π,

    ΔR = ΔO + ΔΠ,   ΔΠ = E_a C_a − E_b C_b = ΔE·C̄ + Ē·ΔC   (C̄, Ē: midpoints of a and b),

exactly (the midpoint split is the Shapley split of a product of two factors; an action with E = 0 has
no rate and takes the other action's, so that whole gap counts as exposure). The **exposure share** is
(ΔO + ΔE·C̄)/ΔR — entering divergence earlier or more often, the occurrence term counted with entry —
and the **branch-mismatch share** is Ē·ΔC/ΔR. The two shares sum to 1 and are symmetric: swapping a and b
negates every term and leaves the shares unchanged.

**swrb-mode metrics.** Rows carry ``weight`` = D (1 in complete mode): means of path quantities, survival
(P(τ ≤ t) ≈ D·1{J ≤ t}) and cohort profiles are D-weighted, and O, E, Π, R come from Z_O, Z_E, Z_Π, Z_R.

**Late minus early (Figure 6, Figure 7).** Within the first-divergence cohort τ ≤ ``cohort_max_tau``, the
mean branch TV δ_{τ+ℓ} over the late depth window minus that over the early window (``analysis.early``,
``analysis.late``; depths ℓ = t − τ), pooled over rows as a ratio of document sums; ``strict pre-EOS``
keeps only steps before the first EOS of either chain.

**Table 3 predictors.** y_d is document d's full-horizon mismatch gap (a − b, replicate mean). Features,
both from generation positions 1–32 only (``short_window``): the observed mismatch gap there
(``short_window``) and the fixed-history TV gap there (``fixed_history``: both kernels at the reference
history x_<t, so no divergence is needed to compute it). Methods: ``raw`` (the feature read as the
gap), ``cell_mean`` (feature plus the stratum's mean residual y − feature on the training folds) and
``ridge`` (ridge regression of y on the feature and stratum indicators); calibrated methods are fitted
out-of-fold (K folds over documents), so their population average is not fitted to itself. A predictor
*recovers* the population-average gap when the bootstrap interval of mean(ŷ) − mean(y) lies inside
±``criterion`` (2 pp); document-level MAE and RMSE of ŷ − y are reported beside it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from kvdiv.io import read_parquet, write_parquet
from kvdiv.seeds import derive_seed

POOLED = "all"
DOC_KEYS = ("model", "document", "family", "target_length", "stratum")


# ---------------------------------------------------------------------------------------------- bootstrap
def bootstrap_counts(n: int, n_boot: int, seed: int) -> np.ndarray:
    """Multinomial resample counts [n_boot, n] of a cluster bootstrap over ``n`` documents."""
    if n < 1:
        raise ValueError("the bootstrap needs at least one document")
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)


Stat = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


def cluster_bootstrap(
    values: Mapping[str, np.ndarray], stat: Stat, n_boot: int, seed: int, confidence: float
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Point estimates and percentile intervals of statistics of document means.

    Parameters
    ----------
    values
        Name → array [n_documents] or [n_documents, m] of per-document values.
    stat
        Maps a dict of means (each of shape [...] or [..., m], leading axes free) to named statistics,
        with numpy operations that broadcast.
    n_boot, seed, confidence
        Resamples, seed of the resampling, interval level.

    Returns
    -------
    Name → (estimate, lower, upper).
    """
    arrays = {k: np.asarray(v, dtype=float) for k, v in values.items()}
    n = len(next(iter(arrays.values())))
    counts = bootstrap_counts(n, n_boot, seed).astype(float) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        point = stat({k: np.nanmean(v, axis=0) if np.isnan(v).any() else v.mean(axis=0) for k, v in arrays.items()})
        boot = stat({k: _weighted_means(counts, v) for k, v in arrays.items()})
    alpha = (1.0 - confidence) / 2.0
    out = {}
    for name, est in point.items():
        draws = np.asarray(boot[name], dtype=float)
        draws = np.where(np.isfinite(draws), draws, np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells give NaN intervals
            lo = np.nanquantile(draws, alpha, axis=0)
            hi = np.nanquantile(draws, 1 - alpha, axis=0)
        out[name] = (np.asarray(est, dtype=float), np.asarray(lo, dtype=float), np.asarray(hi, dtype=float))
    return out


def _weighted_means(weights: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Resampled means: weights [B, n] (summing to 1 per row) times values [n] or [n, m]; NaN values are
    left out of both numerator and weight."""
    if not np.isnan(v).any():
        return weights @ v
    ok = ~np.isnan(v)
    num = weights @ np.where(ok, v, 0.0)
    den = weights @ ok.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def _seed(seed: int, *parts: object) -> int:
    return derive_seed(seed, *[str(p) for p in parts])


# ---------------------------------------------------------------------------------------------- inputs
@dataclass
class Metrics:
    """One study's metric tables, all models concatenated."""

    replicates: pl.DataFrame
    aligned: pl.DataFrame
    clock: pl.DataFrame

    def __post_init__(self) -> None:
        if "weight" not in self.replicates.columns:  # metrics written without weights are complete-mode
            self.replicates = self.replicates.with_columns(pl.lit(1.0).alias("weight"))
        if "weight" not in self.aligned.columns:
            self.aligned = self.aligned.with_columns(pl.lit(1.0).alias("weight"))

    @property
    def documents(self) -> pl.DataFrame:
        """One row per (model, document) with its metadata."""
        return self.replicates.select(DOC_KEYS).unique().sort("model", "document")


def load_metrics(metric_dirs: Iterable[str | Path]) -> Metrics:
    """Read and concatenate ``replicates``/``profiles_aligned``/``profiles_clock`` Parquet of several models."""
    parts: dict[str, list[pl.DataFrame]] = {"replicates": [], "profiles_aligned": [], "profiles_clock": []}
    for d in metric_dirs:
        for name in parts:
            path = Path(d) / f"{name}.parquet"
            if not path.exists():
                raise FileNotFoundError(f"metrics file {path} does not exist")
            parts[name].append(read_parquet(path))  # checksum verified: a truncated file is an error naming it
    if not parts["replicates"]:
        raise ValueError("no metric directories given")
    cat = {k: pl.concat(v, how="diagonal_relaxed") for k, v in parts.items()}
    return Metrics(cat["replicates"], cat["profiles_aligned"], cat["profiles_clock"])


def applicable_contrasts(contrasts: Sequence[Sequence[str]], actions: Iterable[str]) -> list[tuple[str, str]]:
    """The configured contrasts (a, b) whose two actions are both present."""
    present = set(actions)
    out = []
    for c in contrasts:
        if len(c) != 2:
            raise ValueError(f"analysis.contrasts entries must be [action_a, action_b], got {c!r}")
        if c[0] in present and c[1] in present:
            out.append((str(c[0]), str(c[1])))
    return out


def contrast_name(a: str, b: str) -> str:
    """Display name of the contrast a − b."""
    return f"{a} − {b}"


def stratum_key(name: str) -> tuple:
    """Sort key of cell names: family, then length numerically (``ruler_256`` < ``ruler_1024``); ``all`` last."""
    if name == POOLED:
        return (1, "", 0)
    family, _, length = name.rpartition("_")
    return (0, family or name, int(length)) if length.isdigit() else (0, name, 0)


def _cells(frame: pl.DataFrame, by: str = "stratum", pooled: bool = True) -> list[tuple[str, str, pl.DataFrame]]:
    """(model, cell, rows) for every model × value of ``by``, plus a pooled cell per model."""
    out = []
    for model in sorted(frame["model"].unique().to_list()):
        fm = frame.filter(pl.col("model") == model).sort("document")  # row order fixes which document each resample draws
        for cell in sorted((str(c) for c in fm[by].unique().to_list()), key=stratum_key):
            out.append((model, str(cell), fm.filter(pl.col(by) == cell)))
        if pooled:
            out.append((model, POOLED, fm))
    return out


def _weight(frame: pl.DataFrame) -> pl.Expr:
    """Row weights: 1 for complete-mode rows, D for swrb rows (see kvdiv.metrics)."""
    return pl.col("weight") if "weight" in frame.columns else pl.lit(1.0)


SWRB_MEANS = {"occurrence": "z_o", "exposure": "z_e", "occupation": "z_pi", "mismatch": "z_r", "risk_tv": "z_r",
              "risk_window": "z_l", "capacity": "w_l"}


def document_means(replicates: pl.DataFrame) -> pl.DataFrame:
    """Per (model, document, action): replicate means of the row metrics (weighted by ``weight``), the
    weighted share of diverged rows and mean of τ·1{diverged} (for entry times). For swrb rows the
    conditional Monte Carlo columns replace O, E, Π, R, R_L, B_L (``SWRB_MEANS``)."""
    cols = ["occurrence", "exposure", "occupation", "mismatch", "risk_tv", "fixed_tv_mean",
            "mismatch_pre_eos", "mismatch_post_eos", "mismatch_strict_pre_eos", "risk_window", "capacity"]
    swrb = "z_r" in replicates.columns
    w = _weight(replicates)
    aggs = []
    for c in cols:
        if swrb and c in SWRB_MEANS and SWRB_MEANS[c] in replicates.columns:
            aggs.append(pl.col(SWRB_MEANS[c]).mean().alias(c))
        elif swrb and c == "fixed_tv_mean":
            aggs.append(pl.lit(None, dtype=pl.Float64).alias(c))  # not estimable from the branch path
        else:
            aggs.append((pl.col(c) * w).mean().alias(c))
    return (
        replicates.group_by([*DOC_KEYS, "action"])
        .agg(
            *aggs,
            (pl.col("diverged").cast(pl.Float64) * w).mean().alias("diverged"),
            (pl.col("tau").fill_null(0).cast(pl.Float64) * w).mean().alias("tau_diverged_sum"),
            pl.col("replicate").count().alias("replicates"),
        )
        .sort("model", "document", "action")
    )


def _wide(doc: pl.DataFrame, a: str, b: str, cols: Sequence[str]) -> pl.DataFrame:
    """Documents having both actions, with columns ``{col}_a`` and ``{col}_b``."""
    left = doc.filter(pl.col("action") == a).select(*DOC_KEYS, *[pl.col(c).alias(f"{c}_a") for c in cols])
    right = doc.filter(pl.col("action") == b).select("model", "document", *[pl.col(c).alias(f"{c}_b") for c in cols])
    return left.join(right, on=["model", "document"], how="inner")


def _rows(keys: dict, results: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[dict]:
    return [
        {**keys, "statistic": name, "estimate": float(est), "lower": float(lo), "upper": float(hi)}
        for name, (est, lo, hi) in results.items()
    ]


# ---------------------------------------------------------------------------------------------- Figure 5
def decomposition_stat(m: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The symmetric gap decomposition (module docstring) from population means of both actions."""
    o_a, e_a, p_a = m["occurrence_a"], m["exposure_a"], m["occupation_a"]
    o_b, e_b, p_b = m["occurrence_b"], m["exposure_b"], m["occupation_b"]
    raw_a = np.where(e_a > 0, p_a / np.where(e_a > 0, e_a, 1.0), np.nan)
    raw_b = np.where(e_b > 0, p_b / np.where(e_b > 0, e_b, 1.0), np.nan)
    # an action with no exposure has no rate: it takes the other's (ΔC = 0, the gap is all exposure)
    c_a = np.where(np.isfinite(raw_a), raw_a, np.where(np.isfinite(raw_b), raw_b, 0.0))
    c_b = np.where(np.isfinite(raw_b), raw_b, c_a)
    gap = (o_a + p_a) - (o_b + p_b)
    exposure_part = (o_a - o_b) + (e_a - e_b) * (c_a + c_b) / 2
    branch_part = (e_a + e_b) / 2 * (c_a - c_b)
    safe = np.where(gap != 0, gap, np.nan)
    return {
        "gap": gap,
        "mismatch_gap": m["mismatch_a"] - m["mismatch_b"],
        "occurrence_gap": o_a - o_b,
        "exposure_gap": e_a - e_b,
        "rate_a": raw_a,
        "rate_b": raw_b,
        "exposure_part": exposure_part,
        "branch_part": branch_part,
        "exposure_share": exposure_part / safe,
        "branch_share": branch_part / safe,
    }


def gap_decomposition(metrics: Metrics, contrasts: Sequence[Sequence[str]], n_boot: int, seed: int,
                      confidence: float, by: str = "stratum") -> pl.DataFrame:
    """Figure 5/7 data: per model × cell × contrast, the gap and its exposure/branch-mismatch split."""
    doc = document_means(metrics.replicates)
    cols = ["occurrence", "exposure", "occupation", "mismatch"]
    rows: list[dict] = []
    pairs = applicable_contrasts(contrasts, doc["action"].unique())
    if not pairs:
        raise ValueError(f"analysis.contrasts {[list(c) for c in contrasts]}: no pair has both actions among this "
                         f"study's actions {sorted(doc['action'].unique().to_list())}")
    for a, b in pairs:
        wide = _wide(doc, a, b, cols)
        for model, cell, sub in _cells(wide, by=by):
            values = {f"{c}_{s}": sub[f"{c}_{s}"].to_numpy() for c in cols for s in "ab"}
            res = cluster_bootstrap(values, decomposition_stat, n_boot, _seed(seed, "decomposition", model, by, cell, a, b), confidence)
            keys = {"model": model, by: cell, "contrast": contrast_name(a, b), "action_a": a, "action_b": b,
                    "n_documents": sub.height}
            rows += _rows(keys, res)
    return pl.DataFrame(rows)


def survival_curves(metrics: Metrics, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """First-divergence survival S(t) = P(τ > t), t = 0..H, per model × action (pooled over strata)."""
    rep = metrics.replicates
    h = int(rep["horizon"].max())
    rows: list[dict] = []
    for (model, action), sub in sorted(rep.group_by(["model", "action"]), key=lambda kv: kv[0]):
        tau = sub["tau"].fill_null(h + 1).to_numpy()
        weight = sub.select(_weight(sub).alias("w"))["w"].to_numpy() * np.ones(sub.height)
        docs = sub["document"].to_numpy()
        steps = np.arange(0, h + 1)
        alive = 1.0 - weight[:, None] * (tau[:, None] <= steps[None, :])  # swrb: P(τ ≤ t) ≈ D·1{J ≤ t}
        uniq, inv = np.unique(docs, return_inverse=True)
        per_doc = np.zeros((uniq.size, steps.size))
        np.add.at(per_doc, inv, alive)
        per_doc /= np.bincount(inv)[:, None]
        res = cluster_bootstrap({"s": per_doc}, lambda m: {"survival": m["s"]}, n_boot,
                                _seed(seed, "survival", model, action), confidence)
        est, lo, hi = res["survival"]
        for k, t in enumerate(steps):
            rows.append({"model": model, "action": action, "step": int(t), "survival": float(est[k]),
                         "lower": float(lo[k]), "upper": float(hi[k]), "n_documents": int(uniq.size)})
    return pl.DataFrame(rows)


def entry_times(metrics: Metrics, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """Mean first-divergence step among diverged rows, and P(τ ≤ H), per model × stratum × action."""
    doc = document_means(metrics.replicates)
    rows: list[dict] = []

    def stat(m):
        return {"mean_tau_diverged": m["tau_sum"] / np.where(m["div"] > 0, m["div"], np.nan), "diverged": m["div"]}

    for action in sorted(doc["action"].unique().to_list()):
        for model, cell, sub in _cells(doc.filter(pl.col("action") == action)):
            values = {"tau_sum": sub["tau_diverged_sum"].to_numpy(), "div": sub["diverged"].to_numpy()}
            res = cluster_bootstrap(values, stat, n_boot, _seed(seed, "entry", model, cell, action), confidence)
            rows += _rows({"model": model, "stratum": cell, "action": action, "n_documents": sub.height}, res)
    return pl.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- Figure 6
def check_window(name: str, window: object, last: int, context: str = "") -> tuple[int, int]:
    """A window ``[first, last]`` of 1-based positions or depths with 1 ≤ first ≤ last ≤ ``last``, as a tuple;
    anything else (reversed, past the horizon, not two integers) is a ``ValueError`` naming ``name`` (and
    ``context``, e.g. which study's horizon bounds it)."""
    context = f" ({context})" if context else ""
    if (not isinstance(window, (list, tuple)) or len(window) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in window)):
        raise ValueError(f"{name} = {window!r} is not a window [first, last] of two integers{context}")
    first, end = window
    if first < 1 or first > end:
        raise ValueError(f"{name} = {list(window)} is not a window 1 <= first <= last{context}")
    if end > last:
        raise ValueError(f"{name} = {list(window)} reaches past {last}, the last position it can hold{context}")
    return int(first), int(end)


#: analysis settings that are windows, with the figures/tables whose study's horizon H bounds them and the
#: bound: generation positions t ≤ H, divergence-aligned depths ℓ = t − τ ≤ H − 1.
ANALYSIS_WINDOWS = {
    "blocks": (("table2",), 0), "short_window": (("table3",), 0),
    "early": (("figure6", "figure7"), 1), "late": (("figure6", "figure7"), 1),
}


def check_analysis_windows(analysis: Mapping, horizons: Mapping[str, int]) -> None:
    """Check the window settings of the ``analysis`` config section against the horizon of the study that feeds
    each figure/table (``horizons``: item → H, for the items whose study is configured). Called by the workflow
    when it starts."""
    for key, (items, below) in ANALYSIS_WINDOWS.items():
        if key not in analysis:
            continue
        windows = analysis[key] if key == "blocks" else [analysis[key]]
        if key == "blocks" and not windows:
            raise ValueError("analysis.blocks is empty")
        for item in items:
            if item not in horizons:
                continue
            what = "positions t <= H" if below == 0 else "depths <= H - 1"
            context = f"{item} uses a study with H = {horizons[item]}: {what}"
            for i, window in enumerate(windows):
                name = f"analysis.{key}[{i}]" if key == "blocks" else f"analysis.{key}"
                check_window(name, window, horizons[item] - below, context)


def _window_filter(depth: pl.Expr, window: Sequence[int]) -> pl.Expr:
    return (depth >= window[0]) & (depth <= window[1])


def branch_tv_profiles(metrics: Metrics, cohort_max_tau: int, n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """Figure 6 curves: mean branch TV by depth ℓ within the cohort τ ≤ ``cohort_max_tau``, per model ×
    stratum × action, with bootstrap bands (ratio of document sums)."""
    al = metrics.aligned.filter(pl.col("tau") <= cohort_max_tau)
    if al.is_empty():
        return pl.DataFrame(schema={"model": pl.Utf8, "stratum": pl.Utf8, "action": pl.Utf8, "depth": pl.Int64,
                                    "tv": pl.Float64, "lower": pl.Float64, "upper": pl.Float64, "n_documents": pl.Int64})
    strata = metrics.documents.select("model", "document", "stratum")
    al = al.join(strata, on=["model", "document"], how="left")
    max_depth = int(metrics.replicates["horizon"].max()) - 1
    rows: list[dict] = []
    for action in sorted(al["action"].unique().to_list()):
        for model, cell, sub in _cells(al.filter(pl.col("action") == action)):
            w = _weight(sub)
            g = sub.group_by("document", "depth").agg((pl.col("tv") * w).sum().alias("s"), w.sum().alias("n"))
            docs = sorted(g["document"].unique().to_list())
            di = {d: i for i, d in enumerate(docs)}
            s = np.zeros((len(docs), max_depth))
            c = np.zeros((len(docs), max_depth))
            idx = np.array([di[d] for d in g["document"].to_list()])
            dep = g["depth"].to_numpy() - 1
            s[idx, dep] = g["s"].to_numpy()
            c[idx, dep] = g["n"].to_numpy()
            res = cluster_bootstrap({"s": s, "c": c}, lambda m: {"tv": m["s"] / np.where(m["c"] > 0, m["c"], np.nan)},
                                    n_boot, _seed(seed, "profile", model, cell, action), confidence)
            est, lo, hi = res["tv"]
            for k in range(max_depth):
                if c[:, k].sum() > 0:
                    rows.append({"model": model, "stratum": cell, "action": action, "depth": k + 1, "tv": float(est[k]),
                                 "lower": float(lo[k]), "upper": float(hi[k]), "n_documents": len(docs)})
    return pl.DataFrame(rows)


def late_minus_early(metrics: Metrics, cohort_max_tau: int, early: Sequence[int], late: Sequence[int], n_boot: int,
                     seed: int, confidence: float, by: str = "stratum") -> pl.DataFrame:
    """Late-minus-early branch-TV contrasts (all steps, and strictly before EOS) per model × cell × action."""
    al = metrics.aligned.filter(pl.col("tau") <= cohort_max_tau)
    schema = {"model": pl.Utf8, by: pl.Utf8, "action": pl.Utf8, "n_documents": pl.Int64, "statistic": pl.Utf8,
              "estimate": pl.Float64, "lower": pl.Float64, "upper": pl.Float64}
    if al.is_empty():
        return pl.DataFrame(schema=schema)
    al = al.join(metrics.documents.select("model", "document", by), on=["model", "document"], how="left")
    in_early = _window_filter(pl.col("depth"), early)
    in_late = _window_filter(pl.col("depth"), late)
    pre = pl.col("pre_eos")
    w = _weight(al)
    wtv = pl.col("tv") * w
    doc = al.group_by("model", "document", by, "action").agg(
        wtv.filter(in_early).sum().alias("se"), w.filter(in_early).sum().alias("ne"),
        wtv.filter(in_late).sum().alias("sl"), w.filter(in_late).sum().alias("nl"),
        wtv.filter(in_early & pre).sum().alias("pse"), w.filter(in_early & pre).sum().alias("pne"),
        wtv.filter(in_late & pre).sum().alias("psl"), w.filter(in_late & pre).sum().alias("pnl"),
    )

    def ratio(num, den):
        return num / np.where(den > 0, den, np.nan)

    def stat(m):
        early_tv, late_tv = ratio(m["se"], m["ne"]), ratio(m["sl"], m["nl"])
        p_early, p_late = ratio(m["pse"], m["pne"]), ratio(m["psl"], m["pnl"])
        return {"early": early_tv, "late": late_tv, "late_minus_early": late_tv - early_tv,
                "late_minus_early_strict_pre_eos": p_late - p_early}

    rows: list[dict] = []
    for action in sorted(doc["action"].unique().to_list()):
        for model, cell, sub in _cells(doc.filter(pl.col("action") == action), by=by):
            values = {k: sub[k].cast(pl.Float64).to_numpy() for k in ("se", "ne", "sl", "nl", "pse", "pne", "psl", "pnl")}
            res = cluster_bootstrap(values, stat, n_boot, _seed(seed, "late_early", model, by, cell, action), confidence)
            rows += _rows({"model": model, by: cell, "action": action, "n_documents": sub.height}, res)
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)


# ---------------------------------------------------------------------------------------------- Figure 7
def eos_shares(metrics: Metrics, contrasts: Sequence[Sequence[str]], n_boot: int, seed: int, confidence: float,
               by: str = "family") -> pl.DataFrame:
    """Share of the mismatch gap a − b made after the first EOS of either chain, per model × cell × contrast."""
    doc = document_means(metrics.replicates)
    cols = ["mismatch", "mismatch_post_eos"]

    def stat(m):
        gap = m["mismatch_a"] - m["mismatch_b"]
        post = m["mismatch_post_eos_a"] - m["mismatch_post_eos_b"]
        return {"gap": gap, "post_eos_gap": post, "eos_share": post / np.where(gap != 0, gap, np.nan)}

    rows: list[dict] = []
    for a, b in applicable_contrasts(contrasts, doc["action"].unique()):
        wide = _wide(doc, a, b, cols)
        for model, cell, sub in _cells(wide, by=by):
            values = {f"{c}_{s}": sub[f"{c}_{s}"].to_numpy() for c in cols for s in "ab"}
            res = cluster_bootstrap(values, stat, n_boot, _seed(seed, "eos", model, by, cell, a, b), confidence)
            rows += _rows({"model": model, by: cell, "contrast": contrast_name(a, b), "n_documents": sub.height}, res)
    return pl.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- Table 2
def _block_label(block: Sequence[int]) -> str:
    return f"{block[0]}–{block[1]}"


def _family_cells(frame: pl.DataFrame) -> list[tuple[str, str, pl.DataFrame]]:
    """(model, ``{family}_all``, rows) for every model × task family: the family-pooled cells."""
    return [(model, f"{family}_{POOLED}", rows) for model, family, rows in _cells(frame, by="family", pooled=False)]


def clock_block_gaps(metrics: Metrics, contrasts: Sequence[Sequence[str]], blocks: Sequence[Sequence[int]],
                     n_boot: int, seed: int, confidence: float) -> pl.DataFrame:
    """Table 2: generation-clock mismatch gaps a − b averaged over each position block, per model ×
    stratum (family × length) × contrast, plus pooled rows per model × family (``length`` ``all``, stratum
    ``{family}_all``; bootstrap over that family's documents only) and per model (family and length ``all``)."""
    clock = metrics.clock.join(metrics.documents, on=["model", "document"], how="left")
    h = int(clock["step"].max())
    if not blocks:
        raise ValueError("analysis.blocks is empty")
    usable = [check_window(f"analysis.blocks[{i}]", list(b) if isinstance(b, tuple) else b, h) for i, b in enumerate(blocks)]
    per_block = clock.with_columns(
        pl.coalesce(*[pl.when(_window_filter(pl.col("step"), b)).then(pl.lit(_block_label(b))) for b in usable]).alias("block")
    ).filter(pl.col("block").is_not_null())
    doc = per_block.group_by(*DOC_KEYS, "action", "block").agg(pl.col("mismatch").mean())
    labels = [_block_label(b) for b in usable]
    rows: list[dict] = []
    for a, b in applicable_contrasts(contrasts, doc["action"].unique()):
        wide = (
            doc.filter(pl.col("action") == a).drop("action").rename({"mismatch": "ma"})
            .join(doc.filter(pl.col("action") == b).select("model", "document", "block", pl.col("mismatch").alias("mb")),
                  on=["model", "document", "block"])
            .with_columns((pl.col("ma") - pl.col("mb")).alias("gap"))
            .pivot(on="block", index=list(DOC_KEYS), values="gap")
        )
        for model, cell, sub in _cells(wide) + _family_cells(wide):
            values = {lab: sub[lab].to_numpy() for lab in labels if lab in sub.columns}
            res = cluster_bootstrap(values, lambda m: dict(m), n_boot, _seed(seed, "table2", model, cell, a, b), confidence)
            fam, length = (cell.rsplit("_", 1) + [""])[:2] if cell != POOLED else (POOLED, POOLED)
            for lab, (est, lo, hi) in res.items():
                rows.append({"model": model, "family": fam, "length": length, "stratum": cell, "contrast": contrast_name(a, b),
                             "block": lab, "gap": float(est), "lower": float(lo), "upper": float(hi), "n_documents": sub.height})
    return pl.DataFrame(rows)


def block_pattern_counts(gaps: pl.DataFrame) -> pl.DataFrame:
    """The paper's Table 2 pattern on our data: per contrast and task family, in how many model–length
    comparisons the gap *falls across later blocks* (HELMET) or *rises* (RULER).

    A comparison is one model × length row of a family (per-stratum rows only; pooled rows excluded). Its gap
    falls when the point estimate at the last block (highest start position) is strictly below the one at
    the first block (block 1 > last block), and rises when strictly above; intermediate blocks are not
    required to be monotone, and intervals are not used. Comparisons lacking either block or with a NaN
    gap there are counted in ``missing``, not in ``comparisons``.

    Returns
    -------
    polars.DataFrame
        Columns contrast, family, direction (``fall``/``rise``), first_block, last_block, hits, comparisons,
        missing, models (comma-separated) and n_documents (summed over the comparisons).
    """
    directions = {"helmet": "fall", "ruler": "rise"}
    rows: list[dict] = []
    cols = ["contrast", "family", "direction", "first_block", "last_block", "hits", "comparisons", "missing", "models",
            "n_documents"]
    strata = gaps.filter((pl.col("length") != POOLED) & pl.col("family").is_in(list(directions)))
    if strata.is_empty():
        return pl.DataFrame(schema={c: (pl.Int64 if c in ("hits", "comparisons", "missing", "n_documents") else pl.Utf8)
                                    for c in cols})
    labels = sorted(strata["block"].unique().to_list(), key=lambda lab: int(str(lab).split("–")[0]))
    first, last = labels[0], labels[-1]
    for (contrast, family), sub in sorted(strata.group_by(["contrast", "family"]), key=lambda kv: kv[0]):
        direction = directions[family]
        hits = n = missing = docs = 0
        for (_, _), comp in sorted(sub.group_by(["model", "length"]), key=lambda kv: kv[0]):
            g = dict(zip(comp["block"].to_list(), comp["gap"].to_list()))
            g0, g1 = g.get(first), g.get(last)
            if g0 is None or g1 is None or not np.isfinite(g0) or not np.isfinite(g1) or first == last:
                missing += 1
                continue
            n += 1
            docs += int(comp["n_documents"][0])
            hits += int(g1 < g0) if direction == "fall" else int(g1 > g0)
        rows.append({"contrast": contrast, "family": family, "direction": direction, "first_block": first,
                     "last_block": last, "hits": hits, "comparisons": n, "missing": missing,
                     "models": ", ".join(sorted(sub["model"].unique().to_list())), "n_documents": docs})
    return pl.DataFrame(rows).select(cols)


# ---------------------------------------------------------------------------------------------- Table 3
def _folds(n: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.permutation(np.arange(n) % max(1, min(k, n)))


def cross_fit_predictions(y: np.ndarray, feature: np.ndarray, cells: np.ndarray, folds: np.ndarray, alpha: float) -> dict[str, np.ndarray]:
    """Out-of-fold predictions ŷ of the full-horizon gap from one feature: raw, cell_mean, ridge."""
    n = y.size
    pred = {"raw": feature.copy(), "cell_mean": np.empty(n), "ridge": np.empty(n)}
    levels = np.unique(cells)
    onehot = (cells[:, None] == levels[None, :]).astype(float)
    design = np.column_stack([feature, onehot[:, 1:]]) if levels.size > 1 else feature[:, None]
    for f in np.unique(folds):
        test, train = folds == f, folds != f
        if not train.any():  # a single fold: fit on everything
            train = np.ones(n, dtype=bool)
        resid = y[train] - feature[train]
        overall = resid.mean()
        for lev in levels:
            sel = train & (cells == lev)
            offset = (y[sel] - feature[sel]).mean() if sel.any() else overall
            pred["cell_mean"][test & (cells == lev)] = feature[test & (cells == lev)] + offset
        x_tr = design[train]
        mu, sd = x_tr.mean(0), x_tr.std(0)
        sd = np.where(sd > 0, sd, 1.0)
        z_tr = (x_tr - mu) / sd
        y_mu = y[train].mean()
        coef = np.linalg.solve(z_tr.T @ z_tr + alpha * np.eye(z_tr.shape[1]), z_tr.T @ (y[train] - y_mu))
        pred["ridge"][test] = y_mu + ((design[test] - mu) / sd) @ coef
    return pred


def prediction_table(metrics: Metrics, contrast: Sequence[str], short_window: Sequence[int], n_boot: int, seed: int,
                     confidence: float, folds: int = 5, ridge_alpha: float = 1.0, criterion: float = 0.02) -> pl.DataFrame:
    """Table 3: does the positions-1–32 window or the fixed-history TV recover the full-horizon gap?

    Needs complete-mode metrics: in swrb mode the stores hold no fixed-history TV along the reference
    continuation x (only the branch path), so the fixed-history predictor is undefined and a
    ``ValueError`` naming the study and the mode is raised instead of a table of NaN.
    """
    a, b = contrast
    rep = metrics.replicates
    if "z_r" in rep.columns or "branch_start" in rep.columns:
        studies = sorted(str(s) for s in rep["study"].unique().to_list()) if "study" in rep.columns else ["?"]
        raise ValueError(
            f"Table 3: study {', '.join(map(repr, studies))} ran in mode 'swrb', where the fixed-history predictor "
            f"is undefined (swrb stores carry no fixed-history TV along the reference continuation x); feed Table 3 "
            f"a study in mode 'complete' (config analysis.studies.table3)"
        )
    doc = document_means(metrics.replicates)
    if not applicable_contrasts([contrast], doc["action"].unique()):
        raise ValueError(f"analysis.table3_contrast {list(contrast)!r}: actions not in the study's metrics")
    wide = _wide(doc, a, b, ["mismatch"])
    short = (
        metrics.clock.filter(_window_filter(pl.col("step"), short_window))
        .group_by("model", "document", "action").agg(pl.col("mismatch").mean(), pl.col("fixed_tv").mean())
    )
    sw = (short.filter(pl.col("action") == a).select("model", "document", pl.col("mismatch").alias("sa"), pl.col("fixed_tv").alias("fa"))
          .join(short.filter(pl.col("action") == b).select("model", "document", pl.col("mismatch").alias("sb"), pl.col("fixed_tv").alias("fb")),
                on=["model", "document"]))
    wide = wide.join(sw, on=["model", "document"]).sort("model", "document")
    rows: list[dict] = []
    for model in sorted(wide["model"].unique().to_list()):
        sub = wide.filter(pl.col("model") == model)
        y = (sub["mismatch_a"] - sub["mismatch_b"]).to_numpy()
        features = {"short_window": (sub["sa"] - sub["sb"]).to_numpy(),
                    "fixed_history": (sub["fa"] - sub["fb"]).to_numpy()}
        cells = sub["stratum"].to_numpy().astype(str)
        fold = _folds(y.size, folds, _seed(seed, "table3_folds", model))
        for fname, feat in features.items():
            for method, yhat in cross_fit_predictions(y, feat, cells, fold, ridge_alpha).items():
                res = cluster_bootstrap(
                    {"y": y, "yhat": yhat},
                    lambda m: {"population_gap": m["y"], "predicted_gap": m["yhat"], "difference": m["yhat"] - m["y"]},
                    n_boot, _seed(seed, "table3", model, fname, method), confidence,
                )
                d_est, d_lo, d_hi = res["difference"]
                err = yhat - y
                rows.append({
                    "model": model, "contrast": contrast_name(a, b), "predictor": fname, "method": method,
                    "n_documents": int(y.size),
                    "population_gap": float(res["population_gap"][0]), "predicted_gap": float(res["predicted_gap"][0]),
                    "difference": float(d_est), "lower": float(d_lo), "upper": float(d_hi),
                    "point_within": bool(abs(d_est) <= criterion),
                    "interval_within": bool(-criterion <= d_lo and d_hi <= criterion),
                    "mae": float(np.abs(err).mean()), "rmse": float(np.sqrt((err ** 2).mean())),
                })
    return pl.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- drivers
def figure5_data(metrics: Metrics, contrasts, n_boot: int, seed: int, confidence: float) -> dict[str, pl.DataFrame]:
    """Figure 5: gap decompositions (model × stratum × contrast), survival curves and entry times."""
    return {
        "decomposition": gap_decomposition(metrics, contrasts, n_boot, seed, confidence),
        "survival": survival_curves(metrics, n_boot, seed, confidence),
        "entry": entry_times(metrics, n_boot, seed, confidence),
    }


def figure6_data(metrics: Metrics, cohort_max_tau: int, early, late, n_boot: int, seed: int, confidence: float) -> dict[str, pl.DataFrame]:
    """Figure 6: cohort branch-TV profiles by depth and late-minus-early contrasts (model × stratum × action)."""
    return {
        "profiles": branch_tv_profiles(metrics, cohort_max_tau, n_boot, seed, confidence),
        "late_minus_early": late_minus_early(metrics, cohort_max_tau, early, late, n_boot, seed, confidence),
    }


def figure7_data(metrics: Metrics, contrasts, cohort_max_tau: int, early, late, n_boot: int, seed: int,
                 confidence: float) -> dict[str, pl.DataFrame]:
    """Figure 7 (the 90% study): exposure shares, the prespecified late-minus-early intervals (model ×
    action, pooled over strata; also per stratum for the §5.6 count), EOS shares by family."""
    lme = late_minus_early(metrics, cohort_max_tau, early, late, n_boot, seed, confidence, by="family")
    return {
        "decomposition": gap_decomposition(metrics, contrasts, n_boot, seed, confidence, by="family"),
        "late_minus_early": lme,
        "late_minus_early_strata": late_minus_early(metrics, cohort_max_tau, early, late, n_boot, seed, confidence),
        "eos": eos_shares(metrics, contrasts, n_boot, seed, confidence, by="family"),
    }


def write_frames(frames: Mapping[str, pl.DataFrame], paths: Mapping[str, str | Path]) -> None:
    """Write each frame to its Parquet path atomically, with its checksum file (:func:`kvdiv.io.write_parquet`)."""
    for name, frame in frames.items():
        if name not in paths:
            raise KeyError(f"no output path for analysis table {name!r}")
        write_parquet(frame, paths[name])
