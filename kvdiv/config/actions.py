"""Every action itself at every stratum: for every (study, action, stratum), the entries the action's press keeps at the
stratum's length against the entries its scoring pins whatever the scores, and the rules of its press kind
(:mod:`kvdiv.kernel.presses.degenerate`); and no two actions of a study the same press under two names there. Refused
when the workflow starts (:func:`check_degenerate`, from :func:`kvdiv.config.startup.check_actions`) unless the action
says ``allow_degenerate: true``; :func:`degenerate_actions` lists what a config runs anyway (the report flags those
rows). Each trajectory job checks again at its documents' own lengths (:func:`kvdiv.trajectories.job.run_documents`).
docs/usage.md#actions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kvdiv.config.files import ConfigError
from kvdiv.config.plan import _studies, study_strata

#: The most findings one start-up error lists.
MAX_LISTED = 20


def stratum_entries(config: Mapping[str, Any], study: str) -> list[tuple[str, int]]:
    """(stratum name, entries the presses compress there) of a study: the stratum's length (its prompts' target), one
    less with ``evict_first_step``. With ``compress: context`` the context is shorter still, by its question."""
    spec = config["studies"][study]
    first = 1 if spec.get("evict_first_step") else 0
    return [(name, s["length"] - first) for name, s in zip(study_strata(config, study), spec["strata"])]


def findings(config: Mapping[str, Any]) -> dict[str, dict[str, list[str]]]:
    """{study: {action: [why it is not itself, one line per stratum]}} of every action some study runs. Imports the
    config's ``press_modules`` (actions may name their presses)."""
    from kvdiv.kernel.presses.degenerate import degenerate_reason
    from kvdiv.kernel.presses.registry import build_press, describe_press, load_press_modules

    load_press_modules(config.get("press_modules") or [])
    actions = config.get("actions") or {}
    found: dict[str, dict[str, list[str]]] = {}
    for study, spec in _studies(config).items():
        for stratum, n in stratum_entries(config, study):
            where = f"stratum {stratum} ({n} entries compressed)"
            seen: dict[str, str] = {}
            for name in spec["actions"]:
                try:
                    reason = degenerate_reason(actions[name], n, spec["horizon"])
                    record = json.dumps(describe_press(build_press(actions[name], name, n)), sort_keys=True)
                except (KeyError, ValueError):
                    continue  # the checks of the actions themselves name what is wrong
                if reason:
                    found.setdefault(study, {}).setdefault(name, []).append(f"{where}: {reason}")
                if record in seen:
                    found.setdefault(study, {}).setdefault(name, []).append(
                        f"{where}: the same press as action {seen[record]!r} (a contrast of the two measures nothing)"
                    )
                seen.setdefault(record, name)
    return found


def degenerate_actions(config: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """{study: {action: reason}} of the actions that are not themselves at some stratum of a study (their reasons
    joined by "; "). A config that starts runs only those marked ``allow_degenerate: true``: the report flags their
    rows with this."""
    return {
        study: {name: "; ".join(reasons) for name, reasons in per_action.items()}
        for study, per_action in findings(config).items()
    }


def check_degenerate(config: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` listing every (study, action, stratum) where an action is not itself, unless the
    action says ``allow_degenerate: true``."""
    from kvdiv.kernel.presses.degenerate import allows_degenerate

    actions = config.get("actions") or {}
    lines = [
        f"studies.{study}: action {name!r} at {reason}"
        for study, per_action in findings(config).items()
        for name, reasons in per_action.items()
        if not allows_degenerate(actions.get(name))
        for reason in reasons
    ]
    if lines:
        shown = lines[:MAX_LISTED] + ([f"... and {len(lines) - MAX_LISTED} more"] if len(lines) > MAX_LISTED else [])
        raise ConfigError(
            "actions that cannot be themselves (docs/usage.md#actions):\n  "
            + "\n  ".join(shown)
            + "\nchange the action or the strata, or give the action allow_degenerate: true to run it anyway (each "
            "store records it and the report flags its rows)"
        )
