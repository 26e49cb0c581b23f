"""Verdicts of contrasts against a paper's claimed direction: consistent, contradicted or inconclusive.

A claim says in which direction a contrast a − b lies: ``lower`` (a < b) or ``higher`` (a > b). On the contrast's
(1 − α) interval: it excludes 0 on the claimed side → **consistent**; on the opposite side → **contradicted**;
otherwise (contains or touches 0, or missing) → **inconclusive**; no claim → ``no claim``. Claims come from the
config's ``analysis.directions`` (``[[a, b, lower|higher], ...]``), each naming one of ``analysis.contrasts``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import polars as pl

from kvdiv.analysis.inputs import POOLED, contrast_name

#: The directions a claim may give a contrast a − b.
DIRECTIONS = ("lower", "higher")
CONSISTENT, CONTRADICTED, INCONCLUSIVE, NO_CLAIM = "consistent", "contradicted", "inconclusive", "no claim"
#: The rule, as the report states it.
RULE = (
    "consistent: the interval excludes 0 in the paper's direction; contradicted: it excludes 0 in the opposite "
    "direction; inconclusive: it contains 0; no claim: the paper states no direction for this contrast"
)


def sign_verdict(lower: float | None, upper: float | None, direction: int, null: float = 0.0) -> str:
    """The ``sign`` rule on an interval [lower, upper]: ``direction`` +1 (the paper's value lies above ``null``) or
    −1; the interval wholly on the paper's side → consistent, wholly on the other → contradicted, else inconclusive."""
    if not all(v is not None and math.isfinite(float(v)) for v in (lower, upper)):
        return INCONCLUSIVE
    above, below = lower > null, upper < null
    if (above and direction > 0) or (below and direction < 0):
        return CONSISTENT
    if above or below:
        return CONTRADICTED
    return INCONCLUSIVE


def verdict(lower: float | None, upper: float | None, direction: str | None) -> str:
    """The verdict of an interval [lower, upper] of a contrast a − b against a claimed ``direction``
    (``lower``: a < b; ``higher``: a > b; None: no claim): :func:`sign_verdict` about 0."""
    if direction is None:
        return NO_CLAIM
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)} or None, got {direction!r}")
    if lower is not None and upper is not None and lower > upper:
        raise ValueError(f"interval [{lower}, {upper}] has lower > upper")
    return sign_verdict(lower, upper, -1 if direction == "lower" else +1)


def check_directions(directions: Sequence[Sequence[str]], contrasts: Sequence[Sequence[str]]) -> dict[str, str]:
    """``{contrast name: direction}`` from ``analysis.directions`` entries [a, b, direction]; ValueError naming
    the entry unless each has three strings, a valid direction, a contrast listed in ``analysis.contrasts``, and
    no contrast is given twice."""
    known = {contrast_name(*c) for c in contrasts if len(c) == 2}
    out: dict[str, str] = {}
    for i, entry in enumerate(directions or []):
        where = f"analysis.directions[{i}] = {list(entry) if isinstance(entry, (list, tuple)) else entry!r}"
        if not isinstance(entry, (list, tuple)) or len(entry) != 3 or not all(isinstance(x, str) for x in entry):
            raise ValueError(f"{where}: expected [a, b, direction] (three strings)")
        a, b, direction = entry
        if direction not in DIRECTIONS:
            raise ValueError(f"{where}: direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
        name = contrast_name(a, b)
        if name not in known:
            raise ValueError(f"{where}: the contrast [{a}, {b}] is not in analysis.contrasts")
        if name in out:
            raise ValueError(f"{where}: the contrast [{a}, {b}] is given a direction twice")
        out[name] = direction
    return out


def contrast_verdicts(
    table: pl.DataFrame, directions: Mapping[str, str], statistic: str = "gap", stratum: str = POOLED
) -> pl.DataFrame:
    """Per (model, contrast) of ``table`` (columns model, stratum, contrast, statistic, estimate, lower, upper,
    n_documents; e.g. :func:`kvdiv.analysis.decomposition.gap_decomposition`) at ``statistic`` and ``stratum``:
    its interval, the claimed direction (``directions``: contrast name → lower/higher; absent: none) and the
    verdict (:func:`verdict`), in the table's order."""
    sub = table.filter((pl.col("statistic") == statistic) & (pl.col("stratum") == stratum))
    rows = []
    for r in sub.iter_rows(named=True):
        direction = directions.get(r["contrast"])
        rows.append(
            {
                "model": r["model"],
                "contrast": r["contrast"],
                "n_documents": r.get("n_documents"),
                "estimate": r["estimate"],
                "lower": r["lower"],
                "upper": r["upper"],
                "direction": direction,
                "verdict": verdict(r["lower"], r["upper"], direction),
            }
        )
    schema = {
        "model": pl.Utf8,
        "contrast": pl.Utf8,
        "n_documents": pl.Int64,
        "estimate": pl.Float64,
        "lower": pl.Float64,
        "upper": pl.Float64,
        "direction": pl.Utf8,
        "verdict": pl.Utf8,
    }
    return pl.DataFrame(rows, schema=schema)


__all__ = ["DIRECTIONS", "RULE", "check_directions", "contrast_verdicts", "verdict"]
