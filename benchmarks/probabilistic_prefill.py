"""A KernelSession prefill with config/probabilistic.yaml's 13 actions (11 ProbabilisticPress ``min_h`` actions,
2 SnapKV) on one SmolLM2 document: the attention proposal computed once per layer and shared by the actions that ask
for it (``kvdiv.kernel.presses.probabilistic_press.shared_proposals``, the default) against once per action (the memo
off: the code before it). Same process, interleaved rounds; min and median seconds, and the ratio. Checks that both
give the same proposals and kept entries.

Run from the repository root after a default run (it reads results/models/smollm2):
    python benchmarks/probabilistic_prefill.py --rounds 3 [--busy]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch
import yaml

from bench_common import busy_process
from kvdiv.documents import generate_prompt
from kvdiv.documents.render import chat_function, prompt_token_ids
from kvdiv.kernel import prefill as prefill_module  # where the session's prefill opens shared_proposals
from kvdiv.models.loading import load_model
from kvdiv.kernel.session import KernelSession
from kvdiv.settings import generation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default="results/models")
    ap.add_argument("--prompt-tokens", type=int, default=768)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", action="store_true", help="beside one busy process")
    args = ap.parse_args()
    torch.set_num_threads(1)
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
    ids = torch.tensor(
        prompt_token_ids({"prompt": message, "answer_prefix": prefix}, loaded.tokenizer, loaded.chat_template)
    )
    actions = yaml.safe_load(Path("config/probabilistic.yaml").read_text())["actions"]
    shared = prefill_module.shared_proposals

    def prefill(memo: bool) -> tuple[float, KernelSession]:
        prefill_module.shared_proposals = shared if memo else contextlib.nullcontext
        try:
            start = time.perf_counter()
            s = KernelSession(loaded, ids, actions, generation(horizon=0), max_chains=1)
            return time.perf_counter() - start, s
        finally:
            prefill_module.shared_proposals = shared

    times: dict[bool, list[float]] = {True: [], False: []}
    with busy_process(args.busy):
        for _ in range(args.rounds):
            for memo in (True, False):
                seconds, s = prefill(memo)
                times[memo].append(seconds)
                if memo:
                    with_memo = s
                else:
                    for name in actions:
                        for a, b in zip(with_memo.kept_indices(name), s.kept_indices(name)):
                            assert (a is None and b is None) or torch.equal(a, b), name
    print(
        f"SmolLM2-135M-Instruct, one {len(ids)}-token prompt, {len(actions)} actions, 1 thread, "
        f"{args.rounds} interleaved rounds{' beside a busy process' if args.busy else ''}\n"
    )
    print("| proposal computed | min s | median s |\n|---|---:|---:|")
    for memo, label in ((False, "once per action (before)"), (True, "once per layer, shared (now)")):
        print(f"| {label} | {min(times[memo]):.2f} | {statistics.median(times[memo]):.2f} |")
    print(
        f"\nratio before / now: min {min(times[False]) / min(times[True]):.2f}, "
        f"median {statistics.median(times[False]) / statistics.median(times[True]):.2f}; kept entries identical"
    )


if __name__ == "__main__":
    main()
