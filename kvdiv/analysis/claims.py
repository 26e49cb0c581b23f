"""A verdict for every headline claim of arXiv 2609.16617 §5: our estimate and interval beside the paper's value, and
**consistent**, **contradicted** or **inconclusive** by a stated rule (:data:`RULES`: ``sign``, ``range``, ``within``,
``cells``; docs/claims.md states each).

Input: the analysis tables of the figure items, the Table 2 and Table 3 numbers and the paper's values
(``kvdiv/data/paper_reported_values.yaml``); output: one row per (claim, our model, subject) — :data:`COLUMNS`.
A share whose denominator's interval contains 0 is **not identified** (never a number; inconclusive); a percentile
interval that does not contain its point estimate is flagged in ``flags``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

from kvdiv.analysis.inputs import POOLED, first_row, lookup
from kvdiv.analysis.claim_rows import (
    COLUMNS,
    NOT_IDENTIFIED,
    Rows,
    VERDICTS,
    cells_verdict,
    contrasts_of,
    finite,
    identified,
    models_of,
    paper_text,
    range_verdict,
    share_row,
    split_contrast,
    within_verdict,
)
from kvdiv.analysis.verdicts import sign_verdict


def claims_table(
    frames: Mapping[str, Mapping[str, pl.DataFrame]],
    table2: pl.DataFrame | None,
    table3: pl.DataFrame | None,
    paper: Mapping,
) -> pl.DataFrame:
    """Every claim's rows (module docstring): ``frames`` item → table → frame (items not built are absent),
    ``table2``/``table3`` their numbers (or None), ``paper`` the parsed paper_reported_values.yaml."""
    out = Rows()
    p50, p90, p3 = paper.get("retention50", {}), paper.get("retention90", {}), paper.get("prediction", {})
    keys = paper.get("setting", {}).get("model_keys", ["llama", "qwen"])
    f5, f6, f7 = frames.get("figure5", {}), frames.get("figure6", {}), frames.get("figure7", {})

    # C1, C2: SnapKV-half enters divergence later and less often (Figure 5, §5.2)
    entry = f5.get("entry_contrasts")
    tau_paper = p50.get("mean_first_divergence_step_among_diverged", {})
    div_paper = p50.get("diverged_by_step_128_percent", {})
    for model in models_of(entry):
        for contrast in contrasts_of(entry, model):
            a, b = split_contrast(contrast)
            for claim, statement, stat, table, unit, scale in (
                (
                    "C1",
                    f"{b} enters divergence later than {a} (mean first-divergence step among diverged)",
                    "mean_tau_gap",
                    tau_paper,
                    "steps",
                    1.0,
                ),
                ("C2", f"{b} diverges less often by step H than {a}", "diverged_gap", div_paper, "pp", 0.01),
            ):
                gaps = {
                    k: lookup(table, (k, a)) - lookup(table, (k, b))
                    for k in keys
                    if lookup(table, (k, a)) is not None and lookup(table, (k, b)) is not None
                }
                if not gaps:
                    continue  # the paper reports no value for this pair of actions
                direction = 1 if np.mean(list(gaps.values())) > 0 else -1
                r = first_row(entry, model=model, stratum=POOLED, contrast=contrast, statistic=stat)
                text = paper_text({k: round(v, 2) for k, v in gaps.items()}, "" if unit == "steps" else " pp")
                verdict = sign_verdict(r["lower"], r["upper"], direction) if r else "inconclusive"
                out.add(claim, statement, model, contrast, f"{a} − {b}, {stat}", unit, r, text, "sign", verdict)

    # C3, C4: exposure carries most of each 50% gap (majority; 85–90%)
    dec5 = f5.get("decomposition")
    share_paper = p50.get("exposure_share_of_gap_percent", {})
    for model in models_of(dec5):
        for contrast in contrasts_of(dec5, model):
            share = first_row(dec5, model=model, stratum=POOLED, contrast=contrast, statistic="exposure_share")
            gap = first_row(dec5, model=model, stratum=POOLED, contrast=contrast, statistic="gap")
            values = {k: v for k, v in (lookup(share_paper, (contrast.replace(" − ", "_minus_"),)) or {}).items()}
            text = paper_text(values, "%")
            share_row(
                out,
                "C3",
                "exposure carries the majority (> 50%) of the 50% gap",
                model,
                contrast,
                share,
                gap,
                text,
                None,
                None,
                "exposure share of the mismatch gap",
            )
            if values:
                nums = [float(v) / 100 for v in values.values()]
                share_row(
                    out,
                    "C4",
                    "exposure carries 85–90% of the 50% gap",
                    model,
                    contrast,
                    share,
                    gap,
                    text,
                    min(nums),
                    max(nums),
                    "exposure share of the mismatch gap",
                )

    # C5: post-divergence mismatch rate stays high
    c_range = p50.get("post_divergence_mismatch_percent_range")
    if dec5 is not None and dec5.height and c_range:
        lo_p, hi_p = (float(v) / 100 for v in c_range)
        for model in models_of(dec5):
            seen: set[str] = set()
            for contrast in contrasts_of(dec5, model):
                for side, action in zip(("rate_a", "rate_b"), split_contrast(contrast)):
                    if action in seen:
                        continue
                    seen.add(action)
                    r = first_row(dec5, model=model, stratum=POOLED, contrast=contrast, statistic=side)
                    if r is None:
                        continue
                    verdict = range_verdict(r["lower"], r["upper"], lo_p, hi_p, +1, 0.5)
                    ours = None if finite(r["estimate"]) else "not identified (no diverged pair)"
                    out.add(
                        "C5",
                        "the post-divergence mismatch rate C stays high (paper: 89.7–96.2% over cells)",
                        model,
                        action,
                        "post-divergence mismatch rate C",
                        "%",
                        r,
                        f"[{c_range[0]}, {c_range[1]}]% over cells",
                        "range",
                        verdict,
                        ours=ours,
                    )

    # C6, C7: late − early branch TV is positive (50% and 90%, all cells)
    for claim, item, strata_table, by, text_all, pooled_paper in (
        (
            "C6",
            f6,
            "late_minus_early",
            "stratum",
            p50.get("late_minus_early_positive"),
            lookup(p50, ("branch_tv_snapkv_half_tau_le_64_percent",)),
        ),
        (
            "C7",
            f7,
            "late_minus_early_strata",
            "family",
            p90.get("late_minus_early_positive_strata"),
            p90.get("late_minus_early_branch_tv_pp_range"),
        ),
    ):
        pooled = item.get("late_minus_early")
        strata = item.get(strata_table)
        level = "50%" if claim == "C6" else "90%"
        for model in models_of(pooled):
            sub = pooled.filter(
                (pl.col("model") == model) & (pl.col(by) == POOLED) & (pl.col("statistic") == "late_minus_early")
            )
            if isinstance(pooled_paper, Mapping):
                text = ", ".join(
                    f"{k} {v['late'] - v['early']:.2f} pp"
                    for k, v in pooled_paper.items()
                    if isinstance(v, Mapping) and "late" in v and "early" in v
                )
            else:
                text = f"{pooled_paper} pp" if pooled_paper else "–"
            for r in sub.iter_rows(named=True):
                out.add(
                    claim,
                    f"late − early branch TV is positive at {level} retention",
                    model,
                    r["action"],
                    "late − early branch TV (pooled)",
                    "pp",
                    r,
                    text or "positive",
                    "sign",
                    sign_verdict(r["lower"], r["upper"], +1),
                )
            if strata is not None and strata.height:
                cells = strata.filter(
                    (pl.col("model") == model)
                    & (pl.col("stratum") != POOLED)
                    & (pl.col("statistic") == "late_minus_early")
                )
                if cells.height:
                    verdicts = [sign_verdict(c["lower"], c["upper"], +1) for c in cells.iter_rows(named=True)]
                    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in VERDICTS if verdicts.count(v))
                    above = int((cells["estimate"].cast(pl.Float64).fill_nan(None).drop_nulls() > 0).sum())
                    out.add(
                        claim,
                        f"late − early branch TV is positive in every cell at {level} retention",
                        model,
                        "all stratum × action cells",
                        "cells with late − early > 0",
                        "count",
                        None,
                        str(text_all or "–"),
                        "cells",
                        cells_verdict(verdicts),
                        ours=f"{above} of {cells.height} point estimates > 0; per cell: {counts}",
                    )

    # C8, C9: the 90% gap and its exposure share
    dec7 = f7.get("decomposition")
    gap_paper = p90.get("mismatch_gap_pp", {})
    share90 = p90.get("exposure_share_of_gap_percent", {})
    for model in models_of(dec7):
        for contrast in contrasts_of(dec7, model):
            gap = first_row(dec7, model=model, family=POOLED, contrast=contrast, statistic="gap")
            share = first_row(dec7, model=model, family=POOLED, contrast=contrast, statistic="exposure_share")
            if gap is not None:
                out.add(
                    "C8",
                    "the 90% gap (recent − SnapKV mismatch risk) is positive",
                    model,
                    contrast,
                    "mismatch gap",
                    "pp",
                    gap,
                    paper_text(gap_paper, " pp"),
                    "sign",
                    sign_verdict(gap["lower"], gap["upper"], +1),
                )
            nums = [float(v) / 100 for v in share90.values()] if share90 else []
            share_row(
                out,
                "C9",
                "exposure carries most of the 90% gap (paper: 88.6–92.1%)",
                model,
                contrast,
                share,
                gap,
                paper_text(share90, "%"),
                min(nums) if nums else None,
                max(nums) if nums else None,
                "exposure share of the mismatch gap",
            )

    # C10: EOS shares are small (most of the gap is made before the first EOS)
    eos = f7.get("eos")
    eos_paper = p90.get("eos_share_percent", {})
    for model in models_of(eos):
        for contrast in contrasts_of(eos, model):
            for fam in sorted(set(eos.filter(pl.col("model") == model)["family"].to_list())):
                share = first_row(eos, model=model, family=fam, contrast=contrast, statistic="eos_share")
                gap = first_row(eos, model=model, family=fam, contrast=contrast, statistic="gap")
                if share is None:
                    continue
                parts = {
                    k: (lookup(eos_paper, (k, fam)) if isinstance(eos_paper.get(k), Mapping) else eos_paper.get(k))
                    for k in keys
                }
                text = ", ".join(f"{k} {v}%" for k, v in parts.items() if v is not None) or "–"
                statement = "the share of the 90% gap made after the first EOS is small (< 50%)"
                if gap is None or not identified(gap.get("lower"), gap.get("upper")):
                    out.add(
                        "C10",
                        statement,
                        model,
                        f"{fam}, {contrast}",
                        "EOS share of the mismatch gap",
                        "%",
                        share,
                        text,
                        "sign",
                        "inconclusive",
                        ours=NOT_IDENTIFIED,
                    )
                else:
                    out.add(
                        "C10",
                        statement,
                        model,
                        f"{fam}, {contrast}",
                        "EOS share of the mismatch gap",
                        "%",
                        share,
                        text,
                        "sign",
                        sign_verdict(share["lower"], share["upper"], -1, 0.5),
                    )

    # C11: Table 2's pattern (HELMET gaps fall across later blocks, RULER gaps rise)
    if table2 is not None and table2.height:
        _table2_rows(out, table2, p90)

    # C12: Table 3's ±2 pp recovery at positions 1–32
    if table3 is not None and table3.height:
        bound = float(p3.get("criterion_pp", 2.0)) / 100
        for r in table3.filter(pl.col("predictor") == "short_window").iter_rows(named=True):
            row = {**r, "estimate": r["difference"]}
            out.add(
                "C12",
                f"positions 1–32 recover the population gap within ±{100 * bound:g} pp",
                r["model"],
                f"{r['contrast']}, {r['method']}",
                "predicted − full-horizon gap",
                "pp",
                row,
                str(p3.get("short_window", "–")),
                "within",
                within_verdict(r["lower"], r["upper"], bound),
            )
    return (
        pl.DataFrame(out.rows, schema={c: _DTYPES.get(c, pl.Utf8) for c in COLUMNS}, orient="row")
        if out.rows
        else pl.DataFrame(schema={c: _DTYPES.get(c, pl.Utf8) for c in COLUMNS})
    )


_DTYPES = {"estimate": pl.Float64, "lower": pl.Float64, "upper": pl.Float64, "n_documents": pl.Int64}


def _table2_rows(out: Rows, t2: pl.DataFrame, p90: Mapping) -> None:
    """C11: per model × family × contrast, every length's first and last block (``cells`` rule: a comparison is
    consistent when the last block's interval lies wholly on the paper's side of the first block's, contradicted when
    wholly on the other side — disjoint intervals, stricter than an interval of the difference)."""
    directions = {"helmet": "fall", "ruler": "rise"}
    strata = t2.filter((pl.col("length").cast(pl.Utf8) != POOLED) & pl.col("family").is_in(list(directions)))
    if not strata.height:
        return
    labels = sorted(strata["block"].unique().to_list(), key=lambda lab: int(str(lab).split("–")[0]))
    first, last = labels[0], labels[-1]
    if first == last:
        return
    groups = sorted(strata.group_by(["model", "family", "contrast"]), key=lambda kv: kv[0])
    for (model, family, contrast), sub in groups:
        sign = -1 if directions[family] == "fall" else 1
        verdicts, hits, n = [], 0, 0
        for (_,), comp in sorted(sub.group_by(["length"]), key=lambda kv: str(kv[0])):
            g = {row["block"]: row for row in comp.iter_rows(named=True)}
            if first not in g or last not in g or not finite(g[first]["gap"], g[last]["gap"]):
                continue
            n += 1
            hits += int(sign * (g[last]["gap"] - g[first]["gap"]) > 0)
            lo0, hi0, lo1, hi1 = g[first]["lower"], g[first]["upper"], g[last]["lower"], g[last]["upper"]
            if not finite(lo0, hi0, lo1, hi1):
                verdicts.append("inconclusive")
            elif (sign > 0 and lo1 > hi0) or (sign < 0 and hi1 < lo0):
                verdicts.append("consistent")
            elif (sign > 0 and hi1 < lo0) or (sign < 0 and lo1 > hi0):
                verdicts.append("contradicted")
            else:
                verdicts.append("inconclusive")
        if not n:
            continue
        counts = ", ".join(f"{verdicts.count(v)} {v}" for v in VERDICTS if verdicts.count(v))
        verb = "falls" if sign < 0 else "rises"
        out.add(
            "C11",
            f"Table 2: the {family.upper()} gap {verb} from positions {first} to {last} in every "
            f"model–length comparison",
            model,
            f"{family}, {contrast}",
            f"gap at {last} vs {first}",
            "count",
            None,
            str(p90.get("table2_pattern", "–")),
            "cells",
            cells_verdict(verdicts),
            ours=f"{hits} of {n} point estimates {verb}; per length: {counts}",
        )


def claims_markdown(claims: pl.DataFrame) -> str:
    """The claims table as Markdown (one row per claim × model × subject)."""
    if not claims.height:
        return "_No claims: the analysis tables this run built hold none of the paper's headline quantities._\n"
    head = (
        "| claim | statement | our model | subject | documents | ours (95% CI) | paper | rule | verdict | flags |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in claims.iter_rows(named=True):
        unit = f" {r['unit']}" if r["unit"] in ("pp", "%", "steps") and r["ours"][:1] not in ("n", "") else ""
        docs = r["n_documents"] if r["n_documents"] is not None else "–"
        lines.append(
            f"| {r['claim']} | {r['statement']} | {r['model']} | {r['subject']} | {docs} | "
            f"{r['ours']}{unit} | {r['paper']} | {r['rule']} | **{r['verdict']}** | {r['flags'] or ''} |"
        )
    return head + "\n".join(lines) + "\n"


def verdict_counts(claims: pl.DataFrame) -> dict[str, int]:
    """How many rows have each verdict."""
    return {v: int((claims["verdict"] == v).sum()) if claims.height else 0 for v in VERDICTS}
