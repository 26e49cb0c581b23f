"""Pieces the benchmark scripts beside this file share: the first documents of a stratum as prompt ids, one coupled
trajectory job timed (what a trajectory rule runs, without writing stores), and a busy competitor process.

Imported by the scripts as ``from bench_common import ...`` (Python puts a script's own folder on ``sys.path``).
Module level imports only the standard library, so scripts that merely start processes (workflow.py,
threads_under_load.py) do not pay torch's and kvpress's imports for :func:`busy_process`.
"""

from __future__ import annotations

import contextlib
import functools
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

#: The repository; its tests/ is on the path so that benchmarks share the tests' doubles (``support``: toy kernels,
#: synthetic cubes, checkout copies) instead of copies of them.
REPO = Path(__file__).resolve().parents[1]
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

#: The competitor of the "beside a busy process" measurements: one process spinning on one core.
BUSY = "while True: pass"


@contextlib.contextmanager
def busy_process(active: bool = True) -> Iterator[None]:
    """Run the block beside one busy process (``python -c "while True: pass"``); a no-op when not ``active``."""
    competitor = subprocess.Popen([sys.executable, "-c", BUSY]) if active else None
    try:
        yield
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()


def kvdiv_module(name: str):
    """``kvdiv.<name>`` of whichever kvdiv is first on the path: this layout's module (``models.loading``,
    ``kernel.session``, ...) or, for a baseline revision before the split of ``kvdiv.llm``, its ``llm.`` twin."""
    import importlib

    try:
        return importlib.import_module(f"kvdiv.{name}")
    except ModuleNotFoundError:
        return importlib.import_module("kvdiv.llm." + name.split(".", 1)[1])


def coupled_sessions(
    loaded, prompts: Sequence[Sequence[int]], ids: Sequence[str], actions: Mapping, horizon: int, *, seeds: tuple
) -> list:
    """Prefilled kernel sessions of ``prompts`` (documents ``ids``; ``seeds`` = (master, study)), built through the API
    of whichever kvdiv is first on the path (a :class:`~kvdiv.settings.Generation`, or the keywords of revisions
    before it), so that a job benchmark runs the same job at a baseline revision."""
    import inspect

    import torch

    KernelSession = kvdiv_module("kernel.session").KernelSession
    from kvdiv.trajectories.base import chains_needed

    chains = chains_needed(len(actions), 1, "complete")
    if "generation" in inspect.signature(KernelSession).parameters:
        g = _generation(horizon, seeds)
        return [
            KernelSession(loaded, torch.tensor(p), actions, g, document_id=i, max_chains=chains)
            for p, i in zip(prompts, ids)
        ]
    return [
        KernelSession(loaded, torch.tensor(p), actions, horizon=horizon, max_chains=chains, seed_parts=(*seeds, i))
        for p, i in zip(prompts, ids)
    ]


def coupled_generate(
    sessions: Sequence, ids: Sequence[str], actions: Sequence[str], horizon: int, *, seeds: tuple, eos
):
    """:func:`~kvdiv.trajectories.generate.generate_documents` (complete mode, R = 1, ``tv_atol`` 1e-6) through the
    API of whichever kvdiv is first on the path (see :func:`coupled_sessions`)."""
    import inspect

    from kvdiv.trajectories.generate import generate_documents

    if "document_ids" in inspect.signature(generate_documents).parameters:
        g = _generation(horizon, seeds)
        return generate_documents(sessions, list(ids), list(actions), g, eos_token_ids=eos, progress=False)
    parts = [(*seeds, i) for i in ids]
    return generate_documents(
        sessions, parts, list(actions), horizon=horizon, replicates=1, eos_token_ids=eos, tv_atol=1e-6, progress=False
    )


def _generation(horizon: int, seeds: tuple):
    from kvdiv.settings import generation

    return generation(master_seed=seeds[0], study_seed=seeds[1], horizon=horizon, replicates=1, tv_atol=1e-6)


def smollm2(models_dir: str | Path, config_path: str | Path = "config/config.yaml"):
    """(config, SmolLM2-135M-Instruct loaded as the workflow's jobs run it: float32, CPU, 1 thread) of the default
    config, from the resolved model under ``models_dir``."""
    import yaml

    load_model = kvdiv_module("models.loading").load_model

    config = yaml.safe_load(Path(config_path).read_text())
    spec = {**config["models"]["smollm2"], "threads": 1, "device": "cpu", "dtype": "float32"}
    return config, load_model("smollm2", spec, models_dir)


def stratum_documents(
    loaded, config: Mapping, study: str, stratum: str, n: int, horizon: int, tasks: Sequence[str] | None = None
) -> list[dict]:
    """The documents-JSONL records of the first ``n`` documents of ``stratum`` of ``study`` in ``config``, generated
    in-process with kvdiv.documents as the workflow's document rule does (sized for ``loaded``'s rendering; ``tasks``:
    the stratum's task list, None for its family's default cycle)."""
    from kvdiv.documents import generate_stratum
    from kvdiv.models.tokenization import apply_chat_template

    spec = config["studies"][study]
    chat = (lambda text: apply_chat_template(loaded.tokenizer, text)) if loaded.chat_template else None
    docs = generate_stratum(
        study=study,
        stratum=stratum,
        n_documents=n,
        master_seed=config["seed"],
        study_seed=spec["seed"],
        tokenizer=loaded.tokenizer,
        tokenizer_name=loaded.name,
        chat=chat,
        tasks=tasks,
        max_context=loaded.max_context,
        horizon=horizon,
    )
    return [d.to_record() for d in docs]


def stratum_prompts(
    loaded, config: Mapping, study: str, stratum: str, n: int, horizon: int
) -> tuple[list[str], list[list[int]]]:
    """The ids and prompt token ids (the model's own rendering) of :func:`stratum_documents`."""
    from kvdiv.documents.render import prompt_token_ids

    records = stratum_documents(loaded, config, study, stratum, n, horizon)
    return [r["id"] for r in records], [prompt_token_ids(r, loaded.tokenizer, loaded.chat_template) for r in records]


def coupled_job(
    loaded, prompts: Sequence[Sequence[int]], ids: Sequence[str], seeds: tuple, actions: Mapping, horizon: int
) -> dict[str, float]:
    """Seconds of one coupled job over ``prompts`` (documents ``ids``; complete mode, R = 1): every document
    prefilled, then the chains of all of them in one forward per step (:func:`generate_documents`). ``seeds`` =
    (master, study) seed each document's sampling streams and any ProbabilisticPress draw. Returns ``prefill``,
    ``coupled`` and ``total`` seconds, and the machine's ``floor`` for the job (:func:`job_floor_seconds`, not counted
    in them)."""
    floor = job_floor_seconds(loaded, [len(p) for p in prompts], actions, horizon)
    start = time.perf_counter()
    sessions = coupled_sessions(loaded, prompts, ids, actions, horizon, seeds=seeds)
    prefill = time.perf_counter() - start
    coupled_generate(sessions, ids, list(actions), horizon, seeds=seeds, eos=loaded.eos_token_ids)
    total = time.perf_counter() - start
    return {"prefill": prefill, "coupled": total - prefill, "total": total, "floor": floor}


def job_floor_seconds(loaded, lengths: Sequence[int], actions: Mapping, horizon: int) -> float:
    """This machine's floor (benchmarks/floor.py, measured once per process and model shape) for a coupled job of
    prompts of ``lengths`` tokens, ``actions`` (complete mode, R = 1, a shared reference chain) and H = ``horizon``:
    :func:`floor.actions_job_floor`, as run_floor.py and long_prompts.py take it."""
    from floor import ModelShape, actions_job_floor

    shape = ModelShape.from_config(loaded.model.config, next(loaded.model.parameters()).element_size())
    return actions_job_floor(_machine_floor(shape), shape, lengths, list(actions.values()), horizon)["total"]


@functools.cache
def _machine_floor(shape):
    from floor import machine_floor

    return machine_floor(shape)


def job_table(runs: Mapping[str, Sequence[Mapping]], time_key: str, label: str, ratio: tuple[str, str]) -> None:
    """Print alternating job runs (each a dict with ``time_key`` seconds, ``sys_s``, ``minflt``, ``max_rss_gb``,
    per-document ``digests`` and, when every run has one, its ``floor`` seconds) as a table: per variant min and
    median seconds (and seconds / floor), median system seconds and page faults, max peak RSS; then the per-round
    ratio ``ratio[0] / ratio[1]`` and whether every run computed the same laws."""
    import json
    import statistics

    floors = all("floor" in run for rs in runs.values() for run in rs)  # (benchmarks/floor.py, per process)
    extra = " | s / floor (median)" if floors else ""
    print(
        f"| {label} | {time_key} s (min, median){extra} | system s (median) | page faults (median) | "
        "peak RSS GB (max) |"
    )
    print("|---|---:|---:|---:|---:|" + ("---:|" if floors else ""))
    for variant, rs in runs.items():
        t = [run[time_key] for run in rs]
        sys_s = statistics.median(run["sys_s"] for run in rs)
        faults = statistics.median(run["minflt"] for run in rs) / 1e6
        rss = max(run["max_rss_gb"] for run in rs)
        ratio = f" | {statistics.median(run[time_key] / run['floor'] for run in rs):.2f}" if floors else ""
        print(
            f"| {variant} | {min(t):.1f}, {statistics.median(t):.1f}{ratio} | {sys_s:.1f} | {faults:.2f} M | "
            f"{rss:.2f} |"
        )
    a, b = ratio
    print_ratios([x[time_key] for x in runs[a]], [y[time_key] for y in runs[b]], ratio)
    digests = {json.dumps(run["digests"], sort_keys=True) for rs in runs.values() for run in rs}
    print(f"the same laws in every run: {len(digests) == 1}")


def seconds_table(
    seconds: Mapping[str, Sequence[float]], label: str, ratio: tuple[str, str], unit: str = "s", per: int = 0
) -> None:
    """Print alternating timings (seconds per variant, one per round) as a table of min and median in ``unit``
    ("s" or "ms"), with the median per item when ``per`` items were timed; then the per-round ratio
    ``ratio[0] / ratio[1]``."""
    import statistics

    scale, digits = (1e3, 1) if unit == "ms" else (1.0, 2)
    extra = " | per document (median)" if per else ""
    print(f"| {label} | {unit} (min, median){extra} |")
    print("|---|---:|" + ("---:|" if per else ""))
    for variant, t in seconds.items():
        cells = f"{scale * min(t):.{digits}f}, {scale * statistics.median(t):.{digits}f}"
        if per:
            cells += f" | {statistics.median(t) / per:.2f}"
        print(f"| {variant} | {cells} |")
    print_ratios(seconds[ratio[0]], seconds[ratio[1]], ratio)


def print_ratios(a: Sequence[float], b: Sequence[float], names: tuple[str, str]) -> None:
    """Print the min and median of the per-round ratios ``a[i] / b[i]``, named ``names[0] / names[1]``."""
    import statistics

    ratios = [x / y for x, y in zip(a, b)]
    print(f"ratio {names[0]} / {names[1]} per round: min {min(ratios):.3f}, median {statistics.median(ratios):.3f}")


def round_arguments(parser, rounds: int = 2) -> None:
    """The options every alternating-rounds benchmark of SmolLM2 takes: --rounds, --horizon, --study (of
    config/replication.yaml) and --busy."""
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--study", default="retention50")
    parser.add_argument("--busy", action="store_true", help="beside one busy process")


def job_arguments(parser, documents: int = 16, rounds: int = 2, stratum: str = "ruler_704") -> None:
    """The options of the job benchmarks: :func:`round_arguments`, --documents and --stratum."""
    round_arguments(parser, rounds)
    parser.add_argument("--documents", type=int, default=documents)
    parser.add_argument("--stratum", default=stratum)


def json_process(code: str, *argv: str, label: str) -> dict:
    """Run ``code`` in a fresh Python process (``python -c code *argv``, this repository on its path and as
    ``KVDIV_REPO``) and return the JSON object on the last line it prints; its stderr in the error when it fails."""
    import json
    import os

    env = {**os.environ, "KVDIV_REPO": str(REPO), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(
            f"the {label} process ended with code {proc.returncode} (-9: killed, e.g. out of memory):\n"
            f"{proc.stderr[-3000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def require_smollm2(repo: Path) -> None:
    """Exit with the command to run when SmolLM2 is not resolved under ``repo``."""
    if not (repo / "results/models/smollm2/provenance.json").is_file():
        raise SystemExit("resolve SmolLM2 first: snakemake --cores 1 results/models/smollm2/provenance.json")
