"""Rule resolve_model as a user runs it (snakemake in a subprocess, in a temporary copy of the workflow):
a random model whose tokenizer is another model's waits for that model; a finished run has nothing
left to do; a changed spec reruns only its own model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from support.checkout import checkout_ignore

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def snakemake(workdir: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args, "--cores", "1", "--configfile", "models.yaml"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(workdir)),
    )
    assert proc.returncode == 0, f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout + proc.stderr


@pytest.mark.workflow
def test_resolve_rule_orders_tokenizer_dependency_and_reruns_only_changed_models(tmp_path):
    ignore = checkout_ignore(REPO)
    work = Path(shutil.copytree(REPO, tmp_path / "wf", ignore=ignore))
    config = {
        "models": {
            "base": {"source": "random", "architecture": "llama", "tokenizer": "bytes"},
            "child": {
                "source": "random",
                "architecture": "qwen2",
                "tokenizer": "base",
                "model_config": {"num_hidden_layers": 1},
            },
        },
    }
    (work / "models.yaml").write_text(yaml.safe_dump(config))
    targets = ["results/models/child/provenance.json", "results/models/base/provenance.json"]
    snakemake(work, targets[0])  # asks for child only: base must be resolved first
    provenance = {
        name: json.loads((work / f"results/models/{name}/provenance.json").read_text()) for name in ("base", "child")
    }
    assert provenance["child"]["tokenizer"] == "base"
    assert (work / "results/logs/resolve_model/child.log").is_file()
    assert not list((work / "results/models").glob(".*.tmp"))  # no temporary directories left behind

    assert "Nothing to be done" in snakemake(work, *targets)

    config["models"]["child"]["model_config"]["num_hidden_layers"] = 2
    (work / "models.yaml").write_text(yaml.safe_dump(config))
    dry = snakemake(work, *targets, "-n")
    assert "model=child" in dry and "model=base" not in dry
