"""Import kvpress without importing Hugging Face ``datasets`` (about 1 s of a trajectory job's start-up).

kvpress's package ``__init__`` imports every press module, and two of them (DuoAttentionPress's and
ExpectedAttentionStatsPress's calibration) do ``from datasets import load_dataset`` at module level although
they call it only when such a press calibrates. :func:`import_kvpress` imports kvpress with a placeholder
``datasets`` module in ``sys.modules`` whose attributes import the real ``datasets`` on first use, then
removes the placeholder: a job that names no such press never imports ``datasets``; one that does gets the
real ``load_dataset`` when the press calls it, or, where ``datasets`` is missing or broken, an ``ImportError`` that
says so (kvpress itself still imports).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

#: The name of the deferred module.
DEFERRED = "datasets"


def _real() -> types.ModuleType:
    """The real ``datasets`` module (the placeholder is removed first, so the import system loads it)."""
    module = sys.modules.get(DEFERRED)
    if getattr(module, "__kvdiv_placeholder__", False):
        del sys.modules[DEFERRED]
    try:
        return importlib.import_module(DEFERRED)
    except Exception as err:  # not installed, or a version clash inside it
        raise ImportError(
            f"a kvpress press needs Hugging Face `datasets` to load its data, which does not import here "
            f"({type(err).__name__}: {err}); install it (pip install datasets) or choose another press"
        ) from err


def _placeholder() -> types.ModuleType:
    module = types.ModuleType(DEFERRED, "kvdiv's placeholder: attributes import the real datasets on first use")
    module.__kvdiv_placeholder__ = True

    def load_dataset(*args: Any, **kwargs: Any) -> Any:
        return _real().load_dataset(*args, **kwargs)

    def __getattr__(name: str) -> Any:  # PEP 562: any other name imported from datasets at module level
        if name.startswith("__"):
            raise AttributeError(name)
        attr = getattr(_real(), name)
        return attr

    module.load_dataset = load_dataset
    module.__getattr__ = __getattr__
    return module


def import_kvpress() -> types.ModuleType:
    """``import kvpress`` with ``datasets`` deferred until a press uses it (module docstring)."""
    if "kvpress" in sys.modules or DEFERRED in sys.modules:
        return importlib.import_module("kvpress")
    sys.modules[DEFERRED] = _placeholder()
    try:
        return importlib.import_module("kvpress")
    finally:
        if getattr(sys.modules.get(DEFERRED), "__kvdiv_placeholder__", False):
            del sys.modules[DEFERRED]
