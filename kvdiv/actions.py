"""Eviction actions: a config entry ``{press: <name>, **arguments}`` → a kvpress press instance.

An action names any press class that :mod:`kvpress` exports (every class subclassing its
``BasePress``) or kvdiv's own :class:`~kvdiv.probabilistic_press.ProbabilisticPress`; the other keys
are the press's dataclass fields. Wrapper presses take their inner press as a nested action:
``{press: AdaKVPress, wraps: {press: SnapKVPress, compression_ratio: 0.5}}`` (``wraps`` fills the
wrapper's field named ``press``; any other argument whose value is a ``{press: ...}`` mapping, or a list
of them, is built the same way).

>>> build_press({"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 64})
SnapKVPress(compression_ratio=0.5, window_size=64, kernel_size=5)
"""

from __future__ import annotations

import dataclasses
import inspect
from functools import lru_cache
from typing import Any, Mapping

import kvpress
from kvpress import BasePress

from kvdiv.probabilistic_press import ProbabilisticPress

#: kvdiv's own presses, nameable beside kvpress's. Adding a method: write a kvpress-style ``@dataclass``
#: subclassing ``BasePress`` (hyperparameters as typed fields, validation in ``__post_init__``, a docstring
#: citing the paper) in ``kvdiv/<name>_press.py``, list it here, and add it to the parametrised press list
#: of tests/test_kernels.py (which checks it against kvpress's own prefill and HF decoding).
KVDIV_PRESSES: tuple[type[BasePress], ...] = (ProbabilisticPress,)
#: The key of an action spec that names the press.
PRESS_KEY = "press"
#: The key of a wrapper action's nested spec (fills the wrapper press's own field named ``press``).
WRAPS_KEY = "wraps"


@lru_cache(maxsize=1)
def press_classes() -> dict[str, type[BasePress]]:
    """Every press class an action may name: kvpress's exported ``BasePress`` subclasses + kvdiv's."""
    classes: dict[str, type[BasePress]] = {}
    for name in dir(kvpress):
        obj = getattr(kvpress, name)
        if inspect.isclass(obj) and issubclass(obj, BasePress) and obj is not BasePress:
            classes[name] = obj
    for cls in KVDIV_PRESSES:
        classes[cls.__name__] = cls
    return dict(sorted(classes.items()))


def press_arguments(press_name: str) -> list[str]:
    """The argument names (dataclass fields accepted by ``__init__``) of the press named ``press_name``."""
    cls = _press_class(press_name)
    return [f.name for f in dataclasses.fields(cls) if f.init]


def _press_class(press_name: Any) -> type[BasePress]:
    classes = press_classes()
    if not isinstance(press_name, str) or press_name not in classes:
        raise ValueError(f"unknown press {press_name!r}; valid presses: {', '.join(classes)}")
    return classes[press_name]


def _is_spec(value: Any) -> bool:
    return isinstance(value, Mapping) and PRESS_KEY in value


def validate_action(spec: Mapping[str, Any], name: str = "action") -> None:
    """Raise ``ValueError`` naming the action and the bad key unless ``spec`` builds a press."""
    build_press(spec, name=name)


def build_press(spec: Mapping[str, Any], name: str = "action") -> BasePress:
    """Build the press an action spec names.

    Parameters
    ----------
    spec : mapping
        ``{press: <class name>, **arguments}``; see the module docstring for nested presses.
    name : str
        The action's name, used in error messages.

    Returns
    -------
    BasePress
        A fresh press instance (presses keep per-run state, so build one per use).

    Raises
    ------
    ValueError
        Unknown press (lists the valid presses), unknown argument (lists the press's arguments), or an
        argument value the press rejects.
    """
    if not isinstance(spec, Mapping):
        raise ValueError(f"action {name!r}: expected a mapping {{press: <name>, ...}}, got {spec!r}")
    if PRESS_KEY not in spec:
        raise ValueError(f"action {name!r}: missing key {PRESS_KEY!r} (the press class name)")
    try:
        cls = _press_class(spec[PRESS_KEY])
    except ValueError as err:
        raise ValueError(f"action {name!r}: {err}") from None
    valid = press_arguments(cls.__name__)
    kwargs: dict[str, Any] = {}
    for key, value in spec.items():
        if key == PRESS_KEY:
            continue
        field = "press" if key == WRAPS_KEY and "press" in valid else key
        if field not in valid:
            shown = [WRAPS_KEY if a == "press" else a for a in valid]
            raise ValueError(
                f"action {name!r}: unknown argument {key!r} for {cls.__name__}; "
                f"valid arguments: {', '.join(shown) if shown else '(none)'}"
            )
        if _is_spec(value):
            value = build_press(value, name=f"{name}.{key}")
        elif isinstance(value, (list, tuple)) and value and all(_is_spec(v) for v in value):
            value = [build_press(v, name=f"{name}.{key}[{i}]") for i, v in enumerate(value)]
        kwargs[field] = value
    try:
        return cls(**kwargs)
    except (AssertionError, ValueError, TypeError) as err:
        raise ValueError(f"action {name!r}: {cls.__name__}({kwargs}) rejected its arguments: {err}") from None


def describe(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Provenance record of an action: the press's full argument list (defaults filled) and its origin.

    Returns a JSON-serialisable dict ``{press, module, arguments}`` (nested presses described recursively).
    """
    return _describe_press(build_press(spec))


def _describe_press(press: BasePress) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for f in dataclasses.fields(press):
        if not f.init:
            continue
        value = getattr(press, f.name)
        if isinstance(value, BasePress):
            value = _describe_press(value)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, BasePress) for v in value):
            value = [_describe_press(v) for v in value]
        elif not isinstance(value, (int, float, str, bool, type(None), list, dict)):
            value = repr(value)
        arguments[f.name] = value
    cls = type(press)
    version = getattr(kvpress, "__version__", None)
    if version is None:
        from importlib.metadata import version as _version

        version = _version("kvpress")
    return {"press": cls.__name__, "module": cls.__module__, "kvpress_version": version, "arguments": arguments}
