"""The shared-prompt cache layout (model spec ``kv_layout: shared``) against the slots layout it replaced: one coupled
job per layout and round, in fresh processes in alternating order, SmolLM2 at 1 thread.

Each process prefills B documents of ``helmet_{n}`` (the study's actions; prompts made once by the parent) and
generates H steps of all their chains in one forward per step (what a trajectory rule runs, without writing stores);
it reports prefill and decode seconds, its peak RSS and its RSS after loading the model, the bytes each session holds
for its caches (``KernelSession.memory``), the K/V entries its decode attention read per step
(``KernelSession.kv_entries_read``), the machine's floor for the job (benchmarks/floor.py, measured in the process),
and every δ_t and token, so the parent compares the layouts' values:

    PYTHONPATH=. python benchmarks/shared_prompt.py --rounds 2 --documents 4 --length 4096 --horizon 128

``--actions`` picks actions of config/replication.yaml; ``--blocks 9`` also runs the shared layout with 9 chains per
product over the prompt instead of the device's fixed block (the choice of ``prompt_block``).

``--attention`` measures instead, in this process, the decode attention of one (layer, document) over a shared prompt
of ``--length`` entries at SmolLM2's shapes (3 KV heads of 3 query heads, 64 wide; 24 tail entries per chain), for
3, 5, 7 and 9 chains and blocks of 4 and 8 (or ``--blocks``): torch's batched products against the prompt packed for
oneDNN (:func:`kvdiv.kernel.shared_prompt.pack_prompt`), interleaved, over 16 prompts so none stays in cache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
from bench_common import (
    busy_process,
    json_process,
    print_ratios,
    require_smollm2,
    round_arguments,
    smollm2,
    stratum_prompts,
)

REPO = Path(__file__).resolve().parents[1]

#: One job in a fresh process; argv: prompts JSON, layout, output npz. Prints one JSON line.
JOB = r"""
import json, os, resource, sys, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch
repo = os.environ["KVDIV_REPO"]
sys.path.insert(0, os.path.join(repo, "benchmarks"))
from bench_common import coupled_generate, coupled_sessions, smollm2
from floor import ModelShape, job_floor, machine_floor

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

job = json.load(open(sys.argv[1]))
config, loaded = smollm2(os.path.join(repo, "results/models"), os.path.join(repo, "config/replication.yaml"))
layout, _, block = sys.argv[2].partition(":")
loaded.spec["kv_layout"] = layout
if block:  # another fixed block of chains per product over the prompt (kvdiv.kernel.decode_attention.prompt_block)
    import kvdiv.kernel.batched_step
    kvdiv.kernel.batched_step.prompt_block = lambda device: int(block)
shape = ModelShape.from_config(loaded.model.config)
floor = machine_floor(shape)
base = rss()
actions, horizon = job["actions"], job["horizon"]
seeds, ids = tuple(job["seeds"][0][:2]), [s[2] for s in job["seeds"]]
start = time.perf_counter()
sessions = coupled_sessions(loaded, job["prompts"], ids, actions, horizon, seeds=seeds)
prefill = time.perf_counter() - start
held = [sum(s.memory().values()) for s in sessions]
start = time.perf_counter()
out = coupled_generate(sessions, ids, list(actions), horizon, seeds=seeds, eos=loaded.eos_token_ids)
decode = time.perf_counter() - start
arrays = {f"{d}/{a}/{k}": np.asarray(getattr(t, k)) for d, doc in enumerate(out) for a, t in doc.items()
          for k in ("x", "y", "tv")}
np.savez(sys.argv[3], **arrays)
retention = (1 + 2 * len(actions) * 0.5) / (2 * len(actions) + 1)
lengths = [len(p) for p in job["prompts"]]
fl = job_floor(floor, shape, lengths, 2 * len(actions) + 1, horizon, retention)
steps = max(1, sum(len(t.x[0]) for t in out[0].values()) // len(actions))
print(json.dumps({
    "prefill": prefill, "decode": decode, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "base_rss": base, "held": held, "kv_entries_per_step": sum(s.kv_entries_read for s in sessions) / steps,
    "entry_bytes": 2 * shape.layers * shape.kv_heads * shape.head_dim * 4,
    "floor": fl, "gemm": floor.gemm_flops, "bandwidth": floor.bandwidth, "steps": steps,
}))
"""


def attention_table(length: int, rounds: int, blocks: list[int]) -> None:
    """Milliseconds per (layer, document) of ``decode_attention._cascade`` (see the module docstring)."""
    import time

    import torch

    from kvdiv.kernel.decode_attention import DecodePart, PromptPass, _cascade
    from kvdiv.kernel.shared_prompt import SharedPrompt, pack_prompt

    torch.set_num_threads(1)
    kv, groups, dim, span, capacity, caches = 3, 3, 64, 24, 192, 4
    gen = torch.Generator().manual_seed(0)

    def part(chains: int, block: int, packed: bool) -> DecodePart:
        keys_t, values = torch.randn(kv, dim, length, generator=gen), torch.randn(kv, length, dim, generator=gen)
        prompt = SharedPrompt([keys_t], [values], length, [torch.zeros(caches, kv, length)], {})
        if packed:
            pack_prompt(prompt)
        rows = torch.arange(chains) % caches
        pp = PromptPass(prompt.keys_t, prompt.values, prompt.bias, rows, block, prompt.packed)
        tail_k, tail_v = torch.randn(chains, kv, dim, capacity), torch.randn(chains, kv, capacity, dim)
        lengths = torch.full((chains,), span)
        runs = [(0, chains, 0, chains, span)]
        return DecodePart(0, chains, [tail_k], [tail_v], [torch.zeros(chains, kv, capacity)], rows, lengths, runs, pp)

    print(f"decode attention of one (layer, document), {length}-entry prompt, SmolLM2's shapes, 1 thread, ms:")
    print("| chains | block | torch's products (min, median) | packed (min, median) | packed / torch (min, median) |")
    print("|---:|---:|---|---|---|")
    for chains in (3, 5, 7, 9):
        q = torch.randn(chains * kv, groups, dim, generator=gen)
        out = torch.empty_like(q)
        for block in blocks:
            parts = {packed: [part(chains, block, packed) for _ in range(16)] for packed in (False, True)}
            ms: dict[bool, list[float]] = {False: [], True: []}
            for r in range(rounds):
                for packed in (False, True) if r % 2 == 0 else (True, False):
                    start = time.perf_counter()
                    for i in range(64):
                        _cascade(parts[packed][i % 16], 0, q, out, dim**-0.5)
                    ms[packed].append((time.perf_counter() - start) / 64 * 1e3)
            ratio = [p / t for p, t in zip(ms[True], ms[False])]
            cells = [f"{min(x):.3f}, {statistics.median(x):.3f}" for x in (ms[False], ms[True], ratio)]
            print(f"| {chains} | {block} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    round_arguments(parser)
    parser.add_argument("--documents", type=int, default=4)
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--actions", nargs="+", help="these actions of config/replication.yaml (default: the study's)")
    parser.add_argument(
        "--blocks", type=int, nargs="+", default=[], help="also the shared layout with these chains per prompt product"
    )
    parser.add_argument("--attention", action="store_true", help="only the decode attention, torch's against packed")
    args = parser.parse_args()
    if args.attention:
        with busy_process(args.busy):
            attention_table(args.length, max(args.rounds, 5), args.blocks or [4, 8])
        return
    require_smollm2(REPO)
    config, loaded = smollm2(REPO / "results/models", REPO / "config/replication.yaml")
    stratum = f"helmet_{args.length}"
    ids, prompts = stratum_prompts(loaded, config, args.study, stratum, args.documents, args.horizon)
    seeds = [(config["seed"], config["studies"][args.study]["seed"], i) for i in ids]
    actions = {a: config["actions"][a] for a in args.actions or config["studies"][args.study]["actions"]}
    layouts = ["slots", "shared", *(f"shared:{b}" for b in args.blocks)]
    runs: dict[str, list[dict]] = {layout: [] for layout in layouts}
    with tempfile.TemporaryDirectory() as tmp, busy_process(args.busy):
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"prompts": prompts, "seeds": seeds, "actions": actions, "horizon": args.horizon}))
        values = {}
        for r in range(args.rounds):
            for layout in layouts if r % 2 == 0 else layouts[::-1]:
                out = Path(tmp) / f"{layout}{r}.npz"
                runs[layout].append(json_process(JOB, str(job), layout, str(out), label=layout))
                values.setdefault(layout, dict(np.load(out)))
    gb = 1e9
    print(
        f"{args.documents} documents of {stratum} ({[len(p) for p in prompts]} tokens), H = {args.horizon}, "
        f"actions {list(actions)}, SmolLM2 at 1 thread; {args.rounds} rounds"
    )
    print()
    print(
        "| layout | prefill s (median) | decode s per document (min, median) | decode / floor | job / floor | "
        "peak RSS GB | peak − model GB per document | held GB per document | K/V MB read per step and document |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for layout, rs in runs.items():
        d = args.documents
        decode = [x["decode"] / d for x in rs]
        floor_decode = statistics.median(x["floor"]["decode"] for x in rs) / d
        job = statistics.median((x["prefill"] + x["decode"]) / x["floor"]["total"] for x in rs)
        peak = max(x["peak_rss"] for x in rs)
        per_doc = max((x["peak_rss"] - x["base_rss"]) / d for x in rs)
        held = statistics.median(sum(x["held"]) / d for x in rs)
        kv = statistics.median(x["kv_entries_per_step"] * x["entry_bytes"] / d for x in rs) / 1e6
        print(
            f"| {layout} | {statistics.median(x['prefill'] for x in rs):.1f} | {min(decode):.2f}, "
            f"{statistics.median(decode):.2f} | {statistics.median(decode) / floor_decode:.2f} | {job:.2f} | "
            f"{peak / gb:.2f} | {per_doc / gb:.3f} | {held / gb:.3f} | {kv:.1f} |"
        )
    print()
    print_ratios([x["decode"] for x in runs["shared"]], [x["decode"] for x in runs["slots"]], ("shared", "slots"))
    peaks = [
        (a["peak_rss"] - a["base_rss"]) / (b["peak_rss"] - b["base_rss"]) for a, b in zip(runs["shared"], runs["slots"])
    ]
    print(f"peak RSS above the model, shared / slots per round: {', '.join(f'{p:.3f}' for p in peaks)}")
    floor = runs["shared"][0]
    print(
        f"floor probe: GEMM {floor['gemm'] / 1e9:.1f} GFLOP/s, read bandwidth {floor['bandwidth'] / 1e9:.1f} GB/s; "
        f"prompt copy {sum(len(p) for p in prompts) / d * floor['entry_bytes'] / 1e6:.1f} MB per document"
    )
    a, b = values["shared"], values["slots"]
    arrays = sorted({k.rsplit("/", 1)[0] for k in a})
    same = [k for k in arrays if np.array_equal(a[f"{k}/x"], b[f"{k}/x"]) and np.array_equal(a[f"{k}/y"], b[f"{k}/y"])]
    tv = max((float(np.max(np.abs(a[f"{k}/tv"] - b[f"{k}/tv"]))) for k in same), default=float("nan"))
    print(
        f"values: {len(same)} of {len(arrays)} (document, action) pairs drew the same tokens in both layouts, their "
        f"δ_t within {tv:.2e}; the others left the common path at a draw that round-off moved"
    )
    for layout in layouts[2:]:  # another block: the same products' rows, another shape (bits equal on a GEMM whose
        # rows do not depend on how many there are; docs/internals.md#kernel-pairs)
        print_ratios([x["decode"] for x in runs[layout]], [x["decode"] for x in runs["shared"]], (layout, "shared"))
        c = values[layout]
        print(f"  {layout}: values {'bit for bit' if all(np.array_equal(c[k], a[k]) for k in a) else 'not'} equal")


if __name__ == "__main__":
    main()
