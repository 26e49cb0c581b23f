"""The log of a workflow job: everything a ``workflow_scripts/`` script prints, logs or raises ends up in its
Snakemake ``log:`` file.

Every script runs its body inside ``with job_log(snakemake.log[0]):``. stdout, stderr (tqdm progress bars included)
and the ``logging`` root logger go to the file while the block runs; an exception's traceback is written to the file
*before* it is closed, then re-raised (so Snakemake marks the job failed and also shows it), so the log Snakemake
points to always says why a job failed.
A job never reads stdin: :func:`job_log` points fd 0 and ``sys.stdin`` at ``/dev/null`` (docs/security.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Iterator, TextIO

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def close_stdin() -> None:
    """Point file descriptor 0 and ``sys.stdin`` at ``/dev/null``: nothing in this process reads what was piped in."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
    finally:
        os.close(devnull)
    sys.stdin = open(0, encoding="utf-8", closefd=False)


@contextlib.contextmanager
def job_log(path: str | os.PathLike, level: int = logging.INFO) -> Iterator[TextIO]:
    """Send stdout, stderr and logging to the (line-buffered) file ``path`` while the block runs; write the
    traceback of an exception raised in it to the file, then re-raise it. Closes stdin (:func:`close_stdin`)."""
    close_stdin()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    log = open(path, "w", buffering=1, encoding="utf-8")
    saved = sys.stdout, sys.stderr
    root = logging.getLogger()
    saved_level = root.level
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    sys.stdout = sys.stderr = log
    try:
        yield log
    except SystemExit as err:
        if err.code not in (None, 0):
            traceback.print_exc(file=log)
        raise
    except BaseException:
        traceback.print_exc(file=log)
        raise
    finally:
        sys.stdout, sys.stderr = saved
        root.removeHandler(handler)
        root.setLevel(saved_level)
        log.close()
