"""Write envs/requirements.lock: every package kvdiv's dependencies and test tools install, each pinned to one version
with the sha256 of the file pip installs (hash-checking mode), from a dry-run resolution of pyproject.toml.

    python envs/lock.py            # resolve and write envs/requirements.lock
    python envs/lock.py --check    # exit 1 when the lock and a fresh resolution differ

The README's commands and .ci/run install ``pip install -r envs/requirements.lock`` and then kvdiv itself without its
dependencies (``pip install --no-deps -e .``), so every machine runs the same files. The lock is for the platform it
was resolved on (CPython 3.11, Linux x86_64; torch 2.13.0's CPU build); elsewhere ``pip install -e .`` resolves the
ranges of pyproject.toml instead, and kvdiv records what it ran with (kvdiv.environment).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "envs" / "requirements.lock"
HEADER = """\
# kvdiv's pinned environment: every package with its version and the sha256 of the file pip installs.
# Written by `python envs/lock.py` (a dry-run resolution of pyproject.toml with the test extras) on CPython {python}.
# Install: pip install -r envs/requirements.lock && pip install --no-deps -e .
# torch is PyTorch's CPU build (+cpu), which PyPI does not host: where pip does not already find it (a fresh machine),
# install with PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu set (or that index in pip's configuration).
"""


def resolve() -> str:
    """The lock's text from a fresh dry-run resolution (pip's installation report)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--ignore-installed",
                "--quiet",
                "--report",
                str(report),
                "-e",
                f"{ROOT}[test]",
            ],
            check=True,
        )
        data = json.loads(report.read_text())
    lines = []
    for item in sorted(data["install"], key=lambda i: i["metadata"]["name"].lower()):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        if name.lower() == "kvdiv":
            continue
        hashes = (item["download_info"].get("archive_info") or {}).get("hashes") or {}
        if "sha256" not in hashes:
            raise SystemExit(f"lock: {name}=={version} has no sha256 in pip's report ({item['download_info']['url']})")
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{hashes['sha256']}")
    python = ".".join(map(str, sys.version_info[:3]))
    return HEADER.format(python=python) + "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with a fresh resolution instead of writing")
    args = parser.parse_args()
    text = resolve()
    if args.check:
        same = LOCK.is_file() and LOCK.read_text() == text
        print("lock: up to date" if same else f"lock: {LOCK} differs from a fresh resolution")
        return 0 if same else 1
    LOCK.write_text(text)
    print(f"lock: wrote {LOCK} ({text.count('--hash')} packages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
