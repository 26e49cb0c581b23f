"""kvdiv.outputs.pages: report.md and the tables as self-contained HTML pages for Snakemake's HTML report."""

from __future__ import annotations

import base64

import pytest

from kvdiv.outputs.pages import markdown_page, write_markdown_page

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def test_a_table_renders_as_a_table_and_raw_html_is_escaped():
    page = markdown_page("# T\n\n| a | b |\n|---|---|\n| 1 | <script>x</script> |\n", "t")
    assert "<table>" in page and "<td>1</td>" in page
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_local_images_are_inlined_and_nothing_else_is_read(tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures/f.png").write_bytes(PNG)
    outside = tmp_path.parent / "outside.png"
    outside.write_bytes(PNG)
    text = "![a](figures/f.png) ![b](../outside.png) ![c](https://example.org/x.png) ![d](figures/missing.png)"
    (tmp_path / "report.md").write_text(text)
    write_markdown_page(tmp_path / "report.md", tmp_path / "report.md.html", "r")
    page = (tmp_path / "report.md.html").read_text()
    assert page.count("data:image/png;base64,") == 1  # only the image inside the report's folder
    assert 'src="../outside.png"' in page and 'src="https://example.org/x.png"' in page
    assert 'src="figures/missing.png"' in page
    assert not list(tmp_path.glob(".report.md.html.*"))  # no temporary file left


def test_an_unreadable_source_is_an_error_naming_it(tmp_path):
    with pytest.raises(OSError, match="nosuch.md"):
        write_markdown_page(tmp_path / "nosuch.md", tmp_path / "out.html", "r")
    assert not (tmp_path / "out.html").exists()
