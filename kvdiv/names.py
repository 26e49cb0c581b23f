"""Names that become path components: models, actions, studies, strata (and document ids built from them).

A name is used verbatim as a file or directory name, so it must not be able to escape its directory or alias another
output. One rule, written here and used by ``kvdiv/data/schema.yaml``'s ``$defs.name.pattern`` (a test keeps the two
equal), the workflow's wildcard constraints (``rules/common.smk``), the CLI and the library: 1 to
:data:`MAX_LENGTH` characters from ``A-Z a-z 0-9 _ . -`` starting with a letter or digit, no name its kind reserves
(:data:`RESERVED`, case-insensitively; an action is no store array name), no name ending in one substring repeated
:data:`PERIODIC_REPEATS` times (a periodic wildcard), no two names of one kind differing only in case.
The output root (``results``) is a relative path of such names (:func:`check_results_root`).
Details: docs/internals.md#names.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from kvdiv.layout import RESULTS_ENTRIES, stratum_name

#: The allowed names (the same pattern is ``$defs.name.pattern`` in kvdiv/data/schema.yaml).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: The pattern without anchors, for Snakemake ``wildcard_constraints``.
NAME_REGEX = NAME_PATTERN[1:-1]
#: Longest config name: document ids ``{study}-{stratum}-{i:04d}.zarr`` must stay below the usual 255-byte
#: file-name limit.
MAX_LENGTH = 64
#: Longest name built from config names (a document id).
MAX_COMPOSED_LENGTH = 200
#: Names a kind may not take (lower case): top-level entries of ``results/`` that are not studies (a study of
#: that name would write into them), and the metadata file of a Zarr store (actions are its groups).
#: Array names of the stores (kvdiv.trajectories.store: the root array ``prompt_ids`` of a per-document store, the
#: arrays of a cube and of an action group), which an action (a group beside them) may not take; a test keeps
#: the list equal to the store's.
STORE_ARRAYS = frozenset(
    {
        "prompt_ids",
        "x",
        "y",
        "tv",
        "fixed_tv",
        "match",
        "eos_x",
        "eos_y",
        "overlap_tv",
        "branch_start",
        "document",
        "action",
        "replicate",
        "step",
        "family",
        "task",
        "target_length",
        "stratum",
        "prompt_tokens",
    }
)
RESERVED = {
    "study": frozenset(entry.lower() for entry in RESULTS_ENTRIES),
    "action": frozenset({"zarr.json"} | STORE_ARRAYS),
}
#: Snakemake takes a wildcard value ending in one substring repeated this many times for an infinite recursion
#: (PeriodicWildcardError), so no name may end so.
PERIODIC_REPEATS = 20
#: The kinds of names the config holds (the config section that defines each).
KINDS = {"model": "models", "action": "actions", "study": "studies"}

_NAME = re.compile(NAME_PATTERN)
_PERIODIC = re.compile(rf"(.+?)\1{{{PERIODIC_REPEATS - 1},}}$")
#: Top-level entries of a checkout an output root may not start with (it would write into the project's own files).
CHECKOUT_ENTRIES = frozenset(
    {
        "kvdiv",
        "rules",
        "config",
        "workflow_scripts",
        "tests",
        "docs",
        "envs",
        "profiles",
        "benchmarks",
        "report",
        "snakefile",
        "readme.md",
        "pyproject.toml",
        "shared",
    }
)


def check_name(name: object, kind: str = "name", max_length: int = MAX_LENGTH) -> str:
    """Return ``name`` if it is a safe path component for a ``kind`` (model, action, study, stratum, ...).

    Raises
    ------
    ValueError
        Naming the kind, the name and the rule it breaks.
    """
    if not isinstance(name, str):
        raise ValueError(f"{kind} name {name!r} is not a string")
    if len(name) > max_length:
        raise ValueError(f"{kind} name {name[:20]!r}... has {len(name)} characters; at most {max_length} are allowed")
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"{kind} name {name!r} is not allowed: names become file and directory names, so they use only "
            "letters, digits, '_', '.' and '-' and start with a letter or digit (no '.', '..', '/', hidden names)"
        )
    periodic = _PERIODIC.search(name)
    if periodic:
        raise ValueError(
            f"{kind} name {name!r} ends with {periodic.group(1)!r} repeated "
            f"{len(periodic.group(0)) // len(periodic.group(1))} times: Snakemake takes a name ending in "
            f"{PERIODIC_REPEATS} or more repeats for an infinite recursion"
        )
    reserved = RESERVED.get(kind, frozenset())
    if name.lower() in reserved:
        raise ValueError(
            f"{kind} name {name!r} is reserved: it would collide with another output or a store array "
            f"({', '.join(sorted(reserved))})"
        )
    return name


def check_names(names: Iterable[object], kind: str, where: str) -> list[str]:
    """Check every name of one kind (``where`` is the config section, for errors); no two may differ only in case."""
    seen: dict[str, str] = {}
    out = []
    for name in names:
        try:
            check_name(name, kind)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise ValueError(
                f"{where}: {kind} names {other!r} and {name!r} differ only in case (they alias on some file systems)"
            )
        out.append(name)
    return out


def check_results_root(root: object) -> str:
    """Return the output root ``root`` (config key ``results``) if it is a relative path of safe names: no
    absolute path, ``..``, ``.``, hidden component (``.snakemake``), empty component, no first component that is
    one of the project's own entries (:data:`CHECKOUT_ENTRIES`), and no later component that is a non-study entry
    of a root (``results/models/x`` would nest inside the default root's models). A trailing ``/`` is dropped.

    Raises
    ------
    ValueError
        Naming the key ``results``, the value and the rule it breaks.
    """
    if not isinstance(root, str) or not root.strip("/"):
        raise ValueError(f"results: {root!r} is not a non-empty relative path (e.g. results/mystudy)")
    if root.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", root) or "\\" in root:
        raise ValueError(f"results: {root!r} must be a relative path with '/' separators, inside the working directory")
    parts = root.rstrip("/").split("/")
    for i, part in enumerate(parts):
        if not _NAME.fullmatch(part):
            raise ValueError(
                f"results: {root!r}: component {part!r} is not allowed (letters, digits, '_', '.', '-', starting "
                "with a "
                "letter or digit: no '..', '.', hidden directories such as .snakemake, or empty components)"
            )
        if i == 0 and part.lower() in CHECKOUT_ENTRIES:
            raise ValueError(f"results: {root!r} would write into the project's own {part!r}; use e.g. results/{root}")
        if i > 0 and part.lower() in RESERVED["study"]:
            raise ValueError(
                f"results: {root!r} nests inside another root's {part!r} entry ({', '.join(RESULTS_ENTRIES)})"
            )
    return "/".join(parts)


def check_config_names(config: Mapping) -> None:
    """Check every name of a (schema-validated) config that becomes a path component: models, actions,
    studies and each study's strata ``{family}_{length}``; and the output root ``results``."""
    if "results" in config:
        check_results_root(config["results"])
    for kind, section in KINDS.items():
        check_names(config.get(section) or {}, kind, section)
    for study, spec in (config.get("studies") or {}).items():
        strata = [stratum_name(s.get("family"), str(s.get("length"))) for s in spec.get("strata") or []]
        check_names(strata, "stratum", f"studies.{study}.strata")
