"""The paper's values live in one place, kvdiv/data/paper_reported_values.yaml: the modules that print them beside
ours (the report, the finite-state comparison, the figures) hold none of its numbers or phrases."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from kvdiv.results.report import paper_values

KVDIV = Path(__file__).resolve().parents[2] / "kvdiv"
READERS = [*sorted((KVDIV / "outputs").glob("*.py")), KVDIV / "finite" / "study.py"]


def scalars(node) -> list:
    if isinstance(node, dict):
        return [v for value in node.values() for v in scalars(value)]
    if isinstance(node, list):
        return [v for value in node for v in scalars(value)]
    return [node]


def test_no_reader_repeats_a_paper_value():
    values = scalars(paper_values())
    numbers = {
        v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and (v >= 10 or v != int(v))
    }
    phrases = {v for v in values if isinstance(v, str) and len(v) >= 12}
    assert numbers and phrases
    for path in READERS:
        tree = ast.parse(path.read_text())
        constants = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
        found = [
            c
            for c in constants
            if (isinstance(c, (int, float)) and not isinstance(c, bool) and c in numbers)
            or (isinstance(c, str) and any(p in c for p in phrases))
        ]
        assert not found, f"{path.name} repeats paper values {found}"


def test_the_yaml_is_the_package_data_the_report_reads():
    text = (KVDIV / "data" / "paper_reported_values.yaml").read_text(encoding="utf-8")
    assert paper_values() == yaml.safe_load(text)
    assert paper_values()["finite_state"]["systems"] == 24 and paper_values()["setting"]["horizon"] == 128
