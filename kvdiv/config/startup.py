"""The start-up checks that need more than the config: every action builds its press (kvpress imported, once per
actions section and code version: a marker file remembers a passed check), and every chat template known at start-up
renders within its budget. rules/common.smk runs them after :func:`kvdiv.config.checks.check_config`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kvdiv.config.files import ConfigError


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
    per actions and studies sections, press files, kvdiv code and kvpress version (a marker under ``marker_dir``
    spares the kvpress import on later starts)."""
    from importlib.metadata import version

    from kvdiv.codehash import code_hash, fingerprint
    from kvdiv.config.lookups import canonical

    if not main_process:
        return
    actions = canonical(dict(config.get("actions") or {}))
    judged = ("actions", "strata", "horizon", "evict_first_step")  # what kvdiv.config.actions judges an action by
    studies = canonical(
        {name: {k: spec.get(k) for k in judged} for name, spec in (config.get("studies") or {}).items()}
    )
    sources = {path: hashlib.sha256(Path(path).read_bytes()).hexdigest() for path in press_modules}
    key = fingerprint(actions, studies, code_hash("kvdiv.config.actions"), version("kvpress"), sources)
    marker = Path(marker_dir) / f"actions-valid-{key}"
    if marker.is_file():
        return
    from kvdiv.kernel.presses.registry import check_evicts, load_press_modules, validate_action

    load_press_modules(press_modules)  # imports the user's files: errors name the file (and the class of a clash)
    for name, spec in actions.items():
        try:
            validate_action(spec, name)  # unknown or unrunnable presses (registry.UNRUNNABLE), bad arguments
            check_evicts(spec, name)  # a press that evicts nothing measures Q = P
        except ValueError as err:
            raise ConfigError(f"actions.{name}: {err}") from None
    from kvdiv.config.actions import check_degenerate

    check_degenerate(config)  # every (study, action, stratum): the action is itself (kvdiv.kernel.presses.degenerate)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def check_chat_templates(config: Mapping[str, Any], model_dir: Callable[[str], str]) -> None:
    """Every chat template known at start-up (a spec's string, a resolved model's own) renders two different probe
    messages differently and each the same way twice, within its budget (:mod:`kvdiv.models.chat_templates`)."""
    from kvdiv.models.chat_templates import check_model_templates

    check_model_templates(config["models"], model_dir)
