"""The start-up checks that need more than the config: every action builds its press (in a process of its own within
a time budget, once per actions section and code version: a marker file remembers a passed check), every chat
template known at start-up renders within its budget, and every stratum fits every context known at start-up.
rules/common.smk runs them after :func:`kvdiv.config.checks.check_config`."""

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


#: The most bytes of a resolved model's config.json read at start-up (a model directory is someone else's files).
CONFIG_JSON_MAX_BYTES = 1 << 20


def known_context(spec: Mapping[str, Any], directory: Path) -> int | None:
    """A model's context as the trajectory job will find it (:func:`kvdiv.models.model_files.max_context`), where it
    is known before any job runs: the spec's ``max_context``; a random model's ``max_position_embeddings``; a resolved
    model's (``directory/provenance.json`` present) from its config.json. None when not known yet."""
    import json

    from kvdiv.models.sources import TINY_CONFIG

    if spec.get("max_context"):
        return int(spec["max_context"])
    if spec.get("source") == "random":
        return int({**TINY_CONFIG, **dict(spec.get("model_config") or {})}["max_position_embeddings"])
    path = directory / "config.json"
    if not (directory / "provenance.json").is_file() or not path.is_file():
        return None
    if path.stat().st_size > CONFIG_JSON_MAX_BYTES:
        return None  # the job reads it and says what is wrong with it
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    text = values.get("text_config") if isinstance(values, dict) else None
    text = text if isinstance(text, dict) else values
    value = text.get("max_position_embeddings") if isinstance(text, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_contexts(config: Mapping[str, Any], model_dir: Callable[[str], str]) -> None:
    """Every stratum's length plus its study's horizon fits the context of every model of the study whose context is
    known at start-up (:func:`known_context`): an error naming study, stratum, model and context now, not from a
    document or trajectory job later (which check the documents' own token counts as well)."""
    from kvdiv.config.plan import study_models

    for study, spec in (config.get("studies") or {}).items():
        horizon = int(spec.get("horizon") or 0)
        for model in study_models(config, study):
            context = known_context(config["models"][model], Path(model_dir(model)))
            if context is None:
                continue
            for stratum in spec.get("strata") or []:
                length = int(stratum["length"])
                if length + horizon > context:
                    raise ValueError(
                        f"studies.{study}: stratum {stratum['family']}_{length} plus horizon {horizon} = "
                        f"{length + horizon} tokens exceeds the context of model {model!r} ({context}); the longest "
                        f"stratum it holds at this horizon is {context - horizon} tokens (lower the stratum's length "
                        f"or the horizon, or set models.{model}.max_context)"
                    )
