"""Benchmark: ProbabilisticPress's budget control — target vs effective retention on SmolLM2.

For every proposal (min, h2o, min_h, h2o_h, scorer = SnapKV scores) and budget (per_head, global) at
compression ratios r = 0.1 … 0.9, one ``ProbabilisticPress(design="multinomial")`` compresses the cache
of a real prompt (a RULER-style needle-in-a-haystack document from ``kvdiv.documents``, rendered with the
chat template as a trajectory job renders it) on SmolLM2-135M-Instruct (30 layers × 3 KV heads). One
:class:`~kvdiv.kernel.session.KernelSession` prefill per proposal serves all its presses. Reported per press,
from its ``effective_retention()``:

- target = k/n with k = kvpress's ``compute_n_kept(n, r)``; expected = the controller's E|S| / n over the
  law of m and the draws; effective = the kept entries / entries of the whole cache for this draw;
- sd = the exact standard deviation of the effective retention of one draw (``distinct_variance``, law of
  total variance over the rounding of m; heads independent given m);
- the mean effective retention over ``--redraws`` fresh draws of the same controller on the same π (its
  SE is sd/√redraws; the paper reports effective vs target within about 5e-4; seeds differ per row);
- the spread of per-head retention (min / median / max over the 90 heads) and the draws m.

Run from the repository root:  python benchmarks/probabilistic_budget.py [--prompt-tokens 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from kvdiv.documents import generate_prompt
from kvdiv.kernel.session import KernelSession
from kvdiv.documents.render import chat_function, prompt_token_ids
from kvdiv.models.loading import load_model
from kvdiv.kernel.presses.multinomial_design import (
    allocate_draws,
    distinct_variance,
    draws_law,
    expected_distinct,
    multinomial_counts,
)
from kvdiv.seeds import derive_rng, derive_seed
from kvdiv.settings import generation

PROPOSALS = ("min", "h2o", "min_h", "h2o_h", "scorer")
BUDGETS = ("per_head", "global")
RATIOS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def action(proposal: str, budget: str, ratio: float, seed: int) -> dict:
    spec = {
        "press": "ProbabilisticPress",
        "compression_ratio": ratio,
        "proposal": proposal,
        "budget": budget,
        "seed": seed,
    }
    if proposal == "scorer":
        spec.update(scorer="SnapKVPress", scorer_kwargs={"window_size": 64})
    return spec


def one_draw_sd(press, budget: str, target_per_head: float) -> float:
    """Exact SD of the effective retention of one draw (law of total variance over m's rounding)."""
    layers = sorted(press.probabilities)
    pis = torch.stack([press.probabilities[layer][0] for layer in layers])  # [L, H, n]
    cells = pis.numel()
    if budget == "global":
        m_lo, f = draws_law(pis, target_per_head * pis.shape[0] * pis.shape[1], shared=True)
        m_lo, f = m_lo.expand(pis.shape[:2]), f.expand(pis.shape[:2])
    else:
        m_lo, f = draws_law(pis, target_per_head)
    e_lo, e_hi = expected_distinct(pis, m_lo), expected_distinct(pis, m_lo + 1)
    v_lo, v_hi = distinct_variance(pis, m_lo), distinct_variance(pis, m_lo + 1)
    if budget == "global":  # one coin for the whole cache: its variance is that of the summed expectations
        f0 = float(f.flatten()[0])
        var = float(((1 - f) * v_lo + f * v_hi).sum()) + f0 * (1 - f0) * float((e_hi - e_lo).sum()) ** 2
    else:  # one coin per head, independent
        var = float(((1 - f) * v_lo + f * v_hi + f * (1 - f) * (e_hi - e_lo) ** 2).sum())
    return math.sqrt(max(var, 0.0)) / cells


def redraw_mean(press, budget: str, target_per_head: float, redraws: int) -> float:
    """Mean effective retention over ``redraws`` fresh draws of the press's own controller on its π
    (``allocate_draws`` + ``multinomial_counts``, seeded as the press seeds them, with master seeds drawn
    afresh for every row of the table, so that rows are independent)."""
    layers = sorted(press.probabilities)
    pis = torch.stack([press.probabilities[layer][0] for layer in layers])  # [L, H, n]
    out = []
    row = (press.proposal, press.budget, str(press.compression_ratio))
    for seed in (derive_seed("redraw", *row, i) for i in range(redraws)):
        kept = 0
        if budget == "global":
            u = derive_rng(seed, "budget").random()
            m, _ = allocate_draws(pis, target_per_head * pis.shape[0] * pis.shape[1], u, shared=True)
        for i, layer in enumerate(layers):
            rng = derive_rng(seed, layer)
            if budget != "global":
                m_layer, _ = allocate_draws(pis[i], target_per_head, rng.random(pis.shape[1]))
            else:
                m_layer = m[i]
            kept += int((multinomial_counts(pis[i], m_layer, rng) > 0).sum())
        out.append(kept / pis.numel())
    return float(np.mean(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default="results/models")
    ap.add_argument("--prompt-tokens", type=int, default=1000, help="target prompt length (chat template included)")
    ap.add_argument("--seed", type=int, default=0, help="the presses' master seed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--redraws", type=int, default=32, help="fresh draws of the controller for the mean column")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    spec = yaml.safe_load(Path("config/config.yaml").read_text())["models"]["smollm2"]
    loaded = load_model("smollm2", spec, args.models_dir)
    chat = chat_function(loaded.tokenizer, loaded.chat_template)
    message, prefix, _, _ = generate_prompt(
        "niah_single_noise_number",
        seed=1,
        target_length=args.prompt_tokens,
        tokenizer=loaded.tokenizer,
        chat=chat,
        horizon=0,
    )
    document = {"prompt": message, "answer_prefix": prefix}
    ids = torch.tensor(prompt_token_ids(document, loaded.tokenizer, loaded.chat_template))
    print(f"SmolLM2-135M-Instruct, prompt {len(ids)} tokens, seed {args.seed}, {args.threads} threads\n")
    print(
        "| proposal | budget | r | target | expected | effective | effective − target | sd (one draw) "
        f"| mean of {args.redraws} redraws − target | per-head min / median / max | draws m (min / median / max) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for proposal in PROPOSALS:
        actions = {f"{b}_{r}": action(proposal, b, r, args.seed) for b in BUDGETS for r in RATIOS}
        start = time.perf_counter()
        session = KernelSession(loaded, ids, actions, generation(horizon=0), max_chains=1)
        seconds = time.perf_counter() - start
        for budget in BUDGETS:
            for r in RATIOS:
                press = session.presses[f"{budget}_{r}"]
                rec = press.effective_retention()
                heads = np.array(rec["per_head"]).ravel()
                m = np.array(rec["draws"]).ravel()
                k = rec["target"] * rec["prompt_entries"]
                sd = one_draw_sd(press, budget, k)
                mean = redraw_mean(press, budget, k, args.redraws)
                print(
                    f"| {proposal} | {budget} | {r:.1f} | {rec['target']:.6f} | {rec['expected']:.6f} "
                    f"| {rec['effective']:.6f} | {rec['effective'] - rec['target']:+.2e} | {sd:.1e} "
                    f"| {mean - rec['target']:+.1e} "
                    f"| {heads.min():.3f} / {np.median(heads):.3f} / {heads.max():.3f} "
                    f"| {m.min():.3g} / {np.median(m):.3g} / {m.max():.3g} |",
                    flush=True,
                )
        print(f"<!-- {proposal}: one prefill for {len(actions)} presses took {seconds:.1f} s -->", flush=True)


if __name__ == "__main__":
    main()
