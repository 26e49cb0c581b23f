"""What a model directory may hold: data, never code. Which of its files kvdiv reads, and which weights it loads.

A directory with an ``auto_map`` or any ``.py`` file is refused (:func:`check_code_free`); weights are safetensors
only (:func:`weight_files`), and the provenance ``weight_hash`` covers exactly them. The torch-free half of loading a
resolved model lives here too: its directory (:func:`model_dir`, :func:`read_provenance`), its tokenizer
(:func:`load_tokenizer`) and its context (:func:`max_context`), for the jobs that need no weights (document blocks:
:func:`kvdiv.models.tokenization.tokenizer_only_process`). No torch import here.
Details: docs/security.md#model-directories.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvdiv.io import sha256_file
from kvdiv.layout import MODELS_DIR, PROVENANCE
from kvdiv.names import check_name
from kvdiv.settings import Runtime

#: The weights file of an unsharded model and the index of a sharded one (the names transformers loads).
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
#: Files besides the weights a model directory may contribute (config, tokenizer, chat template): data only.
DATA_PATTERNS = ("*.json", "*.model", "*.txt", "*.jinja", "*.tiktoken")
#: Config files whose ``auto_map`` would point transformers at the directory's own code.
AUTO_MAP_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")
#: Names that say "the directory ships code" (besides ``*.py``): compiled Python and shared libraries.
CODE_PATTERNS = ("*.py", "*.pyc", "*.so", "*.pyd")


class ModelCodeError(ValueError):
    """A model directory that would make transformers run its own code."""


def check_code_free(directory: str | os.PathLike, owner: str | None = None) -> None:
    """Raise :class:`ModelCodeError` naming the directory and file if ``directory`` ships code (a ``.py`` file,
    anywhere under it) or a config with ``auto_map``. ``owner``: the model name for the message."""
    directory = Path(directory)
    who = f"model {owner!r}: " if owner else ""
    for path in sorted(directory.rglob("*")):
        if path.is_file() and any(fnmatch.fnmatch(path.name, p) for p in CODE_PATTERNS):
            raise ModelCodeError(
                f"{who}model directory {directory} ships code ({path.relative_to(directory)}); kvdiv runs no code "
                "that comes with a model (docs/security.md): remove it, or use a directory of data files only"
            )
    for name in AUTO_MAP_FILES:
        path = directory / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{who}{path} is not valid JSON: {err}") from None
        if isinstance(data, dict) and data.get("auto_map"):
            raise ModelCodeError(
                f"{who}{path} has `auto_map` (it points transformers at the model's own Python code); kvdiv runs "
                "no code that comes with a model (docs/security.md): use an architecture transformers ships"
            )


def weight_files(directory: str | os.PathLike, owner: str | None = None) -> list[Path]:
    """The safetensors files transformers loads from ``directory``: ``model.safetensors``, else the shards of
    ``model.safetensors.index.json``. Raises ``FileNotFoundError`` if there are none (pickled weights such as
    ``pytorch_model.bin`` are never loaded)."""
    directory = Path(directory)
    who = f"model {owner!r}: " if owner else ""
    index = directory / SAFETENSORS_INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            shards = sorted({str(v) for v in weight_map.values()})
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{who}{index} is not a safetensors index ({type(err).__name__}: {err})") from None
        bad = [s for s in shards if Path(s).name != s or not (directory / s).is_file()]
        if bad or not shards:
            raise FileNotFoundError(f"{who}{index} names shards that are not files in {directory}: {bad}")
        return [directory / shard for shard in shards]
    if (directory / SAFETENSORS).is_file():
        return [directory / SAFETENSORS]
    pickles = sorted(p.name for p in directory.glob("*") if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".ckpt"))
    hint = f" ({', '.join(pickles)} is a pickle: kvdiv never loads one)" if pickles else ""
    raise FileNotFoundError(f"{who}no safetensors weights in {directory} ({SAFETENSORS} or {SAFETENSORS_INDEX}){hint}")


def data_files(directory: str | os.PathLike) -> list[Path]:
    """The non-weight files of a model directory kvdiv reads or copies (config, tokenizer, chat template)."""
    directory = Path(directory)
    return sorted(
        p for p in directory.iterdir() if p.is_file() and any(fnmatch.fnmatch(p.name, d) for d in DATA_PATTERNS)
    )


def weight_hash(directory: str | os.PathLike) -> str:
    """sha256 over exactly the weight files transformers loads (:func:`weight_files`; names and bytes, name order)."""
    digest = hashlib.sha256()
    for path in weight_files(directory):
        digest.update(path.name.encode())
        digest.update(bytes.fromhex(sha256_file(path)))
    return digest.hexdigest()


def model_dir(name: str, models_dir: str | os.PathLike = MODELS_DIR) -> Path:
    """The resolved directory of model ``name``; raises if it has not been resolved."""
    path = Path(models_dir) / check_name(name, "model")
    if not (path / PROVENANCE).is_file():
        raise FileNotFoundError(
            f"model {name!r} is not resolved: {path / PROVENANCE} is missing "
            f"(run `snakemake --cores 1 {path / PROVENANCE}` or `kvdiv models resolve {name}`)"
        )
    return path


def read_provenance(path: str | os.PathLike) -> dict:
    """The provenance record of a resolved model directory (an unreadable one is an error naming the file)."""
    file = Path(path) / PROVENANCE
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{file} is not valid JSON ({err}); resolve the model again") from None
    if not isinstance(record, dict):
        raise ValueError(f"{file} is not a provenance record (a JSON object); resolve the model again")
    return record


#: The most bytes of a model's JSON file parsed whole at start-up or by a command (a model directory is someone else's
#: files).
JSON_MAX_BYTES = 1 << 20


def read_json(path: str | os.PathLike, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """``path`` parsed as JSON; FileNotFoundError when it is not a file, ValueError naming it when it is larger than
    ``max_bytes`` or not JSON (bad UTF-8 or syntax, nesting past the interpreter's depth, an integer past its
    digits)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not a file" if path.exists() else f"{path} does not exist")
    if path.stat().st_size > max_bytes:
        raise ValueError(f"{path} is larger than {max_bytes} bytes")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path} is not valid JSON ({type(err).__name__})") from None


def resolved_from(path: str | os.PathLike, spec: Mapping[str, Any]) -> dict | None:
    """The provenance record of ``path`` when the model there was resolved from ``spec`` (scheduling keys aside);
    None when it is absent, unreadable, not a record, or of another spec (resolving again would write another
    model)."""
    try:
        record = read_provenance(path)
    except (OSError, ValueError):
        return None
    return record if Runtime.model_part(record.get("spec")) == Runtime.model_part(spec) else None


def load_tokenizer(name: str, spec: dict, models_dir: str | os.PathLike = MODELS_DIR):
    """The tokenizer of resolved model ``name`` with the chat template its spec asks for
    (:func:`kvdiv.models.tokenization.configure_chat_template`)."""
    from transformers import AutoTokenizer

    from kvdiv.models.tokenization import configure_chat_template

    path = model_dir(name, models_dir)
    check_code_free(path, name)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False, local_files_only=True)
    return configure_chat_template(name, tokenizer, spec)


def max_context(config, tokenizer, spec: dict) -> int:
    """The spec's ``max_context``, else the config's ``max_position_embeddings``, else the tokenizer's."""
    if spec.get("max_context"):
        return int(spec["max_context"])
    text = config.get_text_config()
    value = getattr(text, "max_position_embeddings", None)
    if value:
        return int(value)
    return int(tokenizer.model_max_length)
