"""``kvdiv show STORE``: one pair of continuations side by side, in the terminal or as an HTML page
(:mod:`kvdiv.show`)."""

from __future__ import annotations

import argparse
import shutil
import sys

from kvdiv.layout import MODELS_DIR as DEFAULT_MODELS_DIR  # kvdiv.show.view's default, without importing numpy


def _run(args: argparse.Namespace) -> int:
    from kvdiv.show.html import check_html_target, render_html, write_html
    from kvdiv.show.terminal import render_terminal, use_color
    from kvdiv.show.view import load_pair

    html_target = None if args.html is None else check_html_target(args.html, args.force)  # before any work
    view = load_pair(
        args.store, action=args.action, replicate=args.replicate, document=args.document, models_dir=args.models_dir
    )
    if html_target is not None:
        print(f"wrote {write_html(html_target, render_html(view))}")
        return 0
    width = args.width or shutil.get_terminal_size((100, 24)).columns
    print(render_terminal(view, color=use_color(sys.stdout, args.color), width=width))
    return 0


def _replicate(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a replicate is an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a replicate is an integer >= 0, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kvdiv show`` to the CLI."""
    parser = subparsers.add_parser(
        "show",
        help="show one pair of continuations (x: full cache, y: evicted) side by side",
        description="Decode the x (full cache) and y (evicted) continuations of one (document, action, replicate) "
        "of a trajectory store or cube with its model's tokenizer and show them side by side: the first "
        "divergence τ marked, tokens shaded by δ_t, EOS and absorbed steps marked (swrb: the branch start J).",
    )
    parser.add_argument(
        "store",
        help="a per-document store results/{study}/trajectories/{model}/{doc}.zarr or a cube "
        "results/{study}/cube/{model}.zarr",
    )
    parser.add_argument("--action", help="the action (default: the store's first)")
    parser.add_argument("--replicate", type=_replicate, default=0, help="the replicate (default: 0)")
    parser.add_argument("--document", help="the document of a cube (default: its first)")
    parser.add_argument(
        "--html",
        metavar="OUT.html",
        help="write a self-contained HTML page instead of printing (never inside a store or results "
        "tree; an existing file only if kvdiv wrote it, or with --force)",
    )
    parser.add_argument(
        "--force", action="store_true", help="with --html: replace an existing file that is not an earlier kvdiv page"
    )
    parser.add_argument(
        "--models-dir",
        default=DEFAULT_MODELS_DIR,
        help=f"where the store's model is resolved, as {{models dir}}/{{model}} (default: {DEFAULT_MODELS_DIR})",
    )
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the terminal output (auto: only on a terminal without NO_COLOR)",
    )
    parser.add_argument("--width", type=int, help="terminal width in columns (default: the terminal's)")
    parser.set_defaults(func=_run)
