"""The paper's finite-state values (arXiv 2609.16617, §4.4), read by rule ``finite_compare`` only: a module of its own,
so that the values' file is in that rule's code hash (:mod:`kvdiv.codehash` follows the constant below) and in no
other finite-state rule's. The file is package data, never a path input: a checkout reached by another path would
change the rule's input set and rerun it.
"""

from __future__ import annotations

#: The paper's reported values (package data, also read by the report: kvdiv.outputs.report.PAPER_VALUES).
PAPER_VALUES = "data/paper_reported_values.yaml"


def paper_finite_values() -> dict:
    """The ``finite_state`` section of :data:`PAPER_VALUES`."""
    from importlib import resources

    import yaml

    return yaml.safe_load(resources.files("kvdiv").joinpath(PAPER_VALUES).read_text(encoding="utf-8"))["finite_state"]
