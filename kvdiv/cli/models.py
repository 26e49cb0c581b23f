"""``kvdiv models``: resolve a configured model (:mod:`kvdiv.models.sources`), or show a resolved model's provenance."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kvdiv.layout import PROVENANCE, Layout


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``models`` sub-command group."""
    parser = subparsers.add_parser("models", help="resolve models and inspect resolved model directories")
    sub = parser.add_subparsers(dest="models_command", required=True)

    resolve = sub.add_parser(
        "resolve", help="materialise ROOT/models/NAME/ from a config's model spec (ROOT: its `results`)"
    )
    resolve.add_argument("name", help="model name in the config's `models` section")
    resolve.add_argument("--config", default="config/config.yaml", help="config file (default: config/config.yaml)")
    resolve.add_argument(
        "--models-dir",
        default=None,
        help="where resolved models live (default: the config's output root's models/, e.g. results/models)",
    )
    resolve.add_argument(
        "--force",
        action="store_true",
        help="resolve again even if the directory is already resolved from the same spec (rewrites it: "
        "the workflow then reruns everything that uses the model)",
    )
    resolve.set_defaults(func=_resolve)

    info = sub.add_parser("info", help="print the provenance JSON of a resolved model directory")
    info.add_argument("dir", help="a resolved model directory, e.g. results/models/smollm2")
    info.set_defaults(func=_info)


def _resolve(args: argparse.Namespace) -> int:
    from kvdiv.names import check_name, check_results_root
    from kvdiv.seeds import derive_seed

    check_name(args.name, "model")  # before anything is read or written: the name becomes a directory
    from kvdiv.config import load  # as the workflow reads it: strict YAML, schema, names, every check

    config = load(args.config)
    models = config.get("models", {})
    if args.name not in models:
        raise KeyError(f"model {args.name!r} is not in {args.config}; configured: {sorted(models)}")
    seed = derive_seed(int(config.get("seed", 0)), "model", args.name)
    models_dir = args.models_dir or Layout(check_results_root(config["results"])).models_dir
    out = Path(models_dir) / args.name
    from kvdiv.models.sources import resolve_model, up_to_date  # torch: only once the config and the name are good

    if not args.force and up_to_date(out, models[args.name], seed):
        print(f"{out} is already resolved from this spec; nothing to do (--force resolves it again)")
        return 0
    out = resolve_model(args.name, models[args.name], out, seed=seed)
    print(out)
    return 0


def _info(args: argparse.Namespace) -> int:
    """Print provenance.json (read as JSON here: no torch or transformers import, a fraction of a second)."""
    path = Path(args.dir)
    if not (path / PROVENANCE).is_file():
        raise FileNotFoundError(f"{path} is not a resolved model directory (no {PROVENANCE})")
    try:
        provenance = json.loads((path / PROVENANCE).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path / PROVENANCE} is not valid JSON ({err})") from None
    print(json.dumps(provenance, indent=2, sort_keys=True))
    return 0
