"""What a trajectory job checks before any prefill (:func:`kvdiv.trajectories.job.run_documents`, hence the
workflow's jobs and :func:`kvdiv.compare`): each error names the bad thing instead of failing inside torch or kvpress.

- the model: loaded (not on the ``meta`` device) and every weight finite (a NaN weight makes every law NaN);
- the actions: each a press instance or a config spec ``{press: ...}`` (not a press class, not another object);
- each document's prompt ids: at least 2 (an empty prompt renders to nothing), each inside the model's vocabulary;
- each action's windows against each document: kvpress's SnapKV-style ``window_size`` and StreamingLLM's ``n_sink``
  need more prompt tokens than they cover (kvpress asserts it, naming neither action nor document).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

#: Press fields a prompt must be longer than (kvpress asserts ``q_len > window_size``, ``k_len > n_sink``).
LENGTH_FIELDS = ("window_size", "n_sink")


def check_model(model: Any) -> None:
    """``model`` has its weights (not on the meta device) and every floating weight is finite."""
    import torch

    params = list(model.named_parameters())
    meta = [name for name, p in params if p.device.type == "meta"]
    if meta:
        raise ValueError(
            f"the model's weights are on the meta device ({meta[0]!r} and {len(meta) - 1} more): they were never "
            "loaded (e.g. from_pretrained(..., device_map='meta') or init_empty_weights); load the model's weights"
        )
    with torch.no_grad():
        for name, p in params:
            if p.is_floating_point() and not bool(torch.isfinite(p).all()):
                bad = int((~torch.isfinite(p)).sum())
                raise ValueError(
                    f"the model's weight {name!r} holds {bad} non-finite value(s) (NaN or inf) of {p.numel()}: every "
                    "law would be NaN; check the checkpoint or the code that changed the weights"
                )


def check_action_values(actions: Mapping[str, Any]) -> None:
    """Each action is a kvpress press instance or a config spec (a mapping naming its ``press``)."""
    import inspect

    from kvpress import BasePress

    if not isinstance(actions, Mapping):
        raise ValueError(f"actions must map names to presses, got a {type(actions).__name__}")
    for name, value in actions.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"actions: the name {name!r} is not a non-empty string")
        if isinstance(value, BasePress) or (isinstance(value, Mapping) and "press" in value):
            continue
        if inspect.isclass(value):
            example = f"{value.__name__}(compression_ratio=0.5)"
            kind = "a press class" if issubclass(value, BasePress) else "a class"
            raise ValueError(
                f"actions[{name!r}] is {kind} ({value.__name__}), not a press: give an instance, {example}"
            )
        if isinstance(value, Mapping):
            raise ValueError(
                f"actions[{name!r}] is a mapping without 'press' (a spec is {{'press': 'SnapKVPress', ...}})"
            )
        raise ValueError(
            f"actions[{name!r}] is a {type(value).__name__}, not a kvpress press instance (e.g. "
            "SnapKVPress(compression_ratio=0.5)) nor a spec {'press': ..., ...}"
        )


def check_prompt_ids(doc: str, prompt_ids: Sequence[int], vocab_size: int, where: str = "") -> None:
    """A document's prompt ids: at least 2, each in ``0 .. vocab_size - 1`` (``where`` adds e.g. ``prompt 3``)."""
    label = f"document {doc!r}" + (f" ({where})" if where else "")
    if len(prompt_ids) < 2:
        raise ValueError(
            f"{label}: its prompt has {len(prompt_ids)} token(s) after rendering; a trajectory needs at least 2 "
            "(an empty prompt?)"
        )
    for position, token in enumerate(prompt_ids):
        if not 0 <= int(token) < vocab_size:
            raise ValueError(
                f"{label}: token id {int(token)} at position {position} is outside the model's vocabulary "
                f"(0..{vocab_size - 1}): ids from another tokenizer?"
            )


def _presses(press: Any, path: str = "") -> list[tuple[str, Any]]:
    """``press`` and the prefill presses it holds (wrapped ``press``/``base_press``, lists), with their paths; a
    ``DecodingPress`` (which compresses while decoding, over the growing cache) is not descended into."""
    from kvpress import BasePress, DecodingPress

    if isinstance(press, DecodingPress):
        return []
    out = [(path, press)]
    if not dataclasses.is_dataclass(press):
        return out
    for f in dataclasses.fields(press):
        value = getattr(press, f.name, None)
        items = value if isinstance(value, (list, tuple)) else [value]
        for i, item in enumerate(items):
            if isinstance(item, BasePress):
                out += _presses(item, f"{path}.{f.name}" + (f"[{i}]" if isinstance(value, (list, tuple)) else ""))
    return out


def check_press_lengths(action: str, press: Any, doc: str, n_tokens: int, compressed: str = "prompt") -> None:
    """Each press in ``press`` (an action's built press) whose ``window_size`` or ``n_sink`` is at least the
    ``n_tokens`` it compresses (``compressed`` says which tokens: the prompt, its context) is an error naming the
    action, the press, the document and both lengths."""
    for path, part in _presses(press):
        for field in LENGTH_FIELDS:
            value = getattr(part, field, None)
            if isinstance(value, int) and not isinstance(value, bool) and value >= n_tokens:
                raise ValueError(
                    f"action {action!r} ({type(part).__name__}{' at ' + path.lstrip('.') if path else ''}): "
                    f"{field} = {value} needs more tokens than it covers, but document {doc!r} gives it "
                    f"{n_tokens} ({compressed}); use a smaller {field} or longer documents"
                )


def vocabulary_size(model: Any) -> int:
    """The number of token ids ``model`` embeds."""
    return int(model.get_input_embeddings().weight.shape[0])


def check_press_windows(
    actions: Mapping[str, Any],
    doc_ids: Sequence[str],
    prompts: Sequence[Sequence[int]],
    contexts: Sequence[Any],
    *,
    evict_first_step: bool,
) -> None:
    """:func:`check_press_lengths` of every action (built from its spec, or the instance given) on every document:
    the tokens compressed are its context (``compress: context``), all but the last prompt token
    (``evict_first_step``) or the whole prompt."""
    from kvpress import BasePress

    from kvdiv.kernel.presses.registry import build_press

    built: dict[tuple[str, int], Any] = {}  # a spec's press at a length (kept_entries: its ratio depends on it)
    for doc, prompt_ids, context in zip(doc_ids, prompts, contexts):
        if context is not None:
            n, what = int(context), "its context, compress: context"
        elif evict_first_step:
            n, what = len(prompt_ids) - 1, "its prompt but the last token, evict_first_step"
        else:
            n, what = len(prompt_ids), "its prompt"
        for name, spec in actions.items():
            if isinstance(spec, BasePress):
                press = spec
            else:
                if (name, n) not in built:
                    built[name, n] = build_press(spec, name, n)
                press = built[name, n]
            check_press_lengths(name, press, doc, n, what)
