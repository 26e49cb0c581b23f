"""What a result is: :class:`Result` (a figure, table, report section or the leaderboard) with its :class:`Table`
builders and the config settings each takes, its :class:`Plot` and the settings it takes, its display frame, caption,
report section, the paper's values it reads and the study that feeds it by default. One module of
:mod:`kvdiv.results` declares one result (its ``RESULT``); :mod:`kvdiv.results.registry` lists them in report order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

#: The kinds of result: drawn (``figure``), written as CSV/Markdown/LaTeX (``table``), only in the report
#: (``section``), or the per-model divergence leaderboard (``leaderboard``, its own config section).
KINDS = ("figure", "table", "section", "leaderboard")
#: Config keys in percentage points that builders take as proportions.
PERCENTAGE_POINTS = ("criterion_pp",)
#: A report section: ``section(frames, setting, paper, context) -> lines`` (frames: the result's tables, a table
#: result's ``numbers``; paper: the paper's values under the result's ``paper`` keys; context:
#: :class:`kvdiv.outputs.report_cells.SectionContext`).
Section = Callable[..., list[str]]


@dataclass(frozen=True)
class Table:
    """One frame of a result: ``build(metrics, n_boot=, seed=, confidence=, **settings, **fixed)``; ``settings`` maps
    a builder argument to the key of the result's config section it is read from (so a change of that key reruns
    exactly the tables that use it), ``fixed`` are arguments the result fixes."""

    build: Callable[..., pl.DataFrame]
    settings: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plot:
    """How a result is drawn: ``draw(frames, pdf, png, dpi=, **settings)`` with ``settings`` (draw argument → key of
    the result's config section) the only settings its figure job takes."""

    draw: Callable[..., None]
    settings: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    """A figure, table, report section or the leaderboard, declared in one module.

    ``name`` (``figure5``: the key of ``analysis.studies`` and the stem of its files), ``kind`` (:data:`KINDS`),
    ``label`` (Figure 5), ``title`` (its heading in results/report.md), ``tables`` (name → :class:`Table`), ``plot``,
    ``display`` (a table's formatted frame, written with ``caption``), ``section`` (its part of the report, None: not
    in the report), ``paper`` (top-level keys of the paper's values its section reads), ``schema`` (CSV read
    overrides of its numbers), ``config`` (the config section its settings name: ``analysis``, or ``leaderboard``)
    and ``study`` (the study that feeds it when ``analysis.studies`` is not given; None: only when named there).
    """

    name: str
    kind: str
    label: str
    title: str
    tables: Mapping[str, Table]
    plot: Plot | None = None
    display: Callable[[pl.DataFrame], pl.DataFrame] | None = None
    caption: str = ""
    section: Section | None = None
    paper: tuple[str, ...] = ()
    schema: Mapping[str, Any] = field(default_factory=dict)
    config: str = "analysis"
    study: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"result {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not self.tables:
            raise ValueError(f"result {self.name!r} has no tables")
        if self.kind == "figure" and self.plot is None:
            raise ValueError(f"result {self.name!r} is a figure without a plot")
        if self.kind in ("table", "leaderboard") and (self.display is None or "numbers" not in self.tables):
            raise ValueError(f"result {self.name!r}: a {self.kind} needs a `numbers` table and a display frame")

    def table_settings(self, table: str, section: Mapping[str, Any]) -> dict[str, Any]:
        """The settings (builder argument → value) table ``table`` takes from the result's config ``section``."""
        spec = self.tables[table]
        return {arg: _value(key, section) for arg, key in spec.settings.items()}

    def plot_settings(self, section: Mapping[str, Any]) -> dict[str, Any]:
        """The settings (draw argument → value) its plot takes from the result's config ``section``."""
        return {arg: _value(key, section) for arg, key in (self.plot.settings if self.plot else {}).items()}

    def build_table(
        self, table: str, metrics: Any, *, n_boot: int, seed: int, confidence: float, **settings: Any
    ) -> pl.DataFrame:
        """One table: its builder called with the bootstrap settings, the table's own settings (taken from
        ``settings`` by argument name; a missing one is an error naming it) and the result's fixed arguments."""
        spec = self.tables[table]
        missing = [arg for arg in spec.settings if arg not in settings]
        if missing:
            raise TypeError(f"result {self.name!r}, table {table!r} needs the setting {missing[0]!r}")
        own = {arg: settings[arg] for arg in spec.settings}
        return spec.build(metrics, n_boot=n_boot, seed=seed, confidence=confidence, **own, **dict(spec.fixed))

    def build(self, metrics: Any, **kwargs: Any) -> dict[str, pl.DataFrame]:
        """Every table (the arguments of :meth:`build_table`; each table takes the settings it declares), by name."""
        return {table: self.build_table(table, metrics, **kwargs) for table in self.tables}

    def window_keys(self) -> set[str]:
        """The config keys any of its tables or its plot reads."""
        keys = {key for table in self.tables.values() for key in table.settings.values()}
        return keys | set(self.plot.settings.values() if self.plot else ())


def _value(key: str, section: Mapping[str, Any]) -> Any:
    return section[key] / 100 if key in PERCENTAGE_POINTS else section[key]
