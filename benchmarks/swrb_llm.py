"""Benchmark: complete coupling vs residual-branch (SWRB) sampling on SmolLM2 — variance, cost, agreement.

For synthetic documents of both families (kvdiv.documents, as the workflow generates them) and SnapKV and
StreamingLLM (recent-token) actions at 50 %, 90 % and 99 % retention, R replicates per document in
``mode: complete`` and in ``mode: swrb`` from independent streams (:func:`kvdiv.trajectories.generate.generate` on one
:class:`kvdiv.kernel.session.KernelSession` per document). Per (document, action): per-replicate variances of M vs
Z_R (R_H), M_L vs Z_L (R_L) and capacity vs W_L (B_L), kernel-pair evaluations, rows forwarded and wall
time; per retention the finite study's aggregates (median/range of variance ratios, mean evaluation ratio,
variance–cost advantage as a ratio of means) with cluster-bootstrap intervals over documents, the mean
agreement check, and the (1 − α) enclosure of R_H per action from sampled profiles
(:func:`kvdiv.metrics.trajectory_replicates` gives the replicates, benchmarks/swrb_analysis.py computes the tables
with :func:`kvdiv.analysis.swrb_comparison.retention_summary`, benchmarks/swrb_llm_tables.py writes them as Markdown
through :func:`kvdiv.outputs.tables.to_markdown`).

Replicates run in batches (``--batch`` per ``generate`` call: memory is 4 × actions × batch KV slots of
the whole context); within a document the two modes alternate which goes first from batch to batch, so
machine load falls on both alike. Per-document raw replicates go to ``--raw-dir`` as they finish; a rerun
with the same settings reuses them per (document, batch): a run interrupted resumes, and a larger
``--replicates`` only adds batches.

Run (SmolLM2 resolved by the workflow first):
    snakemake --cores 1 results/models/smollm2/provenance.json
    python benchmarks/swrb_llm.py                  # the recorded run: writes benchmarks/swrb_llm.md
    (in a worktree whose kvdiv is not the installed one: PYTHONPATH=. python benchmarks/swrb_llm.py)
    python benchmarks/swrb_llm.py --quick --out /tmp/swrb_quick.md   # minutes: sizes shrunk
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import polars as pl
import torch
import yaml

from kvdiv.documents import generate_stratum, prompt_token_ids
from kvdiv.documents.render import chat_function
from kvdiv.io import atomic_path
from kvdiv.models.loading import load_model
from kvdiv.kernel.session import KernelSession
from kvdiv.metrics import trajectory_replicates
from kvdiv.seeds import name_key
from kvdiv.settings import generation
from kvdiv.trajectories.base import chains_needed
from kvdiv.trajectories.generate import generate

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # this script's folder, also when a test loads it by path
from swrb_analysis import benchmark_tables  # noqa: E402
from swrb_llm_tables import render  # noqa: E402

RETENTIONS = (0.5, 0.9, 0.99)


def default_actions(retentions=RETENTIONS, window_size: int = 64) -> dict[str, tuple[dict, float]]:
    """SnapKV (observation window ``window_size``) and recent-token retention (StreamingLLMPress without
    sink tokens, as config/config.yaml's ``recent_*``) at each retention; name → (spec, retention)."""
    out = {}
    for r in retentions:
        out[f"snapkv_{_tag(r)}"] = (_snapkv(r, window_size), r)
        out[f"recent_{_tag(r)}"] = (
            {"press": "StreamingLLMPress", "compression_ratio": round(1 - r, 6), "n_sink": 0},
            r,
        )
    return out


def _tag(retention: float) -> str:
    return f"{100 * retention:g}".replace(".", "p")


def _snapkv(retention: float, window_size: int) -> dict:
    return {"press": "SnapKVPress", "compression_ratio": round(1 - retention, 6), "window_size": window_size}


def action_groups(args: argparse.Namespace) -> dict[str, dict[str, tuple[dict, float]]]:
    """Actions per group; a group shares one prefill and its batches (raw files per document, group, batch).
    ``main``: :func:`default_actions`; ``high``: SnapKV alone at ``--high-retention`` (none when 0)."""
    groups = {"main": default_actions(window_size=args.window_size)}
    if args.high_retention:
        r = args.high_retention
        groups["high"] = {f"snapkv_{_tag(r)}": (_snapkv(r, args.window_size), r)}
    return groups


def build_documents(
    loaded, *, families, length: int, per_family: int, master_seed: int, study_seed: int, horizon: int
) -> list[dict]:
    """Documents-JSONL records generated in-process as the workflow's ``documents`` rule does."""
    chat = chat_function(loaded.tokenizer, loaded.chat_template)
    records = []
    for family in families:
        docs = generate_stratum(
            study="swrb_llm",
            stratum=f"{family}_{length}",
            n_documents=per_family,
            master_seed=master_seed,
            study_seed=study_seed,
            tokenizer=loaded.tokenizer,
            tokenizer_name=loaded.name,
            chat=chat,
            max_context=loaded.max_context,
            horizon=horizon,
        )
        records.extend(d.to_record() for d in docs)
    return records


def document_session(loaded, record: dict, actions: dict[str, dict], *, horizon: int, batch: int, seed: int):
    """One prefill of ``record`` serving every action; room for one batch of swrb chains."""
    ids = prompt_token_ids(record, loaded.tokenizer, loaded.chat_template)
    start = time.perf_counter()
    session = KernelSession(
        loaded,
        torch.tensor(ids, dtype=torch.long),
        actions,
        generation(master_seed=seed, study_seed=0, horizon=horizon),
        max_chains=chains_needed(len(actions), batch, "swrb"),
        document_id=str(record["id"]),
    )
    return session, len(ids), time.perf_counter() - start


def run_batch(
    loaded,
    session,
    doc_id: str,
    actions: dict[str, dict],
    *,
    index: int,
    size: int,
    batch: int,
    horizon: int,
    window: int,
    seed: int,
    progress: bool = False,
) -> pl.DataFrame:
    """Batch ``index`` of both modes (:func:`kvdiv.metrics.trajectory_replicates` rows, replicate ids
    index·batch + r) from streams (seed, "{mode}-{index}", document id, action, r); the mode that goes first
    alternates with the batch index."""
    frames = []
    for mode in ("complete", "swrb") if index % 2 == 0 else ("swrb", "complete"):
        out = generate(
            session,
            list(actions),
            generation(
                master_seed=seed,
                study_seed=name_key(f"{mode}-{index}"),  # the streams derive_seed gave the name itself
                horizon=horizon,
                replicates=size,
                mode=mode,
                tv_atol=1e-06,
            ),
            eos_token_ids=loaded.eos_token_ids,
            progress=progress,
            document_id=doc_id,
        )
        frames.append(
            trajectory_replicates(out, mode, window, doc_id).with_columns(pl.col("replicate") + index * batch)
        )
    return pl.concat(frames)


def run(loaded, args, *, setup_extra: dict | None = None) -> dict:
    """Run (or resume) the benchmark and write ``args.out``; returns the tables."""
    groups = action_groups(args)
    retention = {a: r for group in groups.values() for a, (_, r) in group.items()}
    records = build_documents(
        loaded,
        families=args.families,
        length=args.length,
        per_family=args.documents,
        master_seed=args.seed,
        study_seed=args.study_seed,
        horizon=args.horizon,
    )
    raw_dir = Path(args.raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    settings = {k: getattr(args, k) for k in ("horizon", "batch", "window", "seed", "window_size")}
    settings["model"] = loaded.name
    frames = []
    n_batches = math.ceil(args.replicates / args.batch)
    for i, record in enumerate(records):
        doc_id = str(record["id"])
        for group, specs in groups.items():
            actions = {a: spec for a, (spec, _) in specs.items()}
            session = None
            for b in range(n_batches):
                size = min(args.batch, args.replicates - b * args.batch)
                path = raw_dir / f"{doc_id}-{group}-b{b}.parquet"
                meta = raw_dir / f"{doc_id}-{group}-b{b}.json"
                wanted = settings | {"size": size, "actions": actions}
                if path.is_file() and meta.is_file() and json.loads(meta.read_text()) == wanted:
                    frames.append(pl.read_parquet(path))
                    print(f"[{i + 1}/{len(records)}] {doc_id} {group} batch {b}: reused {path}", flush=True)
                    continue
                t0 = time.perf_counter()
                if session is None:
                    session, n_prompt, prefill = document_session(
                        loaded, record, actions, horizon=args.horizon, batch=args.batch, seed=args.seed
                    )
                frame = run_batch(
                    loaded,
                    session,
                    doc_id,
                    actions,
                    index=b,
                    size=size,
                    batch=args.batch,
                    horizon=args.horizon,
                    window=args.window,
                    seed=args.seed,
                )
                frame = frame.with_columns(
                    pl.lit(n_prompt).alias("prompt_tokens"),
                    pl.lit(prefill).alias("prefill_s"),
                    pl.lit(os.getloadavg()[0]).alias("load_1min"),
                )
                tmp = path.with_suffix(".parquet.tmp")
                frame.write_parquet(tmp)
                tmp.replace(path)
                meta.write_text(json.dumps(wanted))
                frames.append(frame)
                print(
                    f"[{i + 1}/{len(records)}] {doc_id} {group} batch {b}: {time.perf_counter() - t0:.0f} s, "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
            del session
    tables = benchmark_tables(
        pl.concat(frames, how="diagonal_relaxed"), retention, args.horizon, args.bootstrap, args.seed, args.alpha
    )
    replicates = tables["replicates"]
    loads = replicates["load_1min"].unique()
    high = [a for a in groups.get("high", {})]
    setup = {
        "high": (
            f"`{high[0]}` runs as a second group beyond the issue's three retentions (its own prefill and "
            "batches), to reach the regime of rare divergence"
        )
        if high
        else "no extra action",
        "model": loaded.name,
        "command": " ".join(["python benchmarks/swrb_llm.py", *sys.argv[1:]]),
        "compute_min": (
            float(replicates["wall_s"].sum())
            + float(replicates.group_by("document", "prompt_tokens", "prefill_s").agg(pl.len())["prefill_s"].sum())
        )
        / 60,
        "documents": len(records),
        "strata": [f"{f}_{args.length}" for f in args.families],
        "per_family": args.documents,
        "prompt_tokens_min": int(replicates["prompt_tokens"].min()),
        "prompt_tokens_max": int(replicates["prompt_tokens"].max()),
        "actions": list(retention),
        "window_size": args.window_size,
        "horizon": args.horizon,
        "window": args.window,
        "replicates": args.replicates,
        "batch": args.batch,
        "seed": args.seed,
        "bootstrap": args.bootstrap,
        "alpha": args.alpha,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "threads": torch.get_num_threads(),
        "load_min": float(loads.min()),
        "load_max": float(loads.max()),
        **(setup_extra or {}),
    }
    text = render(tables, setup)
    out = Path(args.out)
    if out.is_file() and args.keep_notes:
        old = out.read_text()
        marker = "\n## Interpretation"
        if marker in old:
            text += old[old.index(marker) :]
    with atomic_path(out) as tmp:
        tmp.write_text(text)
    with atomic_path(raw_dir / "cells.parquet") as tmp:
        tables["cells"].write_parquet(tmp)
    print(f"wrote {out}", flush=True)
    return tables


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--documents", type=int, default=2, help="documents per family")
    p.add_argument("--families", nargs="+", default=["ruler", "helmet"])
    p.add_argument("--length", type=int, default=1024, help="target prompt length in tokens")
    p.add_argument("--replicates", type=int, default=4, help="R per (document, action) in each mode")
    p.add_argument(
        "--batch", type=int, default=4, help="replicates per generate call (memory: 4·actions·batch KV slots)"
    )
    p.add_argument("--horizon", type=int, default=128)
    p.add_argument("--window", type=int, default=32, help="L for R_L/B_L")
    p.add_argument("--window-size", type=int, default=64, help="SnapKV observation window")
    p.add_argument(
        "--high-retention",
        type=float,
        default=0.999,
        help="one more SnapKV action beyond the three retentions, run as its own group (0: none)",
    )
    p.add_argument("--seed", type=int, default=20260915)
    p.add_argument("--study-seed", type=int, default=15)
    p.add_argument("--bootstrap", type=int, default=2000)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: on the loaded shared 2-core machine 1 thread ran a batch 7-9x faster than 2)",
    )
    p.add_argument("--model", default="smollm2", help="a model of config/config.yaml, resolved under --models-dir")
    p.add_argument("--models-dir", default=str(REPO / "results/models"))
    p.add_argument("--raw-dir", default=str(REPO / "results/benchmarks/swrb_llm"))
    p.add_argument("--out", default=str(Path(__file__).with_suffix(".md")))
    p.add_argument(
        "--keep-notes",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the hand-written '## Interpretation' section of an existing --out",
    )
    p.add_argument(
        "--quick", action="store_true", help="1 document per family, 512 tokens, R = 3, H = 32, L = 8, 200 resamples"
    )
    return p


QUICK = {"documents": 1, "length": 512, "replicates": 3, "batch": 3, "horizon": 32, "window": 8, "bootstrap": 200}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; ``--quick`` swaps in :data:`QUICK` as defaults (explicit options still win)."""
    p = parser()
    args = p.parse_args(argv)
    if args.quick:
        p.set_defaults(**QUICK)
        args = p.parse_args(argv)
    for name in ("documents", "replicates", "batch", "horizon", "window", "bootstrap"):
        least = 2 if name == "replicates" else 1
        if getattr(args, name) < least:
            p.error(f"--{name.replace('_', '-')} must be >= {least}, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    if args.model not in config["models"]:
        raise SystemExit(f"--model {args.model!r} is not in config/config.yaml (has {sorted(config['models'])})")
    spec = {**config["models"][args.model], "threads": args.threads}
    provenance = Path(args.models_dir) / args.model / "provenance.json"
    if not provenance.is_file():
        raise SystemExit(
            f"{provenance} missing: run `snakemake --cores 1 results/models/{args.model}/provenance.json` first"
        )
    loaded = load_model(args.model, spec, args.models_dir)
    torch.set_num_threads(args.threads)
    run(loaded, args)


if __name__ == "__main__":
    main()
