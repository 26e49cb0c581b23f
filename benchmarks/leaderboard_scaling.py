"""Benchmark: how one trajectory job's cost grows with the number of actions (the leaderboard's presses).

One document (the first ruler_1024 document of the leaderboard study of config/presses.yaml, generated in-process),
one :class:`kvdiv.kernel.session.KernelSession` (one prefill; every action's cache derived from it) and
:func:`kvdiv.trajectories.generate.generate` in complete mode, R = 1, H steps, with the first n actions of the study
for each n of ``--actions`` (the same job a trajectory rule runs, without writing the store). Rounds interleave the
sizes (order rotated per round); the report gives per n the min and median seconds of prefill, coupled steps and
total, and the total relative to n = the smallest size.

Run (after `snakemake --cores 1 results/models/smollm2/provenance.json`):
    python benchmarks/leaderboard_scaling.py --threads 2 --horizon 128 --rounds 2 --actions 1 4 12
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import yaml
from bench_common import coupled_job, stratum_prompts  # beside this script

from kvdiv.models.loading import load_model

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--actions", type=int, nargs="+", default=[1, 4, 12])
    parser.add_argument("--models-dir", default=str(REPO / "results/models"))
    args = parser.parse_args()
    config = yaml.safe_load((REPO / "config/presses.yaml").read_text())
    study_name = config["leaderboard"]["study"]
    study = config["studies"][study_name]
    spec = {**config["models"]["smollm2"], "threads": args.threads, "device": "cpu", "dtype": "float32"}
    loaded = load_model("smollm2", spec, args.models_dir)
    torch.set_num_threads(args.threads)
    names = list(study["actions"])
    (doc_id,), prompts = stratum_prompts(loaded, config, study_name, "ruler_1024", 1, args.horizon)
    print(
        f"document {doc_id}: {len(prompts[0])} prompt tokens; H={args.horizon}; threads {torch.get_num_threads()}; "
        f"actions in order: {names[: max(args.actions)]}",
        flush=True,
    )
    times: dict[int, list[dict]] = {n: [] for n in args.actions}
    for r in range(args.rounds):
        order = args.actions[r % len(args.actions) :] + args.actions[: r % len(args.actions)]
        for n in order:
            actions = {a: config["actions"][a] for a in names[:n]}
            times[n].append(coupled_job(loaded, prompts, ["bench"], (r, 0), actions, args.horizon))
            print(json.dumps({"round": r, "actions": n, **times[n][-1]}), flush=True)
    base = statistics.median(t["total"] for t in times[min(args.actions)])
    print(
        "| actions | prefill s (min / median) | coupled steps s (min / median) | total s (min / median) | total / "
        f"total at {min(args.actions)} (median) |"
    )
    print("|---:|---:|---:|---:|---:|")
    for n in args.actions:
        cols = []
        for key in ("prefill", "coupled", "total"):
            v = [t[key] for t in times[n]]
            cols.append(f"{min(v):.1f} / {statistics.median(v):.1f}")
        print(f"| {n} | " + " | ".join(cols) + f" | {statistics.median(t['total'] for t in times[n]) / base:.2f} |")


if __name__ == "__main__":
    main()
