"""The workflow refuses, when it starts, a chat template that drops the message, loops without bound, or that a
resolved model ships with the same defects, naming the model (before any job runs); and a stratum longer than a
context known then."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.workflow


def dry_run(tmp_path: Path, config: dict) -> subprocess.CompletedProcess:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "-s", str(REPO / "Snakefile"), "--configfile=c.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


def loaded_spec(config: dict, model: str) -> dict:
    """Model ``model``'s spec as the workflow holds it (the schema's defaults filled), as resolve_model records it."""
    from snakemake.utils import validate

    from kvdiv.config import files

    loaded = copy.deepcopy(config)
    validate(loaded, str(files.SCHEMA))
    return loaded["models"][model]


def test_bad_chat_templates_are_refused_at_startup(tmp_path):
    config = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    config["models"]["tiny"]["chat_template"] = (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    )
    proc = dry_run(tmp_path, config)
    assert proc.returncode != 0 and "models.tiny.chat_template: its chat template ran past the rendering budget" in (
        proc.stdout + proc.stderr
    )
    # a resolved model whose own template drops the message
    del config["models"]["tiny"]["chat_template"]
    models = Path(config.get("results", "results")) / "models"  # under the config's output root
    resolved = tmp_path / models / "tiny"
    resolved.mkdir(parents=True)
    (resolved / "tokenizer_config.json").write_text(json.dumps({"chat_template": "A"}))
    # resolved from another spec: resolve_model writes the model again before a job reads it, so it is not probed
    (resolved / "provenance.json").write_text(json.dumps({"spec": {"source": "hf", "id": "org/other"}}))
    proc = dry_run(tmp_path, config)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    (resolved / "provenance.json").write_text(json.dumps({"spec": loaded_spec(config, "tiny")}))
    proc = dry_run(tmp_path, config)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"models.tiny ({models / 'tiny'})" in out, out[-2000:]
    assert "renders two different messages identically" in out


def test_a_stratum_past_a_known_context_is_refused_at_startup(tmp_path):
    """A stratum whose length plus the horizon passes a model's context is an error when the workflow starts, naming
    study, stratum, model and context, wherever the context is known then: a random model's config, a resolved
    model's config.json (kvdiv.config.startup.check_contexts); otherwise the document job says it."""
    config = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    config["models"]["tiny"]["model_config"]["max_position_embeddings"] = 780  # 768 + 16 = 784 tokens
    proc = dry_run(tmp_path, config)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert (
        "studies.retention50: stratum ruler_768 plus horizon 16 = 784 tokens exceeds the context of model 'tiny' (780)"
        in out
    )
    assert "the longest stratum it holds at this horizon is 764 tokens" in out
    config["models"]["tiny"]["model_config"]["max_position_embeddings"] = 784  # exactly the stratum and H: plans
    assert dry_run(tmp_path, config).returncode == 0
