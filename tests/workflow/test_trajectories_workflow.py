"""rules/trajectories.smk end to end on a tiny random model: stores, cube, reruns, killed and interrupted runs,
inputs that rerun their rules when edited, and a corrupt metrics file."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from kvdiv.trajectories.summary import summarize
from kvdiv.trajectories.store import open_cube, read_document_store, read_store_arrays, verify_store
from support.checkout import checkout_ignore

REPO = Path(__file__).resolve().parents[2]
CONFIG = {
    "seed": 7,
    "results_owner": "trajectories-tests",  # the variants below (tiny_more.yaml, ...) edit one experiment
    "models": {
        "tiny": {"source": "random", "architecture": "llama", "tokenizer": "bytes", "device": "cpu", "threads": 1}
    },
    "actions": {
        "snapkv_half": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8},
        "recent_half": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 0},
    },
    "studies": {
        "tiny": {
            "seed": 3,
            "actions": ["snapkv_half", "recent_half"],
            "documents_per_stratum": 2,
            "strata": [{"family": "ruler", "length": 512}],
            "horizon": 8,
            "replicates": 2,
            "temperature": 4.0,
        },
    },
}
CUBE = "results/tiny/cube/tiny.zarr"
STORE = "results/tiny/trajectories/tiny/tiny-ruler_512-0000.zarr"
METRICS = [f"results/tiny/metrics/tiny/{name}.parquet" for name in ("replicates", "profiles_aligned", "profiles_clock")]
IGNORE = checkout_ignore(REPO)

pytestmark = pytest.mark.workflow


def snakemake(work: Path, *args: str, check: bool = True, timeout: int = 600) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(work)),
    )
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
    shutil.copytree(REPO, work, ignore=IGNORE)
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
    assert np.array_equal(
        ds["x"].sel(document="tiny-ruler_512-0000", action="recent_half").values, data["recent_half"]["x"]
    )
    tv = ds["tv"].values
    assert np.all((tv >= 0) & (tv <= 1)) and np.all(tv[..., 0] == 0)
    assert np.array_equal(ds["match"].values, ds["x"].values == ds["y"].values)
    assert summarize(work / CUBE)["actions"]["snapkv_half"]["replicates"] == 4
    # one job for the stratum's block of documents 0-3 (documents_per_job 4)
    assert (work / "results/benchmarks/trajectories/tiny/tiny/ruler_512-0000-0003.tsv").is_file()
    assert (work / "results/logs/trajectories/tiny/tiny/ruler_512-0000-0003.log").is_file()


def store_values(root: Path) -> dict:
    """{store: (attributes without wall times, {array: values})} of every store under ``root``."""
    out = {}
    for path in sorted(root.glob("results/tiny/**/*.zarr")):
        attrs, arrays = read_store_arrays(path)
        attrs = {k: v for k, v in attrs.items() if "wall_time" not in k and k != "prefill_s"}
        if "checksums" in attrs:  # the arrays' digests; the attributes' own digest covers the wall times too
            attrs["checksums"] = {k: v for k, v in attrs["checksums"].items() if k != ".attributes"}
        out[str(path.relative_to(root))] = (attrs, arrays)
    return out


def assert_same_values(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and len(a) == 3  # two documents and the cube
    for key in a:
        assert a[key][0] == b[key][0], key
        assert a[key][1].keys() == b[key][1].keys(), key
        for name, values in a[key][1].items():
            assert np.array_equal(values, b[key][1][name]), (key, name)


def _stop_when(work: Path, args: list[str], done, sig: int, what: str = "the run ended", limit: int = 300) -> None:
    """Run ``snakemake args`` in ``work`` (its own process group); send ``sig`` to the group once ``done()`` holds
    (polled; the test fails with ``what`` if the run ends first or ``limit`` seconds pass)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", *args],
        cwd=work,
        env=dict(os.environ, PYTHONPATH=str(work)),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + limit
        while time.time() < deadline and not done() and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None and done(), f"{what} before it could be stopped with {sig!r}"
    finally:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=120)


def test_interrupted_run_resumes_to_the_uninterrupted_results(work, tmp_path):
    """A run on 1 core stopped mid-way, first with Ctrl-C (SIGINT, once its stores exist), then, resumed, killed
    (SIGKILL, once its cube exists), leaves no partial output each time; rerun, it finishes with stores
    value-identical and metrics byte-identical to the uninterrupted run on 2 cores of the `work` fixture."""
    snakemake(work, *METRICS, "--cores", "2", "--configfile", "tiny.yaml")
    fresh = Path(shutil.copytree(REPO, tmp_path / "repo", ignore=IGNORE))
    shutil.copy(work / "tiny.yaml", fresh / "tiny.yaml")
    stores = fresh / "results/tiny/trajectories/tiny"

    def complete_so_far() -> None:  # whatever sits at a final path is complete
        for store in [*stores.glob("*.zarr"), *([fresh / CUBE] if (fresh / CUBE).exists() else [])]:
            verify_store(store)

    run = [*METRICS, "--cores", "1", "--configfile", "tiny.yaml"]
    _stop_when(fresh, run, lambda: bool(list(stores.glob("*.zarr"))), signal.SIGINT)
    assert not (fresh / CUBE).exists()
    complete_so_far()
    _stop_when(fresh, [*run, "--rerun-incomplete"], lambda: (fresh / CUBE / "zarr.json").exists(), signal.SIGKILL)
    assert not (fresh / METRICS[0]).exists()
    complete_so_far()
    snakemake(fresh, "--unlock", "--cores", "1", "--configfile", "tiny.yaml")
    snakemake(fresh, *METRICS, "--cores", "1", "--configfile", "tiny.yaml", "--rerun-incomplete")
    assert_same_values(store_values(fresh), store_values(work))
    for name in METRICS:
        assert (fresh / name).read_bytes() == (work / name).read_bytes(), name


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
    # the report section swrb: rule analysis builds its tables from the swrb study's metrics
    config = yaml.safe_load((work / cfg).read_text())
    config["analysis"] = {
        "studies": {"swrb": "tiny"},
        "bootstrap": 20,
        "window": 2,
        "blocks": [[1, 4], [5, 8]],
        "early": [1, 2],
        "late": [3, 4],
        "short_window": [1, 4],
        "cohort_max_tau": 4,
    }
    (work / "analysis_swrb.yaml").write_text(yaml.safe_dump(config))
    targets = ["results/analysis/swrb/variance.parquet", "results/analysis/swrb/enclosure.parquet"]
    snakemake(work, *targets, "--cores", "2", "--configfile", "analysis_swrb.yaml")
    variance = pl.read_parquet(work / targets[0])
    assert set(variance["action"]) == {"snapkv_half", "recent_half", "all"} and (variance["n_documents"] == 2).all()
    enclosure = pl.read_parquet(work / targets[1])
    assert enclosure.height == 2 and (enclosure["window"] == 2).all()
    assert (enclosure["enclosure_lower"] <= enclosure["enclosure_upper"]).all()


def test_killed_job_leaves_nothing_complete(work):
    # near-greedy sampling of the random model rarely hits EOS: thousands of decode steps
    cfg = write_config(work, "tiny_long.yaml", horizon=3000, replicates=4, temperature=0.05)
    log_name = "results/logs/trajectories/tiny/tiny/ruler_512-0000-0003.log"
    store = work / STORE
    (work / log_name).unlink()
    shutil.rmtree(store)

    def generating() -> bool:  # the job runs in a shadow directory; its log moves out only at the end
        return any("coupled steps" in p.read_text() for p in (work / ".snakemake/shadow").glob(f"*/{log_name}"))

    _stop_when(
        work,
        [STORE, "--cores", "1", "--configfile", cfg],
        generating,
        signal.SIGKILL,
        "the job never started generating",
        limit=120,
    )
    assert not store.exists(), sorted(p.name for p in store.iterdir())
    snakemake(work, "--unlock", "--cores", "1", "--configfile", cfg)
    out = snakemake(work, STORE, "-n", "--cores", "1", "--configfile", cfg, "--quiet", "rules")
    assert "trajectories" in out


def test_edited_source_files_rerun_their_rules(work):
    """A user's JSONL, a RULER file and a local model's files are rule inputs: editing one reruns its rule."""
    docs = sorted((work / "results/tiny/documents/ruler_512").glob("*.jsonl"))  # the document blocks
    (work / "mine.jsonl").write_text("".join(p.read_text() for p in docs))
    (work / "ruler_512.jsonl").write_text(
        "".join(
            json.dumps({"index": i, "input": f"Remember {i}. " + "grass is green. " * (5 + i), "outputs": [str(i)]})
            + "\n"
            for i in range(4)
        )
    )
    shutil.copytree(work / "results/models/tiny", work / "mylocal")
    (work / "mylocal/provenance.json").unlink()
    config = yaml.safe_load((work / "tiny.yaml").read_text())
    config["models"]["mylocal"] = {"source": "local", "path": "mylocal"}
    for study, seed, source in (
        ("mine", 11, {"source": "jsonl", "path": "mine.jsonl", "rendered": False}),
        ("rul", 12, {"source": "ruler", "path": "ruler_{length}.jsonl"}),
    ):
        config["studies"][study] = {**config["studies"]["tiny"], "seed": seed, "documents": source, "models": ["tiny"]}
    (work / "inputs.yaml").write_text(yaml.safe_dump(config))
    targets = [
        "results/mine/documents/ruler_512.jsonl",
        "results/rul/documents/ruler_512.jsonl",
        "results/models/mylocal/provenance.json",
    ]
    snakemake(work, *targets, "--cores", "2", "--configfile", "inputs.yaml")
    assert "Nothing to be done" in snakemake(work, *targets, "-n", "--cores", "2", "--configfile", "inputs.yaml")

    for name, key in (("mine.jsonl", "answers"), ("ruler_512.jsonl", "outputs")):  # an edited answer
        path = work / name
        records = [json.loads(line) for line in path.read_text().splitlines()]
        records[0][key] = [answer + "0" for answer in records[0][key]]
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    (work / "mylocal/config.json").write_text((work / "mylocal/config.json").read_text() + "\n")
    out = snakemake(work, *targets, "-n", "--cores", "2", "--configfile", "inputs.yaml")
    for name in ("mine.jsonl", "ruler_512.jsonl", "mylocal/config.json"):
        assert re.search(rf"reason: Updated input files: [^\n]*{re.escape(name)}", out), (name, out[-3000:])


def test_corrupt_metrics_file_is_an_error_in_the_log_and_rebuilt_once_deleted(work):
    """A truncated replicates.parquet stops the next rule with an error naming it (in the job's log too); deleting
    it reruns the metrics."""
    config = yaml.safe_load((work / "tiny.yaml").read_text())
    config["analysis"] = {
        "studies": {"figure5": "tiny"},
        "contrasts": [["recent_half", "snapkv_half"]],
        "bootstrap": 20,
        "blocks": [[1, 4], [5, 8]],
        "early": [1, 2],
        "late": [3, 4],
        "short_window": [1, 4],
        "cohort_max_tau": 4,
        "window": 2,
    }
    (work / "analysis.yaml").write_text(yaml.safe_dump(config))
    target = "results/analysis/figure5/decomposition.parquet"
    snakemake(work, target, "--cores", "2", "--configfile", "analysis.yaml")
    replicates = work / METRICS[0]
    replicates.write_bytes(replicates.read_bytes()[:-64])
    out = snakemake(work, target, "--cores", "2", "--configfile", "analysis.yaml", check=False)
    assert "Error in rule analysis" in out
    log = (work / "results/logs/analysis/figure5/decomposition.log").read_text()
    assert (
        "Traceback (most recent call last)" in log and f"{METRICS[0]}: sha256" in log and "truncated or altered" in log
    )
    replicates.unlink()
    out = snakemake(work, target, "--cores", "2", "--configfile", "analysis.yaml", "--quiet", "rules")
    assert "metrics" in out and "analysis" in out


def test_an_added_action_and_document_compute_only_what_is_new(work):
    """(Last of the module: it leaves a cube of three actions and documents.) Adding an action to a study and a
    document to its stratum reruns the block's trajectory job (its stores hold every action), but the job reuses each
    (document, action) result it computed before (results/cache, kvdiv.trajectories.reuse): it generates only the
    new action's chains for the old documents and every action for the new one; the old values are unchanged.
    (Reused and computed stores equal a job computing everything, value for value: tests/trajectories/test_reuse.py.)"""
    snakemake(work, CUBE, "--cores", "2", "--configfile", "tiny.yaml")
    before = open_cube(work / CUBE).load()
    config = yaml.safe_load((work / "tiny.yaml").read_text())
    config["actions"]["recent_90"] = {"press": "StreamingLLMPress", "compression_ratio": 0.9, "n_sink": 0}
    config["studies"]["tiny"]["actions"].append("recent_90")
    config["studies"]["tiny"]["documents_per_stratum"] = 3
    (work / "tiny_more.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    log = work / "results/logs/trajectories/tiny/tiny/ruler_512-0000-0003.log"
    out = snakemake(work, CUBE, "--cores", "2", "--configfile", "tiny_more.yaml", "--quiet", "rules")
    assert "trajectories" in out
    text = log.read_text()
    old = ["tiny-ruler_512-0000", "tiny-ruler_512-0001"]
    for doc in old:
        assert f"document {doc}: reused snapkv_half, recent_half from the cache; computed recent_90" in text, text
    assert "document tiny-ruler_512-0002: reused" not in text, text
    after = open_cube(work / CUBE)
    assert list(after["action"].values) == ["snapkv_half", "recent_half", "recent_90"]
    assert list(after["document"].values) == [*old, "tiny-ruler_512-0002"]
    kept = dict(document=old, action=["snapkv_half", "recent_half"])
    for name in ("x", "y", "tv", "fixed_tv", "match"):
        assert np.array_equal(after[name].sel(**kept).values, before[name].values), name
    # a shared reference chain: the new action's pairs have the same x
    assert np.array_equal(
        after["x"].sel(document=old, action="recent_90").values, before["x"].sel(action="recent_half").values
    )
