"""Table 2 of arXiv 2609.16617: generation-clock mismatch gaps by position block per model × task family × length
(pooled rows per family: length ``all``; per model: family and length ``all``), its display frame (percentage
points, with intervals) and its report section (the paper's pattern: gaps fall across later blocks for HELMET,
rise for RULER, checked on our per-stratum rows).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from kvdiv.analysis.blocks import block_pattern_counts
from kvdiv.analysis.inputs import POOLED
from kvdiv.outputs.report_cells import PaperTable, SectionContext, ci, paper_item, paper_value
from kvdiv.outputs.tables import interval
from kvdiv.analysis.blocks import clock_block_gaps
from kvdiv.results.base import Result, Table


def table2_frame(gaps: pl.DataFrame) -> pl.DataFrame:
    """Display frame of Table 2: one row per model × contrast × family × length, one column per block."""
    if gaps.is_empty():
        raise ValueError("Table 2 has no rows: no contrast of the configured analysis.contrasts is in the study")
    blocks = list(dict.fromkeys(gaps["block"].to_list()))
    pre = [f"pre-EOS {b}" for b in blocks]
    shown = gaps.with_columns(
        pl.struct("gap", "lower", "upper")
        .map_elements(lambda r: interval(r["gap"], r["lower"], r["upper"]), return_dtype=pl.Utf8)
        .alias("cell"),
        pl.struct(
            pl.col("gap_pre_eos").alias("g"),
            pl.col("gap_pre_eos_lower").alias("l"),
            pl.col("gap_pre_eos_upper").alias("u"),
        )
        .map_elements(lambda r: interval(r["g"], r["l"], r["u"]), return_dtype=pl.Utf8)
        .alias("pre_cell"),
        ("pre-EOS " + pl.col("block")).alias("pre_block"),
    )
    index = ["model", "contrast", "family", "length", "n_documents"]
    wide = shown.pivot(on="block", index=index, values="cell").join(
        shown.pivot(on="pre_block", index=index, values="pre_cell"), on=index, nulls_equal=True
    )
    order = wide.with_columns(
        (pl.col("family") == "all").alias("_pooled"), pl.col("length").cast(pl.Int64, strict=False).alias("_length")
    ).sort("model", "contrast", "_pooled", "family", "_length", nulls_last=True)  # family-pooled (length all) last
    return order.select("model", "contrast", "family", "length", "n_documents", *blocks, *pre).rename(
        {
            "n_documents": "documents",
            **{b: f"positions {b} (pp)" for b in blocks},
            **{p: f"positions {b}, strictly before EOS (pp)" for p, b in zip(pre, blocks)},
        }
    )


def section(frames: Mapping[str, pl.DataFrame], setting: Mapping, paper: Mapping, context: SectionContext) -> list[str]:
    """The report's section of Table 2: the pattern counts per family and the pooled gaps per block beside the
    paper's ``retention90`` values, then the table."""
    t = PaperTable(context.model_keys)
    p90 = paper.get("retention90", {})
    keys = context.model_keys
    t2 = frames.get("numbers")
    if t2 is not None:
        blocks = list(dict.fromkeys(t2["block"].to_list()))
        words = {"fall": ("falls across later blocks", "below"), "rise": ("rises across later blocks", "above")}
        for r in block_pattern_counts(t2).iter_rows(named=True):
            verb, side = words[r["direction"]]
            missing = f" ({r['missing']} without data)" if r["missing"] else ""
            t.add(
                f"{r['family'].upper()} model–length comparisons whose gap {verb} (gap at positions {r['last_block']} "
                f"{side} positions {r['first_block']}; point estimates), {r['contrast']}",
                r["models"],
                r["n_documents"],
                f"{r['hits']} of {r['comparisons']}{missing}",
                *(paper_value(p90, "table2_pattern_comparisons", m) for m in keys),
            )
        pooled = t2.filter(pl.col("stratum") == POOLED)
        for r in pooled.iter_rows(named=True):
            k = blocks.index(r["block"])
            t.add(
                f"pooled generation-clock gap (pp), positions {r['block']}, {r['contrast']}",
                r["model"],
                r["n_documents"],
                ci(r, key="gap"),
                *(paper_item(p90, k, "table2_pooled_generation_clock_gap_pp", m) for m in keys),
            )
        for r in pooled.iter_rows(named=True):  # the same gaps with every step after either chain's first EOS agreed
            pre = {"estimate": r["gap_pre_eos"], "lower": r["gap_pre_eos_lower"], "upper": r["gap_pre_eos_upper"]}
            t.add(
                f"pooled gap strictly before EOS (pp), positions {r['block']}, {r['contrast']}",
                r["model"],
                r["n_documents"],
                ci(pre),
                *("–" for _ in keys),
            )
        for r in pooled.filter(pl.col("block") == blocks[-1]).iter_rows(named=True):
            for what, key in (("gap", "change"), ("gap strictly before EOS", "change_pre_eos")):
                change = {"estimate": r[key], "lower": r[f"{key}_lower"], "upper": r[f"{key}_upper"]}
                t.add(
                    f"pooled {what}: positions {r['block']} − positions {blocks[0]}, paired within documents (pp), "
                    f"{r['contrast']}",
                    r["model"],
                    r["n_documents"],
                    ci(change),
                    *("–" for _ in keys),
                )
    return [
        context.heading(),
        "",
        f"Paper: {paper_value(p90, 'table2_pattern')}.",
        "",
        "Pattern check on our data: a comparison is one model × length of a task family for one contrast (the "
        "per-stratum rows); its gap *falls across later blocks* when the point estimate at the last block is "
        "strictly below the one at the first block, and *rises* when strictly above (middle blocks need not be "
        "monotone; intervals are not used).",
        "",
        t.markdown(),
        "",
        context.markdown,
    ]


RESULT = Result(
    name="table2",
    kind="table",
    label="Table 2",
    title="Table 2: generation-clock gaps by position block",
    tables={"numbers": Table(clock_block_gaps, {"contrasts": "contrasts", "blocks": "blocks"})},
    display=table2_frame,
    caption="Table 2: generation-clock mismatch gaps (pp) by position block, per model × task family × length "
    "(pooled rows: all), with 95% cluster-bootstrap intervals over documents.",
    section=section,
    paper=("retention90",),
    schema={"length": pl.Utf8},
    study="retention90",
)
