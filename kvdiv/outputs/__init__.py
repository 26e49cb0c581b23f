"""What the workflow shows: figures, tables and the report, drawn from the analysis tables.

Modules: :mod:`~kvdiv.outputs.style` (the one matplotlib style, atomic PDF + PNG), one module per figure
(:mod:`~kvdiv.outputs.figure4` for the finite-state study, :mod:`~kvdiv.outputs.figure5`,
:mod:`~kvdiv.outputs.figure6`, :mod:`~kvdiv.outputs.figure7`) and :mod:`~kvdiv.outputs.figures` (figure item →
plotting function), :mod:`~kvdiv.outputs.tables` (Tables 2–3 as CSV, Markdown and LaTeX) and
:mod:`~kvdiv.outputs.report` (``results/report.md``: every headline number beside the paper's, whose values come
only from ``kvdiv/data/paper_reported_values.yaml``).
"""
