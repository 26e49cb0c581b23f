"""Whether an action can be itself at a prompt length: the entries its press keeps against the entries its scores pin
whatever they are (kvpress pads SnapKV's observation window with the maximum score + 1: kept no more than the window,
attention chooses nothing), one rule per press kind (:data:`PINS`, :data:`RULES`; an own press may declare
``degenerate_reason``). A scorer keeping ``kept`` with ``sinks`` + ``window`` pinned must choose ≥ max(window, 1)
(kept ≥ sinks + 2 × window) where the workflow starts (``strict``, at each stratum's length) and ≥ 1 in a job (at each
document's own length). Other findings (``kept_entries`` or a decoding press that evicts nothing, LagKV's recency
fallback, pins covering the prompt) hold at both; a ratio of 0 (nothing evicted at any length) only at start-up, since
library tests use it. docs/usage.md#actions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kvpress import BasePress, DecodingPress, ScorerPress
from kvpress.utils import compute_n_kept

from kvdiv.kernel.presses.protocol import JudgedPress
from kvdiv.kernel.presses.registry import ALLOW_KEY, KEPT_KEY, build_press

#: kept ≥ sinks + WINDOW_FACTOR × window: the scoring chooses at least as many entries as the window pins.
WINDOW_FACTOR = 2


@dataclass(frozen=True)
class Pins:
    """Entries a scorer keeps whatever its scores at a cache of n entries: ``sinks`` leading, ``window`` trailing."""

    sinks: int = 0
    window: int = 0
    what: str = ""


def _window(press: Any, n: int) -> Pins:
    return Pins(window=press.window_size, what=f"its observation window of {press.window_size}")


def _sinks(field: str) -> Callable[[Any, int], Pins]:
    return lambda press, n: Pins(sinks=getattr(press, field), what=f"its {field} = {getattr(press, field)} sinks")


def _lagkv(press: Any, n: int) -> Pins:
    tail = press.lag_size + (n - press.n_sink) % press.lag_size
    return Pins(press.n_sink, tail, f"its n_sink = {press.n_sink} sinks and last partition of {tail}")


def _inner_pins(press: Any, n: int) -> Pins:
    return pins(press.press, n)


def _probabilistic_pins(press: Any, n: int) -> Pins:
    return pins(press._scorer, n) if press._scorer is not None else Pins()


#: Per scorer kind (class name, found along the class's MRO): the entries its scores pin.
PINS: dict[str, Callable[[Any, int], Pins]] = {
    "SnapKVPress": _window,  # and PyramidKVPress, its subclass
    "TOVAPress": lambda press, n: Pins(window=1, what="its last entry"),
    "StreamingLLMPress": _sinks("n_sink"),
    "ExpectedAttentionPress": _sinks("n_sink"),
    "CapPress": _sinks("n_sink"),
    "CURPress": _sinks("num_sinks"),
    "LagKVPress": _lagkv,
    "AdaKVPress": _inner_pins,
    "CriticalAdaKVPress": _inner_pins,
    "ChunkKVPress": _inner_pins,
    "EntropyGatedChunkKVPress": _inner_pins,
    "BlockPress": _inner_pins,
    "ProbabilisticPress": _probabilistic_pins,
}


def _lookup(table: Mapping[str, Any], press: Any) -> Any:
    """The entry of the nearest class of ``press`` along its MRO that kvpress or kvdiv defines, or None."""
    for cls in type(press).__mro__:
        if cls.__name__ in table and cls.__module__.split(".")[0] in ("kvpress", "kvdiv"):
            return table[cls.__name__]
    return None


def pins(press: Any, n: int) -> Pins:
    """The entries ``press``'s scores pin at a cache of ``n`` entries (none for a kind without a :data:`PINS` rule)."""
    rule = _lookup(PINS, press)
    return rule(press, n) if rule is not None else Pins()


def _kept(press: Any, n: int) -> int:
    """Entries a scorer keeps of ``n`` by its ratio (kvpress's compute_n_kept; PyramidKV's mean over layers, its deeper
    layers keeping less by design): ``n`` at ratio 0, 0 when its ratio keeps none (kvpress then keeps one, chosen by a
    tie-break)."""
    ratio = press.compression_ratio
    if ratio == 0:
        return n
    return 0 if int(n * (1 - ratio)) < 1 else compute_n_kept(n, ratio)


def judge(kept: int, n: int, found: Pins, strict: bool, kind: str) -> str | None:
    """Why ``kind``, keeping ``kept`` of ``n`` entries with ``found`` pinned, is not itself (None: it is)."""
    if found.sinks + found.window >= n:
        return f"{found.what} cover all {n} entries compressed (kvpress needs more entries than it pins)"
    chosen = kept - found.sinks - found.window
    need = max(found.window, 1) if strict else 1
    if chosen >= need:
        return None
    needed = found.sinks + need + found.window
    pinned = found.sinks + found.window
    if chosen <= 0:
        return (
            f"{kind} keeps {kept} entries, and {pinned} are pinned by {found.what} (scored above every other entry): "
            f"its scores choose none of the kept entries, a positional rule; it needs kept ≥ {needed}"
        )
    return (
        f"{kind} keeps {kept} entries, and {pinned} are pinned by {found.what}: its scores choose only {chosen}, fewer "
        f"than the window; it needs kept ≥ {needed} (sinks + {WINDOW_FACTOR} × window)"
    )


def _scorer(press: Any, n: int, horizon: int, strict: bool) -> str | None:
    kept = _kept(press, n)
    if kept == n:  # whatever the length: the workflow refuses it at start-up (registry.check_evicts), a library may not
        return "evicts nothing (compression ratio 0): Q ≡ P" if strict else None
    if kept == 0:
        ratio = press.compression_ratio
        return f"its compression ratio {ratio:g} keeps no entry of {n} (kvpress keeps one, chosen by a tie-break)"
    if _lookup({"LagKVPress": 1}, press) and n < press.n_sink + 2 * press.lag_size:
        return (
            f"the prompt's {n} entries are fewer than n_sink + 2 × lag_size = {press.n_sink + 2 * press.lag_size}: "
            "LagKV then scores by position (a recency rule)"
        )
    return judge(kept, n, pins(press, n), strict, type(press).__name__)


def _chunks(press: Any, n: int, horizon: int, strict: bool) -> str | None:
    """ChunkPress: its press compresses every chunk on its own (the last one shorter)."""
    for length in sorted({min(press.chunk_length, n), n % press.chunk_length} - {0}):
        reason = reason_of(press.press, length, horizon, strict)
        if reason:
            return f"in its chunks of {length} entries: {reason}"
    return None


def _composed(press: Any, n: int, horizon: int, strict: bool) -> str | None:
    for i, part in enumerate(press.presses):
        reason = reason_of(part, n, horizon, strict)
        if reason:
            return f"presses[{i}] at {n} entries: {reason}"
        kept = kept_entries(part, n)
        n = n if kept is None else kept
    return None


def _decoding(press: Any, n: int, horizon: int, strict: bool) -> str | None:
    """A decoding press cuts each chain's cache every compression_interval decode steps."""
    interval, kind = press.compression_interval, type(press).__name__
    if interval + 2 > horizon:
        return (
            f"{kind} first compresses at the end of decode step compression_interval = {interval}, which changes the "
            f"law of step {interval + 2} at the earliest, beyond horizon {horizon}: Q ≡ P within the horizon"
        )
    last = (horizon - 2) // interval * interval  # the last compression that changes a law within H
    ratio = getattr(press, "target_compression_ratio", None)
    if ratio == 0:
        return f"{kind} with target_compression_ratio 0 keeps every entry: Q ≡ P"
    cache = n + interval  # the cache its first compression cuts
    target = press.target_size if ratio is None else max(1, int(cache * (1 - ratio)))
    if ratio is None and target >= n + last:
        return (
            f"{kind} keeps target_size = {target} entries, at least the longest cache it would cut within horizon "
            f"{horizon} ({n} prompt entries + {last} generated tokens): it never evicts anything, Q ≡ P"
        )
    return judge(min(target, cache), cache, pins(press.base_press, cache), strict, f"{kind} (at its compressions)")


def _prefill_decoding(press: Any, n: int, horizon: int, strict: bool) -> str | None:
    if press.prefilling_press is None and press.decoding_press is None:
        return "PrefillDecodingPress without a prefilling_press or a decoding_press compresses nothing: Q ≡ P"
    if press.prefilling_press is not None:
        reason = reason_of(press.prefilling_press, n, horizon, strict)
        if reason:
            return f"prefilling_press: {reason}"
        n = kept_entries(press.prefilling_press, n) or n
    return None if press.decoding_press is None else reason_of(press.decoding_press, n, horizon, strict)


def _inner(press: Any, n: int, horizon: int, strict: bool) -> str | None:
    return reason_of(press.press, n, horizon, strict)


Rule = Callable[[Any, int, int, bool], "str | None"]
#: Per press kind (class name, found along the class's MRO): why it is not itself at ``n`` entries and horizon H.
RULES: dict[str, Rule] = {
    "ScorerPress": _scorer,  # every scorer, with its PINS
    "AdaKVPress": _inner,
    "CriticalAdaKVPress": _inner,
    "ChunkKVPress": _inner,
    "EntropyGatedChunkKVPress": _inner,
    "BlockPress": _inner,
    "ChunkPress": _chunks,
    "ComposedPress": _composed,
    "DecodingPress": _decoding,  # and CompressionRatioDecodingPress
    "PrefillDecodingPress": _prefill_decoding,
    "ProbabilisticPress": _scorer,
}


def reason_of(press: BasePress, n: int, horizon: int, strict: bool = True) -> str | None:
    """Why ``press`` is not itself when it compresses ``n`` entries within horizon H (None: it is). An own press may
    declare ``degenerate_reason(prompt_length) -> str | None``; a kind without a rule is not judged."""
    if isinstance(press, JudgedPress):
        return press.degenerate_reason(n)
    rule = _lookup(RULES, press)
    return rule(press, n, horizon, strict) if rule is not None else None


def degenerate_reason(spec: Mapping[str, Any], n: int, horizon: int, strict: bool = True) -> str | None:
    """Why the action ``spec`` is not itself when its press compresses ``n`` entries within horizon H, or None."""
    kept = spec.get(KEPT_KEY) if isinstance(spec, Mapping) else None
    if isinstance(kept, int) and kept >= n:
        return f"kept_entries = {kept} keeps all {n} entries compressed: it evicts nothing, Q ≡ P"
    return reason_of(build_press(spec, prompt_length=n), n, horizon, strict)


def allows_degenerate(spec: Any) -> bool:
    """Whether the action ``spec`` says ``allow_degenerate: true``."""
    return isinstance(spec, Mapping) and spec.get(ALLOW_KEY) is True


def kept_entries(press: Any, n: int) -> int | None:
    """Entries ``press`` keeps of ``n`` (per layer and head; PyramidKV: the mean over layers), None if unknown."""
    if isinstance(press, ScorerPress) or _lookup({"ProbabilisticPress": 1}, press):
        return max(_kept(press, n), 1)
    if isinstance(press, DecodingPress):
        return n
    inner = getattr(press, "press", None)
    return kept_entries(inner, n) if isinstance(inner, BasePress) else None


def budget_record(action: Any, n: int) -> dict[str, Any]:
    """A store's record of an action's budget at a document: the entries compressed, the compression ratio its press
    ran at (computed from ``kept_entries`` where the action gives one) and the entries it kept (None: unknown)."""
    press = action if isinstance(action, BasePress) else build_press(action, prompt_length=n)
    ratio = getattr(press, "compression_ratio", None)
    return {
        "compressed_entries": n,
        "compression_ratio": ratio if isinstance(ratio, (float, int)) and not isinstance(ratio, bool) else None,
        "kept_entries": kept_entries(press, n),
    }


def action_reasons(actions: Mapping[str, Any], n: int, horizon: int, strict: bool) -> dict[str, str]:
    """{action: why it is not itself} of the actions (specs, or press instances) compressing ``n`` entries."""
    found = {}
    for name, action in actions.items():
        if isinstance(action, BasePress):
            reason = reason_of(action, n, horizon, strict)
        else:
            reason = degenerate_reason(action, n, horizon, strict)
        if reason:
            found[name] = reason
    return found
