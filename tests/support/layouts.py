"""Cache layouts for kernel tests: the same loaded model with another model spec ``kv_layout``."""

from __future__ import annotations

import dataclasses


def with_layout(loaded, layout: str):
    """``loaded`` (a LoadedModel) with model spec ``kv_layout: layout`` (the same model object)."""
    return dataclasses.replace(loaded, spec={**loaded.spec, "kv_layout": layout})
