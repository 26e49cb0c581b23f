"""One trajectory job of this checkout against the same job at a baseline revision: seconds, peak memory and laws.

Each round runs, in a fresh ``python`` process each and in alternating order, one coupled job (what a trajectory rule
runs, without writing stores) over the first B documents of a stratum of config/replication.yaml: once with this
checkout's ``kvdiv`` and once with the baseline revision's, checked out into a temporary git worktree (removed
afterwards) and put first on ``PYTHONPATH``. Each process reports its wall seconds (prefill, coupled), its peak RSS,
and a digest of every array of every action's trajectories: equal digests say the two revisions computed the same
bits. Needs the resolved SmolLM2 (``snakemake --cores 1 results/models/smollm2/provenance.json``):
    python benchmarks/trajectory_job.py --baseline 916840e --rounds 2 --documents 16 --study retention50 \
        --stratum ruler_704
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import busy_process, job_arguments, job_table, require_smollm2

REPO = Path(__file__).resolve().parents[1]

#: One job in a fresh process; argv: study, stratum, first, documents, horizon, batch (documents generated together,
#: the job's in consecutive batches as kvdiv.trajectories.job.run_documents does). ``kvdiv`` is whichever PYTHONPATH
#: gives.
JOB = r"""
import hashlib, json, os, resource, sys, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch
import kvdiv
repo = os.environ["KVDIV_REPO"]
sys.path.insert(0, os.path.join(repo, "benchmarks"))
import yaml
from bench_common import coupled_generate, coupled_sessions, kvdiv_module, stratum_prompts
load_model = kvdiv_module("models.loading").load_model

study, stratum = sys.argv[1], sys.argv[2]
first, n, horizon, batch = (int(a) for a in sys.argv[3:7])
config = yaml.safe_load(open(os.path.join(repo, "config/replication.yaml")))
spec = {**config["models"]["smollm2"], "threads": 1, "device": "cpu", "dtype": "float32"}
loaded = load_model("smollm2", spec, os.path.join(repo, "results/models"))
ids, prompts = stratum_prompts(loaded, config, study, stratum, first + n, horizon)
ids, prompts = ids[first:], prompts[first:]
actions = {a: config["actions"][a] for a in config["studies"][study]["actions"]}
seeds = (config["seed"], config["studies"][study]["seed"])
digests, prefill, start = {}, 0.0, time.perf_counter()
for b in range(0, n, batch):
    begin = time.perf_counter()
    sessions = coupled_sessions(loaded, prompts[b : b + batch], ids[b : b + batch], actions, horizon, seeds=seeds)
    prefill += time.perf_counter() - begin
    results = coupled_generate(sessions, ids[b : b + batch], list(actions), horizon, seeds=seeds,
                               eos=loaded.eos_token_ids)
    for doc_id, per_doc in zip(ids[b : b + batch], results):
        digest = hashlib.sha256()
        for name in sorted(per_doc):
            for key in ("x", "y", "tv", "fixed_tv", "match", "eos_x", "eos_y"):
                digest.update(key.encode()); digest.update(getattr(per_doc[name], key).tobytes())
        digests[doc_id] = digest.hexdigest()
    del sessions, results
total = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
from bench_common import job_floor_seconds  # (this checkout's benchmarks: the machine's floor, measured here)
floor = job_floor_seconds(loaded, [len(p) for p in prompts], actions, horizon)
print(json.dumps({"total": total, "prefill": prefill, "coupled": total - prefill, "kvdiv": kvdiv.__file__,
                  "floor": floor,
                  "max_rss_gb": usage.ru_maxrss / 2**20, "sys_s": usage.ru_stime, "minflt": usage.ru_minflt,
                  "digests": digests}))
"""


def one_job(source: Path, study: str, stratum: str, first: int, n: int, horizon: int, batch: int) -> dict:
    """One job in a fresh process with the ``kvdiv`` of ``source``; adds ``process`` (its whole wall seconds)."""
    env = {**os.environ, "PYTHONPATH": str(source), "KVDIV_REPO": str(REPO)}
    cmd = [sys.executable, "-c", JOB, study, stratum, *(str(v) for v in (first, n, horizon, batch))]
    started = time.perf_counter()
    # run in the source's own root: `python -c` puts the working directory first on sys.path
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=source, env=env)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process"] = time.perf_counter() - started
    if not out["kvdiv"].startswith(str(source)):
        raise RuntimeError(f"the job imported {out['kvdiv']}, not the kvdiv of {source}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a git revision of this repository")
    job_arguments(parser)
    args = parser.parse_args()
    require_smollm2(REPO)
    with tempfile.TemporaryDirectory(prefix="kvdiv-baseline-") as tmp:
        worktree = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.baseline], cwd=REPO, check=True)
        try:
            sources = {"baseline": worktree, "this checkout": REPO}
            runs: dict[str, list[dict]] = {v: [] for v in sources}
            with busy_process(args.busy):
                for r in range(args.rounds):
                    for variant in list(sources) if r % 2 == 0 else list(sources)[::-1]:
                        job = one_job(
                            sources[variant], args.study, args.stratum, 0, args.documents, args.horizon, args.documents
                        )
                        runs[variant].append(job)
                        print(json.dumps({"round": r, "variant": variant, **runs[variant][-1]}), flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, check=True)
    label = "beside one busy process" if args.busy else "quiet"
    where = f"{args.study}/{args.stratum}"
    print(f"\n{args.documents} documents of {where}, H = {args.horizon}, {args.rounds} rounds, {label}")
    print(f"baseline {args.baseline} against this checkout")
    job_table(runs, "total", "kvdiv", ("this checkout", "baseline"))


if __name__ == "__main__":
    main()
