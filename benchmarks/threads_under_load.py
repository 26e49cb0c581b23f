"""Benchmark: one coupled decode step's cost by torch threads and OpenMP wait policy, quiet and beside a busy process.

Each configuration runs in a fresh interpreter (OMP_WAIT_POLICY must be set before the OpenMP runtime starts):
SmolLM2-135M-Instruct (float32, CPU), a ~1000-token prompt, the three 50%-retention actions of
config/config.yaml, and ``--steps`` batched ``KernelSession.step`` calls over 6 chains (P and Q for each
action: a complete-mode step before divergence). Reported: ms per step. Configurations are interleaved per
round; "busy" runs one ``python -c "while True: pass"`` beside the measurement.

Run (after `snakemake --cores 1 results/models/smollm2/provenance.json`):
    python benchmarks/threads_under_load.py --rounds 3   # recorded: --rounds 1 --steps 20 (threads_under_load.md)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench_common import busy_process

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import torch, yaml
from kvdiv.models.loading import load_model
from kvdiv.kernel.session import KernelSession
threads, steps, models_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
config = yaml.safe_load(open("config/config.yaml"))
spec = {**config["models"]["smollm2"], "threads": threads, "device": "cpu", "dtype": "float32"}
loaded = load_model("smollm2", spec, models_dir)
text = "The quick brown fox jumps over the lazy dog while the key for the blue door is 4812. " * 60
ids = torch.tensor(loaded.tokenizer(text, add_special_tokens=False)["input_ids"][:1000])
actions = {a: config["actions"][a] for a in ("snapkv_half", "snapkv_512", "recent_half")}
session = KernelSession(loaded, ids, actions, max_chains=6, horizon=steps + 1)
chains = [session.new_chain(c) for a in actions for c in ("reference", a)]
session.step(chains, [5] * 6)  # warm-up
start = time.perf_counter()
for t in range(steps):
    session.step(chains, [100 + t] * 6)
print(json.dumps({"ms_per_step": 1000 * (time.perf_counter() - start) / steps, "threads": torch.get_num_threads()}))
"""


def run(threads: int, policy: str, busy: bool, steps: int, models_dir: str) -> float:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    with busy_process(busy):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(threads), str(steps), models_dir],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
    if out.returncode != 0:
        raise RuntimeError(f"threads {threads}, {policy}, busy {busy}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["ms_per_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--policies", nargs="+", default=["default", "PASSIVE"])
    parser.add_argument("--models-dir", default=str(REPO / "results/models"))
    args = parser.parse_args()
    configs = list(itertools.product([False, True], args.threads, args.policies))
    results: dict[tuple, list[float]] = {c: [] for c in configs}
    for r in range(args.rounds):
        order = configs if r % 2 == 0 else configs[::-1]
        for busy, threads, policy in order:
            ms = run(threads, policy, busy, args.steps, args.models_dir)  # a failed child raises with its stderr
            results[(busy, threads, policy)].append(ms)
            print(
                f"round {r} {'busy ' if busy else 'quiet'} threads {threads} {policy:8s} {ms:7.1f} ms/step", flush=True
            )
    base = {busy: results[(busy, args.threads[0], args.policies[0])] for busy in (False, True)}
    print(
        "\n| machine | threads | OMP_WAIT_POLICY | ms/step min | ms/step median "
        "| ratio to 1 thread default (min, median) |"
    )
    print("|---|---|---|---|---|---|")
    for busy, threads, policy in configs:
        v = results[(busy, threads, policy)]
        ratios = [a / b for a, b in zip(v, base[busy])]
        print(
            f"| {'busy' if busy else 'quiet'} | {threads} | {policy} | {min(v):.1f} | {statistics.median(v):.1f} | "
            f"{min(ratios):.2f}, {statistics.median(ratios):.2f} |"
        )


if __name__ == "__main__":
    main()
