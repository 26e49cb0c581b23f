"""The ``kvdiv`` command line: one sub-command group per concept.

Sub-command modules expose ``register(subparsers)``; each registered parser sets ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute sub-commands (each defines ``register(subparsers)``).
COMMAND_MODULES = ("kvdiv.finite_cli", "kvdiv.inspect", "kvdiv.models_cli")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available sub-command."""
    from kvdiv import __version__

    parser = argparse.ArgumentParser(prog="kvdiv", description="KV-cache eviction divergence analysis (arXiv 2609.16617).")
    parser.add_argument("--version", action="version", version=f"kvdiv {__version__}")
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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kvdiv`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, KeyError, FileNotFoundError) as err:
        print(f"kvdiv: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
