"""The start-up checks that need more than the config: every action builds its press (in a process of its own within
a time budget, once per actions section and code version: a marker file remembers a passed check), and every chat
template known at start-up renders within its budget. rules/common.smk runs them after
:func:`kvdiv.config.checks.check_config`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def check_actions(
    config: Mapping[str, Any],
    press_modules: list[str],
    *,
    main_process: bool = True,
    marker_dir: str | Path = ".snakemake/kvdiv",
) -> None:
    """Every configured action builds its press (it exists, accepts its arguments, their values are in range, it
    evicts something) and is itself at every stratum of its studies (:mod:`kvdiv.config.actions`), not inside a
    trajectory job hours later. Only in the main process (a cluster job re-reading the workflow skips it), and once
    per actions and studies sections, press files (and the user's modules they import), kvdiv code and kvpress
    version (a marker under ``marker_dir`` spares the check on later starts). The check runs in a process of its own
    whose every step that runs the user's code has ``time_budget.press_import`` seconds
    (:mod:`kvdiv.config.action_check`): a press file whose import never returns is an error naming it."""
    from importlib.metadata import version

    from kvdiv.codehash import code_hash, fingerprint
    from kvdiv.config.action_check import check_in_subprocess
    from kvdiv.config.lookups import canonical
    from kvdiv.kernel.presses.press_files import press_files_hash

    if not main_process:
        return
    actions = canonical(dict(config.get("actions") or {}))
    judged = ("actions", "strata", "horizon", "evict_first_step")  # what kvdiv.config.actions judges an action by
    studies = canonical(
        {name: {k: spec.get(k) for k in judged} for name, spec in (config.get("studies") or {}).items()}
    )
    sources = press_files_hash(press_modules, ["."])  # the files and the user's own modules they import
    code = code_hash("kvdiv.config.action_check")  # the check, the registry and kvdiv.config.actions it imports
    key = fingerprint(actions, studies, code, version("kvpress"), sources)
    marker = Path(marker_dir) / f"actions-valid-{key}"
    if marker.is_file():
        return
    check_in_subprocess(config, press_modules, config["time_budget"]["press_import"])
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def check_chat_templates(config: Mapping[str, Any], model_dir: Callable[[str], str]) -> None:
    """Every chat template known at start-up (a spec's string, a resolved model's own) renders two different probe
    messages differently and each the same way twice, within its budget (:mod:`kvdiv.models.chat_templates`)."""
    from kvdiv.models.chat_templates import check_model_templates

    check_model_templates(config["models"], model_dir)
