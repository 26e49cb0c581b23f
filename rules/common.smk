# Config validation (schema defaults filled in place) and the small get_* helpers the rules use.
# Rules read config only through these helpers or params:.
import copy
import functools
import os
import sys
from pathlib import Path

from snakemake.utils import validate

sys.path.insert(0, str(Path(workflow.basedir)))
# Jobs import this checkout's kvdiv (the code whose hash the rules' params record), not another installed copy;
# also what the conda env (envs/kvdiv.yaml: dependencies only) relies on.
os.environ.update(PYTHONPATH=os.pathsep.join(filter(None, [str(Path(workflow.basedir)), os.environ.get("PYTHONPATH")])))

from kvdiv import cluster, config_checks, layout  # noqa: E402
from kvdiv.analysis import items  # noqa: E402
from kvdiv.codehash import code_hash  # noqa: E402
from kvdiv.names import NAME_REGEX, check_config_names, check_results_root  # noqa: E402

# The whole config is checked here, when the workflow starts, whatever it plans (kvdiv.config_checks): every config
# file re-read refusing duplicate keys, the schema (defaults filled), names, then every cross-section check.
config_checks.check_config_files(workflow.configfiles)
_GIVEN_CONFIG = copy.deepcopy(config)  # as written: checks of keys only when given (analysis.contrasts)
validate(config, "../config/schema.yaml")
# Names become path components (results/models/{model}/, results/{study}/...): kvdiv.names says which are safe.
check_config_names(config)
config_checks.check_config(config, _GIVEN_CONFIG)
# Every output, log and job benchmark of this config lies under its own root (config key `results`, e.g.
# results/smoke): configs live side by side in one working directory. Paths relative to the working directory
# (snakemake -d DIR); files of the workflow itself are read through workflow.basedir (get_workflow_file).
RESULTS_ROOT = check_results_root(config["results"])
paths = layout.Layout(RESULTS_ROOT)

ENV = "../envs/kvdiv.yaml"


def get_workflow_file(relative):
    """The absolute path of a file shipped with the workflow (e.g. kvdiv/data/...): resolved against the
    Snakefile's directory, not the working directory, so `snakemake -d otherdir` finds it."""
    return str(Path(workflow.basedir) / relative)


_SCRIPT_CODE = {}


def script_code(script):
    """The `code` param of a job running workflow_scripts/{script}, i.e. the hash of every kvdiv module the script
    imports, transitively, and of the data files they read (kvdiv.codehash): editing that code reruns the job.
    Computed once per script and planning (config/paper.yaml defines 576 trajectory rules)."""
    if script not in _SCRIPT_CODE:
        _SCRIPT_CODE[script] = code_hash(str(Path(workflow.basedir) / "workflow_scripts" / script))
    return _SCRIPT_CODE[script]

# Each stage's rule file appends the targets `rule all` builds.
FINAL_TARGETS = []


def get_final_targets():
    """Everything `snakemake` builds by default (filled by the included rule files)."""
    return FINAL_TARGETS


def with_checksums(outputs):
    """Parquet outputs plus the checksum file kvdiv.io.write_parquet writes beside each ({path}.sha256; named
    {name}_sha256 in a dict). Readers downstream verify it; declared as outputs, a missing one reruns the producer."""
    from kvdiv.io import checksum_path

    if isinstance(outputs, dict):
        return {**outputs, **{f"{name}_sha256": str(checksum_path(path)) for name, path in outputs.items()}}
    return [*outputs, *(str(checksum_path(path)) for path in outputs)]


def get_models():
    """Names of all configured models."""
    return list(config["models"])


def canonical(value):
    """``value`` with every mapping's keys sorted (recursively): params built from config sections compare
    equal however the YAML orders its keys, so reordering a config reruns nothing."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


def get_model_spec(model):
    """The config spec of one model (keys sorted, see canonical)."""
    return canonical(config["models"][model])


# Keys of a model spec that say how jobs run, not what they compute: left out of the rules' params (changing them
# reruns nothing) and read by the trajectory rules alone.
SCHEDULING_KEYS = ("threads", "documents_per_job")


def get_model_params(model):
    """A model's spec without its scheduling keys (SCHEDULING_KEYS): the `model_spec` param of its rules."""
    return {key: value for key, value in get_model_spec(model).items() if key not in SCHEDULING_KEYS}


def get_studies():
    """Names of all configured studies."""
    return list(config.get("studies", {}))


def get_study(study):
    """The config spec of one study."""
    return config["studies"][study]


def get_study_models(study):
    """Models a study runs (default: all models)."""
    return get_study(study).get("models") or get_models()


def get_action_specs(study):
    """{action name: press spec} for a study's actions, in the study's order (spec keys sorted)."""
    return {name: canonical(config["actions"][name]) for name in get_study(study)["actions"]}


def get_strata(study):
    """Stratum names `{family}_{length}` of a study, in config order."""
    return config_checks.study_strata(config, study)


# --- models (rules/models.smk) ---


def get_model_dir(model):
    """The resolved directory of a model (load it with kvdiv.llm.loading.load_model)."""
    return paths.model_dir(model)


def get_model_ready(model):
    """The file marking a model as resolved: the input of every rule that loads the model."""
    return paths.model_ready(model)


def get_model_seed(model):
    """Initialisation seed of a random model, derive_seed(master seed, "model", name); None otherwise."""
    from kvdiv.seeds import derive_seed

    if get_model_spec(model)["source"] != "random":
        return None
    return derive_seed(config["seed"], "model", model)


def get_model_resolve_inputs(wildcards):
    """A random model with another model's tokenizer needs that model resolved first; a local or gguf model's
    files on disk are inputs (editing one reruns the resolution)."""
    spec = get_model_spec(wildcards.model)
    tokenizer = spec.get("tokenizer")
    if spec["source"] == "random" and tokenizer and tokenizer != "bytes":
        if tokenizer not in config["models"]:
            raise ValueError(f"model {wildcards.model!r}: tokenizer {tokenizer!r} is neither 'bytes' nor a configured model")
        return [get_model_ready(tokenizer)]
    if spec["source"] in ("local", "gguf"):
        from kvdiv.llm.sources import source_files

        return [str(path) for path in source_files(spec)]
    return []


# --- finite state (rules/finite_state.smk) ---


def get_finite_state():
    """The validated finite_state config section (defaults filled by the schema)."""
    return config["finite_state"]


def get_finite_system_files():
    """One system file per member of the finite-state suite, named after its design factors."""
    from kvdiv.finite.suite import suite_specs

    return [paths.finite_system(spec.name) for spec in suite_specs(get_finite_state())]


# --- documents (rules/documents.smk) ---


def get_reference_tokenizer(study):
    """The model whose tokenizer sizes a study's documents (`reference_tokenizer`, else its first model)."""
    name = get_study(study).get("reference_tokenizer") or get_study_models(study)[0]
    if name not in config["models"]:
        raise ValueError(f"study {study!r}: reference_tokenizer {name!r} is not a configured model")
    return name


def get_stratum_spec(study, stratum):
    """The config entry of one stratum `{family}_{length}` of a study."""
    for spec in get_study(study)["strata"]:
        if layout.stratum_name(spec["family"], spec["length"]) == stratum:
            return spec
    raise ValueError(f"study {study!r} has no stratum {stratum!r} (has {', '.join(get_strata(study))})")


def get_documents_source(study):
    """A study's `documents` section (default: synthetic generation)."""
    return canonical(dict(get_study(study)["documents"]))


def get_documents_source_files(study, stratum):
    """The local file a study's documents are read from for one stratum (jsonl, ruler or helmet `path`), if any:
    an input of rule document, so editing it reruns the documents built from it."""
    from kvdiv.documents.loaders import source_file

    path = source_file(get_documents_source(study), stratum=stratum)
    return [] if path is None else [str(path)]


def get_documents_file(study, stratum):
    """The JSONL of one stratum of a study."""
    return paths.documents_file(study, stratum)


def get_documents(study):
    """All document JSONL files of a study, in stratum order."""
    return [get_documents_file(study, s) for s in get_strata(study)]


def get_document_blocks(study):
    """[(stratum, first, last, [document ids])] of a study: blocks of the reference tokenizer model's
    `documents_per_job` documents by index (kvdiv.config_checks.document_blocks), one document job each."""
    size = get_model_spec(get_reference_tokenizer(study))["documents_per_job"]
    return config_checks.document_blocks(config, study, size)


def get_document_block_count(study, stratum, first, last):
    """How many documents block `first`-`last` of a stratum holds (checked against the study's config): a
    param of its job, so a document added to the block reruns that block alone."""
    for s, k, end, ids in get_document_blocks(study):
        if (s, k, end) == (stratum, int(first), int(last)):
            return len(ids)
    raise ValueError(f"study {study!r} stratum {stratum!r} has no document block {first}-{last}")


def get_stratum_document_blocks(study, stratum):
    """Every document block file of one stratum of a study, in index order."""
    return [paths.document_block(study, s, k, end) for s, k, end, _ in get_document_blocks(study) if s == stratum]


def get_documents_blocks_of(study, doc_ids):
    """The document block files holding `doc_ids` (the inputs of a trajectory job), in index order."""
    wanted = set(doc_ids)
    return [paths.document_block(study, s, k, end) for s, k, end, ids in get_document_blocks(study) if wanted & set(ids)]


_DOCUMENT_STRATA = {}


def get_document_ids(study):
    """[(stratum, document id)] of a study, known from the config alone (ids `{study}-{stratum}-{i:04d}`)."""
    return [(stratum, doc_id) for doc_id, stratum in get_document_strata(study).items()]


def get_document_strata(study):
    """{document id: stratum} of a study, in stratum and index order; built once per planning (looking ids up in a
    list made planning quadratic in the number of documents)."""
    if study not in _DOCUMENT_STRATA:
        n = get_study(study)["documents_per_stratum"]
        _DOCUMENT_STRATA[study] = {layout.document_id(study, s, i): s for s in get_strata(study) for i in range(n)}
    return _DOCUMENT_STRATA[study]


def get_press_modules():
    """The user's press files (config `press_modules`, paths relative to the working directory), each checked to
    exist and parse (kvdiv.llm.presses.registry.press_module_classes: read, not run)."""
    from kvdiv.llm.press_files import press_module_classes

    for path in config["press_modules"]:
        press_module_classes(path)
    return list(config["press_modules"])


def get_study_press_modules(study):
    """The press files defining a press that one of the study's actions names: inputs of its trajectory jobs."""
    return list(_study_press_modules(study))


@functools.cache
def _study_press_modules(study):
    # once per study and planning (every trajectory rule of the study asks; the files do not change meanwhile)
    from kvdiv.llm.press_files import press_module_files

    return tuple(press_module_files(get_action_specs(study), get_press_modules()))


@functools.cache
def get_trajectory_code(study):
    """The `code` param of a study's trajectory jobs: script_code("trajectories.py"), and with press modules also the
    kvdiv modules those files import (kvdiv.codehash); the files themselves are inputs."""
    modules = get_study_press_modules(study)
    if not modules:
        return script_code("trajectories.py")
    return code_hash(str(Path(workflow.basedir) / "workflow_scripts" / "trajectories.py"), *modules)


def check_actions():
    """Every configured action builds its press (the press exists, accepts the arguments, and their values are in
    range: kvdiv.llm.presses.registry.check_argument) when the workflow starts, not inside a trajectory job after models and
    documents. Only in the main process (a cluster job re-reading the workflow skips it), and once per actions
    section, checking code and kvpress version (a marker under .snakemake/kvdiv/ spares the kvpress import later)."""
    from importlib.metadata import version

    from kvdiv.codehash import fingerprint

    import hashlib

    modules = get_press_modules()  # every file exists and parses, in every process
    if not workflow.is_main_process:
        return
    actions = canonical(config.get("actions") or {})
    sources = {path: hashlib.sha256(Path(path).read_bytes()).hexdigest() for path in modules}
    marker = Path(".snakemake/kvdiv") / f"actions-valid-{fingerprint(actions, code_hash('kvdiv.llm.presses.registry'), version('kvpress'), sources)}"
    if marker.is_file():
        return
    from kvdiv.llm.presses.registry import check_evicts, load_press_modules, validate_action

    load_press_modules(modules)  # imports the user's files: errors name the file (and the class of a name clash)

    for name, spec in actions.items():
        try:
            validate_action(spec, name)  # unknown or unrunnable presses (registry.UNRUNNABLE), bad arguments
            check_evicts(spec, name)  # a press that evicts nothing measures Q = P
        except ValueError as err:
            raise ValueError(f"actions.{name}: {err}") from None
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


check_actions()


def check_chat_templates():
    """Every chat template known when the workflow starts (a spec's string, a resolved model's own) renders two
    different probe messages differently and each the same way twice, within its budget
    (kvdiv.llm.chat_templates.check_model_templates): a template that drops the message, depends on anything else,
    or loops without bound is an error naming the model, not a hung or meaningless job."""
    from kvdiv.llm.chat_templates import check_model_templates

    check_model_templates(config["models"], get_model_dir)


check_chat_templates()


# --- trajectories (rules/trajectories.smk) ---


def get_trajectory_stratum(study, doc_id):
    """The stratum of a document id `{study}-{stratum}-{index:04d}` (checked against the study)."""
    stratum = get_document_strata(study).get(doc_id)
    if stratum is not None:
        return stratum
    raise ValueError(f"study {study!r} has no document {doc_id!r} (ids are {study}-{{stratum}}-{{index:04d}})")


def get_trajectory_batches(study, model):
    """[(batch name, [document ids])] of a (study, model): per stratum, documents in blocks of the model's
    `documents_per_job` by index (block k holds i = k*size .. k*size+size-1; named `{stratum}-{first:04d}-{last:04d}`
    after the block's index range), so adding a document changes only its own block (kvdiv.config_checks)."""
    return config_checks.trajectory_batches(config, study, model)


def get_trajectory_store(study, model, doc_id):
    """The per-document store of one trajectory job."""
    return paths.trajectory_store(study, model, doc_id)


def get_trajectory_stores(study, model):
    """Every per-document store of a (study, model), in document order."""
    return [get_trajectory_store(study, model, doc_id) for _, doc_id in get_document_ids(study)]


def get_cube(study, model):
    """The cube of a (study, model)."""
    return paths.cube(study, model)


def get_trajectory_settings(study):
    """Generation settings of a study passed to every trajectory job (schema defaults filled)."""
    spec = get_study(study)
    keys = ("horizon", "replicates", "temperature", "mode", "evict_first_step", "tv_atol", "reference_chain", "compress")
    return {key: spec[key] for key in keys} | {"master_seed": config["seed"], "study_seed": spec["seed"]}


def get_trajectory_rule_name(study, model, batch):
    """The name of one trajectory batch's rule, `trajectories_` + study, model and batch, characters outside
    [A-Za-z0-9_] as `_` (unique: checked against the names already given)."""
    name = config_checks.trajectory_rule_name(study, model, batch)
    if name in TRAJECTORY_RULE_NAMES:
        raise ValueError(f"trajectory batches {TRAJECTORY_RULE_NAMES[name]} and {(study, model, batch)} map to one rule name {name!r}")
    TRAJECTORY_RULE_NAMES[name] = (study, model, batch)
    return name


TRAJECTORY_RULE_NAMES = {}


def get_trajectory_resources(model):
    """Resources of a trajectory batch job: those a profile or --set-resources gives rule `trajectories` (the batch
    rules have their own names), with gpu=1 for a CUDA model; for a CPU model without the GPU ones and the partition
    (kvdiv.cluster.trajectory_resources: it runs where the default resources say)."""
    overwrite = (workflow.resource_settings.overwrite_resources or {}).get("trajectories", {})
    # values come as given (CLI, profile) or parsed into snakemake Resource objects: take what the user wrote
    given = {name: getattr(value, "raw", value) for name, value in overwrite.items()}
    return cluster.trajectory_resources(given, on_gpu=get_trajectory_gpus(model) == 1)


def get_trajectory_gpus(model):
    """1 for a model on a CUDA device (a counter locally; --gpus= on SLURM), else 0."""
    return 1 if str(get_model_spec(model)["device"]).startswith("cuda") else 0


# --- metrics, figures, tables, report (rules/metrics.smk, rules/figures.smk) ---


def get_analysis():
    """The validated analysis config section (defaults filled by the schema)."""
    return config["analysis"]


def get_metrics_dir(study, model):
    """Folder of one (study, model)'s metric Parquet files."""
    return paths.metrics_dir(study, model)


def get_metrics_files(study):
    """Every metric file of a study, all its models."""
    return [paths.metrics_file(study, model, table) for model in get_study_models(study) for table in layout.METRIC_TABLES]


def get_analysis_study(item):
    """The study that feeds a figure/table (config analysis.studies), checked against `studies`."""
    study = get_analysis()["studies"][item]
    if study not in get_studies():
        raise ValueError(
            f"analysis.studies.{item} = {study!r} is not a configured study (studies: {get_studies()}); "
            "set analysis.studies in your config"
        )
    return study


# The items this config builds: those named in analysis.studies (kvdiv.analysis.items order).
FIGURE_ITEMS = tuple(item for item in items.FIGURES if item in get_analysis()["studies"])
TABLE_ITEMS = tuple(item for item in items.TABLES if item in get_analysis()["studies"])
ANALYSED_ITEMS = tuple(item for item in items.ANALYSED if item in get_analysis()["studies"])


def get_analysis_outputs(item):
    """{table name: parquet path} of one figure item's analysis tables (kvdiv.analysis.items)."""
    return {table: paths.analysis_table(item, table) for table in items.get_item(item).tables}


def get_analysis_params(item, table):
    """The settings one table of an item uses (kvdiv.analysis.items: so a change reruns exactly what uses it)."""
    a = get_analysis()
    common = {"bootstrap": a["bootstrap"], "confidence": a["confidence"], "seed": config["seed"]}
    return {**common, **items.table_settings(item, table, a)}


def get_report_setting():
    """What ran, for the report's comparison with the paper's setting."""
    a = get_analysis()
    studies = {}
    for study in get_studies():
        spec = get_study(study)
        studies[study] = {
            "documents": spec["documents_per_stratum"] * len(spec["strata"]),
            "documents_per_stratum": spec["documents_per_stratum"],
            "strata": get_strata(study),
            "horizon": spec["horizon"],
            "replicates": spec["replicates"],
            "actions": list(spec["actions"]),
            "models": get_study_models(study),
            "mode": spec["mode"],
        }
    models = {}
    for name in get_models():
        spec = get_model_spec(name)
        models[name] = spec.get("id") or spec.get("gguf_file") or spec.get("path") or spec["source"]
    return {
        "models": models,
        "studies": studies,
        "figure_studies": dict(a["studies"]),
        "contrasts": a["contrasts"],
        "directions": a["directions"],
        "cohort_max_tau": a["cohort_max_tau"],
        "early": a["early"],
        "late": a["late"],
        "bootstrap": a["bootstrap"],
        "confidence": a["confidence"],
    }


# --- leaderboard (rules/leaderboard.smk) ---


def get_leaderboard():
    """The validated `leaderboard` config section (None: no leaderboard), its study checked against `studies`."""
    section = config.get("leaderboard")
    if section is not None and section["study"] not in get_studies():
        raise ValueError(f"leaderboard.study = {section['study']!r} is not a configured study (studies: {get_studies()})")
    return section
