"""The cluster bootstrap over documents behind every interval of the analysis.

Every interval is a percentile interval of a **cluster bootstrap over documents**: documents are
resampled with replacement (all replicates and steps of a document travel together) ``n_boot`` times
with a seed derived from (seed, the statistic's name, its cell), so each interval is reproducible and
independent of which other cells were computed. Statistics are smooth functions of document means
(ratios of document sums are ratios of means), computed on every resample.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping

import numpy as np

from kvdiv.seeds import derive_seed


def bootstrap_counts(n: int, n_boot: int, seed: int) -> np.ndarray:
    """Multinomial resample counts [n_boot, n] of a cluster bootstrap over ``n`` documents."""
    if n < 1:
        raise ValueError("the bootstrap needs at least one document")
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)


Stat = Callable[[Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


def cluster_bootstrap(
    values: Mapping[str, np.ndarray], stat: Stat, n_boot: int, seed: int, confidence: float
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Point estimates and percentile intervals of statistics of document means.

    Parameters
    ----------
    values
        Name → array [n_documents] or [n_documents, m] of per-document values.
    stat
        Maps a dict of means (each of shape [...] or [..., m], leading axes free) to named statistics,
        with numpy operations that broadcast.
    n_boot, seed, confidence
        Resamples, seed of the resampling, interval level.

    Returns
    -------
    Name → (estimate, lower, upper).
    """
    arrays = {k: np.asarray(v, dtype=float) for k, v in values.items()}
    n = len(next(iter(arrays.values())))
    counts = bootstrap_counts(n, n_boot, seed).astype(float) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        point = stat({k: np.nanmean(v, axis=0) if np.isnan(v).any() else v.mean(axis=0) for k, v in arrays.items()})
        boot = stat({k: _weighted_means(counts, v) for k, v in arrays.items()})
    alpha = (1.0 - confidence) / 2.0
    out = {}
    for name, est in point.items():
        draws = np.asarray(boot[name], dtype=float)
        draws = np.where(np.isfinite(draws), draws, np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells give NaN intervals
            lo = np.nanquantile(draws, alpha, axis=0)
            hi = np.nanquantile(draws, 1 - alpha, axis=0)
        out[name] = (np.asarray(est, dtype=float), np.asarray(lo, dtype=float), np.asarray(hi, dtype=float))
    return out


def _weighted_means(weights: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Resampled means: weights [B, n] (summing to 1 per row) times values [n] or [n, m]; NaN values are
    left out of both numerator and weight."""
    if not np.isnan(v).any():
        return weights @ v
    ok = ~np.isnan(v)
    num = weights @ np.where(ok, v, 0.0)
    den = weights @ ok.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def stat_seed(seed: int, *parts: object) -> int:
    return derive_seed(seed, *[str(p) for p in parts])


def result_rows(keys: dict, results: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[dict]:
    return [
        {**keys, "statistic": name, "estimate": float(est), "lower": float(lo), "upper": float(hi)}
        for name, (est, lo, hi) in results.items()
    ]
