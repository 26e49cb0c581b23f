"""What the workflow's rules look up in a checked config (rules/common.smk binds each ``get_*`` helper to one method
of :class:`Lookups`): paths, specs, document blocks, trajectory batches, params, resources. Lookups decide nothing
the start-up checks have not already decided; a name they cannot find is a ``ValueError`` naming it."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvdiv import cluster, layout
from kvdiv.codehash import code_hash
from kvdiv.config import plan
from kvdiv.results import registry
from kvdiv.settings import DocumentRequest, Generation, Runtime


def canonical(value: Any) -> Any:
    """``value`` with every mapping's keys sorted (recursively): params built from config sections compare equal
    however the YAML orders its keys, so reordering a config reruns nothing."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


class Lookups:
    """The lookups of one checked ``config``; ``basedir`` is the workflow's directory (its scripts), ``paths`` the
    config's :class:`kvdiv.layout.Layout`, ``overwrite_resources`` what a profile or ``--set-resources`` gives."""

    def __init__(
        self,
        config: Mapping[str, Any],
        basedir: str | Path,
        paths: layout.Layout,
        overwrite_resources: Mapping[str, Any] | None = None,
    ) -> None:
        self.config, self.basedir, self.paths = config, Path(basedir), paths
        self.overwrite_resources = dict(overwrite_resources or {})
        self.rule_names: dict[str, tuple[str, str, str]] = {}
        self._document_strata: dict[str, dict[str, str]] = {}
        analysed = self.config["analysis"]["studies"]
        # the results this config builds: those named in analysis.studies, in the registry's (report) order; a
        # figure's or a section's tables are Parquet files of rule analysis, a table's its numbers of rule table
        self.figure_items = tuple(name for name in registry.names("figure") if name in analysed)
        self.table_items = tuple(name for name in registry.names("table") if name in analysed)
        self.analysed_items = tuple(name for name in registry.names("figure", "section") if name in analysed)

    # --- workflow files and code ---

    def workflow_file(self, relative: str) -> str:
        """A file shipped with the workflow, resolved against the Snakefile's directory (``snakemake -d`` works)."""
        return str(self.basedir / relative)

    @functools.cache
    def script_code(self, script: str) -> str:
        """The ``code`` param of a job running workflow_scripts/{script}: the hash of every kvdiv module it imports,
        transitively, and the data files they read (:mod:`kvdiv.codehash`); once per script and planning."""
        return code_hash(str(self.basedir / "workflow_scripts" / script))

    # --- models ---

    def models(self) -> list[str]:
        return list(self.config["models"])

    def model_spec(self, model: str) -> dict:
        """The config spec of one model (keys sorted)."""
        return canonical(self.config["models"][model])

    def model_params(self, model: str) -> dict:
        """A model's spec without its runtime keys (:class:`Runtime`): the ``model_spec`` param of its rules."""
        return Runtime.split(self.model_spec(model))[0]

    def model_runtime(self, model: str) -> Runtime:
        return Runtime.split(self.model_spec(model))[1]

    def model_dir(self, model: str) -> str:
        return self.paths.model_dir(model)

    def model_ready(self, model: str) -> str:
        """The file marking a model as resolved: the input of every rule that loads the model."""
        return self.paths.model_ready(model)

    def model_seed(self, model: str) -> int | None:
        """The initialisation seed of a random model, derive_seed(master seed, "model", name); None otherwise."""
        from kvdiv.seeds import derive_seed

        if self.model_spec(model)["source"] != "random":
            return None
        return derive_seed(self.config["seed"], "model", model)

    def model_resolve_inputs(self, model: str) -> list[str]:
        """A random model with another model's tokenizer needs that model resolved first; a local or gguf model's
        files on disk are inputs (editing one reruns the resolution)."""
        spec = self.model_spec(model)
        tokenizer = spec.get("tokenizer")
        if spec["source"] == "random" and tokenizer and tokenizer != "bytes":  # a configured model (start-up check)
            return [self.model_ready(tokenizer)]
        if spec["source"] in ("local", "gguf"):
            from kvdiv.models.sources import source_files

            return [str(path) for path in source_files(spec)]
        return []

    # --- finite state ---

    def finite_state(self) -> dict:
        return self.config["finite_state"]

    def finite_system_files(self) -> list[str]:
        """One system file per member of the finite-state suite, named after its design factors."""
        from kvdiv.finite.suite import suite_specs

        return [self.paths.finite_system(spec.name) for spec in suite_specs(self.finite_state())]

    # --- studies and documents ---

    def studies(self) -> list[str]:
        return list(self.config.get("studies", {}))

    def study(self, study: str) -> dict:
        return self.config["studies"][study]

    def study_models(self, study: str) -> list[str]:
        return plan.study_models(self.config, study)

    def action_specs(self, study: str) -> dict:
        """{action name: press spec} of a study's actions, in the study's order (spec keys sorted)."""
        return {name: canonical(self.config["actions"][name]) for name in self.study(study)["actions"]}

    def strata(self, study: str) -> list[str]:
        return plan.study_strata(self.config, study)

    def reference_tokenizer(self, study: str) -> str:
        """The model whose tokenizer sizes a study's documents (``reference_tokenizer``, else its first model)."""
        return self.study(study).get("reference_tokenizer") or self.study_models(study)[0]

    def stratum_spec(self, study: str, stratum: str) -> dict:
        for spec in self.study(study)["strata"]:
            if layout.stratum_name(spec["family"], spec["length"]) == stratum:
                return spec
        raise ValueError(f"study {study!r} has no stratum {stratum!r} (has {', '.join(self.strata(study))})")

    def documents_source(self, study: str) -> dict:
        """A study's ``documents`` section (default: synthetic generation)."""
        return canonical(dict(self.study(study)["documents"]))

    def documents_source_files(self, study: str, stratum: str) -> list[str]:
        """The local file one stratum's documents are read from, if any (an input: editing it reruns them)."""
        from kvdiv.documents.loaders import source_file

        path = source_file(self.documents_source(study), stratum=stratum)
        return [] if path is None else [str(path)]

    def documents_file(self, study: str, stratum: str) -> str:
        return self.paths.documents_file(study, stratum)

    def documents(self, study: str) -> list[str]:
        return [self.documents_file(study, s) for s in self.strata(study)]

    @functools.cache
    def document_blocks(self, study: str) -> list[tuple[str, int, int, list[str]]]:
        """[(stratum, first, last, [ids])]: blocks of the reference tokenizer model's ``documents_per_job``."""
        size = self.model_runtime(self.reference_tokenizer(study)).documents_per_job
        return plan.document_blocks(self.config, study, size)

    def document_block_count(self, study: str, stratum: str, first: int | str, last: int | str) -> int:
        """How many documents block ``first``-``last`` of a stratum holds (a param: adding one reruns the block)."""
        for s, k, end, ids in self.document_blocks(study):
            if (s, k, end) == (stratum, int(first), int(last)):
                return len(ids)
        raise ValueError(f"study {study!r} stratum {stratum!r} has no document block {first}-{last}")

    def document_request(self, study: str, stratum: str, first: int | str, last: int | str) -> DocumentRequest:
        """The :class:`DocumentRequest` of block ``first``-``last`` of a stratum: the ``request`` param of its
        ``document`` job, passed to it as itself (adding a document to the block changes it, and reruns the block)."""
        model = self.reference_tokenizer(study)
        tasks = self.stratum_spec(study, stratum).get("tasks")
        return DocumentRequest(
            study=study,
            stratum=stratum,
            first=int(first),
            count=self.document_block_count(study, stratum, first, last),
            master_seed=self.config["seed"],
            study_seed=self.study(study)["seed"],
            model=model,
            model_spec=self.model_params(model),
            source=self.documents_source(study),
            horizon=self.study(study)["horizon"],
            tasks=tuple(tasks) if tasks else None,
        )

    def stratum_document_blocks(self, study: str, stratum: str) -> list[str]:
        return [
            self.paths.document_block(study, s, k, end) for s, k, end, _ in self.document_blocks(study) if s == stratum
        ]

    def documents_blocks_of(self, study: str, doc_ids: list[str]) -> list[str]:
        """The document block files holding ``doc_ids`` (a trajectory job's inputs), in index order."""
        wanted = set(doc_ids)
        return [
            self.paths.document_block(study, s, k, end)
            for s, k, end, ids in self.document_blocks(study)
            if wanted & set(ids)
        ]

    def document_strata(self, study: str) -> dict[str, str]:
        """{document id: stratum} of a study in stratum and index order (built once per planning)."""
        if study not in self._document_strata:
            n = self.study(study)["documents_per_stratum"]
            self._document_strata[study] = {
                layout.document_id(study, s, i): s for s in self.strata(study) for i in range(n)
            }
        return self._document_strata[study]

    def document_ids(self, study: str) -> list[tuple[str, str]]:
        """[(stratum, document id)] of a study, known from the config alone."""
        return [(stratum, doc_id) for doc_id, stratum in self.document_strata(study).items()]

    # --- press files ---

    def press_modules(self) -> list[str]:
        """The user's press files (config ``press_modules``), each checked to exist and parse (read, not run)."""
        from kvdiv.kernel.presses.press_files import press_module_classes

        for path in self.config["press_modules"]:
            press_module_classes(path)
        return list(self.config["press_modules"])

    @functools.cache
    def study_press_modules(self, study: str) -> list[str]:
        """The press files defining a press one of the study's actions names: inputs of its trajectory jobs."""
        from kvdiv.kernel.presses.press_files import press_module_files

        return list(press_module_files(self.action_specs(study), self.press_modules()))

    # --- trajectories ---

    @functools.cache
    def trajectory_code(self, study: str) -> str:
        """The ``code`` param of a study's trajectory jobs (and part of the key of their cached results): with press
        files, also the bytes of each file and of the user's own modules it imports, and the kvdiv modules all of
        them import (:func:`kvdiv.kernel.presses.press_files.press_files_hash`)."""
        modules = self.study_press_modules(study)
        if not modules:
            return self.script_code("trajectories.py")
        from kvdiv.codehash import fingerprint
        from kvdiv.kernel.presses.press_files import press_files_hash, press_sources

        sources = press_sources(modules, ["."])
        kvdiv_code = code_hash(str(self.basedir / "workflow_scripts" / "trajectories.py"), *sources)
        return fingerprint(kvdiv_code, press_files_hash(modules, ["."]))

    def trajectory_batches(self, study: str, model: str) -> list[tuple[str, list[str]]]:
        return plan.trajectory_batches(self.config, study, model)

    def trajectory_priority(self, study: str, doc_ids: list[str]) -> int:
        return plan.trajectory_batch_priority(self.config, study, doc_ids)

    def trajectory_rule_name(self, study: str, model: str, batch: str) -> str:
        """The name of one trajectory batch's rule (unique: checked against the names already given)."""
        name = plan.trajectory_rule_name(study, model, batch)
        other = self.rule_names.setdefault(name, (study, model, batch))
        if other != (study, model, batch):
            raise ValueError(f"trajectory batches {other} and {(study, model, batch)} map to one rule name {name!r}")
        return name

    def trajectory_stratum(self, study: str, doc_id: str) -> str:
        stratum = self.document_strata(study).get(doc_id)
        if stratum is None:
            raise ValueError(f"study {study!r} has no document {doc_id!r} (ids are {study}-{{stratum}}-{{index:04d}})")
        return stratum

    def trajectory_store(self, study: str, model: str, doc_id: str) -> str:
        return self.paths.trajectory_store(study, model, doc_id)

    def trajectory_stores(self, study: str, model: str) -> list[str]:
        return [self.trajectory_store(study, model, doc_id) for _, doc_id in self.document_ids(study)]

    def cube(self, study: str, model: str) -> str:
        return self.paths.cube(study, model)

    @functools.cache
    def generation(self, study: str) -> Generation:
        """A study's :class:`Generation`, built once from the config: the ``generation`` param of its trajectory
        jobs, passed to them as itself."""
        return Generation.from_study(self.config, study)

    def trajectory_gpus(self, model: str) -> int:
        """1 for a model on a CUDA device (a counter locally; --gpus= on SLURM), else 0."""
        return 1 if str(self.model_spec(model)["device"]).startswith("cuda") else 0

    def trajectory_resources(self, model: str) -> dict:
        """Those a profile or --set-resources gives rule ``trajectories``, with gpu=1 for a CUDA model
        (:func:`kvdiv.cluster.trajectory_resources`)."""
        given = {
            name: getattr(value, "raw", value)
            for name, value in (self.overwrite_resources.get("trajectories") or {}).items()
        }
        return cluster.trajectory_resources(given, on_gpu=self.trajectory_gpus(model) == 1)

    # --- metrics, figures, tables, report, leaderboard ---

    def analysis(self) -> dict:
        return self.config["analysis"]

    def metrics_dir(self, study: str, model: str) -> str:
        return self.paths.metrics_dir(study, model)

    def metrics_files(self, study: str) -> list[str]:
        return [
            self.paths.metrics_file(study, model, table)
            for model in self.study_models(study)
            for table in layout.METRIC_TABLES
        ]

    def analysis_study(self, item: str) -> str:
        """The study that feeds a figure/table (config analysis.studies; a configured study: start-up check)."""
        return self.analysis()["studies"][item]

    def analysis_outputs(self, item: str) -> dict[str, str]:
        return {table: self.paths.analysis_table(item, table) for table in registry.get_result(item).tables}

    def analysis_params(self, item: str, table: str) -> dict:
        """The settings one table of a result uses: the bootstrap's and those its :class:`~kvdiv.results.base.Table`
        declares, from the result's config section (so a change reruns exactly the tables that use it)."""
        result = registry.get_result(item)
        a, section = self.analysis(), self.config[result.config]
        common = {"bootstrap": a["bootstrap"], "confidence": a["confidence"], "seed": self.config["seed"]}
        fixed = {"fixed": canonical(dict(result.tables[table].fixed))} if result.tables[table].fixed else {}
        return {**common, **result.table_settings(table, section), **fixed}

    def plot_params(self, item: str) -> dict:
        """The settings a result's plot declares (Figure 6: its depth windows), from its config section: only its
        figure job takes them."""
        result = registry.get_result(item)
        return result.plot_settings(self.config[result.config])

    @functools.cache
    def result_code(self, script: str, item: str) -> str:
        """The ``code`` param of a job of one result: its script's kvdiv imports and the result's own module (the
        registry imports result modules by name, so each result's jobs hash only their own). An ``analysis`` job
        hashes the modules of its result's builders instead of the result's module (its settings and fixed
        arguments are params): a change of how a result is drawn or reported reruns no bootstrap."""
        if script == "analysis.py":
            builders = sorted({table.build.__module__ for table in registry.get_result(item).tables.values()})
            return code_hash(str(self.basedir / "workflow_scripts" / script), *builders)
        return code_hash(str(self.basedir / "workflow_scripts" / script), *registry.result_modules(item))

    @functools.cache
    def report_code(self) -> str:
        """The ``code`` param of the report: its script and every result's module (each writes a section)."""
        return code_hash(str(self.basedir / "workflow_scripts" / "report.py"), *registry.result_modules())

    def report_setting(self) -> dict:
        """What ran, for the report's comparison with the paper's setting."""
        a = self.analysis()
        studies = {}
        for study in self.studies():
            spec = self.study(study)
            studies[study] = {
                "documents": spec["documents_per_stratum"] * len(spec["strata"]),
                "documents_per_stratum": spec["documents_per_stratum"],
                "strata": self.strata(study),
                "horizon": spec["horizon"],
                "replicates": spec["replicates"],
                "actions": list(spec["actions"]),
                "models": self.study_models(study),
                "mode": spec["mode"],
            }
        models = {}
        for name in self.models():
            spec = self.model_spec(name)
            models[name] = spec.get("id") or spec.get("gguf_file") or spec.get("path") or spec["source"]
        keys = (
            "contrasts",
            "directions",
            "cohort_max_tau",
            "early",
            "late",
            "bootstrap",
            "confidence",
            "paper_actions",
        )
        from kvdiv.environment import environment_record

        return {
            "environment": environment_record(self.basedir),
            "models": models,
            "studies": studies,
            "figure_studies": dict(a["studies"]),
            **{key: a[key] for key in keys},
        }

    def leaderboard(self) -> dict | None:
        """The ``leaderboard`` section (None: no leaderboard; its study is a configured one: start-up check)."""
        return self.config.get("leaderboard")
