"""The drawing and writing helpers every result uses (each result's own plot, table and report section live in its
module of :mod:`kvdiv.results`).

Modules: :mod:`~kvdiv.outputs.style` (the one matplotlib style: page width, panel grids, legends outside the data,
atomic PDF + PNG), :mod:`~kvdiv.outputs.tables` (the one table writer: CSV, Markdown, LaTeX),
:mod:`~kvdiv.outputs.report_cells` (the cells of report sections) and :mod:`~kvdiv.outputs.pages` (Markdown as
self-contained HTML pages for Snakemake's report).
"""
