"""Benchmark: how long SmolLM2's full-cache answers run — the share of reference chains that reach H without EOS, and
where the others end, per task and family.

The documents are a study's own (its config's seeds, stratum ``{family}_{length}``, the family's default task cycle or
``--tasks``), generated in-process as the workflow's document rule does. Each document's reference chains are sampled
from the full-cache model with :func:`kvdiv.trajectories.reference.reference_chains` (temperature 1, no top-k/top-p):
replicate 0 is the chain a one-replicate, shared-reference run of the study at that stratum samples (replicates 1..R-1
are further draws from the same P). Each chain's answer (its text before EOS) is also scored with the task's scorer.

    PYTHONPATH=. python benchmarks/answer_lengths.py [--config config/replication.yaml] [--study retention50]
        [--length 2048] [--documents 24] [--replicates 2] [--horizon 128] [--batch 4] [--families ruler helmet]
        [--tasks T ...] [--json out.json] [--examples]

Needs results/models/smollm2 (``snakemake --cores 1 results/models/smollm2/provenance.json``).
Prints Markdown; the recorded results are in benchmarks/answer_lengths.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import smollm2, stratum_documents  # noqa: E402

BINS = ((1, 16), (17, 32), (33, 64), (65, 127), (128, 128))


def sample_family(loaded, config, args, family: str) -> list[dict]:
    """One row per (document, replicate) of the family's stratum: first EOS step (None: none within H) and score."""
    import torch

    from kvdiv.documents.render import prompt_token_ids
    from kvdiv.documents.scoring import score
    from kvdiv.kernel.session import KernelSession
    from kvdiv.settings import generation
    from kvdiv.trajectories.answers import answer_text, eos_step
    from kvdiv.trajectories.reference import reference_chains

    study = config["studies"][args.study]
    stratum = f"{family}_{args.length}"
    start = time.perf_counter()
    docs = stratum_documents(loaded, config, args.study, stratum, args.documents, args.horizon, args.tasks)
    print(f"<!-- {stratum}: {len(docs)} documents generated in {time.perf_counter() - start:.0f} s -->", flush=True)
    rows = []
    for b in range(0, len(docs), args.batch):
        batch = docs[b : b + args.batch]
        start = time.perf_counter()
        ids = [prompt_token_ids(d, loaded.tokenizer, loaded.chat_template) for d in batch]
        settings = generation(
            master_seed=config["seed"], study_seed=study["seed"], horizon=args.horizon, replicates=args.replicates
        )
        sessions = [KernelSession(loaded, torch.tensor(i), {}, settings, max_chains=args.replicates) for i in ids]
        parts = [(config["seed"], study["seed"], d["id"]) for d in batch]
        chains = reference_chains(sessions, parts, args.replicates, args.horizon, eos_token_ids=loaded.eos_token_ids)
        for d, n_ids, (x, eos) in zip(batch, ids, chains):
            for r in range(args.replicates):
                text = answer_text(loaded.tokenizer, x[r], eos[r])
                rows.append(
                    {
                        "family": family,
                        "task": d["task"],
                        "document": d["id"],
                        "replicate": r,
                        "prompt_tokens": len(n_ids),
                        "first_eos": eos_step(eos[r]),
                        "score": score(d["task"], text, d["answers"]),
                        "answer": text,
                    }
                )
        del sessions
        print(
            f"<!-- {stratum} documents {b}..{b + len(batch) - 1}: {time.perf_counter() - start:.0f} s -->", flush=True
        )
    return rows


def summary_row(label: str, rows: list[dict], horizon: int) -> str:
    """A Markdown row: chains, share reaching H without EOS (all replicates; replicate 0), the first-EOS steps of the
    chains that end (quartiles and counts by step bin), mean score."""
    ends = np.array([r["first_eos"] for r in rows if r["first_eos"] is not None])
    reach = np.mean([r["first_eos"] is None for r in rows])
    rep0 = [r for r in rows if r["replicate"] == 0]
    reach0 = np.mean([r["first_eos"] is None for r in rep0])
    quart = (
        "–"
        if not ends.size
        else "{:.0f} / {:.0f} / {:.0f} / {:.0f} / {:.0f}".format(*np.quantile(ends, [0, 0.25, 0.5, 0.75, 1.0]))
    )
    bins = " / ".join(str(int(((ends >= lo) & (ends <= hi)).sum())) for lo, hi in BINS)
    docs = len({r["document"] for r in rows})
    mean_score = 100 * np.mean([r["score"] for r in rows])
    return (
        f"| {label} | {docs} | {len(rows)} | **{100 * reach:.1f}** | {100 * reach0:.1f} | {quart} | {bins} "
        f"| {mean_score:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="config/replication.yaml")
    parser.add_argument("--study", default="retention50")
    parser.add_argument("--models-dir", default="results/models")
    parser.add_argument("--families", nargs="+", default=["ruler", "helmet"])
    parser.add_argument("--tasks", nargs="+", default=None, help="the strata's task list (default: each family's)")
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--documents", type=int, default=24)
    parser.add_argument("--replicates", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4, help="documents sampled together (one forward per step)")
    parser.add_argument("--json", default=None, help="write every chain's row (with its answer text) here")
    parser.add_argument("--examples", action="store_true", help="print one answer per task")
    args = parser.parse_args()

    config, loaded = smollm2(args.models_dir, args.config)
    start = time.perf_counter()
    rows = [row for family in args.families for row in sample_family(loaded, config, args, family)]
    wall = time.perf_counter() - start
    print(
        f"\n`{' '.join(sys.argv[1:]) or '(defaults)'}`: study {args.study} of {args.config}, {args.length}-token "
        f"strata, H = {args.horizon}, temperature 1, {args.replicates} reference chains per document; "
        f"{platform.machine()}, {wall / 60:.1f} min wall\n"
    )
    print(
        "| task | documents | chains | reach H without EOS (%) | replicate 0 (%) "
        "| first EOS: min / q25 / median / q75 / max | ended in steps 1–16 / 17–32 / 33–64 / 65–127 / 128 "
        "| score of the answer (%) |"
    )
    print("|---|---:|---:|---:|---:|---|---|---:|")
    by_task: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        by_task[(row["family"], row["task"])].append(row)
    for family in args.families:
        for (fam, task), sub in sorted(by_task.items()):
            if fam == family:
                print(summary_row(f"{family}: {task}", sub, args.horizon))
        print(summary_row(f"**{family}**", [r for r in rows if r["family"] == family], args.horizon))
    print(summary_row("**both families**", rows, args.horizon))
    if args.examples:
        for (family, task), sub in sorted(by_task.items()):
            print(f"\n{family} / {task} ({sub[0]['document']}, first EOS {sub[0]['first_eos']}):\n")
            print("    " + sub[0]["answer"][:400].replace("\n", "\n    "))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
