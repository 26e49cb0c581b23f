"""Who owns an output root: each config's ``results`` root records its owner, and no root lies in another's outputs.

When the workflow starts (rules/common.smk, main process, after every other check) :func:`claim_results_root` refuses
a root inside a zarr store or a resolved model directory, a root owned by another config (its marker
``{root}/kvdiv-root.json``), a root inside another root's outputs and a root whose outputs would hold another root
(the roots a working directory has seen are listed under :data:`REGISTRY`); then, unless a dry run, it writes the
marker. The owner
(:func:`owner_of`) is ``results_owner`` when given, else the config file that sets ``results``, by its path: editing a
config keeps its root, a copy under another name is another config. docs/usage.md#output-roots.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kvdiv.config.files import ConfigError, load_yaml_strict
from kvdiv.layout import RESULTS_ENTRIES, ROOT_MARKER, Layout

#: Where a working directory lists the roots planned in it (one small JSON file per root).
REGISTRY = ".snakemake/kvdiv/roots"
#: Entries marking a directory as a store or a model: a root never lies in one.
STORE_FILES = {"zarr.json": "zarr store", ".zgroup": "zarr store", "provenance.json": "resolved model directory"}


def _label(path: Path, workdir: Path, basedir: Path | None) -> str:
    for base, prefix in ((workdir, ""), (basedir, "<workflow>/")):
        if base is None:
            continue
        try:
            return prefix + path.relative_to(base).as_posix()
        except ValueError:
            continue
    return str(path)


def owner_of(
    config: Mapping[str, Any], configfiles: Iterable[str | Path], workdir: str | Path = ".", basedir: str | Path = "."
) -> str:
    """The owner of ``config``'s root: ``results_owner 'NAME'``, else ``config file PATH`` (the file setting
    ``results``: the last of ``configfiles`` that does, else the first)."""
    if config.get("results_owner"):
        return f"results_owner {config['results_owner']!r}"
    files = [Path(f) for f in configfiles]
    if not files:
        return "the config given on the command line (no config file)"
    setting = [f for f in files if f.is_file() and "results" in (load_yaml_strict(f) or {})]
    chosen = (setting[-1] if setting else files[0]).resolve()
    return f"config file {_label(chosen, Path(workdir).resolve(), Path(basedir).resolve())}"


def read_marker(path: Path) -> dict[str, Any]:
    """A root's marker: ``{"owner": str, "studies": [...]}``; an unreadable one is an error naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("owner"), str):
            raise ValueError("no 'owner'")
        data["studies"] = [str(s) for s in data.get("studies") or []]
        return data
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(
            f"{path} does not say which config owns its results root ({err}); delete it if this config may take "
            "the root over"
        ) from None


def _outputs(studies: Iterable[str]) -> set[str]:
    """The top-level entries (lower case) a root's config writes: its studies and the fixed entries."""
    return {s.lower() for s in studies} | {e.lower() for e in RESULTS_ENTRIES}


def _registered(workdir: Path) -> list[str]:
    out = []
    for entry in sorted((workdir / REGISTRY).glob("*.json")):
        try:
            out.append(str(json.loads(entry.read_text(encoding="utf-8"))["root"]))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
            continue
    return out


def claim_results_root(
    root: str, owner: str, studies: Iterable[str], workdir: str | Path = ".", *, record: bool = True
) -> None:
    """Check that ``root`` (checked by :func:`kvdiv.names.check_results_root`) may hold the outputs of ``owner``'s
    config, whose studies are ``studies``, then record the ownership unless ``record`` is false (a dry run writes
    nothing; see the module docstring)."""
    from kvdiv.io import atomic_path

    workdir = Path(workdir).resolve()
    studies = list(studies)
    parts = root.split("/")
    for i in range(len(parts), 0, -1):  # the root and each directory above it, inside the working directory
        here = workdir.joinpath(*parts[:i])
        kinds = [kind for name, kind in STORE_FILES.items() if (here / name).is_file()]
        if kinds or here.name.endswith(".zarr"):
            where = "/".join(parts[:i])
            raise ConfigError(
                f"results: {root!r} lies inside the {kinds[0] if kinds else 'zarr store'} {where!r}, which another "
                "run replaces whole (deleting this config's outputs with it); choose a root outside every store"
            )
        marker = here / ROOT_MARKER
        if not marker.is_file():
            continue
        other = read_marker(marker)
        if i == len(parts):
            if other["owner"] != owner:
                raise ConfigError(
                    f"results: {root!r} belongs to {other['owner']} ({marker}); {owner} plans into it too, which would "
                    f"replace that config's models and results. Give this config its own `results:` root, or the same "
                    f"`results_owner:` if the two configs are meant to share it (or delete {marker} to hand it over)"
                )
            continue
        inner = parts[i]
        if inner.lower() in _outputs(other["studies"]):
            raise ConfigError(
                f"results: {root!r} lies inside {'/'.join(parts[: i + 1])!r}, an output of {other['owner']} (the "
                f"results root {'/'.join(parts[:i])!r}), which that config replaces; choose a root outside it"
            )
    outputs = _outputs(studies)
    for other_root in _registered(workdir):
        other_parts = other_root.split("/")
        if other_root == root or other_parts[: len(parts)] != parts or len(other_parts) == len(parts):
            continue
        marker = workdir / other_root / ROOT_MARKER
        if marker.is_file() and other_parts[len(parts)].lower() in outputs:
            owner_other = read_marker(marker)["owner"]
            raise ConfigError(
                f"results: {root!r} would hold {'/'.join(other_parts[: len(parts) + 1])!r} as an output of "
                f"{owner}, but {owner_other} keeps its results root {other_root!r} there; rename that study or "
                "move one of the roots"
            )
    if not record:
        return
    marker = workdir / Layout(root).owner_marker
    mine = {"owner": owner, "studies": sorted(studies)}
    if not marker.is_file() or read_marker(marker) != mine:
        with atomic_path(marker) as tmp:
            tmp.write_text(json.dumps(mine, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    entry = workdir / REGISTRY / f"{hashlib.sha256(root.encode()).hexdigest()[:16]}.json"
    if not entry.is_file():
        with atomic_path(entry) as tmp:
            tmp.write_text(json.dumps({"root": root}) + "\n", encoding="utf-8")
