"""Every config beside every other (issue 26): each config's outputs, logs and job benchmarks lie under its own root
(config key `results`), so two configs run in one working directory keep each other's outputs; and the workflow
runs from any working directory (`snakemake -s CHECKOUT/Snakefile -d DIR`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvdiv.names import check_results_root

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "config").glob("*.yaml"))


def snakemake(workdir: Path, config: Path, *args: str) -> str:
    """``snakemake -s REPO/Snakefile -d workdir --configfile config ...`` from another directory; fails the test
    with the output if it exits non-zero."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        *args,
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(workdir),
        "--configfile",
        str(config),
    ]
    proc = subprocess.run(
        cmd,
        cwd=REPO.parent,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc.stdout + proc.stderr


def planned_paths(workdir: Path, config: Path) -> set[str]:
    """Every output, log and benchmark path the workflow plans for ``config`` (the job list of ``snakemake -n``)."""
    out = set()
    for line in snakemake(workdir, config, "-n").splitlines():
        key, _, value = line.strip().partition(": ")
        if key in ("output", "log", "benchmark"):
            out.update(path.strip() for path in value.split(",") if path.strip())
    return out


def tiny_config(tmp_path: Path, name: str, root: str, seed: int) -> Path:
    """config/smoke.yaml with its own output root and seed, one document per stratum."""
    config = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    config.update(results=root, seed=seed)
    for study in config["studies"].values():
        study["documents_per_stratum"] = 1
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_shipped_configs_have_distinct_roots():
    roots = {
        path.name: check_results_root(yaml.safe_load(path.read_text()).get("results", "results"))
        for path in SHIPPED
        if path.name != "schema.yaml"
    }
    assert len(set(roots.values())) == len(roots), roots
    assert roots["config.yaml"] == "results" and roots["smoke.yaml"] == "results/smoke", roots
    # every other root is a directory of its own under results/, never a study of the default config
    default_studies = set(yaml.safe_load((REPO / "config/config.yaml").read_text())["studies"])
    for name, root in roots.items():
        if name != "config.yaml":
            assert root.startswith("results/") and root.split("/")[1] not in default_studies, (name, root)


@pytest.mark.workflow
def test_two_configs_in_one_directory_keep_their_outputs(tmp_path):
    work = tmp_path / "run"  # a working directory that is not the checkout: snakemake -d
    work.mkdir()
    a, b = tiny_config(tmp_path, "a.yaml", "results/a", 7), tiny_config(tmp_path, "b.yaml", "results/b", 8)

    # planning (from a working directory without the package data: the paper's values are found beside the
    # Snakefile): every output, log and benchmark of each config lies under its own root, and the two share no path
    paths_a, paths_b = planned_paths(work, a), planned_paths(work, b)
    assert "results/a/finite_state/paper_comparison.md" in paths_a
    assert paths_a and all(p.startswith("results/a/") for p in paths_a), sorted(paths_a)[:5]
    assert paths_b and all(p.startswith("results/b/") for p in paths_b), sorted(paths_b)[:5]
    assert any("/logs/" in p for p in paths_a) and any("/benchmarks/" in p for p in paths_a)
    assert not paths_a & paths_b

    # one real run of a (model, document blocks, trajectories, a cube)
    targets = ["results/a/retention50/cube/tiny.zarr"]
    snakemake(work, a, *targets, "--cores", "2")
    for target in targets:
        assert (work / target).exists(), target
    assert not (work / "results/b").exists() and not (work / "logs").exists()
    # b plans its own jobs (a's outputs do not satisfy it), and planning b leaves a complete
    assert "Nothing to be done" not in snakemake(work, b, *(t.replace("results/a", "results/b") for t in targets), "-n")
    assert "Nothing to be done" in snakemake(work, a, *targets, "-n")


@pytest.mark.workflow
def test_a_second_config_in_a_root_is_refused_naming_both(tmp_path):
    """Each root records its owner (kvdiv.config.roots) when a run starts (a dry run writes nothing): planning a copy
    of a config (another file) into the same root is refused naming both files; the owner itself, edited, still
    plans."""
    work = tmp_path / "run"
    work.mkdir()
    a = tiny_config(tmp_path, "a.yaml", "results/a", 7)
    snakemake(work, a, "-n")
    assert not (work / "results/a").exists()
    snakemake(work, a, "results/a/models/tiny/provenance.json", "--cores", "1")  # a real run (seconds) claims it
    assert yaml.safe_load((work / "results/a/kvdiv-root.json").read_text())["owner"] == f"config file {a}"
    copy = tmp_path / "copy.yaml"
    copy.write_text(a.read_text())
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(work)]
    proc = subprocess.run(
        [*cmd, "--configfile", str(copy)],
        cwd=REPO.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"belongs to config file {a}" in out and f"config file {copy} plans" in out, out
    a.write_text(a.read_text().replace("seed: 7", "seed: 9"))  # the owner edited: still its root
    snakemake(work, a, "-n")
