"""The ``kvdiv`` command line: one module per sub-command group (``models``, ``inspect``, ``finite``, ``show``).

Each sub-command module exposes ``register(subparsers)``; each registered parser sets ``func``. The modules parse
arguments, call the library and print; they import at module level only the standard library (and
:mod:`kvdiv.layout`), so building the parser imports no numpy, torch, transformers or matplotlib: a command imports
what it needs when it runs. A failing command prints one line ``kvdiv: error: ...`` and exits 2 (``--traceback``
shows the Python traceback instead).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

from kvdiv import __version__
from kvdiv.cli import finite, inspect, models, show


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="kvdiv", description="KV-cache eviction divergence analysis (arXiv 2609.16617)."
    )
    parser.add_argument("--version", action="version", version=f"kvdiv {__version__}")
    parser.add_argument("--traceback", action="store_true", help="on an error, show the Python traceback")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (finite, inspect, models, show):
        module.register(sub)
    return parser


#: An OSError from the system (no message of kvdiv's own) said about the file it names.
OS_ERRORS = {
    errno.ENOENT: "{0} does not exist",
    errno.EISDIR: "{0} is a directory, not a file",
    errno.ENOTDIR: "{0}: a part of this path is a file, not a directory",
    errno.EEXIST: "{0} already exists (a file or directory is in the way of an output)",
    errno.EACCES: "{0}: permission denied",
    errno.ENOSPC: "{0}: no space left on the device",
}


def error_line(err: BaseException) -> str:
    """The one-line message of an error (a KeyError's own quotes dropped; further lines joined; an operating
    system error ``[Errno 17] File exists: 'x'`` said in words, naming the path)."""
    if isinstance(err, OSError) and err.filename is not None and err.errno in OS_ERRORS:
        return OS_ERRORS[err.errno].format(err.filename)
    message = err.args[0] if isinstance(err, KeyError) and len(err.args) == 1 else str(err)
    message = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    return message or type(err).__name__


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kvdiv`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:  # `kvdiv inspect ... | head`: the reader has what it wanted; end quietly
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        print("kvdiv: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # every failure is reported in one line; --traceback for the details
        if args.traceback:
            raise
        print(f"kvdiv: error: {error_line(err)}", file=sys.stderr)
        return 2


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of a closed pipe prints nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
