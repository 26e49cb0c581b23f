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
import statistics

from bench_common import busy_process
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
        "digests": {k: v for j in jobs for k, v in j["digests"].items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--documents", type=int, default=16, help="B: documents per job, per batch")
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--study", default="retention50")
    parser.add_argument("--stratum", default="ruler_704")
    parser.add_argument("--busy", action="store_true", help="beside one busy process")
    args = parser.parse_args()
    if not (REPO / "results/models/smollm2/provenance.json").is_file():
        raise SystemExit("resolve SmolLM2 first: snakemake --cores 1 results/models/smollm2/provenance.json")
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    with busy_process(args.busy):
        for r in range(args.rounds):
            for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                runs[variant].append(run(variant, args))
                shown = {k: v for k, v in runs[variant][-1].items() if k != "digests"}
                print(json.dumps({"round": r, "variant": variant, **shown}), flush=True)
    digests = {json.dumps(run["digests"], sort_keys=True) for rs in runs.values() for run in rs}
    label = "beside one busy process" if args.busy else "quiet"
    b = args.documents
    print(f"\n2 x {b} documents of {args.study}/{args.stratum}, H = {args.horizon}, {args.rounds} rounds, {label}")
    print("| jobs | process s (min, median) | system s (median) | page faults (median) | peak RSS GB (max) |")
    print("|---|---:|---:|---:|---:|")
    for v, rs in runs.items():
        t = [run["process"] for run in rs]
        sys_s = statistics.median(r["sys_s"] for r in rs)
        faults = statistics.median(r["minflt"] for r in rs)
        rss = max(r["max_rss_gb"] for r in rs)
        print(f"| {v} | {min(t):.1f}, {statistics.median(t):.1f} | {sys_s:.1f} | {faults / 1e6:.2f} M | {rss:.2f} |")
    ratios = [a["process"] / b["process"] for a, b in zip(runs[VARIANTS[1]], runs[VARIANTS[0]])]
    print(f"ratio one job / two jobs per round: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}")
    print(f"the same laws in every run: {len(digests) == 1}")


if __name__ == "__main__":
    main()
