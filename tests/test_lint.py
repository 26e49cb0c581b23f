"""The code passes the linter and the formatter the project pins (ruff, rules in pyproject.toml's [tool.ruff]), and
the three places that run them (.ci/run, this test, pre-commit) agree on the version and the paths."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PATHS = ["kvdiv", "workflow_scripts", "tests", "benchmarks", "envs"]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_finds_nothing(command):
    from ruff.__main__ import find_ruff_bin  # installed with the test extras (pyproject.toml)

    proc = subprocess.run(
        [find_ruff_bin(), *command, "--no-cache", *PATHS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ci_and_pre_commit_run_the_pinned_ruff_on_the_same_paths():
    pinned = re.search(r'"ruff==([0-9.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    hooks = (REPO / ".pre-commit-config.yaml").read_text()
    assert f"rev: v{pinned}\n" in hooks
    assert hooks.count(f"files: ^({'|'.join(PATHS)})/") == 2
    ci = (REPO / ".ci/run").read_text()
    assert f'lint_paths="{" ".join(PATHS)}"' in ci and "ruff format --check $lint_paths && ruff check $lint_paths" in ci


def test_ci_runs_the_readmes_test_command():
    """.ci/run's default pytest arguments are the README's test command's (two xdist workers), and pyproject
    distributes whole files (module-scoped workflow fixtures built once)."""
    readme = (REPO / "README.md").read_text()
    command = re.search(r"pip install --no-deps -e \. && (pytest[^\n`]*)", readme).group(1).strip()
    ci = (REPO / ".ci/run").read_text()
    assert f"pytest ${{CI_PYTEST_ARGS:-{command.removeprefix('pytest ')}}}" in ci, command
    pyproject = (REPO / "pyproject.toml").read_text()
    assert "--dist loadfile" in pyproject and '"pytest-xdist==' in pyproject
