"""The machine's floor for a trajectory job: measured in this process, what the job's arithmetic and memory traffic
cannot go below, so that a job benchmark can print seconds / floor beside seconds.

:func:`machine_floor` measures the fp32 GEMM rate of this process's threads (default 1, as a trajectory job on a CPU
runs) at a model's own prefill shapes (its projections and MLP on a block of prompt rows) and the memory read
bandwidth (a sum over a buffer far larger than the caches). :class:`Floor` turns them into seconds:

- a prefill of n tokens: its FLOPs (every dense layer on n rows, causal attention, the last row's logits) at the
  GEMM rate;
- a decode step of r rows: max(its FLOPs at the GEMM rate, (weight bytes + K/V bytes read) at the bandwidth), the
  K/V bytes being one prompt copy per document plus each chain's generated tail (the shared-prompt layout's count;
  a layout that reads more is above the floor by that much).

Run it for the probe's own numbers on SmolLM2 (``PYTHONPATH=. python benchmarks/floor.py [--prefill-rounds 3]``:
with prefills of SmolLM2 timed against it, round by round); other scripts import :func:`machine_floor`,
:class:`ModelShape` and :func:`job_floor` (benchmarks/bench_common.py's job helpers).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence


@dataclass(frozen=True)
class ModelShape:
    """A decoder's shapes: layers, hidden width, MLP width, attention heads, KV heads, head width, vocabulary, and
    the bytes of a weight or cache element."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    element_bytes: int = 4

    @classmethod
    def from_config(cls, config: Any, element_bytes: int = 4) -> "ModelShape":
        """From a transformers config (or anything with its attribute names)."""
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        heads = text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        return cls(
            layers=text.num_hidden_layers,
            hidden=text.hidden_size,
            intermediate=text.intermediate_size,
            heads=heads,
            kv_heads=getattr(text, "num_key_value_heads", None) or heads,
            head_dim=head_dim,
            vocab=text.vocab_size,
            element_bytes=element_bytes,
        )

    @property
    def layer_params(self) -> int:
        """Weights of one decoder layer's projections (q, k, v, o) and gated MLP."""
        q_o = 2 * self.hidden * self.heads * self.head_dim
        k_v = 2 * self.hidden * self.kv_heads * self.head_dim
        return q_o + k_v + 3 * self.hidden * self.intermediate

    @property
    def row_params(self) -> int:
        """Weights one decode row multiplies: every layer and the output projection."""
        return self.layers * self.layer_params + self.vocab * self.hidden

    def kv_bytes(self, entries: int) -> int:
        """Bytes of ``entries`` K/V entries over all layers and KV heads."""
        return 2 * self.layers * self.kv_heads * self.head_dim * entries * self.element_bytes

    def prefill_flops(self, n: int) -> float:
        """FLOPs of a prefill of ``n`` tokens: dense layers on n rows, causal attention (QK, AV), one row's logits."""
        dense = 2.0 * n * self.layers * self.layer_params
        attention = 4.0 * self.layers * self.heads * self.head_dim * n * (n + 1) / 2
        return dense + attention + 2.0 * self.vocab * self.hidden

    def decode_flops(self, rows: int, attended: float) -> float:
        """FLOPs of a decode step of ``rows`` rows attending to ``attended`` entries in all (summed over rows)."""
        return 2.0 * rows * self.row_params + 4.0 * self.layers * self.heads * self.head_dim * attended


@dataclass(frozen=True)
class Floor:
    """This machine's fp32 GEMM rate (FLOP/s) at a model's shapes and its memory read bandwidth (bytes/s), at
    ``threads`` threads."""

    gemm_flops: float
    bandwidth: float
    threads: int

    def prefill_s(self, shape: ModelShape, n: int) -> float:
        return shape.prefill_flops(n) / self.gemm_flops

    def decode_step_s(self, shape: ModelShape, rows: int, attended: float, kv_entries_read: float) -> float:
        """max(FLOPs at the GEMM rate, weight and K/V bytes at the bandwidth)."""
        compute = shape.decode_flops(rows, attended) / self.gemm_flops
        memory = (shape.row_params * shape.element_bytes + shape.kv_bytes(kv_entries_read)) / self.bandwidth
        return max(compute, memory)


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def gemm_rate(shape: ModelShape, threads: int = 1, rows: int = 512, repeats: int = 5) -> float:
    """FLOP/s of fp32 products at the model's prefill shapes: ``rows`` prompt rows through q/k/v/o and the MLP's three
    projections, with torch's default kernels and with kvdiv's packed oneDNN weights (kvdiv.models.prepacked), the
    faster of the two (best of ``repeats``)."""
    import torch

    from kvdiv.models.prepacked import prepack_linears

    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, shape.hidden, generator=g)
    h = torch.randn(rows, shape.intermediate, generator=g)
    sizes = [
        (shape.hidden, shape.heads * shape.head_dim),
        (shape.hidden, 2 * shape.kv_heads * shape.head_dim),
        (shape.hidden, 2 * shape.intermediate),
        (shape.intermediate, shape.hidden),
    ]
    layers = torch.nn.ModuleList(torch.nn.Linear(i, o, bias=False) for i, o in sizes)
    inputs = [x, x, x, h]
    flops = sum(2.0 * rows * i * o for i, o in sizes)

    def best() -> float:
        fastest = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for layer, a in zip(layers, inputs):
                layer(a)
            fastest = min(fastest, time.perf_counter() - start)
        return fastest

    with _threads(threads), torch.no_grad():
        plain = best()
        prepack_linears(layers)
        packed = best()
    return flops / min(plain, packed)


def read_bandwidth(threads: int = 1, megabytes: int = 512, repeats: int = 3) -> float:
    """Bytes/s of reading a ``megabytes`` fp32 buffer once (a sum; best of ``repeats``)."""
    import torch

    buffer = torch.ones(megabytes * 2**20 // 4)
    best = float("inf")
    with _threads(threads):
        for _ in range(repeats):
            start = time.perf_counter()
            buffer.sum()
            best = min(best, time.perf_counter() - start)
    return buffer.numel() * 4 / best


def machine_floor(shape: ModelShape, threads: int = 1) -> Floor:
    """Measure this machine's :class:`Floor` for ``shape`` at ``threads`` threads (a few seconds)."""
    return Floor(gemm_rate(shape, threads), read_bandwidth(threads), threads)


def coupled_chains(retentions: Sequence[float]) -> tuple[int, float]:
    """The chains of a coupled document whose actions keep ``retentions`` of the prompt — a shared reference chain
    and each action's y and fixed-history chain — and the share of the prompt they attend to on average."""
    chains = 1 + 2 * len(retentions)
    return chains, (1 + 2 * sum(retentions)) / chains


def job_floor(
    floor: Floor, shape: ModelShape, prompts: Sequence[int], chains: int, horizon: int, retention: float = 1.0
) -> dict[str, float]:
    """Seconds a coupled trajectory job cannot go below: every prompt prefilled, then ``horizon`` steps of ``chains``
    chains per document in one forward; a chain attends to ``retention`` of its prompt (the mean over its chains)
    and its generated tail; each step reads one prompt copy per document plus the tails. Returns ``prefill``,
    ``decode`` and ``total``."""
    prefill = sum(floor.prefill_s(shape, n) for n in prompts)
    decode = 0.0
    rows = chains * len(prompts)
    for t in range(1, horizon + 1):
        attended = sum(chains * (retention * n + t) for n in prompts)
        read = sum(n + chains * t for n in prompts)
        decode += floor.decode_step_s(shape, rows, attended, read)
    return {"prefill": prefill, "decode": decode, "total": prefill + decode}


def actions_job_floor(
    floor: Floor, shape: ModelShape, prompts: Sequence[int], actions: Sequence[Any], horizon: int
) -> dict[str, float]:
    """:func:`job_floor` of a coupled job of ``actions`` (action specs) over prompts of ``prompts`` tokens: its
    chains and the share of the prompt they keep, each action's retention taken at the prompts' mean length."""
    from kvdiv.kernel.memory_plan import retention

    mean = int(sum(prompts) / len(prompts))
    chains, kept = coupled_chains([retention(spec, mean) for spec in actions])
    return job_floor(floor, shape, prompts, chains, horizon, kept)


@contextlib.contextmanager
def torch_prefill() -> Iterator[None]:
    """The prefill before issue 40's point 4: torch's sdpa, kvpress's own SnapKV window products (torch's) and its
    gathers of kept entries, and the shared prompt's check of an action's entries by gather (ProbabilisticPress keeps
    its row copies: config/replication.yaml's retention50 actions have none)."""
    import kvdiv.kernel.prefill as prefill
    import kvdiv.kernel.shared_prompt as shared_prompt

    saved = (prefill.prefill_attention, prefill.row_gather_compress, shared_prompt.take_entries)
    gathered = lambda x, idx: x.gather(2, idx.unsqueeze(-1).expand(-1, -1, -1, x.shape[-1])).contiguous()  # noqa: E731
    prefill.prefill_attention = lambda model: contextlib.nullcontext()
    prefill.row_gather_compress = contextlib.nullcontext
    shared_prompt.take_entries = gathered
    try:
        yield
    finally:
        prefill.prefill_attention, prefill.row_gather_compress, shared_prompt.take_entries = saved


def prefill_rounds(lengths: Sequence[int], rounds: int, threads: int) -> None:
    """SmolLM2 prefills of helmet documents at ``lengths`` tokens (config/replication.yaml's retention50 actions, and
    none), each as kvdiv runs it and as :func:`torch_prefill` runs it, interleaved, each round beside a fresh floor
    probe: seconds and seconds / floor; freed memory kept as a job keeps it."""
    import statistics

    import torch
    from bench_common import smollm2, stratum_prompts

    from kvdiv.host_memory import retain_freed_memory
    from kvdiv.kernel.session import KernelSession
    from kvdiv.settings import generation

    retain_freed_memory()  # as a trajectory job's script (benchmarks/host_memory.md)
    config, loaded = smollm2("results/models", "config/replication.yaml")
    shape = ModelShape.from_config(loaded.model.config)
    actions = {a: config["actions"][a] for a in config["studies"]["retention50"]["actions"]}
    prefills = {"torch": torch_prefill, "kvdiv": contextlib.nullcontext}
    kinds = [(k, a) for k in ("bare", "full") for a in prefills]
    print(
        "| prompt | floor s (median) | actions | prefill s, torch's (min, median) | / floor | "
        "prefill s, kvdiv's | / floor | kvdiv / torch (median) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in lengths:
        prompt = torch.tensor(stratum_prompts(loaded, config, "retention50", f"helmet_{n}", 1, 128)[1][0])
        floors: list[float] = []
        times: dict[tuple[str, str], list[float]] = {kind: [] for kind in kinds}
        for r in range(rounds):
            floor = machine_floor(shape, threads)
            floors.append(floor.prefill_s(shape, len(prompt)))
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                with prefills[kind[1]]():
                    start = time.perf_counter()
                    KernelSession(loaded, prompt, {} if kind[0] == "bare" else actions, generation(horizon=128))
                    times[kind].append(time.perf_counter() - start)
        f = statistics.median(floors)
        ratio = lambda xs: statistics.median(x / y for x, y in zip(xs, floors))  # noqa: E731
        for what, label in (("bare", "none"), ("full", str(len(actions)))):
            a, b = times[(what, "torch")], times[(what, "kvdiv")]
            print(
                f"| {len(prompt)} | {f:.2f} | {label} | {min(a):.2f}, {statistics.median(a):.2f} | {ratio(a):.2f} | "
                f"{min(b):.2f}, {statistics.median(b):.2f} | {ratio(b):.2f} | "
                f"{statistics.median(y / x for x, y in zip(a, b)):.2f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lengths", type=int, nargs="+", default=[704, 2048, 4096, 8192])
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--actions", type=int, default=3)
    parser.add_argument("--prefill-rounds", type=int, default=0, help="also time SmolLM2 prefills against the floor")
    parser.add_argument("--busy", action="store_true", help="time the prefills beside one busy process")
    args = parser.parse_args()
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained("results/models/smollm2")
    shape = ModelShape.from_config(config)
    floor = machine_floor(shape, args.threads)
    print(f"SmolLM2-135M {shape}")
    print(
        f"GEMM {floor.gemm_flops / 1e9:.1f} GFLOP/s, read bandwidth {floor.bandwidth / 1e9:.1f} GB/s, "
        f"{args.threads} thread(s)"
    )
    chains, retention = coupled_chains([0.5] * args.actions)
    print(f"| prompt | prefill floor s | decode floor s per document (H = {args.horizon}, {chains} chains) |")
    print("|---:|---:|---:|")
    for n in args.lengths:
        one = job_floor(floor, shape, [n], chains, args.horizon, retention)
        print(f"| {n} | {one['prefill']:.1f} | {one['decode']:.1f} |")
    if args.prefill_rounds:
        print()
        from bench_common import busy_process

        with busy_process(args.busy):
            prefill_rounds([n for n in args.lengths if n <= 4096], args.prefill_rounds, args.threads)


if __name__ == "__main__":
    main()
