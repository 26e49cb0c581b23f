"""What the workflow shows: figures, tables and the report, drawn from the analysis tables.

Modules: :mod:`~kvdiv.outputs.registry` (one result per item of :mod:`kvdiv.analysis.items`: its report section,
plot, display frame and paper keys), one module per item (:mod:`~kvdiv.outputs.figure5` ... ``figure7``,
``figure_probabilistic``, ``table2``, ``table3``, ``accuracy``, ``swrb``, ``leaderboard``: its plot or display frame
and its report section), :mod:`~kvdiv.outputs.figure4` (the finite-state study), :mod:`~kvdiv.outputs.style` (the
one matplotlib style, atomic PDF + PNG), :mod:`~kvdiv.outputs.tables` (the one table writer: CSV, Markdown, LaTeX),
:mod:`~kvdiv.outputs.report_cells` (the cells of report sections) and :mod:`~kvdiv.outputs.report`
(``results/report.md``; the paper's values come only from ``kvdiv/data/paper_reported_values.yaml``).
"""
