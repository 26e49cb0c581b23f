"""The code passes the linter the project pins (ruff, rules in pyproject.toml's [tool.ruff.lint])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    from ruff.__main__ import find_ruff_bin  # installed with the test extras (pyproject.toml)

    paths = ["kvdiv", "workflow_scripts", "tests", "benchmarks"]
    proc = subprocess.run(
        [find_ruff_bin(), "check", "--no-cache", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert sys.version_info >= (3, 10)
