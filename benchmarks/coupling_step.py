"""One shared-reference coupling step (kvdiv.trajectories.coupling: the reference draw, the coupling of every
action's y to it, the fixed-history TV) against the implementation before 2026-12-04 (kept below as the baseline):
residual draws for every row, clipped copies of every law, two temporaries for each TV.

One process, NumPy only: laws over SmolLM2's 49,152 tokens, R reference rows and 3 pairs per reference row (a
16-document retention50 batch: 16 and 48), q a mixture of p and noise so that about a tenth of the rows reject x_t.
Both variants draw from the same uniforms, alternating per round; their outputs must be equal bit for bit.
    python benchmarks/coupling_step.py --rounds 5 --steps 30
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_common import seconds_table

from kvdiv.trajectories import coupling


# ---------------------------------------------------------------- the baseline (kvdiv at 916840e, verbatim logic)
def _baseline_laws(p, q):
    p = np.atleast_2d(np.asarray(p, dtype=np.float64))
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    return np.clip(p, 0.0, None), np.clip(q, 0.0, None)


def baseline_reference_draw(p, u):
    p = np.clip(np.atleast_2d(np.asarray(p, dtype=np.float64)), 0.0, None)
    return coupling.categorical(p, u)


def baseline_couple_to_reference(p, q, x, u, tv_atol):
    p, q = _baseline_laws(p, q)
    n = p.shape[0]
    overlap = np.minimum(p, q)
    mass_p = (p - overlap).sum(axis=1)
    mass_q = (q - overlap).sum(axis=1)
    delta = np.clip(0.5 * (mass_p + mass_q), 0.0, 1.0)
    negligible = delta < tv_atol
    sum_p, sum_q = p.sum(axis=1), q.sum(axis=1)
    px, qx = p[np.arange(n), x], q[np.arange(n), x]
    accept = u[:, 0] * px * sum_q < qx * sum_p
    res_q = np.clip(
        q / np.where(sum_q > 0, sum_q, 1.0)[:, None] - p / np.where(sum_p > 0, sum_p, 1.0)[:, None], 0.0, None
    )
    residual_ok = (res_q.sum(axis=1) > 0) & (mass_p > 0) & (mass_q > 0)
    keep = accept | negligible | ~residual_ok
    y = np.where(keep, x, coupling.categorical(res_q, u[:, 1]))
    return y, np.where(negligible, 0.0, delta)


def baseline_tv_distance(p, q, tv_atol):
    p, q = _baseline_laws(p, q)
    delta = np.clip(0.5 * abs(p - q).sum(-1), 0.0, 1.0)
    return np.where(delta < tv_atol, 0.0, delta)


VARIANTS = {
    "baseline": (baseline_reference_draw, baseline_couple_to_reference, baseline_tv_distance),
    "kvdiv": (coupling.reference_draw, coupling.couple_to_reference, coupling.tv_distance),
}


def laws(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    z = rng.standard_normal((n, vocab)) * 3.0
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--references", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=49152)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    p_ref = laws(rng, args.references, args.vocab)
    replicate = np.repeat(np.arange(args.references), 3)
    q = 0.9 * p_ref[replicate] + 0.1 * laws(rng, len(replicate), args.vocab)
    qf = q[::-1].copy()
    uniforms = [(rng.random(args.references), rng.random((len(replicate), 2))) for _ in range(args.steps)]

    def steps(variant: str) -> tuple[float, list]:
        draw, couple, tv = VARIANTS[variant]
        out, start = [], time.perf_counter()
        for u_ref, u in uniforms:
            x = draw(p_ref, u_ref)[replicate]
            p = p_ref[replicate]
            y, delta = couple(p, q, x, u, 1e-6)
            out.append((x, y, delta, tv(p, qf, 1e-6)))
        return (time.perf_counter() - start) / args.steps, out

    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    equal = True
    for r in range(args.rounds):
        outs = {}
        for variant in list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]:
            t, outs[variant] = steps(variant)
            seconds[variant].append(t)
        equal &= all(
            all(np.array_equal(a, b) for a, b in zip(sa, sb)) for sa, sb in zip(outs["baseline"], outs["kvdiv"])
        )
    rejected = np.mean([np.mean(o[0] != o[1]) for o in outs["kvdiv"]])
    n = len(replicate)
    print(f"{args.references} reference rows, {n} pairs, V = {args.vocab}, {args.steps} steps x {args.rounds} rounds")
    print(f"rows rejecting x_t: {rejected:.1%}")
    seconds_table(seconds, "coupling step", ("kvdiv", "baseline"), unit="ms")
    print(f"equal bit for bit: {equal}")


if __name__ == "__main__":
    main()
