"""A model directory is data, never code: auto_map and shipped .py refused, safetensors only (never a pickle), the
weight hash over exactly the files loaded, and no job reads stdin (``yes y | ...`` answers no trust prompt)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kvdiv.models import loading, model_files, sources
from kvdiv.io import sha256_file

REPO = Path(__file__).resolve().parents[2]
RANDOM = {"source": "random", "architecture": "llama", "tokenizer": "bytes"}


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    """A plain resolved random model, provenance removed: a directory a user could point `source: local` at."""
    path = tmp_path_factory.mktemp("base") / "src"
    sources.resolve_model("base", RANDOM, path, seed=0)
    (path / "provenance.json").unlink()
    return path


@pytest.fixture()
def src(base_dir, tmp_path):
    path = tmp_path / "src"
    shutil.copytree(base_dir, path)
    return path


def add_auto_map(directory: Path, file: str, marker: Path) -> None:
    (directory / "modeling_evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n")
    data = json.loads((directory / file).read_text())
    data["auto_map"] = {
        "AutoConfig": "modeling_evil.EvilConfig",
        "AutoModelForCausalLM": "modeling_evil.EvilModel",
        "AutoTokenizer": ["modeling_evil.EvilTokenizer", None],
    }
    (directory / file).write_text(json.dumps(data))


@pytest.mark.parametrize("file", ["config.json", "tokenizer_config.json"])
def test_local_directory_with_auto_map_is_refused_naming_the_file(src, tmp_path, file):
    marker = tmp_path / "RAN"
    add_auto_map(src, file, marker)
    (src / "modeling_evil.py").unlink()  # auto_map alone (the code could come from the hub) is refused too
    with pytest.raises(model_files.ModelCodeError, match=rf"{src / file}.*auto_map"):
        sources.resolve_model("evil", {"source": "local", "path": str(src)}, tmp_path / "models" / "evil")
    assert not (tmp_path / "models" / "evil").exists() and not marker.exists()


def test_local_directory_shipping_python_is_refused_naming_it(src, tmp_path):
    (src / "sub").mkdir()
    (src / "sub" / "helper.py").write_text("raise SystemExit('ran')\n")
    with pytest.raises(model_files.ModelCodeError, match=rf"{src}.*sub/helper\.py"):
        sources.resolve_model("evil", {"source": "local", "path": str(src)}, tmp_path / "models" / "evil")


def test_a_tampered_resolved_directory_is_refused_at_load(src, tmp_path):
    """Code added to a resolved directory after resolution: load_model refuses it (transformers never sees it)."""
    sources.resolve_model("ok", {"source": "local", "path": str(src)}, tmp_path / "models" / "ok")
    marker = tmp_path / "RAN"
    add_auto_map(tmp_path / "models" / "ok", "config.json", marker)
    with pytest.raises(model_files.ModelCodeError, match="modeling_evil.py"):
        loading.load_model("ok", {}, tmp_path / "models")
    assert not marker.exists()


def test_yes_on_stdin_cannot_make_shipped_code_run(src, tmp_path):
    """`yes y | snakemake ...`: a job (inside job_log) reads no stdin, and the directory is refused anyway; with
    the refusal bypassed, transformers is still told trust_remote_code=False and gets no answer from stdin."""
    marker = tmp_path / "RAN"
    add_auto_map(src, "config.json", marker)
    script = (
        "import sys\nfrom kvdiv.joblog import job_log\nfrom kvdiv.models import loading\n"
        f"with job_log({str(tmp_path / 'job.log')!r}):\n"
        "    assert sys.stdin.read() == ''\n"
        "    loading.check_code_free = lambda *a, **k: None\n"
        "    try:\n"
        f"        print('loaded:', type(loading.load_model_dir({str(src)!r}, {{}}).model).__module__)\n"
        "    except ValueError as err:\n"
        "        print('refused:', err)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input="y\n" * 10000,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr + (tmp_path / "job.log").read_text()
    log = (tmp_path / "job.log").read_text()
    assert "refused:" in log or "loaded: transformers.models.llama" in log, log
    assert not marker.exists(), "the model directory's own Python code ran"


def test_job_log_closes_stdin(tmp_path):
    script = (
        "import os, sys\nfrom kvdiv.joblog import job_log\n"
        f"with job_log({str(tmp_path / 'log')!r}):\n    print(repr(os.read(0, 10)), repr(sys.stdin.read()))\n"
    )
    subprocess.run(
        [sys.executable, "-c", script],
        input="y\n" * 100,
        text=True,
        check=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert (tmp_path / "log").read_text().strip() == "b'' ''"


def test_pickle_beside_an_unused_safetensors_is_refused(src, tmp_path):
    """The issue's case: pytorch_model.bin (what transformers would load) beside an unused *.safetensors."""
    from safetensors.torch import load_file

    state = load_file(src / "model.safetensors")
    torch.save({k: torch.zeros_like(v) for k, v in state.items()}, src / "pytorch_model.bin")
    (src / "model.safetensors").rename(src / "unused.safetensors")
    with pytest.raises(FileNotFoundError, match=r"no safetensors weights in .*pytorch_model\.bin is a pickle"):
        sources.resolve_model("p", {"source": "local", "path": str(src)}, tmp_path / "models" / "p")
    with pytest.raises(FileNotFoundError, match="pytorch_model.bin is a pickle"):
        loading.load_model_dir(src, {})


def test_only_the_loaded_safetensors_are_copied_and_hashed(src, tmp_path):
    """Beside model.safetensors: a pickle and an unused safetensors. Neither is copied; the provenance hash is the
    hash of model.safetensors alone, and the loaded weights are model.safetensors'."""
    from safetensors.torch import load_file, save_file

    state = load_file(src / "model.safetensors")
    torch.save({k: torch.zeros_like(v) for k, v in state.items()}, src / "pytorch_model.bin")
    save_file({k: torch.ones_like(v) for k, v in state.items()}, src / "unused.safetensors")
    out = sources.resolve_model("p", {"source": "local", "path": str(src)}, tmp_path / "models" / "p")
    assert not (out / "pytorch_model.bin").exists() and not (out / "unused.safetensors").exists()
    expected = model_files.hashlib.sha256(b"model.safetensors" + bytes.fromhex(sha256_file(src / "model.safetensors")))
    assert model_files.read_provenance(out)["weight_hash"] == expected.hexdigest()
    loaded = loading.load_model("p", {"prepack": False}, tmp_path / "models")
    for key, value in loaded.model.state_dict().items():
        if key in state:
            assert torch.equal(value, state[key]), key


def test_sharded_weights_hash_exactly_the_index_shards(src):
    (src / "model.safetensors").rename(src / "model-00001-of-00001.safetensors")
    shutil.copy(src / "model-00001-of-00001.safetensors", src / "stray.safetensors")
    (src / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors"}})
    )
    assert model_files.weight_files(src) == [src / "model-00001-of-00001.safetensors"]
    (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../elsewhere.safetensors"}}))
    with pytest.raises(FileNotFoundError, match="elsewhere"):
        model_files.weight_files(src)


def test_truncated_and_foreign_gguf_files_are_named(tmp_path):
    from kvdiv.models.gguf import check_gguf_file

    (tmp_path / "text.gguf").write_text("not a gguf at all")
    with pytest.raises(ValueError, match=rf"{tmp_path / 'text.gguf'} is not a GGUF file"):
        check_gguf_file(tmp_path / "text.gguf")
    (tmp_path / "short.gguf").write_bytes(b"GGUF\x03\x00")
    with pytest.raises(ValueError, match=rf"{tmp_path / 'short.gguf'} is a truncated GGUF file"):
        check_gguf_file(tmp_path / "short.gguf")
    # a header and then nothing: transformers' own message does not name the file; resolution's does
    (tmp_path / "cut.gguf").write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (5).to_bytes(8, "little") * 2)
    spec = {"source": "gguf", "path": str(tmp_path / "cut.gguf"), "sha256": sha256_file(tmp_path / "cut.gguf")}
    with pytest.raises(ValueError, match=rf"{tmp_path / 'cut.gguf'}"):
        sources.resolve_model("cut", spec, tmp_path / "models" / "cut")
