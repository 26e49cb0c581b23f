"""The finite-state study (arXiv 2609.16617, §4.4, Figure 4): tables over the suite of systems.

:func:`exact_table` (exact values per system), :func:`estimate_table` (naive and SWRB estimates per system × method),
:func:`comparison_table` (per system: variance ratio Var(M)/Var(Z_R), evaluation ratio and variance–cost advantage)
and :func:`paper_comparison` (the suite's aggregates beside the paper's reported values).
The aggregates: docs/estimators.md#variance-and-cost.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import polars as pl

from kvdiv.finite.exact import enumerate_exact
from kvdiv.estimands import enclosure, variance_cost_aggregates
from kvdiv.finite.sampling import METHODS, sample, summarize
from kvdiv.finite.system import FiniteSystem
from kvdiv.seeds import derive_seed

EXACT_KEYS = ("R_H", "O_H", "Pi_H", "E_H", "C_H", "P_diverge", "R_L", "B_L")
ESTIMATE_KEYS = ("R_H", "O_H", "Pi_H", "E_H", "C_H", "P_diverge", "R_L", "T_L", "B_L")


def _design(system: FiniteSystem) -> dict:
    """Design factors parsed from a suite name (``v3h6-s0.01-persistent-eos``), else only V, H, EOS."""
    row = {"system": system.name, "vocab": system.vocab, "horizon": system.horizon, "eos": system.eos is not None}
    parts = system.name.split("-")
    if len(parts) == 4 and parts[1].startswith("s"):
        row["strength"] = float(parts[1][1:])
        row["kind"] = parts[2]
    else:
        row["strength"], row["kind"] = None, None
    return row


def exact_table(systems: Iterable[FiniteSystem], window: int) -> pl.DataFrame:
    """Exact values by enumeration, one row per system (window L for R_L, B_L, the midpoint)."""
    rows = []
    for system in systems:
        exact = enumerate_exact(system)
        row = _design(system) | {"window": int(window)} | exact.summary(window)
        row["T_L"] = row["R_H"] - row["R_L"]
        row["midpoint"], row["midpoint_error"] = exact.midpoint(window)
        row["mean_fixed_tv"] = float(system.fixed_tv().mean())
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def estimate_table(
    systems: Iterable[FiniteSystem], replicates: int, seed: int, window: int, alpha: float = 0.05, progress=None
) -> pl.DataFrame:
    """Naive and SWRB estimates per system; each run seeded with ``derive_seed(seed, system, method)``.

    Columns: design factors, ``method``, ``replicates``, ``seed``, ``pair_evaluations`` (mean per
    replicate), ``wall_s``, and ``estimate_K``/``stderr_K``/``variance_K`` for every key K, plus the
    (1 − α) enclosure ``enclosure_lower``/``enclosure_upper`` of R_H.
    """
    rows = []
    for system in systems:
        for method in METHODS:
            run_seed = derive_seed(int(seed), system.name, method) % (1 << 32)
            start = time.perf_counter()
            result = sample(system, method, replicates, run_seed, window=window)
            wall = time.perf_counter() - start
            summary = summarize(result, window=True)
            lo, hi = enclosure(result.column("R_L"), result.column("B_L"), alpha)
            row = _design(system) | {
                "method": method,
                "replicates": int(replicates),
                "seed": run_seed,
                "window": int(window),
                "pair_evaluations": summary["pair_evaluations"],
                "wall_s": wall,
                "enclosure_lower": lo,
                "enclosure_upper": hi,
                "alpha": float(alpha),
            }
            for part in ("estimate", "stderr", "variance"):
                for key in ESTIMATE_KEYS:
                    row[f"{part}_{key}"] = summary[part][key]
            rows.append(row)
        if progress is not None:
            progress(system.name)
    return pl.DataFrame(rows, infer_schema_length=None)


def comparison_table(exact: pl.DataFrame, estimates: pl.DataFrame) -> pl.DataFrame:
    """Per system: exact values, both samplers' R_H estimates, z-scores against exact, and
    ``variance_ratio`` = Var(M)/Var(Z_R), ``evaluation_ratio`` = c̄_SWRB/c̄_naive,
    ``advantage`` = variance_ratio / evaluation_ratio, and whether the enclosure covers R_H."""
    design = ["system", "vocab", "horizon", "eos", "strength", "kind"]
    wide = None
    for method in METHODS:
        part = estimates.filter(pl.col("method") == method).select(
            "system",
            pl.col("estimate_R_H").alias(f"{method}_R_H"),
            pl.col("stderr_R_H").alias(f"{method}_stderr_R_H"),
            pl.col("variance_R_H").alias(f"{method}_variance"),
            pl.col("pair_evaluations").alias(f"{method}_evaluations"),
            pl.col("enclosure_lower").alias(f"{method}_enclosure_lower"),
            pl.col("enclosure_upper").alias(f"{method}_enclosure_upper"),
        )
        wide = part if wide is None else wide.join(part, on="system", how="inner")
    out = exact.select(design + ["R_H", "P_diverge", "R_L", "B_L"]).join(wide, on="system", how="inner")
    out = out.with_columns(
        ((pl.col("naive_R_H") - pl.col("R_H")) / pl.col("naive_stderr_R_H")).alias("naive_z"),
        ((pl.col("swrb_R_H") - pl.col("R_H")) / pl.col("swrb_stderr_R_H")).alias("swrb_z"),
        (pl.col("naive_variance") / pl.col("swrb_variance")).alias("variance_ratio"),
        (pl.col("swrb_evaluations") / pl.col("naive_evaluations")).alias("evaluation_ratio"),
        ((pl.col("swrb_enclosure_lower") <= pl.col("R_H")) & (pl.col("R_H") <= pl.col("swrb_enclosure_upper"))).alias(
            "swrb_enclosure_covers"
        ),
    )
    return out.with_columns((pl.col("variance_ratio") / pl.col("evaluation_ratio")).alias("advantage"))


def suite_aggregates(comparison: pl.DataFrame) -> dict[str, float]:
    """min/median/max variance ratio, mean evaluation ratio, variance–cost advantage (ratio of means) and the median
    advantage over the systems (:func:`kvdiv.estimands.variance_cost_aggregates`)."""
    agg = variance_cost_aggregates(
        comparison["naive_variance"],
        comparison["swrb_variance"],
        comparison["naive_evaluations"],
        comparison["swrb_evaluations"],
    )
    keys = (
        "variance_ratio_min",
        "variance_ratio_median",
        "variance_ratio_max",
        "evaluation_ratio_mean",
        "advantage_ratio_of_means",
        "advantage_median",
    )
    return {"systems": agg["cells"], **{k: agg[k] for k in keys}}


def paper_comparison(comparison: pl.DataFrame, paper: dict) -> pl.DataFrame:
    """Our aggregates beside the paper's (``paper`` = the ``finite_state`` entry of
    kvdiv/data/paper_reported_values.yaml)."""
    ours = suite_aggregates(comparison)
    vr = paper["variance_ratio_naive_over_swrb"]
    rows = [
        ("systems", paper["systems"], ours["systems"]),
        ("variance ratio naive/SWRB, min", vr["min"], ours["variance_ratio_min"]),
        ("variance ratio naive/SWRB, median", vr["median"], ours["variance_ratio_median"]),
        ("variance ratio naive/SWRB, max", vr["max"], ours["variance_ratio_max"]),
        (
            "kernel-pair evaluations SWRB/naive (mean)",
            paper["mean_pair_evaluations_ratio"],
            ours["evaluation_ratio_mean"],
        ),
        (
            "variance-cost advantage (ratio of means)",
            paper["variance_cost_advantage_ratio_of_means"],
            ours["advantage_ratio_of_means"],
        ),
    ]
    return pl.DataFrame(
        {"quantity": [r[0] for r in rows], "paper": [float(r[1]) for r in rows], "ours": [float(r[2]) for r in rows]}
    )


def to_markdown(table: pl.DataFrame, digits: int = 3) -> str:
    """A small GitHub-flavoured Markdown table."""
    cols = table.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in table.iter_rows():
        cells = [f"{v:.{digits}g}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
