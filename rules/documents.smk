# stage: documents — one job per block of a stratum's documents (the reference tokenizer model's
# `documents_per_job`, get_document_blocks in rules/common.smk: one process, one tokenizer load per block), then per
# study and stratum a JSONL gathering them (kvdiv.documents; record format in docs/internals.md). Sized with the
# study's reference tokenizer (its `reference_tokenizer`, else its first model). Document i of a stratum is a pure
# function of the seeds, the stratum and i, so adding documents to a stratum reruns only the block they join.
# Helpers (rules/common.smk): get_documents(study), get_document_ids(study), get_documents_blocks_of(study, ids).


rule document:
    priority: SHORT_JOB_PRIORITY
    input:
        model=lambda wildcards: get_model_ready(get_reference_tokenizer(wildcards.study)),
        source=lambda wildcards: get_documents_source_files(wildcards.study, wildcards.stratum),
    output:
        paths.document_block("{study}", "{stratum}", "{first}", "{last}"),
    wildcard_constraints:
        study=NAME_REGEX,
        stratum=layout.STRATUM_REGEX,
        first="[0-9]+",
        last="[0-9]+",
    params:
        request=lambda w: get_document_request(w.study, w.stratum, w.first, w.last),
        code=script_code("document.py"),
    log:
        paths.log("document", "{study}/{stratum}/{first}-{last}"),
    benchmark:
        paths.job_benchmark("document", "{study}/{stratum}/{first}-{last}")
    conda:
        ENV
    script:
        "../workflow_scripts/document.py"


rule documents:
    priority: SHORT_JOB_PRIORITY
    input:
        lambda wildcards: get_stratum_document_blocks(wildcards.study, wildcards.stratum),
    output:
        paths.documents_file("{study}", "{stratum}"),
    wildcard_constraints:
        study=NAME_REGEX,
        stratum=layout.STRATUM_REGEX,
    params:
        code=script_code("documents.py"),
    log:
        paths.log("documents", "{study}/{stratum}"),
    conda:
        ENV
    script:
        "../workflow_scripts/documents.py"


FINAL_TARGETS.extend(path for study in get_studies() for path in get_documents(study))
