"""Content hashes of the kvdiv code a rule runs, so Snakemake reruns a rule when that code changes.

Snakemake 9 tracks a rule's ``script:`` file but not the library it imports. Each rule passes
``code=script_code("X.py")`` (rules/common.smk), the :func:`code_hash` of its workflow script: the source of
every kvdiv module the script imports, **transitively** (found with :mod:`ast` over kvdiv's sources, imports
inside functions included, and the ``__init__`` of every package on the way, since importing a module runs
them), plus the package data files those modules name (a string constant that is the path of a file inside
``kvdiv/``, e.g. ``"data/paper_reported_values.yaml"``). No hand-kept lists: a change to any module a rule
runs reruns that rule and everything downstream of it, and nothing upstream.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Iterable

PACKAGE = "kvdiv"
PACKAGE_DIR = Path(__file__).resolve().parent


def module_file(name: str, package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The source file of module ``name`` (``kvdiv.a.b`` → ``kvdiv/a/b.py`` or ``kvdiv/a/b/__init__.py``), or
    None when kvdiv has no such module (``name`` is then an attribute, e.g. ``kvdiv.io.write_parquet``)."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    rel = Path(*parts[1:]) if len(parts) > 1 else Path()
    for candidate in (
        package_dir / rel.with_suffix(".py") if len(parts) > 1 else None,
        package_dir / rel / "__init__.py",
    ):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    """The dotted name of a kvdiv source file (``kvdiv/a/b.py`` → ``kvdiv.a.b``, ``kvdiv/a/__init__.py`` →
    ``kvdiv.a``)."""
    rel = Path(path).resolve().relative_to(package_dir.resolve()).with_suffix("")
    parts = [PACKAGE, *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _parents(name: str) -> list[str]:
    """``kvdiv.a.b`` → ``[kvdiv, kvdiv.a]``: the packages whose ``__init__`` importing ``name`` runs."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@lru_cache(maxsize=None)
def _parse(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))


def _tree(path: Path) -> ast.Module:
    return _parse(path, path.stat().st_mtime_ns)


def imported_modules(path: str | os.PathLike, package_dir: Path = PACKAGE_DIR, *, packages: bool = True) -> set[str]:
    """The kvdiv modules the file ``path`` imports anywhere (module level, functions, ``TYPE_CHECKING`` blocks),
    resolved to modules: ``from kvdiv.a import b`` names ``kvdiv.a`` and, when ``b`` is a submodule, ``kvdiv.a.b``
    (then only ``kvdiv.a.b`` with ``packages=False``); relative imports are resolved against the file's own
    package. With ``packages`` (the default), the packages above every imported module are included too."""
    path = Path(path)
    try:
        own = module_name(path, package_dir)
        own_package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    except ValueError:  # a file outside kvdiv (a workflow script): only absolute imports
        own_package = ""
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = own_package.split(".")[: len(own_package.split(".")) - node.level + 1] if own_package else []
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            if module.split(".")[0] != PACKAGE:
                continue
            submodules = {
                f"{module}.{alias.name}" for alias in node.names if module_file(f"{module}.{alias.name}", package_dir)
            }
            found.update(submodules)
            if packages or len(submodules) < len(node.names):
                found.add(module)
    modules = {name for name in found if module_file(name, package_dir) is not None}
    if not packages:
        return modules
    return modules | {
        parent for name in found for parent in _parents(name) if module_file(parent, package_dir) is not None
    }


def data_files(path: str | os.PathLike, package_dir: Path = PACKAGE_DIR) -> set[Path]:
    """Files inside ``kvdiv/`` (not Python sources) that a module names by a string constant relative to the package,
    e.g. ``"data/paper_reported_values.yaml"``: the data the module reads at run time."""
    out = set()
    for node in ast.walk(_tree(Path(path))):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and 0 < len(node.value) < 200
            and "\n" not in node.value
        ):
            try:
                candidate = (package_dir / node.value).resolve()
                if candidate.is_file() and candidate.suffix != ".py" and package_dir.resolve() in candidate.parents:
                    out.add(candidate)
            except (OSError, ValueError):
                continue
    return out


def closure(entries: Iterable[str | os.PathLike], package_dir: Path = PACKAGE_DIR) -> list[str]:
    """Every kvdiv module the ``entries`` run, sorted: the entries themselves (module names such as
    ``"kvdiv.metrics"``, or paths of Python files such as a workflow script, which is not part of the result
    unless it is a kvdiv module), their kvdiv imports, transitively, and the packages above each."""
    todo: list[str] = []
    for entry in entries:
        if isinstance(entry, str) and not entry.endswith(".py"):
            if module_file(entry, package_dir) is None:
                raise KeyError(f"kvdiv has no module {entry!r}")
            todo += [entry, *(p for p in _parents(entry) if module_file(p, package_dir))]
        else:
            todo += sorted(imported_modules(entry, package_dir))
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += sorted(imported_modules(module_file(name, package_dir), package_dir) - seen)
    return sorted(seen)


def code_files(entries: Iterable[str | os.PathLike], package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The source files of :func:`closure` and the data files they name, sorted by path."""
    files: set[Path] = set()
    for name in closure(entries, package_dir):
        source = module_file(name, package_dir)
        files.add(source.resolve())
        files |= data_files(source, package_dir)
    return sorted(files)


def code_hash(*entries: str | os.PathLike, package_dir: Path = PACKAGE_DIR) -> str:
    """SHA-256 (first 16 hex digits) over the relative paths and bytes of :func:`code_files` of ``entries``."""
    digest = hashlib.sha256()
    root = package_dir.resolve()
    for path in code_files(entries, package_dir):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def fingerprint(*parts: object) -> str:
    """SHA-256 (first 16 hex digits) of JSON-serialisable ``parts`` (mapping keys sorted), e.g. a config section
    with the ``code_hash`` of the modules that check it."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
