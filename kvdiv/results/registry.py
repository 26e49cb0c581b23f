"""The registry of results, in the order of results/report.md: one name per line of :data:`NAMES`, each the module
``kvdiv.results.<name>`` that declares its ``RESULT`` (:class:`kvdiv.results.base.Result`).

Modules are imported by name when first asked for, so a job that builds, draws or writes one result runs that
result's module only, and its ``code`` param hashes that module alone (:func:`result_modules`): editing Figure 5's
module reruns Figure 5's jobs, not Figure 6's. Adding a result: its builder (kvdiv.analysis), its module here, and
its name in :data:`NAMES` (CONTRIBUTING.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from kvdiv.results.base import Result

#: Every result, in report order.
NAMES: tuple[str, ...] = (
    "figure5",
    "figure6",
    "figure7",
    "table2",
    "table3",
    "probabilistic",
    "accuracy",
    "endings",
    "swrb",
    "leaderboard",
)


def module_name(name: str) -> str:
    """The module that declares result ``name``."""
    return f"{__package__}.{name}"


def get_result(name: str) -> Result:
    """The result called ``name`` (a ``KeyError`` listing the results otherwise)."""
    if name not in NAMES:
        raise KeyError(f"unknown result {name!r}; results: {', '.join(NAMES)}")
    result = importlib.import_module(module_name(name)).RESULT
    if not isinstance(result, Result) or result.name != name:
        raise TypeError(f"{module_name(name)}.RESULT must be a Result named {name!r}")
    return result


def results(kinds: Sequence[str] | None = None) -> Iterator[Result]:
    """Every result (of ``kinds``, if given), in report order."""
    for name in NAMES:
        result = get_result(name)
        if kinds is None or result.kind in kinds:
            yield result


def names(*kinds: str) -> tuple[str, ...]:
    """The names of the results of ``kinds`` (all with none), in report order."""
    return tuple(result.name for result in results(kinds or None))


def studied() -> tuple[str, ...]:
    """The results ``analysis.studies`` may name (all but the leaderboard, which its own config section sets)."""
    return names("figure", "table", "section")


def default_studies() -> dict[str, str]:
    """``analysis.studies`` when a config does not give it: each result that declares a default study."""
    return {result.name: result.study for result in results(("figure", "table", "section")) if result.study}


def result_modules(*names_: str) -> list[str]:
    """The modules of results ``names_`` (all with none): what a job's ``code`` param hashes beside its script."""
    return [module_name(name) for name in (names_ or NAMES)]


def plot_result(name: str, data: Any, pdf: str | Path, png: str | Path, *, dpi: int, **settings: Any) -> None:
    """Draw result ``name`` from ``data`` (its analysis tables by name; the leaderboard: its numbers) to ``pdf`` and
    ``png`` with the plot settings it declares (a missing one is an error naming it; others are refused)."""
    result = get_result(name)
    if result.plot is None:
        raise KeyError(f"result {name!r} has no figure; figures: {', '.join(n for n in names() if get_result(n).plot)}")
    declared = set(result.plot.settings)
    if set(settings) != declared:
        extra, missing = sorted(set(settings) - declared), sorted(declared - set(settings))
        raise TypeError(f"plot_result({name!r}): settings {extra} not declared, {missing} missing")
    result.plot.draw(data, pdf, png, dpi=dpi, **settings)


def write_result_table(name: str, numbers: pl.DataFrame, paths: Sequence[str | Path]) -> None:
    """Write result ``name``'s numbers to ``paths`` = (csv, md, tex) or (csv, md): its display frame under its
    caption, the LaTeX label ``tab:{name}``."""
    from kvdiv.outputs.tables import write_table

    result = get_result(name)
    if result.display is None:
        raise KeyError(
            f"result {name!r} has no table; tables: {', '.join(n for n in names() if get_result(n).display)}"
        )
    write_table(numbers, result.display(numbers), paths, result.caption, f"tab:{name}")


def read_numbers(name: str, path: str | Path) -> pl.DataFrame:
    """A table result's numbers CSV, read with its schema overrides."""
    return pl.read_csv(path, schema_overrides=dict(get_result(name).schema) or None)
