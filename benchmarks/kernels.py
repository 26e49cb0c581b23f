"""Benchmark: kvdiv.kernel.session (one prefill for all actions, batched slot-buffer decoding) vs plain baselines.

On SmolLM2-135M-Instruct with a 2048-token prompt and 2 CPU threads, in one process, baseline and
candidate interleaved round by round (medians reported):

- prefill: ``KernelSession`` construction (one prefill deriving every action's cache, buffers set up)
  vs one plain prefill + kvpress's own ``with press(model): model(prompt)`` once per action;
- decoding: one plain HF decode step (DynamicCache, batch 1) vs ``session.step`` of one (P, Q) pair
  (2 chains), of 9 chains (reference + 4 actions × 2: the coupled job's step), and 4 plain steps
  (4 independent plain sampling chains, the cost the coupled 9-chain step should not exceed).

Run from the repository root:  python benchmarks/kernels.py [--models-dir results/models] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from transformers import DynamicCache

from kvdiv.kernel.presses.registry import build_press
from kvdiv.kernel.session import KernelSession
from kvdiv.kernel.prefill import REFERENCE
from kvdiv.models.loading import load_model
from kvdiv.settings import generation

ACTIONS = {
    "snapkv_half": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 64},
    "snapkv_512": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 512},
    "recent_half": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 0},
    "prob_half": {
        "press": "ProbabilisticPress",
        "compression_ratio": 0.5,
        "design": "pips",
        "proposal": "scorer",
        "scorer": "SnapKVPress",
        "scorer_kwargs": {"window_size": 64},
    },
}
WORDS = (
    "river stone window garden letter silver morning number travel quiet yellow market "
    "history paper music forest answer simple mountain bridge summer question orange"
).split()


def make_prompt(tokenizer, n_tokens: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    text = " ".join(rng.choice(WORDS, size=2 * n_tokens))
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids[0]
    return ids[:n_tokens]


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default="results/models")
    ap.add_argument("--prompt-tokens", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8, help="decode steps timed per round and variant")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    spec = yaml.safe_load(Path("config/config.yaml").read_text())["models"]["smollm2"]
    spec = {**spec, "threads": args.threads}
    loaded = load_model("smollm2", spec, args.models_dir)
    torch.set_num_threads(args.threads)
    model = loaded.model
    ids = make_prompt(loaded.tokenizer, args.prompt_tokens)
    n = len(ids)
    print(
        f"model smollm2 ({model.dtype}), prompt {n} tokens, {torch.get_num_threads()} threads, "
        f"{len(ACTIONS)} actions: {', '.join(ACTIONS)}"
    )

    @torch.no_grad()
    def per_action_prefill():
        model(input_ids=ids[None], past_key_values=DynamicCache(config=model.config), use_cache=True)
        for name, a in ACTIONS.items():
            with build_press(a)(model):
                model(input_ids=ids[None], past_key_values=DynamicCache(config=model.config), use_cache=True)

    t_once, t_each = [], []
    session = None
    for _ in range(args.rounds):
        t_each.append(timed(per_action_prefill))
        session = None
        t = time.perf_counter()
        session = KernelSession(loaded, ids, ACTIONS, generation(horizon=args.rounds * args.steps * 2 + 7))
        t_once.append(time.perf_counter() - t)

    # decoding
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(100, 10000, (args.rounds * args.steps * 4,), generator=g).tolist()
    plain_cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids[None], past_key_values=plain_cache, use_cache=True)
    pos = {"plain": n}
    pair = [session.new_chain(REFERENCE), session.new_chain("snapkv_half")]
    nine = [session.new_chain(REFERENCE)] + [session.new_chain(a) for a in ACTIONS for _ in range(2)]

    @torch.no_grad()
    def plain_step(tok):
        p = torch.tensor([[pos["plain"]]])
        out = model(
            input_ids=torch.tensor([[tok]]),
            past_key_values=plain_cache,
            position_ids=p,
            cache_position=p[0],
            use_cache=True,
        )
        torch.softmax(out.logits[0, -1].double(), -1)
        pos["plain"] += 1

    t_plain, t_pair, t_nine = [], [], []
    k = 0
    for _ in range(args.rounds):
        for _ in range(args.steps):
            tok = tokens[k]
            k += 1
            t_plain.append(timed(lambda: plain_step(tok)))
            t_pair.append(timed(lambda: session.step(pair, [tok] * 2)))
            t_nine.append(timed(lambda: session.step(nine, [tok] * 9)))

    med = statistics.median
    rows = [  # (name, times, baseline times, factor applied to the times)
        ("prefill: once per action (plain + kvpress press × %d)" % len(ACTIONS), t_each, t_each, 1),
        ("prefill: KernelSession, one prefill for all actions", t_once, t_each, 1),
        ("decode: plain HF step (DynamicCache, batch 1)", t_plain, t_plain, 1),
        ("decode: 4 plain steps (4 independent chains)", t_plain, t_plain, 4),
        ("decode: session.step, one (P, Q) pair (2 chains)", t_pair, t_plain, 1),
        ("decode: session.step, 9 chains (ref + 4 actions × 2)", t_nine, t_plain, 1),
    ]
    print("\n| measurement | median s | × baseline (median) | min s | × baseline (min) |\n|---|---:|---:|---:|---:|")
    for name, times, base, f in rows:
        print(
            f"| {name} | {f * med(times):.4f} | {f * med(times) / med(base):.2f} | "
            f"{f * min(times):.4f} | {f * min(times) / min(base):.2f} |"
        )
    print(
        f"\nrounds {args.rounds}, decode samples per variant {len(t_plain)}; 9-chain step / 4 plain steps = "
        f"{med(t_nine) / (4 * med(t_plain)):.2f} (medians), {min(t_nine) / (4 * min(t_plain)):.2f} (minima)"
    )


if __name__ == "__main__":
    main()
