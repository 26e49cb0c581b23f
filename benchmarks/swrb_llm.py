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
with :func:`kvdiv.analysis.swrb_comparison.retention_summary`).

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

from kvdiv.analysis.swrb_comparison import retention_summary
from kvdiv.documents import generate_stratum, prompt_token_ids
from kvdiv.documents.render import chat_function
from kvdiv.models.loading import load_model
from kvdiv.kernel.session import KernelSession
from kvdiv.metrics import trajectory_replicates
from kvdiv.results.report import paper_values
from kvdiv.trajectories.base import chains_needed
from kvdiv.trajectories.generate import generate

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # this script's folder, also when a test loads it by path
from swrb_analysis import (  # noqa: E402
    KEYS,
    action_enclosures,
    agreement_table,
    comparison_table,
    complete_variance_check,
    with_divergence,
)
from kvdiv.settings import generation

RETENTIONS = (0.5, 0.9, 0.99)
#: kvdiv's finite suite (benchmarks/finite_samplers.md, 24 systems, 100 000 replicates per sampler).
FINITE_SUITE = {
    "variance_ratio_min": None,
    "variance_ratio_median": 52.1,
    "evaluation_ratio_mean": None,
    "advantage_ratio_of_means": 17.6,
}


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
                study_seed=f"{mode}-{index}",
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


def _ci(row: dict, stat: str, digits: int = 3) -> str:
    v, lo, hi = row[stat], row[f"{stat}_lo"], row[f"{stat}_hi"]
    return f"{v:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


def _pct(retention: float) -> str:
    return f"{100 * retention:g}%"


def _num(v, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if math.isinf(v):
            return "∞"
        return f"{v:.{digits}g}"
    return str(v)


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_num(c) if not isinstance(c, str) else c for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def summaries(cells: pl.DataFrame, n_boot: int, seed: int) -> dict[str, pl.DataFrame]:
    """Every summary table the report prints (per retention, per action, per D bin, for each key and cost)."""
    d_bins = cells.with_columns(
        pl.when(pl.col("swrb_mean_D") < 0.5)
        .then(pl.lit("D < 0.5"))
        .when(pl.col("swrb_mean_D") < 0.95)
        .then(pl.lit("0.5 ≤ D < 0.95"))
        .otherwise(pl.lit("D ≥ 0.95"))
        .alias("divergence")
    )
    out = {}
    for key in ("R_H", "R_L", "B_L"):
        out[f"retention_{key}"] = retention_summary(cells, key=key, n_boot=n_boot, seed=seed)
    for cost in ("rows", "wall_s"):
        out[f"retention_{cost}"] = retention_summary(cells, cost=cost, n_boot=n_boot, seed=seed)
    out["action"] = retention_summary(cells, by="action", n_boot=n_boot, seed=seed)
    out["divergence"] = retention_summary(d_bins, by="divergence", n_boot=n_boot, seed=seed)
    out["all"] = retention_summary(cells, by=None, n_boot=n_boot, seed=seed)
    return out


def render(
    replicates: pl.DataFrame,
    cells: pl.DataFrame,
    sums: dict[str, pl.DataFrame],
    agree: pl.DataFrame,
    enclosures: pl.DataFrame,
    setup: dict,
    check: pl.DataFrame | None = None,
) -> str:
    """The recorded Markdown (every number computed here; prose about the regime is added by hand below the
    generated part)."""
    paper = paper_values().get("finite_state", {})
    s = setup
    md = [f"# Complete vs residual-branch (SWRB) sampling on {s['model']} (CPU)", ""]
    md += [
        f"`{s['command']}` (script beside this file; {s['compute_min']:.0f} min of prefills and generate calls "
        "in all).",
        "",
    ]
    md += [
        "**Setup.** "
        f"{s['documents']} synthetic documents ({', '.join(s['strata'])}; {s['per_family']} per family, "
        "generated with "
        f"kvdiv.documents as the workflow does; {s['prompt_tokens_min']}–{s['prompt_tokens_max']} prompt tokens "
        "after the chat "
        f"template). Actions: {', '.join(f'`{a}`' for a in s['actions'])} (SnapKV with a {s['window_size']}-token "
        "observation "
        "window; recent = StreamingLLMPress without sink tokens, as config/config.yaml's `recent_*`; "
        f"{s['high']}). "
        f"H = {s['horizon']}, window L = {s['window']}, temperature 1, δ_1 = 0, tv_atol 1e-6. "
        f"R = {s['replicates']} replicates "
        f"per (document, action) in each mode, {s['batch']} per `generate` call, streams (seed {s['seed']}, "
        "mode-batch, document, "
        "action, replicate): the modes are independent. Bootstrap: "
        f"{s['bootstrap']} cluster resamples over documents, 95 % percentile intervals; enclosure α = {s['alpha']}.",
        "",
        f"**Machine.** {s['machine']}; {s['threads']} torch threads; shared with other helpers' jobs "
        "(1-min load average "
        f"{s['load_min']:.1f}–{s['load_max']:.1f} at the end of each batch), so wall times are noisy; both modes "
        "of a document run in one process, alternating which goes first per batch.",
        "",
        "**Definitions** (benchmarks/swrb_analysis.py; the finite study's aggregates, "
        "kvdiv.estimands.variance_cost_aggregates): "
        "variance ratio = Var(M)/Var(Z_R) per (document, action) cell (per-replicate variances, ddof 1); evaluation "
        "ratio = mean over cells of c̄_swrb/c̄_complete with c = kernel-pair evaluations as the paper counts them "
        "(H complete, H + (H − J) swrb); advantage = ratio of means, mean(Var(M)·c̄_complete)/mean(Var(Z_R)·c̄_swrb). "
        "`rows` = rows forwarded as the generation code counts them (complete 2 per step before divergence, 3 after — "
        "the third is the fixed-history row; swrb 2 per scan step + 3 per branch step); `wall` = each action's "
        "share of "
        "its generate call per replicate. A cell where neither mode saw any divergence has no ratio (left out of "
        "min/median/max; counted in the ratios of means); a cell whose complete replicates never diverged has ratio 0 "
        "(`zero-var.` counts them): the pooled variance ratio mean(Var(M))/mean(Var(Z_R)) is robust to both.",
        "",
    ]
    md += ["## R_H per retention", ""]
    head = [
        "retention",
        "cells",
        "zero-var.",
        "docs",
        "median var. ratio [95% CI]",
        "range",
        "pooled var. ratio [CI]",
        "eval. ratio [CI]",
        "advantage (evals) [CI]",
        "rows ratio",
        "advantage (rows) [CI]",
        "wall ratio",
        "advantage (wall) [CI]",
    ]
    rows = []
    by = {
        k: {r["retention"]: r for r in sums[k].iter_rows(named=True)}
        for k in ("retention_R_H", "retention_rows", "retention_wall_s")
    }
    for ret, r in by["retention_R_H"].items():
        rr, rw = by["retention_rows"][ret], by["retention_wall_s"][ret]
        rows.append(
            [
                _pct(ret),
                r["cells"],
                r["complete_zero_variance_cells"],
                r["documents"],
                _ci(r, "variance_ratio_median"),
                f"{_num(r['variance_ratio_min'])}–{_num(r['variance_ratio_max'])}",
                _ci(r, "variance_ratio_of_means"),
                _ci(r, "evaluation_ratio_mean"),
                _ci(r, "advantage_ratio_of_means"),
                _num(rr["evaluation_ratio_mean"]),
                _ci(rr, "advantage_ratio_of_means"),
                _num(rw["evaluation_ratio_mean"]),
                _ci(rw, "advantage_ratio_of_means"),
            ]
        )
    a = sums["all"].row(0, named=True)
    rows.append(
        [
            "all",
            a["cells"],
            a["complete_zero_variance_cells"],
            a["documents"],
            _ci(a, "variance_ratio_median"),
            f"{_num(a['variance_ratio_min'])}–{_num(a['variance_ratio_max'])}",
            _ci(a, "variance_ratio_of_means"),
            _ci(a, "evaluation_ratio_mean"),
            _ci(a, "advantage_ratio_of_means"),
            "",
            "",
            "",
            "",
        ]
    )
    md += [_table(head, rows)]
    md += ["## R_H per action and by probability of divergence", ""]
    rows = []
    dmean = cells.group_by("action").agg(pl.col("swrb_mean_D").mean(), pl.col("complete_mean_R_H").mean())
    dmean = {r["action"]: r for r in dmean.iter_rows(named=True)}
    for r in sums["action"].iter_rows(named=True):
        rows.append(
            [
                r["action"],
                dmean[r["action"]]["swrb_mean_D"],
                dmean[r["action"]]["complete_mean_R_H"],
                r["cells"],
                _ci(r, "variance_ratio_median"),
                f"{_num(r['variance_ratio_min'])}–{_num(r['variance_ratio_max'])}",
                _ci(r, "variance_ratio_of_means"),
                _num(r["evaluation_ratio_mean"]),
                _ci(r, "advantage_ratio_of_means"),
            ]
        )
    md += [
        _table(
            [
                "action",
                "mean D",
                "mean M",
                "cells",
                "median var. ratio [CI]",
                "range",
                "pooled var. ratio [CI]",
                "eval. ratio",
                "advantage (evals) [CI]",
            ],
            rows,
        )
    ]
    md += [
        "",
        "Cells grouped by their swrb estimate of P(divergence within H), D̄ = mean over replicates of D = 1 − S_H:",
        "",
    ]
    rows = [
        [
            r["divergence"],
            r["cells"],
            r["documents"],
            _ci(r, "variance_ratio_median"),
            f"{_num(r['variance_ratio_min'])}–{_num(r['variance_ratio_max'])}",
            _ci(r, "variance_ratio_of_means"),
            _num(r["evaluation_ratio_mean"]),
            _ci(r, "advantage_ratio_of_means"),
        ]
        for r in sums["divergence"].iter_rows(named=True)
    ]
    md += [
        _table(
            [
                "D̄",
                "cells",
                "docs",
                "median var. ratio [CI]",
                "range",
                "pooled var. ratio [CI]",
                "eval. ratio",
                "advantage (evals) [CI]",
            ],
            rows,
        )
    ]
    md += ["## Window and capacity (L = {}): M_L vs Z_L (R_L), capacity vs W_L (B_L)".format(s["window"]), ""]
    rows = []
    for key in ("R_L", "B_L"):
        for r in sums[f"retention_{key}"].iter_rows(named=True):
            rows.append(
                [
                    key,
                    _pct(r["retention"]),
                    r["cells"],
                    _ci(r, "variance_ratio_median"),
                    f"{_num(r['variance_ratio_min'])}–{_num(r['variance_ratio_max'])}",
                    _ci(r, "advantage_ratio_of_means"),
                ]
            )
    md += [
        _table(["quantity", "retention", "cells", "median var. ratio [CI]", "range", "advantage (evals) [CI]"], rows)
    ]
    md += [
        "## The complete mode's own TV-integrated estimator",
        "",
        "Complete mode records δ_t along the coupled path, so (1/H) Σ_t δ_t (`risk_tv`) is also unbiased for R_H at no "
        "extra cost. Median Var(risk_tv)/Var(Z_R) per retention (below 1: the complete mode's Σδ beats SWRB):",
        "",
    ]
    rt = (
        cells.group_by("retention")
        .agg(
            pl.col("variance_ratio_risk_tv")
            .filter(pl.col("variance_ratio_risk_tv").is_not_nan())
            .median()
            .alias("median"),
            (pl.col("complete_var_risk_tv") / pl.col("complete_var_R_H"))
            .filter(pl.col("complete_var_R_H") > 0)
            .median()
            .alias("vs_M"),
        )
        .sort("retention")
    )
    md += [
        _table(
            ["retention", "median Var(risk_tv)/Var(Z_R)", "median Var(risk_tv)/Var(M)"],
            [[_pct(r["retention"]), r["median"], r["vs_M"]] for r in rt.iter_rows(named=True)],
        )
    ]
    md += [
        "## Mean agreement (unbiasedness on a real model)",
        "",
        "Over the cells (documents × actions) of a retention, with d = mean_complete − mean_swrb per cell: pooled "
        "z = Σ d / √(Σ (se_c² + se_s²)) with within-cell standard errors (criterion |z| < 3), and the across-cells "
        "t = mean(d)/(sd(d)/√n) on n − 1 df, which needs no within-cell se (a complete cell whose R replicates never "
        "diverged has se 0, an underestimate; the t in turn rejects too often when cell variances differ widely). "
        "`zero-var.`: cells whose complete replicates all had the same value. P_div: P(τ ≤ H), estimated by 1{τ ≤ H} "
        "(complete) and D (swrb).",
        "",
    ]
    rows = [
        [
            _pct(r["retention"]),
            r["key"],
            r["cells"],
            r["complete_mean"],
            r["swrb_mean"],
            f"{r['z']:+.2f}",
            f"{r['t']:+.2f}",
            r["p"],
            r["complete_zero_variance_cells"],
            "yes" if r["agrees"] else "**no**",
        ]
        for r in agree.iter_rows(named=True)
    ]
    md += [
        _table(
            [
                "retention",
                "quantity",
                "cells",
                "mean complete",
                "mean swrb",
                "pooled z",
                "t",
                "t p",
                "zero-var.",
                "agrees (|z| < 3)",
            ],
            rows,
        )
    ]
    md += [
        f"## (1 − α) enclosure of R_H per action from sampled profiles (α = {s['alpha']}, L = {s['window']})",
        "",
        "[LCB(Z_L), UCB(Z_L + W_L)] at α/2 each over per-document means of the swrb replicates (paper §4.3; "
        "kvdiv.estimands.enclosure): an enclosure of the document-average R_H from a depth-L window. "
        "Beside it the swrb and complete estimates of R_H from the full horizon.",
        "",
    ]
    rows = [
        [
            r["action"],
            r["documents"],
            r["swrb_R_L"],
            r["swrb_B_L"],
            f"[{r['enclosure_lower']:.3f}, {r['enclosure_upper']:.3f}]",
            r["swrb_R_H"],
            r["complete_R_H"],
            "yes" if r["complete_R_H_inside"] else "no",
        ]
        for r in enclosures.iter_rows(named=True)
    ]
    md += [_table(["action", "docs", "Z_L mean", "W_L mean", "enclosure", "Z_R mean", "M mean", "M inside"], rows)]
    md += [
        "## The complete coupling's Var(M) estimated from swrb draws (the report's method)",
        "",
        "A study in `mode: swrb` has no complete draws; the report (item `swrb`) estimates Var(M) from the swrb "
        "rows as mean(D·M_path²) − (Z̄² − s²/n) (kvdiv.analysis.swrb_comparison.study_cells). Here, per retention, "
        "the mean over cells of that estimate beside the complete mode's measured Var(M) of the same cells, and "
        "their ratio (sums over a document's cells, cluster bootstrap over documents; 1 = right). Only batches "
        "run with `M_path` recorded count.",
        "",
    ]
    if check is not None and check.height:
        md += [
            _table(
                [
                    "retention",
                    "cells",
                    "docs",
                    "mean measured Var(M)",
                    "mean estimated Var(M)",
                    "estimated/measured [CI]",
                    "mean Var(Z_R)",
                    "pooled ratio, measured Var(M)",
                    "pooled ratio, estimated Var(M)",
                ],
                [
                    [
                        _pct(r["retention"]),
                        r["cells"],
                        r["documents"],
                        r["measured"],
                        r["estimated"],
                        f"{_num(r['ratio'])} [{_num(r['ratio_lower'])}, {_num(r['ratio_upper'])}]",
                        r["swrb"],
                        r["pooled_ratio_measured"],
                        r["pooled_ratio_estimated"],
                    ]
                    for r in check.iter_rows(named=True)
                ],
            )
        ]
    else:
        md += ["_No batch with `M_path`._", ""]
    md += ["## Beside the finite-state figures", ""]
    vr = paper.get("variance_ratio_naive_over_swrb", {})
    md += [
        _table(
            ["quantity", "paper, 24 finite systems", "kvdiv finite suite", f"{s['model']} (all cells)"],
            [
                [
                    "variance ratio, median",
                    vr.get("median"),
                    FINITE_SUITE["variance_ratio_median"],
                    a["variance_ratio_median"],
                ],
                [
                    "variance ratio, range",
                    f"{_num(vr.get('min'))}–{_num(vr.get('max'))}",
                    "–",
                    f"{_num(a['variance_ratio_min'])}–{_num(a['variance_ratio_max'])}",
                ],
                [
                    "evaluations swrb/complete",
                    paper.get("mean_pair_evaluations_ratio"),
                    "–",
                    a["evaluation_ratio_mean"],
                ],
                [
                    "variance–cost advantage (ratio of means)",
                    paper.get("variance_cost_advantage_ratio_of_means"),
                    FINITE_SUITE["advantage_ratio_of_means"],
                    a["advantage_ratio_of_means"],
                ],
            ],
        )
    ]
    md += ["## Per (document, action) cells", ""]
    rows = [
        [
            r["document"],
            r["action"],
            r["swrb_mean_D"],
            r["complete_mean_R_H"],
            r["swrb_mean_R_H"],
            r["complete_var_R_H"],
            r["swrb_var_R_H"],
            r["variance_ratio_R_H"],
            r["evaluation_ratio"],
            r["rows_ratio"],
            r["wall_ratio"],
            f"{r['z_R_H']:+.2f}",
        ]
        for r in cells.sort("document", "retention", "action").iter_rows(named=True)
    ]
    md += [
        _table(
            [
                "document",
                "action",
                "D̄",
                "mean M",
                "mean Z_R",
                "Var(M)",
                "Var(Z_R)",
                "var. ratio",
                "eval. ratio",
                "rows ratio",
                "wall ratio",
                "z",
            ],
            rows,
        )
    ]
    return "\n".join(md)


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
    replicates = pl.concat(frames, how="diagonal_relaxed")  # batches written before M_path existed lack it
    replicates = with_divergence(replicates)
    cells = comparison_table(replicates, retention, keys=(*KEYS, "P_div"))
    d = (
        replicates.filter(pl.col("mode") == "swrb")
        .group_by("document", "action")
        .agg(pl.col("D").mean().alias("swrb_mean_D"))
    )
    cells = cells.join(d, on=["document", "action"], how="left")
    sums = summaries(cells, args.bootstrap, args.seed)
    agree = agreement_table(cells, keys=(*KEYS, "P_div"))
    enclosures = action_enclosures(replicates, alpha=args.alpha)
    if "M_path" not in replicates.columns:
        replicates = replicates.with_columns(pl.lit(None, dtype=pl.Float64).alias("M_path"))
    check = complete_variance_check(replicates, args.horizon, retention, args.bootstrap, args.seed)
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
    text = render(replicates, cells, sums, agree, enclosures, setup, check)
    out = Path(args.out)
    if out.is_file() and args.keep_notes:
        old = out.read_text()
        marker = "\n## Interpretation"
        if marker in old:
            text += old[old.index(marker) :]
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    cells.write_parquet(raw_dir / "cells.parquet")
    print(f"wrote {out}", flush=True)
    return {
        "replicates": replicates,
        "cells": cells,
        "summaries": sums,
        "agreement": agree,
        "enclosures": enclosures,
        "variance_check": check,
    }


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
