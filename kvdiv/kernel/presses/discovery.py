"""Press discovery, written once: the press classes kvpress exports (its ``BasePress`` subclasses, or those of a
narrower base such as ``ScorerPress``), by class name. The registry adds kvdiv's presses and the user's own press files
to them; ProbabilisticPress's ``scorer`` proposal names one of kvpress's scorer presses."""

from __future__ import annotations

import inspect
from functools import lru_cache

import kvpress
from kvpress import BasePress


@lru_cache(maxsize=None)
def _exported(base: type) -> tuple[tuple[str, type], ...]:
    found = []
    for name in dir(kvpress):
        obj = getattr(kvpress, name)
        if inspect.isclass(obj) and issubclass(obj, base) and obj is not base and obj is not BasePress:
            found.append((name, obj))
    return tuple(sorted(found))


def kvpress_classes(base: type = BasePress) -> dict[str, type]:
    """{class name: class} of every press kvpress exports that subclasses ``base`` (``base`` itself and ``BasePress``
    excluded), sorted by name."""
    return dict(_exported(base))
