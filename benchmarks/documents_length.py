"""Benchmark: sizing a document to a token budget — kvdiv's secant search vs plain bisection vs growing
the haystack one unit at a time (the naive approach), all on the SmolLM2 tokenizer in this one process.

Each method finds the largest haystack whose chat-templated prompt fits the target; we report the
tokenizer calls, the tokens tokenised in total, and the wall time (best of 3). All three must find the
same size (checked).

    python benchmarks/documents_length.py [--targets 1024 4096 16384 65536] [--naive-max 4096]

Needs results/models/smollm2 (``snakemake --cores 1 results/models/smollm2/provenance.json``).
Prints Markdown; the recorded results are in benchmarks/documents_length.md.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from kvdiv.documents.length import largest_fitting
from kvdiv.documents.registry import get_task
from kvdiv.documents.render import build_prompt, chat_function

REPO = Path(__file__).resolve().parents[1]


def bisection(f, target):
    """Baseline: bisection on [0, target] units (every unit adds at least one token)."""
    lo, hi = 0, target + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if f(mid) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def naive(f, target):
    """Baseline: add one unit at a time, retokenising the whole prompt each time."""
    n = 0
    while f(n + 1) <= target:
        n += 1
    return n


def measure(method, render, tok, target):
    stats = {"calls": 0, "tokens": 0}

    def f(n):
        ids = tok.encode(render(n), add_special_tokens=False)
        stats["calls"] += 1
        stats["tokens"] += len(ids)
        return len(ids)

    best = float("inf")
    for _ in range(3):
        stats.update(calls=0, tokens=0)
        start = time.perf_counter()
        n = method(f, target)
        best = min(best, time.perf_counter() - start)
    return n, stats["calls"], stats["tokens"], best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--naive-max", type=int, default=4096, help="largest target the naive method runs at")
    parser.add_argument("--tasks", nargs="+", default=["niah_single_noise_number", "json_kv", "frequent_words"])
    args = parser.parse_args()
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    tok = AutoTokenizer.from_pretrained(REPO / "results" / "models" / "smollm2")
    chat = chat_function(tok, True)
    methods = {
        "secant (kvdiv)": lambda f, t: largest_fitting(f, t)[0],
        "bisection": bisection,
        "naive (+1 unit)": naive,
    }
    print(
        f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}; "
        f"tokenizer SmolLM2-135M-Instruct (fast), chat template on, best of 3.\n"
    )
    print("| task | target | method | units | tokenizer calls | tokens tokenised | time (s) |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for task in args.tasks:
        for target in args.targets:
            inst = get_task(task).build(np.random.default_rng(1), target)

            def render(n, inst=inst):
                return build_prompt(inst.render(n, 0), inst.answer_prefix, chat)

            found = set()
            for name, method in methods.items():
                if name.startswith("naive") and target > args.naive_max:
                    continue
                n, calls, tokens, seconds = measure(method, render, tok, target)
                found.add(n)
                print(f"| {task} | {target} | {name} | {n} | {calls} | {tokens} | {seconds:.3f} |")
            assert len(found) == 1, f"methods disagree on {task} {target}: {found}"


if __name__ == "__main__":
    main()
