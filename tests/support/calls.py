"""A module attribute's calls recorded: the tests that show a path was taken (a prefill through kvdiv's functions)."""

from __future__ import annotations

from typing import Any


def record_calls(monkeypatch, owner: Any, name: str) -> list[tuple]:
    """Replace ``owner.name`` (for the test) by a function that records each call's positional arguments and returns
    what the original returns; the list of recorded argument tuples."""
    original = getattr(owner, name)
    calls: list[tuple] = []

    def recorded(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)
    return calls
