"""Benchmark: SmolLM2's Linear layers with torch's default CPU matmul against oneDNN with packed weights.

``kvdiv.models.prepacked`` (model key ``prepack``, default true). SmolLM2-135M-Instruct float32, 1 thread,
OMP_WAIT_POLICY=PASSIVE. Measured per round, both kernels interleaved (order alternating):
- the 211 Linear layers one decode step runs (30 layers × q/k/v/o/gate/up/down + lm_head), the model's own modules
  in order on random inputs of M rows, M in ``--rows``;
- the prefill of one 1021-token document (the model's forward with a DynamicCache, as KernelSession's prefill);
- ``min_rows`` for the model at 1 and 2 threads (the padding of decode steps), and how long measuring it takes.
Min and median over ``--rounds`` rounds, then the same beside one busy process (``--busy-rounds``).

Run (after `snakemake --cores 1 results/models/smollm2/provenance.json`):
    python benchmarks/prepacked_linear.py --rounds 5 --busy-rounds 3
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import yaml  # noqa: E402

from bench_common import busy_process  # noqa: E402

from kvdiv.models import prepacked  # noqa: E402
from kvdiv.models.loading import load_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@torch.no_grad()
def linears_seconds(linears: list[torch.nn.Linear], rows: int) -> float:
    """Seconds of every Linear of a step on M = rows random rows (inputs made beforehand)."""
    inputs = {m.in_features: torch.randn(rows, m.in_features) for m in linears}
    start = time.perf_counter()
    for m in linears:
        m(inputs[m.in_features])
    return time.perf_counter() - start


@torch.no_grad()
def prefill_seconds(model, ids: torch.Tensor) -> float:
    from transformers import DynamicCache

    start = time.perf_counter()
    model(input_ids=ids, past_key_values=DynamicCache(), use_cache=True)
    return time.perf_counter() - start


def rounds(loaded, ids, rows: list[int], n_rounds: int, label: str) -> dict[str, list[float]]:
    model = loaded.model
    out: dict[str, list[float]] = {}
    for r in range(n_rounds):
        for kernel in ("packed", "aten") if r % 2 == 0 else ("aten", "packed"):
            (prepacked.prepack_linears if kernel == "packed" else prepacked.unpack_linears)(model)
            linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
            for m in rows:
                out.setdefault(f"{kernel} linears M={m}", []).append(linears_seconds(linears, m))
            out.setdefault(f"{kernel} prefill", []).append(prefill_seconds(model, ids))
        print(label, r, {k: round(v[-1] * 1e3, 1) for k, v in out.items()}, flush=True)
    prepacked.prepack_linears(model)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 6, 12, 24, 48])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--busy-rounds", type=int, default=3)
    parser.add_argument("--models-dir", default=str(REPO / "results/models"))
    args = parser.parse_args()
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    loaded = load_model("smollm2", {**config["models"]["smollm2"], "threads": 1}, args.models_dir)
    n = len([m for m in loaded.model.modules() if isinstance(m, torch.nn.Linear)])
    for threads in (1, 2):
        torch.set_num_threads(threads)
        start = time.perf_counter()
        need = prepacked.min_rows(loaded.model)
        print(f"min_rows at {threads} threads: {need} (measured in {time.perf_counter() - start:.2f} s)")
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, loaded.model.config.vocab_size, (1, 1021), generator=gen)
    print(f"{n} Linear layers; torch {torch.__version__}; {torch.backends.cpu.get_cpu_capability()}", flush=True)
    results = {"quiet": rounds(loaded, ids, args.rows, args.rounds, "quiet")}
    if args.busy_rounds:
        with busy_process():
            results["beside a busy process"] = rounds(loaded, ids, args.rows, args.busy_rounds, "busy")
    print("\n| machine | measurement | aten ms (min, median) | packed ms (min, median) | packed / aten (min, median) |")
    print("|---|---|---|---|---|")
    for label, out in results.items():
        for what in [f"linears M={m}" for m in args.rows] + ["prefill"]:
            a, p = out[f"aten {what}"], out[f"packed {what}"]
            ratio = [x / y for x, y in zip(p, a)]
            print(
                f"| {label} | {what} | {min(a) * 1e3:.1f}, {statistics.median(a) * 1e3:.1f} | "
                f"{min(p) * 1e3:.1f}, {statistics.median(p) * 1e3:.1f} | "
                f"{min(ratio):.2f}, {statistics.median(ratio):.2f} |"
            )


if __name__ == "__main__":
    main()
