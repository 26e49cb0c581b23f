"""One document block's process, with and without torch: what the ``document`` rule's job costs start to exit.

Each round runs, in a fresh ``python`` process each and in alternating order, the block as
workflow_scripts/document.py runs it (``tokenizer_only_process()`` first: transformers without torch) and the same
block in a process that imports torch first (what every block cost before), then checks that the two JSONL files are
byte-identical. Reports min and median wall seconds per variant and their ratio; ``--busy`` repeats it beside one
busy process. Needs the resolved SmolLM2 (``snakemake --cores 1 results/models/smollm2/provenance.json``):
    python benchmarks/document_blocks.py --rounds 5 [--busy] [--count 16] [--stratum ruler_704]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import busy_process

#: The block's process; argv: variant ("tokenizer_only" or "with_torch"), request JSON, output, models dir.
BLOCK = """
import json, sys
if sys.argv[1] == "tokenizer_only":
    from kvdiv.models.tokenization import tokenizer_only_process
    assert tokenizer_only_process()
else:
    import torch  # noqa: F401  (what a block's process imported before: transformers with torch)
from kvdiv.documents.study import write_document_block
from kvdiv.settings import DocumentRequest
write_document_block(sys.argv[3], DocumentRequest(**json.loads(sys.argv[2])), sys.argv[4], progress=False)
"""

VARIANTS = ("with_torch", "tokenizer_only")


def block_request(count: int, stratum: str) -> dict:
    """The replication's first ``count`` documents of ``stratum`` (retention50), as the document rule asks."""
    from kvdiv.config import load
    from kvdiv.settings import Runtime

    raw = load("config/replication.yaml")  # validated, defaults filled
    spec = Runtime.split(dict(raw["models"]["smollm2"]))[0]
    return dict(
        study="retention50",
        stratum=stratum,
        first=0,
        count=count,
        master_seed=int(raw["seed"]),
        study_seed=int(raw["studies"]["retention50"]["seed"]),
        model="smollm2",
        model_spec=spec,
        source={"source": "synthetic"},
        horizon=int(raw["studies"]["retention50"]["horizon"]),
        tasks=None,
    )


def one_block(variant: str, request: dict, out: Path, models_dir: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", BLOCK, variant, json.dumps(request), str(out), str(models_dir)],
        check=True,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def measure(rounds: int, request: dict, models_dir: Path) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                times[variant].append(one_block(variant, request, Path(tmp) / f"{variant}.jsonl", models_dir))
            a, b = (Path(tmp) / f"{v}.jsonl" for v in VARIANTS)
            if a.read_bytes() != b.read_bytes():
                raise SystemExit("the two variants wrote different blocks")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=16, help="documents in the block (the replication's 16)")
    parser.add_argument("--stratum", default="ruler_704")
    parser.add_argument("--models-dir", type=Path, default=Path("results/models"))
    parser.add_argument("--busy", action="store_true", help="beside one busy process")
    args = parser.parse_args()
    request = block_request(args.count, args.stratum)
    with busy_process(args.busy):
        times = measure(args.rounds, request, args.models_dir)
    label = "beside one busy process" if args.busy else "quiet"
    print(f"{args.count}-document block of {args.stratum}, {args.rounds} interleaved rounds, {label}")
    print("| process | min s | median s |")
    print("|---|---:|---:|")
    for variant in VARIANTS:
        print(f"| {variant} | {min(times[variant]):.2f} | {statistics.median(times[variant]):.2f} |")
    ratios = [a / b for a, b in zip(times["with_torch"], times["tokenizer_only"])]
    print(f"ratio with_torch / tokenizer_only per round: min {min(ratios):.2f}, median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
