"""kvdiv.compare: the trajectory job from Python. Press instances and strings give the arrays of the job's library
path with config specs and rendered documents (same seeds); token ids without a tokenizer; the summary is the
leaderboard's numbers; show, to_zarr; and the README's "From Python" example runs as written on a tiny model.
(tests/workflow/test_press_modules_workflow.py compares kvdiv.compare with a workflow-built cube.)"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from kvpress import AdaKVPress, KnormPress, SnapKVPress

import kvdiv
from kvdiv.documents.render import prompt_token_ids
from kvdiv.trajectories.job import run_documents
from kvdiv.trajectories.store import build_cube, open_cube
from kvdiv.settings import generation

REPO = Path(__file__).resolve().parents[1]
PROMPTS = [
    "Remember the word lantern. " + "grass is green. " * 12 + "Which word?",
    "The number is 42. " + "the sky is blue. " * 10 + "Which number?",
]
SPECS = {
    "snap": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8},
    "ada": {"press": "AdaKVPress", "wraps": {"press": "KnormPress", "compression_ratio": 0.6}},
}
VARIABLES = ("x", "y", "tv", "fixed_tv", "match", "eos_x", "eos_y")


def instances():
    return {
        "snap": SnapKVPress(compression_ratio=0.5, window_size=8),
        "ada": AdaKVPress(press=KnormPress(compression_ratio=0.6)),
    }


@pytest.fixture(scope="module")
def result(tiny_llama):
    return kvdiv.compare(
        tiny_llama.model,
        tiny_llama.tokenizer,
        PROMPTS,
        actions=instances(),
        horizon=6,
        replicates=3,
        seed=5,
        study_seed=9,
        temperature=3.0,
        progress=False,
    )


def test_same_arrays_as_the_jobs_library_path(tiny_llama, result, tmp_path):
    documents = [
        {"id": f"prompt-{i:04d}", "prompt": p, "answer_prefix": "", "rendered": False} for i, p in enumerate(PROMPTS)
    ]
    outs = [tmp_path / f"{i}.zarr" for i in range(2)]
    run_documents(
        tiny_llama,
        documents,
        SPECS,
        outs,
        generation(master_seed=5, study_seed=9, horizon=6, replicates=3, temperature=3.0),
        progress=False,
    )
    cube = open_cube(build_cube("compare", tiny_llama.name, outs, tmp_path / "cube.zarr"))
    ds = result.dataset
    assert isinstance(ds, xr.Dataset) and ds.sizes == {"document": 2, "action": 2, "replicate": 3, "step": 6}
    assert list(ds["action"].values) == ["snap", "ada"]
    for name in VARIABLES:
        np.testing.assert_array_equal(ds[name].values, cube[name].values, err_msg=name)
    assert (ds["tv"].values[..., 1:] > 0).any()  # the comparison is not vacuous
    assert ds.attrs["actions"]["ada"]["wraps"]["press"] == "KnormPress"
    assert ds["prompt_tokens"].values.tolist() == [
        len(prompt_token_ids(d, tiny_llama.tokenizer, tiny_llama.chat_template)) for d in documents
    ]


def test_token_ids_without_a_tokenizer(tiny_llama, result):
    ids = [prompt_token_ids({"prompt": p}, tiny_llama.tokenizer, True) for p in PROMPTS]
    by_ids = kvdiv.compare(
        tiny_llama.model,
        None,
        ids,
        actions=instances(),
        horizon=6,
        replicates=3,
        seed=5,
        study_seed=9,
        temperature=3.0,
        eos_token_ids=tiny_llama.eos_token_ids,
        progress=False,
    )
    for name in VARIABLES:
        np.testing.assert_array_equal(by_ids.dataset[name].values, result.dataset[name].values, err_msg=name)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        kvdiv.compare(tiny_llama.model, None, PROMPTS, actions=instances(), eos_token_ids=[2])
    with pytest.raises(ValueError, match="without a tokenizer"):
        by_ids.show(0)


def test_summary_is_the_leaderboards_numbers(tiny_llama, result):
    """P(τ ≤ H) = the mean over prompts of the replicate share with a divergence; R_H = mean mismatch share; the
    intervals bracket the estimates with several prompts and are null with one."""
    summary = result.summary(n_boot=200)
    assert summary["action"].to_list() == ["snap", "ada"] and summary["n_documents"].to_list() == [2, 2]
    match = result.dataset["match"].values  # (document, action, replicate, step)
    for a, row in enumerate(summary.iter_rows(named=True)):
        diverged = (~match[:, a]).any(-1).mean(-1).mean()
        assert row["diverged_by_6"] == pytest.approx(diverged)
        assert row["risk"] == pytest.approx((~match[:, a]).mean(-1).mean(-1).mean())
        assert row["risk_lower"] <= row["risk"] <= row["risk_upper"]
    single = kvdiv.compare(
        tiny_llama.model,
        tiny_llama.tokenizer,
        PROMPTS[0],
        actions=instances(),
        horizon=6,
        replicates=3,
        seed=5,
        study_seed=9,
        temperature=3.0,
        progress=False,
    ).summary(n_boot=50)
    assert single["n_documents"].to_list() == [1, 1] and single["risk_lower"].is_null().all()


def test_show_and_to_zarr(result, tmp_path):
    view = result.show(1, "ada", replicate=2)
    text = str(view)
    assert "prompt-0001" in text and "action ada" in text
    assert "<" in view._repr_html_()
    out = result.to_zarr(tmp_path / "c.zarr")
    again = open_cube(out)
    for name in VARIABLES:
        np.testing.assert_array_equal(again[name].values, result.dataset[name].values)


@pytest.mark.slow
def test_readme_example_runs_as_written(tiny_model_factory, tmp_path, monkeypatch):
    """The fenced Python block of README.md's "From Python" section, executed unchanged; KVDIV_EXAMPLE_MODEL (the
    variable the README documents) names a tiny random model directory instead of SmolLM2."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## From Python", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    loaded = tiny_model_factory("llama")
    monkeypatch.setenv("KVDIV_EXAMPLE_MODEL", str(loaded.path))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result.dataset.sizes == {"document": 2, "action": 2, "replicate": 8, "step": 128}
    assert open_cube(tmp_path / "compare.zarr")["x"].shape == (2, 2, 8, 128)
    assert os.environ["KVDIV_EXAMPLE_MODEL"] == str(loaded.path)


def test_a_decoding_press_instance_from_python(tiny_llama):
    """A kvpress DecodingPress instance (your own scorer inside it works the same): δ = 0 until its first cut changes a
    law (cut at the end of decode forward 2: step 4), then the laws differ; its spec is recorded."""
    from kvpress import DecodingPress

    press = DecodingPress(base_press=KnormPress(), compression_interval=2, target_size=24)
    out = kvdiv.compare(
        tiny_llama.model,
        tiny_llama.tokenizer,
        PROMPTS,
        actions={"dec": press},
        horizon=8,
        replicates=3,
        seed=5,
        study_seed=9,
        temperature=3.0,
        progress=False,
    )
    tv = out.dataset["tv"].sel(action="dec").values  # [document, replicate, step]
    assert np.all(tv[..., :3] == 0) and (tv[..., 3:] > 0).any()
    assert out.dataset.attrs["actions"]["dec"]["press"] == "DecodingPress"
