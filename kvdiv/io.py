"""Atomic file output: write to a temporary sibling, then rename into place.

A killed job or a raised error never leaves a half-written artifact at the final path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike, *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it onto ``final`` only if the block succeeds.

    With ``directory=True`` the temporary path is a fresh directory (for Zarr stores); an existing
    ``final`` directory is replaced.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp" + final.suffix, dir=final.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        if directory and final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise
