"""The config files: read strictly (a key given twice is an error), validated against the schema (package data
``kvdiv/data/schema.yaml``, its defaults filled in place), names checked, then every cross-key check
(:func:`kvdiv.config.checks.check_config`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from kvdiv.settings import SCHEMA


class ConfigError(ValueError):
    """A config the workflow refuses at start-up (the message names the key, file or value)."""


# --- YAML files -----------------------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings refuse a key given twice (PyYAML keeps the last silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.setdefault(key, line)
        except TypeError:  # an unhashable key: SafeLoader's own error says so
            break
        if first != line:
            raise ConfigError(
                f"{loader.name}:{line}: duplicate key {key!r} (first given at line {first}); YAML would keep only "
                "the last one silently"
            )
    loader.flatten_mapping(node)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml_strict(path: str | Path) -> Any:
    """The YAML document at ``path``; a key given twice in one mapping is a :class:`ConfigError` naming the file,
    the line and the key."""
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        loader = _StrictLoader(fh)
        loader.name = str(path)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()


def check_config_files(paths: Iterable[str | Path]) -> None:
    """Every config file Snakemake read (the embedded default and each ``--configfile``), strictly re-read."""
    for path in paths:
        if Path(path).is_file():
            load_yaml_strict(path)


def merge(base: dict, update: Mapping) -> dict:
    """``update`` merged into ``base`` recursively, as Snakemake merges several ``--configfile`` (mappings merged
    key by key, anything else replaced)."""
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def validate(config: dict, where: str = "config") -> None:
    """``config`` validated against :data:`SCHEMA`, its defaults filled in place (Snakemake's ``validate``, then
    :func:`fill_result_defaults`); a failure is one :class:`ConfigError` line: jsonschema's reason and the key it
    applies to."""
    from snakemake.utils import validate as snakemake_validate

    try:
        snakemake_validate(config, str(SCHEMA))
    except Exception as err:  # snakemake's WorkflowError wraps jsonschema's multi-line message
        raise ConfigError(f"{where}: {_validation_summary(str(err))}") from None
    fill_result_defaults(config)


def fill_result_defaults(config: dict) -> None:
    """``analysis.studies`` when the config does not give it, from the registry of results
    (:func:`kvdiv.results.registry.default_studies`: each result's default study), keeping the results whose default
    study this config has (a config of its own studies builds its cubes and names the results it wants here)."""
    from kvdiv.results.registry import default_studies

    if "studies" in config.setdefault("analysis", {}):  # given (the schema has no default for it)
        return
    studies = config.get("studies") or {}
    chosen = {name: study for name, study in default_studies().items() if study in studies}
    config.setdefault("analysis", {})["studies"] = chosen


def _validation_summary(text: str) -> str:
    lines = [line.strip() for line in text.splitlines()]
    reason = next((line for line in lines if line.startswith("ValidationError:")), lines[0] if lines else text)
    where = next((line.rstrip(":") for line in lines if line.startswith("On instance")), "")
    return f"{reason} ({where})" if where else reason
