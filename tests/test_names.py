"""Names that become path components (kvdiv.names) and replacement that stays inside its own path (kvdiv.io).

Hostile names must be refused by the schema, the workflow, the CLI and the library alike, before anything is
written or removed; atomic replacement never removes anything but the output it writes.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvdiv.cli import main as kvdiv_main
from kvdiv.io import atomic_path
from kvdiv.models.sources import resolve_model
from kvdiv.names import NAME_PATTERN, check_config_names, check_name

REPO = Path(__file__).resolve().parents[1]
RANDOM = {"source": "random", "architecture": "llama", "tokenizer": "bytes"}

BAD_NAMES = [".", "..", ".hidden", "a/b", "../x", "", "-rf", "a b", "x" * 65, "mödel", "a\\b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_refused(name):
    with pytest.raises(ValueError, match="name"):
        check_name(name, "model")


@pytest.mark.parametrize("name", ["smollm2", "Llama-3.1-8B", "a", "x_1.q4", "0"])
def test_good_names_pass(name):
    assert check_name(name, "model") == name


def test_schema_uses_the_kvdiv_name_pattern():
    schema = yaml.safe_load((REPO / "kvdiv/data/schema.yaml").read_text())
    assert schema["$defs"]["name"]["pattern"] == NAME_PATTERN
    for section in ("models", "actions", "studies"):
        assert schema["properties"][section]["propertyNames"] == {"$ref": "#/$defs/name"}


@pytest.mark.parametrize(
    "config, match",
    [
        ({"models": {"..": RANDOM}}, "models: model name '..'"),
        ({"models": {"m": RANDOM}, "studies": {"models": {"strata": []}}}, "study name 'models' is reserved"),
        ({"models": {"m": RANDOM}, "studies": {"Figures": {"strata": []}}}, "study name 'Figures' is reserved"),
        ({"models": {"m": RANDOM, "M": RANDOM}}, "differ only in case"),
        (
            {"models": {"m": RANDOM}, "actions": {"zarr.json": {"press": "SnapKVPress"}}},
            "action name 'zarr.json' is reserved",
        ),
    ],
)
def test_config_names_are_checked(config, match):
    with pytest.raises(ValueError, match=match):
        check_config_names(config)


def sentinel_tree(root: Path) -> list[Path]:
    files = [root / "results/keep.txt", root / "results/models/other/provenance.json", root / "results/study/x.txt"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("earlier result")
    return files


@pytest.mark.parametrize("name", [".", ".."])
def test_library_refuses_dot_names_and_removes_nothing(tmp_path, name):
    files = sentinel_tree(tmp_path)
    with pytest.raises(ValueError, match="model name"):
        resolve_model(name, RANDOM, tmp_path / "results/models" / name, seed=0)
    assert all(f.read_text() == "earlier result" for f in files)


@pytest.mark.parametrize("name", [".", ".."])
def test_cli_refuses_dot_names_and_removes_nothing(tmp_path, name, capsys, monkeypatch):
    files = sentinel_tree(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"models": {"m": RANDOM}}).replace("m:", f"'{name}':", 1))
    monkeypatch.chdir(tmp_path)
    assert kvdiv_main(["models", "resolve", name, "--config", str(config), "--models-dir", "results/models"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvdiv: error: ") and f"model name {name!r}" in err and "Traceback" not in err
    assert all(f.read_text() == "earlier result" for f in files)


@pytest.mark.parametrize("final", [".", "..", "results/..", "results/."])
def test_atomic_path_refuses_dot_targets(tmp_path, final, monkeypatch):
    files = sentinel_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="refusing"):
        with atomic_path(final, directory=True) as tmp:
            (tmp / "new").write_text("x")
    assert all(f.read_text() == "earlier result" for f in files)


def test_atomic_path_does_not_follow_a_link_out_of_its_directory(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    out = tmp_path / "results"
    out.mkdir()
    (out / "store.zarr").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match="symbolic link"):
        with atomic_path(out / "store.zarr", directory=True) as tmp:
            (tmp / "zarr.json").write_text("{}")
    assert (outside / "precious.txt").read_text() == "keep"
    assert not list(out.glob(".*.tmp"))


def test_atomic_path_replaces_only_its_own_directory(tmp_path):
    out = tmp_path / "results"
    (out / "store.zarr").mkdir(parents=True)
    (out / "store.zarr/old").write_text("old")
    (out / "sibling.txt").write_text("sibling")
    with atomic_path(out / "store.zarr", directory=True) as tmp:
        (tmp / "new").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["sibling.txt", "store.zarr"]
    assert [p.name for p in (out / "store.zarr").iterdir()] == ["new"]


def test_outputs_get_the_umask_permissions_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic_path(tmp_path / "table.csv") as tmp:
            tmp.write_text("a\n")
        with atomic_path(tmp_path / "store.zarr", directory=True) as tmp:
            (tmp / "zarr.json").write_text("{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "table.csv").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "store.zarr").stat().st_mode) == 0o755


def test_resolved_local_model_leaves_the_source_files_modes_alone(tmp_path):
    """A local model's files are hard-linked: resolution must not chmod the user's own files."""
    src = tmp_path / "models/src"
    resolve_model("src", RANDOM, src, seed=0)
    weights = next(src.glob("*.safetensors"))
    weights.chmod(0o600)
    resolve_model("linked", {"source": "local", "path": str(src)}, tmp_path / "models/linked")
    assert stat.S_IMODE(weights.stat().st_mode) == 0o600


@pytest.mark.workflow
@pytest.mark.parametrize(
    "section, name", [("models", ".."), ("studies", ".."), ("models", ".hidden"), ("studies", "models")]
)
def test_workflow_refuses_path_names_at_startup(tmp_path, section, name):
    config = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    if section == "models":
        config["models"][name] = config["models"]["tiny"]
    else:
        config["studies"][name] = {**config["studies"]["retention50"], "seed": 51}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "--cores",
            "1",
            "-s",
            str(REPO / "Snakefile"),
            "--configfile",
            "bad.yaml",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"{name!r} does not match" in out or f"study name {name!r} is reserved" in out, out[-3000:]
