"""The start-up checks that need more than the config: every action builds its press (in a process of its own within
a time budget, once per actions section and code version: a marker file remembers a passed check), every chat
template known at start-up renders within its budget, and every stratum fits its reference model's known context.
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
    """Every chat template known at start-up (a spec's string, the own template of a model resolved from the same
    spec) renders two different probe messages differently and each the same way twice, within its budget
    (:mod:`kvdiv.models.chat_templates`). A directory resolved from another spec is not read: resolve_model writes
    the model again before any job reads its template."""
    from kvdiv.models.chat_templates import check_model_templates
    from kvdiv.models.model_files import resolved_from

    def resolved(name: str) -> str | None:
        directory = model_dir(name)
        return directory if resolved_from(directory, config["models"][name]) is not None else None

    check_model_templates(config["models"], resolved)


def _json_object(path: Path) -> dict | None:
    """``path``'s JSON object (:func:`kvdiv.models.model_files.read_json`), or None: absent, larger than its
    :data:`~kvdiv.models.model_files.JSON_MAX_BYTES`, unreadable, not JSON, not an object."""
    from kvdiv.models.model_files import read_json

    try:
        value = read_json(path)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def known_context(spec: Mapping[str, Any], directory: Path) -> int | None:
    """A model's context as its jobs will find it (:func:`kvdiv.models.model_files.max_context`), where that is known
    before any job runs: the spec's ``max_context``; a random model's ``max_position_embeddings``; a model resolved
    from this very spec (``directory/provenance.json``) from its config.json (its ``text_config`` where it has one).
    None when not known yet (the job falls back to the tokenizer's limit, or reads files not there yet)."""
    from kvdiv.models.model_files import resolved_from  # light modules only: no torch in the workflow's start
    from kvdiv.models.tokenization import BYTES_MAX_LENGTH

    if spec.get("max_context"):
        return int(spec["max_context"])
    if spec.get("source") == "random":  # kvdiv.models.sources.TINY_CONFIG's value unless model_config sets one
        given = dict(spec.get("model_config") or {})
        return _positive_int(given.get("max_position_embeddings", BYTES_MAX_LENGTH))
    if resolved_from(directory, spec) is None:
        return None  # not resolved, or resolved from another spec: resolve_model runs again first
    values = _json_object(directory / "config.json")
    if values is None:
        return None
    text = values.get("text_config")
    return _positive_int((text if isinstance(text, dict) else values).get("max_position_embeddings"))


def check_contexts(
    config: Mapping[str, Any], model_dir: Callable[[str], str], reference_model: Callable[[str], str]
) -> None:
    """Every stratum's length plus its study's horizon fits the context of the study's reference tokenizer model
    (``reference_model(study)``, whose tokens size the documents) where :func:`known_context` knows it: the document
    job's check (:func:`kvdiv.documents.length.check_context`), made before any job runs. Other models are held to
    each document's own token count by the trajectory job."""
    for study, spec in (config.get("studies") or {}).items():
        horizon = int(spec.get("horizon") or 0)
        model = reference_model(study)
        model_spec = config["models"][model]
        context = known_context(model_spec, Path(model_dir(model)))
        if context is None:
            continue
        for stratum in spec.get("strata") or []:
            length = int(stratum["length"])
            if length + horizon > context:
                raise ValueError(
                    f"studies.{study}: stratum {stratum['family']}_{length} plus horizon {horizon} = "
                    f"{length + horizon} tokens exceeds the context of model {model!r} ({context}); the longest "
                    f"stratum it holds at this horizon is {context - horizon} tokens (lower the stratum's length or "
                    "the horizon"
                    + (
                        ", or raise its model_config.max_position_embeddings)"
                        if model_spec.get("source") == "random"
                        else ")"
                    )
                )
