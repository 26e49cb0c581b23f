"""A finished run's trajectory jobs against this machine's floor: per job, the seconds Snakemake's benchmark recorded
beside the floor of its documents (benchmarks/floor.py's job_floor: their prompt lengths, the study's chains, H),
and their ratio; then per study and in all.

    PYTHONPATH=. python benchmarks/run_floor.py --config config/replication.yaml [--gemm 105.8 --bandwidth 16.6]

Without ``--gemm``/``--bandwidth`` (GFLOP/s, GB/s) the probe runs now (a few seconds, 1 thread): give the values the
probe read when the run started when the machine may have changed since. Reads ``{results}/benchmarks/trajectories/``,
each study's metrics (prompt lengths) and the resolved model's config; complete mode, one replicate, a shared
reference chain (what job_floor counts).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import polars as pl
import yaml
from floor import Floor, ModelShape, actions_job_floor, machine_floor


def job_rows(results: Path, study: str, model: str) -> list[tuple[str, list[int], float]]:
    """(batch, prompt lengths, recorded seconds) of each trajectory job of ``study`` × ``model``."""
    docs = pl.read_parquet(results / study / "metrics" / model / "replicates.parquet")
    docs = docs.select("document", "stratum", "prompt_tokens").unique()
    lengths = dict(zip(docs["document"].to_list(), docs["prompt_tokens"].to_list()))
    strata = sorted(set(docs["stratum"].to_list()))
    rows = []
    for path in sorted((results / "benchmarks" / "trajectories" / study / model).glob("*.tsv")):
        batch = path.stem  # {strata}-{first}-{last}: helmet_4096-0000-0015, or strata joined by "+" (strata_per_job)
        joined, first, last = batch.rsplit("-", 2)
        held = [s for s in strata if s in joined.split("+")]
        ids = [f"{study}-{s}-{i:04d}" for s in held for i in range(int(first), int(last) + 1)]
        seconds = float(next(csv.DictReader(path.open(), delimiter="\t"))["s"])
        rows.append((batch, [int(lengths[i]) for i in ids if i in lengths], seconds))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--gemm", type=float, help="GFLOP/s the probe read (default: probe now)")
    parser.add_argument("--bandwidth", type=float, help="GB/s the probe read (default: probe now)")
    args = parser.parse_args()
    from transformers import AutoConfig

    config = yaml.safe_load(Path(args.config).read_text())
    results = Path(config.get("results", "results"))
    shape = ModelShape.from_config(AutoConfig.from_pretrained(str(results / "models" / args.model)), 4)
    if args.gemm and args.bandwidth:
        floor = Floor(args.gemm * 1e9, args.bandwidth * 1e9, 1)
    else:
        floor = machine_floor(shape)
    print(f"floor: {floor.gemm_flops / 1e9:.1f} GFLOP/s, {floor.bandwidth / 1e9:.1f} GB/s, 1 thread")
    print("| study | job | documents | seconds | floor s | seconds / floor |")
    print("|---|---|---:|---:|---:|---:|")
    total = [0.0, 0.0]
    for study, spec in config["studies"].items():
        actions = [config["actions"][a] for a in spec["actions"]]
        study_total = [0.0, 0.0]
        for batch, lengths, seconds in job_rows(results, study, args.model):
            if not lengths:
                continue
            f = actions_job_floor(floor, shape, lengths, actions, spec["horizon"])["total"]
            study_total[0] += seconds
            study_total[1] += f
            print(f"| {study} | {batch} | {len(lengths)} | {seconds:.0f} | {f:.0f} | {seconds / f:.2f} |")
        if study_total[1]:
            seconds, f = study_total
            print(f"| {study} | all | | {seconds:.0f} | {f:.0f} | {seconds / f:.2f} |")
        total = [total[0] + study_total[0], total[1] + study_total[1]]
    if total[1]:
        print(f"| all | | | {total[0]:.0f} | {total[1]:.0f} | {total[0] / total[1]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
