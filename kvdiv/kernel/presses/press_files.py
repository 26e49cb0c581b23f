"""The user's press files (config ``press_modules``), read without running them: which classes a file defines and
which files a set of actions uses (rules/common.smk makes those files the inputs of exactly the rules that build the
actions). Importing them is :func:`kvdiv.kernel.presses.registry.load_press_modules`; this module imports no kvpress, so
the workflow plans without it (docs/own-presses.md).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

#: The key of an action spec that names the press (as :data:`kvdiv.kernel.presses.registry.PRESS_KEY`).
PRESS_KEY = "press"


def press_module_classes(path: str | os.PathLike) -> list[str]:
    """The names of the classes a press module defines at its top level, read with :mod:`ast` (no code runs): which
    actions a file can serve (the workflow makes the file an input of exactly the rules whose actions name one)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"press_modules: no such file {str(path)!r}" + (" (a directory)" if path.is_dir() else ""))
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except OSError as err:
        raise ValueError(f"press_modules: cannot read {str(path)!r}: {err.strerror or err}") from None
    except SyntaxError as err:
        raise ValueError(f"press_modules: {str(path)!r} is not valid Python: {err}") from None
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)]


def spec_press_names(spec: Any) -> set[str]:
    """Every press class name an action spec uses: its own, those of nested specs (``wraps``, lists) and a
    ProbabilisticPress's ``scorer``."""
    names: set[str] = set()
    if isinstance(spec, Mapping):
        if isinstance(spec.get(PRESS_KEY), str):
            names.add(spec[PRESS_KEY])
        if isinstance(spec.get("scorer"), str):
            names.add(spec["scorer"])
        for value in spec.values():
            if isinstance(value, (Mapping, list, tuple)):
                names |= spec_press_names(value)
    elif isinstance(spec, (list, tuple)):
        for value in spec:
            names |= spec_press_names(value)
    return names


def press_module_files(actions: Mapping[str, Any], press_modules: Iterable[str]) -> list[str]:
    """The press modules (of ``press_modules``, as given) that define a press some action of ``actions`` names: the
    inputs of the rules that build those actions (read with :func:`press_module_classes`, no code runs)."""
    used = set().union(*(spec_press_names(spec) for spec in actions.values())) if actions else set()
    return [path for path in press_modules if used & set(press_module_classes(path))]
