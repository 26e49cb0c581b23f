"""What a model's trajectory jobs will hold in memory and how ``documents_per_batch`` cuts them, before any job runs
(``kvdiv models plan``): per study and kind of job the workflow plans (its strata and documents:
:func:`kvdiv.config.plan.trajectory_batches`), the bytes a document's session holds while it generates and the extra
of a prefill (:mod:`kvdiv.kernel.memory_plan`, the job's own formulas) in the model's ``kv_layout`` and the other, and
the batches the job is cut into. An estimate: documents at their stratum's length (the whole prompt compressed; under
``compress: context`` the question, fed after, adds to each chain's tail), the free memory the job will find = the
memory given less the weights (counted from the shapes) and, on an accelerator, 1 GiB of context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kvdiv.config.plan import document_lengths, trajectory_batches
from kvdiv.kernel.memory_plan import DEFAULT_SHARE, CacheShape, batch_bytes, batch_sizes
from kvdiv.settings import AUTO, Generation, Runtime
from kvdiv.trajectories.base import chains_needed
from kvdiv.trajectories.batching import document_sizes, fixed_sizes

LAYOUTS = ("shared", "slots")
#: An accelerator's context and allocator reserve beside the weights (a bound).
ACCELERATOR_CONTEXT_BYTES = 2**30


@dataclass(frozen=True)
class PlanRow:
    """A kind of trajectory job of a study (``jobs`` alike): its strata, documents and chains per document, the most
    bytes a document holds while generating, by layout, the largest prefill's extra, and the batch sizes, by layout
    (``auto``: as the budget allows; else as configured); ``over``: layouts where a batch passes what it may use."""

    study: str
    strata: str
    jobs: int
    documents: int
    chains: int
    document_bytes: dict[str, int]
    prefill_bytes: int
    batches: dict[str, list[int]]
    over: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """A model's plan: its layout, the memory free for batches (and the budget, with ``auto``: whether the spec sets
    it), the weights counted and a row per kind of job."""

    model: str
    layout: str
    free_bytes: int
    budget_bytes: int | None
    budget_configured: bool
    weights_bytes: int
    documents_per_batch: int | str | None
    rows: list[PlanRow]
    cpu: bool = True
    packed: bool = False


def weights_bytes(shape: CacheShape, tied: bool, packed: bool) -> int:
    """The weights of a decoder of ``shape``: every layer's projections and MLP, the embeddings and (untied) the
    output projection; ``packed``: a CPU job's oneDNN copy of every Linear weight besides, the output projection's
    included (kvdiv.models.prepacked)."""
    q_o = 2 * shape.hidden * shape.heads * shape.head_dim
    k_v = 2 * shape.hidden * shape.kv_heads * shape.head_dim
    linear = shape.layers * (q_o + k_v + 3 * shape.hidden * shape.intermediate)
    embedding = shape.vocab * shape.hidden
    head = 0 if tied else shape.vocab * shape.hidden
    return shape.element_bytes * (linear + embedding + head + (linear + shape.vocab * shape.hidden if packed else 0))


def on_cpu(spec: Mapping[str, Any]) -> bool:
    return str(spec.get("device", "cpu")).split(":")[0] == "cpu"


def packs(spec: Mapping[str, Any]) -> bool:
    """Whether a job of this spec keeps packed copies of the Linear weights: on a CPU, float32, ``prepack`` on."""
    return on_cpu(spec) and bool(spec.get("prepack", True)) and spec.get("dtype", "float32") == "float32"


def free_bytes(spec: Mapping[str, Any], memory_bytes: int, weights: int) -> int:
    """What a job finds free once its model is loaded: ``memory_bytes`` less the weights (and an accelerator's
    context); ≤ 0 when the model does not fit."""
    return memory_bytes - weights - (0 if on_cpu(spec) else ACCELERATOR_CONTEXT_BYTES)


def budget_bytes(spec: Mapping[str, Any], free: int) -> tuple[int, bool]:
    """The bytes one ``auto`` batch may plan for (and whether the spec sets them): ``memory_budget_gb``, else the
    job's default share of ``free`` (:data:`kvdiv.kernel.memory_plan.DEFAULT_SHARE`)."""
    if spec.get("memory_budget_gb") is not None:
        return int(float(spec["memory_budget_gb"]) * 1e9), True
    return max(0, int(DEFAULT_SHARE["cpu" if on_cpu(spec) else "accelerator"] * free)), False


def plan(config: Mapping[str, Any], model: str, shape: CacheShape, memory_bytes: int, *, tied: bool = True) -> Plan:
    """The plan of ``model`` (a loaded ``config``'s model, press modules imported) of ``shape`` on a device of
    ``memory_bytes``."""
    spec = config["models"][model]
    runtime = Runtime.split(spec)[1]
    layout = spec.get("kv_layout", LAYOUTS[0])
    weights = weights_bytes(shape, tied, packed=packs(spec))
    free = free_bytes(spec, memory_bytes, weights)
    auto = runtime.documents_per_batch == AUTO
    budget, configured = budget_bytes(spec, free)
    limit = min(budget, free) if auto else free  # a configured budget past the memory does not make it fit
    rows: list[PlanRow] = []
    for study, study_spec in (config.get("studies") or {}).items():
        if model not in (study_spec.get("models") or list(config["models"])):
            continue
        g = Generation.from_study(config, study)
        actions = {name: config["actions"][name] for name in study_spec["actions"]}
        chains = chains_needed(len(actions), g.replicates, g.mode, g.effective_reference_chain)
        kinds: dict[tuple[str, tuple[int, ...]], int] = {}
        for name, ids in trajectory_batches(config, study, model):
            key = (name.rsplit("-", 2)[0], tuple(document_lengths(config, study, ids)))
            kinds[key] = kinds.get(key, 0) + 1
        for (strata, lengths), jobs in kinds.items():
            held, batches, over = {}, {}, []
            for lay in LAYOUTS:
                held[lay], peak = document_sizes(shape, lay, lengths, [None] * len(lengths), actions, g, packs(spec))
                if auto:
                    batches[lay] = batch_sizes(held[lay], peak, budget)
                else:
                    batches[lay] = fixed_sizes(len(lengths), runtime.documents_per_batch)
                if max(batch_bytes(held[lay], peak, batches[lay])) > limit:
                    over.append(lay)
            rows.append(
                PlanRow(
                    study,
                    strata,
                    jobs,
                    len(lengths),
                    chains,
                    {lay: int(max(held[lay])) for lay in LAYOUTS},
                    int(max(peak)),
                    batches,
                    tuple(over),
                )
            )
    auto_budget = budget if auto else None
    return Plan(
        model,
        layout,
        free,
        auto_budget,
        configured,
        weights,
        runtime.documents_per_batch,
        rows,
        on_cpu(spec),
        packs(spec),
    )


def _batches(sizes: list[int]) -> str:
    """Batch sizes as count × size: ``[16]`` "1 × 16", ``[9, 7]`` "1 × 9, 1 × 7", ``[5, 5, 5, 1]`` "3 × 5, 1 × 1"."""
    runs: list[tuple[int, int]] = []
    for s in sizes:
        if runs and runs[-1][0] == s:
            runs[-1] = (s, runs[-1][1] + 1)
        else:
            runs.append((s, 1))
    return ", ".join(f"{k} × {s}" for s, k in runs)


def plan_table(p: Plan) -> str:
    """The plan as a heading line and a Markdown table: the model's layout first, the other beside it."""
    gb = 1e9
    other = LAYOUTS[1] if p.layout == LAYOUTS[0] else LAYOUTS[0]
    packed = " (with their packed copies)" if p.packed else ""
    head = f"model {p.model}: kv_layout {p.layout}, weights ≈ {p.weights_bytes / gb:.2f} GB{packed}, "
    if p.free_bytes <= 0:
        head += "which do not fit in the memory given: no batch fits; "
    if p.budget_bytes is not None:
        leave = "the weights leave" if p.cpu else "the weights and 1 GiB of context leave"
        source = "memory_budget_gb" if p.budget_configured else f"the default share of what {leave}"
        head += f"documents_per_batch auto: {p.budget_bytes / gb:.2f} GB per batch ({source})"
    else:
        batching = p.documents_per_batch if p.documents_per_batch is not None else "none (a job is one batch)"
        head += f"documents_per_batch {batching}, {max(p.free_bytes, 0) / gb:.2f} GB free beside the weights"
    lines = [
        head,
        "",
        f"| study | job's strata | jobs | documents a job | chains a document | GB per document, largest "
        f"({p.layout}) | + prefill GB, largest | batches: count × size ({p.layout}) | GB per document, largest "
        f"({other}) | batches ({other}) |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in p.rows:
        mark = {lay: " (over)" if lay in r.over else "" for lay in LAYOUTS}
        lines.append(
            f"| {r.study} | {r.strata} | {r.jobs} | {r.documents} | {r.chains} | "
            f"{r.document_bytes[p.layout] / gb:.3f} | {r.prefill_bytes / gb:.3f} | "
            f"{_batches(r.batches[p.layout])}{mark[p.layout]} | {r.document_bytes[other] / gb:.3f} | "
            f"{_batches(r.batches[other])}{mark[other]} |"
        )
    if any(r.over for r in p.rows):
        lines += [
            "",
            "(over): a batch needs more than "
            + (
                "the budget or the memory free beside the weights (a document that does not fit alone still runs, "
                "in a batch of its own)"
                if p.budget_bytes is not None
                else "the memory free beside the weights"
            ),
        ]
    return "\n".join(lines)


__all__ = ["Plan", "PlanRow", "budget_bytes", "free_bytes", "packs", "plan", "plan_table", "weights_bytes"]
