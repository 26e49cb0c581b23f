"""The documentation's shape: a short README, short module docstrings, no relative link to a missing file or heading.

The manual lives in docs/ (usage, outputs, estimators, internals) and measurements in benchmarks/; the README points
there. These checks keep it that way: README.md at most 150 lines, every kvdiv module docstring at most 10 lines (the
mathematics is docs/estimators.md), and every relative link of README.md, docs/*.md and benchmarks/README.md (and
every ``docs/<file>.md#<anchor>`` pointer in a kvdiv docstring) resolving to a file, and to its heading if it names one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 150
DOCSTRING_MAX_LINES = 10

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_DOC_POINTER = re.compile(r"\b(docs/[\w.-]+\.md)((?:#[\w-]+)?)")
_EXTRA_ANCHOR = re.compile(r"(?:,| and) (#[\w-]+)")


def strip_code(text: str) -> str:
    """Markdown without fenced blocks and code spans (their brackets are not links)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: code marks and link targets dropped, lower case, no punctuation, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (repeated headings get -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for match in _HEADING.finditer(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(md: Path, root: Path) -> list[str]:
    """Relative links of ``md`` whose file, or heading, does not exist."""
    problems = []
    for target in _LINK.findall(strip_code(md.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        path = (md.parent / file_part).resolve() if file_part else md
        if not path.exists():
            problems.append(f"{md.relative_to(root)}: {target} (no file {file_part})")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            problems.append(f"{md.relative_to(root)}: {target} (no heading #{anchor} in {path.relative_to(root)})")
    return problems


def module_docstrings(root: Path) -> dict[str, str]:
    """Every kvdiv module's docstring, by path."""
    out = {}
    for path in sorted((root / "kvdiv").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if doc is not None:
            out[str(path.relative_to(root))] = doc
    return out


def long_docstrings(root: Path, limit: int = DOCSTRING_MAX_LINES) -> list[str]:
    return [
        f"{path}: {len(doc.splitlines())} lines"
        for path, doc in module_docstrings(root).items()
        if len(doc.splitlines()) > limit
    ]


def broken_docstring_pointers(root: Path) -> list[str]:
    """``docs/X.md#anchor`` in kvdiv docstrings (also ``..., #b and #c`` after it) naming a missing file or heading."""
    problems = []
    for module, doc in module_docstrings(root).items():
        text = " ".join(doc.split())
        for match in _DOC_POINTER.finditer(text):
            path = root / match.group(1)
            if not path.exists():
                problems.append(f"{module}: {match.group(1)} does not exist")
                continue
            tail = text[match.end() :]
            extra = []
            while (m := _EXTRA_ANCHOR.match(tail)) is not None:
                extra.append(m.group(1))
                tail = tail[m.end() :]
            for anchor in ([match.group(2)] if match.group(2) else []) + extra:
                if anchor[1:] not in anchors(path):
                    problems.append(f"{module}: {match.group(1)}{anchor} (no such heading)")
    return problems


def markdown_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "benchmarks" / "README.md"]


def test_readme_is_short():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_module_docstrings_are_short():
    assert long_docstrings(ROOT) == [], f"module docstrings over {DOCSTRING_MAX_LINES} lines (move the detail to docs/)"


@pytest.mark.parametrize("md", markdown_files(ROOT), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(md):
    assert broken_links(md, ROOT) == []


def test_docstring_pointers_resolve():
    assert broken_docstring_pointers(ROOT) == []


def test_checks_catch_what_they_guard(tmp_path):
    """The checks fail on a long README line count, a long docstring, a missing file and a missing heading."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "kvdiv").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# Title\n\n## The `x` section (y)\n\n[ok](#the-x-section-y)\n"
        "[gone](b.md) [bad](#nowhere) `[code](c.md)`\n```\n[fenced](d.md)\n```\n"
    )
    (tmp_path / "kvdiv" / "m.py").write_text('"""' + "line\n" * 11 + '"""\n')
    (tmp_path / "kvdiv" / "n.py").write_text('"""See docs/a.md#the-x-section-y, #missing and docs/z.md."""\n')
    assert long_docstrings(tmp_path) == ["kvdiv/m.py: 11 lines"]
    assert broken_links(tmp_path / "docs" / "a.md", tmp_path) == [
        "docs/a.md: b.md (no file b.md)",
        "docs/a.md: #nowhere (no heading #nowhere in docs/a.md)",
    ]
    assert broken_docstring_pointers(tmp_path) == [
        "kvdiv/n.py: docs/a.md#missing (no such heading)",
        "kvdiv/n.py: docs/z.md does not exist",
    ]
