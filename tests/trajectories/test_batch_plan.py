"""kvdiv.trajectories.batch_plan and ``kvdiv models plan``: the batches a trajectory job will cut its documents into,
told before any job runs, are the ones the job's own batching chooses; the weights counted from the shapes are the
model's; hostile inputs are errors naming what is wrong."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO_ROOT

from kvdiv.cli import main
from kvdiv.kernel.memory_plan import CacheShape
from kvdiv.settings import AutoBatch, Generation
from kvdiv.trajectories import batching
from kvdiv.trajectories.base import chains_needed
from kvdiv.trajectories.batch_plan import budget_bytes, plan, plan_table, weights_bytes


def smoke_config(**model_changes) -> dict:
    """config/smoke.yaml as the workflow holds it (schema defaults filled), its model's spec changed."""
    from snakemake.utils import validate

    config = yaml.safe_load((REPO_ROOT / "config" / "smoke.yaml").read_text())
    config["models"]["tiny"].update(model_changes)
    validate(config, str(REPO_ROOT / "kvdiv" / "data" / "schema.yaml"))
    return config


def test_weights_counted_from_the_shapes_are_the_models_own(tiny_llama, tiny_qwen2):
    """Every parameter but the RMS norms' (2 per layer and a final one, hidden wide), exactly; the packed copy adds
    the Linear weights again; an untied output projection its vocabulary × hidden."""
    for loaded in (tiny_llama, tiny_qwen2):
        model, config = loaded.model, loaded.model.config
        shape = CacheShape.from_model(model)
        params = {id(p): p for p in model.parameters()}  # tied embeddings counted once
        total = sum(p.numel() * p.element_size() for p in params.values())
        norms = (2 * config.num_hidden_layers + 1) * config.hidden_size * 4
        biases = sum(p.numel() * 4 for n, p in model.named_parameters() if n.endswith(".bias"))  # Qwen2's q/k/v
        tied = bool(config.tie_word_embeddings)
        assert weights_bytes(shape, tied, packed=False) == total - norms - biases
        linear = sum(m.weight.numel() * 4 for m in model.modules() if isinstance(m, torch.nn.Linear))
        assert weights_bytes(shape, tied, packed=True) - weights_bytes(shape, tied, packed=False) == linear + (
            config.vocab_size * config.hidden_size if tied else 0
        )
        assert weights_bytes(shape, False, packed=False) - weights_bytes(shape, True, packed=False) == (
            config.vocab_size * config.hidden_size * 4
        )


@pytest.mark.parametrize("budget_gb", [0.012, 0.02, 0.03, 0.05, 10.0])
def test_the_plan_is_what_the_jobs_batching_chooses(tiny_llama, budget_gb):
    """For each study and stratum of smoke.yaml, the plan's batches of a job are the ones
    kvdiv.trajectories.batching.batches cuts the same documents into (prompts at the stratum's length), in the model's
    layout and the other one; budgets from one document a batch to all of them."""
    config = smoke_config(documents_per_batch="auto", documents_per_job=6, memory_budget_gb=budget_gb)
    shape = CacheShape.from_model(tiny_llama.model)
    p = plan(config, "tiny", shape, memory_bytes=1 << 40, tied=True)
    assert p.budget_bytes == int(budget_gb * 1e9) and p.budget_configured
    assert [(r.study, r.stratum) for r in p.rows] == [
        (s, f"{f}_768") for s in ("retention50", "retention90") for f in ("ruler", "helmet")
    ]
    for row in p.rows:
        g = Generation.from_study(config, row.study)
        actions = {a: config["actions"][a] for a in config["studies"][row.study]["actions"]}
        prompts = [[5] * row.prompt] * 6
        for layout in ("shared", "slots"):
            loaded = copy.copy(tiny_llama)
            loaded.spec = dict(tiny_llama.spec, kv_layout=layout)
            got = batching.batches(loaded, range(6), prompts, [None] * 6, actions, g, AutoBatch(p.budget_bytes))
            assert [len(b) for b in got] == row.batches[layout], (row, layout)
    cut = {tuple(r.batches[layout]) for r in p.rows for layout in ("shared", "slots")}
    assert cut == {(6,)} if budget_gb == 10.0 else len(cut) > 1  # the smaller budgets do cut the jobs


def test_fixed_batches_and_the_default_budget(tiny_llama):
    """``documents_per_batch: 4`` on jobs of 6: batches 4 and 2 in both layouts; no budget in the spec: the default
    share of what the weights leave (a CPU's 60 %; an accelerator's 85 % less 1 GiB of context)."""
    shape = CacheShape.from_model(tiny_llama.model)
    config = smoke_config(documents_per_batch=4, documents_per_job=6)
    p = plan(config, "tiny", shape, memory_bytes=10**9)
    assert all(r.batches == {"shared": [4, 2], "slots": [4, 2]} for r in p.rows)
    assert not p.budget_configured and p.budget_bytes == int(0.6 * (10**9 - p.weights_bytes))
    assert budget_bytes({"device": "cuda:0"}, 2**34, 2**33) == (int(0.85 * (2**34 - 2**33 - 2**30)), False)
    assert budget_bytes({"device": "cpu"}, 10, 100) == (0, False)  # weights past the memory: nothing to plan
    g = Generation.from_study(config, "retention50")  # 3 actions, R = 2, complete mode, a shared reference chain
    assert p.rows[0].chains == chains_needed(3, 2, g.mode, g.effective_reference_chain) == 2 * (1 + 2 * 3)
    table = plan_table(p)
    assert f"| retention50 | ruler_768 | {p.rows[0].chains} |" in table
    assert "jobs of 6 documents, documents_per_batch 4" in table


def write_config(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_cli_plans_a_model_from_its_config_json(tiny_llama, tmp_path, monkeypatch, capsys):
    """From a config.json given (a model not resolved here), and from the resolved model's own once it is resolved
    from this spec; not resolved and none given: an error saying how to get one."""
    from kvdiv.config import load

    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load((REPO_ROOT / "config" / "smoke.yaml").read_text())
    config["models"]["tiny"].update(documents_per_batch="auto", documents_per_job=4)
    path = write_config(tmp_path, config)
    model_config = tiny_llama.path / "config.json"
    args = ["models", "plan", "tiny", "--config", str(path), "--memory-gib", "1"]
    assert main([*args, "--model-config", str(model_config)]) == 0
    out = capsys.readouterr().out
    assert "device memory 1.0 GiB (cpu)" in out and "model tiny: kv_layout shared" in out
    assert "| retention90 | helmet_768 | 10 |" in out and "jobs of 4 documents, documents_per_batch auto" in out
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "model 'tiny' is not resolved from this spec" in err and f"kvdiv models resolve tiny --config {path}" in err
    resolved = tmp_path / "results" / "smoke" / "models" / "tiny"
    resolved.mkdir(parents=True)
    (resolved / "config.json").write_bytes(model_config.read_bytes())
    (resolved / "provenance.json").write_text(json.dumps({"spec": {"source": "random", "architecture": "qwen2"}}))
    assert main(args) == 2  # resolved from another spec: resolving again may write another model
    assert "is not resolved from this spec" in capsys.readouterr().err
    (resolved / "provenance.json").write_text(json.dumps({"spec": load(str(path))["models"]["tiny"]}))
    assert main(args) == 0
    assert capsys.readouterr().out == out


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "is not valid JSON"),
        (json.dumps({"num_hidden_layers": 2}), "num_attention_heads, hidden_size, intermediate_size, vocab_size"),
        (
            json.dumps(
                {
                    "num_hidden_layers": True,
                    "num_attention_heads": 4,
                    "hidden_size": 64,
                    "intermediate_size": 128,
                    "vocab_size": 10,
                }
            ),
            "num_hidden_layers missing or not a positive",
        ),  # fmt: skip
        (
            json.dumps(
                {
                    "num_hidden_layers": 2,
                    "num_attention_heads": 4,
                    "hidden_size": 64,
                    "intermediate_size": 128,
                    "vocab_size": 10,
                    "num_key_value_heads": 0,
                }
            ),
            "num_key_value_heads must be a positive",
        ),  # fmt: skip
        ("[1, 2]", "not a decoder's config.json"),
        (" " * ((1 << 20) + 1), "larger than 1048576 bytes"),
    ],
)
def test_cli_refuses_a_bad_config_json(tmp_path, capsys, content, message):
    path = write_config(tmp_path, yaml.safe_load((REPO_ROOT / "config" / "smoke.yaml").read_text()))
    (tmp_path / "config.json").write_text(content)
    args = ["models", "plan", "tiny", "--config", str(path), "--model-config", str(tmp_path / "config.json")]
    assert main([*args, "--memory-gib", "1"]) == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_bad_names_and_memory(tmp_path, capsys):
    path = write_config(tmp_path, yaml.safe_load((REPO_ROOT / "config" / "smoke.yaml").read_text()))
    assert main(["models", "plan", "other", "--config", str(path), "--memory-gib", "1"]) == 2
    assert "model 'other' is not in" in capsys.readouterr().err
    for bad in ("0", "-1", "inf", "nan"):
        assert main(["models", "plan", "tiny", "--config", str(path), "--memory-gib", bad]) == 2
        assert "--memory-gib must be a number > 0" in capsys.readouterr().err
    assert main(["models", "plan", "../x", "--config", str(path)]) == 2
    assert "model" in capsys.readouterr().err
