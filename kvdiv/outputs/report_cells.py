"""The cells every section of ``results/report.md`` is made of: our intervals, the paper's values, shares and counts,
the table of rows "quantity | our model | documents | ours | paper", and what a section is given
(:class:`SectionContext`). Each result's section lives in the result's own module (:mod:`kvdiv.results.registry`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from kvdiv.analysis.inputs import lookup
from kvdiv.outputs.tables import interval

#: How a share of a gap whose interval contains 0 is shown (never as a number).
NOT_IDENTIFIED_TEXT = "not identified (gap indistinguishable from 0)"


@dataclass(frozen=True)
class SectionContext:
    """Where a result's section sits in the report: its ``item`` (the :class:`kvdiv.results.base.Result`: title,
    label), the ``study`` that fed it (None when unknown), its ``figure`` (path relative to the report; "" without one),
    its Markdown table (text; "") and the paper's ``model_keys`` (the paper columns of :class:`PaperTable`)."""

    item: Any
    study: str | None = None
    figure: str = ""
    markdown: str = ""
    model_keys: tuple[str, ...] = ()

    def heading(self) -> str:
        """``## {title} ({study})``, with ``?`` for an unknown study."""
        return f"## {self.item.title} ({self.study if self.study is not None else '?'})"


def ci(row: Mapping | None, digits: int = 2, key: str = "estimate") -> str:
    """``est [lo, hi]`` of a row in percentage points; ``–`` without a row."""
    if row is None:
        return "–"
    return interval(row[key], row["lower"], row["upper"], digits)


_MISSING = object()


#: Appended to a paper value that covers both of its models (a count or range over all its cells), which stands in
#: the first model's column.
BOTH_MODELS = " (both models)"


def paper_value(values: Mapping, *path: str, pair: bool = False) -> str:
    """The paper's value at ``path`` of ``values`` as text: a range as ``[a, b]``, a ``pair`` of two quantities
    (MAE and RMSE; SnapKV's and recent's values) as ``a / b``, never as an interval; ``–`` when it reports none."""
    node = lookup(values, path, _MISSING)
    if node is _MISSING:
        return "–"
    if isinstance(node, list):
        return " / ".join(str(v) for v in node) if pair else "[" + ", ".join(str(v) for v in node) + "]"
    return str(node)


def paper_item(values: Mapping, index: int, *path: str) -> str:
    """Element ``index`` of the paper's list at ``path``; ``–`` when there is none."""
    node = lookup(values, path, _MISSING)
    return str(node[index]) if isinstance(node, list) and index < len(node) else "–"


def num(row: Mapping, digits: int = 2) -> str:
    """``est [lo, hi]`` without scaling; ``–`` for missing values."""
    f = lambda v: "–" if v is None or v != v else f"{round(v, digits) + 0.0:.{digits}f}"  # noqa: E731
    return f"{f(row['estimate'])} [{f(row['lower'])}, {f(row['upper'])}]"


def ratio_ci(row: Mapping | None, digits: int = 3) -> str:
    """``est [lo, hi]`` of a ratio (no scaling; 3 significant digits)."""
    if row is None:
        return "–"
    f = lambda v: "–" if v is None or v != v else ("∞" if v == float("inf") else f"{v:.{digits}g}")  # noqa: E731
    return f"{f(row['estimate'])} [{f(row['lower'])}, {f(row['upper'])}]"


def count(values: pl.Series, threshold: float) -> str:
    """``k of n`` cells above ``threshold`` among cells with an estimate (NaN cells are named, not counted)."""
    v = values.cast(pl.Float64).to_numpy()
    finite = np.isfinite(v)
    text = f"{int((v[finite] > threshold).sum())} of {int(finite.sum())}"
    missing = int((~finite).sum())
    return text + (f" ({missing} without data)" if missing else "")


def share(row: Mapping | None, digits: int = 1) -> str:
    """A share of a gap: "not identified" when the gap's interval contains 0 (``identified`` of
    :mod:`kvdiv.analysis.decomposition`), else its interval, flagged when the interval excludes the estimate."""
    if row is None:
        return "–"
    if row.get("identified") is False:
        return NOT_IDENTIFIED_TEXT
    text = ci(row, digits)
    if row.get("contains_estimate") is False:
        text += " ⚠ interval excludes its estimate"
    return text


class PaperTable:
    """Rows: quantity | our model | documents | ours | one column per paper model (``paper: {key}``)."""

    def __init__(self, model_keys: Sequence[str]) -> None:
        self.model_keys = tuple(model_keys)
        self.rows: list[tuple[str, ...]] = []

    def add(self, quantity: str, model: str, n_docs: object, ours: str, *paper: str) -> None:
        """One row; ``paper``: the paper's value per model key, in order (``–`` for those not given)."""
        cells = list(paper) + ["–"] * (len(self.model_keys) - len(paper))
        self.rows.append((quantity, model, str(n_docs), ours, *cells))

    def markdown(self) -> str:
        """The table as Markdown, or a line saying it has no rows."""
        if not self.rows:
            return "_No rows: the analysis tables are empty._\n"
        cols = ["quantity", "our model", "documents", "ours (95% CI)", *(f"paper: {k}" for k in self.model_keys)]
        head = "| " + " | ".join(cols) + " |\n|" + "|".join("---" for _ in cols) + "|\n"
        return head + "".join("| " + " | ".join(r) + " |\n" for r in self.rows)


def relative(path: str | Path | None, out: Path) -> str:
    """``path`` relative to the folder of ``out`` (as given when outside it; "" for None)."""
    if path is None:
        return ""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(out.resolve().parent))
    except ValueError:
        return str(path)


def read_text(path: str | Path | None) -> str:
    """The text of ``path`` ("" for None)."""
    return Path(path).read_text(encoding="utf-8") if path else ""
