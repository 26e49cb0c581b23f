"""The scores of the user's own presses (config ``press_modules``), checked on every real call: NaN scores, scores all
equal within a head (torch's tie-break would decide what is kept) or of another shape than the layer's entries (shorter
than the prompt: its last entries could never be kept) are errors naming the press, its file and the layer.
:class:`~kvdiv.kernel.session.KernelSession` installs the check on the presses it builds (docs/own-presses.md).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from kvpress import BasePress

from kvdiv.kernel.presses import registry

#: Press fields that hold the presses a press runs (kvpress's wrappers, decoding and composed presses).
INNER_FIELDS = ("press", "base_press", "prefilling_press", "decoding_press", "presses")


def own_press_file(press: Any) -> Path | None:
    """The press file defining ``press``'s class, None for kvpress's and kvdiv's presses."""
    known = registry.USER_PRESSES.get(type(press).__name__)
    return known[1] if known is not None and known[0] is type(press) else None


def watch_own_scores(presses: Mapping[str, BasePress]) -> None:
    """Make every own press with a ``score`` method (at any depth of each action's press) check what it returns."""
    for press in presses.values():
        for part in _parts(press):
            path = own_press_file(part)
            if path is not None and callable(getattr(part, "score", None)) and "score" not in vars(part):
                object.__setattr__(part, "score", _checked(part.score, type(part).__name__, path))


def _parts(press: Any) -> list[Any]:
    """``press`` and every press it runs."""
    found = [press]
    for name in INNER_FIELDS:
        inner = getattr(press, name, None)
        for item in inner if isinstance(inner, (list, tuple)) else [inner]:
            if isinstance(item, BasePress):
                found += _parts(item)
    return found


def _checked(score: Callable, name: str, path: Path) -> Callable:
    @functools.wraps(score)
    def checked(module, hidden_states, keys, values, attentions, kwargs):
        scores = score(module, hidden_states, keys, values, attentions, kwargs)
        problem = score_problem(scores, tuple(keys.shape[:3]))
        if problem:
            raise ValueError(
                f"own press {name} ({path}), layer {getattr(module, 'layer_idx', '?')}: score() returned {problem}"
            )
        return scores

    return checked


def score_problem(scores: Any, shape: tuple[int, int, int]) -> str | None:
    """What is wrong with ``scores`` for a layer of ``shape`` = (batch, kv_heads, entries), or None."""
    if not isinstance(scores, torch.Tensor):
        return f"a {type(scores).__name__}, not a tensor [batch, kv_heads, entries] = {list(shape)}"
    if tuple(scores.shape) != shape:
        short = (
            " (shorter than the entries: the last ones could never be kept)" if scores.shape[-1:] < shape[-1:] else ""
        )
        return f"scores of shape {list(scores.shape)}, not [batch, kv_heads, entries] = {list(shape)}{short}"
    if torch.isnan(scores).any():
        return f"NaN scores ({int(torch.isnan(scores).sum())} of {scores.numel()})"
    rows = scores.reshape(-1, shape[-1])
    equal = (rows == rows[:, :1]).all(dim=-1)
    if shape[-1] > 1 and bool(equal.any()):
        head = int(equal.nonzero()[0, 0]) % shape[1]
        return (
            f"scores all equal ({rows[int(equal.nonzero()[0, 0]), 0].item():g}) in KV head {head}: torch's tie-break "
            "would decide what is kept"
        )
    return None
