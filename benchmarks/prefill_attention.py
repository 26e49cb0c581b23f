"""One layer's causal prefill attention on a CPU (SmolLM2's heads: 9 query heads over 3 KV heads of 64): kvdiv's
(kvdiv.kernel.prefill_attention.causal_attention: oneDNN products, a base-2 softmax normalised after the product with
the values) against the same blocks with torch's softmax normalising the logits (the formula before 2026-12-06) and
against torch's sdpa, interleaved in one process; each one's largest error against a float64 enumeration, and its
seconds over the floor: the layer's causal attention FLOPs at the GEMM rate benchmarks/floor.py probes.

    PYTHONPATH=.:benchmarks python benchmarks/prefill_attention.py --lengths 2047 4090 --rounds 9 [--busy]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the workflow's jobs, before torch starts

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from bench_common import busy_process  # noqa: E402
from floor import ModelShape, gemm_rate  # noqa: E402

from kvdiv.kernel.prefill_attention import QUERY_BLOCK, causal_attention  # noqa: E402
from kvdiv.models.prepacked import packed_product  # noqa: E402


def softmax_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """The same blocks and products as :func:`causal_attention`, each block's logits normalised by torch's softmax
    (in place) before the product with the values."""
    batch, heads, n, head_dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    out = torch.empty(batch, n, heads, head_dim)
    future = torch.full((QUERY_BLOCK, QUERY_BLOCK), float("-inf")).triu_(1)[:, None]
    scaled = torch.empty(kv_heads, n, groups, head_dim)
    for b in range(batch):
        torch.mul(query[b].unflatten(0, (kv_heads, groups)).transpose(1, 2), scaling, out=scaled)
        for g in range(kv_heads):
            keys, values = key[b, g].contiguous(), value[b, g].contiguous()
            for start in range(0, n, QUERY_BLOCK):
                end = min(start + QUERY_BLOCK, n)
                rows = end - start
                logits = packed_product(scaled[g, start:end].view(rows * groups, head_dim), keys[:end])
                logits.view(rows, groups, end)[:, :, start:].add_(future[:rows, :, :rows])
                torch.softmax(logits, dim=-1, out=logits)
                product = packed_product(logits, values[:end].t())
                out[b, start:end, g * groups : (g + 1) * groups] = product.view(rows, groups, head_dim)
    return out


def sdpa_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """torch's sdpa (its CPU flash kernel), in the [batch, n, heads, head_dim] layout the others return."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return sdpa(query, key, value, is_causal=True, scale=scaling, enable_gqa=True).transpose(1, 2)


VARIANTS = {"kvdiv": causal_attention, "softmax": softmax_attention, "sdpa": sdpa_attention}


def heads(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries [1, 9, n, 64], keys and values [1, 3, n, 64] (logits of standard deviation ≈ 4 at 1/√64)."""
    g = torch.Generator().manual_seed(seed)
    return (
        2 * torch.randn(1, 9, n, 64, generator=g),
        2 * torch.randn(1, 3, n, 64, generator=g),
        torch.randn(1, 3, n, 64, generator=g),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2047, 4090])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--busy", action="store_true", help="beside one busy process")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    smollm2 = ModelShape(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3, head_dim=64, vocab=49152)
    rate = gemm_rate(smollm2, args.threads)
    label = "beside one busy process" if args.busy else "quiet"
    print(f"{args.threads} thread(s), {args.rounds} rounds, {label}; GEMM probe {rate / 1e9:.1f} GFLOP/s")
    print("| tokens | variant | ms (min, median) | / floor (median) | / kvdiv's (median) | largest error vs float64 |")
    print("|---:|---|---:|---:|---:|---:|")
    scaling = 64**-0.5
    with busy_process(args.busy), torch.no_grad():
        for n in args.lengths:
            q, k, v = heads(n)
            exact = sdpa_attention(q.double(), k.double(), v.double(), scaling)
            errors = {name: float((f(q, k, v, scaling).double() - exact).abs().max()) for name, f in VARIANTS.items()}
            times: dict[str, list[float]] = {name: [] for name in VARIANTS}
            for r in range(args.rounds):
                for name in list(VARIANTS) if r % 2 == 0 else list(VARIANTS)[::-1]:
                    start = time.perf_counter()
                    VARIANTS[name](q, k, v, scaling)
                    times[name].append(time.perf_counter() - start)
            floor = 4.0 * 9 * 64 * n * (n + 1) / 2 / rate  # QK and AV over the causal half
            for name, xs in times.items():
                ratio = statistics.median(x / y for x, y in zip(xs, times["kvdiv"]))
                print(
                    f"| {n} | {name} | {1e3 * min(xs):.1f}, {1e3 * statistics.median(xs):.1f} | "
                    f"{statistics.median(xs) / floor:.2f} | {ratio:.2f} | {errors[name]:.2g} |"
                )


if __name__ == "__main__":
    main()
