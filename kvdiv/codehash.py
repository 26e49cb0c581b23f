"""Content hashes of kvdiv's own modules, so Snakemake reruns a rule when the code it runs changes.

Snakemake 9 tracks a rule's `script:` file but not the library it imports; each rule passes
``code_hash("finite", "plotting")`` (or similar) as a param, and a change to those modules
reruns the rule and everything downstream of it, and nothing upstream.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def module_files(name: str) -> list[Path]:
    """Source files of kvdiv module or subpackage ``name`` (dotted, without the ``kvdiv.`` prefix)."""
    rel = Path(*name.split("."))
    file = PACKAGE_DIR / rel.with_suffix(".py")
    folder = PACKAGE_DIR / rel
    if file.is_file():
        return [file]
    if folder.is_dir():
        return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in {".py", ".yaml", ".json", ".txt"})
    raise KeyError(f"kvdiv has no module or subpackage named {name!r} (looked for {file} and {folder})")


def fingerprint(*parts: object) -> str:
    """SHA-256 (first 16 hex digits) of JSON-serialisable ``parts`` (mapping keys sorted), e.g. a config section
    with the ``code_hash`` of the modules that check it."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def code_hash(*names: str) -> str:
    """SHA-256 (first 16 hex digits) over the source of the named kvdiv modules, in the order given."""
    digest = hashlib.sha256()
    for name in names:
        for path in module_files(name):
            digest.update(str(path.relative_to(PACKAGE_DIR)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
