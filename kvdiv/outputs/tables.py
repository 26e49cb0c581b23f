"""Tables 2 and 3 of arXiv 2609.16617 as CSV (numbers), Markdown and LaTeX (formatted, percentage points).

Table 2: generation-clock mismatch gaps by position block per model × task family × length (pooled rows
per family: length ``all``; per model: family and length ``all``). Table 3: whether positions 1–32 or the
fixed-history predictors recover the full-horizon population-average gap within ±2 pp, with document-level
MAE/RMSE. Inputs are the frames of
:mod:`kvdiv.analysis` (proportions); the formatted tables print percentage points. Captions are the items'
(:mod:`kvdiv.analysis.items`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from kvdiv.analysis.items import get_item
from kvdiv.io import atomic_path


def pp(value: float | None, digits: int = 2) -> str:
    """A proportion formatted in percentage points (``–`` when missing)."""
    if value is None or value != value:
        return "–"
    return f"{round(100 * value, digits) + 0.0:.{digits}f}"  # + 0.0: no "-0.00"


def interval(est: float, lo: float, hi: float, digits: int = 2) -> str:
    """``est [lo, hi]`` in percentage points."""
    return f"{pp(est, digits)} [{pp(lo, digits)}, {pp(hi, digits)}]"


def table2_frame(gaps: pl.DataFrame) -> pl.DataFrame:
    """Display frame of Table 2: one row per model × contrast × family × length, one column per block."""
    if gaps.is_empty():
        raise ValueError("Table 2 has no rows: no contrast of the configured analysis.contrasts is in the study")
    blocks = list(dict.fromkeys(gaps["block"].to_list()))
    shown = gaps.with_columns(
        pl.struct("gap", "lower", "upper").map_elements(lambda r: interval(r["gap"], r["lower"], r["upper"]), return_dtype=pl.Utf8).alias("cell")
    )
    wide = shown.pivot(on="block", index=["model", "contrast", "family", "length", "n_documents"], values="cell")
    order = wide.with_columns(
        (pl.col("family") == "all").alias("_pooled"), pl.col("length").cast(pl.Int64, strict=False).alias("_length")
    ).sort("model", "contrast", "_pooled", "family", "_length", nulls_last=True)  # family-pooled (length all) last
    return order.select("model", "contrast", "family", "length", "n_documents", *blocks).rename(
        {"n_documents": "documents", **{b: f"positions {b} (pp)" for b in blocks}}
    )


def table3_frame(pred: pl.DataFrame) -> pl.DataFrame:
    """Display frame of Table 3: one row per model × predictor × method."""
    if pred.is_empty():
        raise ValueError("Table 3 has no rows")
    return pred.sort("model", "predictor", "method").select(
        "model",
        "contrast",
        "predictor",
        "method",
        pl.col("n_documents").alias("documents"),
        pl.col("population_gap").map_elements(pp, return_dtype=pl.Utf8).alias("full-horizon gap (pp)"),
        pl.col("predicted_gap").map_elements(pp, return_dtype=pl.Utf8).alias("predicted (pp)"),
        pl.struct("difference", "lower", "upper").map_elements(
            lambda r: interval(r["difference"], r["lower"], r["upper"]), return_dtype=pl.Utf8).alias("predicted − full (pp)"),
        pl.when(pl.col("interval_within")).then(pl.lit("yes")).when(pl.col("point_within")).then(pl.lit("point only"))
        .otherwise(pl.lit("no")).alias("within ±2 pp"),
        pl.col("mae").map_elements(pp, return_dtype=pl.Utf8).alias("MAE (pp)"),
        pl.col("rmse").map_elements(pp, return_dtype=pl.Utf8).alias("RMSE (pp)"),
    )


def to_markdown(frame: pl.DataFrame) -> str:
    """A GitHub-flavoured Markdown table."""
    cols = frame.columns
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in frame.iter_rows():
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def _tex(value: object) -> str:
    text = str(value)
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                 ("−", "--"), ("–", "--"), ("±", r"$\pm$"), ("τ", r"$\tau$")):
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


def write_table(numbers: pl.DataFrame, display: pl.DataFrame, paths: Sequence[str | Path], caption: str, label: str) -> None:
    """Write ``numbers`` as CSV and ``display`` as Markdown and LaTeX to ``paths`` = (csv, md, tex)."""
    csv, md, tex = (Path(p) for p in paths)
    with atomic_path(csv) as tmp:
        numbers.write_csv(tmp)
    with atomic_path(md) as tmp:
        tmp.write_text(f"{caption}\n\n{to_markdown(display)}", encoding="utf-8")
    with atomic_path(tex) as tmp:
        tmp.write_text(to_latex(display, caption, label), encoding="utf-8")


#: The display frame of each table item (kvdiv.analysis.items).
DISPLAY = {"table2": table2_frame, "table3": table3_frame}


def write_item_table(item: str, numbers: pl.DataFrame, paths: Sequence[str | Path]) -> None:
    """Write table item ``item`` (``table2``, ``table3``) from its numbers to ``paths`` = (csv, md, tex), with the
    item's caption and the LaTeX label ``tab:{item}``."""
    if item not in DISPLAY:
        raise KeyError(f"unknown table {item!r}; tables: {', '.join(DISPLAY)}")
    write_table(numbers, DISPLAY[item](numbers), paths, get_item(item).caption, f"tab:{item}")
