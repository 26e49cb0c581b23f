"""Table 3: early and fixed-history prediction of the full-horizon gap (paper §5.7)."""

from __future__ import annotations

from kvdiv.analysis.prediction import prediction_table
from kvdiv.outputs.table3 import section, table3_frame
from kvdiv.results.base import Result, Table

RESULT = Result(
    name="table3",
    kind="table",
    label="Table 3",
    title="Table 3: early and fixed-history prediction of the full-horizon gap",
    tables={
        "numbers": Table(
            prediction_table,
            {
                "contrast": "table3_contrast",
                "short_window": "short_window",
                "folds": "folds",
                "ridge_alpha": "ridge_alpha",
                "criterion": "criterion_pp",
            },
        )
    },
    display=table3_frame,
    caption="Table 3: do generation positions 1–32 (observed mismatch gap, fixed-history TV gap) recover the "
    "full-horizon population-average gap within ±2 pp? Document-level MAE/RMSE of the predictions.",
    section=section,
    paper=("prediction",),
    study="retention50",
)
