"""Decode-time compression through snakemake: kvpress's DecodingPress and PrefillDecodingPress, and a DecodingPress
scoring with the user's own press, run as actions into the stores, the cube, the leaderboard and ``kvdiv show``; a
decode-only action's δ is 0 until its first cut changes a law."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvdiv.trajectories.store import open_cube

from test_press_modules_workflow import PRESS
from test_trajectories_workflow import IGNORE, REPO
from test_trajectories_workflow import snakemake as _snakemake

snakemake = functools.partial(_snakemake, timeout=1800)

pytestmark = pytest.mark.workflow

INTERVAL = 3
DECODE = {
    "press": "DecodingPress",
    "compression_interval": INTERVAL,
    "target_size": 256,
    "wraps": {"press": "KnormPress"},
}
CONFIG = {
    "seed": 7,
    "press_modules": ["presses/mine.py"],
    "models": {
        "tiny": {"source": "random", "architecture": "llama", "tokenizer": "bytes", "device": "cpu", "threads": 1}
    },
    "actions": {
        "knorm_half": {"press": "KnormPress", "compression_ratio": 0.5},
        "decode_knorm": DECODE,
        "decode_mine": {**DECODE, "wraps": {"press": "NegKnormPress"}},
        "prefill_decode": {
            "press": "PrefillDecodingPress",
            "prefilling_press": {"press": "KnormPress", "compression_ratio": 0.5},
            "decoding_press": {**DECODE, "target_size": 128},
        },
    },
    "studies": {
        "decoding": {
            "seed": 3,
            "actions": ["knorm_half", "decode_knorm", "decode_mine", "prefill_decode"],
            "documents_per_stratum": 2,
            "strata": [{"family": "ruler", "length": 512}],
            "horizon": 12,
            "replicates": 2,
            "temperature": 4.0,
        },
    },
    "leaderboard": {"study": "decoding", "steps": [4, 12]},
}
CUBE = "results/decoding/cube/tiny.zarr"
STORE = "results/decoding/trajectories/tiny/decoding-ruler_512-0000.zarr"
LEADERBOARD = "results/leaderboard/tiny.md"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("decoding") / "repo"
    shutil.copytree(REPO, work, ignore=IGNORE)
    (work / "presses").mkdir()
    (work / "presses/mine.py").write_text(PRESS.format(edit=""))
    (work / "decoding.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    snakemake(work, CUBE, LEADERBOARD, "--cores", "2", "--configfile", "decoding.yaml")
    return work


def test_decoding_actions_run_into_the_cube_and_the_leaderboard(work):
    ds = open_cube(work / CUBE)
    assert list(ds["action"].values) == ["knorm_half", "decode_knorm", "decode_mine", "prefill_decode"]
    for action in ("decode_knorm", "decode_mine"):
        tv = ds["tv"].sel(action=action).values  # [document, replicate, step]
        # the first cut (end of decode forward 3) changes the law of step 5 at the earliest
        assert np.all(tv[..., : INTERVAL + 1] == 0), action
        assert np.all(ds["match"].sel(action=action).values[..., : INTERVAL + 1]), action
        assert (tv[..., INTERVAL + 1 :] > 0).any(), action
    # the user's scorer keeps other entries than kvpress's KnormPress: other laws
    assert not np.array_equal(ds["tv"].sel(action="decode_mine").values, ds["tv"].sel(action="decode_knorm").values)
    # prefill half, then cuts to 128 while decoding: laws differ from step 2 on, more than the prefill half alone
    both, half = ds["tv"].sel(action="prefill_decode").values, ds["tv"].sel(action="knorm_half").values
    assert (both[..., 1:] > 0).any() and not np.array_equal(both, half)
    board = (work / LEADERBOARD).read_text()
    assert "DecodingPress(KnormPress; target_size 256, compression_interval 3)" in board
    assert "DecodingPress(NegKnormPress; target_size 256, compression_interval 3)" in board
    assert "PrefillDecodingPress(KnormPress, DecodingPress(KnormPress; target_size 128" in board


def test_kvdiv_show_decodes_a_decoding_action(work):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvdiv.cli",
            "show",
            STORE,
            "--action",
            "decode_knorm",
            "--color",
            "never",
            "--width",
            "100",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "decode_knorm" in out.stdout
