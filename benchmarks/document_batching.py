"""Benchmark: per-document cost of a trajectory job batching B documents (one forward per step for all of them).

SmolLM2-135M-Instruct (float32, CPU, 1 thread, OMP_WAIT_POLICY=PASSIVE as the workflow's jobs), the first 8
``ruler_1024`` documents of study ``retention50`` (generated in-process with kvdiv.documents), its three actions,
R = 1, complete mode. For B in ``--batches``: prefill B documents and run
:func:`kvdiv.trajectories.generate.generate_documents` over them (what :func:`kvdiv.trajectories.job.run_documents`
does, without writing stores); the per-document cost is the batch's time / B. B values are interleaved within each
round (order reversed every other round); each round's costs are divided by that round's B = 1 cost, and the
table reports min and median of those ratios (and the process's peak resident memory so far: in round 0, B ascending,
the peak of the largest B run yet). ``--busy`` runs the same rounds beside one busy process
(``python -c "while True: pass"``). Also measured once: a fresh process's imports + model load (the fixed cost a
job pays once per batch instead of once per document).

Run (after `snakemake --cores 1 results/models/smollm2/provenance.json`):
    python benchmarks/document_batching.py --horizon 64 --rounds 3 --busy-rounds 2
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as workflow_scripts/trajectories.py, before torch starts

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import yaml  # noqa: E402

from bench_common import busy_process, coupled_job, stratum_prompts  # noqa: E402

from kvdiv.models.loading import load_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

FIXED_COST = r"""
import time; start = time.perf_counter()
import os; os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import sys, yaml
from kvdiv.documents import read_jsonl
from kvdiv.joblog import job_log
from kvdiv.models.loading import load_model
from kvdiv.trajectories.job import run_documents
imported = time.perf_counter()
config = yaml.safe_load(open("config/config.yaml"))
load_model("smollm2", {**config["models"]["smollm2"], "threads": 1}, sys.argv[1])
print(imported - start, time.perf_counter() - imported, "datasets" in sys.modules)
"""


def rounds(loaded, prompts, doc_ids, actions, horizon, batches, n_rounds, label) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {b: [] for b in batches}
    for r in range(n_rounds):
        order = batches if r % 2 == 0 else batches[::-1]
        row = {}
        for b in order:
            job = coupled_job(loaded, prompts[:b], doc_ids[:b], (1, 2), actions, horizon)
            row[b] = {
                "prefill_s": job["prefill"],
                "total_s": job["total"],
                "per_document_s": job["total"] / b,
                "over_floor": job["total"] / job["floor"],  # benchmarks/floor.py, measured in this process
                "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            }
        for b in batches:
            row[b]["ratio"] = row[b]["per_document_s"] / row[1]["per_document_s"]
            out[b].append(row[b])
        print(json.dumps({"label": label, "round": r, **{str(b): row[b] for b in batches}}), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy-rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--models-dir", default=str(REPO / "results/models"))
    args = parser.parse_args()
    if args.batches[0] != 1:
        raise SystemExit("--batches must start with 1 (the ratios' reference)")

    fixed = subprocess.run(
        [sys.executable, "-c", FIXED_COST, args.models_dir], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    print(
        f"fresh process: imports {float(fixed[0]):.2f} s, model load {float(fixed[1]):.2f} s, "
        f"datasets imported: {fixed[2]}",
        flush=True,
    )

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    spec = {**config["models"]["smollm2"], "threads": 1, "device": "cpu", "dtype": "float32"}
    loaded = load_model("smollm2", spec, args.models_dir)
    actions = {a: config["actions"][a] for a in config["studies"]["retention50"]["actions"]}
    doc_ids, prompts = stratum_prompts(loaded, config, "retention50", "ruler_1024", max(args.batches), args.horizon)
    print(
        f"documents {doc_ids[0]}..: {[len(p) for p in prompts]} prompt tokens; actions {list(actions)}; "
        f"H={args.horizon}; threads {torch.get_num_threads()}; OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}",
        flush=True,
    )
    results = {"quiet": rounds(loaded, prompts, doc_ids, actions, args.horizon, args.batches, args.rounds, "quiet")}
    if args.busy_rounds:
        with busy_process():
            results["busy"] = rounds(
                loaded, prompts, doc_ids, actions, args.horizon, args.batches, args.busy_rounds, "busy"
            )
    print(
        "\n| machine | B | per-document s (min, median) | prefill s per document (median) "
        "| ratio to B = 1 (min, median) | s / floor (median) |"
    )
    print("|---|---|---|---|---|---|")
    for label, per_b in results.items():
        for b, rows in per_b.items():
            per_doc = [r["per_document_s"] for r in rows]
            ratios = [r["ratio"] for r in rows]
            prefill = statistics.median(r["prefill_s"] / b for r in rows)
            floor = statistics.median(r["over_floor"] for r in rows)
            print(
                f"| {label} | {b} | {min(per_doc):.2f}, {statistics.median(per_doc):.2f} | {prefill:.2f} | "
                f"{min(ratios):.2f}, {statistics.median(ratios):.2f} | {floor:.2f} |"
            )


if __name__ == "__main__":
    main()
