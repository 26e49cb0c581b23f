"""Token-exact length control: size a task instance so the final prompt lands just below a target.

The prompt (after the chat template) must satisfy ``target − tolerance(target) ≤ n_tokens ≤ target`` with
``tolerance(target) = max(⌈0.01·target⌉, 16)``, counted with the model's tokenizer (``add_special_tokens=False``).
A bracketed secant search over the number of haystack units (bisection after two secant steps that fail to halve the
bracket: logarithmic worst case) finds the largest size that fits; coarse units (a distractor needle is ~20–40
tokens) leave a gap filled with filler words by the same search.
"""

from __future__ import annotations

import math
from typing import Callable


class LengthError(ValueError):
    """A target length that a task or a model cannot meet."""


def tolerance(target: int) -> int:
    """Allowed shortfall below ``target``: ``max(⌈0.01·target⌉, 16)`` tokens."""
    return max(math.ceil(0.01 * target), 16)


def count_tokens(tokenizer, text: str) -> int:
    """Tokens of ``text`` under ``tokenizer`` without added special tokens."""
    return len(tokenizer.encode(text, add_special_tokens=False))


def check_context(target: int, max_context: int | None, model: str, horizon: int) -> None:
    """Raise :class:`LengthError` when ``target`` prompt tokens plus ``horizon`` (H) generated tokens exceed the
    context ``max_context`` of ``model`` (None: no limit known)."""
    if max_context is not None and target + horizon > max_context:
        extra = f" plus {horizon} generated tokens" if horizon else ""
        raise LengthError(
            f"target length {target}{extra} exceeds the context of model {model!r} (max_context {max_context}); "
            f"lower the stratum length or raise the model's max_context"
        )


def largest_fitting(
    f: Callable[[int], int], target: int, lo: int = 0, f_lo: int | None = None, limit: int | None = None
) -> tuple[int, int]:
    """Largest ``n ≥ lo`` (``≤ limit``) with ``f(n) ≤ target`` for a nondecreasing ``f``; returns ``(n, f(n))``.

    ``f(lo) ≤ target`` is required. Secant steps (slope from the two latest evaluations) inside the
    bracket; after two steps in a row that fail to halve the bracket, one bisection step.
    """
    f_lo = f(lo) if f_lo is None else f_lo
    if f_lo > target:
        raise LengthError(f"size {lo} already gives {f_lo} > {target} tokens")
    history = [(lo, f_lo)]

    def slope() -> float | None:
        (a, fa), (b, fb) = history[-2], history[-1]
        return (fb - fa) / (b - a) if b != a and fb != fa else None

    # expand: extrapolate from the latest slope (at most 16x the current size per step) until a size exceeds
    step = 32
    hi = None
    while hi is None:
        s = slope() if len(history) > 1 else None
        if s and s > 0:
            step = min(max(1, math.ceil(1.02 * (target - f_lo) / s) + 1), 16 * (lo + 32))
        n = lo + step
        if limit is not None and n > limit:
            if lo >= limit:
                return lo, f_lo
            n = limit
        v = f(n)
        history.append((n, v))
        if v <= target:
            if v == f_lo:
                step *= 2
            lo, f_lo = n, v
        else:
            hi = n
    # shrink the bracket (lo fits, hi does not)
    stalls = 0
    while hi - lo > 1:
        s = slope()
        if stalls >= 2 or not s or s <= 0:
            n, stalls = (lo + hi) // 2, 0
        else:
            n = min(max(lo + int(round((target - f_lo) / s)), lo + 1), hi - 1)
        v = f(n)
        history.append((n, v))
        width = hi - lo
        if v <= target:
            lo, f_lo = n, v
        else:
            hi = n
        stalls = stalls + 1 if hi - lo > width / 2 else 0
    return lo, f_lo


def fit_length(
    render: Callable[[int, int], str],
    count: Callable[[str], int],
    target: int,
    *,
    pads: bool = True,
    max_units: int | None = None,
    what: str = "document",
) -> tuple[int, int, str, int]:
    """Choose haystack size ``units`` (and filler ``pad``) so ``count(render(units, pad))`` lands in
    ``[target − tolerance(target), target]``.

    Parameters
    ----------
    render : (units, pad) -> final prompt text
    count : prompt text -> tokens
    target : target length in tokens
    pads : whether filler padding may close a gap left by coarse units
    max_units : largest haystack the task can build
    what : name used in error messages

    Returns
    -------
    (units, pad, prompt, n_tokens)
    """

    def f_units(n: int) -> int:
        return count(render(n, 0))

    base = f_units(0)
    if base > target:
        raise LengthError(
            f"target length {target} is too short for {what}: its prompt without any haystack already has {base} tokens"
        )
    units, n_tokens = largest_fitting(f_units, target, 0, base, limit=max_units)
    pad = 0
    tol = tolerance(target)
    if target - n_tokens > tol and pads:
        pad, n_tokens = largest_fitting(lambda k: count(render(units, k)), target, 0, n_tokens)
    if target - n_tokens > tol:
        raise LengthError(
            f"cannot reach target length {target} for {what}: the closest prompt has {n_tokens} tokens "
            f"(tolerance {tol}; haystack units {units}{'' if max_units is None else f' of at most {max_units}'})"
        )
    return units, pad, render(units, pad), n_tokens
