"""A model's attention implementation switched for a block: the decode steps' ``kvdiv_decode``
(:mod:`kvdiv.kernel.batched_step`) and the prefill's ``kvdiv_prefill`` (:mod:`kvdiv.kernel.prefill_attention`) set it
on every config object the model's modules carry (a multimodal model's sub-configs too) and restore each afterwards.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

import torch


def attention_implementation(model: Any) -> str:
    """The attention implementation the model's text layers run."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return str(getattr(config, "_attn_implementation", None) or "eager")


def model_configs(model: torch.nn.Module) -> dict[int, Any]:
    """Every config object the model's modules carry, by identity."""
    return {id(m.config): m.config for m in model.modules() if hasattr(m, "config")}


@contextlib.contextmanager
def switched_attention(configs: Mapping[int, Any], name: str, replaces: str | None = None) -> Iterator[None]:
    """Within the block every config of ``configs`` runs attention ``name`` (only those running ``replaces``, where
    given); each config's own implementation is restored afterwards, also after an exception."""
    saved = {k: cfg._attn_implementation for k, cfg in configs.items()}
    try:
        for k, cfg in configs.items():
            if replaces is None or saved[k] == replaces:
                cfg._attn_implementation = name
        yield
    finally:
        for k, cfg in configs.items():
            cfg._attn_implementation = saved[k]


__all__ = ["attention_implementation", "model_configs", "switched_attention"]
