"""The claims table's parts: its columns, the verdict rules (:data:`RULES`, docs/claims.md) and the row builder that
:func:`kvdiv.analysis.claims.claims_table` fills (a share of a gap not identified when the gap's interval holds 0)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import polars as pl

from kvdiv.analysis.verdicts import sign_verdict

VERDICTS = ("consistent", "contradicted", "inconclusive")
NOT_IDENTIFIED = "not identified (gap indistinguishable from 0)"
EXCLUDES_ESTIMATE = "interval excludes its estimate"

#: Columns of :func:`claims_table`.
COLUMNS = (
    "claim",
    "statement",
    "model",
    "subject",
    "quantity",
    "unit",
    "estimate",
    "lower",
    "upper",
    "n_documents",
    "ours",
    "paper",
    "rule",
    "verdict",
    "flags",
)

RULES = {
    "sign": "interval wholly on the paper's side of the null → consistent; wholly on the other side → contradicted; "
    "containing the null → inconclusive",
    "range": "interval disjoint from the paper's value/range → contradicted; overlapping it and excluding the null on "
    "the paper's side → consistent; else inconclusive",
    "within": "interval inside ±c → consistent; wholly outside ±c → contradicted; else inconclusive",
    "cells": "some cell contradicted → contradicted; every cell consistent → consistent; else inconclusive",
}


def finite(*v: object) -> bool:
    return all(x is not None and np.isfinite(float(x)) for x in v)


def range_verdict(
    lower: float, upper: float, paper_low: float, paper_high: float, direction: int, null: float = 0.0
) -> str:
    """``range`` rule: the paper's magnitude [paper_low, paper_high] (a value: both equal)."""
    if not finite(lower, upper):
        return "inconclusive"
    if upper < paper_low or lower > paper_high:
        return "contradicted"
    return "consistent" if sign_verdict(lower, upper, direction, null) == "consistent" else "inconclusive"


def within_verdict(lower: float, upper: float, bound: float) -> str:
    """``within`` rule: is |d| ≤ ``bound``?"""
    if not finite(lower, upper):
        return "inconclusive"
    if -bound <= lower and upper <= bound:
        return "consistent"
    if upper < -bound or lower > bound:
        return "contradicted"
    return "inconclusive"


def cells_verdict(verdicts: Iterable[str]) -> str:
    """``cells`` rule over the verdicts of every cell (no cells: inconclusive)."""
    v = list(verdicts)
    if not v:
        return "inconclusive"
    if "contradicted" in v:
        return "contradicted"
    return "consistent" if all(x == "consistent" for x in v) else "inconclusive"


def identified(gap_lower: float | None, gap_upper: float | None) -> bool:
    """Whether a share of a gap is identified: the gap's interval excludes 0."""
    return finite(gap_lower, gap_upper) and (gap_lower > 0 or gap_upper < 0)


def excludes_estimate(estimate: float, lower: float, upper: float) -> bool:
    """A percentile interval that does not contain its point estimate (flagged, never silently shown)."""
    return finite(estimate, lower, upper) and not (lower <= estimate <= upper)


def _fmt(value: float, unit: str) -> str:
    if not finite(value):
        return "–"
    if unit in ("%", "pp"):
        return f"{100 * value + 0.0:.1f}"
    return f"{value + 0.0:.2f}"


def shown(estimate: float, lower: float, upper: float, unit: str) -> str:
    """``est [lo, hi]`` in the row's unit (proportions shown in percent / pp)."""
    return f"{_fmt(estimate, unit)} [{_fmt(lower, unit)}, {_fmt(upper, unit)}]"


def paper_text(parts: Mapping[str, object], unit: str = "") -> str:
    items = [f"{k} {v}{unit}" for k, v in parts.items() if v is not None]
    return ", ".join(items) if items else "–"


class Rows:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(
        self,
        claim: str,
        statement: str,
        model: str,
        subject: str,
        quantity: str,
        unit: str,
        row: Mapping | None,
        paper: str,
        rule: str,
        verdict: str,
        ours: str | None = None,
        flags: Sequence[str] = (),
        key: str = "estimate",
    ) -> None:
        est = row.get(key) if row else None
        lo = row.get("lower") if row else None
        hi = row.get("upper") if row else None
        flags = list(flags)
        if row and excludes_estimate(est, lo, hi):
            flags.append(EXCLUDES_ESTIMATE)
        self.rows.append(
            {
                "claim": claim,
                "statement": statement,
                "model": model,
                "subject": subject,
                "quantity": quantity,
                "unit": unit,
                "estimate": as_float(est),
                "lower": as_float(lo),
                "upper": as_float(hi),
                "n_documents": int(row["n_documents"]) if row and row.get("n_documents") is not None else None,
                "ours": ours if ours is not None else (shown(est, lo, hi, unit) if row else "–"),
                "paper": paper,
                "rule": rule,
                "verdict": verdict,
                "flags": "; ".join(flags),
            }
        )


def as_float(v: object) -> float | None:
    return float(v) if v is not None and finite(v) else None


def models_of(*frames: pl.DataFrame | None) -> list[str]:
    out: set[str] = set()
    for f in frames:
        if f is not None and f.height and "model" in f.columns:
            out |= set(f["model"].unique().to_list())
    return sorted(out)


def contrasts_of(frame: pl.DataFrame | None, model: str) -> list[str]:
    if frame is None or not frame.height:
        return []
    return list(dict.fromkeys(frame.filter(pl.col("model") == model)["contrast"].to_list()))


def split_contrast(contrast: str) -> tuple[str, str]:
    a, _, b = contrast.partition(" − ")
    return a, b


def share_row(
    out: Rows,
    claim: str,
    statement: str,
    model: str,
    contrast: str,
    share: Mapping | None,
    gap: Mapping | None,
    paper: str,
    low: float | None,
    high: float | None,
    quantity: str,
) -> None:
    """A share of a gap: not identified when the gap's interval contains 0; else the ``range`` rule against the
    paper's [low, high] (``sign`` above 50% when the paper gives no magnitude)."""
    if share is None:
        return
    if gap is None or not identified(gap.get("lower"), gap.get("upper")):
        out.add(
            claim,
            statement,
            model,
            contrast,
            quantity,
            "%",
            share,
            paper,
            "range" if low is not None else "sign",
            "inconclusive",
            ours=NOT_IDENTIFIED,
            flags=[f"gap {shown(gap['estimate'], gap['lower'], gap['upper'], 'pp')} pp"] if gap else [],
        )
        return
    lo, hi = share["lower"], share["upper"]
    if low is None:
        verdict, rule = sign_verdict(lo, hi, +1, 0.5), "sign"
    else:
        verdict, rule = range_verdict(lo, hi, low, high, +1, 0.5), "range"
    out.add(claim, statement, model, contrast, quantity, "%", share, paper, rule, verdict)
