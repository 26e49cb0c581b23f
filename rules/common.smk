# Config validation (schema defaults filled in place) and the small get_* helpers the rules use.
# Rules read config only through these helpers or params:.
import sys
from pathlib import Path

from snakemake.utils import validate

sys.path.insert(0, str(Path(workflow.basedir)))

from kvdiv.codehash import code_hash  # noqa: E402

validate(config, "../config/schema.yaml")

ENV = "../envs/kvdiv.yaml"

# Each stage's rule file appends the targets `rule all` builds.
FINAL_TARGETS = []


def get_final_targets():
    """Everything `snakemake` builds by default (filled by the included rule files)."""
    return FINAL_TARGETS


def get_models():
    """Names of all configured models."""
    return list(config["models"])


def get_model_spec(model):
    """The config spec of one model."""
    return config["models"][model]


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
    """{action name: press spec} for a study's actions, in the study's order."""
    return {name: config["actions"][name] for name in get_study(study)["actions"]}


def get_strata(study):
    """Stratum names `{family}_{length}` of a study, in config order."""
    return [f"{s['family']}_{s['length']}" for s in get_study(study)["strata"]]
