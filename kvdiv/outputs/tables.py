"""The one writer of kvdiv's tables: numbers as CSV, a display frame as Markdown (under its caption) and LaTeX
(booktabs), each written atomically, and the cell formats they share (percentage points, ``est [lo, hi]``).

Every table item, the leaderboard and their display frames (each in its item's own module) go through
:func:`write_table`; which result has which display frame and caption is its module of :mod:`kvdiv.results`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from kvdiv.io import atomic_path


def pp(value: float | None, digits: int = 2) -> str:
    """A proportion formatted in percentage points (``–`` when missing)."""
    if value is None or value != value:
        return "–"
    return f"{round(100 * value, digits) + 0.0:.{digits}f}"  # + 0.0: no "-0.00"


def interval(est: float, lo: float, hi: float, digits: int = 2) -> str:
    """``est [lo, hi]`` in percentage points."""
    return f"{pp(est, digits)} [{pp(lo, digits)}, {pp(hi, digits)}]"


def to_markdown(frame: pl.DataFrame) -> str:
    """A GitHub-flavoured Markdown table."""
    cols = frame.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in frame.iter_rows():
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def _tex(value: object) -> str:
    text = str(value)
    for a, b in (
        ("\\", r"\textbackslash{}"),
        ("_", r"\_"),
        ("%", r"\%"),
        ("&", r"\&"),
        ("#", r"\#"),
        ("−", "--"),
        ("–", "--"),
        ("±", r"$\pm$"),
        ("τ", r"$\tau$"),
    ):
        text = text.replace(a, b)
    return text


def to_latex(frame: pl.DataFrame, caption: str, label: str) -> str:
    """A booktabs LaTeX table."""
    cols = frame.columns
    lines = [
        r"\begin{table}[t]",
        r"\centering\small",
        rf"\caption{{{_tex(caption)}}}",
        rf"\label{{{label}}}",
        r"\begin{tabular}{" + "l" * len(cols) + "}",
        r"\toprule",
        " & ".join(_tex(c) for c in cols) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(_tex(v) for v in row) + r" \\" for row in frame.iter_rows()]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_table(
    numbers: pl.DataFrame, display: pl.DataFrame, paths: Sequence[str | Path], caption: str, label: str | None = None
) -> None:
    """Write ``numbers`` as CSV and ``display`` as Markdown (under ``caption``) and LaTeX (with ``label``) to
    ``paths`` = (csv, md, tex), or to (csv, md) for no LaTeX."""
    if len(paths) not in (2, 3):
        raise ValueError(f"write_table writes (csv, md) or (csv, md, tex), got {len(paths)} paths: {list(paths)}")
    csv, md, *tex = (Path(p) for p in paths)
    with atomic_path(csv) as tmp:
        numbers.write_csv(tmp)
    with atomic_path(md) as tmp:
        tmp.write_text(f"{caption}\n\n{to_markdown(display)}", encoding="utf-8")
    if tex:
        if label is None:
            raise ValueError(f"write_table: the LaTeX table {tex[0]} needs a label")
        with atomic_path(tex[0]) as tmp:
            tmp.write_text(to_latex(display, caption, label), encoding="utf-8")
