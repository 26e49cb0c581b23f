"""The paper's analysis (arXiv 2609.16617, §5): the data of Figures 5–7 and Tables 2–3 from a study's metrics.

Modules: :mod:`~kvdiv.analysis.items` (the registry of figures and tables: their frames, builders, settings and
captions), :mod:`~kvdiv.analysis.inputs` (metrics, document means, contrasts, cells), :mod:`~kvdiv.analysis.bootstrap`
(the cluster bootstrap over documents), :mod:`~kvdiv.analysis.windows` (position and depth windows),
:mod:`~kvdiv.analysis.decomposition` (Figures 5, 7: the gap split into exposure and branch-mismatch shares; EOS
shares), :mod:`~kvdiv.analysis.timing` (Figure 5: survival and entry times), :mod:`~kvdiv.analysis.profiles`
(Figures 6, 7: branch TV by depth, late minus early), :mod:`~kvdiv.analysis.blocks` (Table 2),
:mod:`~kvdiv.analysis.prediction` (Table 3), :mod:`~kvdiv.analysis.accuracy` (task accuracy with the full and the
evicted cache, early vs late divergence), :mod:`~kvdiv.analysis.leaderboard` (every action of a study ranked by
R_H), :mod:`~kvdiv.analysis.verdicts` (a contrast's verdict against a paper's claimed direction) and :mod:`~kvdiv.analysis.swrb_comparison` (the report's section SWRB: variance–cost of residual-branch
estimation and the enclosure of R_H; the complete-vs-swrb benchmark). Proportions (0–1) throughout; :mod:`kvdiv.outputs` prints
percentage points.
"""
