"""Where everything is and what it is called: result paths, stratum names and document ids, written once.

rules/common.smk, the rule files, the documents, the report, the CLI and the tests build every path and name
from here. Arguments may be Snakemake wildcard patterns (``layout.cube("{study}", "{model}")`` is the cube rule's
output), so this module checks nothing; :mod:`kvdiv.names` says which names are allowed. A stratum is
``{family}_{length}`` (``ruler_1024``); document ``i`` of a stratum of a study is ``{study}-{stratum}-{i:04d}``.
The tree of paths: docs/internals.md#paths.
"""

from __future__ import annotations

import re

RESULTS = "results"
LOGS = "logs"
#: Where resolved models live (``results/models/{model}/``).
MODELS_DIR = f"{RESULTS}/models"
#: A model directory is complete when this file, written last, exists.
PROVENANCE = "provenance.json"
#: The metric tables of one (study, model).
METRIC_TABLES = ("replicates", "profiles_aligned", "profiles_clock")
ANALYSIS_DIR = f"{RESULTS}/analysis"
FIGURES_DIR = f"{RESULTS}/figures"
TABLES_DIR = f"{RESULTS}/tables"
REPORT = f"{RESULTS}/report.md"
FINITE_DIR = f"{RESULTS}/finite_state"
BENCHMARKS_DIR = f"{RESULTS}/benchmarks"
#: Entries of ``results/`` that are not studies (a study of that name would write into them; kvdiv.names reserves them).
LEADERBOARD_DIR = f"{RESULTS}/leaderboard"
RESULTS_ENTRIES = ("models", "finite_state", "figures", "tables", "analysis", "benchmarks", "leaderboard", "report.md", "report.html",
                   "README.md")

#: A task family, and a stratum name (Snakemake wildcard constraint): family, ``_``, target length.
FAMILY_REGEX = r"[A-Za-z0-9]+"
STRATUM_REGEX = rf"{FAMILY_REGEX}_[0-9]+"
_STRATUM = re.compile(rf"^({FAMILY_REGEX})_([0-9]+)$")
_DOCUMENT_INDEX = re.compile(r"-([0-9]{4,})$")


def stratum_name(family: str, length: int | str) -> str:
    """``{family}_{length}``, e.g. ``ruler_1024`` (``length`` may be a wildcard pattern)."""
    return f"{family}_{length if isinstance(length, str) else int(length)}"


def parse_stratum(name: str) -> tuple[str, int]:
    """``"ruler_1024"`` → ``("ruler", 1024)``."""
    m = _STRATUM.match(name)
    if not m:
        raise ValueError(f"stratum name {name!r} is not of the form '{{family}}_{{length}}', e.g. 'ruler_1024'")
    return m.group(1), int(m.group(2))


def document_id(study: str, stratum: str, index: int) -> str:
    """The id of document ``index`` of a stratum of a study: ``{study}-{stratum}-{index:04d}``."""
    return f"{study}-{stratum}-{int(index):04d}"


def document_index(doc_id: str) -> int:
    """The index ``i`` of a document id ``{study}-{stratum}-{i:04d}``."""
    m = _DOCUMENT_INDEX.search(doc_id)
    if not m:
        raise ValueError(f"document id {doc_id!r} does not end in -{{index:04d}}")
    return int(m.group(1))


# ------------------------------------------------------------------------------------------- models, documents
def model_dir(model: str) -> str:
    """The resolved directory of a model."""
    return f"{MODELS_DIR}/{model}"


def model_ready(model: str) -> str:
    """The file marking a model as resolved (the input of every rule that loads it)."""
    return f"{model_dir(model)}/{PROVENANCE}"


def documents_file(study: str, stratum: str) -> str:
    """The JSONL of one stratum of a study."""
    return f"{RESULTS}/{study}/documents/{stratum}.jsonl"


def document_file(study: str, stratum: str, doc_id: str) -> str:
    """The one-record JSON(L) of one document: the input of its trajectory jobs."""
    return f"{RESULTS}/{study}/documents/{stratum}/{doc_id}.json"


# ------------------------------------------------------------------------------------------- trajectories, metrics
def trajectory_store(study: str, model: str, doc_id: str) -> str:
    """The per-document store of one trajectory job."""
    return f"{RESULTS}/{study}/trajectories/{model}/{doc_id}.zarr"


def cube(study: str, model: str) -> str:
    """The cube of a (study, model)."""
    return f"{RESULTS}/{study}/cube/{model}.zarr"


def answers(study: str, model: str) -> str:
    """The scored continuations of a (study, model)'s cube (kvdiv.trajectories.answers; joined into its metrics)."""
    return f"{RESULTS}/{study}/answers/{model}.parquet"


def metrics_dir(study: str, model: str) -> str:
    """The folder of one (study, model)'s metric tables."""
    return f"{RESULTS}/{study}/metrics/{model}"


def metrics_file(study: str, model: str, table: str) -> str:
    """One metric table (:data:`METRIC_TABLES`) of a (study, model)."""
    return f"{metrics_dir(study, model)}/{table}.parquet"


# ------------------------------------------------------------------------------------------- analysis and outputs
def analysis_table(item: str, table: str) -> str:
    """One analysis table of a figure item (kvdiv.analysis.items)."""
    return f"{ANALYSIS_DIR}/{item}/{table}.parquet"


def figure(item: str, ext: str) -> str:
    """A figure file (``pdf`` or ``png``)."""
    return f"{FIGURES_DIR}/{item}.{ext}"


def table(item: str, ext: str) -> str:
    """A table file (``csv``, ``md`` or ``tex``)."""
    return f"{TABLES_DIR}/{item}.{ext}"


def gallery(study: str, model: str) -> str:
    """The gallery page of a (study, model): per action, the pairs with the earliest, median and latest divergence."""
    return f"{FIGURES_DIR}/gallery/{study}/{model}.html"


def leaderboard(model: str, ext: str) -> str:
    """A file of one model's divergence leaderboard (``csv``, ``md``, ``pdf`` or ``png``)."""
    return f"{LEADERBOARD_DIR}/{model}.{ext}"


def finite_file(name: str) -> str:
    """A file of the finite-state study (``exact.parquet``, ``figure4.png``, ...)."""
    return f"{FINITE_DIR}/{name}"


def finite_system(name: str) -> str:
    """The system file of one member of the finite-state suite."""
    return f"{FINITE_DIR}/systems/{name}.json"


# ------------------------------------------------------------------------------------------- logs, job benchmarks
def log(rule: str, job: str) -> str:
    """The log of a job of ``rule`` (``job`` names it within the rule, e.g. ``{study}/{model}``)."""
    return f"{LOGS}/{rule}/{job}.log"


def job_benchmark(rule: str, job: str) -> str:
    """The Snakemake benchmark (time, memory) of a job of ``rule``."""
    return f"{BENCHMARKS_DIR}/{rule}/{job}.tsv"
