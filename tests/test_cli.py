"""The ``kvdiv`` command line reports every failure in one line (``--traceback`` for the details)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def kvdiv(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """``kvdiv ARGV`` of this checkout, run in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "kvdiv.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.mark.parametrize(
    "config, argv, message",
    [
        ({"seed": 1}, ["models", "resolve", "m"], "'models' is a required property"),
        ({"models": {"m": {"source": "random"}}, "studies": {"s": "x"}}, ["models", "resolve", "m"], "ValidationError"),
        ({"models": {"m": {"source": "random", "architecture": "llama"}}}, ["models", "resolve", "other"], "model 'other' is not in"),
        ({"finite_state": {"shapes": "not a list"}}, ["finite", "suite", "out", "--config", "c.yaml"], "kvdiv: error: "),
        (None, ["inspect", "nowhere.zarr"], "nowhere.zarr is not a zarr v3 store"),
        (None, ["finite", "exact", "missing.json"], "missing.json"),
    ],
)
def test_user_errors_are_one_line(tmp_path, config, argv, message):
    if config is not None:
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    argv = [*argv, "--config", "c.yaml"] if argv[0] == "models" else argv
    proc = kvdiv(*argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("kvdiv: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()


def test_traceback_on_request(tmp_path):
    proc = kvdiv("--traceback", "finite", "exact", "missing.json", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr
