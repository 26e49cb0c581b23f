"""One section of a config file read on its own, as a command reads it (``kvdiv finite suite --config``): strictly,
checked against its part of the schema, so a misspelt section or key is an error naming the file, never the built-in
defaults taken silently."""

from __future__ import annotations

from pathlib import Path

from kvdiv.config.checks import MAX_FINITE_PATHS
from kvdiv.config.files import ConfigError, load_yaml_strict


def finite_state_section(path: str | Path) -> dict:
    """The ``finite_state`` section of a config file (``kvdiv finite suite --config``), read strictly and checked
    against the schema: a file without the section, a misspelt key or a value of the wrong type is a
    :class:`ConfigError` naming the file (a typo never gives the built-in suite silently)."""
    import jsonschema

    from kvdiv.settings import schema

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist")
    data = load_yaml_strict(path)
    if not isinstance(data, dict) or "finite_state" not in data:
        keys = ", ".join(map(str, data)) if isinstance(data, dict) else type(data).__name__
        raise ConfigError(f"{path}: no finite_state section (it has: {keys or 'nothing'})")
    section = data["finite_state"] or {}
    try:
        jsonschema.validate(section, schema()["properties"]["finite_state"])
    except jsonschema.ValidationError as err:
        where = ".".join(["finite_state", *map(str, err.absolute_path)])
        raise ConfigError(f"{path}: {where}: {err.message}") from None
    for i, shape in enumerate(section.get("shapes") or []):
        if shape["vocab"] ** (2 * shape["horizon"]) > MAX_FINITE_PATHS:
            raise ConfigError(
                f"{path}: finite_state.shapes[{i}] = {shape}: exact enumeration visits vocab^(2 horizon) = "
                f"{shape['vocab'] ** (2 * shape['horizon']):.3g} path pairs, more than {MAX_FINITE_PATHS:.0e}"
            )
    return section
