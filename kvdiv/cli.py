"""The ``kvdiv`` command line: one sub-command group per concept.

Sub-command modules expose ``register(subparsers)``; each registered parser sets ``func``. A failing command
prints one line ``kvdiv: error: ...`` and exits 2 (``--traceback`` shows the Python traceback instead).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute sub-commands (each defines ``register(subparsers)``).
COMMAND_MODULES = ("kvdiv.finite.cli", "kvdiv.trajectories.cli", "kvdiv.llm.cli", "kvdiv.show.command")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available sub-command."""
    from kvdiv import __version__

    parser = argparse.ArgumentParser(prog="kvdiv", description="KV-cache eviction divergence analysis (arXiv 2609.16617).")
    parser.add_argument("--version", action="version", version=f"kvdiv {__version__}")
    parser.add_argument("--traceback", action="store_true", help="on an error, show the Python traceback")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # that sub-command is not part of this build
                continue
            raise
        module.register(sub)
    return parser


def error_line(err: BaseException) -> str:
    """The one-line message of an error (a KeyError's own quotes dropped; further lines joined)."""
    message = err.args[0] if isinstance(err, KeyError) and len(err.args) == 1 else str(err)
    message = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    return message or type(err).__name__


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kvdiv`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("kvdiv: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # every failure is reported in one line; --traceback for the details
        if args.traceback:
            raise
        print(f"kvdiv: error: {error_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
