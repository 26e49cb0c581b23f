"""The config's lists of names checked when the workflow starts (:func:`kvdiv.config.checks.check_config` calls
:func:`check_entries`): each model and action listed once per study, and every figure or table that takes contrasts
given at least one of its study's (the defaults name the paper's actions: a config with other action names would get
figures without a contrast, silently).
"""

from __future__ import annotations

from collections.abc import Mapping

from kvdiv.config.files import ConfigError
from kvdiv.config.plan import _studies

#: The `analysis` keys that name contrasts of actions (a builder setting ``contrasts``/``contrast``).
CONTRAST_KEYS = ("contrasts", "table3_contrast")


def check_entries(config: Mapping, given: Mapping | None = None) -> None:
    """Every check of this module (``given``: the config as written, before the schema's defaults)."""
    check_listed_once(config)
    check_contrasts_apply(config)


def check_listed_once(config: Mapping) -> None:
    """A study lists each model and each action once (a model twice would define one trajectory rule twice, an
    action twice one store group twice)."""
    for study, spec in _studies(config).items():
        for key in ("models", "actions"):
            names = list(spec.get(key) or [])
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise ConfigError(f"studies.{study}.{key} lists {', '.join(map(repr, twice))} more than once")


def check_contrasts_apply(config: Mapping) -> None:
    """Each figure or table built (``analysis.studies``) whose tables take contrasts has at least one contrast
    (``analysis.contrasts``, or ``analysis.table3_contrast`` for Table 3) whose two actions its study runs."""
    from kvdiv.analysis.inputs import contrast_pairs
    from kvdiv.results import registry

    studies, analysis = _studies(config), config["analysis"]
    for item, study in analysis["studies"].items():
        if study not in studies or item not in registry.studied():
            continue  # named by the reference checks
        result = registry.get_result(item)
        keys = {
            key
            for table in result.tables.values()
            for key in table.settings.values()
            if key in CONTRAST_KEYS and result.config == "analysis"
        }
        actions = set(studies[study]["actions"])
        for key in sorted(keys):
            pairs = analysis[key] if key == "contrasts" else contrast_pairs(analysis[key])
            if not any(len(pair) == 2 and set(pair) <= actions for pair in pairs):
                listed = sorted(actions)
                shown = ", ".join(listed[:8]) + (f", ... ({len(listed)} in all)" if len(listed) > 8 else "")
                raise ConfigError(
                    f"analysis.{key} = {[list(p) for p in pairs]}: none is a pair of actions of study {study!r} "
                    f"({shown}), which feeds {item} (analysis.studies.{item}): it would have no contrast to show; set "
                    f"analysis.{key} to pairs of that study's actions"
                )
