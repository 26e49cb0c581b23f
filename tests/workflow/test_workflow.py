"""The workflow as a user runs it: lint, dry runs of every shipped config, and the smoke study end to end
with Snakemake's rerun behaviour (nothing to do; a plotting option reruns only figures; a new document
reruns only its own job and what depends on it).

Snakemake runs in a subprocess in a temporary copy of the repository (its API changes the working dir).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from support.checkout import checkout_ignore

import polars as pl
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def run_snakemake(workdir: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run snakemake in ``workdir``; fail the test with its output if it exits non-zero."""
    env = dict(os.environ, PYTHONPATH=str(workdir))
    proc = subprocess.run([*SNAKEMAKE, *args], cwd=workdir, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        pytest.fail(
            f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )
    return proc


def copy_repo(dest: Path) -> Path:
    """A copy of the workflow (no results, no venv, no git) to run snakemake in."""
    ignore = checkout_ignore(REPO)
    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def test_lint_is_clean():
    proc = run_snakemake(REPO, "--lint", "--cores", "1")
    assert "Congratulations" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "configfile",
    ["config/config.yaml", "config/smoke.yaml", "config/paper.yaml", "config/presses.yaml", "config/replication.yaml"],
)
def test_dry_run_builds_dag(configfile, tmp_path):
    work = copy_repo(tmp_path / "wf")
    proc = run_snakemake(work, "-n", "--cores", "2", "--configfile", configfile, "--quiet", "rules")
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert jobs["trajectories"] > 0 and jobs["figure"] == 4 and jobs["finite_figure4"] == 1, jobs  # 5-7, endings
    # a leaderboard only where the config asks for one (config/presses.yaml: one model)
    assert jobs.get("leaderboard", 0) == (1 if configfile == "config/presses.yaml" else 0), jobs
    assert jobs["answers"] == jobs["metrics"] == jobs["gallery"] == jobs["cube"], jobs


def test_paper_config_replaces_default_models(tmp_path):
    """--configfile paper.yaml must not inherit the embedded default's SmolLM2 model (no config merge)."""
    work = copy_repo(tmp_path / "wf")
    proc = run_snakemake(work, "-n", "--cores", "2", "--configfile", "config/paper.yaml", "--printshellcmds")
    out = proc.stdout + proc.stderr
    assert "models/smollm2" not in out
    assert "llama" in out and "qwen" in out


def planned_jobs(out: str) -> dict[str, int]:
    """{rule: job count} from the job table snakemake prints for a dry run with ``--quiet rules``; the trajectory
    batch rules (``trajectories_<study>_<model>_<batch>``, rules/trajectories.smk) count as ``trajectories``."""
    by_rule = {}
    for line in out.splitlines():
        m = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s+(\d+)\s*", line)
        if m and m.group(1) not in {"total", "job", "count"}:
            by_rule[m.group(1)] = int(m.group(2))  # (the table may be printed twice)
    jobs = {}
    for rule, count in by_rule.items():
        rule = "trajectories" if rule.startswith("trajectories_") else rule
        jobs[rule] = jobs.get(rule, 0) + count
    return jobs


def write_variant(work: Path, edit) -> str:
    """config/smoke.yaml (as shipped) changed by ``edit(config)``, written over the working copy's
    config/smoke.yaml: the user editing their config (a copy under another name is another config, which may not
    plan into this config's root: kvdiv.config.roots)."""
    config = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    edit(config)
    (work / "config/smoke.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return "config/smoke.yaml"


@pytest.mark.workflow
def test_smoke_study_end_to_end_and_reruns(tmp_path):
    """`snakemake` on config/smoke.yaml builds Figures 4-7, Tables 2-3, the accuracy table, the galleries and the
    report (and `snakemake --report` the HTML report with the galleries); a second run does
    nothing; a plotting option reruns only figure rules; one more document per stratum in one study reruns
    only the new documents' jobs and what depends on them."""
    work = copy_repo(tmp_path / "wf")
    run_snakemake(work, "--cores", "2", "--configfile", "config/smoke.yaml")
    results = work / "results/smoke"  # config/smoke.yaml's output root
    for name in ["finite_state/figure4", "figures/figure5", "figures/figure6", "figures/figure7"]:
        for ext in ("pdf", "png"):
            assert (results / f"{name}.{ext}").stat().st_size > 1000, f"{name}.{ext} missing or empty"
    for table in ("table2", "table3"):
        for ext in ("csv", "md", "tex"):
            assert (results / f"tables/{table}.{ext}").stat().st_size > 0
    report = (results / "report.md").read_text()
    assert "Figure 5" in report and "paper" in report
    # the accuracy section (kvdiv.analysis.accuracy): one pooled row per action of its study, and the table
    section = report.split("## Accuracy: does divergence change the answer? (retention50)")[1]
    for action in ("snapkv_half", "snapkv_512", "recent_half"):
        assert f"| tiny | {action} | 4 |" in section, section[:2000]
    assert (results / "tables/accuracy.csv").stat().st_size > 0
    for study in ("retention50", "retention90"):
        assert (results / study / "documents/ruler_768.jsonl").read_text().count("\n") == 2
        assert (results / study / "cube/tiny.zarr").is_dir()
        reps = pl.read_parquet(results / study / "metrics/tiny/replicates.parquet")
        for column in ("correct_x", "correct_y", "answer_changed", "answer_end", "diverged_before_answer"):
            assert column in reps.columns, column
        assert reps["correct_x"].null_count() == 0 and reps["correct_x"].is_between(0, 1).all()
        gallery = (results / f"figures/gallery/{study}/tiny.html").read_text()
        assert gallery.count("<h2>") == len(set(reps["action"])) and "http" not in gallery.replace("http-equiv", "")

    # snakemake --report: the HTML report carries the galleries
    run_snakemake(work, "--configfile", "config/smoke.yaml", "--report", "results/smoke/report.html")
    html = (results / "report.html").read_text(errors="replace")
    assert "Galleries" in html and "Divergence gallery" in html
    # report.md and the tables as pages, which the HTML report shows inline (it offers .md/.csv only as downloads)
    for page in ("report.md.html", "tables/claims.html", "tables/table2.html", "tables/table3.html"):
        assert page.rsplit("/", 1)[-1] in html, page
    page = (results / "report.md.html").read_text()
    assert "<table>" in page and "data:image/png;base64," in page and "Claims" in page

    out = run_snakemake(work, "-n", "--cores", "2", "--configfile", "config/smoke.yaml").stdout
    assert "Nothing to be done" in out

    # the same config with every model and action spec's keys in reverse order: nothing to do
    def reverse_keys(config):
        for section in ("models", "actions"):
            config[section] = {name: dict(reversed(list(spec.items()))) for name, spec in config[section].items()}

    reordered = write_variant(work, reverse_keys)
    out = run_snakemake(work, "-n", "--cores", "2", "--configfile", reordered).stdout
    assert "Nothing to be done" in out

    # a plotting option: only figure rules rerun
    dpi = write_variant(work, lambda c: c["plotting"].update(dpi=90))
    jobs = planned_jobs(run_snakemake(work, "-n", "--cores", "2", "--configfile", dpi, "--quiet", "rules").stdout)
    assert jobs and set(jobs) - {"all"} <= {"figure", "finite_figure4", "report_page"}, jobs  # the page inlines them
    assert jobs.get("figure", 0) == 4  # figures 5, 6 and 7 and endings

    # one more document per stratum in retention50: its document + trajectory jobs and what depends on them
    def add_document(config):
        config["studies"]["retention50"]["documents_per_stratum"] = 3

    more = write_variant(work, add_document)
    jobs = planned_jobs(run_snakemake(work, "-n", "--cores", "2", "--configfile", more, "--quiet", "rules").stdout)
    # one new document per stratum: its block's document job and trajectory job (documents 0-3 of the stratum)
    assert jobs.get("document") == 2 and jobs.get("trajectories") == 2, jobs
    assert jobs.get("cube") == 1 and jobs.get("metrics") == 1 and jobs.get("answers") == 1, jobs  # retention50 only
    assert jobs.get("gallery") == 1, jobs
    assert not {"resolve_model", "finite_systems", "finite_exact", "finite_estimates"} & set(jobs), jobs


def test_paper_dag_through_the_slurm_workflow_profile(tmp_path):
    """The paper's study (2 models x 576 documents) plans through profiles/slurm: one GPU trajectory job per
    (study, model, block of 16 documents), with the profile's resources for `trajectories`; document blocks grouped
    12 to a SLURM job: 134 SLURM submissions (docs/slurm.md)."""
    work = copy_repo(tmp_path / "wf")
    proc = run_snakemake(work, "-n", "--workflow-profile", "profiles/slurm", "--configfile", "config/paper.yaml")
    jobs = planned_jobs(proc.stdout + proc.stderr)
    # documents in blocks of the reference tokenizer model's documents_per_job (16): 3 per stratum and study
    assert jobs["trajectories"] == 2 * 2 * 6 * (48 // 16) and jobs["document"] == 2 * 6 * (48 // 16), jobs
    # one SLURM job per job, but `all` (no action: run by snakemake itself) and the document blocks, 12 to a group job
    groups = (proc.stdout + proc.stderr).count("Group job documents")
    assert groups == 2 * 6 * (48 // 16) // 12
    # (and the Markdown pages of the HTML report: local rules, run by snakemake itself)
    local = jobs["all"] + jobs.get("report_page", 0) + jobs.get("table_page", 0)
    assert jobs["report_page"] == 1 and jobs["table_page"] >= 3, jobs
    assert sum(jobs.values()) - local - jobs["document"] + groups == 134, jobs
    # the profile's set-resources for `trajectories` reach every batch rule
    store = "results/paper/retention50/trajectories/llama/retention50-ruler_4096-0005.zarr"
    out = run_snakemake(work, store, "-n", "--workflow-profile", "profiles/slurm", "--configfile", "config/paper.yaml")
    block = out.stdout[out.stdout.index("rule trajectories_retention50_llama_ruler_4096_0000_0015") :]
    resources = next(line for line in block.splitlines() if line.strip().startswith("resources:"))
    for setting in ("slurm_partition=gpu", "gpu=1", "gpu_model=a100", "cpus_per_task=4", "runtime=120", "mem_mb=64000"):
        assert setting in resources, resources
    assert jobs["cube"] == 4 and jobs["resolve_model"] == 2, jobs


def test_cpu_model_through_the_gpu_profile_asks_for_no_gpu(tmp_path):
    """config/smoke.yaml's model runs on `device: cpu`: through profiles/slurm its trajectory jobs keep the
    profile's memory, CPUs and runtime for `trajectories` but ask for no GPU (gpu=0, no gpu_model) and go to the
    default partition, not the GPU one (kvdiv.cluster.trajectory_resources)."""
    work = copy_repo(tmp_path / "wf")
    out = run_snakemake(work, "-n", "--workflow-profile", "profiles/slurm", "--configfile", "config/smoke.yaml").stdout
    blocks = [block for block in out.split("\nrule ")[1:] if block.startswith("trajectories_")]
    assert len(blocks) == 4, out[-3000:]
    for block in blocks:
        resources = next(line for line in block.splitlines() if line.strip().startswith("resources:"))
        for setting in ("slurm_partition=cpu", "gpu=0", "cpus_per_task=4", "runtime=120", "mem_mb=64000"):
            assert setting in resources, resources
        assert "gpu_model" not in resources and "slurm_partition=gpu" not in resources, resources


def test_conda_env_pins_match_pyproject():
    """envs/kvdiv.yaml (for --sdm conda) installs exactly the dependencies pyproject.toml pins."""
    import tomllib

    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((REPO / "envs/kvdiv.yaml").read_text())
    pip = next(item["pip"] for item in env["dependencies"] if isinstance(item, dict) and "pip" in item)
    assert sorted(pip) == sorted(pins)


# Witnesses at the workflow level, one per kind of start-up check (a reference, an action's press, the results root);
# every other case runs in-process on the same functions (tests/test_config.py: rules/common.smk calls exactly them).
@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c["studies"]["retention50"]["actions"].append("snapkv_typo"),
            "studies.retention50.actions: 'snapkv_typo'",
        ),
        # actions are validated when the workflow starts, not inside trajectory jobs
        (lambda c: c["actions"]["snapkv_half"].update(window_size=-1), "'window_size' = -1 is out of range"),
        (lambda c: c.update(results="../elsewhere"), "results: '../elsewhere'"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path, edit, message):
    work = copy_repo(tmp_path / "wf")
    bad = write_variant(work, edit)
    proc = subprocess.run(
        [*SNAKEMAKE, "-n", "--cores", "1", "--configfile", bad],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(work)),
    )
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


def test_a_changed_action_is_validated_again(tmp_path):
    """Validation is skipped for an actions section already validated (a marker under .snakemake/kvdiv/), never
    for a changed one."""
    work = copy_repo(tmp_path / "wf")
    run_snakemake(work, "-n", "--cores", "1", "--configfile", "config/smoke.yaml")
    assert len(list((work / ".snakemake/kvdiv").glob("actions-valid-*"))) == 1
    bad = write_variant(work, lambda c: c["actions"]["snapkv_half"].update(window_size=-1))
    proc = subprocess.run(
        [*SNAKEMAKE, "-n", "--cores", "1", "--configfile", bad],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(work)),
    )
    assert proc.returncode != 0 and "'window_size' = -1 is out of range" in proc.stdout + proc.stderr
