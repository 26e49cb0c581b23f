"""Eviction actions: a config entry ``{press: <name>, **arguments}`` → a kvpress press instance.

Any press class :mod:`kvpress` exports, :class:`~kvdiv.kernel.presses.probabilistic_press.ProbabilisticPress`, or a
press of the user's own ``press_modules`` files (:func:`load_press_modules`; docs/own-presses.md); the
other keys are the press's dataclass fields; a wrapper takes its inner press under ``wraps``. Every argument is
checked before the press is built (:mod:`kvdiv.kernel.presses.arguments`), because kvpress accepts many
out-of-range values silently. How: docs/internals.md#press-registry.

>>> build_press({"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 64})
SnapKVPress(compression_ratio=0.5, window_size=64, kernel_size=5)
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import inspect
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

import kvpress
from kvpress import BasePress, DecodingPress, PrefillDecodingPress, ScorerPress

from kvdiv.kernel.presses.arguments import check_argument
from kvdiv.kernel.presses.discovery import kvpress_classes
from kvdiv.kernel.presses.probabilistic_press import ProbabilisticPress

#: kvdiv's own presses, nameable beside kvpress's. Adding a method: write a kvpress-style ``@dataclass``
#: subclassing ``BasePress`` (hyperparameters as typed fields, validation in ``__post_init__``, a docstring
#: citing the paper) in ``kvdiv/kernel/presses/<name>_press.py``, list it here, and add it to the press list of
#: tests/kernel/default_presses.py (the parametrised tests check it against kvpress's own prefill and HF decoding).
KVDIV_PRESSES: tuple[type[BasePress], ...] = (ProbabilisticPress,)
#: Presses kvpress exports that kvdiv cannot run faithfully, with the reason (README "A divergence leaderboard of
#: kvpress presses"): an action naming one, at any depth, is refused by :func:`build_press`, hence when the workflow
#: starts, rather than running with Q ≡ P, unreproducibly, or failing inside a trajectory job.
_DOWNLOADS = "downloads filters, a scorer model, head patterns, a calibration dataset or statistics from the Hub"
_FORWARDS = "runs extra forward (or backward) passes over the context at prefill, which kvdiv's session does not"
_UNSEEDED = (
    "draws an unseeded random sketch (torch.randn) at prefill: a rerun, or another set of documents in its "
    "job, gives another cache, against kvdiv's reproducibility"
)
_EAGER = "needs the eager attention weights (attn_implementation='eager'), which kvdiv's prefill does not use"
_MERGES_DECODING = (
    "changes kept values while decoding (merges evicted entries into them); kvdiv runs decode-time "
    "compression that keeps or drops entries (DecodingPress, PrefillDecodingPress)"
)
UNRUNNABLE: dict[str, str] = {
    "QFilterPress": _DOWNLOADS,
    "KVzapPress": _DOWNLOADS,
    "DuoAttentionPress": _DOWNLOADS,
    "ExpectedAttentionStatsPress": _DOWNLOADS,
    "KVzipPress": _FORWARDS,
    "FastKVzipPress": _FORWARDS,
    "RestoreKVPress": _FORWARDS,
    "KVgradPress": _FORWARDS,
    "ObservedAttentionPress": _EAGER,
    "KVComposePress": "needs every layer's attention weights (layer_attentions), i.e. eager attention",
    "FinchPress": "needs the prompt split into context and question by a delimiter token (set by kvpress's pipeline)",
    "LeverageScorePress": _UNSEEDED,
    "CompactorPress": _UNSEEDED,
    "CriticalKVPress": "defines its own __init__ rather than dataclass fields (its AdaKV form CriticalAdaKVPress runs)",
    "ThinKPress": (
        "prunes key channels, not cache entries: kvdiv rebuilds each cache from the captured keys and "
        "values, so Q ≡ P (every TV 0)"
    ),
    "SimLayerKVPress": (
        "evicts nothing on the models kvdiv runs (no layer passes its lazy-layer test at the default "
        "threshold): Q ≡ P (every TV 0)"
    ),
    "KeyRerotationPress": (
        "re-rotates kept keys to compacted positions while kvdiv decodes at prompt positions: not kvpress's Q"
    ),
    "CAMPress": _MERGES_DECODING,
    "DMSPress": "needs a trained eviction head (DMS checkpoints from the Hub) to decide what to drop while decoding",
    "LUKVPress": "ships budget curves for Llama-3.1-8B-Instruct with ExpectedAttentionPress only",
    "PerLayerCompressionPress": "is a combinator not checked against kvpress's prefill here",
    "MergingPress": "merges evicted entries into kept ones; not checked against kvpress's prefill here",
}
#: The key of an action spec that names the press.
PRESS_KEY = "press"
#: The key of a wrapper action's nested spec (fills the wrapper press's own field named ``press``, or ``base_press``
#: for kvpress's DecodingPress).
WRAPS_KEY = "wraps"
WRAPPED_FIELDS = ("press", "base_press")
#: kvdiv's keys of an action spec, not the press's: a fixed number of kept entries (any spec of a scorer press) and a
#: deliberate exception to the start-up check of degenerate actions (the action's top level only)
KEPT_KEY = "kept_entries"
ALLOW_KEY = "allow_degenerate"


def builtin_press_classes() -> dict[str, type[BasePress]]:
    """The press classes of kvpress (:func:`~kvdiv.kernel.presses.discovery.kvpress_classes`) and kvdiv
    (``KVDIV_PRESSES``)."""
    return dict(sorted({**kvpress_classes(), **{cls.__name__: cls for cls in KVDIV_PRESSES}}.items()))


#: Presses of the user's own files (:func:`load_press_modules`): class name → (class, the file defining it).
USER_PRESSES: dict[str, tuple[type[BasePress], Path]] = {}


def press_classes() -> dict[str, type[BasePress]]:
    """Every press class an action may name: kvpress's, kvdiv's and those of the loaded ``press_modules``."""
    return dict(sorted({**builtin_press_classes(), **{n: c for n, (c, _) in USER_PRESSES.items()}}.items()))


def load_press_modules(paths: Iterable[str | os.PathLike]) -> dict[str, type[BasePress]]:
    """Import the user's press files and make every ``BasePress`` subclass each *defines* nameable by actions.

    This runs the user's own code (that is its purpose). Each file is imported as its own module
    (``kvdiv_press_modules.<stem>_<hash of its resolved path>``); a file loaded before is not imported again.
    Raises ``ValueError`` naming the file when it is missing or fails to import, and naming file and class when a
    class clashes with a kvpress or kvdiv press or with a class of another press module. Returns {name: class} of
    the presses found in ``paths``.
    """
    found: dict[str, type[BasePress]] = {}
    builtin = builtin_press_classes()
    for raw in paths:
        path = Path(raw)
        resolved = path.resolve()
        if not path.is_file():
            raise ValueError(f"press_modules: no such file {str(path)!r} (paths are relative to the working directory)")
        digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
        name = f"kvdiv_press_modules.{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}_{digest}"
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, resolved)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as err:  # the user's code: any error, reported with the file's name
                del sys.modules[name]
                raise ValueError(f"press_modules: importing {str(path)!r} failed: {type(err).__name__}: {err}") from err
        for cls_name, obj in vars(module).items():
            if not (inspect.isclass(obj) and issubclass(obj, BasePress) and obj.__module__ == name):
                continue
            if cls_name in builtin:
                origin = "kvdiv" if builtin[cls_name] in KVDIV_PRESSES else "kvpress"
                raise ValueError(
                    f"press_modules: {str(path)!r} defines class {cls_name!r}, which clashes with "
                    f"{origin}'s press of that name; rename it"
                )
            known = USER_PRESSES.get(cls_name)
            if known is not None and known[1] != resolved:
                raise ValueError(
                    f"press_modules: {str(path)!r} defines class {cls_name!r}, which {str(known[1])!r} "
                    f"defines too; rename one of them"
                )
            if "__dataclass_fields__" not in vars(obj):  # decorated itself, not only a dataclass's subclass
                raise ValueError(
                    f"press_modules: {str(path)!r}: press {cls_name!r} must be a @dataclass (its "
                    f"hyperparameters are its fields, as kvpress's presses)"
                )
            USER_PRESSES[cls_name] = (obj, resolved)
            found[cls_name] = obj
    return found


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
    """Raise ``ValueError`` naming the action and the bad key unless ``spec`` builds a press (with ``kept_entries``:
    at a prompt of twice its largest value; the entries a press keeps at each prompt length are judged by
    :mod:`kvdiv.kernel.presses.degenerate`)."""
    build_press(spec, name=name, prompt_length=any_prompt_length(spec))


def any_prompt_length(spec: Any) -> int | None:
    """A prompt length at which ``spec`` builds: twice the largest ``kept_entries`` in it, None without one."""
    found = []
    if isinstance(spec, Mapping):
        if isinstance(spec.get(KEPT_KEY), int) and not isinstance(spec.get(KEPT_KEY), bool):
            found.append(2 * spec[KEPT_KEY])
        found += [n for v in spec.values() if (n := any_prompt_length(v)) is not None]
    elif isinstance(spec, (list, tuple)):
        found += [n for v in spec if (n := any_prompt_length(v)) is not None]
    return max(found, default=None)


def ratio_keeping(prompt_length: int, kept: int) -> float:
    """The compression ratio r at which a press keeps exactly ``kept`` of ``prompt_length`` entries
    (``int(n · (1 − r)) = kept``, kvpress's ``compute_n_kept``): 1 − kept/n, moved by float ulps where rounding would
    miss it; 0.0 (evict nothing) when ``kept ≥ prompt_length``."""
    n, k = int(prompt_length), int(kept)
    if k >= n:
        return 0.0
    ratio = 1.0 - k / n
    while int(n * (1 - ratio)) < k:
        ratio = math.nextafter(ratio, 0.0)
    while int(n * (1 - ratio)) > k:
        ratio = math.nextafter(ratio, 1.0)
    return ratio


def _resolve_kept_entries(cls: type, spec: Mapping[str, Any], name: str, prompt_length: int | None) -> dict:
    """``spec`` with ``kept_entries: K`` replaced by the compression ratio that keeps K of ``prompt_length`` entries
    (:func:`ratio_keeping`): a scorer press (kvpress's ``ScorerPress`` subclasses, ProbabilisticPress) only, never
    beside a compression_ratio."""
    spec = dict(spec)
    kept = spec.pop(KEPT_KEY)
    where = f"action {name!r}: {KEPT_KEY}"
    if isinstance(kept, bool) or not isinstance(kept, int) or kept < 1:
        raise ValueError(f"{where} must be a positive integer (entries the press keeps), got {kept!r}")
    if not issubclass(cls, (ScorerPress, ProbabilisticPress)):
        wrapped = [f for f in WRAPPED_FIELDS if f in press_arguments(cls.__name__)]
        hint = f"give it to the press it wraps ({WRAPS_KEY})" if wrapped else "it keeps no ratio of the prompt"
        raise ValueError(
            f"{where} applies to scorer presses (ScorerPress subclasses, ProbabilisticPress), not "
            f"{cls.__name__}: {hint}"
        )
    if "compression_ratio" in spec:
        raise ValueError(f"{where} and compression_ratio both given: give exactly one (a fixed budget or a ratio)")
    if prompt_length is None:
        raise ValueError(
            f"{where}: the ratio depends on the prompt length; build the press for a prompt "
            "(build_press(..., prompt_length=n), as KernelSession does; in a ComposedPress only its first press may "
            "keep a fixed number of entries)"
        )
    spec["compression_ratio"] = ratio_keeping(prompt_length, kept)
    return spec


def evicts_nothing(press: BasePress) -> bool:
    """Whether ``press`` keeps every cache entry whatever the prompt: a ``compression_ratio`` of 0 (its own, or that
    of the press it wraps; every press of a ComposedPress). Such an action has Q ≡ P, every TV 0."""
    presses = getattr(press, "presses", None)
    if isinstance(presses, (list, tuple)) and presses and all(isinstance(p, BasePress) for p in presses):
        return all(evicts_nothing(p) for p in presses)
    try:
        ratio = getattr(press, "compression_ratio", None)
    except (AttributeError, TypeError, ValueError):
        ratio = None
    if isinstance(ratio, (int, float)) and not isinstance(ratio, bool):
        return ratio == 0
    inner = getattr(press, "press", None)
    return isinstance(inner, BasePress) and evicts_nothing(inner)


def check_evicts(spec: Mapping[str, Any], name: str = "action") -> None:
    """Refuse an action whose press evicts nothing (:func:`evicts_nothing`): a study of it measures Q ≡ P, zero
    divergence by construction (the workflow calls this when it starts; library tests may use such presses)."""
    if evicts_nothing(build_press(spec, name, any_prompt_length(spec))):
        raise ValueError(
            f"action {name!r}: {spec.get(PRESS_KEY)} with compression_ratio 0 evicts nothing: Q ≡ P and every TV is 0; "
            "give a compression_ratio in (0, 1)"
        )


def build_press(spec: Mapping[str, Any], name: str = "action", prompt_length: int | None = None) -> BasePress:
    """Build the press an action spec names.

    Parameters
    ----------
    spec : mapping
        ``{press: <class name>, **arguments}``; see the module docstring for nested presses. Two keys are kvdiv's,
        not the press's: ``kept_entries`` (a scorer press keeps that many entries: its compression ratio is
        :func:`ratio_keeping` at ``prompt_length``) and, at the top level, ``allow_degenerate`` (the start-up
        check's business: :mod:`kvdiv.kernel.presses.degenerate`).
    name : str
        The action's name, used in error messages.
    prompt_length : int, optional
        The entries the press compresses (the prompt, or the context with ``compress: context``): needed by
        ``kept_entries`` only.

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
    if isinstance(spec, Mapping) and ALLOW_KEY in spec:
        if not isinstance(spec[ALLOW_KEY], bool):
            raise ValueError(f"action {name!r}: {ALLOW_KEY} must be true or false, got {spec[ALLOW_KEY]!r}")
        spec = {k: v for k, v in spec.items() if k != ALLOW_KEY}
    return _build(spec, name, prompt_length)


def _build(spec: Mapping[str, Any], name: str, prompt_length: int | None) -> BasePress:
    if not isinstance(spec, Mapping):
        raise ValueError(f"action {name!r}: expected a mapping {{press: <name>, ...}}, got {spec!r}")
    if PRESS_KEY not in spec:
        raise ValueError(f"action {name!r}: missing key {PRESS_KEY!r} (the press class name)")
    try:
        cls = _press_class(spec[PRESS_KEY])
    except ValueError as err:
        raise ValueError(f"action {name!r}: {err}") from None
    if cls.__name__ in UNRUNNABLE:
        raise ValueError(f"action {name!r}: {cls.__name__} cannot run in kvdiv: it {UNRUNNABLE[cls.__name__]}")
    if ALLOW_KEY in spec:
        raise ValueError(f"action {name!r}: {ALLOW_KEY} applies to a whole action, not to a press inside one")
    if KEPT_KEY in spec:
        spec = _resolve_kept_entries(cls, spec, name, prompt_length)
    valid = press_arguments(cls.__name__)
    kwargs: dict[str, Any] = {}
    for key, value in spec.items():
        if key == PRESS_KEY:
            continue
        wrapped = [f for f in WRAPPED_FIELDS if f in valid]
        field = wrapped[0] if key == WRAPS_KEY and wrapped else key
        if field not in valid:
            shown = [WRAPS_KEY if a in WRAPPED_FIELDS else a for a in valid]
            raise ValueError(
                f"action {name!r}: unknown argument {key!r} for {cls.__name__}; "
                f"valid arguments: {', '.join(shown) if shown else '(none)'}"
            )
        if _is_spec(value):
            value = _build(value, f"{name}.{key}", prompt_length)
        elif isinstance(value, (list, tuple)) and value and all(_is_spec(v) for v in value):
            # a ComposedPress's later presses compress what the earlier ones kept: no kept_entries there
            value = [_build(v, f"{name}.{key}[{i}]", None if i else prompt_length) for i, v in enumerate(value)]
        else:
            check_argument(cls, field, value, name)
        kwargs[field] = value
    _check_scorer_kwargs(cls, kwargs, name)
    try:
        press = cls(**kwargs)
    except (AssertionError, ValueError, TypeError) as err:
        raise ValueError(f"action {name!r}: {cls.__name__}({kwargs}) rejected its arguments: {err}") from None
    check_decoding_press(press, name)
    return press


def _check_scorer_kwargs(cls: type, kwargs: Mapping[str, Any], name: str) -> None:
    """A press that builds a named scorer press from ``scorer_kwargs`` (kvdiv's ProbabilisticPress): check those
    arguments against the scorer like any other."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.init}
    scorer, scorer_kwargs = kwargs.get("scorer", defaults.get("scorer")), kwargs.get("scorer_kwargs")
    if isinstance(scorer, str) and scorer in UNRUNNABLE:
        raise ValueError(f"action {name!r}: scorer {scorer} cannot run in kvdiv: it {UNRUNNABLE[scorer]}")
    if not isinstance(scorer, str) or not isinstance(scorer_kwargs, Mapping):
        return
    classes = press_classes()
    if scorer in classes:
        for key, value in scorer_kwargs.items():
            check_argument(classes[scorer], key, value, f"{name}.scorer_kwargs")


def decoding_press(press: BasePress) -> DecodingPress | None:
    """The part of ``press`` that compresses during decoding: the press itself (a ``DecodingPress`` or subclass), the
    ``decoding_press`` of a ``PrefillDecodingPress``, or None (a prefill-only press)."""
    if isinstance(press, DecodingPress):
        return press
    if isinstance(press, PrefillDecodingPress):
        return press.decoding_press
    return None


def check_decoding_press(press: BasePress, name: str) -> None:
    """Raise ``ValueError`` naming the action unless its decoding part can run: a base press with a query window
    (SnapKV's ``window_size``) needs more buffered states than the window at every compression, i.e.
    ``min(compression_interval, hidden_states_buffer_size) > window_size``."""
    part = decoding_press(press)
    if part is None:
        return
    ignored = getattr(part.base_press, "compression_ratio", 0)
    if ignored:
        raise ValueError(
            f"action {name!r}: the base press of {type(part).__name__} has compression_ratio {ignored!r} (or "
            "kept_entries), which the decoding press overrides at every compression (target_size, "
            "target_compression_ratio): leave it out"
        )
    window = getattr(part.base_press, "window_size", None)
    if window is None:  # an AdaKVPress base press: its scorer's window
        window = getattr(getattr(part.base_press, "press", None), "window_size", None)
    if isinstance(window, int):
        buffered = min(part.compression_interval, part.hidden_states_buffer_size)
        if buffered <= window:
            raise ValueError(
                f"action {name!r}: {type(part).__name__} buffers min(compression_interval, hidden_states_buffer_size) "
                f"= {buffered} attention inputs per compression, but its base press {type(part.base_press).__name__} "
                f"scores with a window of {window} queries: give more than {window}"
            )


def describe(spec: Mapping[str, Any], prompt_length: int | None = None) -> dict[str, Any]:
    """Provenance record of an action (built for ``prompt_length``, which ``kept_entries`` needs): the press's full
    argument list (defaults filled) and its origin.

    Returns a JSON-serialisable dict ``{press, module, arguments}`` (nested presses described recursively).
    """
    return describe_press(build_press(spec, prompt_length=prompt_length))


def describe_press(press: BasePress) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for f in dataclasses.fields(press):
        if not f.init:
            continue
        value = getattr(press, f.name)
        if isinstance(value, BasePress):
            value = describe_press(value)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, BasePress) for v in value):
            value = [describe_press(v) for v in value]
        elif not isinstance(value, (int, float, str, bool, type(None), list, dict)):
            value = repr(value)
        arguments[f.name] = value
    cls = type(press)
    version = getattr(kvpress, "__version__", None)
    if version is None:
        from importlib.metadata import version as _version

        version = _version("kvpress")
    return {"press": cls.__name__, "module": cls.__module__, "kvpress_version": version, "arguments": arguments}
