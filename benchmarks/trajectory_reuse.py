"""Benchmark: what a rerun trajectory job costs when an action or a document is added, with the trajectory cache
(kvdiv.trajectories.reuse) against without it (every action of every document recomputed, as before the cache).

SmolLM2-135M-Instruct (float32, CPU, 1 thread, OMP_WAIT_POLICY=PASSIVE as the workflow's jobs), the first 3
``ruler_1024`` documents of study ``retention50`` (one job of ``documents_per_job`` 3), complete mode, R = 1, shared
reference chain. The job (:func:`kvdiv.trajectories.job.run_documents`, stores written) runs retention50's three
actions plus ``snapkv_90``:

- ``full``: no cache: every (document, action) generated (the cost of the rerun before the cache);
- ``action added``: the three actions' pieces cached: the job generates only ``snapkv_90`` (and the reference chain);
- ``document added``: documents 0 and 1 cached with all four actions: the job generates document 2 only.

Cases are interleaved within each round (order reversed every other round); each round's times are divided by that
round's ``full`` time; the table gives min and median of the seconds and of those ratios. ``--busy-rounds`` runs the
same beside one busy process. Every job's stores are checked equal (arrays) to the ``full`` job's.

Run (after `snakemake --cores 1 results/models/smollm2/provenance.json`):
    python benchmarks/trajectory_reuse.py --horizon 64 --rounds 3 --busy-rounds 1
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as workflow_scripts/trajectories.py, before torch starts

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from bench_common import busy_process, smollm2, stratum_documents  # noqa: E402

from kvdiv.trajectories.job import run_documents  # noqa: E402
from kvdiv.trajectories.reuse import TrajectoryCache  # noqa: E402
from kvdiv.trajectories.store import read_document_store  # noqa: E402
from kvdiv.settings import generation

REPO = Path(__file__).resolve().parents[1]
CASES = ("full", "action added", "document added")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy-rounds", type=int, default=1)
    parser.add_argument("--models-dir", default=str(REPO / "results/models"))
    args = parser.parse_args()

    config, loaded = smollm2(args.models_dir, REPO / "config/config.yaml")
    study = config["studies"]["retention50"]
    old = {a: config["actions"][a] for a in study["actions"]}
    actions = {**old, "snapkv_90": config["actions"]["snapkv_90"]}
    docs = stratum_documents(loaded, config, "retention50", "ruler_1024", 3, args.horizon)
    settings = generation(master_seed=config["seed"], study_seed=study["seed"], horizon=args.horizon, replicates=1)
    work = Path(tempfile.mkdtemp(prefix="kvdiv-reuse-"))
    print(
        f"documents {[d['id'] for d in docs]}; actions {list(actions)} (cached: {list(old)}); H={args.horizon}",
        flush=True,
    )
    # the caches each case starts from, computed once
    seeded = {"action added": work / "seed-action", "document added": work / "seed-document"}
    run_documents(
        loaded,
        docs,
        old,
        [work / f"s{d}.zarr" for d in range(3)],
        settings,
        cache=TrajectoryCache(seeded["action added"]),
        progress=False,
    )
    run_documents(
        loaded,
        docs[:2],
        actions,
        [work / f"t{d}.zarr" for d in range(2)],
        settings,
        cache=TrajectoryCache(seeded["document added"]),
        progress=False,
    )

    def job(case: str, out: Path) -> float:
        cache = None
        if case != "full":
            shutil.rmtree(work / "cache", ignore_errors=True)
            shutil.copytree(seeded[case], work / "cache")
            cache = TrajectoryCache(work / "cache")
        start = time.perf_counter()
        run_documents(
            loaded, docs, actions, [out / f"{d}.zarr" for d in range(3)], settings, cache=cache, progress=False
        )
        return time.perf_counter() - start

    def rounds(n: int, label: str) -> dict[str, list[dict]]:
        out = {case: [] for case in CASES}
        for r in range(n):
            row = {}
            for case in CASES if r % 2 == 0 else CASES[::-1]:
                dest = work / f"{label}-{r}-{case.replace(' ', '_')}"
                dest.mkdir()
                row[case] = {"seconds": job(case, dest), "dest": dest}
            for case in CASES:
                for d in range(3):
                    a, b = (
                        read_document_store(row[case]["dest"] / f"{d}.zarr")[1],
                        read_document_store(row["full"]["dest"] / f"{d}.zarr")[1],
                    )
                    assert all(np.array_equal(a[k][n], b[k][n]) for k in b for n in b[k]), (case, d)
                out[case].append(
                    {"seconds": row[case]["seconds"], "ratio": row[case]["seconds"] / row["full"]["seconds"]}
                )
            print(json.dumps({"label": label, "round": r, **{c: out[c][-1] for c in CASES}}), flush=True)
        return out

    results = {"quiet": rounds(args.rounds, "quiet")}
    if args.busy_rounds:
        with busy_process():
            results["busy"] = rounds(args.busy_rounds, "busy")
    shutil.rmtree(work, ignore_errors=True)
    print("\n| machine | rerun job | seconds (min, median) | ratio to full (min, median) |")
    print("|---|---|---|---|")
    for label, per_case in results.items():
        for case, rows in per_case.items():
            s = [r["seconds"] for r in rows]
            q = [r["ratio"] for r in rows]
            print(
                f"| {label} | {case} | {min(s):.1f}, {statistics.median(s):.1f} | "
                f"{min(q):.2f}, {statistics.median(q):.2f} |"
            )


if __name__ == "__main__":
    main()
