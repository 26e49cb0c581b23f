"""The paper's analysis (arXiv 2609.16617, §5): the data of Figures 5–7 and Tables 2–3 from a study's metrics.

Modules: ``items`` (the registry of what each figure, table, section and the leaderboard computes), ``inputs`` (metrics,
document means, contrasts, cells), ``bootstrap`` (the cluster bootstrap over documents), ``windows``, ``decomposition``
(Figures 5, 7), ``timing`` (Figure 5), ``profiles`` (Figures 6, 7), ``blocks`` (Table 2), ``prediction`` (Table 3),
``accuracy`` (task accuracy, early vs late divergence), ``endings`` (first-EOS steps of x and y, pairs still running
at H), ``leaderboard`` (actions ranked by R_H), ``claims`` and
``verdicts`` (verdicts against the paper's claims) and ``swrb_comparison`` (the report's section SWRB). Proportions
(0–1) throughout; :mod:`kvdiv.outputs` prints percentage points. The mathematics: docs/estimators.md.
"""
