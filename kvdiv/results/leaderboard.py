"""The divergence leaderboard: every action of one study ranked by R_H, per model (config section ``leaderboard``)."""

from __future__ import annotations

from kvdiv.analysis.leaderboard import leaderboard_table
from kvdiv.outputs.leaderboard import display_frame, plot_leaderboard
from kvdiv.results.base import Plot, Result, Table

RESULT = Result(
    name="leaderboard",
    kind="leaderboard",
    label="Divergence leaderboard",
    title="Divergence leaderboard: which action keeps the full-cache continuation longest?",
    tables={"numbers": Table(leaderboard_table, {"steps": "steps"})},
    plot=Plot(plot_leaderboard),
    display=display_frame,
    caption="Divergence leaderboard: every action ranked by R_H (the mean share of the H steps at which the "
    "evicted continuation y differs from the full-cache one x; lowest first), with the divergence fraction "
    "P(τ ≤ h) by "
    "step, the mean first-divergence step among diverged pairs, the exposure E_H, the post-divergence mismatch "
    "rate C = Π_H/E_H and the task accuracy of y and x (the document's own scorer), with 95% cluster-bootstrap "
    "intervals over documents.",
    config="leaderboard",
)
