# stage: models — resolve each configured model once into results/models/{model}/
# (safetensors + config + tokenizer + provenance.json; see kvdiv.models.sources). The directory is built
# beside its final path and renamed into place whole, with provenance.json written last inside it,
# so provenance.json (the rule's output) exists only in a complete model directory.
# Helpers for downstream rules (rules/common.smk): get_model_dir(model), get_model_ready(model).


wildcard_constraints:
    model=NAME_REGEX,


rule resolve_model:
    priority: SHORT_JOB_PRIORITY
    input:
        get_model_resolve_inputs,
    output:
        get_model_ready("{model}"),
    params:
        spec=lambda wildcards: get_model_params(wildcards.model),
        seed=lambda wildcards: get_model_seed(wildcards.model),
        code=script_code("resolve_model.py"),
    log:
        paths.log("resolve_model", "{model}"),
    benchmark:
        paths.job_benchmark("resolve_model", "{model}")
    conda:
        ENV
    script:
        "../workflow_scripts/resolve_model.py"
