"""Freed host memory kept for reuse (:func:`kvdiv.host_memory.retain_freed_memory`, what a trajectory job's script
sets) and SnapKV's window attention a block of heads at a time (:mod:`kvdiv.kernel.presses.window_attention`) against
glibc's defaults and one block: prefills and a coupled job of SmolLM2 at 1 thread in fresh processes, one per variant
and round, in rotating order.

Each process (the prompts made once by the parent: the first document of ``helmet_{n}`` of config/replication.yaml's
study for each length) measures the machine's floor (benchmarks/floor.py), then per length times the bare prefill
(no action) and the prefill with the study's actions (KernelSession), then one coupled job (prefill and H steps
of every chain) on the longest prompt; it reports seconds, seconds / floor, minor page faults and system seconds of
each part, its peak RSS, and the job's δ_t and tokens, so the parent checks that the values are the same bits:

    PYTHONPATH=. python benchmarks/host_memory.py --rounds 2 --lengths 2048 4096 --horizon 128
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
#: glibc's defaults and SnapKV's window attention in one block (what jobs ran before); the setting alone; the setting
#: and the window attention in blocks of heads (what a trajectory job runs now)
VARIANTS = ("before", "retain", "retain+blocks")

#: One process; argv: job JSON, variant, output npz. Prints one JSON line.
JOB = r"""
import json, os, resource, sys, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if sys.argv[2].startswith("retain"):
    from kvdiv.host_memory import retain_freed_memory
    assert retain_freed_memory(), "mallopt refused"
import numpy as np, torch
import kvdiv.kernel.presses.window_attention as window
if not sys.argv[2].endswith("blocks"):
    window.BLOCK_ELEMENTS = 1 << 62
repo = os.environ["KVDIV_REPO"]
sys.path.insert(0, os.path.join(repo, "benchmarks"))
from bench_common import coupled_generate, coupled_sessions, smollm2
from floor import ModelShape, coupled_chains, job_floor, machine_floor
from kvdiv.kernel.session import KernelSession
from kvdiv.settings import generation

def usage():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), u.ru_minflt, u.ru_stime

def since(before):
    now = usage()
    return {"s": now[0] - before[0], "minflt": now[1] - before[1], "sys_s": now[2] - before[2]}

job = json.load(open(sys.argv[1]))
config, loaded = smollm2(os.path.join(repo, "results/models"), os.path.join(repo, "config/replication.yaml"))
shape = ModelShape.from_config(loaded.model.config)
floor = machine_floor(shape)
actions, horizon = job["actions"], job["horizon"]
report = {"gemm": floor.gemm_flops, "bandwidth": floor.bandwidth, "prefill": {}}
for prompt in job["prompts"]:
    ids = torch.tensor(prompt)
    row = {"floor": floor.prefill_s(shape, len(prompt))}
    for kind, acts in (("bare", {}), ("actions", actions)):
        before = usage()
        KernelSession(loaded, ids, acts, generation(horizon=horizon))
        row[kind] = since(before)
    report["prefill"][str(len(prompt))] = row
seeds, doc = tuple(job["seeds"][:2]), job["seeds"][2]
before = usage()
sessions = coupled_sessions(loaded, [job["prompts"][-1]], [doc], actions, horizon, seeds=seeds)
if sys.argv[2].startswith("retain"):  # as kvdiv.trajectories.job after a batch's prefills
    from kvdiv.host_memory import release_freed_memory
    release_freed_memory()
report["job_prefill"] = since(before)
before = usage()
out = coupled_generate(sessions, [doc], list(actions), horizon, seeds=seeds, eos=loaded.eos_token_ids)
report["job_decode"] = since(before)
chains, kept = coupled_chains([0.5] * len(actions))
report["job_floor"] = job_floor(floor, shape, [len(job["prompts"][-1])], chains, horizon, kept)
np.savez(sys.argv[3], **{f"{a}/{k}": np.asarray(getattr(t, k)) for a, t in out[0].items() for k in ("x", "y", "tv")})
report["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(report))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    round_arguments(parser)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096])
    args = parser.parse_args()
    require_smollm2(REPO)
    config, loaded = smollm2(REPO / "results/models", REPO / "config/replication.yaml")
    prompts, doc = [], ""
    for n in args.lengths:
        ids, ps = stratum_prompts(loaded, config, args.study, f"helmet_{n}", 1, args.horizon)
        prompts.append(ps[0])
        doc = ids[0]
    actions = {a: config["actions"][a] for a in config["studies"][args.study]["actions"]}
    seeds = [config["seed"], config["studies"][args.study]["seed"], doc]
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    values: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp, busy_process(args.busy):
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"prompts": prompts, "seeds": seeds, "actions": actions, "horizon": args.horizon}))
        for r in range(args.rounds):
            for variant in VARIANTS[r % 3 :] + VARIANTS[: r % 3]:
                out = Path(tmp) / f"{variant}{r}.npz"
                runs[variant].append(json_process(JOB, str(job), variant, str(out), label=variant))
                values[variant].append(dict(np.load(out)))
    print(
        f"SmolLM2 at 1 thread, actions {list(actions)} ({args.study}), prompts {[len(p) for p in prompts]} tokens "
        f"(helmet), H = {args.horizon}; {args.rounds} rounds{', beside one busy process' if args.busy else ''}"
    )
    print()
    print("| part | setting | s (min, median) | s / floor (median) | page faults (median) | system s (median) |")
    print("|---|---|---:|---:|---:|---:|")
    parts = [(f"prefill {n}, {kind}", n, kind) for n in map(str, map(len, prompts)) for kind in ("bare", "actions")]
    cells: dict[str, dict[str, list[float]]] = {}
    for label, n, kind in [*parts, ("job decode (longest prompt)", None, "decode")]:
        for variant, rs in runs.items():
            if n is not None:
                parts_rs = [(x["prefill"][n][kind], x["prefill"][n]["floor"]) for x in rs]
            else:
                parts_rs = [(x["job_decode"], x["job_floor"]["decode"]) for x in rs]
            t = [p["s"] for p, _ in parts_rs]
            cells.setdefault(label, {})[variant] = t
            ratio = statistics.median(p["s"] / f for p, f in parts_rs)
            faults = statistics.median(p["minflt"] for p, _ in parts_rs) / 1e3
            sys_s = statistics.median(p["sys_s"] for p, _ in parts_rs)
            print(
                f"| {label} | {variant} | {min(t):.2f}, {statistics.median(t):.2f} | {ratio:.2f} | {faults:.0f} k | "
                f"{sys_s:.2f} |"
            )
    print()
    for label, t in cells.items():
        for variant in VARIANTS[1:]:
            print(f"{label}: ", end="")
            print_ratios(t[variant], t["before"], (variant, "before"))
    peaks = {v: max(x["peak_rss"] for x in rs) / 1e9 for v, rs in runs.items()}
    print(f"peak RSS GB (max over rounds): {', '.join(f'{v} {p:.2f}' for v, p in peaks.items())}")
    first = values["before"][0]
    same = all(
        set(v) == set(first) and all(np.array_equal(v[k], first[k]) for k in first)
        for vs in values.values()
        for v in vs
    )
    print(f"the job's tokens and δ_t the same bits in every process: {same}")
    probe = runs["before"][0]
    print(f"floor probe: GEMM {probe['gemm'] / 1e9:.1f} GFLOP/s, read bandwidth {probe['bandwidth'] / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
