"""Chains computed once (kvdiv.trajectories.reuse): a trajectory job rerun with one more action, or one more
document, generates only what is new, and writes stores equal (arrays and attributes but timings) to a job that
computed everything; a piece that is truncated, edited or of another key is recomputed."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import torch
import pytest

from kvdiv.trajectories import job as job_module
from kvdiv.trajectories.job import run_documents
from kvdiv.trajectories.reuse import TrajectoryCache
from kvdiv.trajectories.store import ATTRS_CHECKSUM, read_document_store
from support.job_documents import ACTIONS, PROMPTS, record
from kvdiv.settings import generation

SETTINGS = generation(master_seed=3, study_seed=2, horizon=10, replicates=2, temperature=1.5)
TIMINGS = {"wall_time_s", "prefill_s", "wall_time_total_s", "checksums"}
FIRST = {name: ACTIONS[name] for name in ("snapkv_half", "recent_half")}
ALL = {name: ACTIONS[name] for name in ("snapkv_half", "recent_half", "knorm_decoding")}


def assert_same_stores(a, b):
    (attrs_a, data_a), (attrs_b, data_b) = read_document_store(a), read_document_store(b)
    assert {k: v for k, v in attrs_a.items() if k not in TIMINGS} == {
        k: v for k, v in attrs_b.items() if k not in TIMINGS
    }
    digests = lambda attrs: {k: v for k, v in attrs["checksums"].items() if k != ATTRS_CHECKSUM}  # noqa: E731
    assert digests(attrs_a) == digests(attrs_b)
    assert list(data_a) == list(data_b)
    for action in data_a:
        for name, values in data_a[action].items():
            assert np.array_equal(values, data_b[action][name]), (a, action, name)


@pytest.fixture
def generated(monkeypatch):
    """The (documents, actions) each call of the job's generation computes."""
    calls = []
    real = job_module._generate

    def spy(loaded, members, ids, prompts, contexts, actions, needed, g, progress):
        calls.append(([ids[d] for d in members], list(needed)))
        return real(loaded, members, ids, prompts, contexts, actions, needed, g, progress)

    monkeypatch.setattr(job_module, "_generate", spy)
    return calls


@pytest.mark.parametrize(
    "mode, reference_chain", [("complete", "shared"), ("complete", "per_action"), ("swrb", "per_action")]
)
def test_an_added_action_and_document_compute_only_what_is_new(
    tiny_qwen2, tmp_path, generated, caplog, mode, reference_chain
):
    settings = SETTINGS.replace(mode=mode, reference_chain=reference_chain)
    cache = TrajectoryCache(tmp_path / "cache")
    docs = [record(d) for d in (0, 1, 2)]
    ids = [doc["id"] for doc in docs]
    # the fresh job: every action of every document, no cache
    fresh = run_documents(
        tiny_qwen2, docs, ALL, [tmp_path / f"fresh{d}.zarr" for d in range(3)], settings, progress=False
    )
    generated.clear()
    run_documents(
        tiny_qwen2, docs[:2], FIRST, [tmp_path / f"a{d}.zarr" for d in range(2)], settings, cache=cache, progress=False
    )
    assert generated == [(ids[:2], list(FIRST))]
    generated.clear()
    with caplog.at_level(logging.INFO, logger="kvdiv.trajectories.job"):
        rerun = run_documents(
            tiny_qwen2, docs, ALL, [tmp_path / f"b{d}.zarr" for d in range(3)], settings, cache=cache, progress=False
        )
    # documents 0 and 1: only the new action; document 2 (new): every action
    assert sorted(generated) == sorted([(ids[:2], ["knorm_decoding"]), (ids[2:], list(ALL))])
    assert f"document {ids[0]}: reused snapkv_half, recent_half from the cache; computed knorm_decoding" in caplog.text
    for a, b in zip(rerun, fresh):
        assert_same_stores(a, b)
    # everything cached: nothing is generated (no prefill either), the stores are the same again
    generated.clear()
    again = run_documents(
        tiny_qwen2, docs, ALL, [tmp_path / f"c{d}.zarr" for d in range(3)], settings, cache=cache, progress=False
    )
    assert generated == []
    for a, b in zip(again, fresh):
        assert_same_stores(a, b)
    # another setting is another key: nothing is reused
    generated.clear()
    run_documents(
        tiny_qwen2,
        docs[:1],
        FIRST,
        [tmp_path / "d.zarr"],
        settings.replace(temperature=1.2),
        cache=cache,
        progress=False,
    )
    assert generated == [(ids[:1], list(FIRST))]
    # and a changed code hash too
    generated.clear()
    run_documents(
        tiny_qwen2, docs[:1], FIRST, [tmp_path / "e.zarr"], settings, cache=cache, code="other", progress=False
    )
    assert generated == [(ids[:1], list(FIRST))]


def test_a_damaged_or_foreign_piece_is_recomputed(tiny_qwen2, tmp_path, generated, caplog):
    cache = TrajectoryCache(tmp_path / "cache")
    doc = record(0)
    (fresh,) = run_documents(tiny_qwen2, [doc], FIRST, [tmp_path / "fresh.zarr"], SETTINGS, cache=cache, progress=False)
    pieces = sorted((tmp_path / "cache" / doc["id"]).glob("*.zarr"))
    assert [p.name.split("-")[0] for p in pieces] == sorted(FIRST)
    snap = next(p for p in pieces if p.name.startswith("snapkv_half-"))
    recent = next(p for p in pieces if p.name.startswith("recent_half-"))
    # truncated: an array's chunk gone; edited: an attribute changed under its checksum
    shutil.rmtree(snap / "snapkv_half" / "y" / "c")
    meta = recent / "zarr.json"
    meta.write_text(meta.read_text().replace('"prefill_s": ', '"prefill_s": 1', 1))
    generated.clear()
    with caplog.at_level(logging.WARNING, logger="kvdiv.trajectories.reuse"):
        (out,) = run_documents(tiny_qwen2, [doc], FIRST, [tmp_path / "out.zarr"], SETTINGS, cache=cache, progress=False)
    assert generated == [([doc["id"]], list(FIRST))]
    assert caplog.text.count("is not usable") == 2 and str(snap) in caplog.text and str(recent) in caplog.text
    assert_same_stores(out, fresh)
    # the pieces were written again, whole: the next run reuses both
    generated.clear()
    run_documents(tiny_qwen2, [doc], FIRST, [tmp_path / "again.zarr"], SETTINGS, cache=cache, progress=False)
    assert generated == []


def test_a_reference_chain_that_differs_from_the_cached_one_recomputes_everything(
    tiny_qwen2, tmp_path, generated, caplog, monkeypatch
):
    """The guard of a shared reference chain: reused pieces must hold the reference chain computed now."""
    cache = TrajectoryCache(tmp_path / "cache")
    doc = record(1)
    run_documents(tiny_qwen2, [doc], FIRST, [tmp_path / "a.zarr"], SETTINGS, cache=cache, progress=False)
    (fresh,) = run_documents(tiny_qwen2, [doc], ALL, [tmp_path / "fresh.zarr"], SETTINGS, progress=False)
    monkeypatch.setattr(job_module, "same_reference", lambda reused, computed: False)
    generated.clear()
    with caplog.at_level(logging.WARNING, logger="kvdiv.trajectories.job"):
        (out,) = run_documents(tiny_qwen2, [doc], ALL, [tmp_path / "b.zarr"], SETTINGS, cache=cache, progress=False)
    assert generated == [([doc["id"]], ["knorm_decoding"]), ([doc["id"]], list(ALL))]
    assert "differs from the cached one: recomputing every action" in caplog.text
    assert_same_stores(out, fresh)


def test_same_reference_compares_every_reused_chain():
    from kvdiv.trajectories.base import ActionTrajectories
    from kvdiv.trajectories.reuse import Piece, same_reference

    def traj(x):
        x = np.asarray(x, dtype=np.int32)
        zeros = np.zeros(x.shape, dtype=np.float32)
        return ActionTrajectories(x=x, y=x, tv=zeros, fixed_tv=zeros, match=x == x, eos_x=x < 0, eos_y=x < 0)

    now = {"c": traj([[1, 2, 3]])}
    assert same_reference({"a": Piece(traj([[1, 2, 3]]))}, now)
    assert not same_reference({"a": Piece(traj([[1, 2, 3]])), "b": Piece(traj([[1, 2, 4]]))}, now)
    assert same_reference({"a": Piece(traj([[9]]))}, {})


@pytest.mark.parametrize("model", ["tiny_llama", "tiny_qwen2"])
def test_an_actions_values_do_not_depend_on_the_other_actions(model, request):
    """What the cache relies on: an action's arrays are the same bits whether its job runs it alone or beside
    actions whose chains have lengths close to its own (they share its attention calls: each chain still attends
    over its own span, kvdiv.kernel.chain_slots.ATTENTION_SPAN), and whatever their order."""
    from kvdiv.trajectories.base import chains_needed
    from kvdiv.trajectories.generate import generate
    from kvdiv.kernel.session import KernelSession

    loaded = request.getfixturevalue(model)
    near = {
        f"snap_{ratio}": {"press": "SnapKVPress", "compression_ratio": ratio, "window_size": 8}
        for ratio in (0.5, 0.55, 0.6, 0.45)
    }
    prompt = PROMPTS[1] * 3
    ids = torch.tensor(loaded.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    def run(actions):
        session = KernelSession(
            loaded,
            ids,
            actions,
            generation(horizon=12, temperature=2.0),
            max_chains=chains_needed(len(actions), 3, "complete"),
        )
        return generate(
            session,
            list(actions),
            generation(master_seed=5, study_seed=1, horizon=12, replicates=3, tv_atol=1e-06),
            eos_token_ids=loaded.eos_token_ids,
            progress=False,
            document_id="doc",
        )

    together = run(near)
    reordered = run(dict(reversed(list(near.items()))))
    for name in near:
        alone = run({name: near[name]})[name]
        for out in (together[name], reordered[name]):
            for field in ("x", "y", "tv", "fixed_tv", "match"):
                assert np.array_equal(getattr(out, field), getattr(alone, field)), (name, field)
    assert any((together[name].tv > 0).any() for name in near)


def test_a_random_press_is_reused_with_its_seeds_and_retention(tiny_llama, tmp_path, generated):
    """A ProbabilisticPress (seeded per document and action; it records its press seeds and effective retention):
    added beside a cached action, and then cached itself, its store attributes equal a fresh job's."""
    prob = {"pminh": {"press": "ProbabilisticPress", "compression_ratio": 0.5, "proposal": "min_h", "budget": "global"}}
    cache = TrajectoryCache(tmp_path / "cache")
    doc = record(2)
    both = {"recent_half": ACTIONS["recent_half"], **prob}
    (fresh,) = run_documents(tiny_llama, [doc], both, [tmp_path / "fresh.zarr"], SETTINGS, progress=False)
    run_documents(
        tiny_llama,
        [doc],
        {"recent_half": ACTIONS["recent_half"]},
        [tmp_path / "a.zarr"],
        SETTINGS,
        cache=cache,
        progress=False,
    )
    generated.clear()
    (added,) = run_documents(tiny_llama, [doc], both, [tmp_path / "b.zarr"], SETTINGS, cache=cache, progress=False)
    assert generated == [([doc["id"]], ["pminh"])]
    generated.clear()
    (cached,) = run_documents(tiny_llama, [doc], both, [tmp_path / "c.zarr"], SETTINGS, cache=cache, progress=False)
    assert generated == []
    for out in (added, cached):
        assert_same_stores(out, fresh)
    attrs = read_document_store(cached)[0]
    assert set(attrs["press_seeds"]) == {"pminh"} and set(attrs["effective_retention"]) == {"pminh"}


def test_an_auto_budget_is_measured_once_for_the_whole_job(tiny_qwen2, tmp_path, generated, monkeypatch):
    """A job whose documents fall into two groups (what each reuses differs) plans every group's batches under the
    budget measured when the job started, not under what is free after the first group's batches."""
    import kvdiv.kernel.memory_plan as memory_plan

    cache = TrajectoryCache(tmp_path / "cache")
    docs = [record(d) for d in range(3)]
    run_documents(tiny_qwen2, docs[:1], FIRST, [tmp_path / "a.zarr"], SETTINGS, cache=cache, progress=False)
    generated.clear()
    free = iter([10**12, 1])  # the second reading would cut every document into a batch of its own
    monkeypatch.setattr(memory_plan, "free_bytes", lambda device: next(free))
    outs = [tmp_path / f"b{d}.zarr" for d in range(3)]
    run_documents(tiny_qwen2, docs, ALL, outs, SETTINGS, cache=cache, documents_per_batch="auto", progress=False)
    ids = [d["id"] for d in docs]
    # two groups (the first document reuses two actions), each one batch: the second group is not cut by the
    # second reading (1 byte free), which the job no longer takes
    assert generated == [([ids[0]], ["knorm_decoding"]), ([ids[1], ids[2]], list(ALL))]
    assert next(free) == 1
