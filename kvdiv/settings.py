"""Typed, frozen settings the library takes from a checked config: :class:`Generation` (what a study's trajectories
compute), :class:`Runtime` (how a job runs: never part of what is computed) and :class:`DocumentRequest` (which
documents a job writes). Each one's constructor is the only place its values are checked; the defaults live in the
config schema alone (package data; :func:`generation` fills them for library callers). Generation and DocumentRequest
are rule params: named tuples, because Snakemake compares only builtin values' reprs between runs (any other object is
"unrepresentable" and its change would rerun nothing). Re-exported by kvdiv.config."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

#: Trajectory modes: the complete coupling, or the stop-when-reached branch scan (docs/estimators.md).
MODES = ("complete", "swrb")
#: ``reference_chain``: one full-cache chain per (document, replicate) for every action, or one per action.
REFERENCE_CHAINS = ("shared", "per_action")
#: ``compress``: what the presses compress once after prefill (the whole prompt, or all but the question).
COMPRESS = ("prompt", "context")
#: The largest ``tv_atol``: a δ below it is float round-off (float32 laws summed over a vocabulary), never a signal.
MAX_TV_ATOL = 1e-3
#: The keys of a study's config that :class:`Generation` carries (besides the two seeds).
STUDY_KEYS = (
    "horizon",
    "replicates",
    "temperature",
    "mode",
    "evict_first_step",
    "tv_atol",
    "reference_chain",
    "compress",
)


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def _integer(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _seed(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")


class _GenerationFields(NamedTuple):
    master_seed: int
    study_seed: int
    horizon: int
    replicates: int
    temperature: float
    mode: str
    evict_first_step: bool
    tv_atol: float
    reference_chain: str
    compress: str


class _Checked:
    """Validation on construction for the named-tuple settings (``_check`` raises ValueError naming the value), and
    :meth:`replace` (also ``_replace``) that checks again."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any):
        self = super().__new__(cls, *args, **kwargs)  # type: ignore[misc]
        self._check()
        return self

    def _check(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def replace(self, **changes: Any):
        """A copy with ``changes`` (checked like a new one)."""
        return type(self)(**(self._asdict() | changes))  # type: ignore[attr-defined]

    _replace = replace


class Generation(_Checked, _GenerationFields):
    """A study's generation settings: seeds, H, R, the sampling temperature, the mode, whether Q is evaluated at
    step 1, the TV round-off tolerance, the reference chain and what is compressed. Built once (from the config:
    :meth:`from_study`; from keywords with the schema's defaults: :func:`generation`) and passed whole, as itself, from
    the rule to the kernel session."""

    __slots__ = ()

    def _check(self) -> None:
        _seed("master_seed", self.master_seed)
        _seed("study_seed", self.study_seed)
        _integer("horizon", self.horizon, 1)
        _integer("replicates", self.replicates, 1)
        if (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, (int, float))
            or not math.isfinite(self.temperature)
            or self.temperature <= 0
        ):
            raise ValueError(f"temperature must be a finite number > 0, got {self.temperature!r}")
        _choice("mode", self.mode, MODES)
        if not isinstance(self.evict_first_step, bool):
            raise ValueError(f"evict_first_step must be true or false, got {self.evict_first_step!r}")
        if (
            isinstance(self.tv_atol, bool)
            or not isinstance(self.tv_atol, (int, float))
            or not 0 <= self.tv_atol <= MAX_TV_ATOL
        ):
            raise ValueError(f"tv_atol must be a number in [0, {MAX_TV_ATOL}] (float round-off), got {self.tv_atol!r}")
        _choice("reference_chain", self.reference_chain, REFERENCE_CHAINS)
        _choice("compress", self.compress, COMPRESS)

    @property
    def shared_reference(self) -> bool:
        """Whether one reference chain per (document, replicate) serves every action: ``reference_chain: shared``
        in complete mode (swrb has no chain of P alone to share: always per action)."""
        return self.effective_reference_chain == "shared"

    @property
    def effective_reference_chain(self) -> str:
        """The reference chain the trajectories use (and their stores record): per_action in swrb mode."""
        return self.reference_chain if self.mode == "complete" else "per_action"

    def seed_parts(self, document_id: str) -> tuple[int, int, str]:
        """(master seed, study seed, document id): the first parts of every sampling stream and press draw of one
        document (:func:`kvdiv.seeds.derive_seed`)."""
        return (self.master_seed, self.study_seed, str(document_id))

    def record(self) -> dict[str, Any]:
        """The settings as a store records them (and the trajectory cache's key hashes them): every field, the
        reference chain as the trajectories used it (``per_action`` in swrb mode)."""
        return self._asdict() | {"reference_chain": self.effective_reference_chain}

    @classmethod
    def from_study(cls, config: Mapping[str, Any], study: str) -> "Generation":
        """The settings of ``study`` in a schema-validated ``config`` (defaults filled)."""
        spec = config["studies"][study]
        return cls(master_seed=config["seed"], study_seed=spec["seed"], **{key: spec[key] for key in STUDY_KEYS})


#: ``documents_per_batch: auto``: batches sized by a memory budget (:class:`AutoBatch`).
AUTO = "auto"


@dataclass(frozen=True)
class AutoBatch:
    """``documents_per_batch: auto``: a job's documents generated in consecutive batches that fit ``budget_bytes``
    (None: a share of the memory free when the job starts, :mod:`kvdiv.kernel.memory_plan`)."""

    budget_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.budget_bytes is not None:
            _integer("budget_bytes", self.budget_bytes, 1)


#: The smallest ``memory_budget_gb`` (1 MB): below it no batch is planned, and under a byte it is no budget at all.
MIN_BUDGET_GB = 0.001


@dataclass(frozen=True)
class Runtime:
    """How a model's jobs run: CPU threads (None: torch's own choice), documents per job, strata per job, documents
    generated together (None: all of a job's; ``auto``: as many as fit the memory budget) and that budget (GB; None:
    a share of the free memory). Changing it reruns nothing (it is not part of a model's identity, nor of its rules'
    params)."""

    threads: int | None
    documents_per_job: int
    strata_per_job: int = 1
    documents_per_batch: int | str | None = None
    memory_budget_gb: float | None = None

    def __post_init__(self) -> None:
        if self.threads is not None:
            _integer("threads", self.threads, 1)
        _integer("documents_per_job", self.documents_per_job, 1)
        _integer("strata_per_job", self.strata_per_job, 1)
        if self.documents_per_batch is not None and self.documents_per_batch != AUTO:
            if isinstance(self.documents_per_batch, str):
                raise ValueError(
                    f"documents_per_batch must be an integer >= 1 or {AUTO!r}, got {self.documents_per_batch!r}"
                )
            _integer("documents_per_batch", self.documents_per_batch, 1)
        budget = self.memory_budget_gb
        if budget is not None and (
            isinstance(budget, bool)
            or not isinstance(budget, (int, float))
            or not math.isfinite(budget)
            or budget < MIN_BUDGET_GB
        ):
            raise ValueError(f"memory_budget_gb must be a number >= {MIN_BUDGET_GB} (1 MB), got {budget!r}")
        if budget is not None and self.documents_per_batch != AUTO:
            raise ValueError(f"memory_budget_gb sizes documents_per_batch: {AUTO}, not {self.documents_per_batch!r}")

    #: The keys of a model's config spec that are runtime, not model.
    KEYS = ("threads", "documents_per_job", "strata_per_job", "documents_per_batch", "memory_budget_gb")

    @property
    def batching(self) -> int | AutoBatch | None:
        """What :func:`kvdiv.trajectories.job.run_documents` takes as ``documents_per_batch``."""
        if self.documents_per_batch != AUTO:
            return self.documents_per_batch
        budget = None if self.memory_budget_gb is None else int(self.memory_budget_gb * 1e9)
        return AutoBatch(budget)

    @classmethod
    def model_part(cls, spec: object) -> dict[str, Any]:
        """A model spec (or a provenance's recorded one) without its scheduling keys: what the model is; {} if not
        a mapping."""
        return {key: value for key, value in spec.items() if key not in cls.KEYS} if isinstance(spec, Mapping) else {}

    @classmethod
    def split(cls, spec: Mapping[str, Any]) -> tuple[dict[str, Any], "Runtime"]:
        """A model spec as (what the model is, how its jobs run)."""
        model = cls.model_part(spec)
        return model, cls(
            threads=spec.get("threads"),
            documents_per_job=spec["documents_per_job"],
            strata_per_job=spec.get("strata_per_job", 1),
            documents_per_batch=spec.get("documents_per_batch"),
            memory_budget_gb=spec.get("memory_budget_gb"),
        )


class _DocumentRequestFields(NamedTuple):
    study: str
    stratum: str
    first: int
    count: int
    master_seed: int
    study_seed: int
    model: str
    model_spec: Mapping[str, Any]
    source: Mapping[str, Any]
    horizon: int
    tasks: tuple[str, ...] | None = None


class DocumentRequest(_Checked, _DocumentRequestFields):
    """Documents ``first .. first + count - 1`` of one stratum of a study: where they come from (``source``, the
    study's ``documents`` section; ``tasks`` of the stratum), the seeds, and the reference tokenizer's model, sized
    to leave ``horizon`` tokens of its context free."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any):
        fields = _DocumentRequestFields(*args, **kwargs)._asdict()
        fields["tasks"] = tuple(fields["tasks"]) or None if fields["tasks"] is not None else None
        return super().__new__(cls, **fields)

    def _check(self) -> None:
        _integer("first", self.first, 0)
        _integer("count", self.count, 1)
        _seed("master_seed", self.master_seed)
        _seed("study_seed", self.study_seed)
        _integer("horizon", self.horizon, 0)


#: The config schema (JSON Schema in YAML, with defaults): package data, so the installed ``kvdiv`` validates as the
#: workflow does.
SCHEMA = Path(__file__).resolve().parent / "data" / "schema.yaml"


@functools.cache
def schema() -> dict:
    """The config schema (:data:`SCHEMA`) as a mapping (read once)."""
    return yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))


def generation(**given: Any) -> Generation:
    """A :class:`Generation` of ``given`` settings, the rest the schema's study defaults (the seeds: the master
    seed's default and study seed 0): how library callers (:func:`kvdiv.compare`, tests) build one."""
    properties = schema()["properties"]
    study = properties["studies"]["additionalProperties"]["properties"]
    defaults = {key: study[key]["default"] for key in STUDY_KEYS}
    defaults |= {"master_seed": properties["seed"]["default"], "study_seed": 0}
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(f"unknown generation setting(s) {', '.join(unknown)}; known: {', '.join(sorted(defaults))}")
    return Generation(**(defaults | given))
