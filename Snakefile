# kvdiv: divergence timing and cumulative disagreement under KV-cache eviction (arXiv 2609.16617).
# Rules live in rules/*.smk, one stage each; logic lives in the kvdiv package.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/models.smk"
include: "rules/documents.smk"
include: "rules/trajectories.smk"
include: "rules/estimators.smk"
include: "rules/finite_state.smk"
include: "rules/figures.smk"


rule all:
    default_target: True
    input:
        get_final_targets(),
