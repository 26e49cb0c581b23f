"""A careless and a hostile user on the surfaces of issue 39: kvdiv.compare, own documents and ``compress: context``,
results roots, ``kvdiv show --html --force``, the config's lists and names, chat templates, finite-state files.

Every case is one thing such a user does; each asserts an error that names the bad thing (the prompt, action, document,
file and line, key or path), or the correct behaviour. None is silent (accepted and wrong) and none is unclear (an error
from inside torch, kvpress, numpy or Snakemake). Elsewhere, for the same sweep: the cache key of own presses
(tests/trajectories/test_cache_keys.py), hangs in user code (tests/test_watchdog.py), through snakemake
(tests/workflow/test_press_modules_workflow.py, tests/workflow/test_results_roots.py,
tests/workflow/test_finite_workflow.py).
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path

import pytest
import torch
import yaml
from kvpress import SnapKVPress, StreamingLLMPress

import kvdiv
from kvdiv.config.files import ConfigError

REPO = Path(__file__).resolve().parents[1]
SMOKE = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
PROMPT = "Remember the word lantern. " + "grass is green. " * 12 + "Which word?"
SNAP = {"snap": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 4}}


def compare(loaded, prompts=PROMPT, actions=None, model=None, **kwargs):
    return kvdiv.compare(
        model if model is not None else loaded.model,
        loaded.tokenizer,
        prompts,
        actions=SNAP if actions is None else actions,
        horizon=3,
        replicates=1,
        progress=False,
        **kwargs,
    )


# --------------------------------------------------------------------------------------------- kvdiv.compare


def _nan_model(loaded):
    model = copy.deepcopy(loaded.model)
    with torch.no_grad():
        next(p for name, p in model.named_parameters() if name.endswith("q_proj.weight"))[0, 0] = float("nan")
    return model


@pytest.mark.parametrize(
    "case, call, message",
    [
        ("empty prompt", lambda m: compare(m, [PROMPT, "  "]), r"compare: prompt 1 is empty"),
        ("no token ids", lambda m: compare(m, [[5, 6, 7], []]), r"compare: prompt 1 has 0 token id\(s\)"),
        ("one token id", lambda m: compare(m, [[5]]), r"compare: prompt 0 has 1 token id\(s\); at least 2"),
        (
            "a press class",
            lambda m: compare(m, actions={"snap": SnapKVPress}),
            r"actions\['snap'\] is a press class \(SnapKVPress\), not a press: give an instance",
        ),
        (
            "not a press",
            lambda m: compare(m, actions={"snap": object()}),
            r"actions\['snap'\] is a object, not a kvpress press instance",
        ),
        (
            "a spec without press",
            lambda m: compare(m, actions={"snap": {"compression_ratio": 0.5}}),
            r"actions\['snap'\] is a mapping without 'press'",
        ),
        (
            "a token id past the vocabulary",
            lambda m: compare(m, [[5, 6, 10**6, 7]]),
            r"document 'prompt-0000': token id 1000000 at position 2 is outside the model's vocabulary",
        ),
        (
            "a negative token id",
            lambda m: compare(m, [[5, -1, 7]]),
            r"token id -1 at position 1 is outside the model's vocabulary",
        ),
        (
            "SnapKV's window longer than the prompt",
            lambda m: compare(
                m, [[5, 6, 7, 8, 9]], actions={"snap": SnapKVPress(compression_ratio=0.5, window_size=8)}
            ),
            r"document 'prompt-0000': action 'snap' at its 5 entries compressed: its observation window of 8 cover",
        ),
        (
            "StreamingLLM's n_sink longer than the prompt (a spec)",
            lambda m: compare(
                m,
                [[5, 6, 7, 8, 9]],
                actions={"r": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 6}},
            ),
            r"document 'prompt-0000': action 'r' at its 5 entries compressed: its n_sink = 6 sinks cover all 5",
        ),
        (
            "a wrapped window longer than the prompt",
            lambda m: compare(
                m,
                [[5, 6, 7, 8, 9]],
                actions={"ada": {"press": "AdaKVPress", "wraps": {"press": "SnapKVPress", "window_size": 5}}},
            ),
            r"action 'ada' \(SnapKVPress at press\): window_size = 5",
        ),
        (
            "n_sink past the tokens evict_first_step compresses",
            lambda m: compare(m, [[5, 6, 7, 8, 9]], actions={"r": StreamingLLMPress(n_sink=4)}, evict_first_step=True),
            r"gives it 4 \(its prompt but the last token, evict_first_step\)",
        ),
        ("a model on the meta device", lambda m: compare(m, model=copy.deepcopy(m.model).to("meta")), r"meta device"),
        (
            "a NaN weight",
            lambda m: compare(m, model=_nan_model(m)),
            r"the model's weight '.*q_proj\.weight' holds 1 non-finite value\(s\)",
        ),
        (
            "a prompt of ten million characters",
            lambda m: compare(m, "x" * 10_000_001),
            r"the message itself has 10000001 characters.*the prompt is too long, not the template",
        ),
        (
            "compress: context on token ids",
            lambda m: compare(m, [[5, 6, 7, 8]], compress="context"),
            r"compress: context needs the prompt's text",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else None,
)
def test_compare_names_the_bad_input(tiny_llama, case, call, message):
    with pytest.raises(ValueError, match=message):
        call(tiny_llama)


def test_nan_weights_are_refused_in_every_call(tiny_llama):
    model = _nan_model(tiny_llama)
    for _ in range(2):  # the first call used to fail with a misleading message, a later one to return NaN δ
        with pytest.raises(ValueError, match=r"non-finite"):
            compare(tiny_llama, model=model)


def test_a_window_the_prompt_exceeds_runs(tiny_llama):
    """A window one token shorter than the prompt runs where the action allows being a positional rule (kvpress's
    limit is the window covering every entry; kvdiv's own refusal of a degenerate action is waived)."""
    snap = {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 5, "allow_degenerate": True}
    result = compare(tiny_llama, [[5, 6, 7, 8, 9, 10]], actions={"snap": snap})
    assert result.actions == ["snap"]
    with pytest.raises(ValueError, match="positional rule"):
        compare(tiny_llama, [[5, 6, 7, 8, 9, 10]], actions={"snap": SnapKVPress(0.5, window_size=5)})


# ------------------------------------------------------------------------- own documents and compress: context


def own_record(**changes):
    return {
        "family": "ruler",
        "task": "mine",
        "target_length": 256,
        "seed": 1,
        "prompt": "Some context. " * 10 + "\n\nWhat is it?",
        "answers": ["it"],
        **changes,
    }


def write_jsonl(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    "record, message",
    [
        (own_record(prompt=""), r"mine\.jsonl:2: field 'prompt' is empty"),
        (own_record(prompt=" \n "), r"mine\.jsonl:2: field 'prompt' is empty"),
        (own_record(prompt="x" * 2_000_001), r"mine\.jsonl:2: field 'prompt' has 2000001 characters"),
        (own_record(question=""), r"mine\.jsonl:2: field 'question' must be a non-empty string"),
        (own_record(question=3), r"mine\.jsonl:2: field 'question' must be a non-empty string"),
    ],
    ids=["empty", "blank", "10 MB", "empty question", "question not text"],
)
def test_own_documents_are_refused_at_start_naming_file_and_line(tmp_path, record, message):
    from kvdiv.documents.loaders import check_own_documents

    path = write_jsonl(tmp_path / "mine.jsonl", own_record(), record)
    with pytest.raises(ValueError, match=message):
        check_own_documents(path, strata=["ruler_256"], n_documents=1, rendered=False)


def test_a_prompt_of_fewer_than_two_tokens_is_named_by_file_and_line(tiny_llama, tmp_path):
    from kvdiv.documents.loaders import own_documents

    path = write_jsonl(tmp_path / "mine.jsonl", own_record(), own_record(prompt="x", rendered=True))
    with pytest.raises(ValueError, match=r"mine\.jsonl:2: field 'prompt' renders to 1 token\(s\)"):
        own_documents(
            path,
            study="s",
            stratum="ruler_256",
            n_documents=2,
            tokenizer=tiny_llama.tokenizer,
            tokenizer_name="t",
            rendered=True,
            horizon=4,
        )


def test_the_question_field_survives_the_document_job_and_splits_the_prompt(tiny_llama, tmp_path):
    """A record's `question` reaches the trajectory job (it used to be dropped), and compress: context keeps exactly
    it (and the template's tail) out of compression."""
    from kvdiv.documents.loaders import own_documents
    from kvdiv.documents.render import context_length, prompt_token_ids

    question = "Which colour was the door? Answer in one word."
    record = own_record(prompt="The door was red. " * 8 + question, question=question)
    path = write_jsonl(tmp_path / "mine.jsonl", record)
    (doc,) = own_documents(
        path,
        study="s",
        stratum="ruler_256",
        n_documents=1,
        tokenizer=tiny_llama.tokenizer,
        tokenizer_name="t",
        rendered=False,
        horizon=4,
    )
    out = doc.to_record()
    assert out["question"] == question
    ids = prompt_token_ids(out, tiny_llama.tokenizer, True)
    k = context_length(out, tiny_llama.tokenizer, True, ids)
    context = tiny_llama.tokenizer.decode(ids[:k])
    assert context.endswith("The door was red. ") or context.rstrip().endswith("red.")
    assert question not in context and question in tiny_llama.tokenizer.decode(ids[k:])


@pytest.mark.parametrize(
    "document, message",
    [
        (  # the question first, the context after it: the field says so
            {
                "prompt": "Which colour was the door?\n\n" + "The door was red. " * 20,
                "question": "Which colour was the door?",
            },
            r"its question does not end its message \(\d+ characters follow it\)",
        ),
        (  # the same without the field: the last paragraph is the context, not a question
            {"prompt": "Which colour was the door?\n\n" + "The door was red. " * 20},
            r"would take its last paragraph \(\d+ characters\) for the question, but it is not shorter",
        ),
        ({"prompt": "The door was red. " * 20 + "Which colour?"}, r"give the record a 'question' field"),
        (
            {"prompt": "The door was red.\n\nWhich colour?", "question": "Which size?"},
            r"its 'question' field does not occur in its prompt",
        ),
    ],
    ids=["question first", "question first without the field", "no blank line", "question not in prompt"],
)
def test_compress_context_refuses_to_guess(document, message):
    from kvdiv.documents.render import question_text

    with pytest.raises(ValueError, match=message):
        question_text({"id": "d", **document})


def test_compress_context_takes_a_trailing_question_or_last_paragraph():
    from kvdiv.documents.render import question_text

    context = "The door was red. " * 20
    assert question_text({"id": "d", "prompt": context + "\n\nWhich colour?"}) == "Which colour?"
    assert (
        question_text({"id": "d", "prompt": context + "Which colour?", "question": "Which colour?"}) == "Which colour?"
    )


# ------------------------------------------------------------------------------------------------- results roots


def claim(work: Path, root: str, owner: str, studies=("retention50",)):
    from kvdiv.config.roots import claim_results_root

    claim_results_root(root, owner, list(studies), work)


def test_a_root_belongs_to_one_config(tmp_path):
    claim(tmp_path, "results/a", "config file a.yaml")
    claim(tmp_path, "results/a", "config file a.yaml", ["retention50", "more"])  # the same config, edited
    with pytest.raises(ConfigError, match=r"'results/a' belongs to config file a\.yaml .*config file b\.yaml plans"):
        claim(tmp_path, "results/a", "config file b.yaml")
    claim(tmp_path, "results/b", "config file b.yaml")  # its own root, beside
    owner = json.loads((tmp_path / "results/a/kvdiv-root.json").read_text())
    assert owner == {"owner": "config file a.yaml", "studies": ["more", "retention50"]}


@pytest.mark.parametrize(
    "setup, root, message",
    [
        (
            "cube",
            "results/retention50/cube/tiny.zarr/mine",
            r"lies inside the zarr store 'results/retention50/cube/tiny\.zarr'",
        ),
        ("cube", "results/retention50/cube", r"lies inside 'results/retention50', an output of config file a\.yaml"),
        ("model", "results/models/tiny/x", r"lies inside the resolved model directory 'results/models/tiny'"),
        ("none", "results/models2/x.zarr", r"lies inside the zarr store 'results/models2/x\.zarr'"),
    ],
)
def test_a_root_inside_a_store_or_another_configs_outputs_is_refused(tmp_path, setup, root, message):
    claim(tmp_path, "results", "config file a.yaml")
    (tmp_path / "results/retention50/cube/tiny.zarr").mkdir(parents=True)
    (tmp_path / "results/retention50/cube/tiny.zarr/zarr.json").write_text("{}")
    (tmp_path / "results/models/tiny").mkdir(parents=True)
    (tmp_path / "results/models/tiny/provenance.json").write_text("{}")
    with pytest.raises(ConfigError, match=message):
        claim(tmp_path, root, "config file b.yaml")


def test_a_root_whose_outputs_would_hold_another_root_is_refused(tmp_path):
    claim(tmp_path, "results/smoke", "config file smoke.yaml")
    claim(tmp_path, "results", "config file config.yaml", ["retention50"])  # beside: fine
    with pytest.raises(ConfigError, match=r"'results' would hold 'results/smoke' .*keeps its results root"):
        claim(tmp_path, "results", "config file config.yaml", ["retention50", "smoke"])


def test_owner_is_the_file_setting_results_or_results_owner(tmp_path):
    from kvdiv.config.roots import owner_of

    (tmp_path / "a.yaml").write_text("results: results/a\n")
    (tmp_path / "over.yaml").write_text("seed: 3\n")
    assert owner_of({}, [tmp_path / "a.yaml", tmp_path / "over.yaml"], tmp_path) == "config file a.yaml"
    assert owner_of({}, [tmp_path / "over.yaml"], tmp_path) == "config file over.yaml"
    assert owner_of({"results_owner": "exp"}, [tmp_path / "a.yaml"], tmp_path) == "results_owner 'exp'"


def test_a_marker_that_is_not_one_is_named(tmp_path):
    (tmp_path / "results/a").mkdir(parents=True)
    (tmp_path / "results/a/kvdiv-root.json").write_text("not json")
    with pytest.raises(ConfigError, match=r"kvdiv-root\.json does not say which config owns its results root"):
        claim(tmp_path, "results/a", "config file a.yaml")


# ------------------------------------------------------------------------------------- kvdiv show --html --force


def _special(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "target"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        (tmp_path / "real.html").write_text("mine")
        path.symlink_to(tmp_path / "real.html")
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        return Path("/dev/null")
    return path


@pytest.mark.parametrize(
    "kind, message",
    [
        ("device", r"is not a regular file \(a device, pipe or socket\); refusing to replace it \(even with --force"),
        ("fifo", r"is not a regular file"),
        ("symlink", r"is a symbolic link; refusing to replace it or its target \(even with --force\)"),
        ("directory", r"is a directory"),
    ],
)
def test_force_replaces_only_regular_files(tmp_path, kind, message):
    from kvdiv.show.html import check_html_target

    path = _special(tmp_path, kind)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        check_html_target(path, force=True)
    assert time.perf_counter() - start < 5  # a fifo is never opened (that would block)
    if kind == "symlink":
        assert (tmp_path / "real.html").read_text() == "mine"


def test_force_replaces_a_regular_file(tmp_path):
    from kvdiv.io import atomic_path
    from kvdiv.show.html import check_html_target

    (tmp_path / "notes.html").write_text("not kvdiv's")
    with pytest.raises(ValueError, match=r"not a page kvdiv wrote"):
        check_html_target(tmp_path / "notes.html")
    assert check_html_target(tmp_path / "notes.html", force=True) == tmp_path / "notes.html"
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ValueError, match=r"not a regular file or directory"):
        with atomic_path(tmp_path / "pipe") as tmp:
            tmp.write_text("x")


# ------------------------------------------------------------------------------------------- the config's lists


def checked(edit) -> None:
    """What rules/common.smk checks at start-up of config/smoke.yaml changed by ``edit``."""
    from kvdiv.config.checks import check_config
    from kvdiv.config.files import validate
    from kvdiv.names import check_config_names

    config = copy.deepcopy(SMOKE)
    edit(config)
    given = copy.deepcopy(config)
    validate(config)
    check_config_names(config)
    check_config(config, given, basedir=REPO)


def _many_actions(c, n=200):
    for i in range(n - 2):
        c["actions"][f"a{i}"] = {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 64}
    c["studies"]["retention90"]["actions"] += [f"a{i}" for i in range(n - 2)]


def _rename_actions(c):
    c["actions"] = {f"my_{k}": v for k, v in c["actions"].items()}
    for spec in c["studies"].values():
        spec["actions"] = [f"my_{a}" for a in spec["actions"]]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c["models"].update({"tiny\n": c["models"].pop("tiny")}), r"model name 'tiny\\n' is not allowed"),
        (lambda c: c.update(results="results/x\n"), r"component 'x\\n' is not allowed"),
        (
            lambda c: c["studies"]["retention50"].update(models=["tiny", "tiny"]),
            r"studies\.retention50\.models lists 'tiny' more than once",
        ),
        (
            lambda c: c["studies"]["retention50"]["actions"].append("snapkv_half"),
            r"studies\.retention50\.actions lists 'snapkv_half' more than once",
        ),
        (_rename_actions, r"analysis\.contrasts = .*none is a pair of actions of study 'retention50'"),
        (
            lambda c: c["analysis"].update(contrasts=[["snapkv_half", "recent_hlaf"]]),
            r"'recent_hlaf' not a configured action",
        ),
        (
            lambda c: c.update(time_budget={"press_import": 0}),
            r"minimum of 0 \(On instance\['time_budget'\]\['press_import'\]",
        ),
        (lambda c: c.update(time_budget={"trajectory_jobs": 10}), r"'trajectory_jobs' was unexpected"),
        (lambda c: c.update(results_owner=""), r"'' should be non-empty \(On instance\['results_owner'\]"),
    ],
    ids=[
        "newline name",
        "newline root",
        "model twice",
        "action twice",
        "defaults name no action",
        "typo'd contrast",
        "no import budget",
        "typo'd budget",
        "empty owner",
    ],
)
def test_the_configs_lists_are_checked_at_start(edit, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        checked(edit)


def test_200_actions_pass_and_a_cache_past_the_memory_is_refused_naming_its_size():
    """200 actions plan and run (the smoke design end to end on the tiny model); what fails with many actions on a large
    model is the chain caches' memory: refused before allocating, with the sizes (kvdiv.kernel.chain_slots)."""
    from kvdiv.kernel import chain_slots

    checked(lambda c: _many_actions(c, 200))
    slots = chain_slots.ChainSlots(30, 3, 64, torch.float32, torch.device("cpu"))
    with pytest.raises(
        MemoryError,
        match=r"the chains of one document need 17386\.7 GiB of cache \(402 chains: .* 30 layers, 1000000 entries",
    ):
        slots.grow(402, 10**6)
    assert slots.n_slots == 0


# ---------------------------------------------------------------------------------------------- chat templates

LOOPS = [
    "{% for i in range(100000) %}{% set x = range(100000)|join(',') %}{% endfor %}{{ messages[0]['content'] }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}{{ messages[0]['content'] }}",
    "{{ 'x' * 1000000000 }}{{ messages[0]['content'] }}",
    "{% set n = 100000000 %}{{ (9 ** n) % 7 }}{{ messages[0]['content'] }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
    "{{ messages[0]['content'] }}",
]


@pytest.mark.parametrize("template", LOOPS, ids=["join loop", "nested loops", "huge *", "huge **", "doubling"])
def test_a_looping_chat_template_is_refused_within_seconds(template):
    from kvdiv.models.chat_templates import TemplateBudgetError, probe_template

    start = time.perf_counter()
    with pytest.raises(TemplateBudgetError, match=r"models\.m: its chat template ran past the rendering budget"):
        probe_template(template, owner="models.m")
    assert time.perf_counter() - start < 8


# ------------------------------------------------------------------------------------------- finite-state files


def _system(tmp_path: Path, vocab: int, horizon: int) -> Path:
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"vocab": vocab, "horizon": horizon, "reference": {}, "intervention": {}}))
    return path


@pytest.mark.parametrize(
    "vocab, horizon, message",
    [
        (10**12, 1, r"big\.json: vocab 1000000000000 and horizon 1 give 1 histories × 1000000000000 tokens"),
        (10**5, 2, r"big\.json: vocab 100000 and horizon 2 give 100001 histories"),
    ],
)
def test_a_huge_system_file_is_refused_before_allocating(tmp_path, vocab, horizon, message):
    from kvdiv.finite.system import load_system

    with pytest.raises(ValueError, match=message):
        load_system(_system(tmp_path, vocab, horizon))


def test_exact_enumeration_refuses_what_it_cannot_hold():
    import numpy as np

    from kvdiv.finite.exact import enumerate_exact
    from kvdiv.finite.system import FiniteSystem

    V = 600  # 601 histories of V: a 2.9 MB file, whose depth-1 pair TV would hold 600^3 = 2.2e8 values
    table = np.full((V + 1, V), 1.0 / V)
    system = FiniteSystem(V, 2, table, table, name="wide")
    with pytest.raises(ValueError, match=r"system 'wide': exact enumeration needs arrays of 360000 history pairs"):
        enumerate_exact(system)


@pytest.mark.parametrize(
    "text, message",
    [
        ("finite_sate: {seed: 1}\n", r"c\.yaml: no finite_state section \(it has: finite_sate\)"),
        ("finite_state: {sede: 1}\n", r"c\.yaml: finite_state: Additional properties are not allowed \('sede'"),
        ("finite_state: {shapes: [{vocab: 2, horizon: '8'}]}\n", r"finite_state\.shapes\.0\.horizon: '8' is not of"),
        ("finite_state: {shapes: [{vocab: 8, horizon: 12}]}\n", r"finite_state\.shapes\[0\] = .*path pairs"),
    ],
)
def test_finite_suite_config_typos_are_errors_naming_the_file(tmp_path, capsys, text, message):
    import re

    from kvdiv.cli import main

    (tmp_path / "c.yaml").write_text(text)
    assert main(["finite", "suite", str(tmp_path / "out"), "--config", str(tmp_path / "c.yaml")]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_a_corrupt_provenance_file_is_named(tmp_path):
    from kvdiv.models.model_files import read_provenance

    (tmp_path / "provenance.json").write_text('{"source": ')
    with pytest.raises(ValueError, match=r"provenance\.json is not valid JSON"):
        read_provenance(tmp_path)
