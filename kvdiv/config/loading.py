"""The config of one or more files, loaded as the workflow loads it: read strictly, merged, validated (defaults
filled), names and every cross-key check passed (what ``kvdiv models resolve --config`` reads)."""

from __future__ import annotations

import copy
from pathlib import Path

from kvdiv.config.checks import check_config
from kvdiv.config.files import ConfigError, load_yaml_strict, merge, validate
from kvdiv.names import check_config_names


def load(*paths: str | Path, basedir: str | Path = ".") -> dict:
    """The config of one or more files (merged as Snakemake merges ``--configfile``s), read strictly, validated
    (defaults filled), its names and every cross-key check passed (:func:`kvdiv.config.checks.check_config`)."""
    if not paths:
        raise ConfigError("no config file given")
    config: dict = {}
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError(f"config file {path} does not exist")
        data = load_yaml_strict(path) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: a config is a YAML mapping, got {type(data).__name__}")
        merge(config, data)
    given = copy.deepcopy(config)
    where = ", ".join(map(str, paths))
    validate(config, where)
    check_config_names(config)
    check_config(config, given, basedir=basedir)
    return config
