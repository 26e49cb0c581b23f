"""Benchmark: Numba naive/SWRB samplers vs the plain NumPy/Python implementation of the same samplers
(tests/support/finite_numpy.py).

Both run in this one process on the same finite-state systems (one per suite shape) and the same
seeds; the Numba kernels are compiled (and checked equal to the baseline) before timing. Then the
24-system study at the config's replicate count: variance ratios, evaluation ratio and variance–cost
advantage beside the paper's (arXiv 2609.16617, §4.4).

    python benchmarks/finite_samplers.py [--baseline-replicates 2000] [--numba-replicates 200000]

Prints Markdown; the recorded results are in benchmarks/finite_samplers.md.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from kvdiv.finite.sampling import sample
from kvdiv.finite.study import comparison_table, estimate_table, exact_table, paper_comparison, to_markdown
from kvdiv.finite.suite import build_suite

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support.finite_numpy import sample_numpy  # noqa: E402  (the NumPy twins live with the tests)


def timed(fn, repeats: int = 3) -> float:
    """Best wall time of ``repeats`` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-replicates", type=int, default=2000)
    parser.add_argument("--numba-replicates", type=int, default=200_000)
    parser.add_argument("--config", default=str(REPO / "config/config.yaml"))
    args = parser.parse_args()

    params = yaml.safe_load(Path(args.config).read_text())["finite_state"]
    suite = build_suite(params)
    # one system per shape: persistent, strength 0.04, with EOS (the longest branches of its shape)
    chosen = [s for s in suite if "-s0.04-persistent-eos" in s.name]

    print(
        f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"numpy {np.__version__}\n"
    )
    print("## Numba vs plain NumPy/Python (replicates per second, best of 3)\n")
    print("| system | method | NumPy/Python rep/s | Numba rep/s | speed-up |")
    print("|---|---|---|---|---|")
    speedups = []
    for system in chosen:
        for method in ("naive", "swrb"):
            a = sample(system, method, 500, seed=1, window=2)  # compiles the kernels
            b = sample_numpy(system, method, 500, seed=1, window=2)
            assert all(np.array_equal(a.values[c], b.values[c]) for c in a.values), "baseline and Numba disagree"
            t_np = timed(lambda: sample_numpy(system, method, args.baseline_replicates, seed=2, window=2), 1)
            t_nb = timed(lambda: sample(system, method, args.numba_replicates, seed=2, window=2))
            rate_np = args.baseline_replicates / t_np
            rate_nb = args.numba_replicates / t_nb
            speedups.append(rate_nb / rate_np)
            print(f"| {system.name} | {method} | {rate_np:,.0f} | {rate_nb:,.0f} | {rate_nb / rate_np:,.0f}× |")
    print(f"\nspeed-up: min {min(speedups):,.0f}×, median {np.median(speedups):,.0f}× (target ≥ 50×)\n")

    print(f"## The 24-system study ({params['replicates']} replicates per system and sampler)\n")
    start = time.perf_counter()
    exact = exact_table(suite, params["window"])
    estimates = estimate_table(suite, params["replicates"], params["seed"], params["window"], params["alpha"])
    comparison = comparison_table(exact, estimates)
    paper = yaml.safe_load((REPO / "kvdiv/data/paper_reported_values.yaml").read_text())["finite_state"]
    print(to_markdown(paper_comparison(comparison, paper)))
    print(f"study wall time (exact + both samplers, 24 systems): {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
