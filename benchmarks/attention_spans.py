"""Benchmark: decode attention in spans (kvdiv.kernel.step_plan.attention_runs: each chain attends over its length + 1
rounded up to 64 entries, so its bits do not depend on the other chains) against the runs it replaced (consecutive
slots with lengths within 20 % + 32 padded to the run's longest: an action's values moved by round-off with the
other actions of its job).

SmolLM2-135M-Instruct (float32, CPU, 1 thread, OMP_WAIT_POLICY=PASSIVE as the workflow's jobs), the first 3
``ruler_1024`` documents of study ``retention50``, its three actions plus ``snapkv_90``, complete mode, R = 1: one
coupled job (:func:`bench_common.coupled_job`: prefill, then every chain of the 3 documents in one forward per step).
The two planners alternate within each round (order reversed every other round) in one process; the table gives
the coupled (decode) seconds, min and median, and the ratio spans / runs of each round. ``--busy-rounds`` runs the same
beside one busy process.

Run (after `snakemake --cores 1 results/models/smollm2/provenance.json`):
    python benchmarks/attention_spans.py --horizon 64 --rounds 3 --busy-rounds 1
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as workflow_scripts/trajectories.py, before torch starts

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
from pathlib import Path  # noqa: E402


from bench_common import busy_process, coupled_job, smollm2, stratum_prompts  # noqa: E402

from kvdiv.kernel import step_plan as session_module  # noqa: E402  (where a step looks its planner up)

REPO = Path(__file__).resolve().parents[1]
SPANS = session_module.attention_runs


def legacy_runs(slots, lengths, capacity):
    """The planner before spans: runs of consecutive slots whose lengths are within 20 % + 32, padded to the longest."""
    runs, start = [], 0
    for j in range(1, len(slots) + 1):
        if (
            j == len(slots)
            or slots[j] != slots[j - 1] + 1
            or abs(lengths[j] - lengths[start]) > 0.2 * lengths[start] + 32
        ):
            runs.append((start, j, slots[start], slots[j - 1] + 1, max(lengths[start:j]) + 1))
            start = j
    return runs


PLANNERS = {"runs (before)": legacy_runs, "spans": SPANS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy-rounds", type=int, default=1)
    parser.add_argument("--models-dir", default=str(REPO / "results/models"))
    args = parser.parse_args()
    config, loaded = smollm2(args.models_dir, REPO / "config/config.yaml")
    names = [*config["studies"]["retention50"]["actions"], "snapkv_90"]
    actions = {a: config["actions"][a] for a in names}
    doc_ids, prompts = stratum_prompts(loaded, config, "retention50", "ruler_1024", 3, args.horizon)
    print(f"documents {doc_ids}: {[len(p) for p in prompts]} prompt tokens; actions {names}; H={args.horizon}")

    def rounds(n: int, label: str) -> dict[str, list[float]]:
        out = {name: [] for name in PLANNERS}
        ratios = []
        for r in range(n):
            row = {}
            for name in PLANNERS if r % 2 == 0 else list(PLANNERS)[::-1]:
                session_module.attention_runs = PLANNERS[name]
                row[name] = coupled_job(loaded, prompts, doc_ids, (1, 2), actions, args.horizon)["coupled"]
            session_module.attention_runs = SPANS
            for name in PLANNERS:
                out[name].append(row[name])
            ratios.append(row["spans"] / row["runs (before)"])
            print(json.dumps({"label": label, "round": r, **row, "ratio": ratios[-1]}), flush=True)
        out["ratio"] = ratios
        return out

    results = {"quiet": rounds(args.rounds, "quiet")}
    if args.busy_rounds:
        with busy_process():
            results["busy"] = rounds(args.busy_rounds, "busy")
    print("\n| machine | runs (before): decode s (min, median) | spans: decode s (min, median) | spans / runs |")
    print("|---|---|---|---|")
    for label, out in results.items():
        cells = [f"{min(out[n]):.1f}, {statistics.median(out[n]):.1f}" for n in PLANNERS]
        ratio = f"{min(out['ratio']):.2f}, {statistics.median(out['ratio']):.2f}"
        print(f"| {label} | {cells[0]} | {cells[1]} | {ratio} |")


if __name__ == "__main__":
    main()
