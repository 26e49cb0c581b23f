"""The headline claims of arXiv 2609.16617 §5 as data: each :class:`Claim` names its statement, where its estimates
come from (:mod:`kvdiv.results.claim_sources`), the test of its direction (the sign of the paper's effect about a
null, or an equivalence margin) and the paper's value its size is compared with. :func:`claims_table` applies one
rulebook to every claim (:mod:`kvdiv.analysis.verdicts`; docs/claims.md): a direction verdict and a magnitude verdict
per row, the direction test's p-value and its Holm adjustment over every row, and for an inconclusive direction the
documents that would decide it. Adding a claim: one entry of :data:`CLAIMS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from kvdiv.analysis import verdicts
from kvdiv.outputs.report_cells import NOT_IDENTIFIED_TEXT
from kvdiv.results.figure7 import PAPER_ACTIONS_90
from kvdiv.results.claim_sources import (
    Estimate,
    Inputs,
    PaperRef,
    Source,
    action_difference,
    block_change,
    family_envelope,
    late_minus_early_of,
    pair_by_action,
    per_contrast,
    per_model,
    rates,
    statistic,
    table2_changes,
    table3_rows,
    value_range,
)

PCT = 0.01  # the paper's percentages and pp as proportions
#: A majority claim's direction quantity: the difference of the two parts of a gap, signed as the gap (share > 1/2 ⟺
#: sign(gap)·(part − other part) > 0); a gap whose interval contains 0 has no majority to test.
MAJORITY = "exposure part − branch part, signed as the gap"
MAJORITY_EOS = "pre-EOS part − post-EOS part, signed as the gap"


@dataclass(frozen=True)
class Claim:
    """One headline claim. ``statement`` may name ``{a}``/``{b}`` (a contrast's actions) and ``{subject}``;
    ``quantity`` is what the direction test is about, ``test`` how it is written (``> 0``, ``< 0``, ``within ±2 pp``);
    ``direction`` is +1/−1 (the paper's effect lies above/below ``null``), ``"paper"`` (the sign of the paper's own
    value for the row: rows without one are not claims), a mapping from a row's cell to ±1, or ``"equivalence"``
    (|d| ≤ ``margin``); ``paper`` reads the paper's value that the row's ``magnitude`` quantity (``magnitude`` names
    it; None: the direction quantity) is compared with."""

    id: str
    statement: str
    quantity: str
    unit: str
    source: Source
    direction: object
    paper: PaperRef | None = None
    null: float = 0.0
    margin: float | None = None
    magnitude: str | None = None
    magnitude_unit: str | None = None


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "C1",
        "{b} enters divergence later than {a} (mean first-divergence step among diverged pairs)",
        "mean τ among diverged, a − b",
        "steps",
        statistic("figure5", "entry_contrasts", "mean_tau_gap"),
        "paper",
        action_difference("retention50", "mean_first_divergence_step_among_diverged", 1.0, " steps"),
    ),
    Claim(
        "C2",
        "{b} diverges less often by step H than {a}",
        "P(τ ≤ H), a − b",
        "pp",
        statistic("figure5", "entry_contrasts", "diverged_gap"),
        "paper",
        action_difference("retention50", "diverged_by_step_128_percent", PCT, " pp"),
    ),
    Claim(
        "C3",
        "exposure carries the majority of the 50% gap {a} − {b}",
        MAJORITY,
        "pp",
        statistic("figure5", "decomposition", "exposure_minus_branch", magnitude="exposure_share", majority_of="gap"),
        +1,
        per_contrast("retention50", "exposure_share_of_gap_percent", PCT, "%"),
        magnitude="exposure share of the gap",
        magnitude_unit="%",
    ),
    Claim(
        "C4",
        "exposure carries the majority of the 50% gap {a} − {b} in every stratum (paper: 24 of 24 decompositions)",
        MAJORITY,
        "pp",
        statistic("figure5", "decomposition", "exposure_minus_branch", pooled=False, majority_of="gap"),
        +1,
    ),
    Claim(
        "C5",
        "once diverged, the two continuations keep disagreeing: the post-divergence mismatch rate C stays high",
        "post-divergence mismatch rate C",
        "%",
        rates("figure5", "decomposition"),
        +1,
        value_range("retention50", "post_divergence_mismatch_percent_range", PCT, "%"),
        null=0.5,
    ),
    Claim(
        "C6",
        "branch TV rises with divergence-aligned depth at 50% retention (late − early, τ ≤ 64 cohort)",
        "late − early branch TV",
        "pp",
        statistic("figure6", "late_minus_early", "late_minus_early"),
        +1,
        late_minus_early_of("retention50", "branch_tv_snapkv_half_tau_le_64_percent", "snapkv_half", PCT, " pp"),
    ),
    Claim(
        "C6c",
        "branch TV rises with depth at 50% retention in every stratum × action cell (paper: 36 of 36)",
        "late − early branch TV",
        "pp",
        statistic("figure6", "late_minus_early", "late_minus_early", pooled=False),
        +1,
    ),
    Claim(
        "C7",
        "branch TV rises with depth at 90% retention (late − early, τ ≤ 64 cohort)",
        "late − early branch TV",
        "pp",
        statistic("figure7", "late_minus_early", "late_minus_early", by="family"),
        +1,
        value_range("retention90", "late_minus_early_branch_tv_pp_range", PCT, " pp"),
    ),
    Claim(
        "C7c",
        "branch TV rises with depth at 90% retention in every stratum × action cell (paper: 24 of 24)",
        "late − early branch TV",
        "pp",
        statistic("figure7", "late_minus_early_strata", "late_minus_early", pooled=False),
        +1,
    ),
    Claim(
        "C7e",
        "strictly before EOS, branch TV still rises with depth at 90% retention (paired within documents)",
        "late − early pre-EOS branch TV, paired",
        "pp",
        statistic("figure7", "late_minus_early", "late_minus_early_strict_pre_eos", by="family"),
        +1,
        pair_by_action("retention90", "strict_pre_eos_late_minus_early_pp", PAPER_ACTIONS_90, PCT, " pp"),
    ),
    Claim(
        "C8",
        "at 90% retention {a} mismatches more than {b}: the gap {a} − {b} is positive",
        "mismatch gap a − b",
        "pp",
        statistic("figure7", "decomposition", "gap", by="family"),
        +1,
        per_model("retention90", "mismatch_gap_pp", PCT, " pp"),
    ),
    Claim(
        "C9",
        "exposure carries most of the 90% gap {a} − {b}",
        MAJORITY,
        "pp",
        statistic(
            "figure7",
            "decomposition",
            "exposure_minus_branch",
            by="family",
            magnitude="exposure_share",
            majority_of="gap",
        ),
        +1,
        per_model("retention90", "exposure_share_of_gap_percent", PCT, "%"),
        magnitude="exposure share of the gap",
        magnitude_unit="%",
    ),
    Claim(
        "C10",
        "most of the 90% gap {a} − {b} is made before the first EOS",
        MAJORITY_EOS,
        "pp",
        statistic("figure7", "eos", "pre_minus_post_eos", by="family", magnitude="eos_share", majority_of="gap"),
        +1,
        family_envelope("retention90", "eos_share_percent", PCT, "%"),
        magnitude="share of the gap made after the first EOS",
        magnitude_unit="%",
    ),
    Claim(
        "C10f",
        "most of the 90% gap {a} − {b} is made before the first EOS, in each task family",
        MAJORITY_EOS,
        "pp",
        statistic(
            "figure7", "eos", "pre_minus_post_eos", by="family", pooled=False, magnitude="eos_share", majority_of="gap"
        ),
        +1,
        family_envelope("retention90", "eos_share_percent", PCT, "%"),
        magnitude="share of the gap made after the first EOS",
        magnitude_unit="%",
    ),
    Claim(
        "C11",
        "Table 2: the 90% gap {a} − {b} changes across later position blocks as the paper's pooled rows do",
        "gap at the last block − gap at the first block, paired",
        "pp",
        table2_changes(pooled=True),
        -1,
        block_change("retention90", "table2_pooled_generation_clock_gap_pp", PCT, " pp"),
    ),
    Claim(
        "C11c",
        "Table 2: HELMET gaps fall and RULER gaps rise across later position blocks, in every model–length comparison",
        "gap at the last block − gap at the first block, paired",
        "pp",
        table2_changes(pooled=False),
        {"helmet": -1, "ruler": +1},
    ),
    Claim(
        "C12",
        "at positions 1–32 the fixed-history predictor recovers the population gap {a} − {b} within ±2 pp",
        "predicted − full-horizon population gap",
        "pp",
        table3_rows("fixed_history", ("cell_mean", "ridge")),
        "equivalence",
        margin=0.02,
    ),
    Claim(
        "C12b",
        "baseline: an intercept alone (the training documents' mean gap) recovers the population gap within ±2 pp",
        "predicted − full-horizon population gap",
        "pp",
        table3_rows("fixed_history", ("intercept",)),
        "equivalence",
        margin=0.02,
    ),
)

#: Columns of :func:`claims_table`.
COLUMNS = {
    "claim": pl.Utf8,
    "statement": pl.Utf8,
    "model": pl.Utf8,
    "subject": pl.Utf8,
    "quantity": pl.Utf8,
    "test": pl.Utf8,
    "unit": pl.Utf8,
    "estimate": pl.Float64,
    "lower": pl.Float64,
    "upper": pl.Float64,
    "n_documents": pl.Int64,
    "ours": pl.Utf8,
    "direction": pl.Utf8,
    "p_value": pl.Float64,
    "holm": pl.Utf8,
    "documents_needed": pl.Int64,
    "magnitude_quantity": pl.Utf8,
    "magnitude_ours": pl.Utf8,
    "paper": pl.Utf8,
    "magnitude": pl.Utf8,
    "flags": pl.Utf8,
}


def fmt(value: object, unit: str) -> str:
    """A value in its unit (proportions shown in percent / pp)."""
    if value is None or not np.isfinite(float(value)):
        return "–"
    return f"{100 * float(value) + 0.0:.1f}" if unit in ("%", "pp") else f"{float(value) + 0.0:.2f}"


def shown(row: Mapping | None, unit: str, key: str = "estimate") -> str:
    """``est [lo, hi]`` of a row in its unit."""
    if row is None:
        return "–"
    return f"{fmt(row.get(key), unit)} [{fmt(row.get('lower'), unit)}, {fmt(row.get('upper'), unit)}]"


def _test_text(claim: Claim, sign: int | None) -> str:
    if claim.direction == "equivalence":
        return f"within ±{100 * claim.margin:g} pp"
    null = f"{100 * claim.null:g}%" if claim.unit == "%" else "0"
    return f"{'>' if sign > 0 else '<'} {null}"


def _direction(claim: Claim, estimate: Estimate, paper) -> int | None:
    if claim.direction == "paper":
        return None if paper is None else int(np.sign((paper.low + paper.high) / 2)) or None
    if isinstance(claim.direction, Mapping):
        family = (estimate.cell or "").rsplit("_", 1)[0]
        return claim.direction.get(family)
    return int(claim.direction)


def claim_rows(claim: Claim, inputs: Inputs, confidence: float, degenerate: Mapping[str, str]) -> list[dict]:
    """The rows of one claim (before Holm): direction and magnitude verdicts, p-value, documents needed, flags."""
    rows = []
    for est in claim.source(inputs):
        paper = claim.paper(inputs, est) if claim.paper else None
        sign = None if claim.direction == "equivalence" else _direction(claim, est, paper)
        if claim.direction != "equivalence" and sign is None:
            continue  # the paper states no direction for this row: no claim
        r = est.row
        lo, hi, value, n = r.get("lower"), r.get("upper"), r.get("estimate"), r.get("n_documents")
        if claim.direction == "equivalence":
            direction = verdicts.equivalence_verdict(lo, hi, claim.margin)
            tested = verdicts.equivalence_p_value(value, lo, hi, claim.margin, confidence)
            p_value, side = tested if tested else (None, None)
            boundary = (-1.0 if (value or 0.0) < 0 else 1.0) * claim.margin  # the nearer margin (d = 0: either)
        else:
            direction = verdicts.sign_verdict(lo, hi, sign, claim.null)
            p_value, side = verdicts.sign_p_value(value, lo, hi, claim.null, confidence), sign
            boundary = claim.null
        size_row = est.magnitude if est.magnitude is not None else r
        size_unit = claim.magnitude_unit or claim.unit
        if est.magnitude is not None and not est.identified:
            magnitude, size_text = verdicts.NOT_IDENTIFIED, NOT_IDENTIFIED_TEXT
        else:
            low, high = (paper.low, paper.high) if paper else (None, None)
            magnitude = verdicts.magnitude_verdict(
                size_row.get("lower") if size_row else None, size_row.get("upper") if size_row else None, low, high
            )
            size_text = shown(size_row, size_unit)
        flags = [f"degenerate action {a}: {degenerate[a]}" for a in est.actions if a in degenerate]
        if value is not None and lo is not None and hi is not None and np.isfinite([value, lo, hi]).all():
            if not lo <= value <= hi:
                flags.append("interval excludes its estimate")
        gap_open = est.gap is not None and verdicts.sign_verdict(est.gap.get("lower"), est.gap.get("upper"), +1) == (
            verdicts.INCONCLUSIVE
        )  # a majority claim whose gap's interval contains 0: no majority to test
        if gap_open:
            direction, p_value, side = verdicts.INCONCLUSIVE, None, None
            flags.append("the gap's interval contains 0: no majority to test")
        if verdicts.too_few_documents(n, confidence):  # no interval of so few documents has its coverage
            least = verdicts.min_documents(confidence)
            direction, p_value, side = verdicts.TOO_FEW, None, None
            if magnitude not in (verdicts.NO_PAPER_VALUE, verdicts.NOT_IDENTIFIED):
                magnitude = verdicts.TOO_FEW
            flags.append(f"{int(n)} document{'s' if int(n) != 1 else ''}: fewer than {least} carry no verdict")
        needed = None
        undecided = direction in (verdicts.INCONCLUSIVE, verdicts.TOO_FEW)
        if undecided and not (n is not None and int(n) < 2):  # 1 document: no variance
            needed = verdicts.documents_needed(value, lo, hi, float(boundary), n, confidence)
            if gap_open:  # both the gap and the difference of its parts must be decided
                g = est.gap
                needed_gap = verdicts.documents_needed(
                    g.get("estimate"), g.get("lower"), g.get("upper"), 0.0, n, confidence
                )
                needed = None if needed is None or needed_gap is None else max(needed, needed_gap)
            if needed is not None:
                needed = max(needed, verdicts.min_documents(confidence))
        names = dict(zip("ab", est.actions)) if len(est.actions) == 2 else {"a": est.subject, "b": est.subject}
        rows.append(
            {
                "claim": claim.id,
                "statement": claim.statement.format(subject=est.subject, **names),
                "model": est.model,
                "subject": est.subject,
                "quantity": claim.quantity,
                "test": _test_text(claim, sign),
                "unit": claim.unit,
                "estimate": _float(value),
                "lower": _float(lo),
                "upper": _float(hi),
                "n_documents": int(n) if n is not None else None,
                "ours": shown(r, claim.unit),
                "direction": direction,
                "p_value": p_value,
                "_side": side,
                "documents_needed": needed,
                "magnitude_quantity": claim.magnitude or claim.quantity,
                "magnitude_ours": size_text,
                "paper": paper.text if paper else "–",
                "magnitude": magnitude,
                "flags": "; ".join(flags),
            }
        )
    return rows


def claims_table(
    inputs: Inputs, *, confidence: float = 0.95, degenerate: Mapping[str, str] | None = None
) -> pl.DataFrame:
    """Every claim's rows (:data:`COLUMNS`), with the Holm-adjusted direction verdict over all rows' tests at
    family-wise level 1 − ``confidence``; ``degenerate`` (action → reason) flags rows of actions that ran
    deliberately degenerate (``allow_degenerate``)."""
    rows = [row for claim in CLAIMS for row in claim_rows(claim, inputs, confidence, degenerate or {})]
    adjusted = verdicts.holm([r["p_value"] for r in rows])
    alpha = 1 - confidence
    for row, p in zip(rows, adjusted):
        side = row.pop("_side")
        if row["direction"] == verdicts.TOO_FEW:
            row["holm"] = verdicts.TOO_FEW
        elif p is None:
            row["holm"] = verdicts.INCONCLUSIVE
        elif p >= alpha:
            row["holm"] = verdicts.INCONCLUSIVE
        elif side in ("inside", "outside"):
            row["holm"] = verdicts.CONSISTENT if side == "inside" else verdicts.CONTRADICTED
        else:
            above = row["estimate"] > _null_of(row["claim"])
            row["holm"] = verdicts.CONSISTENT if above == (side > 0) else verdicts.CONTRADICTED
    return pl.DataFrame(rows, schema=COLUMNS, orient="row") if rows else pl.DataFrame(schema=COLUMNS)


def _null_of(claim_id: str) -> float:
    return next(c.null for c in CLAIMS if c.id == claim_id)


def _float(value: object) -> float | None:
    return float(value) if value is not None and np.isfinite(float(value)) else None


def claims_markdown(claims: pl.DataFrame) -> str:
    """The claims table as Markdown (one row per claim × model × subject)."""
    if not claims.height:
        return "_No claims: the analysis tables this run built hold none of the paper's headline quantities._\n"
    head = (
        "| claim | statement | our model | subject | documents | ours (95% CI) | test | direction | Holm "
        "| documents needed | size: ours | paper | magnitude | flags |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in claims.iter_rows(named=True):
        unit = f" {r['unit']}" if r["unit"] in ("pp", "%", "steps") and r["ours"] != "–" else ""
        docs = r["n_documents"] if r["n_documents"] is not None else "–"
        needed = r["documents_needed"] if r["documents_needed"] is not None else "–"
        size = r["magnitude_ours"] if r["magnitude_quantity"] != r["quantity"] else "(same)"
        lines.append(
            f"| {r['claim']} | {r['statement']} | {r['model']} | {r['subject']} | {docs} | {r['ours']}{unit} | "
            f"{r['quantity']} {r['test']} | **{r['direction']}** | {r['holm']} | {needed} | {size} | {r['paper']} | "
            f"{r['magnitude']} | {r['flags'] or ''} |"
        )
    return head + "\n".join(lines) + "\n"


def verdict_counts(claims: pl.DataFrame, column: str = "direction") -> dict[str, int]:
    """Rows per verdict of ``column`` (``direction``, ``holm`` or ``magnitude``): most first, ties by name."""
    if not claims.height:
        return {}
    counts = claims[column].value_counts().sort(["count", column], descending=[True, False])
    return dict(zip(counts[column].to_list(), (int(c) for c in counts["count"].to_list())))
