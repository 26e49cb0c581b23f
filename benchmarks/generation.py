"""Benchmark: the coupled trajectory job against plain sampling of the same tokens, quiet and beside a busy process.

Per document of ``ruler_1024`` (study retention50, its actions, R = 1, H tokens, SmolLM2-135M-Instruct float32,
1 thread, OMP_WAIT_POLICY=PASSIVE as the workflow's jobs):

- **baseline**: the plain chains the coupled job replaces — ``model.generate`` sampling H tokens (temperature 1,
  no top-k/top-p, EOS suppressed so every run samples exactly H) with the full cache and once per action under
  kvpress's press context manager (``with press(model): model.generate(...)``), with torch's default Linear kernels
  (stock transformers, what a user runs without kvdiv). Timed on the first document.
- **coupled, B = 1**: one :class:`kvdiv.kernel.session.KernelSession` (one prefill for all caches) and
  :func:`kvdiv.trajectories.generate.generate_documents` for one document (per step ONE batched forward over P at x,
  Q at y and Q at x for every action), Linear weights packed for oneDNN (the default, ``prepack: true``).
- **coupled, B = N** (``--documents``): N documents in one job, one forward per step for all of them (the workflow's
  ``documents_per_job``); its time / N is the per-document cost.
- **coupled, B = 1, aten**: as B = 1 with ``prepack: false`` (the gain of the packed weights alone).

The variants are interleaved within each round (order rotated every round); each round's ratio divides a variant's
per-document seconds by the same round's baseline, and each coupled job's seconds by this machine's floor for it
(benchmarks/floor.py). The table reports min and median over rounds; ``--busy-rounds`` repeats the rounds beside one
busy process (``python -c "while True: pass"``).

Run (after `snakemake --cores 1 results/models/smollm2/provenance.json`):
    python benchmarks/generation.py --horizon 128 --documents 4 --rounds 3 --busy-rounds 2
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as workflow_scripts/trajectories.py, before torch starts

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import yaml  # noqa: E402

from bench_common import busy_process, coupled_job, stratum_prompts  # noqa: E402

from kvdiv.models.loading import load_model  # noqa: E402
from kvdiv.models.prepacked import prepack_linears, unpack_linears  # noqa: E402
from kvdiv.kernel.presses.registry import build_press  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def baseline(loaded, ids: list[int], actions: dict, horizon: int, seed: int) -> float:
    """Seconds of model.generate for the full cache and once per action (with the action's press), stock kernels."""
    unpack_linears(loaded.model)
    x = torch.tensor([ids])
    kwargs = dict(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=horizon,
        min_new_tokens=horizon,
        attention_mask=torch.ones_like(x),
        pad_token_id=loaded.eos_token_ids[0],
    )
    torch.manual_seed(seed)
    start = time.perf_counter()
    out = loaded.model.generate(x, **kwargs)
    assert out.shape[1] == x.shape[1] + horizon
    for name, spec in actions.items():
        with build_press(spec, name=name, prompt_length=x.shape[1])(loaded.model):
            out = loaded.model.generate(x, **kwargs)
        assert out.shape[1] == x.shape[1] + horizon
    return time.perf_counter() - start


def coupled(
    loaded, prompts: list[list[int]], doc_ids: list[str], actions: dict, horizon: int, packed: bool
) -> tuple[float, float]:
    """Seconds of one coupled job over ``prompts`` (:func:`bench_common.coupled_job`), with or without packed
    weights, and the machine's floor for the job (benchmarks/floor.py, measured in this process)."""
    (prepack_linears if packed else unpack_linears)(loaded.model)
    job = coupled_job(loaded, prompts, doc_ids, (1, 2), actions, horizon)
    return job["total"], job["floor"]


def rounds(loaded, prompts, doc_ids, actions, horizon, n_rounds, label) -> list[dict]:
    """``n_rounds`` interleaved rounds; per round the per-document seconds, the ratio to the baseline and (coupled
    jobs) the ratio to the job's floor of each variant."""
    n = len(prompts)
    variants = {
        "baseline": lambda r: (baseline(loaded, prompts[0], actions, horizon, seed=r), float("nan")),
        "coupled B=1": lambda r: coupled(loaded, prompts[:1], doc_ids[:1], actions, horizon, packed=True),
        f"coupled B={n}": lambda r: coupled(loaded, prompts, doc_ids, actions, horizon, packed=True),
        "coupled B=1 aten": lambda r: coupled(loaded, prompts[:1], doc_ids[:1], actions, horizon, packed=False),
    }
    per = {name: n if name == f"coupled B={n}" else 1 for name in variants}
    names = list(variants)
    out = []
    for r in range(n_rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        timed = {name: variants[name](r) for name in order}
        row = {
            name: {
                "per_document_s": timed[name][0] / per[name],
                "ratio": timed[name][0] / per[name] / timed["baseline"][0],
                "over_floor": timed[name][0] / timed[name][1],
            }
            for name in names
        }
        out.append(row)
        print(json.dumps({"label": label, "round": r, **row}), flush=True)
    prepack_linears(loaded.model)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--documents", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy-rounds", type=int, default=2)
    parser.add_argument("--models-dir", default=str(REPO / "results/models"))
    args = parser.parse_args()
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    spec = {**config["models"]["smollm2"], "threads": 1, "device": "cpu", "dtype": "float32"}
    loaded = load_model("smollm2", spec, args.models_dir)
    actions = {a: config["actions"][a] for a in config["studies"]["retention50"]["actions"]}
    doc_ids, prompts = stratum_prompts(loaded, config, "retention50", "ruler_1024", args.documents, args.horizon)
    print(
        f"documents {doc_ids[0]}..: {[len(p) for p in prompts]} prompt tokens; actions {list(actions)}; "
        f"H={args.horizon}; threads {torch.get_num_threads()}; OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}",
        flush=True,
    )
    results = {"quiet": rounds(loaded, prompts, doc_ids, actions, args.horizon, args.rounds, "quiet")}
    if args.busy_rounds:
        with busy_process():
            results["beside a busy process"] = rounds(
                loaded, prompts, doc_ids, actions, args.horizon, args.busy_rounds, "busy"
            )
    print(
        "\n| machine | variant | per-document s (min, median) | ratio to baseline (min, median) | "
        "job s / floor (median) |"
    )
    print("|---|---|---|---|---:|")
    for label, rows in results.items():
        for name in rows[0]:
            secs = [r[name]["per_document_s"] for r in rows]
            ratios = [r[name]["ratio"] for r in rows]
            floor = statistics.median(r[name]["over_floor"] for r in rows)
            print(
                f"| {label} | {name} | {min(secs):.2f}, {statistics.median(secs):.2f} | "
                f"{min(ratios):.3f}, {statistics.median(ratios):.3f} | {'–' if floor != floor else f'{floor:.2f}'} |"
            )


if __name__ == "__main__":
    main()
