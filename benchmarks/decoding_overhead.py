"""What decode-time compression costs a decode step (config/decoding.yaml's SmolLM2 setting: a 1024-token prompt):
one batched step of ``--chains`` full-cache chains (the reference) against the same number of chains of a
DecodingPress (SnapKV scorer, window 16, target 512), whose caches are as long as the reference's until its first cut —
once between cuts (the press's hook runs per chain and layer: buffers the attention input and counts; the difference
is the hook's cost) and once at the cut (every chain's cache scored and cut from 1024 + 32 entries to 512). Same
process, interleaved rounds; min and median ms per step, and the ratios.

Run from the repository root after a default run (it reads results/models/smollm2):
    python benchmarks/decoding_overhead.py --rounds 5 [--busy]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import yaml

from bench_common import busy_process
from kvdiv.models.loading import load_model
from kvdiv.kernel.session import KernelSession
from kvdiv.settings import generation

INTERVAL = 32
ACTIONS = {
    "decoding": {
        "press": "DecodingPress",
        "target_size": 512,
        "compression_interval": INTERVAL,
        "wraps": {"press": "SnapKVPress", "window_size": 16},
    },
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default="results/models")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--chains", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--busy", action="store_true", help="beside one busy process")
    args = ap.parse_args()
    torch.set_num_threads(1)
    spec = yaml.safe_load(Path("config/config.yaml").read_text())["models"]["smollm2"]
    loaded = load_model("smollm2", spec, args.models_dir)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 40000, (args.prompt_tokens,), generator=g)
    session = KernelSession(loaded, ids, ACTIONS, generation(horizon=INTERVAL + 2), max_chains=2 * args.chains + 2)
    tokens = torch.randint(100, 40000, (INTERVAL + 1,), generator=g).tolist()

    def steps(action: str) -> tuple[list[float], float]:
        """ms of each step between cuts (steps 1..INTERVAL-1) and of the step that cuts (INTERVAL)."""
        chains = [session.new_chain(action) for _ in range(args.chains)]
        times = []
        for t in tokens[:INTERVAL]:
            start = time.perf_counter()
            session.step(chains, [t] * len(chains))
            times.append(1000 * (time.perf_counter() - start))
        lengths = {session.cache_length(c) for c in chains}
        session.release(chains)
        if action == "decoding":
            assert lengths == {512}, lengths  # every chain was cut at step INTERVAL
        return times[1:-1], times[-1]

    kinds = ("reference", "decoding")
    between: dict[str, list[float]] = {a: [] for a in kinds}
    cut: dict[str, list[float]] = {a: [] for a in kinds}
    steps("decoding")  # warm-up
    with busy_process(args.busy):
        for _ in range(args.rounds):
            for action in kinds:
                b, c = steps(action)
                between[action].append(statistics.median(b))
                cut[action].append(c)
    print(
        f"SmolLM2-135M-Instruct, a {len(ids)}-token prompt, {args.chains} chains per step, 1 thread, "
        f"{args.rounds} interleaved rounds{' beside a busy process' if args.busy else ''}\n"
    )
    print("| step | full cache (reference): min / median ms | DecodingPress: min / median ms | ratio min / median |")
    print("|---|---:|---:|---:|")
    for label, data in (("between cuts (median of the round's steps)", between), (f"step {INTERVAL} (the cut)", cut)):
        p, d = data["reference"], data["decoding"]
        print(
            f"| {label} | {min(p):.1f} / {statistics.median(p):.1f} | {min(d):.1f} / {statistics.median(d):.1f} | "
            f"{min(d) / min(p):.2f} / {statistics.median(d) / statistics.median(p):.2f} |"
        )
    extra = statistics.median(cut["decoding"]) - statistics.median(between["decoding"])
    print(
        f"\nthe cut's extra time spread over the {INTERVAL} steps between cuts: {extra / INTERVAL:.1f} ms per step "
        f"({extra / (args.chains * session.n_layers):.2f} ms per chain and layer)"
    )


if __name__ == "__main__":
    main()
