"""What a run computed with: the versions of the packages that decide its numbers and whether the environment is the
pinned one (``envs/requirements.lock``: every package with its version and hash). Trajectory stores and the report
record it (:func:`environment_record`), so two runs whose numbers differ can say whether their environments did.
"""

from __future__ import annotations

import hashlib
import re
from importlib import metadata
from pathlib import Path

#: The packages whose versions decide a run's numbers (kernels, dequantisation, sampling, bootstrap).
KEY_PACKAGES = ("torch", "transformers", "kvpress", "gguf", "numpy", "numba", "polars", "scipy", "zarr", "snakemake")
#: The lock shipped with the workflow, relative to its checkout.
LOCK_FILE = Path("envs") / "requirements.lock"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\]+)", re.M)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(lock: str | Path) -> dict[str, str]:
    """Package → version of a lock file (``name==version`` lines; names canonicalised)."""
    return {_canonical(name): version for name, version in _PIN.findall(Path(lock).read_text(encoding="utf-8"))}


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def lock_mismatches(lock: str | Path) -> list[str]:
    """``name: installed X, locked Y`` for every locked package whose installed version differs (or is missing)."""
    out = []
    for name, version in sorted(lock_pins(lock).items()):
        have = installed_version(name)
        if have != version:
            out.append(f"{name}: installed {have or 'none'}, locked {version}")
    return out


def environment_record(checkout: str | Path | None = None) -> dict:
    """The versions of :data:`KEY_PACKAGES`, and against the checkout's lock (``checkout``/envs/requirements.lock; None:
    the checkout this module lies in) its sha256 and whether every locked package is installed at its version (the
    first few mismatches otherwise)."""
    root = Path(checkout) if checkout is not None else Path(__file__).resolve().parents[1]
    record: dict = {"packages": {name: installed_version(name) for name in KEY_PACKAGES}}
    lock = root / LOCK_FILE
    if lock.is_file():
        mismatches = lock_mismatches(lock)
        record["lock"] = {
            "file": str(LOCK_FILE),
            "sha256": hashlib.sha256(lock.read_bytes()).hexdigest(),
            "matches": not mismatches,
            "mismatches": mismatches[:10],
        }
    else:
        record["lock"] = None
    return record


def describe(record: dict) -> str:
    """One line for a log or the report."""
    versions = ", ".join(f"{k} {v}" for k, v in record["packages"].items() if v)
    lock = record.get("lock")
    if lock is None:
        return f"{versions}; no lock file"
    state = (
        "the locked environment"
        if lock["matches"]
        else f"NOT the locked environment ({'; '.join(lock['mismatches'][:3])})"
    )
    return f"{versions}; {state} (envs/requirements.lock sha256 {lock['sha256'][:12]})"
