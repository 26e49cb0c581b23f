"""Copies of the checkout for tests and benchmarks that run the workflow in a directory of their own."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

#: Left out of a copy wherever they are: version control, environments, caches, build metadata.
ANYWHERE = (".venv", ".git", ".snakemake", "__pycache__", ".pytest_cache", "*.egg-info")
#: Left out at the checkout's top only: the outputs of earlier runs (``results/`` and ``logs/``; never the package
#: ``kvdiv/results/``).
TOP_LEVEL = ("results", "logs")


def checkout_ignore(repo: str | Path) -> Callable[[str, list[str]], set[str]]:
    """An ``ignore`` for :func:`shutil.copytree` of ``repo``: :data:`ANYWHERE` at every level, :data:`TOP_LEVEL` at
    the top."""
    root = Path(repo).resolve()
    anywhere = shutil.ignore_patterns(*ANYWHERE)

    def ignore(directory: str, entries: list[str]) -> set[str]:
        top = set(TOP_LEVEL) & set(entries) if Path(directory).resolve() == root else set()
        return set(anywhere(directory, entries)) | top

    return ignore
