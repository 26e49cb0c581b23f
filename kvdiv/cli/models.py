"""``kvdiv models``: resolve a configured model (:mod:`kvdiv.models.sources`), show a resolved model's provenance, or
plan its trajectory jobs' memory and batches (:mod:`kvdiv.trajectories.batch_plan`)."""

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

    plan = sub.add_parser(
        "plan",
        help="print the memory a model's trajectory jobs hold per document and the batches documents_per_batch "
        "cuts each job into, per kind of job the workflow plans, before any job runs",
    )
    plan.add_argument("name", help="model name in the config's `models` section")
    plan.add_argument("--config", default="config/config.yaml", help="config file (default: config/config.yaml)")
    plan.add_argument(
        "--memory-gib",
        type=float,
        default=None,
        help="memory of the device the jobs will run on, GiB (default: this machine's available memory for a CPU "
        "model; an accelerator's total memory if this machine has it)",
    )
    plan.add_argument(
        "--model-config",
        default=None,
        help="the model's config.json, for a model not resolved here (default: the resolved model's own)",
    )
    plan.add_argument(
        "--models-dir",
        default=None,
        help="where resolved models live (default: the config's output root's models/, e.g. results/models)",
    )
    plan.set_defaults(func=_plan)


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


#: Bytes of one weight or cache element, by a spec's ``dtype`` (kvdiv.models.loading.DTYPES).
ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: The largest shape value, decoder layers and device memory (GiB) taken: anything past them is a typo or hostile
#: (transformers builds per-layer lists from a config: 10**7 layers take seconds and gigabytes).
SHAPE_MAX, LAYERS_MAX, MEMORY_MAX_GIB = 2**31, 2**16, 2**20
#: The config.json keys the plan reads; only these reach transformers (a ``num_labels`` of 10**9 builds a dict).
SHAPE_KEYS = (
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "num_key_value_heads",
    "head_dim",
)


def _plan(args: argparse.Namespace) -> int:
    from kvdiv.names import check_name, check_results_root

    check_name(args.name, "model")
    if args.memory_gib is not None and not (0 < args.memory_gib <= MEMORY_MAX_GIB):
        raise ValueError(f"--memory-gib must be a number > 0 and at most {MEMORY_MAX_GIB}, got {args.memory_gib}")
    from kvdiv.config import load

    config = load(args.config)
    models = config.get("models", {})
    if args.name not in models:
        raise KeyError(f"model {args.name!r} is not in {args.config}; configured: {sorted(models)}")
    spec = models[args.name]
    source = Path(args.model_config) if args.model_config else None
    if source is None:
        from kvdiv.models.model_files import resolved_from

        directory = Path(args.models_dir or Layout(check_results_root(config["results"])).models_dir) / args.name
        if resolved_from(directory, spec) is None:
            raise FileNotFoundError(
                f"model {args.name!r} is not resolved from this spec in {directory}: resolve it (kvdiv models "
                f"resolve {args.name} --config {args.config}) or give its config.json with --model-config"
            )
        source = directory / "config.json"
    shape, tied = _shape(source, ELEMENT_BYTES[spec.get("dtype", "float32")])
    memory = _memory_bytes(spec, args.memory_gib)
    from kvdiv.kernel.presses.registry import load_press_modules
    from kvdiv.trajectories.batch_plan import plan, plan_table

    load_press_modules(config.get("press_modules") or [])  # the user's presses the actions name, as the job loads
    table = plan_table(plan(config, args.name, shape, memory, tied=tied))
    print(f"device memory {memory / 2**30:.1f} GiB ({spec.get('device', 'cpu')}); config {args.config}")
    print(table)
    return 0


def _shape(path: Path, element_bytes: int):
    """(CacheShape, tied embeddings) of the model whose config.json is ``path``: read as JSON (1 MiB at most), its
    shape keys checked, then as transformers' config of its ``model_type`` (defaults filled; no remote code; only
    ``model_type``, the shape keys, the tie and a ``text_config`` of the same) where it names one."""
    from types import SimpleNamespace

    from kvdiv.kernel.memory_plan import CacheShape
    from kvdiv.models.model_files import read_json

    values = read_json(path)
    if not isinstance(values, dict):
        raise ValueError(f"{path}: not a decoder's config.json (a JSON object)")
    text = values.get("text_config")
    given = _shape_keys(path, values, "")
    text_given = _shape_keys(path, text, "text_config.") if isinstance(text, dict) else None
    tied = values.get("tie_word_embeddings")
    if isinstance(values.get("model_type"), str):
        from transformers import AutoConfig
        from transformers.utils import logging as hf_logging

        if text_given is not None:
            kind = text.get("model_type")
            given["text_config"] = dict(text_given, **({"model_type": kind} if isinstance(kind, str) else {}))
        if isinstance(tied, bool):
            given["tie_word_embeddings"] = tied
        saved = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # its warnings about settings the plan does not read
        try:
            config = AutoConfig.for_model(values["model_type"], **given).get_text_config()
        except Exception as err:  # a model_type it does not know, a value its own checks refuse
            raise ValueError(f"{path}: transformers does not read it as a config ({err})") from None
        finally:
            hf_logging.set_verbosity(saved)
    else:
        config = SimpleNamespace(**(text_given if text_given is not None else given))
    keys = SHAPE_KEYS[:5]
    bad = [k for k in keys if not _count(getattr(config, k, None))]
    if bad:
        raise ValueError(f"{path}: not a decoder's config.json: {', '.join(bad)} missing or not an integer in 1..2^31")
    for key in SHAPE_KEYS[5:]:
        if getattr(config, key, None) is not None and not _count(getattr(config, key)):
            raise ValueError(f"{path}: {key} must be an integer in 1..2^31, got {getattr(config, key)!r}")
    shape = CacheShape.from_config(config, element_bytes)
    if shape.head_dim < 1:
        raise ValueError(f"{path}: hidden_size {shape.hidden} over {shape.heads} heads leaves no head_dim")
    if not isinstance(tied, bool):
        tied = bool(getattr(config, "tie_word_embeddings", True))
    return shape, tied


def _shape_keys(path: Path, values: dict, where: str) -> dict:
    """The shape keys of ``values`` that are set, each an integer in 1..2^31 (layers in 1..2^16), or an error naming
    it; the rest is not read."""
    out = {}
    for key in SHAPE_KEYS:
        value = values.get(key)
        if value is None:
            continue
        top = LAYERS_MAX if key == "num_hidden_layers" else SHAPE_MAX
        if not _count(value) or value > top:
            raise ValueError(f"{path}: {where}{key} must be an integer in 1..{top}, got {repr(value)[:40]}")
        out[key] = value
    return out


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= SHAPE_MAX


def _memory_bytes(spec: dict, memory_gib: float | None) -> int:
    """``memory_gib`` in bytes, else this machine's: its available memory for a CPU model; for a CUDA model the total
    memory of its GPU, if this machine has it."""
    if memory_gib is not None:
        return int(memory_gib * 2**30)
    import torch

    from kvdiv.kernel.chain_slots import available_bytes

    device = torch.device(spec.get("device", "cpu"))
    if device.type == "cpu":
        free = available_bytes(device)
        if free is None:
            raise ValueError("this machine's available memory is unknown: give --memory-gib")
        return free
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(device).total_memory)
    raise ValueError(f"model device {device} is not on this machine: give its memory with --memory-gib")
