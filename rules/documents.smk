# stage: documents — per study and stratum, a JSONL of prompts (kvdiv.documents; format in docs/internals.md).
# Sized with the study's reference tokenizer (its `reference_tokenizer`, else its first model).
# Helpers (rules/common.smk): get_documents(study), get_document_ids(study), get_documents_file(study, stratum).


rule documents:
    input:
        model=lambda wildcards: get_model_ready(get_reference_tokenizer(wildcards.study)),
    output:
        "results/{study}/documents/{stratum}.jsonl",
    wildcard_constraints:
        study=r"[A-Za-z0-9_.-]+",
        stratum=r"[A-Za-z0-9]+_[0-9]+",
    params:
        n_documents=lambda wildcards: get_study(wildcards.study).get("documents_per_stratum", 4),
        tasks=lambda wildcards: get_stratum_spec(wildcards.study, wildcards.stratum).get("tasks", []),
        master_seed=config["seed"],
        study_seed=lambda wildcards: get_study(wildcards.study)["seed"],
        model=lambda wildcards: get_reference_tokenizer(wildcards.study),
        model_spec=lambda wildcards: get_model_spec(get_reference_tokenizer(wildcards.study)),
        source=lambda wildcards: get_documents_source(wildcards.study),
        reserve=lambda wildcards: get_study(wildcards.study).get("horizon", 128),
        code=code_hash("documents", "seeds", "io"),
    log:
        "logs/documents/{study}/{stratum}.log",
    benchmark:
        "results/benchmarks/documents/{study}/{stratum}.tsv"
    conda:
        ENV
    script:
        "../workflow_scripts/documents.py"
