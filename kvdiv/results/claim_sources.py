"""Where a claim's estimates and the paper's values come from: :class:`Estimate` (one row's direction quantity and,
where the paper's size is of another quantity, its magnitude quantity), the sources that read them from the analysis
tables (pooled rows, cells, Table 2's paired changes, Table 3's predictors) and the paper references that read the
paper's value for a row (attached to the row's own actions and, for our one model, spanning the paper's models).

The paper's actions are named ``snapkv_half``, ``snapkv_512``, ``recent_half`` (50%) and ``snapkv_90``,
``recent_90`` (90%); ``analysis.paper_actions`` maps an action of ours to the paper action it reads (two readings
of SnapKV-512 both read ``snapkv_512``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from kvdiv.analysis.inputs import POOLED, lookup


def paper_key(paper_actions: Mapping[str, str], *actions: str) -> str:
    """The paper's key of one of our actions, or of a contrast a − b (``{a}_minus_{b}``), each action read as the
    paper action ``paper_actions`` (``analysis.paper_actions``) maps it to, itself when unmapped."""
    return "_minus_".join(paper_actions.get(action, action) for action in actions)


@dataclass(frozen=True)
class Inputs:
    """What the claims read: ``frames`` (result → table → frame, the figure and section results built), ``numbers``
    (table result → its numbers), ``paper`` (the paper's values), ``paper_actions`` (our action → the paper's)."""

    frames: Mapping[str, Mapping[str, pl.DataFrame]]
    numbers: Mapping[str, pl.DataFrame]
    paper: Mapping
    paper_actions: Mapping[str, str] = field(default_factory=dict)

    def table(self, result: str, table: str) -> pl.DataFrame | None:
        frame = self.numbers.get(result) if table == "numbers" else self.frames.get(result, {}).get(table)
        return frame if frame is not None and frame.height else None

    def paper_action(self, action: str) -> str:
        return paper_key(self.paper_actions, action)


@dataclass(frozen=True)
class Estimate:
    """One row of a claim: ``model``, ``subject`` (a contrast, an action, a cell and its contrast), the ``actions``
    it is about, its ``cell`` (a family or stratum; None when pooled), the direction quantity's ``row`` (estimate,
    lower, upper, n_documents) and, when the magnitude is of another quantity (a share of a gap), ``magnitude``
    with ``identified`` (its gap's interval excludes 0)."""

    model: str
    subject: str
    actions: tuple[str, ...]
    row: Mapping
    cell: str | None = None
    magnitude: Mapping | None = None
    identified: bool = True
    #: a majority claim's gap (the row is oriented by its sign); None for other claims
    gap: Mapping | None = None


Source = Callable[[Inputs], list[Estimate]]


@dataclass(frozen=True)
class PaperValue:
    """The paper's value or range for a row, in the row's units (proportions, steps), and how to print it."""

    low: float
    high: float
    text: str


PaperRef = Callable[[Inputs, Estimate], PaperValue | None]


def _split(contrast: str) -> tuple[str, ...]:
    a, _, b = contrast.partition(" − ")
    return (a, b) if b else (a,)


def _subject_column(frame: pl.DataFrame) -> str:
    return "contrast" if "contrast" in frame.columns else "action"


def _rows(frame: pl.DataFrame, statistic: str, by: str, pooled: bool) -> pl.DataFrame:
    cell = pl.col(by) == POOLED if pooled else pl.col(by) != POOLED
    return frame.filter((pl.col("statistic") == statistic) & cell)


def _matching(frame: pl.DataFrame, row: Mapping, statistic: str, by: str, subject: str) -> Mapping | None:
    sub = frame.filter(
        (pl.col("statistic") == statistic)
        & (pl.col("model") == row["model"])
        & (pl.col(by) == row[by])
        & (pl.col(subject) == row[subject])
    )
    return sub.row(0, named=True) if sub.height else None


def _oriented(row: Mapping, gap: Mapping | None) -> Mapping:
    """``row`` (a part − other part of ``gap``) in the gap's direction: negated when the gap's estimate is below 0, so
    that > 0 means "the first part carries the majority" either way (share > 1/2 ⟺ sign(gap)·(part − other) > 0)."""
    if gap is None or gap.get("estimate") is None or not gap["estimate"] < 0:
        return row
    neg = lambda v: None if v is None else -v  # noqa: E731
    return {**row, "estimate": neg(row.get("estimate")), "lower": neg(row.get("upper")), "upper": neg(row.get("lower"))}


def statistic(
    result: str,
    table: str,
    name: str,
    *,
    by: str = "stratum",
    pooled: bool = True,
    magnitude: str | None = None,
    majority_of: str | None = None,
) -> Source:
    """One statistic of an analysis table: its pooled rows (``by`` = all) or its cells, per model and subject (a
    contrast, else an action); ``magnitude`` names the statistic of the same cell whose size the paper reports;
    ``majority_of`` names the gap that the statistic (a part − the other part) splits: the row is oriented by the
    gap's sign (:func:`_oriented`) and carries the gap's row."""

    def source(inputs: Inputs) -> list[Estimate]:
        frame = inputs.table(result, table)
        if frame is None or by not in frame.columns:
            return []
        subject = _subject_column(frame)
        out = []
        for row in _rows(frame, name, by, pooled).iter_rows(named=True):
            size = _matching(frame, row, magnitude, by, subject) if magnitude else None
            gap = _matching(frame, row, majority_of, by, subject) if majority_of else None
            out.append(
                Estimate(
                    model=row["model"],
                    subject=row[subject] if pooled else f"{row[by]}, {row[subject]}",
                    actions=_split(row[subject]),
                    row=_oriented(row, gap),
                    cell=None if pooled else row[by],
                    magnitude=size,
                    identified=bool(size.get("identified", True)) if size else True,
                    gap=gap,
                )
            )
        return out

    return source


def rates(result: str, table: str) -> Source:
    """The post-divergence mismatch rate C of each action of a decomposition table (pooled), once per action."""

    def source(inputs: Inputs) -> list[Estimate]:
        frame = inputs.table(result, table)
        if frame is None:
            return []
        out, seen = [], set()
        for side, position in (("rate_a", 0), ("rate_b", 1)):
            for row in _rows(frame, side, "stratum", True).iter_rows(named=True):
                action = _split(row["contrast"])[position]
                if (row["model"], action) not in seen:
                    seen.add((row["model"], action))
                    out.append(Estimate(row["model"], action, (action,), row))
        return sorted(out, key=lambda e: (e.model, e.subject))

    return source


def table2_changes(*, pooled: bool) -> Source:
    """Table 2's within-document paired change of the gap from its first to its last position block: per model ×
    family × length (``pooled``: the model's row over every family and length)."""

    def source(inputs: Inputs) -> list[Estimate]:
        frame = inputs.table("table2", "numbers")
        if frame is None or "change" not in frame.columns:
            return []
        length = pl.col("length").cast(pl.Utf8)
        cells = frame.filter((length == POOLED) & (pl.col("family") == POOLED) if pooled else length != POOLED)
        if not cells.height:
            return []
        labels = sorted(frame["block"].unique().to_list(), key=lambda label: int(str(label).split("–")[0]))
        if len(labels) < 2:
            return []
        out = []
        for row in cells.filter(pl.col("block") == labels[-1]).iter_rows(named=True):
            change = {
                "estimate": row["change"],
                "lower": row["change_lower"],
                "upper": row["change_upper"],
                "n_documents": row["n_documents"],
            }
            cell = None if pooled else f"{row['family']}_{row['length']}"
            subject = row["contrast"] if pooled else f"{cell}, {row['contrast']}"
            out.append(Estimate(row["model"], subject, _split(row["contrast"]), change, cell=cell or row["family"]))
        return out

    return source


def table3_rows(predictor: str, methods: Sequence[str]) -> Source:
    """Table 3's rows of one predictor and the given methods: predicted − full-horizon population gap."""

    def source(inputs: Inputs) -> list[Estimate]:
        frame = inputs.table("table3", "numbers")
        if frame is None:
            return []
        rows = frame.filter((pl.col("predictor") == predictor) & pl.col("method").is_in(list(methods)))
        return [
            Estimate(
                r["model"], f"{r['contrast']}, {r['method']}", _split(r["contrast"]), {**r, "estimate": r["difference"]}
            )
            for r in rows.iter_rows(named=True)
        ]

    return source


# --- the paper's values ---------------------------------------------------------------------------------------


def _value(parts: Mapping[str, float], scale: float, unit: str) -> PaperValue | None:
    values = {k: float(v) for k, v in parts.items() if v is not None and np.isfinite(float(v))}
    if not values:
        return None
    text = ", ".join(f"{k} {v:g}{unit}" for k, v in values.items())
    return PaperValue(min(values.values()) * scale, max(values.values()) * scale, text)


def _models(inputs: Inputs) -> list[str]:
    return list(lookup(inputs.paper, ("setting", "model_keys")) or ["llama", "qwen"])


def action_difference(section: str, key: str, scale: float, unit: str) -> PaperRef:
    """The paper's per-action values (``paper[section][key][model][action]``), as a − b of the row's contrast."""

    def ref(inputs: Inputs, estimate: Estimate) -> PaperValue | None:
        if len(estimate.actions) != 2:
            return None
        a, b = (inputs.paper_action(x) for x in estimate.actions)
        parts = {}
        for model in _models(inputs):
            va, vb = lookup(inputs.paper, (section, key, model, a)), lookup(inputs.paper, (section, key, model, b))
            if va is not None and vb is not None:
                parts[model] = round(float(va) - float(vb), 2)
        return _value(parts, scale, unit)

    return ref


def per_contrast(section: str, key: str, scale: float, unit: str) -> PaperRef:
    """The paper's per-contrast values, ``paper[section][key]["{a}_minus_{b}"][model]``."""

    def ref(inputs: Inputs, estimate: Estimate) -> PaperValue | None:
        if len(estimate.actions) != 2:
            return None
        return _value(
            lookup(inputs.paper, (section, key, paper_key(inputs.paper_actions, *estimate.actions))) or {}, scale, unit
        )

    return ref


def per_model(section: str, key: str, scale: float, unit: str) -> PaperRef:
    """One value per paper model, ``paper[section][key][model]``."""
    return lambda inputs, estimate: _value(lookup(inputs.paper, (section, key)) or {}, scale, unit)


def value_range(section: str, key: str, scale: float, unit: str) -> PaperRef:
    """A range ``paper[section][key]`` = [low, high] over the paper's cells."""

    def ref(inputs: Inputs, estimate: Estimate) -> PaperValue | None:
        pair = lookup(inputs.paper, (section, key))
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            return None
        low, high = sorted(float(v) for v in pair)
        return PaperValue(low * scale, high * scale, f"{low:g}–{high:g}{unit} over the paper's cells")

    return ref


def late_minus_early_of(section: str, key: str, action: str, scale: float, unit: str) -> PaperRef:
    """``paper[section][key][model]`` = {early, late} for one paper action: late − early, on that action's rows only."""

    def ref(inputs: Inputs, estimate: Estimate) -> PaperValue | None:
        if [inputs.paper_action(x) for x in estimate.actions] != [action]:
            return None
        windows = lookup(inputs.paper, (section, key)) or {}
        parts = {m: round(v["late"] - v["early"], 2) for m, v in windows.items() if {"late", "early"} <= set(v)}
        return _value(parts, scale, unit)

    return ref


def pair_by_action(section: str, key: str, order: Sequence[str], scale: float, unit: str) -> PaperRef:
    """``paper[section][key][model]`` = a pair of values, one per paper action of ``order``: the row's action's."""

    def ref(inputs: Inputs, estimate: Estimate) -> PaperValue | None:
        action = inputs.paper_action(estimate.actions[0]) if len(estimate.actions) == 1 else None
        if action not in order:
            return None
        parts = {m: pair[order.index(action)] for m, pair in (lookup(inputs.paper, (section, key)) or {}).items()}
        return _value(parts, scale, unit)

    return ref


def family_envelope(section: str, key: str, scale: float, unit: str) -> PaperRef:
    """``paper[section][key][model]``: a range per family (``{family: [low, high]}``) or one range for every family;
    the envelope over the paper's models for the row's family (pooled rows: every family)."""

    def ref(inputs: Inputs, estimate: Estimate) -> PaperValue | None:
        family = estimate.cell if estimate.cell not in (None, POOLED) else None
        bounds, texts = [], []
        for model, value in (lookup(inputs.paper, (section, key)) or {}).items():
            ranges = value if isinstance(value, Mapping) else {None: value}
            for fam, pair in ranges.items():
                if family is None or fam in (None, family):
                    bounds += [float(v) for v in pair]
                    texts.append(f"{model}{' ' + fam if fam else ''} [{pair[0]:g}, {pair[1]:g}]{unit}")
        if not bounds:
            return None
        return PaperValue(min(bounds) * scale, max(bounds) * scale, "; ".join(texts))

    return ref


def block_change(section: str, key: str, scale: float, unit: str) -> PaperRef:
    """``paper[section][key][model]`` = the pooled gaps of the position blocks: last − first block, per model."""

    def ref(inputs: Inputs, estimate: Estimate) -> PaperValue | None:
        gaps = lookup(inputs.paper, (section, key)) or {}
        return _value({m: round(v[-1] - v[0], 2) for m, v in gaps.items() if len(v) >= 2}, scale, unit)

    return ref
