"""Press argument rules, in one place: the generic rules every press's arguments meet (:func:`argument_bounds`, by
argument name and annotated type) and, per press kind whose rules kvdiv states in full, a declarative table
(:data:`PRESS_ARGUMENTS`: ProbabilisticPress). Three readers: the start-up check (:func:`check_argument`, called by
the registry for every argument of every action), the press itself (ProbabilisticPress's ``__post_init__`` calls
:func:`check_arguments`) and the schema (:func:`schema_properties` is ``$defs`` of kvdiv/data/schema.yaml, a test keeps
them equal). Imports no kvpress.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Mapping

#: ProbabilisticPress's choices (the table below; the press's modules import them from here)
DESIGNS = ("multinomial", "pips")
BUDGETS = ("per_head", "global")
PROPOSALS = ("min", "h2o", "min_h", "h2o_h", "scorer")
#: proposals built from prompt-query attention rows, and those of them averaging a history of queries
ATTENTION_PROPOSALS = ("min", "h2o", "min_h", "h2o_h")
HISTORY_PROPOSALS = ("h2o", "min_h", "h2o_h")
#: π_H2O: accumulated attention divided by the number of queries that see each key (kvpress), or not
H2O_NORMALIZATIONS = ("queries", "none")
WEIGHTINGS = ("linear", "softmax")
#: JSON-schema type name → the Python types a value of it may have (bool is not a number here)
_TYPES: dict[str, tuple[type, ...]] = {
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "string": (str,),
    "object": (dict,),
}


@dataclass(frozen=True)
class Argument:
    """One press argument's rules: its JSON-schema ``type``, default, description, allowed ``choices`` or bounds
    (``low``/``high``, inclusive unless said), whether None is allowed, and ``applies``: (other argument, values)
    — used only when that argument takes one of ``values``, else it must keep its default."""

    name: str
    type: str
    default: Any
    description: str = ""
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    nullable: bool = False
    applies: tuple[str, tuple] | None = None

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` for this argument alone (a phrase after its name), or None."""
        if value is None:
            return None if self.nullable else f"= None is not allowed (give a {self.type})"
        if self.choices is not None:
            return (
                None if value in self.choices else f"must be one of {', '.join(map(str, self.choices))}; got {value!r}"
            )
        if isinstance(value, bool) != (self.type == "boolean") or not isinstance(value, _TYPES[self.type]):
            article = "an" if self.type[0] in "aeiou" else "a"
            return f"must be {'true or false' if self.type == 'boolean' else article + ' ' + self.type}, got {value!r}"
        if self.low is None and self.high is None:
            return None
        return _out_of_bounds(value, (self.low, self.high, self.low_inclusive, self.high_inclusive))

    def schema(self) -> dict[str, Any]:
        """This argument as a JSON-schema property (the form of kvdiv/data/schema.yaml's ``$defs``)."""
        out: dict[str, Any] = {}
        if self.choices is not None:
            out["enum"] = [*self.choices, None] if self.nullable else list(self.choices)
        else:
            out["type"] = [self.type, "null"] if self.nullable else self.type
        if self.low is not None:
            out["minimum" if self.low_inclusive else "exclusiveMinimum"] = self.low
        if self.high is not None:
            out["maximum" if self.high_inclusive else "exclusiveMaximum"] = self.high
        out["default"] = self.default
        out["description"] = self.description
        return out


def _table(*arguments: Argument) -> dict[str, Argument]:
    return {a.name: a for a in arguments}


_SCORER = ("proposal", ("scorer",))
#: Per press kind (class name), its arguments' rules in full. docs/probabilistic.md says which choices are the paper's.
PRESS_ARGUMENTS: dict[str, dict[str, Argument]] = {
    "ProbabilisticPress": _table(
        Argument(
            "compression_ratio",
            "number",
            0.0,
            low=0,
            high=1,
            high_inclusive=False,
            description="Share of prompt entries evicted (k = kvpress compute_n_kept(n, ratio) kept per head, in "
            "expectation for multinomial).",
        ),
        Argument(
            "design",
            "string",
            "multinomial",
            choices=DESIGNS,
            description="multinomial (the paper's): m draws with replacement, SNIS weights c/(m pi); pips: exactly k "
            "per head, Horvitz-Thompson.",
        ),
        Argument(
            "proposal",
            "string",
            "min",
            choices=PROPOSALS,
            description="The proposal pi over the prompt entries (last-query attention x |v|, H2O accumulated "
            "attention, their harmonic-history variants, or a kvpress scorer's scores).",
        ),
        Argument(
            "budget",
            "string",
            None,
            choices=BUDGETS,
            nullable=True,
            description="null = global for multinomial (the paper's: one compression ratio, one m for the whole "
            "cache), per_head for pips (its only budget); per_head: one m per KV head meeting E|S| = k.",
        ),
        Argument(
            "correction",
            "boolean",
            True,
            description="Decode-time correction: add the (tempered) log importance weight to each kept entry's "
            "attention logit.",
        ),
        Argument(
            "is_temperature",
            "number",
            1.0,
            low=0,
            high=1,
            applies=("correction", (True,)),
            description="Importance-sampling temperature tau (correction true only): the bias is tau * log w; 1 = the "
            "full correction, 0 = none (the logits of correction false).",
        ),
        Argument(
            "history_size",
            "integer",
            None,
            low=1,
            nullable=True,
            applies=("proposal", HISTORY_PROPOSALS),
            description="h2o, min_h, h2o_h: the last W prompt queries averaged (null: all).",
        ),
        Argument(
            "h2o_normalization",
            "string",
            "queries",
            choices=H2O_NORMALIZATIONS,
            applies=("proposal", ("h2o",)),
            description="proposal h2o only: queries = accumulated attention / number of queries that see each key "
            "(kvpress 0.5.3 ObservedAttentionPress, the paper's code base); none = the plain sum.",
        ),
        Argument(
            "scorer",
            "string",
            None,
            nullable=True,
            applies=_SCORER,
            description="proposal scorer only (and required with it): a kvpress scorer press name (e.g. SnapKVPress).",
        ),
        Argument(
            "scorer_kwargs",
            "object",
            {},
            applies=_SCORER,
            description="proposal scorer only: the scorer's arguments (not compression_ratio: the press's own budget "
            "sets it).",
        ),
        Argument(
            "weighting",
            "string",
            "linear",
            choices=WEIGHTINGS,
            applies=_SCORER,
            description="proposal scorer only: scores -> weights.",
        ),
        Argument(
            "score_temperature",
            "number",
            1.0,
            low=0,
            low_inclusive=False,
            applies=_SCORER,
            description="proposal scorer, weighting softmax: the softmax temperature.",
        ),
        Argument("seed", "integer", 0, low=0, description="Extra seed part of the per-document eviction draw."),
    ),
}


def schema_properties(press: str) -> dict[str, dict[str, Any]]:
    """``$defs/<press>/properties`` of kvdiv/data/schema.yaml: the JSON-schema form of the press's table."""
    return {name: argument.schema() for name, argument in PRESS_ARGUMENTS[press].items()}


def check_arguments(press: str, values: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the argument unless ``values`` (every argument of the declared press kind
    ``press``) meet its table: each value alone, then each argument used only where it ``applies``."""
    table = PRESS_ARGUMENTS[press]
    for name, argument in table.items():
        problem = argument.problem(values.get(name, argument.default))
        if problem:
            raise ValueError(f"{name} {problem}")
    for name, argument in table.items():
        if argument.applies is None or values.get(name, argument.default) == argument.default:
            continue
        other, allowed = argument.applies
        value = values.get(other, table[other].default)
        if value not in allowed:
            raise ValueError(f"{name} is only used with {other} {', '.join(map(_shown, allowed))}, not {_shown(value)}")


def _shown(value: Any) -> str:
    """A value as the config writes it (true/false, 'text')."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


# ---------------------------------------------------------------- generic rules (every other press kind)

#: Integer fields that count something of which there must be at least one (a window, a chunk, a kernel).
POSITIVE_INTEGERS = ("window", "beta", "num_samples", "sketch_dimension", "sample_seq_len")
POSITIVE_INTEGER_SUFFIXES = ("_size", "_length", "_interval")
#: Sizes that may be 0 (kvpress's DecodingPress: a buffer of 0 hidden states scores with the current one only).
NONNEGATIVE_SIZES = ("hidden_states_buffer_size",)


def argument_bounds(field: str, kind: type | None) -> tuple[float, float, bool, bool] | None:
    """``(low, high, low_inclusive, high_inclusive)`` for a press argument named ``field`` of type ``kind``, or
    None when kvdiv knows no range for it.

    - ``*compression_ratio`` (and each of ``compression_ratios``): [0, 1) — the share of the cache evicted;
    - other ``*_ratio`` and ``*_fraction`` arguments and ``alpha_safeguard``: [0, 1];
    - ``epsilon``: ≥ 0; ``score_temperature``: > 0; ``is_temperature``: [0, 1];
    - integer arguments: ≥ 0 (token counts, sinks, seeds), and ≥ 1 for sizes, lengths and intervals
      (``window_size``, ``kernel_size``, ``chunk_length``, ...).
    """
    if field.endswith("compression_ratio") or field == "compression_ratios":
        return (0.0, 1.0, True, False)
    if field.endswith(("_ratio", "_fraction")) or field == "alpha_safeguard":
        return (0.0, 1.0, True, True)
    if field == "epsilon":
        return (0.0, math.inf, True, False)
    if field == "score_temperature":
        return (0.0, math.inf, False, False)
    if field == "is_temperature":
        return (0.0, 1.0, True, True)
    if field in NONNEGATIVE_SIZES:
        return (0.0, math.inf, True, False)
    if kind is int:
        positive = field in POSITIVE_INTEGERS or field.endswith(POSITIVE_INTEGER_SUFFIXES)
        return (1.0 if positive else 0.0, math.inf, True, False)
    return None


def _out_of_bounds(value: Any, bounds: tuple) -> str | None:
    low, high, low_in, high_in = bounds
    low, low_in = (-math.inf, False) if low is None else (low, low_in)
    high, high_in = (math.inf, False) if high is None else (high, high_in)
    if (value > low or (low_in and value == low)) and (value < high or (high_in and value == high)):
        return None
    interval = f"{'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"
    return f"= {value!r} is out of range: it must lie in {interval}"


def _field_types(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # annotations naming types that do not resolve: fall back to the raw ones
        return {f.name: f.type for f in dataclasses.fields(cls)}


def _scalar_kind(annotation: Any) -> tuple[type | None, tuple | None]:
    """(int/float/bool/str or None, the allowed values of a Literal or None) of a field's annotation."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            return None, None
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Literal:
        return None, typing.get_args(annotation)
    if annotation in (int, float, bool, str):
        return annotation, None
    return None, None


def check_argument(cls: type, field: str, value: Any, name: str = "action") -> None:
    """Raise ``ValueError`` naming the action, the argument and the value unless ``value`` meets the argument's rules:
    the press kind's table (:data:`PRESS_ARGUMENTS`) where it has one, else the type the press annotates ``field``
    with and :func:`argument_bounds`. ``None`` passes (an optional argument) unless the table says otherwise."""
    where = f"action {name!r}: {cls.__name__} argument {field!r}"
    declared = PRESS_ARGUMENTS.get(cls.__name__, {}).get(field)
    if declared is not None:
        problem = declared.problem(value)
        if problem:
            raise ValueError(f"{where} {problem}")
        return
    if value is None:
        return
    kind, allowed = _scalar_kind(_field_types(cls).get(field))
    if allowed is not None and value not in allowed:
        raise ValueError(f"{where} = {value!r} is not one of {', '.join(map(repr, allowed))}")
    if kind is bool and not isinstance(value, bool):
        raise ValueError(f"{where} must be true or false, got {value!r}")
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{where} must be an integer, got {value!r}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"{where} must be a number, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {value!r}")
    bounds = argument_bounds(field, kind)
    if bounds is None:
        return
    for v in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{where} must be a number, got {v!r}")
        problem = _out_of_bounds(v, bounds)
        if problem:
            raise ValueError(f"{where} {problem}")
