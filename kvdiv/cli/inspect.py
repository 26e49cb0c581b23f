"""``kvdiv inspect STORE``: a summary of a per-document trajectory store or a cube
(:mod:`kvdiv.trajectories.summary`), as a table or as JSON."""

from __future__ import annotations

import argparse
import json


def _run(args: argparse.Namespace) -> int:
    from kvdiv.trajectories.summary import format_summary, summarize

    summary = summarize(args.store)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kvdiv inspect`` to the CLI."""
    parser = subparsers.add_parser("inspect", help="summarise a trajectory store or cube (Zarr)")
    parser.add_argument("store", help="a per-document store results/{study}/trajectories/{model}/{doc}.zarr or a cube")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(func=_run)
