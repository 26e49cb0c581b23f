"""The registry of results: how each item of :mod:`kvdiv.analysis.items` is drawn, written and reported.

One :class:`Result` per item, in the report's order: its report section (a function of the item's own module), its
plot, its display frame (tables and the leaderboard; written by :func:`kvdiv.outputs.tables.write_table`), the keys
of the paper's values its section reads and how the report reads its numbers. :func:`kvdiv.outputs.report.build_report`
walks :data:`RESULTS`; rules ``figure``, ``table`` and ``leaderboard`` call :func:`plot_result` and
:func:`write_result_table`. What each item computes stays in :mod:`kvdiv.analysis.items` (the analysis stage runs
without this package). Adding a result: docs/internals.md#adding-a-result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from kvdiv.analysis.items import AnalysisItem, get_item
from kvdiv.outputs import accuracy, figure5, figure6, figure7, figure_probabilistic, leaderboard, swrb, table2, table3
from kvdiv.outputs.report_cells import SectionContext
from kvdiv.outputs.tables import write_table

#: A report section: ``section(frames, setting, paper, context) -> lines`` (frames: the item's tables, a table
#: item's ``numbers``; paper: the paper's values under the result's ``paper`` keys).
Section = Callable[[Mapping[str, pl.DataFrame], Mapping, Mapping, SectionContext], list[str]]


@dataclass(frozen=True)
class Result:
    """How one analysis ``item`` is shown: its report ``section`` (None: not in the report), its ``plot`` (figures:
    ``plot(frames, pdf, png, dpi=, **settings)`` with the plotting ``plot_settings`` it takes; the leaderboard:
    ``plot(numbers, pdf, png, dpi=)``), its ``display`` frame (tables, the leaderboard), the top-level keys of
    paper_reported_values.yaml its section reads (``paper``) and the CSV ``schema`` overrides its numbers are read with.
    """

    item: AnalysisItem
    section: Section | None = None
    plot: Callable[..., None] | None = None
    plot_settings: tuple[str, ...] = ()
    display: Callable[[pl.DataFrame], pl.DataFrame] | None = None
    paper: tuple[str, ...] = ()
    schema: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The item's name (``figure5``, ...)."""
        return self.item.name


def _entries(*results: Result) -> dict[str, Result]:
    return {r.name: r for r in results}


#: Every result, in the order of results/report.md.
RESULTS: dict[str, Result] = _entries(
    Result(get_item("figure5"), figure5.section, figure5.plot_figure5, paper=("retention50",)),
    Result(get_item("figure6"), figure6.section, figure6.plot_figure6, ("early", "late"), paper=("retention50",)),
    Result(get_item("figure7"), figure7.section, figure7.plot_figure7, paper=("retention90",)),
    Result(
        get_item("table2"),
        table2.section,
        display=table2.table2_frame,
        paper=("retention90",),
        schema={"length": pl.Utf8},
    ),
    Result(get_item("table3"), table3.section, display=table3.table3_frame, paper=("prediction",)),
    Result(get_item("probabilistic"), figure_probabilistic.section, figure_probabilistic.plot_probabilistic),
    Result(get_item("accuracy"), accuracy.section, display=accuracy.accuracy_frame),
    Result(get_item("swrb"), swrb.section, paper=("finite_state",)),
    Result(get_item("leaderboard"), plot=leaderboard.plot_leaderboard, display=leaderboard.display_frame),
)


def get_result(name: str) -> Result:
    """The result called ``name`` (a ``KeyError`` listing the results otherwise)."""
    if name not in RESULTS:
        raise KeyError(f"unknown result {name!r}; results: {', '.join(RESULTS)}")
    return RESULTS[name]


def plot_result(name: str, data: Any, pdf: str | Path, png: str | Path, *, dpi: int, **settings: Any) -> None:
    """Draw result ``name`` from ``data`` (a figure's analysis tables by name; the leaderboard's numbers) to ``pdf``
    and ``png``, passing on the plotting ``settings`` it takes (Figure 6: the depth windows ``early``, ``late``)."""
    result = get_result(name)
    if result.plot is None:
        raise KeyError(f"result {name!r} has no figure; figures: {', '.join(n for n, r in RESULTS.items() if r.plot)}")
    missing = [key for key in result.plot_settings if key not in settings]
    if missing:
        raise TypeError(f"plot_result({name!r}) needs the plotting setting {missing[0]!r}")
    result.plot(data, pdf, png, dpi=dpi, **{key: settings[key] for key in result.plot_settings})


def write_result_table(name: str, numbers: pl.DataFrame, paths: Sequence[str | Path]) -> None:
    """Write result ``name``'s numbers to ``paths`` = (csv, md, tex) or (csv, md): its display frame under the
    item's caption, the LaTeX label ``tab:{name}``."""
    result = get_result(name)
    if result.display is None:
        raise KeyError(f"result {name!r} has no table; tables: {', '.join(n for n, r in RESULTS.items() if r.display)}")
    write_table(numbers, result.display(numbers), paths, result.item.caption, f"tab:{name}")


def read_numbers(name: str, path: str | Path) -> pl.DataFrame:
    """A table result's numbers CSV, read with its schema overrides."""
    return pl.read_csv(path, schema_overrides=dict(get_result(name).schema) or None)
