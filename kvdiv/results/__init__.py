"""The results kvdiv builds from a study's metrics: Figures 5–7, Tables 2–3, the probabilistic figure, the accuracy
table, the SWRB section and the divergence leaderboard, one module each (its ``RESULT``: tables and their settings,
plot and its settings, caption, report section, paper keys, default study), and the claims.

Modules: :mod:`~kvdiv.results.base` (what a result is), :mod:`~kvdiv.results.registry` (the results in report order),
one module per result (``figure5`` … ``leaderboard``), :mod:`~kvdiv.results.claims` (the paper's headline claims as
data) and :mod:`~kvdiv.results.report` (results/report.md). The builders (the statistics) are
:mod:`kvdiv.analysis`'s; the drawing and table helpers :mod:`kvdiv.outputs`'s.
"""
