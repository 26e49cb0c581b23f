"""The workflow on a live SLURM cluster (a one-node test cluster: tests/cluster/slurm-up.sh DIR, then
KVDIV_SLURM_DIR=DIR; skipped otherwise), with the CPU profile exactly as a user runs it:

    snakemake --configfile config/smoke.yaml --workflow-profile profiles/slurm-cpu

- a request larger than the node (memory) is refused by sbatch at submission, with SLURM's message, not left pending;
- a trajectory job killed by SLURM (``scancel``) mid-run is reported with its SLURM log, and the run's other jobs
  complete (``--keep-going``);
- the rerun completes, and the results tree equals a local run's of the same config and targets
  (tests/workflow/results_diff.py: stores value for value, every other file byte for byte).

The runs target one study's metric tables (:data:`TARGETS`: model resolution, documents, trajectory jobs, cube,
answers and metrics, 10 SLURM jobs) rather than the whole report (about 40 SLURM jobs, each re-parsing the workflow
twice): every kind of job that asks SLURM for CPUs and memory is in it, and the figures, tables and report are local
rules of the profile anyway. The killed run and its rerun are the SLURM run compared with the local one; the local
run goes alongside the killed one. Every command runs under ``timeout -k`` (KVDIV_SLURM_TEST_TIMEOUT seconds per
snakemake run, default 1800).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from support.checkout import checkout_ignore

import pytest

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
SMOKE = ["--configfile", "config/smoke.yaml"]
PROFILE = ["--workflow-profile", "profiles/slurm-cpu"]
#: Seconds each snakemake run may take (generous: a loaded machine is many times slower than an idle one);
#: KVDIV_SLURM_TEST_TIMEOUT sets another bound.
LIMIT = int(os.environ.get("KVDIV_SLURM_TEST_TIMEOUT", "1800"))
COMMAND_LIMIT = 60


def smoke_paths():
    """The smoke config's paths (:class:`kvdiv.layout.Layout` of its ``results`` root: results/smoke)."""
    import yaml

    from kvdiv.layout import Layout

    return Layout(yaml.safe_load((REPO / "config/smoke.yaml").read_text())["results"])


def smoke_targets() -> list[str]:
    """What the SLURM runs build: the smoke config's retention50 metric tables (and so everything they need)."""
    from kvdiv.layout import METRIC_TABLES

    return [smoke_paths().metrics_file("retention50", "tiny", table) for table in METRIC_TABLES]


TARGETS = smoke_targets()


def cluster_problem() -> str | None:
    """What keeps the test cluster from taking jobs (sinfo, partition `cpu`), or None when it is up."""
    if shutil.which("sinfo") is None:
        return "no `sinfo` (slurm-wlm not installed)"
    proc = subprocess.run(
        ["timeout", "-k", "5", "30", "sinfo", "-h", "-p", "cpu", "-o", "%a %t"],
        check=False,
        capture_output=True,
        text=True,
    )
    states = proc.stdout.split()
    if proc.returncode != 0 or "up" not in states or not {"idle", "mix", "alloc"} & set(states):
        return f"sinfo -p cpu: {proc.stdout.strip()!r} {proc.stderr.strip()!r}"
    return None


# Setting KVDIV_SLURM_DIR says the test cluster is up: then a cluster that is not is a failure, not a skip.
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.workflow,
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.environ.get("KVDIV_SLURM_DIR"),
        reason="no SLURM test cluster: start one with `tests/cluster/slurm-up.sh DIR` (root) "
        "and set KVDIV_SLURM_DIR=DIR",
    ),
]


@pytest.fixture(scope="module", autouse=True)
def cluster_is_up():
    problem = cluster_problem()
    if problem:
        pytest.fail(f"KVDIV_SLURM_DIR={os.environ['KVDIV_SLURM_DIR']} but the SLURM test cluster is not up: {problem}")


def run(workdir: Path, args: list[str], limit: int) -> subprocess.CompletedProcess:
    """``args`` in ``workdir`` under ``timeout -k 30 limit``, output captured (stdout and stderr together)."""
    env = dict(os.environ, PYTHONPATH=str(workdir))
    return subprocess.run(
        ["timeout", "-k", "30", str(limit), *args],
        cwd=workdir,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=limit + 60,
        check=False,
    )


def snakemake_ok(workdir: Path, args: list[str], limit: int) -> str:
    """Run snakemake; fail the test with the end of its output unless it exits 0."""
    proc = run(workdir, [*SNAKEMAKE, *args], limit)
    if proc.returncode != 0:
        pytest.fail(f"snakemake {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-10000:]}")
    return proc.stdout


def copy_repo(dest: Path) -> Path:
    """A copy of the workflow (no results, no venv, no git) to run snakemake in."""
    ignore = checkout_ignore(REPO)
    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def squeue(workdir: Path) -> list[tuple[str, str, str]]:
    """(job id, state, comment) of the jobs SLURM lists that run in ``workdir`` (the executor's comment names the
    rule: ``rule_<name>`` or ``rule_<name>_wildcards_<values>``)."""
    proc = subprocess.run(
        ["timeout", "-k", "5", str(COMMAND_LIMIT), "squeue", "-h", "--states=all", "-o", "%i|%T|%k|%Z"],
        capture_output=True,
        text=True,
        check=False,
    )
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.count("|") == 3]
    return [(job, state, comment) for job, state, comment, cwd in rows if Path(cwd) == workdir]


def results_diff():
    """tests/workflow/results_diff.py as a module."""
    spec = importlib.util.spec_from_file_location("results_diff", REPO / "tests/workflow/results_diff.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("results_diff", module)
    spec.loader.exec_module(module)
    return module


def start(workdir: Path, args: list[str], log: Path) -> subprocess.Popen:
    """``args`` started in ``workdir`` under ``timeout -k 30 LIMIT``, output to ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(
            ["timeout", "-k", "30", str(LIMIT), *args],
            cwd=workdir,
            text=True,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=str(workdir)),
        )


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """config/smoke.yaml run locally (2 cores) and, at the same time (they are independent), through
    profiles/slurm-cpu with no retry and --keep-going, its first trajectory job cancelled with ``scancel`` as soon as
    SLURM runs it."""
    local = copy_repo(tmp_path_factory.mktemp("local") / "wf")
    work = copy_repo(tmp_path_factory.mktemp("slurm") / "wf")
    started = time.monotonic()
    local_proc = start(local, [*SNAKEMAKE, "--cores", "2", *SMOKE, "--", *TARGETS], local.parent / "local_run.log")
    slurm_proc = start(
        work,
        [*SNAKEMAKE, *SMOKE, *PROFILE, "--retries", "0", "--keep-going", "--", *TARGETS],
        work.parent / "killed_run.log",
    )
    killed = None
    try:
        while slurm_proc.poll() is None and killed is None:
            running = [
                (job, comment)
                for job, state, comment in squeue(work)
                if state == "RUNNING" and comment.startswith("rule_trajectories_")
            ]
            if running:
                killed = running[0]
                subprocess.run(["timeout", "-k", "5", str(COMMAND_LIMIT), "scancel", killed[0]], check=True)
            else:
                time.sleep(1)
        returncode = slurm_proc.wait(timeout=LIMIT + 60)
        slurm_s = time.monotonic() - started
        local_returncode = local_proc.wait(timeout=LIMIT + 60)
    finally:
        for proc in (slurm_proc, local_proc):
            if proc.poll() is None:
                proc.kill()
    return {
        "work": work,
        "returncode": returncode,
        "output": (work.parent / "killed_run.log").read_text(),
        "killed": killed,
        "seconds": slurm_s,
        "local": local / "results",
        "local_returncode": local_returncode,
        "local_output": (local.parent / "local_run.log").read_text(),
    }


def test_killed_job_is_reported_with_its_slurm_log(runs):
    """The cancelled trajectory job is the run's one failure: reported with SLURM's state and its SLURM log (kept,
    and saying it was cancelled); the run exits non-zero after its other jobs."""
    out = runs["output"]
    assert runs["killed"] is not None, f"no trajectory job was seen running:\n{out[-6000:]}"
    job, comment = runs["killed"]
    rule = comment.removeprefix("rule_").split("_wildcards_")[0]
    assert runs["returncode"] not in (0, 124, 137), out[-6000:]
    assert set(re.findall(r"Error in rule (\S+):", out)) == {rule}, out[-8000:]
    assert f"SLURM-job '{job}' failed, SLURM status is: 'CANCELLED'" in out, out[-8000:]
    slurm_log = runs["work"] / ".snakemake/slurm_logs" / f"rule_{rule}" / f"{job}.log"
    assert str(slurm_log) in out, out[-8000:]
    assert slurm_log.is_file() and "CANCELLED" in slurm_log.read_text(errors="replace"), slurm_log
    # nothing of the killed job is taken as complete: its stores are absent
    stores = re.findall(r"results/\S+?\.zarr", out.split(f"Error in rule {rule}:")[1].split("log:")[0])
    assert stores, out[-8000:]
    for store in stores:
        assert not (runs["work"] / store).exists(), store


def test_rerun_completes_and_equals_a_local_run(runs):
    """The rerun (the profile as the README gives it) completes the run; its results equal the local run's: every
    store value for value, every table, metric, document and report byte for byte; then nothing is left to do."""
    assert runs["local_returncode"] == 0, runs["local_output"][-8000:]
    work = runs["work"]
    started = time.monotonic()
    snakemake_ok(work, [*SMOKE, *PROFILE, "--", *TARGETS], LIMIT)
    rerun_s = time.monotonic() - started
    comparison = results_diff().compare_results(runs["local"], work / "results")
    print(f"killed run {runs['seconds']:.0f} s, rerun {rerun_s:.0f} s\n{comparison.summary()}")
    assert comparison.identical, comparison.summary()
    assert comparison.stores >= 4 and comparison.files >= 10, comparison.summary()
    for target in TARGETS:
        assert (work / target).is_file(), target
    assert "Nothing to be done" in snakemake_ok(work, ["-n", *SMOKE, *PROFILE, "--", *TARGETS], LIMIT)
    assert not [row for row in squeue(work) if row[1] in ("PENDING", "RUNNING")], squeue(work)


def test_oversized_memory_request_is_refused_at_submission(tmp_path):
    """A job asking for more memory than the node has (EnforcePartLimits=ALL) fails at sbatch, naming the rule and
    SLURM's reason, and snakemake exits by itself (a pending job would keep it waiting until the timeout); nothing
    of it waits in the queue (slurmctld lists the refused request as FAILED)."""
    work = copy_repo(tmp_path / "wf")
    target = smoke_paths().finite_system("v2h8-s0.01-persistent-noeos")  # under the smoke config's own root
    started = time.monotonic()
    # the profile's `resources` clip every job to 8000 MB: raise that bound too, as a user overriding both would
    proc = run(
        work,
        [
            *SNAKEMAKE,
            *SMOKE,
            *PROFILE,
            "--retries",
            "0",
            "--resources",
            "mem_mb=400000",
            "cpus_per_task=4",
            "--set-resources",
            "finite_systems:mem_mb=200000",
            "--",
            target,
        ],
        LIMIT,
    )
    seconds = time.monotonic() - started
    assert proc.returncode not in (0, 124, 137), proc.stdout[-6000:]
    assert "SLURM sbatch failed" in proc.stdout and "finite_systems" in proc.stdout, proc.stdout[-6000:]
    assert re.search(
        r"Requested node configuration is not available|Memory specification can not be satisfied", proc.stdout
    ), proc.stdout[-6000:]
    assert "--mem 200000" in proc.stdout or "--mem=200000" in proc.stdout, proc.stdout[-6000:]
    # slurmctld keeps a FAILED record of the refused request; nothing of it may wait or run
    assert not [row for row in squeue(work) if row[1] in ("PENDING", "RUNNING")], squeue(work)
    print(f"refused at submission; snakemake exited {proc.returncode} after {seconds:.0f} s")
