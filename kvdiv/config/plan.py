"""How a checked config becomes jobs: study strata, document blocks, trajectory batches, their rule names and
priorities (pure functions of the config; the workflow's lookups, :class:`kvdiv.config.lookups.Lookups`, call them)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from kvdiv import layout
from kvdiv.settings import Runtime


def _studies(config: Mapping) -> Mapping:
    return config.get("studies") or {}


def study_models(config: Mapping, study: str) -> list[str]:
    """The models a study runs (its ``models``, default all)."""
    return list(config["studies"][study].get("models") or config["models"])


def study_strata(config: Mapping, study: str) -> list[str]:
    """A study's stratum names ``{family}_{length}``, in config order."""
    return [layout.stratum_name(s["family"], s["length"]) for s in config["studies"][study]["strata"]]


def document_blocks(config: Mapping, study: str, size: int) -> list[tuple[str, int, int, list[str]]]:
    """[(stratum, first, last, [document ids])] of a study: per stratum, documents in blocks of ``size`` by index
    (block k holds i = k .. k + size − 1, fewer in the last, named after the full range), so adding a document changes
    only its own block. One job each: the document blocks (the reference tokenizer model's size) and the trajectory
    batches (the model's)."""
    n = config["studies"][study]["documents_per_stratum"]
    return [
        (stratum, k, k + size - 1, [layout.document_id(study, stratum, i) for i in range(k, min(k + size, n))])
        for stratum in study_strata(config, study)
        for k in range(0, n, size)
    ]


def trajectory_batches(config: Mapping, study: str, model: str) -> list[tuple[str, list[str]]]:
    """[(batch name, [document ids])] of a (study, model): the study's strata in config order, in groups of the
    model's ``strata_per_job``; per group, the same index block (:func:`document_blocks` of the model's
    ``documents_per_job``) of each of its strata. Named ``{stratum}-{first:04d}-{last:04d}``, strata joined by ``+``
    (``ruler_576+ruler_704-0000-0003``; :func:`strata_group_name`). Adding documents to the strata adds blocks and
    changes none."""
    runtime = Runtime.split(config["models"][model])[1]
    blocks = document_blocks(config, study, runtime.documents_per_job)
    block = {(stratum, first): (last, ids) for stratum, first, last, ids in blocks}
    starts = sorted({first for _, first, _, _ in blocks})  # every stratum of a study has the same blocks
    strata, per_job = study_strata(config, study), runtime.strata_per_job
    batches = []
    for group in (strata[k : k + per_job] for k in range(0, len(strata), per_job)):
        for first in starts:
            last = block[(group[0], first)][0]
            ids = [doc for stratum in group for doc in block[(stratum, first)][1]]
            batches.append((f"{strata_group_name(group)}-{first:04d}-{last:04d}", ids))
    return batches


#: The longest ``+``-joined strata name of a batch; longer groups are named by their first stratum and size.
MAX_GROUP_NAME = 120


def strata_group_name(group: list[str]) -> str:
    """A batch's strata as a path component: ``ruler_576+ruler_704``, or ``ruler_576+11-more`` where the joined names
    would exceed :data:`MAX_GROUP_NAME` characters (a file name holds 255 bytes; groups are consecutive in config
    order, so the first stratum and the size name one)."""
    joined = "+".join(group)
    return joined if len(joined) <= MAX_GROUP_NAME else f"{group[0]}+{len(group) - 1}-more"


def trajectory_batch_priority(config: Mapping, study: str, doc_ids: list[str]) -> int:
    """The scheduling priority of one trajectory batch: its estimated cost, the sum over its documents of
    (stratum length + horizon) × (actions + 1), in thousands of token-chains, so that Snakemake starts the longest
    batches first and the run does not end on one long job (longest-processing-time-first). Every other job
    outranks every batch (:data:`SHORT_JOB_PRIORITY`)."""
    spec = config["studies"][study]
    tokens = sum(n + spec["horizon"] for n in document_lengths(config, study, doc_ids))
    return max(1, round(tokens * (len(spec["actions"]) + 1) / 1000))


def document_lengths(config: Mapping, study: str, doc_ids: list[str]) -> list[int]:
    """The length of each document's stratum (a document id begins with its study and stratum,
    :func:`kvdiv.layout.document_id`; a stratum name holds no ``-``, so the prefix is unambiguous)."""
    spec = config["studies"][study]
    lengths = {layout.stratum_name(s["family"], s["length"]): s["length"] for s in spec["strata"]}
    return [lengths[next(name for name in lengths if doc.startswith(f"{study}-{name}-"))] for doc in doc_ids]


#: The priority of every job but the trajectory batches: document blocks (every batch waits on one) and everything
#: after the batches (a study's cube, metrics, analyses, figures and galleries run as soon as its last batch ends,
#: beside the other study's batches, instead of in the run's tail), all short.
SHORT_JOB_PRIORITY = 1_000_000_000


def trajectory_rule_name(study: str, model: str, batch: str) -> str:
    """The rule name of one trajectory batch: ``trajectories_`` + study, model and batch, other characters than
    ``[A-Za-z0-9_]`` as ``_``."""
    return re.sub(r"[^A-Za-z0-9_]", "_", f"trajectories_{study}_{model}_{batch}")
