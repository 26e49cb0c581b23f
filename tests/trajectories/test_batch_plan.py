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
from kvdiv.trajectories.batch_plan import budget_bytes, free_bytes, packs, plan, plan_table, weights_bytes


@pytest.fixture(scope="module")
def tiny_tied(tiny_model_factory):
    return tiny_model_factory("llama", tie_word_embeddings=True)


def test_weights_counted_from_the_shapes_are_the_models_own(tiny_llama, tiny_qwen2, tiny_tied):
    """Every parameter but the RMS norms' (2 per layer and a final one, hidden wide) and Qwen2's q/k/v biases, exactly,
    tied or not; the packed copies add every Linear weight again (the output projection's too, tied or not)."""
    assert tiny_tied.model.config.tie_word_embeddings and not tiny_llama.model.config.tie_word_embeddings
    for loaded in (tiny_llama, tiny_qwen2, tiny_tied):
        model, config = loaded.model, loaded.model.config
        shape = CacheShape.from_model(model)
        params = {id(p): p for p in model.parameters()}  # tied embeddings counted once
        total = sum(p.numel() * p.element_size() for p in params.values())
        norms = (2 * config.num_hidden_layers + 1) * config.hidden_size * 4
        biases = sum(p.numel() * 4 for n, p in model.named_parameters() if n.endswith(".bias"))
        tied = bool(config.tie_word_embeddings)
        assert weights_bytes(shape, tied, packed=False) == total - norms - biases
        linear = sum(m.weight.numel() * 4 for m in model.modules() if isinstance(m, torch.nn.Linear))
        assert weights_bytes(shape, tied, packed=True) - weights_bytes(shape, tied, packed=False) == linear


def test_only_float32_cpu_jobs_pack_their_weights():
    """kvdiv.models.prepacked packs float32 Linear weights on a CPU: a bfloat16 or CUDA model, or prepack off, not."""
    assert packs({}) and packs({"device": "cpu", "dtype": "float32"})
    assert not packs({"dtype": "bfloat16"}) and not packs({"device": "cuda:1"}) and not packs({"prepack": False})


def mixed_config(**model_changes) -> dict:
    """smoke.yaml with retention50's strata at 256 and 768 tokens (documents_per_stratum 3) and the model changed."""
    config = yaml.safe_load((REPO_ROOT / "config" / "smoke.yaml").read_text())
    config["studies"]["retention50"]["strata"] = [
        {"family": "ruler", "length": 256},
        {"family": "helmet", "length": 768},
    ]
    config["studies"]["retention50"]["documents_per_stratum"] = 3
    config["models"]["tiny"].update(model_changes)
    from snakemake.utils import validate

    validate(config, str(REPO_ROOT / "kvdiv" / "data" / "schema.yaml"))
    return config


def job_batches(loaded, config: dict, study: str, layout: str, batching_setting) -> dict[tuple[str, tuple], list]:
    """{(job's strata, its documents' lengths): batch sizes} as the trajectory job cuts the workflow's jobs
    (kvdiv.config.plan.trajectory_batches; prompts at their stratum's length) with ``batching_setting``."""
    from kvdiv.config.plan import trajectory_batches
    from kvdiv.layout import stratum_name

    g = Generation.from_study(config, study)
    actions = {a: config["actions"][a] for a in config["studies"][study]["actions"]}
    lengths = {stratum_name(s["family"], s["length"]): s["length"] for s in config["studies"][study]["strata"]}
    model = copy.copy(loaded)
    model.spec = dict(loaded.spec, kv_layout=layout)
    out = {}
    for name, ids in trajectory_batches(config, study, "tiny"):
        doc_lengths = [lengths[next(s for s in lengths if d.startswith(f"{study}-{s}-"))] for d in ids]
        prompts = [[5] * n for n in doc_lengths]
        got = batching.batches(model, range(len(ids)), prompts, [None] * len(ids), actions, g, batching_setting)
        out.setdefault((name.rsplit("-", 2)[0], tuple(doc_lengths)), []).append([len(b) for b in got])
    return out


@pytest.mark.parametrize("per_job, strata_per_job", [(2, 1), (1, 2), (3, 2), (4, 1)])
@pytest.mark.parametrize("budget_gb", [0.012, 0.02, 0.05, 10.0])
def test_the_plan_is_what_the_jobs_batching_chooses(tiny_llama, per_job, strata_per_job, budget_gb):
    """For every job the workflow plans (strata grouped per job, blocks of documents, a last smaller block, fewer
    documents a stratum than a job holds, strata of 256 and 768 tokens in one job), the plan's batches are the ones
    kvdiv.trajectories.batching.batches cuts the job's documents into, in both layouts, from one document a batch
    to all of them; the rows count the jobs."""
    from kvdiv.config.plan import trajectory_batches

    config = mixed_config(
        documents_per_batch="auto",
        documents_per_job=per_job,
        strata_per_job=strata_per_job,
        memory_budget_gb=budget_gb,
    )
    shape = CacheShape.from_model(tiny_llama.model)
    p = plan(config, "tiny", shape, memory_bytes=1 << 40, tied=True)
    assert p.budget_bytes == int(budget_gb * 1e9) and p.budget_configured
    for study in ("retention50", "retention90"):
        rows = [r for r in p.rows if r.study == study]
        assert sum(r.jobs for r in rows) == len(trajectory_batches(config, study, "tiny"))
        for layout in ("shared", "slots"):
            expected = job_batches(tiny_llama, config, study, layout, AutoBatch(p.budget_bytes))
            assert {r.strata: r.batches[layout] for r in rows} == {k[0]: v[0] for k, v in expected.items()}
            assert all(len({tuple(b) for b in v}) == 1 for v in expected.values())  # a row's jobs are alike
            assert {r.strata: r.jobs for r in rows} == {k[0]: len(v) for k, v in expected.items()}
    cut = {tuple(r.batches[lay]) for r in p.rows for lay in ("shared", "slots")}
    if budget_gb in (0.012, 10.0):  # the smallest budget cuts jobs (in the slots layout at least), the largest none
        assert all(len(c) == 1 for c in cut) if budget_gb == 10.0 else any(len(c) > 1 for c in cut)


def test_fixed_batches_and_the_default_budget(tiny_llama):
    """``documents_per_batch: 2`` on jobs of 3: batches 2 and 1 in both layouts, no budget; ``auto`` without a budget:
    the default share of what the weights leave (a CPU's 60 %; an accelerator's 85 % less 1 GiB of context)."""
    shape = CacheShape.from_model(tiny_llama.model)
    p = plan(mixed_config(documents_per_batch=2, documents_per_job=3), "tiny", shape, memory_bytes=10**9)
    rows = [r for r in p.rows if r.study == "retention50"]
    assert [(r.strata, r.documents) for r in rows] == [("ruler_256", 3), ("helmet_768", 3)]
    assert all(r.batches == {"shared": [2, 1], "slots": [2, 1]} and not r.over for r in rows)
    assert p.budget_bytes is None and p.free_bytes == 10**9 - p.weights_bytes
    p = plan(mixed_config(documents_per_batch="auto", documents_per_job=3), "tiny", shape, memory_bytes=10**9)
    assert not p.budget_configured and p.budget_bytes == int(0.6 * (10**9 - p.weights_bytes))
    assert free_bytes({"device": "cuda:0"}, 2**34, 2**33) == 2**33 - 2**30
    assert budget_bytes({"device": "cuda:0"}, 2**33 - 2**30) == (int(0.85 * (2**33 - 2**30)), False)
    assert budget_bytes({}, -5) == (0, False)  # weights past the memory: nothing to plan
    g = Generation.from_study(p_config := mixed_config(), "retention50")  # 3 actions, R = 2, complete, shared reference
    assert rows[0].chains == chains_needed(3, 2, g.mode, g.effective_reference_chain) == 2 * (1 + 2 * 3)
    assert p_config["studies"]["retention50"]["replicates"] == 2
    table = plan_table(p)
    assert f"| retention50 | ruler_256 | 1 | 3 | {rows[0].chains} |" in table
    assert "documents_per_batch auto: " in table and "(the default share of what the weights leave)" in table


def test_a_batch_past_the_memory_is_marked(tiny_llama):
    shape = CacheShape.from_model(tiny_llama.model)
    config = mixed_config(documents_per_batch=3, documents_per_job=3)
    p = plan(config, "tiny", shape, memory_bytes=weights_bytes(shape, True, packed=True) + 10**6)
    assert all(r.over == ("shared", "slots") for r in p.rows)
    assert "(over): a batch needs more than the memory free beside the weights" in plan_table(p)
    p = plan(config, "tiny", shape, memory_bytes=1000)
    assert p.free_bytes < 0 and "which do not fit in the memory given: no batch fits" in plan_table(p)
    # auto with a configured budget past the memory: the budget does not make the batches fit
    config = mixed_config(documents_per_batch="auto", documents_per_job=3, memory_budget_gb=100)
    p = plan(config, "tiny", shape, memory_bytes=weights_bytes(shape, True, packed=True) + 10**6)
    assert all(r.over == ("shared", "slots") for r in p.rows)
    assert "(over): a batch needs more than the budget or the memory free beside the weights" in plan_table(p)


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
    assert "| retention90 | helmet_768 | 1 | 2 | 10 |" in out and "documents_per_batch auto: " in out
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


SHAPE = {
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "hidden_size": 64,
    "intermediate_size": 128,
    "vocab_size": 10,
}


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "is not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "is not valid JSON"),
        ('{"vocab_size": ' + "9" * 5000 + "}", "is not valid JSON (ValueError)"),  # past Python's int digits
        (json.dumps({"num_hidden_layers": 2}), "num_attention_heads, hidden_size, intermediate_size, vocab_size"),
        (json.dumps(dict(SHAPE, num_hidden_layers=True)), "num_hidden_layers must be an integer in 1..65536, got True"),
        (json.dumps(dict(SHAPE, vocab_size=10**400)), "vocab_size must be an integer in 1..2147483648, got 1000"),
        (json.dumps(dict(SHAPE, num_key_value_heads=0)), "num_key_value_heads must be an integer in 1..2147483648"),
        (json.dumps(dict(SHAPE, num_attention_heads=128)), "hidden_size 64 over 128 heads leaves no head_dim"),
        ("[1, 2]", "not a decoder's config.json"),
        (" " * ((1 << 20) + 1), "larger than 1048576 bytes"),
        (json.dumps({"model_type": "no-such-model"}), "transformers does not read it as a config"),
        # transformers builds a list per layer: a hostile layer count is refused before it is built
        (json.dumps(dict(SHAPE, model_type="qwen2", num_hidden_layers=10**10)), "num_hidden_layers must be an integer"),
        (
            json.dumps({"model_type": "llava", "text_config": dict(SHAPE, num_hidden_layers=10**7)}),
            "text_config.num_hidden_layers must be an integer in 1..65536",
        ),
        (json.dumps(dict(SHAPE, model_type="llama", num_attention_heads=0)), "num_attention_heads must be an integer"),
    ],
)
def test_cli_refuses_a_bad_config_json(tmp_path, capsys, content, message):
    path = write_config(tmp_path, yaml.safe_load((REPO_ROOT / "config" / "smoke.yaml").read_text()))
    (tmp_path / "config.json").write_text(content)
    args = ["models", "plan", "tiny", "--config", str(path), "--model-config", str(tmp_path / "config.json")]
    assert main([*args, "--memory-gib", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_gives_transformers_only_the_shape(tmp_path, monkeypatch):
    """Keys the plan does not read never reach transformers (a ``num_labels`` of 10**9 builds a dict that large)."""
    from transformers import AutoConfig

    from kvdiv.cli.models import _shape

    seen = []
    real = AutoConfig.for_model
    monkeypatch.setattr(AutoConfig, "for_model", lambda *a, **kw: seen.append((a, kw)) or real(*a, **kw))
    text = dict(SHAPE, model_type="llama", id2label={str(i): "x" for i in range(3)})
    (tmp_path / "c.json").write_text(
        json.dumps({"model_type": "llava", "num_labels": 10**9, "tie_word_embeddings": True, "text_config": text})
    )
    assert _shape(tmp_path / "c.json", 4)[0].layers == 2
    assert seen == [(("llava",), {"text_config": dict(SHAPE, model_type="llama"), "tie_word_embeddings": True})]


def test_cli_reads_a_multimodal_config_and_its_top_level_tie(tmp_path, capsys):
    """A config.json with a ``model_type`` is read as transformers reads it (a text_config's defaults filled), the
    embeddings' tie from the top level where it is said."""
    from kvdiv.cli.models import _shape

    (tmp_path / "m.json").write_text(
        json.dumps(
            {"model_type": "llava", "tie_word_embeddings": False, "text_config": {"model_type": "llama", **SHAPE}}
        )
    )
    shape, tied = _shape(tmp_path / "m.json", 2)
    assert (shape.layers, shape.heads, shape.kv_heads, shape.head_dim, shape.vocab) == (2, 4, 4, 16, 10) and not tied
    (tmp_path / "t.json").write_text(json.dumps({"model_type": "llama", **SHAPE}))
    assert _shape(tmp_path / "t.json", 4)[1] is False  # LlamaConfig's default
    (tmp_path / "n.json").write_text(json.dumps(SHAPE))
    assert _shape(tmp_path / "n.json", 4)[1] is True  # no model_type and no word: tied, the smaller count


def test_cli_loads_the_configs_press_modules(tiny_llama, tmp_path, monkeypatch, capsys):
    """An action naming the user's own press (press_modules) is planned as the job runs it, not an unknown press."""
    import kvdiv.kernel.presses.registry as registry

    monkeypatch.setattr(registry, "USER_PRESSES", dict(registry.USER_PRESSES))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text(
        "from dataclasses import dataclass\nfrom kvpress import ScorerPress\n\n\n@dataclass\n"
        "class PlanMinePress(ScorerPress):\n    compression_ratio: float = 0.0\n\n"
        "    def score(self, module, hidden_states, keys, values, attentions, kwargs):\n"
        "        return -keys.norm(dim=-1)\n"
    )
    config = yaml.safe_load((REPO_ROOT / "config" / "smoke.yaml").read_text())
    config["press_modules"] = ["mine.py"]
    config["actions"]["recent_90"] = {"press": "PlanMinePress", "compression_ratio": 0.9}
    path = write_config(tmp_path, config)
    args = ["models", "plan", "tiny", "--config", str(path), "--memory-gib", "1"]
    assert main([*args, "--model-config", str(tiny_llama.path / "config.json")]) == 0, capsys.readouterr().err
    assert "| retention90 | ruler_768 | 1 | 2 | 10 |" in capsys.readouterr().out


def test_cli_refuses_bad_names_memory_and_paths(tmp_path, capsys):
    path = write_config(tmp_path, yaml.safe_load((REPO_ROOT / "config" / "smoke.yaml").read_text()))
    assert main(["models", "plan", "other", "--config", str(path), "--memory-gib", "1"]) == 2
    assert "model 'other' is not in" in capsys.readouterr().err
    for bad in ("0", "-1", "inf", "nan", "1e308"):
        assert main(["models", "plan", "tiny", "--config", str(path), "--memory-gib", bad]) == 2
        assert "--memory-gib must be a number > 0 and at most 1048576" in capsys.readouterr().err
    assert main(["models", "plan", "../x", "--config", str(path)]) == 2
    assert "model name '../x' is not allowed" in capsys.readouterr().err
    args = ["models", "plan", "tiny", "--config", str(path), "--memory-gib", "1", "--model-config"]
    assert main([*args, str(tmp_path)]) == 2
    assert f"{tmp_path} is not a file" in capsys.readouterr().err
    assert main([*args, str(tmp_path / "none.json")]) == 2
    assert f"{tmp_path / 'none.json'} does not exist" in capsys.readouterr().err


def test_batch_sizes_as_count_and_size():
    from kvdiv.trajectories.batch_plan import _batches

    assert _batches([16]) == "1 × 16" and _batches([9, 7]) == "1 × 9, 1 × 7"
    assert _batches([5, 5, 5, 1]) == "3 × 5, 1 × 1" and _batches([2] * 8) == "8 × 2"
