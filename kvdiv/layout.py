"""Where everything is and what it is called: result paths, stratum names and document ids, written once.

rules/common.smk, the rule files, the documents, the report, the CLI and the tests build every path and name
from here. Arguments may be Snakemake wildcard patterns (``layout.cube("{study}", "{model}")`` is the cube rule's
output), so this module checks nothing; :mod:`kvdiv.names` says which names are allowed. A stratum is
``{family}_{length}`` (``ruler_1024``); document ``i`` of a stratum of a study is ``{study}-{stratum}-{i:04d}``.
Every path lies under one **output root** (the config's ``results`` key, default ``results``): :class:`Layout` builds
the paths of one root; the module-level functions are those of :data:`RESULTS`. The tree: docs/internals.md#paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RESULTS = "results"
LOGS = f"{RESULTS}/logs"
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
RESULTS_ENTRIES = (
    "models",
    "finite_state",
    "figures",
    "tables",
    "analysis",
    "benchmarks",
    "leaderboard",
    "logs",
    "cache",
    "report.md",
    "report.html",
    "README.md",
    "kvdiv-root.json",
)
#: The file in an output root naming the config that owns it (:mod:`kvdiv.config.roots`).
ROOT_MARKER = "kvdiv-root.json"

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


# ------------------------------------------------------------------------------------------- one output root
@dataclass(frozen=True)
class Layout:
    """The paths of one output root ``root`` (a relative path such as ``results`` or ``results/smoke``; checked by
    :func:`kvdiv.names.check_results_root`). Arguments may be Snakemake wildcard patterns."""

    root: str = RESULTS

    @property
    def models_dir(self) -> str:
        """Where resolved models live (``{root}/models``)."""
        return f"{self.root}/models"

    @property
    def owner_marker(self) -> str:
        """The file naming the config that owns this root (``{root}/kvdiv-root.json``, :mod:`kvdiv.config.roots`)."""
        return f"{self.root}/{ROOT_MARKER}"

    @property
    def report(self) -> str:
        """The report (``{root}/report.md``)."""
        return f"{self.root}/report.md"

    @property
    def report_page(self) -> str:
        """The report as one HTML page (``{root}/report.md.html``: what Snakemake's HTML report shows inline)."""
        return f"{self.root}/report.md.html"

    # --------------------------------------------------------------------------------------- models, documents
    def model_dir(self, model: str) -> str:
        """The resolved directory of a model."""
        return f"{self.models_dir}/{model}"

    def model_ready(self, model: str) -> str:
        """The file marking a model as resolved (the input of every rule that loads it)."""
        return f"{self.model_dir(model)}/{PROVENANCE}"

    def documents_file(self, study: str, stratum: str) -> str:
        """The JSONL of one stratum of a study."""
        return f"{self.root}/{study}/documents/{stratum}.jsonl"

    def document_block(self, study: str, stratum: str, first: int | str, last: int | str) -> str:
        """The JSONL of documents ``first .. last`` (at most; fewer in a stratum's last block) of one stratum,
        written by one job: the input of the trajectory jobs of those documents. Indices as ``{i:04d}``."""
        first, last = (i if isinstance(i, str) else f"{int(i):04d}" for i in (first, last))
        return f"{self.root}/{study}/documents/{stratum}/{first}-{last}.jsonl"

    # --------------------------------------------------------------------------------------- trajectories, metrics
    def trajectory_store(self, study: str, model: str, doc_id: str) -> str:
        """The per-document store of one trajectory job."""
        return f"{self.root}/{study}/trajectories/{model}/{doc_id}.zarr"

    def trajectory_cache(self, study: str, model: str) -> str:
        """The per-(document, action) pieces a (study, model)'s trajectory jobs keep (kvdiv.trajectories.reuse):
        not an output of any rule; reused when a job reruns."""
        return f"{self.root}/cache/trajectories/{study}/{model}"

    def cube(self, study: str, model: str) -> str:
        """The cube of a (study, model)."""
        return f"{self.root}/{study}/cube/{model}.zarr"

    def answers(self, study: str, model: str) -> str:
        """The scored continuations of a (study, model)'s cube (kvdiv.trajectories.answers; joined into its metrics)."""
        return f"{self.root}/{study}/answers/{model}.parquet"

    def metrics_dir(self, study: str, model: str) -> str:
        """The folder of one (study, model)'s metric tables."""
        return f"{self.root}/{study}/metrics/{model}"

    def metrics_file(self, study: str, model: str, table: str) -> str:
        """One metric table (:data:`METRIC_TABLES`) of a (study, model)."""
        return f"{self.metrics_dir(study, model)}/{table}.parquet"

    # --------------------------------------------------------------------------------------- analysis and outputs
    def analysis_table(self, item: str, table: str) -> str:
        """One analysis table of a figure item (kvdiv.results.registry)."""
        return f"{self.root}/analysis/{item}/{table}.parquet"

    def figure(self, item: str, ext: str) -> str:
        """A figure file (``pdf`` or ``png``)."""
        return f"{self.root}/figures/{item}.{ext}"

    def table(self, item: str, ext: str) -> str:
        """A table file (``csv``, ``md``, ``tex`` or ``html``: the Markdown as one page)."""
        return f"{self.root}/tables/{item}.{ext}"

    def gallery(self, study: str, model: str) -> str:
        """The gallery page of a (study, model): per action, the pairs with the earliest, median and latest
        divergence."""
        return f"{self.root}/figures/gallery/{study}/{model}.html"

    def leaderboard(self, model: str, ext: str) -> str:
        """A file of one model's divergence leaderboard (``csv``, ``md``, ``pdf`` or ``png``)."""
        return f"{self.root}/leaderboard/{model}.{ext}"

    def finite_file(self, name: str) -> str:
        """A file of the finite-state study (``exact.parquet``, ``figure4.png``, ...)."""
        return f"{self.root}/finite_state/{name}"

    def finite_system(self, name: str) -> str:
        """The system file of one member of the finite-state suite."""
        return f"{self.root}/finite_state/systems/{name}.json"

    # --------------------------------------------------------------------------------------- logs, job benchmarks
    def log(self, rule: str, job: str) -> str:
        """The log of a job of ``rule`` (``job`` names it within the rule, e.g. ``{study}/{model}``)."""
        return f"{self.root}/logs/{rule}/{job}.log"

    def job_benchmark(self, rule: str, job: str) -> str:
        """The Snakemake benchmark (time, memory) of a job of ``rule``."""
        return f"{self.root}/benchmarks/{rule}/{job}.tsv"


#: The default root's paths; the module-level functions below are its methods.
DEFAULT = Layout(RESULTS)
model_dir = DEFAULT.model_dir
model_ready = DEFAULT.model_ready
documents_file = DEFAULT.documents_file
document_block = DEFAULT.document_block
trajectory_store = DEFAULT.trajectory_store
cube = DEFAULT.cube
answers = DEFAULT.answers
metrics_dir = DEFAULT.metrics_dir
metrics_file = DEFAULT.metrics_file
analysis_table = DEFAULT.analysis_table
figure = DEFAULT.figure
table = DEFAULT.table
gallery = DEFAULT.gallery
leaderboard = DEFAULT.leaderboard
finite_file = DEFAULT.finite_file
finite_system = DEFAULT.finite_system
log = DEFAULT.log
job_benchmark = DEFAULT.job_benchmark
