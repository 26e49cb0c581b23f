"""The accuracy table: task accuracy (%) of the full-cache continuation x and the evicted one y per model × stratum ×
action, the share of changed answers and y's accuracy after early and late divergence (its numbers:
:mod:`kvdiv.analysis.accuracy`): its display frame and its report section "Does divergence change the answer?".
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from kvdiv.analysis.inputs import POOLED, stratum_key
from kvdiv.outputs.report_cells import SectionContext, ci
from kvdiv.outputs.tables import interval
from kvdiv.analysis.accuracy import accuracy_table
from kvdiv.results.base import Result, Table

ACCURACY_COLUMNS = {
    "accuracy_x": "accuracy x (%)",
    "accuracy_y": "accuracy y (%)",
    "accuracy_gap": "x − y (pp)",
    "answer_changed": "answer changed (%)",
    "share_early": "early divergence (%)",
    "accuracy_y_early": "accuracy y, early (%)",
    "accuracy_y_late": "accuracy y, late (%)",
}


def accuracy_frame(acc: pl.DataFrame) -> pl.DataFrame:
    """Display frame of the accuracy table (:mod:`kvdiv.analysis.accuracy`): one row per model × stratum × action,
    one column per statistic (percent, with intervals)."""
    if acc.is_empty():
        raise ValueError("the accuracy table has no rows: no document of the study has gold answers")
    shown = acc.filter(pl.col("statistic").is_in(list(ACCURACY_COLUMNS))).with_columns(
        pl.struct("estimate", "lower", "upper")
        .map_elements(lambda r: interval(r["estimate"], r["lower"], r["upper"], 1), return_dtype=pl.Utf8)
        .alias("cell")
    )
    wide = shown.pivot(on="statistic", index=["model", "stratum", "action", "n_documents"], values="cell")
    order = sorted(wide.iter_rows(named=True), key=lambda r: (r["model"], stratum_key(r["stratum"]), r["action"]))
    return pl.DataFrame(order, schema=wide.schema).select(
        "model",
        "stratum",
        "action",
        pl.col("n_documents").alias("documents"),
        *[pl.col(k).alias(v) for k, v in ACCURACY_COLUMNS.items()],
    )


def section(frames: Mapping[str, pl.DataFrame], setting: Mapping, paper: Mapping, context: SectionContext) -> list[str]:
    """The report's section "Does divergence change the answer?": pooled accuracy of x and y, the share of changed
    answers and y's accuracy after early and late divergence, per model × action, then the table."""
    lines = [
        context.heading(),
        "",
        "Every stored continuation scored with its document's own scorer (its task's metric: string-match all, "
        "SubEM, ordered recall of a list's items, ROUGE-L recall of a rewritten passage; docs/usage.md#documents): "
        "x is the full-cache continuation, y the evicted one. A long answer's score is a recall over its whole gold "
        "list, so an answer cut at H cannot reach 100 %: read long-answer accuracies against what H tokens can hold, "
        "not against 100 %. *Early* divergence: τ at or before the step that ends x's first gold-answer span "
        "(for a list, its first item); *late*: after it. Early and late cells count only the documents whose x "
        "names a gold item. Percent, with 95% cluster-bootstrap intervals over documents.",
        "",
    ]
    acc = frames.get("numbers")
    if acc is None:
        return lines + ["_The accuracy table was not built._", ""]
    rows = [
        "| model | action | documents | accuracy x | accuracy y | answer changed | accuracy y, early "
        "| accuracy y, late |",
        "|---|---|---|---|---|---|---|---|",
    ]
    pooled = acc.filter(pl.col("stratum") == POOLED)
    for (model, action), sub in sorted(pooled.group_by(["model", "action"]), key=lambda kv: kv[0]):
        get = {r["statistic"]: r for r in sub.iter_rows(named=True)}
        cells = [
            ci(get.get(k), 1)
            for k in ("accuracy_x", "accuracy_y", "answer_changed", "accuracy_y_early", "accuracy_y_late")
        ]
        rows.append(f"| {model} | {action} | {sub['n_documents'][0]} | " + " | ".join(cells) + " |")
    if len(rows) == 2:
        rows = ["_No rows: no document of the study has gold answers._"]
    return lines + rows + ["", "Per stratum:", "", context.markdown, ""]


RESULT = Result(
    name="accuracy",
    kind="table",
    label="Accuracy",
    title="Accuracy: does divergence change the answer?",
    tables={"numbers": Table(accuracy_table)},
    display=accuracy_frame,
    caption="Task accuracy (%) of the full-cache continuation x and the evicted one y (the document's own scorer: "
    "its task's metric; long answers: a recall over the whole gold list, capped by what H tokens hold), the share of "
    "pairs whose score changed, and the accuracy of y when the "
    "chains diverged at or before the end of x's first answer span (early) or after it (late), per model × stratum "
    "× action, with 95% cluster-bootstrap intervals over documents.",
    section=section,
    study="retention50",
)
