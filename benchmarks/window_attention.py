"""SnapKV's window attention as kvdiv runs it during a prefill (kvdiv.kernel.presses.window_attention: the causal mask
cached and filled in place) against kvpress's own (three mask tensors of the weights' size per layer and press).

One process, SmolLM2-135M-Instruct as the trajectory jobs load it (float32, 1 thread, packed weights): the prefills of
the first B documents of a stratum of config/replication.yaml with the study's actions (every action's press on each
layer, as KernelSession runs them), once with kvpress's implementation (``prefill.exact_window_attention`` replaced by
a no-op) and once with kvdiv's, alternating per round, with the largest difference of a prefix (keys, values; bias:
which entries are kept) or initial law: 0 with torch's products, round-off where kvdiv's takes them through oneDNN
(inside the prefill's oneDNN attention: docs/internals.md#prefill-attention). Needs the resolved SmolLM2:
    python benchmarks/window_attention.py --rounds 3 --documents 4 --study retention50 --stratum ruler_832
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the workflow's jobs, before torch starts

import argparse  # noqa: E402
import contextlib  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from bench_common import busy_process, job_arguments, seconds_table, smollm2, stratum_prompts  # noqa: E402

import kvdiv.kernel.prefill as prefill  # noqa: E402
from kvdiv.kernel.presses.window_attention import exact_window_attention  # noqa: E402
from kvdiv.kernel.session import KernelSession  # noqa: E402
from kvdiv.settings import generation

VARIANTS = {"kvpress": contextlib.nullcontext, "kvdiv": exact_window_attention}


def prefills(loaded, prompts, actions, horizon: int) -> tuple[float, list[KernelSession]]:
    start = time.perf_counter()
    sessions = [KernelSession(loaded, torch.tensor(p), actions, generation(horizon=horizon)) for p in prompts]
    return time.perf_counter() - start, sessions


def difference(a: KernelSession, b: KernelSession) -> float:
    """The largest |difference| of two sessions' prefixes (keys, values) and initial laws; inf where a bias differs
    (another entry kept)."""
    worst = 0.0
    for cache in a.caches:
        pa, pb = a.prompt_cache(cache), b.prompt_cache(cache)
        for layer in range(a.n_layers):
            if not torch.equal(pa.bias[layer], pb.bias[layer]):
                return float("inf")
            for x, y in ((pa.keys[layer], pb.keys[layer]), (pa.values[layer], pb.values[layer])):
                worst = max(worst, float((x - y).abs().max()))
        worst = max(worst, float((a.initial_probs(cache) - b.initial_probs(cache)).abs().max()))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    job_arguments(parser, documents=4, rounds=3, stratum="ruler_832")
    args = parser.parse_args()
    config, loaded = smollm2("results/models", "config/replication.yaml")
    _, prompts = stratum_prompts(loaded, config, args.study, args.stratum, args.documents, args.horizon)
    actions = {a: config["actions"][a] for a in config["studies"][args.study]["actions"]}
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    largest = 0.0
    with busy_process(args.busy):
        for r in range(args.rounds):
            sessions = {}
            for variant in list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]:
                prefill.exact_window_attention = VARIANTS[variant]
                seconds[variant].append((s := prefills(loaded, prompts, actions, args.horizon))[0])
                sessions[variant] = s[1]
                print(f"round {r} {variant}: {seconds[variant][-1]:.2f} s", flush=True)
            largest = max([largest] + [difference(a, b) for a, b in zip(sessions["kvpress"], sessions["kvdiv"])])
    prefill.exact_window_attention = exact_window_attention
    label = "beside one busy process" if args.busy else "quiet"
    where = f"{args.study}/{args.stratum} ({', '.join(actions)})"
    print(f"\n{args.documents} prefills of {where}, {args.rounds} rounds, {label}")
    seconds_table(seconds, "window attention", ("kvdiv", "kvpress"), per=args.documents)
    print(f"largest difference of a prefix or initial law: {largest:.3g} (0: the same bits; inf: another entry kept)")


if __name__ == "__main__":
    main()
