"""rules/trajectories.smk end to end on a tiny random model: stores, cube, reruns, and a killed job."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvdiv.inspect import summarize
from kvdiv.store import open_cube, read_document_store

REPO = Path(__file__).resolve().parents[1]
CONFIG = {
    "seed": 7,
    "models": {"tiny": {"source": "random", "architecture": "llama", "tokenizer": "bytes", "device": "cpu", "threads": 1}},
    "actions": {
        "snapkv_half": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8},
        "recent_half": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 0},
    },
    "studies": {
        "tiny": {"seed": 3, "actions": ["snapkv_half", "recent_half"], "documents_per_stratum": 2,
                 "strata": [{"family": "ruler", "length": 512}], "horizon": 8, "replicates": 2, "temperature": 4.0},
    },
}
CUBE = "results/tiny/cube/tiny.zarr"
STORE = "results/tiny/trajectories/tiny/tiny-ruler_512-0000.zarr"

pytestmark = pytest.mark.workflow


def snakemake(work: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=work, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=str(work)))
    if check and proc.returncode != 0:
        pytest.fail(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc.stdout + proc.stderr


def write_config(work: Path, name: str, **study) -> str:
    config = yaml.safe_load(yaml.safe_dump(CONFIG, sort_keys=False))
    config["studies"]["tiny"].update(study)
    (work / name).write_text(yaml.safe_dump(config, sort_keys=False))
    return name


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wf") / "repo"
    ignore = shutil.ignore_patterns(".venv", ".git", "results", "logs", ".snakemake", "__pycache__", ".pytest_cache", "*.egg-info")
    shutil.copytree(REPO, work, ignore=ignore)
    cfg = write_config(work, "tiny.yaml")
    snakemake(work, CUBE, "--cores", "2", "--configfile", cfg)
    return work


def test_stores_and_cube(work):
    ds = open_cube(work / CUBE)
    assert ds.sizes == {"document": 2, "action": 2, "replicate": 2, "step": 8}
    assert list(ds["document"].values) == ["tiny-ruler_512-0000", "tiny-ruler_512-0001"]
    assert set(ds["stratum"].values) == {"ruler_512"} and np.all(ds["prompt_tokens"].values > 0)
    attrs, data = read_document_store(work / STORE)
    assert attrs["horizon"] == 8 and attrs["seed"]["master"] == 7 and attrs["seed"]["study"] == 3
    assert np.array_equal(ds["x"].sel(document="tiny-ruler_512-0000", action="recent_half").values, data["recent_half"]["x"])
    tv = ds["tv"].values
    assert np.all((tv >= 0) & (tv <= 1)) and np.all(tv[..., 0] == 0)
    assert np.array_equal(ds["match"].values, ds["x"].values == ds["y"].values)
    assert summarize(work / CUBE)["actions"]["snapkv_half"]["replicates"] == 4
    assert (work / "results/benchmarks/trajectories/tiny/tiny/tiny-ruler_512-0000.tsv").is_file()
    assert (work / "logs/trajectories/tiny/tiny/tiny-ruler_512-0000.log").is_file()


def test_rerun_triggers(work):
    out = snakemake(work, CUBE, "-n", "--cores", "2", "--configfile", "tiny.yaml")
    assert "Nothing to be done" in out
    cfg = write_config(work, "tiny_r3.yaml", replicates=3)
    out = snakemake(work, CUBE, "-n", "--cores", "2", "--configfile", cfg, "--quiet", "rules")
    assert "trajectories" in out and "cube" in out
    assert "documents" not in out and "resolve_model" not in out


def test_swrb_mode_through_the_workflow(work):
    cfg = write_config(work, "tiny_swrb.yaml", mode="swrb")
    out = snakemake(work, CUBE, "--cores", "2", "--configfile", cfg, "--quiet", "rules")
    assert "documents" not in out and "resolve_model" not in out
    ds = open_cube(work / CUBE)
    assert ds.attrs["mode"] == "swrb" and ds["branch_start"].dims == ("document", "action", "replicate")
    J = ds["branch_start"].values
    assert np.all((J >= 0) & (J <= 8)) and np.any(J > 0)
    m = ds["match"].values
    for idx in zip(*np.nonzero(J)):  # the sampled path agrees before J and splits at J
        assert np.all(m[idx][: J[idx] - 1]) and not m[idx][J[idx] - 1]
    assert np.all(m[J == 0])


def test_killed_job_leaves_nothing_complete(work):
    # near-greedy sampling of the random model rarely hits EOS: thousands of decode steps
    cfg = write_config(work, "tiny_long.yaml", horizon=3000, replicates=4, temperature=0.05)
    log_name = "logs/trajectories/tiny/tiny/tiny-ruler_512-0000.log"
    store = work / STORE
    (work / log_name).unlink()
    shutil.rmtree(store)

    def generating() -> bool:  # the job runs in a shadow directory; its log moves out only at the end
        return any("coupled steps" in p.read_text() for p in (work / ".snakemake/shadow").glob(f"*/{log_name}"))

    proc = subprocess.Popen([sys.executable, "-m", "snakemake", STORE, "--cores", "1", "--configfile", cfg],
                            cwd=work, env=dict(os.environ, PYTHONPATH=str(work)), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not generating():
            time.sleep(0.2)
        assert generating(), "the job never started generating"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not store.exists(), sorted(p.name for p in store.iterdir())
    snakemake(work, "--unlock", "--cores", "1", "--configfile", cfg)
    out = snakemake(work, STORE, "-n", "--cores", "1", "--configfile", cfg, "--quiet", "rules")
    assert "trajectories" in out
