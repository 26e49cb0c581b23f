"""What a model's trajectory jobs will hold in memory and how ``documents_per_batch`` cuts them, before any job runs
(``kvdiv models plan``): per study and stratum, the bytes a document's session holds while it generates and the extra
of a prefill (:mod:`kvdiv.kernel.memory_plan`, the formulas the job itself uses), in the model's ``kv_layout`` and in
the other layout, and the batches a job of ``documents_per_job`` documents is cut into. An estimate: documents are
taken at their stratum's length, and the free memory the job will find is the given memory less the weights (counted
from the shapes; a CPU job's packed copies of the Linear weights too) and, on an accelerator, 1 GiB of context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kvdiv.kernel.memory_plan import DEFAULT_SHARE, CacheShape, batch_sizes, document_bytes, prefill_bytes
from kvdiv.settings import AUTO, Generation, Runtime
from kvdiv.trajectories.base import chains_needed

LAYOUTS = ("shared", "slots")
#: An accelerator's context and allocator reserve beside the weights (a bound).
ACCELERATOR_CONTEXT_BYTES = 2**30


@dataclass(frozen=True)
class PlanRow:
    """One study's stratum on the model: its chains per document, the bytes per document while generating and the
    extra of a prefill, by layout, and the batch sizes of one job of ``documents_per_job`` documents, by layout
    (``auto`` as the budget allows, else as configured)."""

    study: str
    stratum: str
    prompt: int
    chains: int
    document_bytes: dict[str, int]
    prefill_bytes: int
    batches: dict[str, list[int]]


@dataclass(frozen=True)
class Plan:
    """A model's plan: its layout, the budget a batch may use (and whether the spec set it), the weights counted, and
    a row per study and stratum."""

    model: str
    layout: str
    budget_bytes: int
    budget_configured: bool
    weights_bytes: int
    documents_per_job: int
    documents_per_batch: int | str | None
    rows: list[PlanRow]


def weights_bytes(shape: CacheShape, tied: bool, packed: bool) -> int:
    """The weights of a decoder of ``shape``: every layer's projections and MLP, the embeddings and (untied) the
    output projection; ``packed``: a CPU job's oneDNN copy of every Linear weight besides (kvdiv.models.prepacked)."""
    q_o = 2 * shape.hidden * shape.heads * shape.head_dim
    k_v = 2 * shape.hidden * shape.kv_heads * shape.head_dim
    linear = shape.layers * (q_o + k_v + 3 * shape.hidden * shape.intermediate)
    embedding = shape.vocab * shape.hidden
    head = 0 if tied else shape.vocab * shape.hidden
    return shape.element_bytes * (linear + embedding + head + (linear + shape.vocab * shape.hidden if packed else 0))


def budget_bytes(spec: Mapping[str, Any], memory_bytes: int, weights: int) -> tuple[int, bool]:
    """The bytes one batch may plan for (and whether the spec sets them): ``memory_budget_gb``, else the job's default
    share of what the weights (and an accelerator's context) leave of ``memory_bytes``."""
    if spec.get("memory_budget_gb") is not None:
        return int(float(spec["memory_budget_gb"]) * 1e9), True
    cpu = str(spec.get("device", "cpu")).split(":")[0] == "cpu"
    free = memory_bytes - weights - (0 if cpu else ACCELERATOR_CONTEXT_BYTES)
    return max(0, int(DEFAULT_SHARE["cpu" if cpu else "accelerator"] * free)), False


def plan(config: Mapping[str, Any], model: str, shape: CacheShape, memory_bytes: int, *, tied: bool = True) -> Plan:
    """The plan of ``model`` (a schema-validated ``config``'s model) of ``shape`` on a device of ``memory_bytes``."""
    spec = config["models"][model]
    runtime = Runtime.split(spec)[1]
    layout = spec.get("kv_layout", LAYOUTS[0])
    cpu = str(spec.get("device", "cpu")).split(":")[0] == "cpu"
    weights = weights_bytes(shape, tied, packed=cpu and spec.get("prepack", True))
    budget, configured = budget_bytes(spec, memory_bytes, weights)
    rows = []
    for study, study_spec in (config.get("studies") or {}).items():
        if model not in (study_spec.get("models") or list(config["models"])):
            continue
        g = Generation.from_study(config, study)
        actions = {name: config["actions"][name] for name in study_spec["actions"]}
        chains = chains_needed(len(actions), g.replicates, g.mode, g.effective_reference_chain)
        for stratum in study_spec.get("strata") or []:
            n = int(stratum["length"])
            compressed = n - int(g.evict_first_step)
            held = {lay: int(document_bytes(shape, n, compressed, actions, chains, g.horizon, lay)) for lay in LAYOUTS}
            peak = int(prefill_bytes(shape, compressed, actions))
            job = runtime.documents_per_job
            batches = {}
            for lay in LAYOUTS:
                if runtime.documents_per_batch == AUTO:
                    batches[lay] = batch_sizes([held[lay]] * job, [peak] * job, budget)
                else:
                    size = runtime.documents_per_batch or job
                    batches[lay] = [min(size, job - i) for i in range(0, job, size)]
            rows.append(PlanRow(study, f"{stratum['family']}_{n}", n, chains, held, peak, batches))
    return Plan(
        model, layout, budget, configured, weights, runtime.documents_per_job, runtime.documents_per_batch, rows
    )


def plan_table(p: Plan) -> str:
    """The plan as a Markdown table with a heading line: the model's layout first, the other beside it."""
    gb = 1e9
    other = LAYOUTS[1] if p.layout == LAYOUTS[0] else LAYOUTS[0]
    source = "memory_budget_gb" if p.budget_configured else "default share of the memory the weights leave"
    batching = p.documents_per_batch if p.documents_per_batch is not None else "one batch"
    lines = [
        f"model {p.model}: kv_layout {p.layout}, weights ≈ {p.weights_bytes / gb:.2f} GB, budget per batch "
        f"{p.budget_bytes / gb:.2f} GB ({source}); jobs of {p.documents_per_job} documents, documents_per_batch "
        f"{batching}",
        "",
        f"| study | stratum | chains | GB per document ({p.layout}) | + prefill GB | a job's batches ({p.layout}) | "
        f"GB per document ({other}) | a job's batches ({other}) |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    for r in p.rows:
        over = " (over budget)" if r.document_bytes[p.layout] + r.prefill_bytes > p.budget_bytes else ""
        lines.append(
            f"| {r.study} | {r.stratum} | {r.chains} | {r.document_bytes[p.layout] / gb:.3f}{over} | "
            f"{r.prefill_bytes / gb:.3f} | {', '.join(map(str, r.batches[p.layout]))} | "
            f"{r.document_bytes[other] / gb:.3f} | {', '.join(map(str, r.batches[other]))} |"
        )
    return "\n".join(lines)


__all__ = ["Plan", "PlanRow", "budget_bytes", "plan", "plan_table", "weights_bytes"]
