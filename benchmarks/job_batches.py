"""Two trajectory jobs of B documents each against one job of the same 2B documents in two batches of B
(``documents_per_batch``): whole-process seconds, system seconds, page faults, peak memory and laws.

Each round runs, in alternating order: two fresh ``python`` processes, one after the other, each a coupled job over
B documents of a stratum of config/replication.yaml (documents 0..B−1, then B..2B−1: what two trajectory rules of
``documents_per_job: B`` run), and one fresh process generating the same 2B documents in two consecutive batches of
B (what one rule of ``documents_per_job: 2B, documents_per_batch: B`` runs; benchmarks/trajectory_job.py's job).
Whole-process seconds include each process's imports and model load. Every document's laws must be the same bits in
both. Needs the resolved SmolLM2:
    python benchmarks/job_batches.py --rounds 2 --documents 16 --study retention50 --stratum ruler_704
"""

from __future__ import annotations

import argparse
import json

from bench_common import busy_process, job_arguments, job_table, require_smollm2
from trajectory_job import REPO, one_job

VARIANTS = ("two jobs", "one job, two batches")


def run(variant: str, args: argparse.Namespace) -> dict:
    b = args.documents
    jobs = (
        [one_job(REPO, args.study, args.stratum, first, b, args.horizon, b) for first in (0, b)]
        if variant == "two jobs"
        else [one_job(REPO, args.study, args.stratum, 0, 2 * b, args.horizon, b)]
    )
    return {
        "process": sum(j["process"] for j in jobs),
        "sys_s": sum(j["sys_s"] for j in jobs),
        "minflt": sum(j["minflt"] for j in jobs),
        "max_rss_gb": max(j["max_rss_gb"] for j in jobs),
        "floor": sum(j["floor"] for j in jobs),  # (each job's floor, measured in its process: benchmarks/floor.py)
        "digests": {k: v for j in jobs for k, v in j["digests"].items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    job_arguments(parser)
    args = parser.parse_args()
    require_smollm2(REPO)
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    with busy_process(args.busy):
        for r in range(args.rounds):
            for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                runs[variant].append(run(variant, args))
                shown = {k: v for k, v in runs[variant][-1].items() if k != "digests"}
                print(json.dumps({"round": r, "variant": variant, **shown}), flush=True)
    label = "beside one busy process" if args.busy else "quiet"
    b = args.documents
    print(f"\n2 x {b} documents of {args.study}/{args.stratum}, H = {args.horizon}, {args.rounds} rounds, {label}")
    job_table(runs, "process", "jobs", (VARIANTS[1], VARIANTS[0]))


if __name__ == "__main__":
    main()
