"""Where a trajectory job's coupled steps spend their time (issue 21: the replication run's jobs take 3.4× the model's
forward floor): one job of config/replication.yaml's setting (SmolLM2, ``--documents`` documents of its first stratum,
its five actions, complete mode, R = 1, H = ``--horizon``), its coupled phase split by timers wrapped around the
model's decode forwards (dense layers and kvdiv's attention), the laws (softmax in float64 to CPU, to NumPy, EOS
folding) and the coupling (NumPy: reference draw, coupled draw, fixed-history TV); the rest is bookkeeping.

Run from the repository root after a default run (it reads results/models/smollm2):
    python benchmarks/step_breakdown.py --documents 16 --horizon 32
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import torch
import yaml

from bench_common import coupled_job, stratum_prompts
from kvdiv.models.loading import load_model
from kvdiv.kernel.session import KernelSession
from kvdiv.trajectories import base, complete

SECONDS: dict[str, float] = defaultdict(float)


def timed(label: str, function):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            SECONDS[label] += time.perf_counter() - start

    return wrapper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default="results/models")
    ap.add_argument("--documents", type=int, default=16)
    ap.add_argument("--horizon", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    config = yaml.safe_load(Path("config/replication.yaml").read_text())
    spec = yaml.safe_load(Path("config/config.yaml").read_text())["models"]["smollm2"]
    loaded = load_model("smollm2", spec, args.models_dir)
    study = next(iter(config["studies"]))
    strata = config["studies"][study]["strata"]
    stratum = f"{strata[0]['family']}_{strata[0]['length']}"
    ids, prompts = stratum_prompts(loaded, config, study, stratum, args.documents, args.horizon)
    actions = {a: config["actions"][a] for a in config["studies"][study]["actions"]}
    forward = loaded.model.forward

    def model_forward(*args, **kwargs):
        ids_ = kwargs.get("input_ids", args[0] if args else None)
        label = "model forward (decode)" if ids_ is not None and ids_.shape[-1] == 1 else "prefill forward"
        return timed(label, forward)(*args, **kwargs)

    loaded.model.forward = model_forward
    for name in ("couple_to_reference", "reference_draw", "tv_distance"):
        setattr(complete, name, timed("coupling (NumPy)", getattr(complete, name)))
    for name in ("fold_eos", "to_numpy"):
        setattr(base, name, timed("laws (softmax, to NumPy, EOS folding)", getattr(base, name)))
    KernelSession._law = timed("laws (softmax, to NumPy, EOS folding)", KernelSession._law)
    seconds = coupled_job(loaded, prompts, ids, (config["seed"], 1), actions, args.horizon)
    parts = {
        k: SECONDS[k] for k in ("model forward (decode)", "laws (softmax, to NumPy, EOS folding)", "coupling (NumPy)")
    }
    parts["rest (chains, batches, Python)"] = seconds["coupled"] - sum(parts.values())
    print(
        f"SmolLM2-135M-Instruct, {len(ids)} documents of {stratum} ({study}), {len(actions)} actions, H = "
        f"{args.horizon}, 1 thread: prefill {seconds['prefill']:.1f} s, coupled steps {seconds['coupled']:.1f} s\n"
    )
    print("| part of the coupled steps | seconds | share |\n|---|---:|---:|")
    for label, value in parts.items():
        print(f"| {label} | {value:.1f} | {100 * value / seconds['coupled']:.0f}% |")


if __name__ == "__main__":
    main()
