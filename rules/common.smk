# Config validation (schema defaults filled in place), the start-up checks, and the one-line get_* lookups the rules
# use (kvdiv.config.lookups.Lookups: each helper below is one of its methods). Rules read config only through these
# helpers or params:. Checks and logic live in kvdiv.config, never here.
import copy
import os
import sys
from pathlib import Path

from snakemake.utils import validate

sys.path.insert(0, str(Path(workflow.basedir)))
# Jobs import this checkout's kvdiv (the code whose hash the rules' params record), not another installed copy;
# also what the conda env (envs/kvdiv.yaml: dependencies only) relies on.
os.environ.update(PYTHONPATH=os.pathsep.join(filter(None, [str(Path(workflow.basedir)), os.environ.get("PYTHONPATH")])))
# The working directory the workflow runs in (jobs in a shadow directory keep their trajectory cache here).
os.environ.update(KVDIV_WORKDIR=os.getcwd())

from kvdiv import layout  # noqa: E402
from kvdiv.config import checks, files, lookups, plan, roots, startup  # noqa: E402
from kvdiv.names import NAME_REGEX, check_config_names, check_results_root  # noqa: E402

# The whole config is checked here, when the workflow starts, whatever it plans (kvdiv.config): every config file
# re-read refusing duplicate keys, the schema (defaults filled), names, every cross-section check, every action's
# press, every chat template known now, every stratum within its reference model's context if known now.
files.check_config_files(workflow.configfiles)
_GIVEN_CONFIG = copy.deepcopy(config)  # as written: checks of keys only when given (analysis.contrasts)
validate(config, str(files.SCHEMA))
files.fill_result_defaults(config)  # analysis.studies: the registry's default studies this config has
check_config_names(config)  # names become path components (results/models/{model}/, ...)
checks.check_config(config, _GIVEN_CONFIG)
# Every output, log and job benchmark of this config lies under its own root (config key `results`): configs live
# side by side in one working directory (snakemake -d DIR: relative to DIR; workflow files via get_workflow_file).
paths = layout.Layout(check_results_root(config["results"]))
LOOKUPS = lookups.Lookups(config, workflow.basedir, paths, workflow.resource_settings.overwrite_resources)
startup.check_actions(config, LOOKUPS.press_modules(), main_process=workflow.is_main_process)
startup.check_chat_templates(config, LOOKUPS.model_dir)
startup.check_contexts(config, LOOKUPS.model_dir, LOOKUPS.reference_tokenizer)
if workflow.is_main_process:  # last: another config's root, a store or another's outputs is refused (kvdiv.config.roots)
    _owner = roots.owner_of(config, workflow.configfiles, os.getcwd(), workflow.basedir)
    roots.claim_results_root(paths.root, _owner, config.get("studies") or {}, record=False)

    onstart:  # a run (never a dry run) records the root's owner
        roots.claim_results_root(paths.root, _owner, config.get("studies") or {})


ENV = "../envs/kvdiv.yaml"
SHORT_JOB_PRIORITY = plan.SHORT_JOB_PRIORITY
FINAL_TARGETS = []  # each stage's rule file appends the targets `rule all` builds
FIGURE_ITEMS, TABLE_ITEMS, ANALYSED_ITEMS = LOOKUPS.figure_items, LOOKUPS.table_items, LOOKUPS.analysed_items
canonical = lookups.canonical


def get_final_targets():
    return FINAL_TARGETS


def with_checksums(outputs):
    """Parquet outputs plus the checksum file kvdiv.io.write_parquet writes beside each ({name}_sha256 in a dict)."""
    from kvdiv.io import checksum_path

    if isinstance(outputs, dict):
        return {**outputs, **{f"{name}_sha256": str(checksum_path(path)) for name, path in outputs.items()}}
    return [*outputs, *(str(checksum_path(path)) for path in outputs)]


script_code = LOOKUPS.script_code


get_workflow_file = LOOKUPS.workflow_file

# --- models (rules/models.smk) ---
get_models = LOOKUPS.models
get_model_spec = LOOKUPS.model_spec
get_model_params = LOOKUPS.model_params
get_model_dir = LOOKUPS.model_dir
get_model_ready = LOOKUPS.model_ready
get_model_seed = LOOKUPS.model_seed


def get_model_resolve_inputs(wildcards):
    return LOOKUPS.model_resolve_inputs(wildcards.model)


# --- finite state (rules/finite_state.smk) ---
get_finite_state = LOOKUPS.finite_state
get_finite_system_files = LOOKUPS.finite_system_files

# --- studies and documents (rules/documents.smk) ---
get_studies = LOOKUPS.studies
get_study = LOOKUPS.study
get_study_models = LOOKUPS.study_models
get_action_specs = LOOKUPS.action_specs
get_strata = LOOKUPS.strata
get_reference_tokenizer = LOOKUPS.reference_tokenizer
get_stratum_spec = LOOKUPS.stratum_spec
get_documents_source = LOOKUPS.documents_source
get_documents_source_files = LOOKUPS.documents_source_files
get_documents_file = LOOKUPS.documents_file
get_documents = LOOKUPS.documents
get_document_blocks = LOOKUPS.document_blocks
get_document_request = LOOKUPS.document_request
get_stratum_document_blocks = LOOKUPS.stratum_document_blocks
get_documents_blocks_of = LOOKUPS.documents_blocks_of
get_document_ids = LOOKUPS.document_ids
get_document_strata = LOOKUPS.document_strata
get_press_modules = LOOKUPS.press_modules
get_study_press_modules = LOOKUPS.study_press_modules

# --- trajectories (rules/trajectories.smk) ---
get_trajectory_code = LOOKUPS.trajectory_code
get_trajectory_batches = LOOKUPS.trajectory_batches
get_trajectory_priority = LOOKUPS.trajectory_priority
get_trajectory_rule_name = LOOKUPS.trajectory_rule_name
get_trajectory_stratum = LOOKUPS.trajectory_stratum
get_trajectory_store = LOOKUPS.trajectory_store
get_trajectory_stores = LOOKUPS.trajectory_stores
get_generation = LOOKUPS.generation
get_trajectory_resources = LOOKUPS.trajectory_resources
get_trajectory_gpus = LOOKUPS.trajectory_gpus
get_cube = LOOKUPS.cube

# --- metrics, figures, tables, report, leaderboard (rules/metrics.smk, figures.smk, leaderboard.smk) ---
get_analysis = LOOKUPS.analysis
get_metrics_dir = LOOKUPS.metrics_dir
get_metrics_files = LOOKUPS.metrics_files
get_analysis_study = LOOKUPS.analysis_study
get_analysis_outputs = LOOKUPS.analysis_outputs
get_analysis_params = LOOKUPS.analysis_params
get_plot_params = LOOKUPS.plot_params
get_result_code = LOOKUPS.result_code
get_report_code = LOOKUPS.report_code
get_report_setting = LOOKUPS.report_setting
get_leaderboard = LOOKUPS.leaderboard
