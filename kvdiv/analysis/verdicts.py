"""Verdicts of estimates against a paper's claims: the **direction** (the sign of the paper's effect: consistent,
contradicted or inconclusive), the **magnitude** (inside, below or above the paper's value or range), the p-value of
the direction test, Holm's family-wise adjustment and the documents an inconclusive verdict would need. The rules,
stated once for every claim: docs/claims.md.

A claim says in which direction a contrast a − b lies: ``lower`` (a < b) or ``higher`` (a > b). On the contrast's
(1 − α) interval: it excludes 0 on the claimed side → **consistent**; on the opposite side → **contradicted**;
otherwise (contains or touches 0, or missing) → **inconclusive**; no claim → ``no claim``. Claims come from the
config's ``analysis.directions`` (``[[a, b, lower|higher], ...]``), each naming one of ``analysis.contrasts``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

import polars as pl

from kvdiv.analysis.inputs import POOLED, contrast_name

#: The directions a claim may give a contrast a − b.
DIRECTIONS = ("lower", "higher")
CONSISTENT, CONTRADICTED, INCONCLUSIVE, NO_CLAIM = "consistent", "contradicted", "inconclusive", "no claim"
#: The verdict of a row of fewer than :func:`min_documents` documents: no interval of so few has its coverage.
TOO_FEW = "too few documents"
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


#: Magnitude verdicts: our interval overlaps the paper's value or range, lies wholly below or above it; the paper
#: gives no value for this quantity; the quantity is a share of a gap whose interval contains 0.
INSIDE, BELOW, ABOVE, NO_PAPER_VALUE, NOT_IDENTIFIED = "inside", "below", "above", "no paper value", "not identified"
#: The power at which :func:`documents_needed` sizes a study.
POWER = 0.8
#: Past this many documents :func:`documents_needed` says none (an effect indistinguishable from its boundary).
MAX_DOCUMENTS = 10**9


def min_documents(confidence: float) -> int:
    """The fewest documents that can carry a verdict at ``confidence``: with n documents drawn independently from any
    continuous distribution, even their whole range [min, max] covers the median with probability only 1 − 2^(1−n),
    so below the smallest n at which that reaches ``confidence`` (6 at 95 %) no interval built from the documents has
    its stated coverage (a cluster bootstrap of 1 document has width 0; of 2, coverage about 50 %)."""
    return max(2, math.ceil(1 + math.log2(1 / (1 - confidence)) - 1e-12))


def too_few_documents(n_documents: int | None, confidence: float) -> bool:
    """True when ``n_documents`` is known and below :func:`min_documents`: the row gets no verdict."""
    return n_documents is not None and int(n_documents) < min_documents(confidence)


def _finite(*values: object) -> bool:
    return all(v is not None and math.isfinite(float(v)) for v in values)


def equivalence_verdict(lower: float | None, upper: float | None, margin: float) -> str:
    """An equivalence claim |d| ≤ ``margin``: the interval inside [−margin, margin] → consistent; wholly outside it →
    contradicted; else inconclusive."""
    if not _finite(lower, upper):
        return INCONCLUSIVE
    if -margin <= lower and upper <= margin:
        return CONSISTENT
    if upper < -margin or lower > margin:
        return CONTRADICTED
    return INCONCLUSIVE


def magnitude_verdict(
    lower: float | None, upper: float | None, paper_low: float | None, paper_high: float | None
) -> str:
    """Our interval against the paper's value or range [paper_low, paper_high] (a value: both equal): overlapping it
    → inside; wholly below → below; wholly above → above; no paper value → no paper value."""
    if paper_low is None or paper_high is None:
        return NO_PAPER_VALUE
    if not _finite(lower, upper):
        return INCONCLUSIVE
    low, high = min(paper_low, paper_high), max(paper_low, paper_high)
    if upper < low:
        return BELOW
    if lower > high:
        return ABOVE
    return INSIDE


def standard_error(lower: float, upper: float, confidence: float) -> float:
    """The standard error a (1 − α) interval implies under a normal approximation: (upper − lower) / (2 z_{1−α/2})."""
    return (upper - lower) / (2 * NormalDist().inv_cdf(0.5 + confidence / 2))


def sign_p_value(estimate: float | None, lower: float | None, upper: float | None, null: float, confidence: float):
    """The two-sided p-value of ``estimate`` = ``null`` (normal approximation, the standard error from the interval);
    None when it cannot be computed."""
    if not _finite(estimate, lower, upper):
        return None
    se = standard_error(lower, upper, confidence)
    if se <= 0:
        return 0.0 if estimate != null else 1.0
    return 2 * (1 - NormalDist().cdf(abs(estimate - null) / se))


def equivalence_p_value(estimate, lower, upper, margin: float, confidence: float) -> tuple[float, str] | None:
    """For an equivalence claim |d| ≤ ``margin``: (p, side) of the better of its two tests, Bonferroni-doubled: the
    two one-sided tests of equivalence (side ``inside``: p = max of P(d ≤ −margin), P(d ≥ margin)) and the test of
    |d| > margin (side ``outside``); None when it cannot be computed."""
    if not _finite(estimate, lower, upper):
        return None
    se = max(standard_error(lower, upper, confidence), 1e-300)
    phi = NormalDist().cdf
    inside = max(1 - phi((estimate + margin) / se), 1 - phi((margin - estimate) / se))
    outside = 1 - phi((abs(estimate) - margin) / se)
    p, side = min((inside, "inside"), (outside, "outside"))
    return min(1.0, 2 * p), side


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of ``p_values`` (None: no test, left out of the family and returned as None)."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m, out, running = len(tested), [None] * len(p_values), 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def documents_needed(
    estimate: float | None,
    lower: float | None,
    upper: float | None,
    boundary: float,
    n_documents: int | None,
    confidence: float,
    power: float = POWER,
) -> int | None:
    """Documents at which the observed between-document variance would decide a test against ``boundary`` (the null,
    or an equivalence margin) with probability ``power`` at an effect of the observed size:
    n* = n · ((z_{1−α/2} + z_{power}) · SE / |estimate − boundary|)², SE from the interval of n documents. None when
    the estimate sits on the boundary or so near it that more than :data:`MAX_DOCUMENTS` would be needed (no study in
    reach decides it), or an input is missing."""
    if not _finite(estimate, lower, upper) or not n_documents:
        return None
    distance = abs(estimate - boundary)
    if distance == 0:
        return None
    z = NormalDist().inv_cdf(0.5 + confidence / 2) + NormalDist().inv_cdf(power)
    needed = n_documents * (z * standard_error(lower, upper, confidence) / distance) ** 2
    return math.ceil(needed) if needed <= MAX_DOCUMENTS else None


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
    table: pl.DataFrame,
    directions: Mapping[str, str],
    statistic: str = "gap",
    stratum: str = POOLED,
    confidence: float = 0.95,
) -> pl.DataFrame:
    """Per (model, contrast) of ``table`` (columns model, stratum, contrast, statistic, estimate, lower, upper,
    n_documents; e.g. :func:`kvdiv.analysis.decomposition.gap_decomposition`) at ``statistic`` and ``stratum``:
    its interval, the claimed direction (``directions``: contrast name → lower/higher; absent: none) and the
    verdict (:func:`verdict`; inconclusive from fewer than :func:`min_documents` documents), in the table's order."""
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
                "verdict": (
                    TOO_FEW
                    if direction is not None and too_few_documents(r.get("n_documents"), confidence)
                    else verdict(r["lower"], r["upper"], direction)
                ),
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
