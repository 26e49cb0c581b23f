"""What kvdiv never does: run a shell, run a model repository's own code (``trust_remote_code``), or unpickle.

A static scan of the library, the scripts and the rules, and one behavioural check: a local model directory
that ships Python code for its architecture is loaded with transformers' own code, never with the shipped one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvdiv.models import loading, sources

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted(
    [
        *(REPO / "kvdiv").rglob("*.py"),
        *(REPO / "workflow_scripts").glob("*.py"),
        *(REPO / "rules").glob("*.smk"),
        REPO / "Snakefile",
    ]
)
FORBIDDEN = {
    "a shell": re.compile(r"shell\s*=\s*True|os\.system\(|os\.popen\(|^\s*shell:|\bshell\(", re.M),
    "remote model code": re.compile(r"trust_remote_code(?!=False\b)"),
    "pickle": re.compile(
        r"\bimport (c?pickle|dill|cloudpickle|joblib)\b|\bpickle\.|torch\.load\(|allow_pickle\s*=\s*True"
    ),
}


@pytest.mark.parametrize("what", list(FORBIDDEN))
def test_no_shell_no_remote_code_no_pickle(what):
    assert len(SOURCES) > 40
    hits = [
        f"{p.relative_to(REPO)}:{text[: m.start()].count(chr(10)) + 1}"
        for p in SOURCES
        for text in [p.read_text()]
        for m in FORBIDDEN[what].finditer(text)
    ]
    assert not hits, f"{what} in {hits}"


TRANSFORMERS_LOAD = re.compile(r"\.from_pretrained\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)", re.S)


def test_every_transformers_load_says_trust_remote_code_false():
    """Not only the default: each from_pretrained names trust_remote_code=False (transformers then never asks on
    stdin, whatever a future default), so a scan of the code shows it."""
    loads = [(p.relative_to(REPO), m.group("args")) for p in SOURCES for m in TRANSFORMERS_LOAD.finditer(p.read_text())]
    assert len(loads) >= 5
    missing = [str(path) for path, args in loads if "trust_remote_code=False" not in args]
    assert not missing, f"from_pretrained without trust_remote_code=False in {missing}"


def test_shipped_model_code_never_runs(tmp_path):
    """A local model whose config points (auto_map) at Python code in its directory: resolving and loading it
    must not import that code."""
    marker = tmp_path / "REMOTE_CODE_RAN"
    src = tmp_path / "shipped"
    sources.resolve_model("base", {"source": "random", "architecture": "llama", "tokenizer": "bytes"}, src, seed=0)
    (src / "provenance.json").unlink()
    (src / "modeling_evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    config = json.loads((src / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "modeling_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (src / "config.json").write_text(json.dumps(config))
    spec = {"source": "local", "path": str(src)}
    try:
        sources.resolve_model("shipped", spec, tmp_path / "models" / "shipped")
        loading.load_model("shipped", spec, tmp_path / "models")
    except ValueError as err:  # refused up front (kvdiv.models.model_files); what matters is that nothing ran
        assert "auto_map" in str(err) or "ships code" in str(err)
    assert not marker.exists(), "the model directory's own Python code ran"
