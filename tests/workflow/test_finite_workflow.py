"""The finite-state stage as a user runs it: ``snakemake results/finite_state/figure4.png`` in a fresh copy,
then nothing to do, then a params change (the window L) that reruns only what depends on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from support.checkout import checkout_ignore

import polars as pl
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TARGET = "results/finite_state/figure4.png"

pytestmark = pytest.mark.workflow


def snakemake(workdir: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(workdir)),
    )
    if proc.returncode != 0:
        pytest.fail(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc.stdout + proc.stderr


def test_finite_state_stage_end_to_end(tmp_path):
    ignore = checkout_ignore(REPO)
    work = Path(shutil.copytree(REPO, tmp_path / "wf", ignore=ignore))
    config = yaml.safe_load((work / "config/config.yaml").read_text())
    config["finite_state"]["replicates"] = 3000
    (work / "config/finite_test.yaml").write_text(yaml.safe_dump(config))
    common = ["--cores", "2", "--configfile", "config/finite_test.yaml"]  # last: --configfile takes several values

    snakemake(work, TARGET, *common)
    for name in ("figure4.png", "figure4.pdf", "paper_comparison.csv", "paper_comparison.md"):
        assert (work / "results/finite_state" / name).stat().st_size > 0
    assert len(list((work / "results/finite_state/systems").glob("*.json"))) == 24
    comparison = pl.read_parquet(work / "results/finite_state/comparison.parquet")
    assert comparison.height == 24
    assert (comparison["variance_ratio"] > 1).all()
    estimates = pl.read_parquet(work / "results/finite_state/estimates.parquet")
    assert estimates.height == 48 and (estimates["replicates"] == 3000).all()
    paper = pl.read_csv(work / "results/finite_state/paper_comparison.csv")
    assert paper.filter(pl.col("quantity").str.contains("median"))["paper"].item() == pytest.approx(52.7)

    assert "Nothing to be done" in snakemake(work, TARGET, *common)
    # the checkout's path spelt another way (snakemake -s ../wf/Snakefile -d wf, a moved or linked checkout) reruns
    # nothing: the paper's values used to be a path input of finite_compare, whose changed input set replanned it and
    # finite_figure4; a newer file time on them reruns nothing either; an edit of them does (the code hash)
    (tmp_path / "elsewhere").mkdir()
    config_path = str(work / "config/finite_test.yaml")
    other = subprocess.run(
        [sys.executable, "-m", "snakemake", TARGET, "-n", "--cores", "2", "-s", "../wf/Snakefile", "-d", str(work)]
        + ["--configfile", config_path],
        cwd=tmp_path / "elsewhere",
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(work)),
    )
    assert "Nothing to be done" in other.stdout + other.stderr, (other.stdout + other.stderr)[-3000:]
    paper_values = work / "kvdiv/data/paper_reported_values.yaml"
    os.utime(paper_values, (time.time() + 60, time.time() + 60))
    assert "Nothing to be done" in snakemake(work, TARGET, "-n", *common)
    paper_values.write_text(paper_values.read_text() + "\n# edited\n")
    out = snakemake(work, TARGET, "-n", "--quiet", "rules", *common)
    assert "finite_compare" in out and "finite_figure4" in out and "finite_exact" not in out, out[-2000:]
    paper_values.write_text(paper_values.read_text().removesuffix("\n# edited\n"))

    config["finite_state"]["window"] = 3
    (work / "config/finite_test.yaml").write_text(yaml.safe_dump(config))
    out = snakemake(work, TARGET, "-n", "--quiet", "rules", *common)
    assert "finite_exact" in out and "finite_estimates" in out and "finite_figure4" in out
    assert "finite_systems" not in out
