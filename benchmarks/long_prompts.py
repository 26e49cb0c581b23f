"""SmolLM2 at the longest prompts its context holds, through the workflow as a user runs it (issue 40: 8k-token
documents on a 24 GB machine): a config derived from config/replication.yaml with one stratum of ``--length`` tokens
(default 8064 = SmolLM2's 8192 context − H) and ``--documents`` documents in one trajectory job
(``documents_per_batch: auto``), run by ``snakemake --cores 1 --until metrics`` under its own results root.

    PYTHONPATH=. python benchmarks/long_prompts.py [--length 8064 --documents 4 --family helmet]

Prints the machine's memory, the batches the memory plan chose (the job's log), the job's seconds beside its floor
(benchmarks/floor.py, probed in this process after the run) and its peak RSS (Snakemake's job benchmark, in MiB).
"""

from __future__ import annotations

import argparse
import copy
import csv
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from floor import ModelShape, actions_job_floor, machine_floor
from run_floor import job_rows

from kvdiv.config import files
from kvdiv.kernel.memory_plan import CacheShape
from kvdiv.settings import Generation
from kvdiv.trajectories.batch_plan import packs
from kvdiv.trajectories.batching import document_sizes

REPO = Path(__file__).resolve().parents[1]
MODEL = "smollm2"


def derived_config(base: dict, results: str, study: str, family: str, length: int, documents: int) -> dict:
    """``base`` with one study of ``documents`` documents of one stratum, all in one trajectory job, under its own
    results root and owner (so a rerun from another temporary config file claims the same root); the analysis keeps
    the items, contrasts and Table 3 pairs of that study's actions only."""
    from kvdiv.analysis.inputs import contrast_pairs

    config = dict(base, results=results, results_owner="benchmarks/long_prompts.py")
    config["models"] = {MODEL: dict(base["models"][MODEL], documents_per_job=documents, documents_per_batch="auto")}
    spec = dict(base["studies"][study], documents_per_stratum=documents, strata=[{"family": family, "length": length}])
    config["studies"] = {study: spec}
    analysis = dict(base["analysis"])
    kept = set(spec["actions"])
    for key in ("contrasts", "table3_contrast"):
        pairs = [list(pair) for pair in contrast_pairs(analysis.get(key) or []) if set(pair) <= kept]
        if pairs:
            analysis[key] = pairs
        else:
            analysis.pop(key, None)
    analysis["studies"] = {item: name for item, name in analysis["studies"].items() if name == study}
    config["analysis"] = analysis
    return config


def meminfo() -> dict[str, float]:
    """/proc/meminfo's MemTotal and MemAvailable in GB."""
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        if key in ("MemTotal", "MemAvailable"):
            values[key] = int(value.split()[0]) * 1024 / 1e9
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="config/replication.yaml")
    parser.add_argument("--study", default="retention50")
    parser.add_argument("--family", default="helmet")
    parser.add_argument("--length", type=int, default=8064)
    parser.add_argument("--documents", type=int, default=4)
    parser.add_argument("--results", default="results/long_prompts")
    args = parser.parse_args()
    base = yaml.safe_load((REPO / args.base).read_text())
    config = derived_config(base, args.results, args.study, args.family, args.length, args.documents)
    results = REPO / args.results
    # the job runs again, computing its chains (the trajectory cache would let it reuse them); documents and the
    # model are kept
    for stale in (results / args.study / "trajectories", results / "benchmarks" / "trajectories", results / "cache"):
        shutil.rmtree(stale, ignore_errors=True)
    memory = meminfo()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long_prompts.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        command = [sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", str(path), "--until", "metrics"]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"snakemake failed:\n{done.stderr[-4000:]}")
    stratum = f"{args.family}_{args.length}"
    batch = f"{stratum}-0000-{args.documents - 1:04d}"
    log = (results / "logs" / "trajectories" / args.study / MODEL / f"{batch}.log").read_text()
    plan = re.search(r"documents_per_batch auto: (.*)", log)
    bench = next(
        csv.DictReader(
            (results / "benchmarks" / "trajectories" / args.study / MODEL / f"{batch}.tsv").open(), delimiter="\t"
        )
    )
    from transformers import AutoConfig

    model_config = AutoConfig.from_pretrained(str(results / "models" / MODEL))
    shape = ModelShape.from_config(model_config, 4)
    floor = machine_floor(shape)
    spec = config["studies"][args.study]
    named = {a: config["actions"][a] for a in spec["actions"]}
    ((_, lengths, seconds),) = job_rows(results, args.study, MODEL)
    job = actions_job_floor(floor, shape, lengths, list(named.values()), spec["horizon"])
    longest = max(lengths)
    cache = CacheShape.from_config(model_config, 4)
    held_config = copy.deepcopy(config)
    files.validate(held_config)  # as the workflow holds it: the schema's defaults filled (replicates, mode, chains)
    g = Generation.from_study(held_config, args.study)
    packed = packs(config["models"][MODEL])  # (a CPU float32 job packs its shared prompt besides: the job's own plan)
    sizes = {lay: document_sizes(cache, lay, [longest], [longest], named, g, packed) for lay in ("slots", "shared")}
    held = {lay: held[0] / 1e9 for lay, (held, _) in sizes.items()}
    extra = sizes["shared"][1][0] / 1e9
    print(f"machine: {memory['MemTotal']:.1f} GB memory, {memory['MemAvailable']:.1f} GB available at the start")
    print(f"floor probe: GEMM {floor.gemm_flops / 1e9:.1f} GFLOP/s, read bandwidth {floor.bandwidth / 1e9:.1f} GB/s")
    print(f"memory plan (job log): {plan.group(1) if plan else 'not logged'}")
    print(
        f"memory plan at {longest} tokens (the whole prompt compressed): {held['shared']:.3f} GB per document while "
        f"generating with the shared prompt, {held['slots']:.3f} GB with a copy per chain (the slots layout), "
        f"+ {extra:.3f} GB during a prefill"
    )
    print()
    print("| stratum | documents | prompt tokens | actions | job s | floor s | job / floor | peak RSS GB |")
    print("|---|---:|---|---|---:|---:|---:|---:|")
    names = ", ".join(named)
    try:  # Snakemake writes NA where it sampled nothing
        peak = f"{float(bench['max_rss']) * 2**20 / 1e9:.2f}"
    except ValueError:
        peak = "n/a"
    tokens = f"{min(lengths)}–{max(lengths)}"
    ratio = seconds / job["total"]
    print(
        f"| {stratum} | {len(lengths)} | {tokens} | {names} | {seconds:.0f} | {job['total']:.0f} | {ratio:.2f} "
        f"| {peak} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
