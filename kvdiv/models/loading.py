"""Loading a resolved model: ``results/models/{name}/`` → :class:`LoadedModel` (model, tokenizer, EOS ids, ...).

A directory resolved by :func:`kvdiv.models.sources.resolve_model` holds safetensors weights, ``config.json``,
tokenizer files and ``provenance.json`` (written last: its presence marks a complete directory); loading it
takes seconds. Dtype, device and CPU threads come from the model's spec.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

from kvdiv.settings import Runtime
from kvdiv.layout import MODELS_DIR, PROVENANCE
from kvdiv.models.model_files import (
    check_code_free,
    max_context,
    model_dir,
    read_provenance,
    weight_files,
    weight_hash,
)
from kvdiv.models.prepacked import ATEN, linear_kernel, prepack_linears
from kvdiv.models.tokenization import configure_chat_template, eos_token_ids, uses_chat_template

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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
    weight_hash : sha256 over the safetensors files loaded (:func:`kvdiv.models.model_files.weight_hash`).
    max_context : the longest sequence (prompt + generation) the model holds.
    path : the resolved directory it was loaded from (None for in-memory models).
    linear_kernel : how its Linear layers multiply: ``onednn_prepacked`` (CPU float32 with the spec's ``prepack``,
        default true: :mod:`kvdiv.models.prepacked`) or ``aten`` (torch's default).
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
    linear_kernel: str = field(default=ATEN)


def torch_dtype(spec: dict) -> torch.dtype:
    """The torch dtype a spec asks for (default float32)."""
    name = spec.get("dtype", "float32")
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; valid: {sorted(DTYPES)}")
    return DTYPES[name]


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' per-tensor progress bars (restored afterwards)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def load_model(
    name: str, spec: dict, models_dir: str | os.PathLike = MODELS_DIR, runtime: Runtime | None = None
) -> LoadedModel:
    """Load resolved model ``name`` from ``models_dir/name`` (seconds): eval mode, spec dtype and device.

    A CPU model runs on ``runtime.threads`` threads (``torch.set_num_threads``; without a runtime, the spec's
    ``threads`` if it has one).
    """
    path = model_dir(name, models_dir)
    return load_model_dir(path, spec, name=name, runtime=runtime)


def load_model_dir(
    path: str | os.PathLike, spec: dict, *, name: str | None = None, runtime: Runtime | None = None
) -> LoadedModel:
    """Load a resolved (or any safetensors) model directory as a :class:`LoadedModel`.

    Refused: a directory that ships code or an ``auto_map`` (:func:`kvdiv.models.model_files.check_code_free`) or
    has no safetensors weights; transformers loads with ``trust_remote_code=False`` and ``use_safetensors=True``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    name = name or path.name
    check_code_free(path, name)
    weight_files(path, name)  # safetensors or nothing: never a pickle
    device = torch.device(spec.get("device", "cpu"))
    threads = runtime.threads if runtime is not None else spec.get("threads")
    if runtime is not None:  # the spec it ran with: a job's threads are recorded with it (stores' `model_spec`)
        spec = {**spec, "threads": runtime.threads}
    if device.type == "cpu" and threads:
        torch.set_num_threads(int(threads))
    # Accelerators: place weights straight on the device (no full copy in host memory first).
    placement = {} if device.type == "cpu" else {"device_map": str(device)}
    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=torch_dtype(spec),
            use_safetensors=True,
            trust_remote_code=False,
            local_files_only=True,
            **placement,
        )
    model = model.to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False, local_files_only=True)
    tokenizer = configure_chat_template(name, tokenizer, spec)
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
    name: str,
    spec: dict,
    model: torch.nn.Module,
    tokenizer,
    device: torch.device,
    digest: str,
    path: Path | None = None,
) -> LoadedModel:
    """A :class:`LoadedModel` with the fields derived from the model, tokenizer and spec filled in; CPU float32
    Linear layers packed for oneDNN unless the spec says ``prepack: false``."""
    if spec.get("prepack", True) and device.type == "cpu":
        prepack_linears(model)
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
        linear_kernel=linear_kernel(model),
    )
