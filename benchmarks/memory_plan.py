"""Dry run of ``documents_per_batch: auto`` for config/paper.yaml's 8B models on an 80 GB GPU: bytes per document and
the batch each layout would choose (kvdiv.kernel.memory_plan), today's ``shared`` layout beside the ``slots`` layout
kvdiv had before it. Computed from the models' shapes (nothing is downloaded: the table below, from each model's
``config.json`` on the Hugging Face hub), the paper config's actions, H and R:

    PYTHONPATH=. python benchmarks/memory_plan.py [--gpu-gib 80] [--config config/paper.yaml]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from kvdiv.kernel.memory_plan import DEFAULT_SHARE, CacheShape, batch_sizes, document_bytes, prefill_bytes
from kvdiv.trajectories.base import chains_needed

#: The 8B models' shapes (bfloat16), from their config.json: meta-llama/Llama-3.1-8B-Instruct (num_hidden_layers 32,
#: num_key_value_heads 8, head_dim 128, num_attention_heads 32, hidden_size 4096, intermediate_size 14336, vocab_size
#: 128256) and Qwen/Qwen2.5-7B-Instruct (28, 4, 128 = 3584 / 28, 28, 3584, 18944, 152064); parameters from their model
#: cards (8.03 B, 7.62 B).
SHAPES = {
    "meta-llama/Llama-3.1-8B-Instruct": (CacheShape(32, 8, 128, 32, 4096, 14336, 128256, 2), 8.03e9),
    "Qwen/Qwen2.5-7B-Instruct": (CacheShape(28, 4, 128, 28, 3584, 18944, 152064, 2), 7.62e9),
}
#: CUDA context and the allocator's reserve beside the weights (a bound)
CONTEXT_BYTES = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="config/paper.yaml")
    parser.add_argument("--gpu-gib", type=float, default=80.0)
    args = parser.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    gib = 2**30
    print(f"GPU {args.gpu_gib:g} GiB; budget = {DEFAULT_SHARE['accelerator']:.0%} of what the weights leave free")
    print()
    print("| model | study | prompt | chains | layout | GiB per document | + prefill GiB | documents per batch |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    ratios = []
    for spec in config["models"].values():
        shape, params = SHAPES[spec["id"]]
        free = args.gpu_gib * gib - params * shape.element_bytes - CONTEXT_BYTES
        budget = int(DEFAULT_SHARE["accelerator"] * free)
        for study_name, study in config["studies"].items():
            actions = {name: config["actions"][name] for name in study["actions"]}
            chains = chains_needed(
                len(actions),
                study.get("replicates", 1),
                study.get("mode", "complete"),
                study.get("reference_chain", "shared"),
            )
            horizon = study.get("horizon", 128)
            for n in sorted({s["length"] for s in study["strata"]}):
                batches = {}
                for layout in ("slots", "shared"):
                    held = document_bytes(shape, n, n, actions, chains, horizon, layout)
                    peak = prefill_bytes(shape, n, actions)
                    batches[layout] = batch_sizes([held] * 1000, [peak] * 1000, budget)[0]
                    print(
                        f"| {spec['id'].split('/')[1]} | {study_name} | {n} | {chains} | {layout} | "
                        f"{held / gib:.2f} | {peak / gib:.2f} | {batches[layout]} |"
                    )
                ratios.append(batches["shared"] / batches["slots"])
    print()
    print(f"documents per batch, shared / slots: min {min(ratios):.1f}x, max {max(ratios):.1f}x")


if __name__ == "__main__":
    main()
