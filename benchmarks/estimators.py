"""Benchmark: kvdiv.metrics' Numba kernel `replicate_counts` against a vectorised NumPy baseline, and the
whole `compute_metrics` on a paper-sized cube (288 documents × 3 actions × R replicates × H = 128).

Run: python benchmarks/metrics.py  (results recorded in benchmarks/metrics.md)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from kvdiv.metrics import compute_metrics
from kvdiv.metric_kernels import replicate_counts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.synthetic_cube import simulate_cube  # noqa: E402  (synthetic cubes live with the tests)


def numpy_counts(mismatch: np.ndarray, tv: np.ndarray, fixed_tv: np.ndarray, eos_any: np.ndarray, window: int):
    """The same sums as `replicate_counts`, vectorised with NumPy (the baseline)."""
    n, h = mismatch.shape
    t = np.arange(1, h + 1)
    tau = np.where(mismatch.any(1), mismatch.argmax(1) + 1, h + 1)
    first_eos = np.where(eos_any.any(1), eos_any.argmax(1) + 1, h + 1)
    m = mismatch.astype(float)
    after = t[None, :] > tau[:, None]
    sums = np.stack(
        [
            m.sum(1),
            (m * after).sum(1),
            tv.sum(1),
            fixed_tv.sum(1),
            (m * (t[None, :] <= first_eos[:, None])).sum(1),
            (m * (t[None, :] < first_eos[:, None])).sum(1),
            (m * after * (t[None, :] <= tau[:, None] + window)).sum(1),
        ],
        axis=1,
    )
    return tau, first_eos, sums


def best_of(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    for reps in (4, 16):
        n, h = 288 * 3 * reps, 128
        mismatch = rng.random((n, h)) < 0.05
        tv = rng.random((n, h))
        fixed = rng.random((n, h))
        eos = np.cumsum(rng.random((n, h)) < 0.01, axis=1) > 0
        replicate_counts(mismatch[:2], tv[:2], fixed[:2], eos[:2], 32)  # compile / load cache
        a, b = replicate_counts(mismatch, tv, fixed, eos, 32), numpy_counts(mismatch, tv, fixed, eos, 32)
        assert all(np.allclose(x, y) for x, y in zip(a, b))
        t_numba = best_of(lambda: replicate_counts(mismatch, tv, fixed, eos, 32))
        t_numpy = best_of(lambda: numpy_counts(mismatch, tv, fixed, eos, 32))
        print(
            f"replicate sums, {n} rows x H={h}: numpy {1e3 * t_numpy:.1f} ms, numba {1e3 * t_numba:.1f} ms, "
            f"speed-up {t_numpy / t_numba:.1f}x"
        )
    ds = simulate_cube({"snapkv_half": 0.03, "snapkv_512": 0.1, "recent_half": 0.12}, 288, 4, 128, seed=1)
    ds = ds.load()
    compute_metrics(ds, 32)
    t_all = best_of(lambda: compute_metrics(ds, 32), repeat=3)
    print(f"compute_metrics, 288 documents x 3 actions x 4 replicates x H=128: {t_all:.2f} s")
    analysis_timings()


def analysis_timings() -> None:
    """Figures 5-7 data and Tables 2-3 for one model at the paper's scale, 2 000 bootstrap resamples."""
    from kvdiv.analysis.inputs import Metrics
    from kvdiv.results.registry import get_result

    strata = [f"{f}_{n}" for f in ("ruler", "helmet") for n in (4096, 8192, 16384)]
    ds = simulate_cube(
        {"snapkv_half": 0.03, "snapkv_512": 0.1, "recent_half": 0.12},
        288,
        1,
        128,
        seed=1,
        strata=strata,
        eos_hazard=0.005,
    )
    t = compute_metrics(ds, 32)
    m = Metrics(t["replicates"], t["profiles_aligned"], t["profiles_clock"])
    pairs = [["snapkv_512", "snapkv_half"], ["recent_half", "snapkv_half"]]
    settings = dict(
        n_boot=2000,
        seed=1,
        confidence=0.95,
        contrasts=pairs,
        cohort_max_tau=64,
        early=[1, 16],
        late=[49, 64],
        blocks=[[1, 32], [33, 64], [65, 128]],
        contrast=pairs[0],
        short_window=[1, 32],
        folds=5,
        ridge_alpha=1.0,
        criterion=0.02,
    )
    jobs = {
        "Figure 5 data": lambda: get_result("figure5").build(m, **settings),
        "Figure 6 data": lambda: get_result("figure6").build(m, **settings),
        "Figure 7 data": lambda: get_result("figure7").build(m, **settings),
        "Table 2": lambda: get_result("table2").build(m, **settings),
        "Table 3": lambda: get_result("table3").build(m, **settings),
    }
    for name, job in jobs.items():
        print(f"{name}, 288 documents x 3 actions, B=2000: {best_of(job, repeat=1):.2f} s")


if __name__ == "__main__":
    main()
