"""kvdiv.environment and envs/requirements.lock: the lock pins every dependency with a hash, and a run records its
package versions and whether they are the locked ones."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from kvdiv.environment import KEY_PACKAGES, describe, environment_record, installed_version, lock_pins

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "envs" / "requirements.lock"


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


def test_the_lock_pins_every_dependency_with_a_hash():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]}
    pins = lock_pins(LOCK)
    assert wanted <= set(pins), f"not in the lock: {sorted(wanted - set(pins))}"
    entries = re.findall(r"^([A-Za-z0-9][^\s=]*)==(\S+) \\\n    --hash=sha256:([0-9a-f]{64})$", LOCK.read_text(), re.M)
    assert len(entries) == len(pins) > 50  # every pin carries its file's sha256 (pip's hash-checking mode)
    assert pins["torch"].startswith("2.13.0") and "kvdiv" not in pins
    # the exact pins of pyproject.toml are the lock's
    for requirement in project["dependencies"]:
        if "==" in requirement:
            name, version = requirement.split("==")
            assert pins[_name(name)].split("+")[0] == version, name


def test_a_run_records_its_versions_and_the_lock(tmp_path):
    record = environment_record(REPO)
    assert set(record["packages"]) == set(KEY_PACKAGES) and record["packages"]["numpy"] == installed_version("numpy")
    assert record["lock"]["file"] == "envs/requirements.lock" and len(record["lock"]["sha256"]) == 64
    # a checkout whose lock pins another numpy: not the locked environment, and the line says which package
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "requirements.lock").write_text("numpy==0.0.1 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    other = environment_record(tmp_path)
    assert other["lock"]["matches"] is False
    assert other["lock"]["mismatches"] == [f"numpy: installed {installed_version('numpy')}, locked 0.0.1"]
    assert "NOT the locked environment (numpy: installed" in describe(other)
    assert environment_record(tmp_path / "nowhere")["lock"] is None
