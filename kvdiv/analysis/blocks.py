"""Table 2: generation-clock mismatch gaps by position block per model × task family × length, and the paper's
fall/rise pattern counted on our data.

Each row is one block: its gap ``gap`` (the mean mismatch a − b over the block's steps), the part of it made strictly
before the first EOS of either chain (``gap_pre_eos``: post-EOS steps count as agreement), and ``change``, the
within-document paired change of the gap from the first block to this one (0 at the first block): the quantity the
paper's fall/rise pattern is about, with an interval of the difference rather than two intervals compared
(``change_pre_eos``: the same change of the pre-EOS gap)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from kvdiv.analysis.bootstrap import cluster_bootstrap, stat_seed
from kvdiv.analysis.inputs import DOC_KEYS, POOLED, Metrics, applicable_contrasts, cells, contrast_name
from kvdiv.analysis.windows import check_window, in_window


def _block_label(block: Sequence[int]) -> str:
    return f"{block[0]}–{block[1]}"


def _family_cells(frame: pl.DataFrame) -> list[tuple[str, str, pl.DataFrame]]:
    """(model, ``{family}_all``, rows) for every model × task family: the family-pooled cells."""
    return [(model, f"{family}_{POOLED}", rows) for model, family, rows in cells(frame, by="family", pooled=False)]


def clock_block_gaps(
    metrics: Metrics,
    contrasts: Sequence[Sequence[str]],
    blocks: Sequence[Sequence[int]],
    n_boot: int,
    seed: int,
    confidence: float,
) -> pl.DataFrame:
    """Table 2: generation-clock mismatch gaps a − b averaged over each position block, per model ×
    stratum (family × length) × contrast, plus pooled rows per model × family (``length`` ``all``, stratum
    ``{family}_all``; bootstrap over that family's documents only) and per model (family and length ``all``)."""
    clock = metrics.clock.join(metrics.documents, on=["model", "document"], how="left")
    horizon = int(clock["step"].max())
    if not blocks:
        raise ValueError("analysis.blocks is empty")
    usable = [
        check_window(f"analysis.blocks[{i}]", list(b) if isinstance(b, tuple) else b, horizon)
        for i, b in enumerate(blocks)
    ]
    per_block = clock.with_columns(
        pl.coalesce(*[pl.when(in_window(pl.col("step"), b)).then(pl.lit(_block_label(b))) for b in usable]).alias(
            "block"
        )
    ).filter(pl.col("block").is_not_null())
    pre = pl.col("mismatch_pre_eos") if "mismatch_pre_eos" in per_block.columns else pl.lit(None, pl.Float64)
    doc = per_block.group_by(*DOC_KEYS, "action", "block").agg(pl.col("mismatch").mean(), pre.mean().alias("pre_eos"))
    labels = [_block_label(b) for b in usable]
    rows: list[dict] = []
    for a, b in applicable_contrasts(contrasts, doc["action"].unique()):
        both = (
            doc.filter(pl.col("action") == a)
            .drop("action")
            .rename({"mismatch": "ma", "pre_eos": "pa"})
            .join(
                doc.filter(pl.col("action") == b).select(
                    "model", "document", "block", pl.col("mismatch").alias("mb"), pl.col("pre_eos").alias("pb")
                ),
                on=["model", "document", "block"],
            )
            .with_columns((pl.col("ma") - pl.col("mb")).alias("gap"), (pl.col("pa") - pl.col("pb")).alias("pre"))
        )
        wide = both.pivot(on="block", index=list(DOC_KEYS), values="gap").join(
            both.pivot(on="block", index=["model", "document"], values="pre").rename(
                {lab: f"pre {lab}" for lab in labels}, strict=False
            ),
            on=["model", "document"],
        )
        present = [lab for lab in labels if lab in wide.columns]

        def stat(m, present=present):
            out = {lab: m[lab] for lab in present}
            out |= {f"pre {lab}": m[f"pre {lab}"] for lab in present}
            out |= {f"pre change {lab}": m[f"pre {lab}"] - m[f"pre {present[0]}"] for lab in present}
            return out | {f"change {lab}": m[lab] - m[present[0]] for lab in present}

        for model, cell, sub in cells(wide) + _family_cells(wide):
            values = {lab: sub[lab].to_numpy() for lab in present}
            values |= {f"pre {lab}": sub[f"pre {lab}"].cast(pl.Float64).to_numpy() for lab in present}
            res = cluster_bootstrap(values, stat, n_boot, stat_seed(seed, "table2", model, cell, a, b), confidence)
            fam, length = (cell.rsplit("_", 1) + [""])[:2] if cell != POOLED else (POOLED, POOLED)
            for lab in present:
                (est, lo, hi), (pe, plo, phi), (ce, clo, chi), (pce, pclo, pchi) = (
                    res[lab],
                    res[f"pre {lab}"],
                    res[f"change {lab}"],
                    res[f"pre change {lab}"],
                )
                rows.append(
                    {
                        "model": model,
                        "family": fam,
                        "length": length,
                        "stratum": cell,
                        "contrast": contrast_name(a, b),
                        "block": lab,
                        "gap": float(est),
                        "lower": float(lo),
                        "upper": float(hi),
                        "n_documents": sub.height,
                        "gap_pre_eos": float(pe),
                        "gap_pre_eos_lower": float(plo),
                        "gap_pre_eos_upper": float(phi),
                        "change": float(ce),
                        "change_lower": float(clo),
                        "change_upper": float(chi),
                        "change_pre_eos": float(pce),
                        "change_pre_eos_lower": float(pclo),
                        "change_pre_eos_upper": float(pchi),
                    }
                )
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
    cols = [
        "contrast",
        "family",
        "direction",
        "first_block",
        "last_block",
        "hits",
        "comparisons",
        "missing",
        "models",
        "n_documents",
    ]
    strata = gaps.filter((pl.col("length") != POOLED) & pl.col("family").is_in(list(directions)))
    if strata.is_empty():
        return pl.DataFrame(
            schema={c: (pl.Int64 if c in ("hits", "comparisons", "missing", "n_documents") else pl.Utf8) for c in cols}
        )
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
        rows.append(
            {
                "contrast": contrast,
                "family": family,
                "direction": direction,
                "first_block": first,
                "last_block": last,
                "hits": hits,
                "comparisons": n,
                "missing": missing,
                "models": ", ".join(sorted(sub["model"].unique().to_list())),
                "n_documents": docs,
            }
        )
    return pl.DataFrame(rows).select(cols)
