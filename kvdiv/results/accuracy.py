"""The accuracy table: does divergence change the answer?"""

from __future__ import annotations

from kvdiv.analysis.accuracy import accuracy_table
from kvdiv.outputs.accuracy import accuracy_frame, section
from kvdiv.results.base import Result, Table

RESULT = Result(
    name="accuracy",
    kind="table",
    label="Accuracy",
    title="Accuracy: does divergence change the answer?",
    tables={"numbers": Table(accuracy_table)},
    display=accuracy_frame,
    caption="Task accuracy (%) of the full-cache continuation x and the evicted one y (the document's own scorer: "
    "RULER string-match, HELMET SubEM), the share of pairs whose score changed, and the accuracy of y when the "
    "chains diverged at or before the end of x's first answer span (early) or after it (late), per model × stratum "
    "× action, with 95% cluster-bootstrap intervals over documents.",
    section=section,
    study="retention50",
)
