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
from kvdiv.documents.scoring import lcs_length, normalize_answer, ordered_recall, rouge_l_recall
from kvdiv.documents.render import build_prompt, prompt_token_ids, render_prompt
from kvdiv.settings import DocumentRequest
from kvdiv.documents.study import stratum_documents
from kvdiv.documents.render import chat_function
from kvdiv.models.sources import resolve_model
from kvdiv.models.tokenization import bytes_tokenizer


@pytest.fixture(scope="module")
def byte_tok():
    return bytes_tokenizer()


@pytest.fixture(scope="module")
def byte_chat(byte_tok):
    return chat_function(byte_tok, True)


def stratum(tok, chat, study="s", seed=50, stratum="ruler_1024", n=3, **kw):
    return generate_stratum(
        study=study,
        stratum=stratum,
        n_documents=n,
        master_seed=7,
        study_seed=seed,
        tokenizer=tok,
        tokenizer_name="bytes",
        chat=chat,
        **{"horizon": 0, **kw},
    )


# --- answers are what the prompt says they are -----------------------------------------------------


def check_answers(task: str, prompt: str, answers: list[str]) -> None:
    """Recompute the answer from the prompt text itself (an independent reading of the task)."""
    assert answers and (task == "passage_editing" or all(a in prompt for a in answers))  # edited sentences are new
    if task.startswith("niah") and not task.endswith("_list"):
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
    elif task == "niah_multikey_list":  # every needle, in order of appearance; the question names no key
        found = re.findall(r"The secret number for ([a-z]+-[a-z]+) is: ([0-9]+)\.", prompt)
        assert [v for _, v in found] == answers and len({k for k, _ in found}) == len(found) >= 2
        assert f"all {len(answers)} of them" in prompt and not any(k in prompt.split("\n\n")[-1] for k, _ in found)
    elif task == "niah_multivalue_list":  # every value of the one key, in order of appearance
        found = re.findall(r"The secret number for ([a-z]+-[a-z]+) is: ([0-9]+)\.", prompt)
        assert len({k for k, _ in found}) == 1 and [v for _, v in found] == answers and len(answers) >= 2
        assert f"all {len(answers)} secret numbers for {found[0][0]}" in prompt
    elif task == "variable_tracking_list":  # the chain from the asked value, in order of assignment
        assign = dict(re.findall(r"VAR ([A-Z]{5}) = (VAR [A-Z]{5}|[0-9]+)\.", prompt))
        value = re.search(r"starts with the value ([0-9]+)", prompt).group(1)
        chain = [v for v, rhs in assign.items() if rhs == value]
        while any(rhs == f"VAR {chain[-1]}" for rhs in assign.values()):
            chain.append(next(v for v, rhs in assign.items() if rhs == f"VAR {chain[-1]}"))
        assert chain == answers and f"all {len(answers)} of its assignments" in prompt
    elif task == "common_words_list":  # every word listed more than once (2-4 times), all others once
        counts = collections.Counter(re.findall(r"^\d+\. ([a-z]+)$", prompt, flags=re.M))
        assert sorted(w for w, c in counts.items() if c > 1) == sorted(answers)
        assert all(2 <= counts[a] <= 4 for a in answers) and f"all {len(answers)} of them" in prompt
    elif task == "story_retelling":  # every event's object, by day, days in order of appearance
        events = re.findall(r"On day (\d+), ([A-Z][a-z]+) ([a-z]+) the ([a-z]+ [a-z]+) at the ([a-z]+)\.", prompt)
        assert [int(day) for day, *_ in events] == list(range(1, len(events) + 1))
        assert [obj for *_, obj, _ in events] == answers and len(set(answers)) == len(answers) >= 2
        assert f"from day 1 to day {len(answers)}" in prompt
    elif task == "register_listing":  # owner, code and shelf of every entry, entry by entry
        entries = re.findall(
            r"Register entry (\d+): owner ([a-z]+-[a-z]+), code ([0-9]{5}), shelf ([A-Z]-[0-9]{2})\.", prompt
        )
        assert [int(k) for k, *_ in entries] == list(range(1, len(entries) + 1))
        assert [f for _, *fields in entries for f in fields] == answers and len(set(answers)) == len(answers)
    elif task == "passage_editing":  # the letter's sentences with the two asked replacements
        letter = re.search(r"\nThe letter begins here\.\n(.*)\nThe letter ends here\.\n", prompt, re.S).group(1)
        lines = letter.split("\n")
        assert [int(line.split(". ", 1)[0]) for line in lines] == list(range(1, len(lines) + 1))
        letter = " ".join(line.split(". ", 1)[1] for line in lines)
        old_new = re.search(r"write ([A-Za-z]+) instead of ([A-Za-z]+) and ([a-z]+) instead of ([a-z]+)\.", prompt)
        new_name, old_name, new_place, old_place = old_new.groups()
        sentences = re.findall(r"[A-Z][a-z]+ [a-z]+ the [a-z]+ [a-z]+ at the [a-z]+\.", letter)
        assert " ".join(sentences) == letter and old_name in letter and old_place in letter
        assert new_name not in letter and new_place not in letter
        edit = {old_name: new_name, old_place + ".": new_place + "."}
        assert [" ".join(edit.get(w, w) for w in s.split()) for s in sentences] == answers
    elif task == "record_recall":  # every record's code, in the order the records appear
        records = re.findall(r"The code for ([a-z]+-[a-z]+) is ([0-9]+)\.", prompt)
        assert [code for _, code in records] == answers and len(answers) == 24
        assert len({key for key, _ in records}) == len(records)  # one code per key
    else:  # pragma: no cover - a new task needs its own reading here
        raise AssertionError(f"no answer check for task {task}")


#: The shortest byte budgets of tasks that do not fit 512 bytes: record_recall's 24 records alone take ~1.1K bytes
#: (~330 SmolLM2 tokens); niah_multiquery's question names four keys. The long-answer tasks list fewer items at short
#: lengths (kvdiv.documents.base.item_count) and fit 512 bytes.
MIN_BYTES = {"record_recall": 1200, "niah_multiquery": 520}


@pytest.mark.parametrize("target", [512, 700, 2000])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_bytes_tokenizer_lengths_and_answers(task, target, byte_tok, byte_chat):
    if target < MIN_BYTES.get(task, 0):
        with pytest.raises(LengthError, match=f"too short for task '{task}'"):
            generate_prompt(task, seed=11, target_length=target, tokenizer=byte_tok, chat=byte_chat, horizon=0)
        return
    message, prefix, answers, n = generate_prompt(
        task, seed=11, target_length=target, tokenizer=byte_tok, chat=byte_chat, horizon=0
    )
    prompt = build_prompt(message, prefix, byte_chat)  # the reference rendering the document was sized with
    assert n == count_tokens(byte_tok, prompt)
    assert target - tolerance(target) <= n <= target
    assert prompt.startswith("<|im_start|>user\n") and "<|im_start|>assistant\n" in prompt
    assert "<|im_start|>" not in message + prefix and prompt.endswith(prefix)  # the document keeps the message
    check_answers(task, message, answers)


@pytest.mark.parametrize("target", [256, 1000, 3000])
def test_smollm2_tokenizer_lengths_and_answers(target, smollm2):
    tok = smollm2.tokenizer
    chat = chat_function(tok, True)
    for i, task in enumerate(sorted(TASKS)):
        if task == "record_recall" and target < 512:  # 24 records: ~330 tokens before any filler
            with pytest.raises(LengthError, match="too short for task 'record_recall'"):
                generate_prompt(task, seed=100 + i, target_length=target, tokenizer=tok, chat=chat, horizon=0)
            continue
        message, prefix, answers, n = generate_prompt(
            task,
            seed=100 + i,
            target_length=target,
            tokenizer=tok,
            chat=chat,
            max_context=smollm2.max_context,
            model="smollm2",
            horizon=128,
        )
        prompt = build_prompt(message, prefix, chat)
        assert n == len(tok(prompt, add_special_tokens=False)["input_ids"])
        assert target - tolerance(target) <= n <= target, (task, n)
        check_answers(task, prompt, answers)


def test_without_chat_template_prompt_is_plain_text(byte_tok):
    message, prefix, answers, n = generate_prompt(
        "niah_multivalue", seed=3, target_length=900, tokenizer=byte_tok, chat=None, horizon=0
    )
    prompt = build_prompt(message, prefix, None)
    assert prompt == f"{message}\n\n{prefix}" and prefix and n == count_tokens(byte_tok, prompt)
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
    assert list(rec) == [
        "id",
        "family",
        "task",
        "stratum",
        "target_length",
        "prompt",
        "answer_prefix",
        "rendered",
        "answers",
        "n_tokens",
        "tokenizer",
        "seed",
    ]
    assert rec["rendered"] is False and "<|im_start|>" not in rec["prompt"]
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
    assert len(orders) > 1  # the order depends on the seed (3! orders: six seeds all equal has prob 6^-5)
    assert task_cycle("helmet", ["json_kv"], 7, 50, "helmet_512") == ("json_kv",)


def request(**given) -> DocumentRequest:
    """A DocumentRequest of study 'st' with model 'tiny' (the given fields replaced)."""
    base = dict(
        study="st",
        stratum="ruler_800",
        first=0,
        count=1,
        master_seed=1,
        study_seed=2,
        model="tiny",
        model_spec={},
        source={"source": "synthetic"},
        horizon=0,
    )
    return DocumentRequest(**(base | given))


def test_stratum_documents_from_a_resolved_model(tmp_path):
    spec = {
        "source": "random",
        "architecture": "llama",
        "tokenizer": "bytes",
        "chat_template": True,
        "model_config": {"max_position_embeddings": 1500},
    }
    resolve_model("tiny", spec, tmp_path / "tiny", seed=0)
    docs = stratum_documents(
        request(stratum="helmet_1200", count=len(FAMILY_TASKS["helmet"]), model_spec=spec, horizon=128),
        tmp_path,
        progress=False,
    )
    assert sorted(d.task for d in docs) == sorted(FAMILY_TASKS["helmet"])
    tok = bytes_tokenizer()
    for d in docs:  # documents keep the message; n_tokens counts the reference model's rendering
        assert 1200 - tolerance(1200) <= d.n_tokens <= 1200 and not d.rendered and "<|im_start|>" not in d.prompt
        assert d.n_tokens == count_tokens(tok, render_prompt(d.to_record(), tok, True))
    with pytest.raises(LengthError, match=r"target length 1400 plus 128 generated tokens exceeds .*'tiny'.*1500"):
        stratum_documents(request(stratum="helmet_1400", model_spec=spec, horizon=128), tmp_path, progress=False)


def test_a_document_block_holds_each_index_own_document(tmp_path):
    """rule document writes blocks (kvdiv.documents.study.write_document_block): block first..last, in one process,
    holds exactly document_at(i) for each i, so where blocks are cut changes no record."""
    from kvdiv.documents import read_jsonl
    from kvdiv.documents.study import document_at, write_document_block

    spec = {
        "source": "random",
        "architecture": "llama",
        "tokenizer": "bytes",
        "model_config": {"max_position_embeddings": 1500},
    }
    resolve_model("tiny", spec, tmp_path / "tiny", seed=0)
    block = request(stratum="ruler_600", first=2, count=3, model_spec=spec, horizon=16)
    written = write_document_block(tmp_path / "0002-0004.jsonl", block, tmp_path, progress=False)
    assert [d.id for d in written] == ["st-ruler_600-0002", "st-ruler_600-0003", "st-ruler_600-0004"]
    assert read_jsonl(tmp_path / "0002-0004.jsonl") == written
    assert written == [document_at(block, i, tmp_path) for i in (2, 3, 4)]


TOKENIZER_ONLY_BLOCK = """
import json, sys
from kvdiv.models.tokenization import tokenizer_only_process
marked = tokenizer_only_process()
from kvdiv.documents.study import write_document_block
from kvdiv.settings import DocumentRequest
request = DocumentRequest(**json.loads(sys.argv[1]))
write_document_block(sys.argv[2], request, sys.argv[3], progress=False)
try:
    import torch  # noqa: F401
    importable = True
except ImportError:
    importable = False
print(json.dumps({"marked": marked, "torch_importable": importable, "transformers": "transformers" in sys.modules}))
"""


def tokenizer_only_block(block: DocumentRequest, out: Path, models_dir: Path) -> dict:
    """Write ``block`` in a fresh interpreter made tokenizer-only (what workflow_scripts/document.py does)."""
    import subprocess
    import sys

    fields = {k: (list(v) if isinstance(v, tuple) else v) for k, v in block._asdict().items()}
    proc = subprocess.run(
        [sys.executable, "-c", TOKENIZER_ONLY_BLOCK, json.dumps(fields), str(out), str(models_dir)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PyTorch was not found" not in proc.stderr  # transformers' advisory is silenced there
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_tokenizer_only_process_writes_the_same_block_without_torch(tmp_path):
    """The document rule's process never imports torch (kvdiv.models.tokenization.tokenizer_only_process): transformers
    loads the same tokenizer, so the block is byte-identical to one written in a process that has torch."""
    from kvdiv.documents.study import write_document_block
    from kvdiv.models.tokenization import tokenizer_only_process

    spec = {
        "source": "random",
        "architecture": "llama",
        "tokenizer": "bytes",
        "chat_template": True,
        "model_config": {"max_position_embeddings": 1500},
    }
    resolve_model("tiny", spec, tmp_path / "tiny", seed=0)
    block = request(stratum="helmet_700", first=1, count=3, model_spec=spec, horizon=16)
    write_document_block(tmp_path / "with_torch.jsonl", block, tmp_path, progress=False)
    facts = tokenizer_only_block(block, tmp_path / "without_torch.jsonl", tmp_path)
    assert facts == {"marked": True, "torch_importable": False, "transformers": True}
    assert (tmp_path / "without_torch.jsonl").read_bytes() == (tmp_path / "with_torch.jsonl").read_bytes()
    import sys

    assert tokenizer_only_process() is False and sys.modules["torch"] is not None  # torch here: nothing changes


def test_smollm2_block_is_the_same_without_torch(smollm2, tmp_path):
    """SmolLM2's tokenizer (tokenizer.json, its chat template) sizes the same documents without torch."""
    from kvdiv.documents.study import write_document_block

    spec = dict(smollm2.spec)
    block = request(stratum="ruler_576", count=2, model="smollm2", model_spec=spec, horizon=128)
    models_dir = smollm2.path.parent
    write_document_block(tmp_path / "with_torch.jsonl", block, models_dir, progress=False)
    facts = tokenizer_only_block(block, tmp_path / "without_torch.jsonl", models_dir)
    assert facts["torch_importable"] is False
    assert (tmp_path / "without_torch.jsonl").read_bytes() == (tmp_path / "with_torch.jsonl").read_bytes()


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
        generate_prompt("niah_nope", seed=1, target_length=500, tokenizer=byte_tok, horizon=0)
    with pytest.raises(ValueError, match="unknown document task 'nope'"):
        stratum(byte_tok, byte_chat, tasks=["nope"])
    with pytest.raises(ValueError, match="unknown document family 'longbench'"):
        stratum(byte_tok, byte_chat, stratum="longbench_1024")


def test_impossible_lengths_are_clear_errors(byte_tok, byte_chat):
    with pytest.raises(LengthError, match=r"target length 64 is too short for task 'json_kv'"):
        generate_prompt("json_kv", seed=1, target_length=64, tokenizer=byte_tok, chat=byte_chat, horizon=0)
    with pytest.raises(
        LengthError, match=r"target length 9000 exceeds the context of model 'tiny' \(max_context 4096\)"
    ):
        generate_prompt(
            "json_kv", seed=1, target_length=9000, tokenizer=byte_tok, max_context=4096, model="tiny", horizon=0
        )
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
    got = own_documents(
        path,
        study="s",
        stratum="ruler_800",
        n_documents=2,
        tokenizer=byte_tok,
        tokenizer_name="bytes",
        rendered=False,
        chat=byte_chat,
        horizon=0,
    )
    assert [d.id for d in got] == ["s-ruler_800-0000", "s-ruler_800-0001"]
    fields = lambda d: (d.prompt, d.answer_prefix, d.rendered, d.answers, d.n_tokens)  # noqa: E731
    assert [fields(d) for d in got] == [fields(d) for d in docs[:2]]
    with pytest.raises(ValueError, match="stratum 'ruler_800' has 3 documents; 4 are needed"):
        own_documents(
            path,
            study="s",
            stratum="ruler_800",
            n_documents=4,
            tokenizer=byte_tok,
            tokenizer_name="bytes",
            rendered=False,
            horizon=0,
        )
    with pytest.raises(
        ValueError,
        match=r"mine.jsonl:1: record says rendered=False but the config declares "
        r"documents.rendered=True",
    ):
        own_documents(
            path,
            study="s",
            stratum="ruler_800",
            n_documents=2,
            tokenizer=byte_tok,
            tokenizer_name="bytes",
            rendered=True,
            horizon=0,
        )


def test_own_rendered_documents_are_fed_unchanged(tmp_path, byte_tok, byte_chat):
    """A user's file of final prompts (records without `rendered`, as kvdiv wrote them before) declared
    `rendered: true` in the config: counted and fed as they are, never templated again."""
    docs = stratum(byte_tok, byte_chat, study="mine", stratum="ruler_800", n=2)
    path = tmp_path / "old.jsonl"
    old = []
    for d in docs:
        rec = d.to_record()
        rec["prompt"] = build_prompt(rec.pop("prompt"), rec.pop("answer_prefix"), byte_chat)
        del rec["rendered"]
        old.append(json.dumps(rec))
    path.write_text("\n".join(old) + "\n")
    with pytest.raises(ValueError, match=r"old.jsonl:1: document record lacks key\(s\) rendered"):
        read_jsonl(path)
    got = own_documents(
        path,
        study="s",
        stratum="ruler_800",
        n_documents=2,
        tokenizer=byte_tok,
        tokenizer_name="bytes",
        rendered=True,
        chat=byte_chat,
        horizon=0,
    )
    for d, g in zip(docs, got):
        assert g.rendered and g.answer_prefix == "" and g.prompt == render_prompt(d.to_record(), byte_tok, True)
        assert render_prompt(g.to_record(), byte_tok, True) == g.prompt  # no second template
        assert render_prompt(g.to_record(), byte_tok, False) == g.prompt
        assert g.n_tokens == d.n_tokens


def test_render_prompt_per_model(byte_tok):
    rec = {"id": "d", "prompt": "What is 2 + 2?", "answer_prefix": "Answer:", "rendered": False}
    assert (
        render_prompt(rec, byte_tok, True)
        == "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\nAnswer:"
    )
    assert render_prompt(rec, byte_tok, False) == "What is 2 + 2?\n\nAnswer:"
    assert render_prompt({**rec, "answer_prefix": ""}, byte_tok, False) == "What is 2 + 2?"
    assert (
        prompt_token_ids(rec, byte_tok, False)
        == byte_tok("What is 2 + 2?\n\nAnswer:", add_special_tokens=False)["input_ids"]
    )
    with pytest.raises(ValueError, match="rendered prompt cannot carry an answer_prefix"):
        render_prompt({**rec, "rendered": True}, byte_tok, True)
    bad = {
        "id": "a",
        "family": "ruler",
        "task": "t",
        "stratum": "ruler_9",
        "target_length": 9,
        "prompt": "p",
        "answer_prefix": "A:",
        "rendered": True,
        "answers": ["x"],
        "n_tokens": 1,
        "tokenizer": "t",
        "seed": 0,
    }
    with pytest.raises(ValueError, match="r:1: a rendered prompt cannot carry an answer_prefix"):
        Document.from_record(bad, where="r:1")
    with pytest.raises(ValueError, match=r"r:1: 'rendered' must be a bool, got 'yes'"):
        Document.from_record({**bad, "answer_prefix": "", "rendered": "yes"}, where="r:1")


def test_jsonl_source_must_declare_rendered(tmp_path):
    spec = {"source": "random", "architecture": "llama", "tokenizer": "bytes", "chat_template": True}
    resolve_model("tiny", spec, tmp_path / "tiny", seed=0)
    common = dict(stratum="ruler_800", model_spec=spec)
    with pytest.raises(ValueError, match=r"study 'st': documents.source 'jsonl' needs documents.rendered"):
        stratum_documents(
            request(**common, source={"source": "jsonl", "path": str(tmp_path / "x.jsonl")}), tmp_path, progress=False
        )
    with pytest.raises(ValueError, match=r"documents.rendered: true does not apply to synthetic"):
        stratum_documents(request(**common, source={"source": "synthetic", "rendered": True}), tmp_path, progress=False)


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
        own_documents(
            path,
            study="s",
            stratum="ruler_800",
            n_documents=3,
            tokenizer=byte_tok,
            tokenizer_name="bytes",
            rendered=False,
            chat=byte_chat,
            horizon=0,
        )
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
    path.write_bytes(b"[1, 2]\n")
    with pytest.raises(ValueError, match=rf"{path}:1: expected a JSON object"):
        read_jsonl(path)


def test_ruler_style_records_are_selected_by_length(tmp_path, byte_tok):
    path = tmp_path / "ruler.jsonl"
    lines = [{"index": i, "input": "w " * (50 * i), "outputs": [str(i)], "length": 100 * i} for i in range(1, 8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    records = list(read_records(path, "niah_single_1"))
    docs = select_documents(
        records,
        study="s",
        stratum="ruler_500",
        n_documents=2,
        seed=1,
        tokenizer=byte_tok,
        tokenizer_name="bytes",
        chat=None,
        horizon=0,
    )
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
    items = ["amber lantern", "Quiet-Fox", "48213", "C-14"]
    assert ordered_recall("1. The amber lantern\n2. quiet-fox, 48213, shelf C-14.", items) == 1.0
    assert ordered_recall("C-14 48213 quiet-fox amber lantern", items) == 0.25  # all named, in reverse order
    assert ordered_recall("48213 amber lantern 48213 quiet-fox", items) == 0.5  # the best ordered pick: 2 of 4
    assert ordered_recall("bold lantern, amber lanterns", ["old lantern", "amber lantern"]) == 0.0  # whole words
    assert ordered_recall("", items) == 0.0
    assert rouge_l_recall("the cat sat on a mat", ["The cat sat.", "On the mat!"]) == 1.0  # articles, punctuation
    assert rouge_l_recall("mat on cat", ["cat sat on mat"]) == 0.25  # LCS: one word of 4
    assert rouge_l_recall("a cat on the mat, yes", ["cat sat on mat"]) == 0.75  # LCS "cat on mat"
    assert lcs_length(list("abcbdab"), list("bdcaba")) == 4
    with pytest.raises(ValueError, match="non-empty reference"):
        rouge_l_recall("x", ["..."])


def test_item_count_grows_with_the_target_and_fits_a_byte_budget():
    from kvdiv.documents.base import OVERHEAD_BYTES, item_count

    counts = [item_count(t, 80, 72) for t in range(64, 9000, 37)]
    assert counts == sorted(counts) and min(counts) == 2 and max(counts) == 40
    assert item_count(2048, 80, 56) == 25 and item_count(2048, 80, 72) == 23 and item_count(4096, 80, 56) == 40
    for t in range(600, 4000, 61):  # above the floor of 2, the items and the overhead fit t bytes
        n = item_count(t, 80, 72)
        assert n == 2 or n * 72 + OVERHEAD_BYTES <= t


#: The long-answer tasks: the metric that scores them.
LONG_TASKS = {
    "niah_multikey_list": "all",
    "niah_multivalue_list": "all",
    "variable_tracking_list": "all",
    "common_words_list": "all",
    "story_retelling": "ordered",
    "register_listing": "ordered",
    "passage_editing": "rouge_l",
}


@pytest.mark.parametrize("task", sorted(LONG_TASKS))
def test_long_answers_score_one_zero_and_the_listed_fraction(task, byte_tok, byte_chat):
    """A complete answer (a numbered list of every gold item) scores 1, an empty one 0, the first third of the items
    a third (ROUGE-L: the third's share of the reference words), and for ordered recall the items in reverse order
    one item's worth."""
    _, _, answers, _ = generate_prompt(task, seed=5, target_length=2000, tokenizer=byte_tok, chat=byte_chat, horizon=0)
    assert TASKS[task].metric == LONG_TASKS[task] and len(answers) >= 6
    complete = "\n".join(f"{i}. {a}" for i, a in enumerate(answers, 1))
    assert score(task, complete, answers) == 1.0 and score(task, "", answers) == 0.0
    k = len(answers) // 3
    if LONG_TASKS[task] == "rouge_l":
        words = [len(normalize_answer(a).split()) for a in answers]
        assert score(task, " ".join(answers[:k]), answers) == pytest.approx(sum(words[:k]) / sum(words))
    else:
        assert score(task, "\n".join(answers[:k]), answers) == pytest.approx(k / len(answers))
    if LONG_TASKS[task] == "ordered":
        assert score(task, "\n".join(reversed(answers)), answers) == pytest.approx(1 / len(answers))


def test_document_record_round_trip():
    d = Document(
        id="a-b_1-0000",
        family="ruler",
        task="json_kv",
        stratum="ruler_1",
        target_length=1,
        prompt="p",
        answer_prefix="A:",
        answers=["x"],
        n_tokens=1,
        tokenizer="t",
        seed=3,
    )
    assert Document.from_record(json.loads(json.dumps(d.to_record()))) == d
    long_id = f"{'s' * 64}-helmet_131072-0047"  # the longest study name allowed
    assert Document.from_record({**d.to_record(), "id": long_id}).id == long_id


# --- the workflow refuses studies that would share documents ------------------------------------------------


def test_workflow_rejects_studies_sharing_a_seed(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    first, second = list(config["studies"])[:2]
    config["studies"][second]["seed"] = config["studies"][first]["seed"]
    path = tmp_path / "same_seed.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--nolock", "--cores", "1", "--configfile", str(path)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert f"studies {first!r} and {second!r} share seed" in proc.stdout + proc.stderr


def test_workflow_requires_rendered_for_own_jsonl(tmp_path):
    """A study reading the user's JSONL must say whether its prompts are rendered: the dry run stops naming the key."""
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((repo / "config" / "smoke.yaml").read_text())
    config["studies"]["retention50"]["documents"] = {"source": "jsonl", "path": "mine.jsonl"}
    path = tmp_path / "jsonl.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--nolock", "--cores", "1", "--configfile", str(path)],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "studies.retention50.documents.rendered is required with source jsonl" in proc.stdout + proc.stderr


def test_document_does_not_depend_on_stratum_size(byte_tok, byte_chat):
    """Document i is the same whether the stratum has i+1 or more documents, and generated alone
    (`first=i`): adding documents to a stratum changes no existing document (the workflow relies on it)."""
    full = stratum(byte_tok, byte_chat, n=4, stratum="helmet_700")
    alone = stratum(byte_tok, byte_chat, n=3, first=2, stratum="helmet_700")
    assert [d.to_record() for d in alone] == [d.to_record() for d in full[2:3]]
    assert [d.id for d in alone] == ["s-helmet_700-0002"]
    assert dumps_jsonl(stratum(byte_tok, byte_chat, n=2, stratum="helmet_700")) == dumps_jsonl(full[:2])
