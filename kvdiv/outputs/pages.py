"""Markdown results as self-contained HTML pages, for Snakemake's HTML report (which shows only images, PDF and HTML
inline: a ``.md`` or ``.csv`` result is a download there). Rendered with markdown-it-py (CommonMark + tables, raw HTML
escaped); a local PNG/SVG/JPEG image the page names is inlined as a data URI, anything else is left as text; nothing
is fetched."""

from __future__ import annotations

import base64
import html
import mimetypes
from pathlib import Path

from markdown_it import MarkdownIt

from kvdiv.io import atomic_path

#: Image types inlined into a page (others stay links).
INLINE_IMAGE_TYPES = ("image/png", "image/svg+xml", "image/jpeg")

STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:72em;margin:1.5em auto;padding:0 1em;line-height:1.45}"
    "table{border-collapse:collapse;margin:1em 0;font-size:90%}th,td{border:1px solid #bbb;padding:.25em .5em}"
    "th{background:#f0f0f0}img{max-width:100%}code{background:#f4f4f4;padding:0 .2em}"
)


def _inline_images(tokens, base: Path) -> None:
    """Replace the ``src`` of every image token naming a local image file under ``base`` by a data URI."""
    root = base.resolve()
    for token in tokens:
        for child in token.children or []:
            if child.type != "image":
                continue
            src = str(child.attrGet("src") or "")
            if "://" in src or src.startswith(("data:", "/")):
                continue
            path = (base / src).resolve()
            mime, _ = mimetypes.guess_type(path.name)
            if mime not in INLINE_IMAGE_TYPES or not path.is_file() or not path.is_relative_to(root):
                continue
            child.attrSet("src", f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}")


def markdown_page(text: str, title: str, base: str | Path = ".") -> str:
    """``text`` (Markdown) as one self-contained HTML page; relative images are read from ``base``."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    _inline_images(tokens, Path(base))
    body = md.renderer.render(tokens, md.options, {})
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>\n{body}</body></html>\n"
    )


def write_markdown_page(markdown: str | Path, out: str | Path, title: str) -> None:
    """Render the Markdown file ``markdown`` to ``out`` (atomically); its images are read relative to its folder."""
    source = Path(markdown)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as err:
        raise OSError(f"cannot read {source}: {err.strerror or err}") from err
    page = markdown_page(text, title, source.parent)
    with atomic_path(out) as tmp:
        tmp.write_text(page, encoding="utf-8")
