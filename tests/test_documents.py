"""Documents: determinism, token-exact lengths, answers recoverable from the prompt, independence across
seeds and studies, the length search against enumeration, scorers on known cases, and clear errors."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import numpy as np
import pytest

from kvdiv.documents import (
    FAMILY_TASKS,
    TASKS,
    Document,
    LengthError,
    count_tokens,
    document_seed,
    generate_prompt,
    generate_stratum,
    read_jsonl,
    score,
    string_match_all,
    string_match_part,
    substring_exact_match,
    tolerance,
    write_jsonl,
)
from kvdiv.documents.generate import dumps_jsonl, task_cycle
from kvdiv.documents.length import fit_length, largest_fitting
from kvdiv.documents.loaders import own_documents, read_records, select_documents
from kvdiv.documents.scoring import normalize_answer
from kvdiv.documents.study import chat_function, stratum_documents
from kvdiv.models import bytes_tokenizer, resolve_model


@pytest.fixture(scope="module")
def byte_tok():
    return bytes_tokenizer()


@pytest.fixture(scope="module")
def byte_chat(byte_tok):
    return chat_function(byte_tok, True)


def stratum(tok, chat, study="s", seed=50, stratum="ruler_1024", n=3, **kw):
    return generate_stratum(
        study=study, stratum=stratum, n_documents=n, master_seed=7, study_seed=seed, tokenizer=tok,
        tokenizer_name="bytes", chat=chat, **kw,
    )


# --- answers are what the prompt says they are -----------------------------------------------------


def check_answers(task: str, prompt: str, answers: list[str]) -> None:
    """Recompute the answer from the prompt text itself (an independent reading of the task)."""
    assert answers and all(a in prompt for a in answers)
    if task.startswith("niah"):
        found = re.findall(r"The secret (?:number|UUID) for ([a-z]+-[a-z]+) is: ([0-9a-f-]+)\.", prompt)
        by_key = collections.defaultdict(list)
        for key, val in found:
            by_key[key].append(val)
        question = re.findall(r"What (?:is|are)[^?\n]*\?", prompt)[-1]
        asked = re.findall(r"[a-z]+-[a-z]+", question)
        assert set(asked) <= set(by_key)
        assert sorted(v for k in asked for v in by_key[k]) == sorted(answers)
        values = [v for _, v in found]
        assert all(values.count(a) == 1 for a in answers)  # no distractor repeats an answer
    elif task == "variable_tracking":
        assign = dict(re.findall(r"VAR ([A-Z]{5}) = (VAR [A-Z]{5}|[0-9]+)\.", prompt))
        value = re.search(r"assigned the value ([0-9]+)", prompt).group(1)

        def resolve(v):
            while assign[v].startswith("VAR "):
                v = assign[v][4:]
            return assign[v]

        assert sorted(v for v in assign if resolve(v) == value) == sorted(answers)
    elif task == "common_words":
        words = re.findall(r"^\d+\. ([a-z]+)$", prompt, flags=re.M)
        counts = collections.Counter(words)
        top = sorted(counts, key=counts.get, reverse=True)
        assert set(top[: len(answers)]) == set(answers)
        assert min(counts[a] for a in answers) > max(c for w, c in counts.items() if w not in answers)
    elif task == "frequent_words":
        body = prompt.split("\n\n")[1]
        counts = collections.Counter(body.split())
        assert min(counts[a] for a in answers) > max(c for w, c in counts.items() if w not in answers)
    elif task == "json_kv":
        data = json.loads(re.search(r"JSON data:\n(\{.*\})\n", prompt).group(1))
        key = re.search(r'Key: "([0-9a-f-]+)"', prompt).group(1)
        assert [data[key]] == answers
    else:  # pragma: no cover - a new task needs its own reading here
        raise AssertionError(f"no answer check for task {task}")


@pytest.mark.parametrize("target", [700, 2000])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_bytes_tokenizer_lengths_and_answers(task, target, byte_tok, byte_chat):
    prompt, answers, n = generate_prompt(task, seed=11, target_length=target, tokenizer=byte_tok, chat=byte_chat)
    assert n == count_tokens(byte_tok, prompt)
    assert target - tolerance(target) <= n <= target
    assert prompt.startswith("<|im_start|>user\n") and "<|im_start|>assistant\n" in prompt
    check_answers(task, prompt, answers)


@pytest.mark.parametrize("target", [256, 1000, 3000])
def test_smollm2_tokenizer_lengths_and_answers(target, smollm2):
    tok = smollm2.tokenizer
    chat = chat_function(tok, True)
    for i, task in enumerate(sorted(TASKS)):
        prompt, answers, n = generate_prompt(
            task, seed=100 + i, target_length=target, tokenizer=tok, chat=chat, max_context=smollm2.max_context,
            model="smollm2", reserve=128,
        )
        assert n == len(tok(prompt, add_special_tokens=False)["input_ids"])
        assert target - tolerance(target) <= n <= target, (task, n)
        check_answers(task, prompt, answers)


def test_without_chat_template_prompt_is_plain_text(byte_tok):
    prompt, answers, n = generate_prompt("niah_multivalue", seed=3, target_length=900, tokenizer=byte_tok, chat=None)
    assert "<|im_start|>" not in prompt and prompt.endswith("are:")
    assert 900 - tolerance(900) <= n <= 900
    check_answers("niah_multivalue", prompt, answers)


# --- determinism and independence ---------------------------------------------------------------------


def test_same_seed_gives_identical_bytes(tmp_path, byte_tok, byte_chat):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_jsonl(stratum(byte_tok, byte_chat, n=4), a)
    write_jsonl(stratum(byte_tok, byte_chat, n=4), b)
    assert a.read_bytes() == b.read_bytes()
    docs = read_jsonl(a)
    assert dumps_jsonl(docs).encode() == a.read_bytes()
    rec = json.loads(a.read_text().splitlines()[0])
    assert list(rec) == ["id", "family", "task", "stratum", "target_length", "prompt", "answers", "n_tokens",
                         "tokenizer", "seed"]
    assert [d.id for d in docs] == [f"s-ruler_1024-{i:04d}" for i in range(4)]


def test_studies_and_seeds_give_independent_documents(byte_tok, byte_chat):
    a = stratum(byte_tok, byte_chat, study="retention50", seed=50, n=6)
    b = stratum(byte_tok, byte_chat, study="retention90", seed=90, n=6)
    assert not {d.prompt for d in a} & {d.prompt for d in b}
    assert not {x for d in a for x in d.answers} & {x for d in b for x in d.answers}
    assert len({d.seed for d in a} | {d.seed for d in b}) == 12
    assert len({d.prompt for d in a}) == 6
    assert document_seed(7, 50, "ruler_1024", 0) != document_seed(7, 50, "ruler_2048", 0)


def test_tasks_cycle_evenly_in_a_seeded_order():
    order = task_cycle("ruler", None, 7, 50, "ruler_1024")
    assert sorted(order) == sorted(FAMILY_TASKS["ruler"])
    orders = {task_cycle("ruler", None, 7, s, "ruler_1024") for s in range(6)}
    assert len(orders) > 1  # the order depends on the seed (10! orders: six seeds all equal has prob ~0)
    assert task_cycle("helmet", ["json_kv"], 7, 50, "helmet_512") == ("json_kv",)


def test_stratum_documents_from_a_resolved_model(tmp_path):
    spec = {"source": "random", "architecture": "llama", "tokenizer": "bytes", "chat_template": True,
            "model_config": {"max_position_embeddings": 1500}}
    resolve_model("tiny", spec, tmp_path / "tiny", seed=0)
    docs = stratum_documents(
        study="st", stratum="helmet_1200", n_documents=4, master_seed=1, study_seed=2, model="tiny",
        model_spec=spec, models_dir=tmp_path, reserve=128, progress=False,
    )
    assert sorted(d.task for d in docs) == sorted(FAMILY_TASKS["helmet"])
    for d in docs:
        assert 1200 - tolerance(1200) <= d.n_tokens <= 1200 and d.prompt.startswith("<|im_start|>user")
    with pytest.raises(LengthError, match=r"target length 1400 plus 128 generated tokens exceeds .*'tiny'.*1500"):
        stratum_documents(study="st", stratum="helmet_1400", n_documents=1, master_seed=1, study_seed=2,
                          model="tiny", model_spec=spec, models_dir=tmp_path, reserve=128, progress=False)


# --- the length search ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_largest_fitting_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    steps = rng.integers(0, 40, size=3000)  # nondecreasing, with flat stretches and jumps
    f_values = np.cumsum(steps) + int(rng.integers(0, 50))
    calls = []

    def f(n):
        calls.append(n)
        return int(f_values[n])

    for target in rng.integers(int(f_values[0]), int(f_values[-2]), size=20):
        calls.clear()
        n, fn = largest_fitting(f, int(target), limit=len(f_values) - 1)
        expected = int(np.nonzero(f_values <= target)[0].max())
        assert (n, fn) == (expected, f_values[expected])
        assert len(calls) <= 2 * int(np.log2(len(f_values))) + 12


def test_fit_length_uses_few_tokenizations(byte_tok):
    calls = []

    def count(text):
        calls.append(1)
        return count_tokens(byte_tok, text)

    unit = "The morning was quiet and the road was long. "
    units, pad, text, n = fit_length(lambda u, p: "Q: " + unit * u + "x " * p, count, 50_000)
    assert 50_000 - tolerance(50_000) <= n <= 50_000 and n == len(text.encode())
    assert len(calls) <= 20


# --- errors --------------------------------------------------------------------------------------------------


def test_unknown_task_and_family_are_clear_errors(byte_tok, byte_chat):
    with pytest.raises(ValueError, match=r"unknown document task 'niah_nope'; known tasks: .*json_kv"):
        generate_prompt("niah_nope", seed=1, target_length=500, tokenizer=byte_tok)
    with pytest.raises(ValueError, match="unknown document task 'nope'"):
        stratum(byte_tok, byte_chat, tasks=["nope"])
    with pytest.raises(ValueError, match="unknown document family 'longbench'"):
        stratum(byte_tok, byte_chat, stratum="longbench_1024")


def test_impossible_lengths_are_clear_errors(byte_tok, byte_chat):
    with pytest.raises(LengthError, match=r"target length 64 is too short for task 'json_kv'"):
        generate_prompt("json_kv", seed=1, target_length=64, tokenizer=byte_tok, chat=byte_chat)
    with pytest.raises(LengthError, match=r"target length 9000 exceeds the context of model 'tiny' \(max_context 4096\)"):
        generate_prompt("json_kv", seed=1, target_length=9000, tokenizer=byte_tok, max_context=4096, model="tiny")
    with pytest.raises(LengthError, match="cannot reach target length 1030 .* 1000 tokens"):
        fit_length(lambda u, p: "a" * (100 + 50 * u), len, 1030, pads=False)


def test_bad_records_are_clear_errors(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "p"}) + "\n")
    with pytest.raises(ValueError, match=r"d.jsonl:1: document record lacks key\(s\) family"):
        read_jsonl(path)


# --- your own documents and loaded records (local files only) -------------------------------------------------


def test_own_documents_are_recounted_and_renamed(tmp_path, byte_tok, byte_chat):
    docs = stratum(byte_tok, byte_chat, study="mine", stratum="ruler_800", n=3)
    path = tmp_path / "mine.jsonl"
    write_jsonl(docs, path)
    got = own_documents(path, study="s", stratum="ruler_800", n_documents=2, tokenizer=byte_tok,
                        tokenizer_name="bytes")
    assert [d.id for d in got] == ["s-ruler_800-0000", "s-ruler_800-0001"]
    assert [(d.prompt, d.answers, d.n_tokens) for d in got] == [(d.prompt, d.answers, d.n_tokens) for d in docs[:2]]
    with pytest.raises(ValueError, match="stratum 'ruler_800' has 3 documents; 4 are needed"):
        own_documents(path, study="s", stratum="ruler_800", n_documents=4, tokenizer=byte_tok, tokenizer_name="bytes")


def own_file(tmp_path, docs, edit=None, line=2) -> Path:
    """``docs`` as a user's JSONL, the record on 1-based ``line`` changed by ``edit(record)``."""
    records = [d.to_record() for d in docs]
    if edit is not None:
        edit(records[line - 1])
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    "edit, field, message",
    [
        (lambda r: r.update(prompt=r["prompt"] + " more" * 200), "prompt", "more than the stratum's target_length 800"),
        (lambda r: r.update(family="helmet"), "family", "stratum 'ruler_800' is of family 'ruler'"),
        (lambda r: r.update(target_length=3052), "target_length", "stratum 'ruler_800' has length 800"),
        (lambda r: r.update(n_tokens="many"), "n_tokens", "must be int"),
        (lambda r: r.update(id="../escape"), "id", "not allowed"),
    ],
)
def test_own_documents_must_fit_and_agree_with_their_stratum(tmp_path, byte_tok, byte_chat, edit, field, message):
    """A 3,052-token prompt or a helmet record must not enter a ruler_800 stratum silently."""
    docs = stratum(byte_tok, byte_chat, study="mine", stratum="ruler_800", n=3)
    path = own_file(tmp_path, docs, edit, line=2)
    with pytest.raises(ValueError) as err:
        own_documents(path, study="s", stratum="ruler_800", n_documents=3, tokenizer=byte_tok, tokenizer_name="bytes")
    assert f"{path}:2: field '{field}'" in str(err.value) and message in str(err.value)


def test_non_utf8_bytes_name_file_and_line(tmp_path, byte_tok, byte_chat):
    docs = stratum(byte_tok, byte_chat, study="mine", stratum="ruler_800", n=2)
    path = own_file(tmp_path, docs)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"ruler", b"rul\xffer", 1)
    path.write_bytes(b"\n".join(lines))
    for read in (read_jsonl, lambda p: list(read_records(p, "t"))):
        with pytest.raises(ValueError, match=rf"{path}:2: not UTF-8 \(byte 0xff"):
            read(path)
    path.write_bytes(b'[1, 2]\n')
    with pytest.raises(ValueError, match=rf"{path}:1: expected a JSON object"):
        read_jsonl(path)


def test_ruler_style_records_are_selected_by_length(tmp_path, byte_tok):
    path = tmp_path / "ruler.jsonl"
    lines = [{"index": i, "input": "w " * (50 * i), "outputs": [str(i)], "length": 100 * i} for i in range(1, 8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    records = list(read_records(path, "niah_single_1"))
    docs = select_documents(records, study="s", stratum="ruler_500", n_documents=2, seed=1, tokenizer=byte_tok,
                            tokenizer_name="bytes", chat=None)
    assert [d.answers for d in docs] == [["5"], ["4"]] and [d.n_tokens for d in docs] == [500, 400]


# --- scorers ---------------------------------------------------------------------------------------------------


def test_scorers_on_known_cases():
    refs = ["4821907", "Quiet-Lantern"]
    assert string_match_all("the numbers are 4821907 and quiet-lantern.", refs) == 1.0
    assert string_match_all("4821907 only", refs) == 0.5
    assert string_match_all("nothing", refs) == 0.0
    assert string_match_part("4821907 only", refs) == 1.0
    assert string_match_part("nothing", refs) == 0.0
    assert normalize_answer("  The  Value: 'ab-c'! ") == "value abc"
    assert substring_exact_match("The value is: AB-C.", ["ab-c"]) == 1.0
    assert substring_exact_match("the value is abd", ["ab-c"]) == 0.0
    assert score("json_kv", "Answer: The ab-c", ["ab-c"]) == 1.0
    assert score("niah_multivalue", "1, 2", ["1", "2", "3", "4"]) == 0.5
    with pytest.raises(ValueError, match="at least one reference"):
        string_match_all("x", [])


def test_document_record_round_trip():
    d = Document("a-b_1-0000", "ruler", "json_kv", "ruler_1", 1, "p", ["x"], 1, "t", 3)
    assert Document.from_record(json.loads(json.dumps(d.to_record()))) == d
    long_id = f"{'s' * 64}-helmet_131072-0047"  # the longest study name allowed
    assert Document.from_record({**d.to_record(), "id": long_id}).id == long_id


# --- the workflow refuses studies that would share documents ------------------------------------------------


def test_workflow_rejects_studies_sharing_a_seed(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[1]
    config = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    first, second = list(config["studies"])[:2]
    config["studies"][second]["seed"] = config["studies"][first]["seed"]
    path = tmp_path / "same_seed.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--nolock", "--cores", "1", "--configfile", str(path)],
        cwd=repo, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode != 0
    assert f"studies {first!r} and {second!r} share seed" in proc.stdout + proc.stderr


def test_document_does_not_depend_on_stratum_size(byte_tok, byte_chat):
    """Document i is the same whether the stratum has i+1 or more documents, and generated alone
    (`first=i`): adding documents to a stratum changes no existing document (the workflow relies on it)."""
    full = stratum(byte_tok, byte_chat, n=4, stratum="helmet_700")
    alone = stratum(byte_tok, byte_chat, n=3, first=2, stratum="helmet_700")
    assert [d.to_record() for d in alone] == [d.to_record() for d in full[2:3]]
    assert [d.id for d in alone] == ["s-helmet_700-0002"]
    assert dumps_jsonl(stratum(byte_tok, byte_chat, n=2, stratum="helmet_700")) == dumps_jsonl(full[:2])
