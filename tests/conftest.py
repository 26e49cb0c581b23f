"""Shared pytest fixtures: tiny random models (in-process, no download) and SmolLM2 (through the workflow).

Fixtures
--------
tiny_llama, tiny_qwen2 : session-scoped :class:`kvdiv.models.loading.LoadedModel` of tiny randomly initialised
    Llama / Qwen2 configs (2 layers, hidden 64, 4 heads, 2 KV heads) with the built-in byte tokenizer,
    resolved into a temporary directory and loaded like any other model.
tiny_model_factory : build further tiny random models: ``tiny_model_factory("mistral", hidden_size=32)``.
smollm2 : session-scoped LoadedModel of SmolLM2-135M-Instruct, resolved by running
    ``snakemake --cores 1 results/models/smollm2/provenance.json`` in the repository root (the rule a
    user runs); tests that use it are marked ``smollm2`` automatically (deselect: ``-m "not smollm2"``).
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvdiv.models.loading import load_model
from kvdiv.models.sources import resolve_model

REPO_ROOT = Path(__file__).resolve().parents[1]

TINY_SPEC = {
    "source": "random",
    "tokenizer": "bytes",
    "dtype": "float32",
    "device": "cpu",
    "threads": 2,
    "chat_template": True,
}


def tiny_spec(architecture: str, **model_config) -> dict:
    """The spec of a tiny random model of ``architecture`` with ``model_config`` overrides."""
    return {**TINY_SPEC, "architecture": architecture, "model_config": dict(model_config)}


def pytest_collection_modifyitems(config, items):
    """Mark every test that uses the ``smollm2`` fixture with ``@pytest.mark.smollm2``."""
    for item in items:
        if "smollm2" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.smollm2)


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory):
    """A function ``(architecture, seed=0, **model_config) -> LoadedModel`` (cached per arguments)."""
    models_dir = tmp_path_factory.mktemp("models")
    cache = {}

    def make(architecture: str, seed: int = 0, **model_config):
        key = (architecture, seed, tuple(sorted(model_config.items())))
        if key not in cache:
            name = f"tiny_{architecture}_{len(cache)}"
            spec = tiny_spec(architecture, **model_config)
            resolve_model(name, spec, models_dir / name, seed=seed)
            cache[key] = load_model(name, spec, models_dir)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def tiny_llama(tiny_model_factory):
    """A tiny random Llama (2 layers, hidden 64, 4 heads, 2 KV heads, byte tokenizer)."""
    return tiny_model_factory("llama")


@pytest.fixture(scope="session")
def tiny_qwen2(tiny_model_factory):
    """A tiny random Qwen2 (2 layers, hidden 64, 4 heads, 2 KV heads, byte tokenizer)."""
    return tiny_model_factory("qwen2")


def default_config() -> dict:
    """config/config.yaml, schema-validated with defaults filled (as the workflow sees it)."""
    from snakemake.utils import validate

    from kvdiv.config.files import fill_result_defaults

    config = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    validate(config, str(REPO_ROOT / "kvdiv" / "data" / "schema.yaml"))
    fill_result_defaults(config)
    return config


def resolve_smollm2_with_snakemake() -> Path:
    """Run the workflow's own rule for SmolLM2 in the repository root; return the provenance path.

    Concurrent pytest runs on one checkout are serialised with a file lock (and snakemake runs with
    ``--nolock`` so a user's unrelated workflow run does not block the tests).
    """
    target = "results/models/smollm2/provenance.json"
    lock_path = REPO_ROOT / "results" / ".smollm2.pytest.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cmd = [sys.executable, "-m", "snakemake", "--cores", "1", "--nolock", target]
        proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            log = REPO_ROOT / "logs" / "resolve_model" / "smollm2.log"
            log_text = log.read_text()[-4000:] if log.is_file() else ""
            raise RuntimeError(
                f"`{' '.join(cmd[2:])}` failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}\n"
                f"{proc.stderr[-4000:]}\n{log_text}"
            )
    return REPO_ROOT / target


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct as LoadedModel, resolved through the workflow's rule (needs the registry once)."""
    resolve_smollm2_with_snakemake()
    spec = default_config()["models"]["smollm2"]
    return load_model("smollm2", spec, REPO_ROOT / "results" / "models")
