"""Every model sees its own prompt: a study with three tiny random models whose chat templates differ (ChatML,
a Llama-3-style template given as a string in the spec, and none) runs through the workflow, and each job's
recorded prompt ids are that model's tokenizer applied to that model's rendering of the document's message."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from transformers import AutoTokenizer

from kvdiv.trajectories.store import read_document_store, read_prompt_ids
from support.checkout import checkout_ignore

REPO = Path(__file__).resolve().parents[2]
LLAMA3_TEMPLATE = (
    "{{- '<|begin_of_text|>' }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim "
    "+ '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
TINY = {
    "source": "random",
    "tokenizer": "bytes",
    "device": "cpu",
    "threads": 1,
    "model_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1},
}
CONFIG = {
    "seed": 7,
    "models": {
        "chatml": {**TINY, "architecture": "llama"},
        "llama3": {**TINY, "architecture": "qwen2", "chat_template": LLAMA3_TEMPLATE},
        "plain": {**TINY, "architecture": "llama", "chat_template": False},
    },
    "actions": {"recent_half": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 0}},
    "studies": {
        "two": {
            "seed": 3,
            "reference_tokenizer": "chatml",
            "actions": ["recent_half"],
            "documents_per_stratum": 1,
            "strata": [{"family": "helmet", "length": 600}],
            "horizon": 4,
            "replicates": 1,
        },
    },
}
DOC = "two-helmet_600-0000"

pytestmark = pytest.mark.workflow


def expected_rendering(model: str, message: str, prefix: str) -> str:
    """Each model's rendering, written out by hand (not through kvdiv or the tokenizer's template)."""
    if model == "chatml":
        return f"<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n{prefix}"
    if model == "llama3":
        return (
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
            + message.strip()
            + "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
            + prefix
        )
    return f"{message}\n\n{prefix}" if prefix else message


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("templates") / "repo"
    ignore = checkout_ignore(REPO)
    shutil.copytree(REPO, work, ignore=ignore)
    (work / "templates.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    targets = [f"results/two/cube/{m}.zarr" for m in CONFIG["models"]]
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *targets, "--cores", "2", "--configfile", "templates.yaml"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, PYTHONPATH=str(work)),
    )
    if proc.returncode != 0:
        pytest.fail(f"snakemake failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return work


def test_each_job_feeds_its_own_models_rendering(work):
    block = (work / "results/two/documents/helmet_600/0000-0003.jsonl").read_text().splitlines()
    doc = next(record for record in map(json.loads, block) if record["id"] == DOC)
    message, prefix = doc["prompt"], doc["answer_prefix"]
    assert doc["rendered"] is False and "<|im_start|>" not in message and "<|start_header_id|>" not in message
    fed = {}
    for model in CONFIG["models"]:
        store = work / f"results/two/trajectories/{model}/{DOC}.zarr"
        tokenizer = AutoTokenizer.from_pretrained(work / "results/models" / model)
        want = tokenizer(expected_rendering(model, message, prefix), add_special_tokens=False)["input_ids"]
        fed[model] = read_prompt_ids(store).tolist()
        assert fed[model] == want, model
        attrs, _ = read_document_store(store)
        assert attrs["prompt_tokens"] == len(want) and attrs["model"] == model
        assert attrs["prompt_rendering"].startswith("plain" if model == "plain" else "chat_template")
        assert tokenizer.decode(fed[model]) == expected_rendering(model, message, prefix)
    assert len({tuple(ids) for ids in fed.values()}) == 3  # three different prompts for one document
    # documents are sized with the reference model's (chatml's) rendering
    assert doc["tokenizer"] == "chatml" and doc["n_tokens"] == len(fed["chatml"])
    assert 600 - 16 <= doc["n_tokens"] <= 600 < len(fed["llama3"])
