"""Benchmark: paired contrasts with a shared reference chain vs per-action reference chains, at equal cost.

For each document (synthetic RULER/HELMET-style documents of config/smoke.yaml's first study, generated in-process as
the workflow does) and each ``reference_chain`` (``shared``, ``per_action``), R coupled replicates of the five
actions of Figures 5 and 7 (snapkv_half, snapkv_512, recent_half, snapkv_90, recent_90 of config/config.yaml) in
complete mode, on one :class:`kvdiv.kernel.session.KernelSession` per document. Per replicate and action: the mismatch
risk M = O + Π (occurrence + occupation), exposure E and occupation Π (kvdiv.metrics definitions). Per contrast
a − b of the figures (snapkv_512 − snapkv_half, recent_half − snapkv_half, recent_90 − snapkv_90) and quantity,
the per-replicate difference d = f_a − f_b, and:

- ``within``: its within-document variance over replicates, averaged over documents (the part of the per-document
  contrast's variance that the sampling streams make; sharing x only changes this part);
- ``per-document variance at R = 1``: between-document variance of the document means (less the within part / R)
  plus ``within``, i.e. the variance of one document's contrast in the paper's design (R = 1);
- ``rows``: kernel rows per replicate of all five actions (shared: one reference row per replicate and step in
  place of one per action);
- ``ratio at equal cost`` = (variance × rows) per_action / (variance × rows) shared: how many times more replicates
  (or documents, for the R = 1 column) per_action needs for the same variance at the same forward rows (> 1:
  sharing pays).

Standard errors of the within ratios: a bootstrap over documents (the same resamples for both modes).

Run:
    PYTHONPATH=. python benchmarks/shared_reference.py --model tiny --documents 4 --replicates 16 --horizon 32
    snakemake --cores 1 results/models/smollm2/provenance.json   # once, for --model smollm2
    PYTHONPATH=. python benchmarks/shared_reference.py --model smollm2 --documents 3 --replicates 8 --horizon 64
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from kvdiv.settings import generation

REPO = Path(__file__).resolve().parents[1]
ACTION_NAMES = ("snapkv_half", "snapkv_512", "recent_half", "snapkv_90", "recent_90")
CONTRASTS = (("snapkv_512", "snapkv_half"), ("recent_half", "snapkv_half"), ("recent_90", "snapkv_90"))
QUANTITIES = ("mismatch", "occurrence", "exposure", "occupation")
MODES = ("shared", "per_action")


def load(model: str, models_dir: Path):
    """config/smoke.yaml's tiny random Llama (byte tokenizer, resolved into a temporary folder) or a model of
    config/config.yaml resolved by the workflow (SmolLM2)."""
    from kvdiv.models.loading import load_model
    from kvdiv.models.sources import resolve_model

    if model == "tiny":
        spec = {**yaml.safe_load((REPO / "config/smoke.yaml").read_text())["models"]["tiny"], "threads": 1}
        tmp = Path(tempfile.mkdtemp(prefix="kvdiv-shared-ref-"))
        resolve_model("tiny", spec, tmp / "tiny")
        return load_model("tiny", spec, tmp)
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    return load_model(model, {**config["models"][model], "threads": 1}, models_dir)


def per_replicate(traj, horizon: int) -> dict[str, np.ndarray]:
    """M, O, E, Π per replicate (kvdiv.metrics definitions) from one action's trajectories."""
    mismatch = ~np.asarray(traj.match, dtype=bool)
    diverged = mismatch.any(axis=1)
    tau = np.where(diverged, mismatch.argmax(axis=1) + 1, horizon + 1)
    after = np.arange(1, horizon + 1)[None, :] > tau[:, None]
    return {
        "mismatch": mismatch.mean(axis=1),
        "occurrence": diverged / horizon,
        "exposure": np.where(diverged, (horizon - tau) / horizon, 0.0),
        "occupation": (mismatch & after).sum(axis=1) / horizon,
    }


def _safe(num: float, den: float) -> float:
    return num / den if den > 0 else float("nan")


def _ratio(num: float, den: float) -> str:
    """``num/den`` to 2 decimals; "–" when both are 0 (no divergence in either mode), "∞" when only den is."""
    if den > 0:
        return f"{num / den:.2f}"
    return "–" if num == 0 else "∞"


def run(args) -> str:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_common import stratum_prompts

    from kvdiv.kernel.session import KernelSession
    from kvdiv.trajectories.base import chains_needed
    from kvdiv.trajectories.generate import generate

    torch.set_num_threads(1)
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    smoke_config = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    study = next(iter(smoke_config["studies"]))
    spec = smoke_config["studies"][study]
    actions = {name: config["actions"][name] for name in ACTION_NAMES}
    loaded = load(args.model, Path(args.models_dir))
    strata = [f"{s['family']}_{s['length']}" for s in spec["strata"]]
    ids, prompts = [], []
    per = -(-args.documents // len(strata))
    for stratum in strata:
        i, p = stratum_prompts(loaded, smoke_config, study, stratum, per, args.horizon)
        ids += i
        prompts += p
    ids, prompts = ids[: args.documents], prompts[: args.documents]
    # values[mode][contrast][quantity]: [documents, replicates]; rows[mode]: per replicate, all actions
    values = {m: {c: {q: [] for q in QUANTITIES} for c in CONTRASTS} for m in MODES}
    rows = {m: [] for m in MODES}
    seconds = {m: 0.0 for m in MODES}
    for d, (doc_id, prompt) in enumerate(zip(ids, prompts)):
        for mode in MODES if d % 2 == 0 else MODES[::-1]:  # alternate which runs first
            session = KernelSession(
                loaded,
                torch.tensor(prompt),
                actions,
                generation(master_seed=args.seed, study_seed=1, horizon=args.horizon),
                max_chains=chains_needed(len(actions), args.replicates, "complete", mode),
                document_id=doc_id,
            )
            start = time.perf_counter()
            out = generate(
                session,
                list(actions),
                generation(
                    master_seed=args.seed,
                    study_seed=1,
                    horizon=args.horizon,
                    replicates=args.replicates,
                    tv_atol=1e-06,
                    reference_chain=mode,
                ),
                eos_token_ids=loaded.eos_token_ids,
                progress=False,
                document_id=doc_id,
            )
            seconds[mode] += time.perf_counter() - start
            rows[mode].append(sum(t.rows for t in out.values()) / args.replicates)
            f = {a: per_replicate(t, args.horizon) for a, t in out.items()}
            for a, b in CONTRASTS:
                for q in QUANTITIES:
                    values[mode][(a, b)][q].append(f[a][q] - f[b][q])
        print(f"document {d + 1}/{len(ids)} {doc_id}: done", file=sys.stderr, flush=True)
    rng = np.random.default_rng(args.seed)
    n_doc = len(ids)
    boots = rng.integers(0, n_doc, size=(args.bootstrap, n_doc))
    mean_rows = {m: float(np.mean(rows[m])) for m in MODES}

    def within(v: np.ndarray, idx=slice(None)) -> float:
        return float(np.var(v[idx], axis=1, ddof=1).mean())

    def at_r1(v: np.ndarray) -> float:
        w = np.var(v, axis=1, ddof=1).mean()
        between = np.var(v.mean(axis=1), ddof=1) - w / v.shape[1] if v.shape[0] > 1 else np.nan
        return float(max(between, 0.0) + w)

    lines = [
        "| contrast | quantity | within var, shared | within var, per_action | within ratio pa/sh | "
        "ratio at equal cost (within) | per-doc var at R=1, shared | per_action | ratio at equal cost (R=1) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in CONTRASTS:
        for q in QUANTITIES:
            v = {m: np.asarray(values[m][c][q]) for m in MODES}
            ws, wp = within(v["shared"]), within(v["per_action"])
            boot = np.array([_safe(within(v["per_action"], b), within(v["shared"], b)) for b in boots])
            cost = mean_rows["per_action"] / mean_rows["shared"]
            rs, rp = at_r1(v["shared"]), at_r1(v["per_action"])
            se = np.std(boot[np.isfinite(boot)], ddof=1) if np.isfinite(boot).sum() > 1 else float("nan")
            lines.append(
                f"| {c[0]} − {c[1]} | {q} | {ws:.3g} | {wp:.3g} | {_ratio(wp, ws)} ± {se:.2f} | "
                f"{_ratio(wp * cost, ws)} | {rs:.3g} | {rp:.3g} | {_ratio(rp * cost, rs)} |"
            )
    head = [
        f"Model {args.model}, {n_doc} documents ({', '.join(strata)} of config/smoke.yaml's study {study}), "
        f"H = {args.horizon}, R = {args.replicates} replicates per document and mode, seed {args.seed}, one thread, "
        f"{platform.processor() or platform.machine()}.",
        "",
        f"Kernel rows per replicate (all five actions): shared {mean_rows['shared']:.1f}, per_action "
        f"{mean_rows['per_action']:.1f} (ratio {mean_rows['per_action'] / mean_rows['shared']:.2f}); generation "
        f"seconds: shared {seconds['shared']:.1f}, per_action {seconds['per_action']:.1f}.",
        "",
        f"Within ratios ± bootstrap standard error over documents ({args.bootstrap} resamples).",
        "",
    ]
    return "\n".join(head + lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny (random Llama, byte tokenizer) or a config model name")
    parser.add_argument("--models-dir", default="results/models")
    parser.add_argument("--documents", type=int, default=4)
    parser.add_argument("--replicates", type=int, default=16)
    parser.add_argument("--horizon", type=int, default=32)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--bootstrap", type=int, default=400)
    parser.add_argument("--out", default=None, help="append the table to this Markdown file")
    args = parser.parse_args(argv)
    text = run(args)
    print(text)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(f"\n### `{' '.join(sys.argv[1:])}`\n\n" + text)


if __name__ == "__main__":
    main()
