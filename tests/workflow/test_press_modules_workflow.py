"""`press_modules`: a press written in the user's own file runs through snakemake (as an action, as a wrapper's inner
press, in the leaderboard), its file is an input of exactly the trajectory jobs whose actions name it, and a name
clash, a missing file or a file that fails to import is an error naming the file when the workflow starts."""

from __future__ import annotations

import functools
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvdiv.trajectories.store import open_cube, read_document_store

from test_trajectories_workflow import IGNORE, REPO
from test_trajectories_workflow import snakemake as _snakemake

snakemake = functools.partial(_snakemake, timeout=1800)  # three studies' jobs in the fixture run

pytestmark = pytest.mark.workflow

PRESS = '''
from dataclasses import dataclass

import torch
from kvpress import ScorerPress


@dataclass
class NegKnormPress(ScorerPress):
    """Keep the keys of largest norm (kvpress's KnormPress keeps the smallest)."""

    compression_ratio: float = 0.0
    window: int = 1

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        return keys.norm(dim=-1){edit}
'''

CONFIG = {
    "seed": 7,
    "results_owner": "own-press-tests",  # the variants below (bad.yaml, ...) edit one experiment
    "press_modules": ["presses/mine.py"],
    "models": {
        "tiny": {"source": "random", "architecture": "llama", "tokenizer": "bytes", "device": "cpu", "threads": 1}
    },
    "actions": {
        "mine": {"press": "NegKnormPress", "compression_ratio": 0.5},
        "ada_mine": {"press": "AdaKVPress", "wraps": {"press": "NegKnormPress", "compression_ratio": 0.5}},
        "knorm": {"press": "KnormPress", "compression_ratio": 0.5},
    },
    "studies": {
        "own": {
            "seed": 3,
            "actions": ["mine", "ada_mine", "knorm"],
            "documents_per_stratum": 1,
            "strata": [{"family": "ruler", "length": 512}],
            "horizon": 4,
            "replicates": 2,
            "temperature": 4.0,
        },
        "plain": {
            "seed": 4,
            "actions": ["knorm"],
            "documents_per_stratum": 1,
            "strata": [{"family": "ruler", "length": 512}],
            "horizon": 4,
            "replicates": 2,
            "temperature": 4.0,
        },
    },
    "leaderboard": {"study": "own"},
}
CUBE = "results/own/cube/tiny.zarr"
PLAIN_CUBE = "results/plain/cube/tiny.zarr"
LEADERBOARD = "results/leaderboard/tiny.csv"


def write(work: Path, name: str, config: dict) -> str:
    (work / name).write_text(yaml.safe_dump(config, sort_keys=False))
    return name


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("own") / "repo"
    shutil.copytree(REPO, work, ignore=IGNORE)
    (work / "presses").mkdir()
    (work / "presses/mine.py").write_text(PRESS.format(edit=""))
    write(work, "own.yaml", CONFIG)
    snakemake(work, CUBE, PLAIN_CUBE, LEADERBOARD, "--cores", "2", "--configfile", "own.yaml")
    return work


def test_own_press_runs_as_action_wrapped_and_in_the_leaderboard(work):
    ds = open_cube(work / CUBE)
    assert list(ds["action"].values) == ["mine", "ada_mine", "knorm"]
    attrs, data = read_document_store(work / "results/own/trajectories/tiny/own-ruler_512-0000.zarr")
    assert attrs["actions"]["ada_mine"]["wraps"]["press"] == "NegKnormPress"
    # the evicted kernels differ from the full one (TV > 0 somewhere after step 1) and from kvpress's opposite choice
    assert (ds["tv"].sel(action="mine").values[..., 1:] > 0).any()
    assert not np.array_equal(ds["tv"].sel(action="mine").values, ds["tv"].sel(action="knorm").values)
    board = (work / LEADERBOARD).read_text()
    assert "NegKnormPress" in board and "AdaKVPress(NegKnormPress)" in board


def test_editing_the_press_file_reruns_exactly_what_used_it(work):
    args = (CUBE, PLAIN_CUBE, LEADERBOARD, "-n", "--cores", "2", "--configfile", "own.yaml")
    assert "Nothing to be done" in snakemake(work, *args)
    (work / "presses/mine.py").write_text(PRESS.format(edit=" * 2"))
    out = snakemake(work, *args)
    assert re.search(r"reason: Updated input files: [^\n]*presses/mine\.py", out), out[-3000:]
    jobs = re.findall(r"^rule (\S+):", out, flags=re.M) or re.findall(r"^localrule (\S+):", out, flags=re.M)
    assert any(j.startswith("trajectories_own_") for j in jobs) and "leaderboard" in jobs, jobs
    assert not any(j.startswith("trajectories_plain_") for j in jobs), jobs
    (work / "presses/mine.py").write_text(PRESS.format(edit=""))


@pytest.mark.parametrize(
    "source, config_edit, message",
    [  # the other cases: tests/kernel/test_press_modules.py
        (
            PRESS.format(edit="").replace("NegKnormPress", "KnormPress"),
            {},
            r"presses/bad\.py' defines class 'KnormPress', which clashes with kvpress",
        ),
        (None, {}, r"no such file 'presses/bad\.py'"),
    ],
)
def test_bad_press_modules_are_errors_naming_the_file_at_start(work, source, config_edit, message):
    path = work / "presses/bad.py"
    path.unlink(missing_ok=True)
    if source is not None:
        path.write_text(source)
    config = {**CONFIG, "press_modules": ["presses/mine.py", "presses/bad.py"], **config_edit}
    out = snakemake(work, CUBE, "-n", "--cores", "1", "--configfile", write(work, "bad.yaml", config), check=False)
    assert re.search(message, out), out[-3000:]
    path.unlink(missing_ok=True)


def test_an_unknown_press_lists_the_own_presses(work):
    config = {**CONFIG, "actions": {**CONFIG["actions"], "mine": {"press": "NegKnorm", "compression_ratio": 0.5}}}
    out = snakemake(work, CUBE, "-n", "--cores", "1", "--configfile", write(work, "typo.yaml", config), check=False)
    assert "unknown press 'NegKnorm'" in out and "NegKnormPress" in out, out[-3000:]
    config = {**CONFIG, "actions": {**CONFIG["actions"], "mine": {"press": "NegKnormPress", "compression_ratio": 1.5}}}
    out = snakemake(work, CUBE, "-n", "--cores", "1", "--configfile", write(work, "range.yaml", config), check=False)
    assert "'compression_ratio' = 1.5 is out of range" in out, out[-3000:]


def test_compare_gives_the_workflows_arrays_with_the_own_press(work):
    """kvdiv.compare on the workflow's model, document, actions (press instances, the user's class imported from its
    file) and seeds: every array of the cube equals the workflow's, value for value."""
    import kvdiv
    from kvpress import AdaKVPress, KnormPress

    from kvdiv.documents import read_jsonl
    from kvdiv.models.loading import load_model
    from kvdiv.kernel.presses.registry import load_press_modules

    mine = load_press_modules([work / "presses/mine.py"])["NegKnormPress"]
    config = yaml.safe_load((work / "own.yaml").read_text())
    loaded = load_model("tiny", {**config["models"]["tiny"], "dtype": "float32"}, work / "results/models")
    doc_id = "own-ruler_512-0000"
    record = next(d for d in read_jsonl(work / "results/own/documents/ruler_512.jsonl") if d.id == doc_id).to_record()
    result = kvdiv.compare(
        loaded.model,
        loaded.tokenizer,
        [record],
        actions={
            "mine": mine(compression_ratio=0.5),
            "ada_mine": AdaKVPress(press=mine(compression_ratio=0.5)),
            "knorm": KnormPress(compression_ratio=0.5),
        },
        horizon=4,
        replicates=2,
        temperature=config["studies"]["own"]["temperature"],
        seed=config["seed"],
        study_seed=config["studies"]["own"]["seed"],
        progress=False,
    )
    ours, theirs = result.dataset, open_cube(work / CUBE)
    assert list(ours["document"].values) == [doc_id] and list(ours["action"].values) == ["mine", "ada_mine", "knorm"]
    for name in ("x", "y", "tv", "fixed_tv", "match", "eos_x", "eos_y"):
        assert ours[name].dims == theirs[name].dims
        np.testing.assert_array_equal(ours[name].values, theirs[name].values, err_msg=name)
    assert ours["prompt_tokens"].values.tolist() == theirs["prompt_tokens"].values.tolist()
    summary = result.summary()
    assert summary["action"].to_list() == ["mine", "ada_mine", "knorm"] and summary["n_documents"].to_list() == [1] * 3


def test_an_edited_press_reruns_to_a_fresh_runs_arrays(work, tmp_path):
    """Edit one line of the press (keep the smallest norms instead of the largest) and rerun: the job reruns (its
    file is an input) and must compute with the edited press, not reuse the cached pieces of the old one (their key
    now covers the file's bytes: tests/trajectories/test_cache_keys.py). Its cube equals kvdiv.compare's with the
    edited class, action for action; with a key blind to the file the rebuilt stores equalled the pre-edit ones."""
    import kvdiv
    from kvpress import AdaKVPress

    from kvdiv.documents import read_jsonl
    from kvdiv.kernel.presses.registry import load_press_modules
    from kvdiv.models.loading import load_model

    before = open_cube(work / CUBE)["tv"].sel(action="mine").values.copy()
    edited = PRESS.format(edit="").replace("return keys.norm", "return -keys.norm")
    (work / "presses/mine.py").write_text(edited)
    out = snakemake(work, CUBE, "--cores", "2", "--configfile", "own.yaml", "--quiet", "rules")
    assert "trajectories_own_" in out, out[-3000:]
    ours = open_cube(work / CUBE)
    assert not np.array_equal(ours["tv"].sel(action="mine").values, before)

    (tmp_path / "edited.py").write_text(edited.replace("NegKnormPress", "EditedNegKnormPress"))
    mine = load_press_modules([tmp_path / "edited.py"])["EditedNegKnormPress"]
    config = yaml.safe_load((work / "own.yaml").read_text())
    loaded = load_model("tiny", {**config["models"]["tiny"], "dtype": "float32"}, work / "results/models")
    doc_id = "own-ruler_512-0000"
    record = next(d for d in read_jsonl(work / "results/own/documents/ruler_512.jsonl") if d.id == doc_id).to_record()
    fresh = kvdiv.compare(
        loaded.model,
        loaded.tokenizer,
        [record],
        actions={"mine": mine(compression_ratio=0.5), "ada_mine": AdaKVPress(press=mine(compression_ratio=0.5))},
        horizon=4,
        replicates=2,
        temperature=config["studies"]["own"]["temperature"],
        seed=config["seed"],
        study_seed=config["studies"]["own"]["seed"],
        progress=False,
    ).dataset
    for action in ("mine", "ada_mine"):
        for name in ("x", "y", "tv"):
            np.testing.assert_array_equal(
                fresh[name].sel(action=action).values, ours[name].sel(action=action).values, err_msg=(action, name)
            )
    (work / "presses/mine.py").write_text(PRESS.format(edit=""))
