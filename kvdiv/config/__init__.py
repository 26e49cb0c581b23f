"""The only reader of the config's layout: :func:`load` (YAML read strictly, the schema's defaults filled, every
check), :func:`check_config` (every cross-key check), the plan (:mod:`~kvdiv.config.plan`), the workflow's lookups
(:mod:`~kvdiv.config.lookups`) and the typed settings the library takes (:mod:`kvdiv.settings`, low in the package
graph: documents, trajectories and llm import it).

Importing this package imports nothing else; the names below load their module on first use.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "load": "kvdiv.config.loading",
    "validate": "kvdiv.config.files",
    "ConfigError": "kvdiv.config.files",
    "check_config": "kvdiv.config.checks",
    "Generation": "kvdiv.settings",
    "Runtime": "kvdiv.settings",
    "AutoBatch": "kvdiv.settings",
    "DocumentRequest": "kvdiv.settings",
    "generation": "kvdiv.settings",
    "SCHEMA": "kvdiv.settings",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kvdiv.config' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
