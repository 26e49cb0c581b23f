"""Benchmark: a coupled trajectory job (complete mode) against plain sampling of the same tokens.

Candidate: one :class:`kvdiv.llm.session.KernelSession` (one prefill) + :func:`kvdiv.trajectories.generate.generate`
for the three 50%-retention actions of config/config.yaml, R = 1, H tokens: per step ONE batched forward
over P at x, Q at y and Q at x for every action.
Baseline: ``model.generate`` sampling H tokens (temperature 1, no top-k/top-p, EOS suppressed so every
run samples exactly H) once with the full cache and once per action under kvpress's press context
manager (``with press(model): model.generate(...)``, what kvpress's pipeline does for decoding).
Both run side by side in one process, alternating order per round; the ratio is candidate / baseline.

Run (after `snakemake --cores 2 results/models/smollm2/provenance.json`; the prompt is the first
ruler_1024 document of study retention50, generated in-process with kvdiv.documents):
    python benchmarks/generation.py --threads 2 --horizon 128 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import yaml

from kvdiv.llm.presses.registry import build_press
from kvdiv.documents import generate_stratum
from kvdiv.documents.render import prompt_token_ids
from kvdiv.llm.tokenization import apply_chat_template
from kvdiv.trajectories.base import chains_needed
from kvdiv.trajectories.generate import generate
from kvdiv.llm.session import KernelSession
from kvdiv.llm.loading import load_model

REPO = Path(__file__).resolve().parents[1]


def baseline(loaded, ids: torch.Tensor, actions: dict, horizon: int, seed: int) -> dict[str, float]:
    """Seconds of model.generate for the full cache and once per action (with the action's press)."""
    kwargs = dict(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=horizon, min_new_tokens=horizon,
        attention_mask=torch.ones_like(ids), pad_token_id=loaded.eos_token_ids[0],
    )
    times = {}
    torch.manual_seed(seed)
    start = time.perf_counter()
    out = loaded.model.generate(ids, **kwargs)
    times["full"] = time.perf_counter() - start
    assert out.shape[1] == ids.shape[1] + horizon
    for name, spec in actions.items():
        press = build_press(spec, name=name)
        start = time.perf_counter()
        with press(loaded.model):
            out = loaded.model.generate(ids, **kwargs)
        times[name] = time.perf_counter() - start
        assert out.shape[1] == ids.shape[1] + horizon
    return times


def candidate(loaded, ids: torch.Tensor, actions: dict, horizon: int, seed: int) -> dict[str, float]:
    """Seconds of one coupled job: prefill + H coupled steps for every action (complete mode, R = 1); ids of shape
    (1, n). A ProbabilisticPress draws from (seed, 0, "bench") (benchmarks/leaderboard_scaling.py times it too)."""
    start = time.perf_counter()
    session = KernelSession(loaded, ids[0], actions, max_chains=chains_needed(len(actions), 1, "complete"),
                            horizon=horizon, seed_parts=(seed, 0, "bench"))
    prefill = time.perf_counter() - start
    generate(session, list(actions), horizon=horizon, replicates=1, seed_parts=(seed, 0, "bench"),
             eos_token_ids=loaded.eos_token_ids, tv_atol=1e-6, progress=False)
    total = time.perf_counter() - start
    return {"prefill": prefill, "coupled": total - prefill, "total": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models-dir", default=str(REPO / "results/models"))
    args = parser.parse_args()
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    spec = {**config["models"]["smollm2"], "threads": args.threads, "device": "cpu", "dtype": "float32"}
    loaded = load_model("smollm2", spec, args.models_dir)
    torch.set_num_threads(args.threads)
    actions = {a: config["actions"][a] for a in config["studies"]["retention50"]["actions"]}
    chat = (lambda text: apply_chat_template(loaded.tokenizer, text)) if loaded.chat_template else None
    doc = generate_stratum(study="retention50", stratum="ruler_1024", n_documents=1, master_seed=config["seed"],
                           study_seed=config["studies"]["retention50"]["seed"], tokenizer=loaded.tokenizer,
                           tokenizer_name="smollm2", chat=chat, max_context=loaded.max_context, horizon=args.horizon)[0]
    ids = torch.tensor([prompt_token_ids(doc.to_record(), loaded.tokenizer, loaded.chat_template)])
    print(f"document {doc.id}: {ids.shape[1]} prompt tokens; actions {list(actions)}; H={args.horizon}; "
          f"threads {torch.get_num_threads()}", flush=True)
    rounds = []
    for r in range(args.rounds):
        order = ("baseline", "candidate") if r % 2 == 0 else ("candidate", "baseline")
        result = {}
        for which in order:
            fn = baseline if which == "baseline" else candidate
            result[which] = fn(loaded, ids, actions, args.horizon, seed=r)
        base_total = sum(result["baseline"].values())
        result["ratio"] = result["candidate"]["total"] / base_total
        rounds.append(result)
        print(json.dumps({"round": r, **result}, indent=None), flush=True)
    ratios = [r["ratio"] for r in rounds]
    print(f"candidate/baseline wall-time ratio: median {statistics.median(ratios):.3f} over {len(ratios)} rounds "
          f"(target <= 1.0)")


if __name__ == "__main__":
    main()
