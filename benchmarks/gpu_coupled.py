"""GPU benchmark: the coupled job (complete mode) on a random Llama-3.1-8B-shaped model, against the HBM floor.

Candidate: exactly the workflow's trajectory job minus storage — one :class:`kvdiv.kernel.session.KernelSession`
(one prefill serving P and every action's evicted cache) + :func:`kvdiv.trajectories.generate.generate` in complete
mode for the three 50%-retention actions of config/config.yaml (snapkv_half, snapkv_512, recent_half),
R replicates, H steps. Baseline: a plain decode step of the same model, ``model(...)`` with a
``DynamicCache``, batch 1, on the same prompt (greedy next token, so every step is a model step).

Model: ``LlamaConfig`` of Llama-3.1-8B-Instruct (hidden 4096, 32 layers, 32 heads, 8 KV heads, intermediate
14336, vocab 128256, RoPE θ 500000 with llama3 scaling, 131072 positions, untied embeddings), randomly
initialised directly on the device in the target dtype (no download, no CPU init). Prompts are random token
ids below 128000 (no special tokens, so never an EOS), one per document. ``--tiny`` swaps in a 2-layer
config (hidden 256, 4 heads, 2 KV heads, intermediate 512, same vocabulary), 640-token prompts (SnapKV
with a 512-token window needs more than 512) and H = 32 for a CPU
check. It is wrapped as a :class:`kvdiv.models.loading.LoadedModel` directly (no tokenizer is needed: the session
takes ids; the weight hash is not computed, hashing 16 GB would dominate the run).

How things are counted
----------------------
- rows advanced: ``sum(traj.rows)`` over actions as :func:`generate` records it: 2 per pair and step
  before the pair's divergence (P at x, Q at x = y), 3 after (P at x, Q at y, Q at x); H − 1 steps call the
  model (step 1 uses the prefill's law).
- pair-steps = rows advanced / 2 (kernel-pair evaluations); pair-steps/s = pair-steps / coupled seconds.
  Also reported: coupled tokens/s = pairs × H / coupled seconds (x and y tokens of every pair each step).
- rows per forward = rows the model actually ran (recorded inside ``session.step``; EOS-absorbed chains
  are not run) / number of ``session.step`` calls.
- bandwidth floor of one step = (weight bytes + K/V bytes of every row's valid cache entries, the new one
  included) / peak HBM bandwidth. Weight bytes = every parameter except the input embedding (a lookup reads
  only one row per token; the untied LM head is counted). K/V bytes per row = 2 × layers × kv_heads ×
  head_dim × (valid length + 1) × element size. Fraction = floor time / measured time per step, given for
  the forward alone (``session.step`` wall time, which ends with the laws on the CPU, so it is synchronised)
  and end to end (coupled seconds / forward count, which adds the coupling arithmetic in numpy and the new
  chains' cache copies).
- prefill seconds: ``KernelSession(...)`` construction (prefill + every action's press + the initial laws);
  coupled seconds: the ``generate`` call. Peak memory: ``torch.cuda.max_memory_allocated`` (reset before
  each phase).

``--batch`` also runs all ``--documents`` in ONE job, as the workflow's ``documents_per_job`` does: prefills in turn,
then one forward per step for every document's chains (:func:`kvdiv.trajectories.generate.generate_documents`);
the row "all N documents in one job" counts its forwards (``KernelSession.step_together`` calls), rows per forward and
the floor of a step that reads the weights once for all documents.

Run (H200): see benchmarks/gpu_coupled.md for the exact command; CPU check:
    python benchmarks/gpu_coupled.py --tiny --device cpu --dtype float32 --documents 3 --batch
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a plain checkout (the device machine has no editable install)
    sys.path.insert(0, str(REPO))


import torch  # noqa: E402
import yaml  # noqa: E402

import kvdiv.kernel.presses  # noqa: E402,F401  (kvpress imports without `datasets`: kvdiv.kernel.presses.lazy_datasets)

from kvdiv.trajectories.base import chains_needed  # noqa: E402
from kvdiv.trajectories.generate import generate, generate_documents  # noqa: E402
from kvdiv.kernel.batched_step import observe_steps  # noqa: E402
from kvdiv.kernel.session import KernelSession  # noqa: E402
from kvdiv.models.loading import LoadedModel  # noqa: E402
from kvdiv.settings import generation

LLAMA31_8B = dict(
    hidden_size=4096,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    intermediate_size=14336,
    vocab_size=128256,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    bos_token_id=128000,
    eos_token_id=[128001, 128008, 128009],
    rope_parameters={
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
)
TINY = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=512)
EOS_IDS = [
    128009,
    128001,
    128008,
]  # <|eot_id|> first, as kvdiv.models.tokenization.eos_token_ids orders Llama-3.1-Instruct's
PROMPT_ID_LIMIT = 128000  # ids below the special tokens
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def build_model(tiny: bool, device: torch.device, dtype: torch.dtype, seed: int) -> tuple[LoadedModel, float]:
    """The random model on ``device`` in ``dtype`` (initialised there), wrapped as a LoadedModel; init seconds."""
    from transformers import LlamaConfig, LlamaForCausalLM

    values = {**LLAMA31_8B, **(TINY if tiny else {})}
    config = LlamaConfig(**values)
    start = time.perf_counter()
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model = model.to(device=device, dtype=dtype).eval()  # no-op when built in place
    sync(device)
    init_s = time.perf_counter() - start
    bad = [n for n, p in model.named_parameters() if p.device.type != device.type or p.dtype != dtype]
    if bad:
        raise RuntimeError(f"parameters not on {device}/{dtype}: {bad[:3]}")
    loaded = LoadedModel(
        name="llama31_8b_random" + ("_tiny" if tiny else ""),
        spec={
            "source": "random",
            "architecture": "llama",
            "dtype": str(dtype).removeprefix("torch."),
            "device": device.type,
            "model_config": {k: v for k, v in values.items() if k != "rope_parameters"},
        },
        model=model,
        tokenizer=None,
        eos_token_ids=list(EOS_IDS),
        chat_template=False,
        device=device,
        weight_hash="not computed (random init)",
        max_context=int(config.max_position_embeddings),
    )
    return loaded, init_s


def weight_bytes(model) -> tuple[int, int]:
    """(bytes of all parameters, bytes a decode step must read: all but the input embedding)."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    emb = model.get_input_embeddings().weight
    tied = emb is model.get_output_embeddings().weight
    return total, total - (0 if tied else emb.numel() * emb.element_size())


class StepRecorder:
    """While in use, records every batched forward behind ``KernelSession.step`` (one document) and
    ``KernelSession.step_together`` (several) through :func:`kvdiv.kernel.batched_step.observe_steps`: per call, the
    rows the model runs, the K/V entries its attention's products read (the shared prompt once per block of chains,
    each chain's slot over its span), and wall seconds (the device synchronised)."""

    def __init__(self):
        self.calls: list[tuple[int, int, float]] = []  # (rows run, K/V entries read incl. the new one, seconds)
        self._observing = None

    def __enter__(self) -> "StepRecorder":
        self._observing = observe_steps(lambda r: self.calls.append((r.rows, r.kv_entries, r.seconds)))
        self._observing.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._observing.__exit__(*exc)

    def summary(self, session: KernelSession, coupled_s: float, w_read: int, bw: float) -> dict:
        """Forwards, rows, step time and the bandwidth floor of the recorded calls (``session``: one of the job's,
        for the K/V entry size; ``coupled_s``: the generation's wall time)."""
        per_entry = kv_bytes_per_entry(session.n_layers, session.kv_heads, session.head_dim, session.dtype)
        forwards = len(self.calls)
        rows_run = sum(r for r, _, _ in self.calls)
        entries = sum(e for _, e, _ in self.calls)
        step_s = sum(t for _, _, t in self.calls)
        floor_s = (forwards * w_read + entries * per_entry) / bw
        return {
            "forwards": forwards,
            "rows_run": int(rows_run),
            "rows_per_forward": rows_run / max(forwards, 1),
            "step_s_mean": step_s / max(forwards, 1),
            "coupled_s_per_forward": coupled_s / max(forwards, 1),
            "floor_s_per_step": floor_s / max(forwards, 1),
            "kv_bytes_per_step": entries * per_entry / max(forwards, 1),
            "bw_fraction_forward": floor_s / step_s if step_s else None,
            "bw_fraction_end_to_end": floor_s / coupled_s if coupled_s else None,
        }


def kv_bytes_per_entry(n_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    return 2 * n_layers * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def run_coupled(
    loaded: LoadedModel,
    ids: torch.Tensor,
    actions: dict,
    horizon: int,
    replicates: int,
    seed: int,
    w_read: int,
    bw: float,
) -> dict:
    """One coupled job (prefill + generate), timed and counted."""
    device = loaded.device
    reset_peak(device)
    sync(device)
    start = time.perf_counter()
    g = generation(master_seed=seed, horizon=horizon, replicates=replicates, mode="complete", tv_atol=1e-6)
    session = KernelSession(loaded, ids, actions, g, max_chains=chains_needed(len(actions), replicates, "complete"))
    sync(device)
    prefill_s = time.perf_counter() - start
    with StepRecorder() as recorder:
        start = time.perf_counter()
        traj = generate(
            session, list(actions), g, document_id="gpu-bench", eos_token_ids=loaded.eos_token_ids, progress=False
        )
        sync(device)
        coupled_s = time.perf_counter() - start
    rows_advanced = sum(t.rows for t in traj.values())
    n_pairs = len(actions) * replicates
    first_div = {
        a: [int(next((i + 1 for i, m in enumerate(row) if not m), 0)) for row in t.match] for a, t in traj.items()
    }
    return {
        "prompt_tokens": int(ids.numel()),
        "cache_lengths": {name: session.prompt_cache(name).length for name in session.caches},
        "prefill_s": prefill_s,
        "coupled_s": coupled_s,
        "rows_advanced": int(rows_advanced),
        "pair_steps": rows_advanced / 2,
        "pair_steps_per_s": rows_advanced / 2 / coupled_s,
        "coupled_tokens_per_s": n_pairs * horizon / coupled_s,
        **recorder.summary(session, coupled_s, w_read, bw),
        "first_divergence_step": first_div,  # 0 = no divergence within H
        "mean_tv": {a: float(t.tv.mean()) for a, t in traj.items()},
        "peak_mem_gib": peak_gib(device),
    }


def run_coupled_batch(
    loaded: LoadedModel,
    prompts: list[torch.Tensor],
    actions: dict,
    horizon: int,
    replicates: int,
    seed: int,
    w_read: int,
    bw: float,
) -> dict:
    """One coupled job over every prompt at once (the workflow's ``documents_per_job``): prefills in turn, then one
    forward per step for all documents' chains (:func:`generate_documents`), timed and counted like run_coupled."""
    device = loaded.device
    reset_peak(device)
    sync(device)
    start = time.perf_counter()
    g = generation(master_seed=seed, horizon=horizon, replicates=replicates, mode="complete", tv_atol=1e-6)
    doc_ids = [f"gpu-bench-{d}" for d in range(len(prompts))]
    sessions = [
        KernelSession(loaded, ids, actions, g, max_chains=chains_needed(len(actions), replicates, "complete"))
        for ids in prompts
    ]
    sync(device)
    prefill_s = time.perf_counter() - start
    with StepRecorder() as recorder:
        start = time.perf_counter()
        trajs = generate_documents(
            sessions, doc_ids, list(actions), g, eos_token_ids=loaded.eos_token_ids, progress=False
        )
        sync(device)
        coupled_s = time.perf_counter() - start
    rows_advanced = sum(t.rows for traj in trajs for t in traj.values())
    return {
        "documents": len(prompts),
        "prompt_tokens": int(sum(ids.numel() for ids in prompts)),
        "prefill_s": prefill_s,
        "coupled_s": coupled_s,
        "coupled_s_per_document": coupled_s / len(prompts),
        "rows_advanced": int(rows_advanced),
        "pair_steps_per_s": rows_advanced / 2 / coupled_s,
        **recorder.summary(sessions[0], coupled_s, w_read, bw),
        "peak_mem_gib": peak_gib(device),
    }


@torch.no_grad()
def run_baseline(loaded: LoadedModel, ids: torch.Tensor, steps: int, w_read: int, bw: float) -> dict:
    """Plain decode, batch 1, DynamicCache: prefill, then ``steps`` timed single-token steps."""
    from transformers import DynamicCache

    model, device = loaded.model, loaded.device
    reset_peak(device)
    cache = DynamicCache(config=model.config)
    sync(device)
    start = time.perf_counter()
    out = model(input_ids=ids[None].to(device), past_key_values=cache, use_cache=True, logits_to_keep=1)
    nxt = out.logits[:, -1:].argmax(-1)
    sync(device)
    prefill_s = time.perf_counter() - start
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    per_entry = kv_bytes_per_entry(
        cfg.num_hidden_layers, cfg.num_key_value_heads, head_dim, next(model.parameters()).dtype
    )
    times, entries = [], 0
    n = int(ids.numel())
    for t in range(steps):
        sync(device)
        s = time.perf_counter()
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        sync(device)
        times.append(time.perf_counter() - s)
        entries += n + t + 1
    floor_s = (steps * w_read + entries * per_entry) / bw
    return {
        "prefill_s": prefill_s,
        "steps": steps,
        "step_s_mean": statistics.fmean(times),
        "step_s_median": statistics.median(times),
        "floor_s_per_step": floor_s / steps,
        "bw_fraction": floor_s / sum(times),
        "rows_per_forward": 1.0,
        "peak_mem_gib": peak_gib(device),
    }


def markdown(result: dict) -> str:
    """The summary table of ``result``."""
    lines = [
        "| run | prompt | prefill s | coupled s | forwards | rows/forward | pair-steps/s | step ms | floor ms "
        "| floor fraction (forward) | floor fraction (end to end) | peak GiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    fmt = lambda v, f: "–" if v is None else format(v, f)  # noqa: E731
    for d, doc in enumerate(result["documents"]):
        b, c = doc["baseline"], doc["coupled"]
        lines.append(
            f"| doc {d} baseline decode (batch 1) | {c['prompt_tokens']} | {b['prefill_s']:.3f} | – | "
            f"{b['steps']} | 1 | – | "
            f"{1e3 * b['step_s_mean']:.2f} | {1e3 * b['floor_s_per_step']:.2f} | {b['bw_fraction']:.3g} | – | "
            f"{fmt(b['peak_mem_gib'], '.2f')} |"
        )
        lines.append(
            f"| doc {d} coupled ({len(result['actions'])} actions, R={result['replicates']}, H={result['horizon']}) | "
            f"{c['prompt_tokens']} | {c['prefill_s']:.3f} | {c['coupled_s']:.3f} | {c['forwards']} | "
            f"{c['rows_per_forward']:.2f} | "
            f"{c['pair_steps_per_s']:.1f} | {1e3 * c['step_s_mean']:.2f} | {1e3 * c['floor_s_per_step']:.2f} | "
            f"{fmt(c['bw_fraction_forward'], '.3g')} | {fmt(c['bw_fraction_end_to_end'], '.3g')} | "
            f"{fmt(c['peak_mem_gib'], '.2f')} |"
        )
    if result.get("batched"):
        c = result["batched"]
        lines.append(
            f"| all {c['documents']} documents in one job (one forward per step) | {c['prompt_tokens']} | "
            f"{c['prefill_s']:.3f} | {c['coupled_s']:.3f} | {c['forwards']} | {c['rows_per_forward']:.2f} | "
            f"{c['pair_steps_per_s']:.1f} | {1e3 * c['step_s_mean']:.2f} | {1e3 * c['floor_s_per_step']:.2f} | "
            f"{fmt(c['bw_fraction_forward'], '.3g')} | {fmt(c['bw_fraction_end_to_end'], '.3g')} | "
            f"{fmt(c['peak_mem_gib'], '.2f')} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=None,
        help="prompt length (default 8192; 640 with --tiny; > 512 = snapkv_512's window)",
    )
    parser.add_argument(
        "--horizon", type=int, default=None, help="H, generated tokens per chain (default 128; 32 with --tiny)"
    )
    parser.add_argument("--replicates", type=int, default=1, help="R, coupled replicates per action")
    parser.add_argument("--documents", type=int, default=1, help="random prompts, each a full job + baseline")
    parser.add_argument(
        "--batch",
        action="store_true",
        help="also run all documents in ONE job (one forward per step for all), as documents_per_job",
    )
    parser.add_argument("--baseline-steps", type=int, default=None, help="plain decode steps timed (default H)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    parser.add_argument("--tiny", action="store_true", help="2-layer config and 640-token prompts (CPU check)")
    parser.add_argument("--bandwidth-tbs", type=float, default=4.8, help="peak HBM bandwidth, TB/s (H200: 4.8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", default=None, help="JSON path (default $OUT/gpu_coupled.json when OUT is set)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    prompt_tokens = args.prompt_tokens or (640 if args.tiny else 8192)
    args.horizon = args.horizon or (32 if args.tiny else 128)
    steps = args.baseline_steps or args.horizon
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but torch.cuda.is_available() is False (use --device cpu for the CPU check)")
    dtype = DTYPES[args.dtype]
    bw = args.bandwidth_tbs * 1e12
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    names = config["studies"]["retention50"]["actions"]
    actions = {a: config["actions"][a] for a in names}
    t0 = time.perf_counter()

    loaded, init_s = build_model(args.tiny, device, dtype, args.seed)
    w_all, w_read = weight_bytes(loaded.model)
    print(
        f"model {loaded.name}: {w_all / 1e9:.2f} GB of weights ({w_read / 1e9:.2f} GB read per step), "
        f"built on {device} in {dtype} in {init_s:.1f} s",
        flush=True,
    )

    gen = torch.Generator().manual_seed(args.seed)
    prompts = [torch.randint(0, PROMPT_ID_LIMIT, (prompt_tokens,), generator=gen) for _ in range(args.documents)]
    # warm-up (kernel selection, allocator, cuBLAS handles): a short job and a few plain steps, untimed
    warm = prompts[0][: min(1024, prompt_tokens)]  # SnapKV window 512 needs > 512 tokens
    run_coupled(loaded, warm, actions, min(args.horizon, 4), 1, args.seed, w_read, bw)
    run_baseline(loaded, warm, 2, w_read, bw)

    documents = []
    for d, ids in enumerate(prompts):
        base = run_baseline(loaded, ids, steps, w_read, bw)
        coupled = run_coupled(loaded, ids, actions, args.horizon, args.replicates, args.seed + d, w_read, bw)
        documents.append({"baseline": base, "coupled": coupled})
        print(json.dumps({"document": d, "baseline": base, "coupled": coupled}), flush=True)

    batched = None
    if args.batch:
        batched = run_coupled_batch(loaded, prompts, actions, args.horizon, args.replicates, args.seed, w_read, bw)
        print(json.dumps({"batched": batched}), flush=True)

    result = {
        "benchmark": "gpu_coupled",
        "model": loaded.name,
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)",
        "dtype": args.dtype,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "kvpress": __import__("kvpress").__version__ if hasattr(__import__("kvpress"), "__version__") else None,
        "actions": actions,
        "prompt_tokens": prompt_tokens,
        "horizon": args.horizon,
        "replicates": args.replicates,
        "bandwidth_tbs": args.bandwidth_tbs,
        "weights_bytes_all": w_all,
        "weights_bytes_read_per_step": w_read,
        "init_s": init_s,
        "documents": documents,
        "batched": batched,
        "summary": {
            "coupled_pair_steps_per_s": statistics.fmean(d["coupled"]["pair_steps_per_s"] for d in documents),
            "coupled_bw_fraction_forward": statistics.fmean(d["coupled"]["bw_fraction_forward"] for d in documents),
            "coupled_bw_fraction_end_to_end": statistics.fmean(
                d["coupled"]["bw_fraction_end_to_end"] for d in documents
            ),
            "baseline_bw_fraction": statistics.fmean(d["baseline"]["bw_fraction"] for d in documents),
            "coupled_rows_per_forward": statistics.fmean(d["coupled"]["rows_per_forward"] for d in documents),
        },
        "peak_mem_gib_overall": max(
            (
                v
                for d in documents
                for v in (d["baseline"]["peak_mem_gib"], d["coupled"]["peak_mem_gib"])
                if v is not None
            ),
            default=None,
        ),
        "wall_s": time.perf_counter() - t0,
    }
    print(json.dumps(result["summary"]))
    print(markdown(result))
    print(f"total wall time {result['wall_s']:.1f} s")
    out = args.out or (os.path.join(os.environ["OUT"], "gpu_coupled.json") if os.environ.get("OUT") else None)
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
