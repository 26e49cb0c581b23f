"""The analysis' inputs: one study's metric tables (all models), document means, contrasts and cells.

Units: proportions (0–1) throughout; tables and the report print percentage points.

**swrb-mode metrics.** Rows carry ``weight`` = D (1 in complete mode): means of path quantities, survival
(P(τ ≤ t) ≈ D·1{J ≤ t}) and cohort profiles are D-weighted, and O, E, Π, R come from Z_O, Z_E, Z_Π, Z_R.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kvdiv.io import read_parquet


POOLED = "all"
DOC_KEYS = ("model", "document", "family", "target_length", "stratum")


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


def contrast_pairs(value: Sequence) -> list[tuple[str, str]]:
    """A contrast setting as pairs: ``[a, b]`` (one pair) or ``[[a, b], [c, d], ...]`` (``analysis.table3_contrast``
    takes either: both readings of SnapKV-512 each get their Table 3 rows)."""
    if len(value) == 2 and all(isinstance(v, str) for v in value):
        return [(str(value[0]), str(value[1]))]
    pairs = [tuple(v) for v in value]
    if not pairs or any(len(p) != 2 or not all(isinstance(x, str) for x in p) for p in pairs):
        raise ValueError(f"a contrast must be [action_a, action_b] or a list of such pairs, got {list(value)!r}")
    return [(str(a), str(b)) for a, b in pairs]


def contrast_name(a: str, b: str) -> str:
    """Display name of the contrast a − b."""
    return f"{a} − {b}"


def stratum_key(name: str) -> tuple:
    """Sort key of cell names: family, then length numerically (``ruler_256`` < ``ruler_1024``); ``all`` last."""
    if name == POOLED:
        return (1, "", 0)
    family, _, length = name.rpartition("_")
    return (0, family or name, int(length)) if length.isdigit() else (0, name, 0)


def cells(frame: pl.DataFrame, by: str = "stratum", pooled: bool = True) -> list[tuple[str, str, pl.DataFrame]]:
    """(model, cell, rows) for every model × value of ``by``, plus a pooled cell per model."""
    out = []
    for model in sorted(frame["model"].unique().to_list()):
        fm = frame.filter(pl.col("model") == model).sort(
            "document"
        )  # row order fixes which document each resample draws
        for cell in sorted((str(c) for c in fm[by].unique().to_list()), key=stratum_key):
            out.append((model, str(cell), fm.filter(pl.col(by) == cell)))
        if pooled:
            out.append((model, POOLED, fm))
    return out


def row_weight(frame: pl.DataFrame) -> pl.Expr:
    """Row weights: 1 for complete-mode rows, D for swrb rows (see kvdiv.metrics)."""
    return pl.col("weight") if "weight" in frame.columns else pl.lit(1.0)


def is_swrb(replicates: pl.DataFrame) -> bool:
    """Whether ``replicates`` are swrb-mode metrics (kvdiv.metrics writes ``z_r`` … and ``branch_start`` only then)."""
    return "z_r" in replicates.columns or "branch_start" in replicates.columns


def study_names(replicates: pl.DataFrame) -> str:
    """The studies of ``replicates`` for an error message: ``'a', 'b'`` (``'?'`` without a study column)."""
    studies = sorted(str(s) for s in replicates["study"].unique().to_list()) if "study" in replicates.columns else ["?"]
    return ", ".join(map(repr, studies))


SWRB_MEANS = {
    "occurrence": "z_o",
    "exposure": "z_e",
    "occupation": "z_pi",
    "mismatch": "z_r",
    "risk_tv": "z_r",
    "risk_window": "z_l",
    "capacity": "w_l",
}


def document_means(replicates: pl.DataFrame) -> pl.DataFrame:
    """Per (model, document, action): replicate means of the row metrics (weighted by ``weight``), the
    weighted share of diverged rows and mean of τ·1{diverged} (for entry times). For swrb rows the
    conditional Monte Carlo columns replace O, E, Π, R, R_L, B_L (``SWRB_MEANS``)."""
    cols = [
        "occurrence",
        "exposure",
        "occupation",
        "mismatch",
        "risk_tv",
        "fixed_tv_mean",
        "mismatch_pre_eos",
        "mismatch_post_eos",
        "mismatch_strict_pre_eos",
        "risk_window",
        "capacity",
    ]
    swrb = is_swrb(replicates)
    w = row_weight(replicates)
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


def paired(doc: pl.DataFrame, a: str, b: str, cols: Sequence[str]) -> pl.DataFrame:
    """Documents having both actions, with columns ``{col}_a`` and ``{col}_b``."""
    left = doc.filter(pl.col("action") == a).select(*DOC_KEYS, *[pl.col(c).alias(f"{c}_a") for c in cols])
    right = doc.filter(pl.col("action") == b).select("model", "document", *[pl.col(c).alias(f"{c}_b") for c in cols])
    return left.join(right, on=["model", "document"], how="inner")


def first_row(frame: pl.DataFrame | None, **eq: object) -> dict | None:
    """The first row of ``frame`` whose columns equal ``eq`` (as a dict), or None (no frame, a missing column, no
    row)."""
    if frame is None or not frame.height:
        return None
    sub = frame
    for k, v in eq.items():
        if k not in sub.columns:
            return None
        sub = sub.filter(pl.col(k) == v)
    return sub.row(0, named=True) if sub.height else None


def lookup(values: Mapping, path: Iterable[object], missing: object = None) -> object:
    """The entry of the nested mapping ``values`` at ``path``, or ``missing`` when absent (e.g. the paper's values)."""
    node: object = values
    for p in path:
        if not isinstance(node, Mapping) or p not in node:
            return missing
        node = node[p]
    return node
