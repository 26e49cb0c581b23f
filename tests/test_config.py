"""kvdiv.config: the whole config checked at start-up, whatever the workflow plans.

Each case is a hostile edit of config/smoke.yaml that the workflow used to accept (silently, or with an unclear
error from inside Snakemake or a job, or "Nothing to be done" after a complete run); each must now be refused by
the schema or by the start-up checks with a message naming the key, file or value.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from kvdiv.config import files, plan, startup
from kvdiv.config.checks import check_config
from kvdiv.config.files import ConfigError, fill_result_defaults, load_yaml_strict
from kvdiv.settings import AutoBatch, Runtime
from kvdiv.config.plan import trajectory_rule_name
from kvdiv.models import model_files
from kvdiv.names import check_config_names, check_results_root

REPO = Path(__file__).resolve().parents[1]
SMOKE = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
SHA = "0" * 64


def checked(edit, basedir: Path = REPO, marker_dir: Path | None = None) -> None:
    """Apply ``edit`` to a copy of the smoke config, then what rules/common.smk runs at start-up (the schema, names,
    every cross-key check, the results root; with ``marker_dir``, every action's press too)."""
    config = copy.deepcopy(SMOKE)
    edit(config)
    given = copy.deepcopy(config)
    validate(config, str(REPO / "kvdiv/data/schema.yaml"))
    fill_result_defaults(config)
    check_config_names(config)
    check_config(config, given, basedir=basedir)
    check_results_root(config["results"])
    if marker_dir is not None:
        startup.check_actions(config, list(config["press_modules"]), marker_dir=marker_dir)


def test_the_shipped_configs_pass():
    for path in sorted((REPO / "config").glob("*.yaml")):
        if path.name == "schema.yaml":
            continue
        config = load_yaml_strict(path)
        given = copy.deepcopy(config)
        validate(config, str(REPO / "kvdiv/data/schema.yaml"))
        fill_result_defaults(config)
        check_config_names(config)
        check_config(config, given)


def study(name="retention50"):
    return lambda c: c["studies"][name]


@pytest.mark.parametrize(
    "edit, message",
    [
        # typo'd keys anywhere (additionalProperties: false)
        (lambda c: c["analysis"].update(bootsrap=100), "'bootsrap' was unexpected"),
        (lambda c: c["plotting"].update(dpii=100), "'dpii' was unexpected"),
        # values against their meaning
        (lambda c: c["studies"]["retention50"].update(tv_atol=0.9), "0.9 is greater than the maximum of 0.001"),
        (lambda c: c["plotting"].update(dpi=100000), "100000 is greater than the maximum"),
        (lambda c: next(iter(c["models"].values())).update(documents_per_batch=0), "0 is less than the minimum of 1"),
        (lambda c: next(iter(c["models"].values())).update(documents_per_batch="all"), "'all' does not match '\\^auto"),
        (
            lambda c: next(iter(c["models"].values())).update(memory_budget_gb=0),
            "0 is less than the minimum of 0.001",
        ),
        (
            lambda c: next(iter(c["models"].values())).update(memory_budget_gb=1e-10),
            "1e-10 is less than the minimum of 0.001",
        ),
        (lambda c: next(iter(c["models"].values())).update(kv_layout="paged"), "'paged' is not one of"),
    ],
)
def test_schema_refuses(edit, message):
    with pytest.raises(Exception, match=message):
        checked(edit)


def jsonl(tmp_path: Path, records: list[dict], name: str = "own.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def own(i: int, stratum_length: int = 768, family: str = "ruler", **extra) -> dict:
    record = {
        "family": family,
        "task": "niah_single_1",
        "target_length": stratum_length,
        "seed": i,
        "prompt": f"Remember {i}. What is it?",
        "answers": [str(i)],
    }
    record.update(extra)
    return {k: v for k, v in record.items() if v is not None}


def jsonl_study(path: str | Path):
    def edit(c):
        c["studies"]["retention50"]["documents"] = {"source": "jsonl", "path": str(path), "rendered": False}

    return edit


def decoding_action(**arguments):
    def edit(config):
        config["actions"]["dec"] = {"press": "DecodingPress", "wraps": {"press": "KnormPress"}, **arguments}
        config["studies"]["retention50"]["actions"].append("dec")

    return edit


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c["analysis"].update(window=99), "analysis.window = 99 is deeper than study"),
        (lambda c: c["analysis"].update(cohort_max_tau=64), "analysis.cohort_max_tau = 64 is past the horizon H = 16"),
        (lambda c: c.update(leaderboard={"study": "retention50", "steps": [4, 17]}), "leaderboard.steps: 17 is past"),
        (
            lambda c: c["finite_state"].update(window=6),
            r"finite_state.window = 6 is deeper than finite_state.shapes\[1\]",
        ),
        (lambda c: c["analysis"].update(blocks=[[]]), r"analysis.blocks\[0\] = \[\] is not a window"),
        # references, checked whatever is planned
        (
            lambda c: c["studies"]["retention50"].update(reference_tokenizer="nosuch"),
            "studies.retention50.reference_tokenizer: 'nosuch' is not a configured model",
        ),
        (
            lambda c: c["analysis"].update(studies={"figure5": "nosuch"}),
            "analysis.studies.figure5: 'nosuch' is not a configured study",
        ),
        (
            lambda c: c["analysis"].update(studies={"figure5": "retention50", "figure8": "retention50"}),
            "analysis.studies.figure8: not a result of kvdiv \\(results: figure5, figure6, figure7, table2, table3",
        ),
        (lambda c: c["models"]["tiny"].update(tokenizer="other"), "models.tiny.tokenizer: 'other' is neither 'bytes'"),
        (lambda c: c["models"]["tiny"].update(tokenizer="tiny"), "models.tiny.tokenizer: 'tiny' is neither 'bytes'"),
        (
            lambda c: c["models"].update(
                other=dict(c["models"]["tiny"], tokenizer="tiny"), tiny=dict(c["models"]["tiny"], tokenizer="other")
            ),
            "models.tiny.tokenizer: the tokenizers form a cycle",
        ),
        (
            lambda c: c["analysis"].update(contrasts=[["snapkv_512", "snapkv_hlaf"]]),
            r"analysis.contrasts\[0\] = \['snapkv_512', 'snapkv_hlaf'\]: 'snapkv_hlaf' not a configured action",
        ),
        (
            lambda c: c["analysis"].update(table3_contrast=["snapkv_512", "snapkv_90"]),
            "analysis.table3_contrast = .*: no study of analysis.studies runs both actions",
        ),
        (lambda c: c["analysis"].update(contrasts=[["snapkv_512", "snapkv_512"]]), "contrasts an action with itself"),
        (
            lambda c: c["studies"]["retention50"]["actions"].append("snapkv_typo"),
            "studies.retention50.actions: 'snapkv_typo'",
        ),
        # files: a changed source is checked before anything is planned
        (
            lambda c: c["models"].update(tiny={"source": "gguf", "path": "/data/typo/model.gguf", "sha256": SHA}),
            "models.tiny.path: GGUF file /data/typo/model.gguf does not exist",
        ),
        (
            lambda c: c["models"].update(tiny={"source": "local", "path": "/data/typo/model"}),
            "models.tiny.path: local model directory /data/typo/model does not exist",
        ),
        (
            jsonl_study("/data/typo/docs.jsonl"),
            "studies.retention50.documents.path: /data/typo/docs.jsonl does not exist",
        ),
        (jsonl_study("config"), "studies.retention50.documents.path: config is a directory"),
        (
            lambda c: c["studies"]["retention50"].update(documents={"source": "ruler", "path": "data/{foo}.jsonl"}),
            r"studies.retention50.documents.path = 'data/\{foo\}.jsonl': unknown placeholder \{foo\}",
        ),
        (
            lambda c: c["studies"]["retention50"].update(documents={"source": "ruler", "path": "data/{stratum.jsonl"}),
            "studies.retention50.documents.path = .*write {{ and }} for literal braces",
        ),
        (
            lambda c: c["studies"]["retention50"].update(documents={"source": "ruler", "path": "data/{stratum}.jsonl"}),
            r"documents.path: data/ruler_768.jsonl does not exist \(stratum ruler_768\)",
        ),
        (
            lambda c: c["studies"]["retention50"].update(documents={"source": "jsonl", "path": "x.jsonl"}),
            "studies.retention50.documents.rendered is required with source jsonl",
        ),
        # config shapes that failed inside Snakemake (IndexError, max() of an empty sequence)
        (lambda c: c["studies"]["retention50"].update(models=[]), "studies.retention50.models is empty"),
        (
            lambda c: c["studies"]["retention50"]["strata"][0].update(tasks=[]),
            r"studies.retention50.strata\[0\].tasks is empty",
        ),
        (lambda c: c["analysis"].update(blocks=[]), "analysis.blocks is empty"),
        # sizes that failed with "Allocation failed" / "array is too big", naming no key
        (lambda c: c["studies"]["retention50"].update(replicates=10**9), "studies.retention50: horizon × replicates"),
        (
            lambda c: c["finite_state"].update(shapes=[{"vocab": 8, "horizon": 12}]),
            r"finite_state.shapes\[0\] = \{vocab: 8",
        ),
        (lambda c: c["finite_state"].update(replicates=10**9), "finite_state.replicates = 1000000000"),
        # planning cost bounded: refused in a second instead of minutes of planning
        (
            lambda c: c["studies"]["retention50"].update(documents_per_stratum=100000),
            "documents_per_stratum: the config plans 200004 documents",
        ),
        (
            lambda c: c["studies"]["retention90"].update(seed=50),
            "studies 'retention50' and 'retention90' share seed 50",
        ),
        # decoding presses that cannot change a law within the horizon
        (decoding_action(compression_interval=15, target_size=8), "studies.retention50: action 'dec'.*law of step 17"),
        (decoding_action(compression_interval=4, target_size=10**6), "target_size = 1000000 entries.*never evicts"),
    ],
)
def test_start_up_checks_refuse(edit, message):
    with pytest.raises(ConfigError, match=message):
        checked(edit)


@pytest.mark.parametrize(
    "edit, message",
    [
        # references to what is not configured
        (lambda c: c["studies"]["retention90"].update(models=["gpt5"]), "studies.retention90.models: 'gpt5'"),
        (lambda c: c["models"]["tiny"].update(source="ftp"), "ftp"),
        (lambda c: c["studies"]["retention50"].update(reference_tokenizer="nosuch"), "reference_tokenizer: 'nosuch'"),
        (
            lambda c: c["models"].update(other=dict(c["models"]["tiny"], tokenizer="nosuch")),
            "models.other.tokenizer: 'nosuch'",
        ),
        (
            lambda c: c["studies"]["retention50"].update(documents={"source": "ruler", "path": "data/{foo}.jsonl"}),
            "unknown placeholder {foo}",
        ),
        (
            lambda c: c["models"].update(other={"source": "gguf", "path": "/data/typo/model.gguf", "sha256": SHA}),
            "models.other.path: GGUF file /data/typo/model.gguf does not exist",
        ),
        (
            lambda c: c.update(leaderboard={"study": "retention5"}),
            "leaderboard.study = 'retention5' is not a configured study",
        ),
        (lambda c: c.update(leaderboard={"study": "retention50", "steps": [0]}), "leaderboard"),
        # analysis windows past H or reversed
        (lambda c: c["analysis"].update(blocks=[[1, 4], [5, 8], [9, 32]]), "analysis.blocks\\[2\\] = \\[9, 32\\]"),
        (lambda c: c["analysis"].update(blocks=[[4, 1]]), "analysis.blocks\\[0\\] = \\[4, 1\\]"),
        (lambda c: c["analysis"].update(late=[12, 16]), "analysis.late = \\[12, 16\\]"),
        (lambda c: c.pop("models"), "'models' is a required property"),
        (lambda c: c["studies"].update({"a" * 64: c["studies"].pop("retention90")}), "repeated 64 times"),
        # the output root: a relative path inside the working directory, not into .snakemake or the project's files
        (lambda c: c.update(results="/tmp/abs"), "results: '/tmp/abs' must be a relative path"),
        (lambda c: c.update(results=".snakemake/x"), "component '.snakemake' is not allowed"),
        (lambda c: c.update(results="config"), "would write into the project's own 'config'"),
    ],
)
def test_start_up_refuses_what_the_workflow_refused(edit, message):
    """The cases tests/workflow checked through a snakemake dry run each, in-process: rules/common.smk runs
    exactly these functions when the workflow starts (a few stay at the workflow level as witnesses)."""
    with pytest.raises(Exception, match=message):
        checked(edit)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c["actions"]["recent_half"].update(n_sink=-3), "'n_sink' = -3 is out of range"),
        (
            lambda c: c["actions"]["snapkv_90"].update(compression_ratio=1.5),
            "'compression_ratio' = 1.5 is out of range",
        ),
        (lambda c: c["actions"]["snapkv_90"].update(press="SnapKV"), "unknown press 'SnapKV'"),
        (lambda c: c["actions"].update(snapkv_90={"press": "SnapKVPress", "compression_ratio": 0.0}), "evicts nothing"),
    ],
)
def test_start_up_refuses_actions_whose_press_cannot_run(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=f"actions\\.[a-z_0-9]+: .*{message}"):
        checked(edit, marker_dir=tmp_path)
    assert not list(tmp_path.iterdir())  # no marker: the next start checks again


def test_given_contrasts_only_are_checked():
    """The schema's default contrasts name the paper's actions; a config without them runs those its studies have,
    as long as each item that takes contrasts keeps one (Table 3's single default contrast is then gone: refused at
    start-up, not inside its analysis job)."""

    def edit(c):
        del c["actions"]["snapkv_512"]
        c["studies"]["retention50"]["actions"].remove("snapkv_512")

    with pytest.raises(ConfigError, match=r"analysis\.table3_contrast = .*feeds table3"):
        checked(edit)
    checked(lambda c: (edit(c), c["analysis"].update(table3_contrast=["recent_half", "snapkv_half"])))


def test_two_batches_with_one_rule_name_are_refused():
    assert trajectory_rule_name("a_b", "c", "ruler_768-0000-0003") == trajectory_rule_name(
        "a", "b_c", "ruler_768-0000-0003"
    )

    def edit(c):
        c["models"]["c"] = c["models"]["b_c"] = c["models"].pop("tiny")
        c["studies"] = {
            "a_b": dict(c["studies"]["retention50"], models=["c"]),
            "a": dict(c["studies"]["retention90"], models=["b_c"]),
        }
        c["analysis"]["studies"] = {"figure5": "a"}

    with pytest.raises(
        ConfigError, match="study 'a_b' with model 'c' and study 'a' with model 'b_c' give one trajectory rule name"
    ):
        checked(edit)


@pytest.mark.parametrize(
    "name, message",
    [
        ("a" * 64, "ends with 'a' repeated 64 times"),  # was a PeriodicWildcardError from Snakemake
        ("tiny" + "xy" * 20, "ends with 'xy' repeated 20 times"),
    ],
)
def test_names_snakemake_takes_for_periodic_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        checked(lambda c: c["models"].update({name: c["models"].pop("tiny")}))
    with pytest.raises(ValueError, match=message):
        checked(lambda c: c["studies"].update({name: c["studies"].pop("retention90")}))


@pytest.mark.parametrize("name", ["prompt_ids", "x", "tv", "Prompt_Ids", "branch_start"])
def test_an_action_named_like_a_store_array_is_refused(name):
    def edit(c):
        c["actions"][name] = c["actions"].pop("snapkv_90")
        c["studies"]["retention90"]["actions"] = [name, "recent_90"]

    with pytest.raises(ValueError, match=f"actions: action name '{name}' is reserved"):
        checked(edit)


def test_store_arrays_are_the_stores_names():
    from kvdiv.names import STORE_ARRAYS
    from kvdiv.trajectories import store

    arrays = {
        store.PROMPT_IDS,
        *store.STEP_ARRAYS,
        *store.SWRB_STEP_ARRAYS,
        "branch_start",
        *store.DOCUMENT_COORDS,
        "document",
        "action",
        "replicate",
        "step",
    }
    assert STORE_ARRAYS == arrays


# --- duplicate YAML keys ------------------------------------------------------------------------------------


def test_duplicate_keys_are_refused_naming_file_line_and_key(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(
        "actions:\n  snap: {press: SnapKVPress}\n  other: {press: KnormPress}\n  snap: {press: TOVAPress}\n"
    )
    assert yaml.safe_load(path.read_text())["actions"]["snap"] == {"press": "TOVAPress"}  # what PyYAML does
    with pytest.raises(ConfigError, match=rf"{path}:4: duplicate key 'snap' \(first given at line 2\)"):
        files.check_config_files([path])
    nested = tmp_path / "nested.yaml"
    nested.write_text("studies:\n  s:\n    seed: 1\n    horizon: 8\n    seed: 2\n")
    with pytest.raises(ConfigError, match=rf"{nested}:5: duplicate key 'seed'"):
        load_yaml_strict(nested)
    ok = tmp_path / "ok.yaml"
    ok.write_text("base: &b {x: 1}\nuse:\n  <<: *b\n  y: 2\nlist: [{a: 1}, {a: 2}]\n")
    assert load_yaml_strict(ok) == {"base": {"x": 1}, "use": {"x": 1, "y": 2}, "list": [{"a": 1}, {"a": 2}]}


# --- own documents --------------------------------------------------------------------------------------------


def test_own_documents_derive_stratum_tokens_tokenizer_and_id(tmp_path):
    from kvdiv.documents.loaders import read_own_documents

    path = jsonl(tmp_path, [own(0), own(1, family="helmet")])
    (l0, d0), (l1, d1) = read_own_documents(path, rendered=False)
    assert (l0, l1) == (1, 2)
    assert (d0.stratum, d1.stratum) == ("ruler_768", "helmet_768")
    assert d0.n_tokens == 0 and d0.tokenizer == "" and d0.id == "line-1"
    with pytest.raises(ConfigError, match="stratum 'ruler_768' has 1 documents"):
        checked(jsonl_study(path))  # both strata of retention50 need 2 documents: one each is too few


@pytest.mark.parametrize(
    "record, message",
    [
        (own(0, seed=None), r":2: document record lacks field\(s\) seed \(required: family, task"),
        (own(0, family=None), r":2: document record lacks field\(s\) family "),
        (own(0, task=None), r":2: document record lacks field\(s\) task "),
        (own(0, target_length="768"), ":2: field 'target_length' must be int"),
        (own(0, stratum="ruler_1024"), ":2: field 'target_length' is 768, but stratum 'ruler_1024' has length 1024"),
        (own(0, stratum="helmet_768"), ":2: field 'family' is 'ruler', but stratum 'helmet_768' is of family 'helmet'"),
        (own(0, answers=[""]), r":2: field 'answers'\[0\] = '' is empty"),
        (own(0, answers=["the 7", "."]), r":2: field 'answers'\[1\] = '.' is empty \(or punctuation only\)"),
    ],
)
def test_own_documents_are_checked_at_start_up_naming_file_line_and_field(tmp_path, record, message):
    path = jsonl(tmp_path, [own(9), record, own(10), own(11, family="helmet"), own(12, family="helmet")])
    with pytest.raises(ConfigError, match=f"studies.retention50.documents: {path}{message}"):
        checked(jsonl_study(path))


def test_own_documents_too_few_for_a_stratum(tmp_path):
    path = jsonl(tmp_path, [own(0), own(1), own(2, family="helmet")])
    with pytest.raises(ConfigError, match="stratum 'helmet_768' has 1 documents; documents_per_stratum = 2"):
        checked(jsonl_study(path))
    checked(
        jsonl_study(jsonl(tmp_path, [own(0), own(1), own(2, family="helmet"), own(3, family="helmet")], "ok.jsonl"))
    )


def test_empty_gold_answers_are_refused_in_every_loader(tmp_path):
    from kvdiv.documents.generate import Document
    from kvdiv.documents.loaders import read_records

    record = {
        "id": "d-0",
        "family": "ruler",
        "task": "t",
        "stratum": "ruler_16",
        "target_length": 16,
        "prompt": "p",
        "answers": ["  "],
        "n_tokens": 3,
        "tokenizer": "bytes",
        "seed": 0,
        "rendered": False,
    }
    with pytest.raises(ValueError, match=r"here: field 'answers'\[0\] = '  ' is empty"):
        Document.from_record(record, where="here")
    ruler = tmp_path / "ruler.jsonl"
    ruler.write_text(json.dumps({"input": "text", "outputs": [""]}) + "\n")
    with pytest.raises(ValueError, match=rf"{ruler}:1: field 'answers'\[0\] = '' is empty"):
        list(read_records(ruler, "niah"))


def test_trajectory_batch_priority_orders_batches_by_cost_and_documents_first():
    """Longest batches first (documents × (length + horizon) × (actions + 1)); every document block outranks them."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["models"]["smollm2"]["documents_per_job"] = 2  # blocks of 2: the last block of 3 documents holds one
    config["models"]["smollm2"]["strata_per_job"] = 1
    study = config["studies"]["retention50"]
    study["documents_per_stratum"] = 3
    batches = dict(plan.trajectory_batches(config, "retention50", "smollm2"))
    priority = {name: plan.trajectory_batch_priority(config, "retention50", ids) for name, ids in batches.items()}
    actions = len(study["actions"]) + 1
    assert priority["ruler_4096-0000-0001"] == round(2 * (4096 + 128) * actions / 1000)
    assert priority["ruler_4096-0002-0003"] == round(1 * (4096 + 128) * actions / 1000)
    assert priority["helmet_4096-0000-0001"] > priority["helmet_3072-0000-0001"] > priority["helmet_2176-0000-0001"]
    assert max(priority.values()) < plan.SHORT_JOB_PRIORITY


def test_strata_per_job_groups_the_same_block_of_consecutive_strata():
    """strata_per_job k: one batch per group of k consecutive strata (config order) and index block, holding that
    block of each of them; every document in exactly one batch; adding documents adds batches and changes none."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["models"]["smollm2"].update(documents_per_job=2, strata_per_job=4)  # 6 strata: groups of 4 and 2
    config["models"]["smollm2"].pop("documents_per_batch", None)
    study = config["studies"]["retention50"]
    study["documents_per_stratum"] = 4
    batches = plan.trajectory_batches(config, "retention50", "smollm2")
    group = "ruler_2176+ruler_3072+ruler_4096+helmet_2176"
    assert [name for name, _ in batches] == [
        f"{group}-0000-0001",
        f"{group}-0002-0003",
        "helmet_3072+helmet_4096-0000-0001",
        "helmet_3072+helmet_4096-0002-0003",
    ]
    assert dict(batches)[f"{group}-0002-0003"] == [
        f"retention50-{s}-{i:04d}" for s in ("ruler_2176", "ruler_3072", "ruler_4096", "helmet_2176") for i in (2, 3)
    ]
    every = [doc for _, ids in batches for doc in ids]
    blocks = [doc for *_, ids in plan.document_blocks(config, "retention50", 2) for doc in ids]
    assert sorted(every) == sorted(blocks) and len(set(every)) == len(every) == 6 * 4
    cost = plan.trajectory_batch_priority(config, "retention50", dict(batches)[f"{group}-0000-0001"])
    assert cost == round(2 * ((2176 + 3072 + 4096 + 2176) + 4 * 128) * (len(study["actions"]) + 1) / 1000)
    study["documents_per_stratum"] = 6  # two more documents per stratum: one new block per group, the others kept
    grown = dict(plan.trajectory_batches(config, "retention50", "smollm2"))
    assert all(grown[name] == ids for name, ids in batches) and len(grown) == len(batches) + 2
    with pytest.raises(ValueError, match="strata_per_job must be an integer >= 1"):
        Runtime(threads=1, documents_per_job=1, strata_per_job=0)
    with pytest.raises(ValueError, match="documents_per_batch must be an integer >= 1, got 0"):
        Runtime(threads=1, documents_per_job=1, documents_per_batch=0)
    runtime = Runtime.split({**config["models"]["smollm2"], "documents_per_batch": 16})[1]
    assert (
        runtime.documents_per_batch == 16 and Runtime.split(config["models"]["smollm2"])[1].documents_per_batch is None
    )
    assert runtime.batching == 16 and Runtime.split(config["models"]["smollm2"])[1].batching is None
    auto = Runtime.split({**config["models"]["smollm2"], "documents_per_batch": "auto"})[1]
    assert auto.batching == AutoBatch(None)
    budget = Runtime.split({**config["models"]["smollm2"], "documents_per_batch": "auto", "memory_budget_gb": 2.5})
    assert budget[1].batching == AutoBatch(2_500_000_000) and "memory_budget_gb" not in budget[0]
    with pytest.raises(ValueError, match="documents_per_batch must be an integer >= 1 or 'auto', got 'all'"):
        Runtime(threads=1, documents_per_job=1, documents_per_batch="all")
    with pytest.raises(ValueError, match="memory_budget_gb sizes documents_per_batch: auto, not 16"):
        Runtime(threads=1, documents_per_job=1, documents_per_batch=16, memory_budget_gb=2)
    for bad in (-1, 0, 1e-10, float("nan"), True):  # 1e-10 GB: AutoBatch(0), refused where a job would start
        with pytest.raises(ValueError, match=rf"memory_budget_gb must be a number >= 0.001 \(1 MB\), got {bad!r}"):
            Runtime(threads=1, documents_per_job=1, documents_per_batch="auto", memory_budget_gb=bad)


def test_a_batch_of_many_strata_keeps_a_short_name():
    """40 strata in one job: the batch (a log and benchmark file name) is named by its first stratum and size, not
    by 40 joined names; every name stays a short path component and a valid rule name."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["models"]["smollm2"].update(documents_per_job=4, strata_per_job=40)
    study = config["studies"]["retention50"]
    study["strata"] = [{"family": "ruler", "length": 600 + i} for i in range(45)]
    names = [name for name, _ in plan.trajectory_batches(config, "retention50", "smollm2")]
    assert names == ["ruler_600+39-more-0000-0003", "ruler_640+ruler_641+ruler_642+ruler_643+ruler_644-0000-0003"]
    assert all(len(name) < 255 for name in names)


def test_every_rule_but_the_trajectory_batches_outranks_them():
    """Every named rule (not `all`) carries SHORT_JOB_PRIORITY, so a study's follow-up jobs run as soon as its last
    batch ends instead of in the run's tail; the batches' own priorities stay below it."""
    import re

    for path in sorted((REPO / "rules").glob("*.smk")):
        text = path.read_text()
        for match in re.finditer(r"^rule (\w+):\n((?:    .*\n|\n)*)", text, flags=re.M):
            name, body = match.group(1), match.group(2)
            if name != "all":
                assert "    priority: SHORT_JOB_PRIORITY\n" in body, (
                    f"{path.name}: rule {name} has no SHORT_JOB_PRIORITY"
                )


def test_known_context_reads_what_start_up_can_know(tmp_path):
    """kvdiv.config.startup.known_context: the spec's max_context first, a random model's config, then the
    config.json (its text_config where it has one) of a model resolved from this very spec; nothing for an unresolved
    model, one resolved from another spec, or files that are not JSON objects with a positive integer (the job then
    reads the model and says what is wrong)."""
    resolved = tmp_path / "m"
    resolved.mkdir()
    hf = {"source": "hf", "id": "org/model", "revision": "main", "threads": 2}
    assert startup.known_context(hf, resolved) is None  # nothing there yet
    (resolved / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    assert startup.known_context(hf, resolved) is None  # not resolved: no provenance.json
    (resolved / "provenance.json").write_text(json.dumps({"spec": {"source": "hf", "id": "org/other"}}))
    assert startup.known_context(hf, resolved) is None  # resolved from another spec: resolve_model runs first
    (resolved / "provenance.json").write_text(
        json.dumps({"spec": {"source": "hf", "id": "org/model", "revision": "main"}})
    )
    assert startup.known_context(hf, resolved) == 8192  # scheduling keys (threads) are not what the model is
    assert startup.known_context({**hf, "max_context": 100}, resolved) == 100
    (resolved / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 32768}}))
    assert startup.known_context(hf, resolved) == 32768
    hostile = [
        "[1, 2]",
        "{not json",
        '{"max_position_embeddings": true}',
        '{"max_position_embeddings": -1}',
        "[" * 10**5,
    ]
    for text in [*hostile, '{"max_position_embeddings": "8192"}', " " * (model_files.JSON_MAX_BYTES + 1)]:
        (resolved / "config.json").write_text(text)
        assert startup.known_context(hf, resolved) is None, text[:40]
    (resolved / "config.json").write_bytes(b"\xff\xfe")
    assert startup.known_context(hf, resolved) is None
    (resolved / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    (resolved / "provenance.json").write_text("[]")
    assert startup.known_context(hf, resolved) is None
    random = {"source": "random", "architecture": "llama", "model_config": {"max_position_embeddings": 300}}
    assert startup.known_context(random, tmp_path / "absent") == 300
    from kvdiv.models.sources import TINY_CONFIG

    default = TINY_CONFIG["max_position_embeddings"]  # what a random model's config holds unless model_config sets it
    assert startup.known_context({"source": "random", "architecture": "llama"}, tmp_path / "absent") == default
    for value in (None, 0):  # the job falls back to the tokenizer's limit: not known here
        random["model_config"]["max_position_embeddings"] = value
        assert startup.known_context(random, tmp_path / "absent") is None


def test_check_contexts_holds_the_reference_model_to_its_strata(tmp_path):
    """Every stratum + horizon of a study against its reference tokenizer model's known context (whose tokens size
    the documents, as the document job checks); another model of the study is not held to it here (the trajectory
    job checks each document's own token count)."""
    short = {"source": "random", "architecture": "llama", "model_config": {"max_position_embeddings": 600}}
    config = {
        "models": {"short": short, "long": {"source": "random", "architecture": "llama"}},
        "studies": {"s": {"strata": [{"family": "ruler", "length": 512}], "horizon": 64, "models": ["long", "short"]}},
    }
    reference = {"s": "long"}
    check = lambda: startup.check_contexts(config, lambda m: str(tmp_path / m), reference.__getitem__)  # noqa: E731
    short["model_config"]["max_position_embeddings"] = 575
    check()  # 512 + 64 = 576 > 575, but "short" is not the reference tokenizer
    reference["s"] = "short"
    with pytest.raises(ValueError, match=r"studies\.s: stratum ruler_512 plus horizon 64 = 576 tokens") as err:
        check()
    assert "model 'short' (575)" in str(err.value) and "is 511 tokens" in str(err.value)
    assert "model_config.max_position_embeddings" in str(err.value)
    short["model_config"]["max_position_embeddings"] = 576
    check()


STARTUP_IMPORTS = """
import json, sys
from pathlib import Path
import yaml
from snakemake.utils import validate
from kvdiv.config import checks, files, startup
config = yaml.safe_load(Path(sys.argv[1]).read_text())
validate(config, str(files.SCHEMA))
files.fill_result_defaults(config)
checks.check_config(config, config)
models = Path(sys.argv[2])
startup.check_chat_templates(config, lambda m: str(models / m))
def reference(study):
    return (config["studies"][study].get("models") or list(config["models"]))[0]
startup.check_contexts(config, lambda m: str(models / m), reference)
print(json.dumps(sorted(m for m in ("torch", "transformers", "kvpress") if m in sys.modules)))
"""


@pytest.mark.parametrize("name", ["smoke.yaml", "config.yaml"])
def test_start_up_checks_import_no_torch(tmp_path, name):
    """What rules/common.smk runs in every snakemake start (and every cluster job's re-read) beside the actions'
    check (a process of its own) stays free of torch, transformers and kvpress, also with a resolved model to read."""
    import subprocess
    import sys

    models = tmp_path / "models"
    resolved = models / ("tiny" if name == "smoke.yaml" else "smollm2")
    resolved.mkdir(parents=True)
    (resolved / "provenance.json").write_text(json.dumps({"spec": {}}))
    (resolved / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-c", STARTUP_IMPORTS, str(repo / "config" / name), str(models)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == []


def test_start_up_template_probe_skips_a_model_resolved_from_another_spec(tmp_path):
    """A directory resolved from an earlier spec is not the model this spec will be: resolve_model writes it again
    before any job reads its template, so its broken template is not held against the new spec (and is, once the
    provenance says it was resolved from this spec, scheduling keys aside)."""
    from kvdiv.models.chat_templates import TemplateProbeError

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "tokenizer_config.json").write_text(json.dumps({"chat_template": "same"}))
    config = {"models": {"m": {"source": "hf", "id": "org/new"}}}
    model_dir = lambda name: str(tmp_path / name)  # noqa: E731
    (tmp_path / "m" / "provenance.json").write_text(json.dumps({"spec": {"source": "hf", "id": "org/old"}}))
    startup.check_chat_templates(config, model_dir)
    (tmp_path / "m" / "provenance.json").write_text(json.dumps({"spec": dict(config["models"]["m"], threads=4)}))
    with pytest.raises(TemplateProbeError, match=r"models.m \("):
        startup.check_chat_templates(config, model_dir)
