"""The ``kvdiv`` command line reports every failure in one line (``--traceback`` for the details)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def kvdiv(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """``kvdiv ARGV`` of this checkout, run in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "kvdiv.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


@pytest.mark.parametrize(
    "config, argv, message",
    [
        ({"seed": 1}, ["models", "resolve", "m"], "'models' is a required property"),
        ({"models": {"m": {"source": "random"}}, "studies": {"s": "x"}}, ["models", "resolve", "m"], "ValidationError"),
        (
            {"models": {"m": {"source": "random", "architecture": "llama"}}},
            ["models", "resolve", "other"],
            "model 'other' is not in",
        ),
        (
            {"finite_state": {"shapes": "not a list"}},
            ["finite", "suite", "out", "--config", "c.yaml"],
            "kvdiv: error: ",
        ),
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


@pytest.mark.parametrize(
    "setup, argv, message",
    [
        (
            lambda d: (d / "out").write_text("x"),
            ["finite", "suite", "out"],
            "kvdiv: error: out already exists (a file or directory is in the way of an output)\n",
        ),
        (
            lambda d: (d / "sys.json").mkdir(),
            ["finite", "exact", "sys.json"],
            "kvdiv: error: sys.json is a directory, not a file\n",
        ),
        (lambda d: None, ["finite", "exact", "missing.json"], "kvdiv: error: missing.json does not exist\n"),
        (
            lambda d: (d / "sys.json").write_text('{"vocab": '),
            ["finite", "exact", "sys.json"],
            "kvdiv: error: sys.json: not valid JSON",
        ),
    ],
)
def test_system_errors_name_the_path_in_words(tmp_path, setup, argv, message):
    """Not `[Errno 17] File exists: 'out'` nor `[Errno 21] Is a directory`: what is wrong with which path."""
    setup(tmp_path)
    proc = kvdiv(*argv, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith(message) and "Errno" not in proc.stderr, proc.stderr


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`kvdiv finite suite DIR | head -0`: no "Broken pipe" error, exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvdiv.cli", "finite", "suite", "out"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == "", err


def test_a_store_whose_metadata_is_not_json_is_named(tmp_path):
    from kvdiv.trajectories.store import CorruptStoreError, read_store_arrays

    store = tmp_path / "s.zarr"
    store.mkdir()
    (store / "zarr.json").write_text('{"zarr_format": 3, "attributes": {"horizon": 8,}}')
    with pytest.raises(CorruptStoreError, match=rf"{store / 'zarr.json'} is not valid JSON"):
        read_store_arrays(store)


def test_a_documents_path_that_is_a_directory_is_reported_as_such(tmp_path):
    from kvdiv.documents.loaders import read_records
    from kvdiv.io import jsonl_records

    with pytest.raises(IsADirectoryError, match=rf"{tmp_path} is a directory"):
        list(read_records(tmp_path, "niah"))
    with pytest.raises(IsADirectoryError, match=rf"{tmp_path} is a directory"):
        list(jsonl_records(tmp_path))


def test_building_the_parser_imports_no_heavy_library():
    """`kvdiv --help` (and every command before it runs) builds the parser with the standard library only: torch,
    transformers, kvpress, matplotlib and even numpy are imported by the commands that use them, when they run."""
    code = (
        "import json, sys\nimport kvdiv.cli\nparser = kvdiv.cli.build_parser()\n"
        "heavy = ('torch', 'transformers', 'kvpress', 'matplotlib', 'numpy', 'zarr', 'yaml')\n"
        "print(json.dumps({'imported': [m for m in heavy if m in sys.modules],\n"
        "                  'commands': sorted(parser._subparsers._group_actions[0].choices)}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"imported": [], "commands": ["finite", "inspect", "models", "show"]}


def test_show_default_models_dir_is_the_libraries():
    """`kvdiv show --models-dir` defaults to kvdiv.show.view's default (named without importing kvdiv.show)."""
    from kvdiv.cli import build_parser
    from kvdiv.show.view import DEFAULT_MODELS_DIR

    assert build_parser().parse_args(["show", "s.zarr"]).models_dir == DEFAULT_MODELS_DIR
