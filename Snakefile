# kvdiv: divergence timing and cumulative disagreement under KV-cache eviction (arXiv 2609.16617).
# Rules live in rules/*.smk, one stage each; logic lives in the kvdiv package.
from snakemake.utils import min_version

min_version("9.0")


# The embedded default, unless the user names their own config(s) with --configfile (which then replace it
# rather than being merged into it: a paper run must not inherit the default's SmolLM2 model). Found beside this
# Snakefile, so `snakemake -d DIR` works from any working directory (outputs go under DIR).
if not workflow.overwrite_configfiles:

    configfile: f"{workflow.basedir}/config/config.yaml"


include: "rules/common.smk"
include: "rules/models.smk"
include: "rules/documents.smk"
include: "rules/trajectories.smk"
include: "rules/metrics.smk"
include: "rules/finite_state.smk"
include: "rules/figures.smk"
include: "rules/leaderboard.smk"


rule all:
    default_target: True
    input:
        get_final_targets(),
