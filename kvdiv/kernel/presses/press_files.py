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


def _candidates(base: Path, module: str) -> list[Path]:
    """The files module ``module`` (dotted) and the packages above it would be under ``base``."""
    parts = module.split(".")
    out = []
    for i in range(1, len(parts) + 1):
        stem = base.joinpath(*parts[:i])
        out += [stem.with_name(stem.name + ".py"), stem / "__init__.py"]
    return out


def own_modules(path: str | os.PathLike, search: Iterable[str | os.PathLike] = ()) -> list[Path]:
    """The user's own Python modules a press file imports, transitively: every import (any depth of the file, read
    with :mod:`ast`, no code runs) that names a ``.py`` file or package beside the file, in one of the ``search``
    directories (the working directory), or relative to the importing module. kvdiv's modules are not among them
    (:mod:`kvdiv.codehash` covers those), nor installed packages. Sorted resolved paths, the file itself excluded."""
    start = Path(path).resolve()
    roots = [start.parent, *(Path(d).resolve() for d in search)]
    seen: set[Path] = {start}
    todo = [start]
    while todo:
        current = todo.pop()
        try:
            tree = ast.parse(current.read_bytes(), filename=str(current))
        except (OSError, SyntaxError, ValueError):
            continue  # an unreadable own module: its import fails in the job with the file's name
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [(alias.name, roots) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                base = current.parent
                for _ in range(node.level - 1):
                    base = base.parent
                names = [node.module] if node.module else []
                targets = [(".".join(filter(None, [node.module, alias.name])), [base]) for alias in node.names]
                targets += [(name, [base]) for name in names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [(node.module, roots)] + [(f"{node.module}.{a.name}", roots) for a in node.names]
            else:
                continue
            for module, bases in targets:
                if module.split(".")[0] == "kvdiv" and bases is roots:
                    continue
                for base in bases:
                    for candidate in _candidates(base, module):
                        resolved = candidate.resolve()
                        if resolved.is_file() and resolved not in seen:
                            seen.add(resolved)
                            if resolved.suffix == ".py":
                                todo.append(resolved)
    return sorted(seen - {start})


def press_sources(paths: Iterable[str | os.PathLike], search: Iterable[str | os.PathLike] = ()) -> list[Path]:
    """The press files ``paths`` and the own modules they import (:func:`own_modules`), resolved, sorted: every file
    of the user's code a trajectory job runs."""
    search = list(search)
    files: set[Path] = set()
    for path in paths:
        files.add(Path(path).resolve())
        files.update(own_modules(path, search))
    return sorted(files)


def press_files_hash(paths: Iterable[str | os.PathLike], search: Iterable[str | os.PathLike] = ()) -> str:
    """SHA-256 (first 16 hex digits) of the bytes of :func:`press_sources` (each named by its path relative to the
    first ``search`` directory when inside it, else by its file name): part of the code hash of the jobs that run
    them and of the key of their cached results (:mod:`kvdiv.trajectories.reuse`), so editing one line of a press
    file, or of a module it imports, is a different result."""
    import hashlib

    search = list(search)
    base = Path(search[0]).resolve() if search else None
    digest = hashlib.sha256()
    for file in press_sources(paths, search):
        try:
            label = str(file.relative_to(base)) if base is not None else file.name
        except ValueError:
            label = file.name
        digest.update(label.encode() + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()[:16]
