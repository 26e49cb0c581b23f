"""Slot buffers allocated uninitialised (zeroed only where a chain's attention span reads: kvdiv.kernel.chain_slots)
against zero-filled ones (what every buffer was before): one trajectory job's seconds and peak memory.

Each round runs, in a fresh ``python`` process each and in alternating order, one coupled job (what a trajectory rule
runs, without writing stores: ``bench_common.coupled_job``) over the first B documents of a stratum of
config/replication.yaml, once with ``ChainSlots.unused_fill = 0.0`` (new buffers zero-filled: the baseline) and once
as the workflow runs it (uninitialised). Each process reports its wall seconds, prefill and coupled seconds, its
peak RSS, and a digest of every law it computed (the two must be equal). Needs the resolved SmolLM2:
    python benchmarks/slot_buffers.py --rounds 2 --documents 16 --horizon 128 --study retention90 --stratum ruler_832
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from bench_common import busy_process

#: One job in a fresh process; argv: variant, study, stratum, documents, horizon.
JOB = r"""
import hashlib, json, os, resource, sys, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, "benchmarks")
import torch
from bench_common import coupled_generate, coupled_sessions, smollm2, stratum_prompts
from kvdiv.kernel.chain_slots import ChainSlots

variant, study, stratum, n, horizon = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
if variant == "zero_filled":
    ChainSlots.unused_fill = 0.0
config, loaded = smollm2("results/models", "config/replication.yaml")
ids, prompts = stratum_prompts(loaded, config, study, stratum, n, horizon)
actions = {a: config["actions"][a] for a in config["studies"][study]["actions"]}
seeds = (config["seed"], config["studies"][study]["seed"])
digest = hashlib.sha256()
start = time.perf_counter()
sessions = coupled_sessions(loaded, prompts, ids, actions, horizon, seeds=seeds)
prefill = time.perf_counter() - start
results = coupled_generate(sessions, ids, list(actions), horizon, seeds=seeds, eos=loaded.eos_token_ids)
total = time.perf_counter() - start
for per_doc in results:
    for name in sorted(per_doc):
        for key, value in sorted(vars(per_doc[name]).items()):
            if hasattr(value, "tobytes"):
                digest.update(key.encode()); digest.update(value.tobytes())
print(json.dumps({"total": total, "prefill": prefill, "coupled": total - prefill,
                  "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "digest": digest.hexdigest()}))
"""

VARIANTS = ("zero_filled", "uninitialised")


def one_job(variant: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-c", JOB, variant, args.study, args.stratum, str(args.documents), str(args.horizon)]
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--documents", type=int, default=16)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--study", default="retention90")
    parser.add_argument("--stratum", default="ruler_832")
    parser.add_argument("--busy", action="store_true", help="beside one busy process")
    args = parser.parse_args()
    if not Path("results/models/smollm2/provenance.json").is_file():
        raise SystemExit("resolve SmolLM2 first: snakemake --cores 1 results/models/smollm2/provenance.json")
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    with busy_process(args.busy):
        for r in range(args.rounds):
            for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                runs[variant].append(one_job(variant, args))
                print(json.dumps({"round": r, "variant": variant, **runs[variant][-1]}), flush=True)
    digests = {run["digest"] for rs in runs.values() for run in rs}
    label = "beside one busy process" if args.busy else "quiet"
    where = f"{args.study}/{args.stratum}"
    print(f"\n{args.documents} documents of {where}, H = {args.horizon}, {args.rounds} rounds, {label}")
    print("| buffers | total s (min, median) | prefill s (median) | coupled s (median) | peak RSS GB (max) |")
    print("|---|---:|---:|---:|---:|")
    for v in VARIANTS:
        t = [run["total"] for run in runs[v]]
        prefill = statistics.median(r["prefill"] for r in runs[v])
        coupled = statistics.median(r["coupled"] for r in runs[v])
        rss = max(r["max_rss_gb"] for r in runs[v])
        print(f"| {v} | {min(t):.1f}, {statistics.median(t):.1f} | {prefill:.1f} | {coupled:.1f} | {rss:.2f} |")
    ratios = [a["total"] / b["total"] for a, b in zip(runs["zero_filled"], runs["uninitialised"])]
    print(f"ratio zero_filled / uninitialised per round: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}")
    print(f"laws identical in every run: {len(digests) == 1}")


if __name__ == "__main__":
    main()
