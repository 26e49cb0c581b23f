"""kvdiv.outputs.registry: the report, the figure and the table writers follow the registry of results, so a result
added there (here monkeypatched) is reported, drawn and written without touching kvdiv/outputs/report.py."""

from __future__ import annotations

import polars as pl
import pytest

from kvdiv.analysis.items import AnalysisItem, AnalysisTable, get_item
from kvdiv.io import write_parquet
from kvdiv.outputs.registry import RESULTS, Result, plot_result, write_result_table
from kvdiv.outputs.report import build_report, paper_values
from kvdiv.outputs.tables import write_table

SETTING = {
    "models": {"tiny": "random"},
    "studies": {},
    "figure_studies": {"extra": "toy"},
    "bootstrap": 10,
    "confidence": 0.95,
}


def extra_section(frames, setting, paper, context) -> list[str]:
    """A section that shows what the report hands it."""
    rows = frames["numbers"].height
    return [context.heading(), "", f"rows: {rows}; paper keys: {sorted(paper)}; figure: {context.figure}", ""]


@pytest.fixture
def extra(monkeypatch, tmp_path):
    item = AnalysisItem(
        "extra",
        "section",
        "Extra",
        "Extra: a result added in a test",
        {"numbers": AnalysisTable(lambda metrics, n_boot, seed, confidence: pl.DataFrame())},
    )
    result = Result(item, extra_section, paper=("prediction",))
    monkeypatch.setitem(RESULTS, "extra", result)  # a new entry at the end of the registry
    write_parquet(pl.DataFrame({"x": [1, 2, 3]}), tmp_path / "numbers.parquet")
    return {"extra": {"numbers": tmp_path / "numbers.parquet"}}


def test_a_result_added_to_the_registry_is_in_the_report(extra, tmp_path):
    text = build_report(extra, {}, {"extra": tmp_path / "extra.png"}, SETTING, tmp_path / "report.md")
    assert (
        "## Extra: a result added in a test (toy)\n\nrows: 3; paper keys: ['prediction']; figure: extra.png\n" in text
    )
    assert text.index("## This run versus") < text.index("## Extra")
    # not built: no section
    assert "## Extra" not in build_report({}, {}, {}, SETTING, tmp_path / "r2.md")


def test_results_are_reported_in_registry_order_with_their_own_paper_keys(tmp_path):
    keys = set(paper_values())
    assert all(set(r.paper) <= keys for r in RESULTS.values())
    text = build_report({"accuracy": {}, "swrb": {}}, {}, {}, SETTING, tmp_path / "report.md")
    assert text.index("## Accuracy") < text.index("## SWRB")
    assert "_The accuracy table was not built._" in text and "paper: llama | paper: qwen" not in text


def test_plot_result_passes_only_the_plotting_settings_a_figure_takes(monkeypatch, tmp_path):
    seen = {}
    figure = Result(get_item("figure6"), plot=lambda frames, pdf, png, **kw: seen.update(kw), plot_settings=("early",))
    monkeypatch.setitem(RESULTS, "figure6", figure)
    plot_result("figure6", {}, tmp_path / "f.pdf", tmp_path / "f.png", dpi=50, early=[1, 2], late=[3, 4])
    assert seen == {"dpi": 50, "early": [1, 2]}
    with pytest.raises(TypeError, match="'early'"):
        plot_result("figure6", {}, tmp_path / "f.pdf", tmp_path / "f.png", dpi=50)
    with pytest.raises(KeyError, match="swrb.*no figure"):
        plot_result("swrb", {}, tmp_path / "f.pdf", tmp_path / "f.png", dpi=50)


def test_the_one_table_writer_writes_csv_and_markdown_with_or_without_latex(tmp_path):
    numbers = pl.DataFrame({"a": [1, 2]})
    write_table(numbers, numbers, (tmp_path / "t.csv", tmp_path / "t.md"), "Caption.")
    assert (tmp_path / "t.md").read_text() == "Caption.\n\n| a |\n|---|\n| 1 |\n| 2 |\n"
    assert not (tmp_path / "t.tex").exists()
    with pytest.raises(ValueError, match="needs a label"):
        write_table(numbers, numbers, (tmp_path / "u.csv", tmp_path / "u.md", tmp_path / "u.tex"), "Caption.")
    with pytest.raises(ValueError, match="got 1 paths"):
        write_table(numbers, numbers, (tmp_path / "v.csv",), "Caption.")
    with pytest.raises(KeyError, match="'figure5' has no table"):
        write_result_table("figure5", numbers, (tmp_path / "w.csv", tmp_path / "w.md"))
