"""Documents batched in one forward: every value of a document's trajectories equals those of a job that ran the
document alone (tiny random models, no download)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvdiv.kernel.session import KernelSession
from kvdiv.kernel.batched_step import step_sessions
from kvdiv.settings import AutoBatch
from kvdiv.trajectories.base import chains_needed
from kvdiv.trajectories.generate import generate, generate_documents
from support.job_documents import ACTIONS, PROMPTS, record
from kvdiv.settings import generation

H, R = 10, 2
TV_ATOL = 1e-6
FIELDS = ("x", "y", "tv", "fixed_tv", "match", "eos_x", "eos_y", "overlap_tv", "branch_start")


@pytest.fixture(params=[1])
def one_thread(request):
    """Batched vs alone compares float32 forwards with different numbers of rows: one thread, as jobs run by
    default (or ``request.param`` threads)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield
    torch.set_num_threads(before)


def sessions(loaded, prompts, mode):
    out = []
    for text in prompts:
        ids = torch.tensor(loaded.tokenizer(text, add_special_tokens=False)["input_ids"])
        out.append(KernelSession(loaded, ids, ACTIONS, settings(mode), max_chains=chains_needed(len(ACTIONS), R, mode)))
    return out


def seeds(n):
    """Master seed 3: the streams under which some complete-mode pairs of both tiny models diverge within H = 10
    (divergence is rare on them: δ ≈ 0.005), so the comparison covers three chains per pair."""
    return [f"doc-{d}" for d in range(n)]


def settings(mode, reference_chain="shared"):
    """The generation settings of these tests (master seed 3, study seed 2)."""
    return generation(
        master_seed=3,
        study_seed=2,
        horizon=H,
        replicates=R,
        temperature=1.5,
        mode=mode,
        tv_atol=TV_ATOL,
        reference_chain=reference_chain,
    )


def alone(loaded, d, mode, reference_chain="shared"):
    (session,) = sessions(loaded, [PROMPTS[d]], mode)
    return generate(
        session,
        list(ACTIONS),
        settings(mode, reference_chain),
        document_id=seeds(len(PROMPTS))[d],
        eos_token_ids=loaded.eos_token_ids,
        progress=False,
    )


def assert_same(a, b, where):
    for action in ACTIONS:
        for field in FIELDS:
            u, v = getattr(a[action], field), getattr(b[action], field)
            assert (u is None) == (v is None), (where, action, field)
            if u is not None:
                assert u.dtype == v.dtype and np.array_equal(u, v), (where, action, field)


@pytest.mark.parametrize(
    ("model", "mode", "one_thread", "reference_chain"),
    [
        ("tiny_llama", "complete", 1, "shared"),
        ("tiny_llama", "swrb", 1, "shared"),
        ("tiny_qwen2", "complete", 1, "shared"),
        ("tiny_qwen2", "swrb", 1, "shared"),
        ("tiny_llama", "complete", 2, "shared"),
        ("tiny_qwen2", "complete", 1, "per_action"),
    ],
    indirect=["one_thread"],
)
def test_batched_documents_equal_each_document_alone(model, mode, one_thread, reference_chain, request):
    loaded = request.getfixturevalue(model)
    batch = sessions(loaded, PROMPTS, mode)
    together = generate_documents(
        batch,
        seeds(len(PROMPTS)),
        list(ACTIONS),
        settings(mode, reference_chain),
        eos_token_ids=loaded.eos_token_ids,
        progress=False,
    )
    assert all(session._chains.chains == {} for session in batch)  # every chain released
    diverged = decoded_tv = False
    for d, out in enumerate(together):
        assert_same(out, alone(loaded, d, mode, reference_chain), f"document {d}")
        diverged |= any(not t.match.all() for t in out.values())
        for keeping in ("keep_all", "keep_decoding"):  # 100% retention ⇒ δ ≡ 0 and identical chains, also in a batch
            keep = out[keeping]
            assert np.all(keep.match) and np.all(keep.tv == 0) and np.all(keep.fixed_tv == 0)
        decoding = out["knorm_decoding"]  # a decode-only press: δ ≡ 0 before its first cut changes a law (step 5)
        assert np.all(decoding.tv[:, :4] == 0) and np.all(decoding.fixed_tv[:, :4] == 0)
        decoded_tv |= bool((decoding.tv[:, 4:] > 0).any())
    assert diverged  # the comparison covers divergent pairs (three chains per pair)
    assert decoded_tv  # the decoding press's cuts changed laws
    # a document's values do not depend on which documents share its forward, nor on their order
    pair = generate_documents(
        sessions(loaded, [PROMPTS[3], PROMPTS[1]], mode),
        [seeds(4)[3], seeds(4)[1]],
        list(ACTIONS),
        settings(mode, reference_chain),
        eos_token_ids=loaded.eos_token_ids,
        progress=False,
    )
    assert_same(pair[0], together[3], "document 3 beside 1")
    assert_same(pair[1], together[1], "document 1 beside 3")


def test_step_sessions_equals_each_session_stepping_alone(tiny_llama, one_thread):
    """The kernel level: one forward over two sessions (different prompts, caches, EOS rows) == their own steps."""
    a, b = sessions(tiny_llama, PROMPTS[:2], "complete")
    eos = tiny_llama.eos_token_ids[0]
    chains_a = [a.new_chain("reference"), a.new_chain("snapkv_half"), a.new_chain("keep_all")]
    chains_b = [b.new_chain("recent_half"), b.new_chain("reference")]
    tokens_a, tokens_b = [70, 71, 72], [eos, 80]
    ca, cb = [a.fork(c) for c in chains_a], [b.fork(c) for c in chains_b]
    both = step_sessions([(a, chains_a, tokens_a), (b, chains_b, tokens_b)])
    own_a, own_b = a.step(ca, tokens_a), b.step(cb, tokens_b)
    assert torch.equal(both[0], own_a) and torch.equal(both[1], own_b)
    assert torch.equal(both[1][0], b._eos_law) and b.is_done(chains_b[0])
    assert a.generated_length(chains_a[0]) == 1 and b.generated_length(chains_b[1]) == 1
    with pytest.raises(ValueError, match="same model"):
        other = sessions(request_other_model(tiny_llama), PROMPTS[:1], "complete")[0]
        step_sessions([(a, [chains_a[0]], [5]), (other, [other.new_chain("reference")], [5])])


def request_other_model(loaded):
    """A LoadedModel wrapping a different model object (same weights)."""
    import copy

    return copy.copy(loaded).__class__(**{**loaded.__dict__, "model": copy.deepcopy(loaded.model)})


def test_a_batch_job_writes_the_stores_of_one_document_jobs(tiny_qwen2, tmp_path, one_thread):
    """run_documents (one load, all documents in one forward per step) writes per-document stores whose arrays and
    attributes (but timings) equal those run_document writes for each document alone."""
    from kvdiv.trajectories.job import run_document, run_documents
    from kvdiv.trajectories.store import ATTRS_CHECKSUM, read_document_store, read_prompt_ids

    g = generation(master_seed=1, study_seed=2, horizon=H, replicates=R, temperature=1.5)
    docs = [record(d) for d in (2, 0, 1)]
    batch = run_documents(tiny_qwen2, docs, ACTIONS, [tmp_path / f"b{d}.zarr" for d in range(3)], g, progress=False)
    timings = {"wall_time_s", "prefill_s", "wall_time_total_s", "checksums"}
    for doc, path in zip(docs, batch):
        single = run_document(tiny_qwen2, doc, ACTIONS, tmp_path / f"{doc['id']}.zarr", g, progress=False)
        (attrs_b, data_b), (attrs_s, data_s) = read_document_store(path), read_document_store(single)
        assert {k: v for k, v in attrs_b.items() if k not in timings} == {
            k: v for k, v in attrs_s.items() if k not in timings
        }
        # the sha256 of every array: the same values (the attributes' own digest covers the timings too)
        arrays = lambda attrs: {k: v for k, v in attrs["checksums"].items() if k != ATTRS_CHECKSUM}  # noqa: E731
        assert arrays(attrs_b) == arrays(attrs_s)
        assert read_prompt_ids(path).tolist() == read_prompt_ids(single).tolist()
        for action in ACTIONS:
            for name, array in data_s[action].items():
                assert np.array_equal(data_b[action][name], array), (doc["id"], action, name)
        assert attrs_b["wall_time_total_s"] >= attrs_b["prefill_s"] > 0


@pytest.mark.parametrize(
    "per_batch, expected",
    [
        (1, [[0], [1], [2]]),
        (2, [[0, 1], [2]]),
        (AutoBatch(1), [[0], [1], [2]]),  # documents_per_batch auto: a document that fits no budget runs alone
        (AutoBatch(10**15), [[0, 1, 2]]),
        ("auto", [[0, 1, 2]]),  # 60 % of the machine's available memory: tiny documents, one batch
    ],
)
def test_a_job_in_batches_writes_the_stores_of_one_batch(
    tiny_llama, tmp_path, one_thread, monkeypatch, per_batch, expected
):
    """documents_per_batch: the job generates its documents in consecutive batches of that many, or as many as the
    memory budget holds (each batch's stores written before the next batch starts) and every store has the values of
    the job run as one batch."""
    import kvdiv.trajectories.job as job
    from kvdiv.trajectories.store import ATTRS_CHECKSUM, read_document_store

    g = generation(master_seed=1, study_seed=2, horizon=H, replicates=R)
    docs = [record(d) for d in (2, 0, 1)]
    whole = job.run_documents(tiny_llama, docs, ACTIONS, [tmp_path / f"w{d}.zarr" for d in range(3)], g, progress=False)
    generate, batches = job._generate, []

    def recording(loaded, members, *args):
        batches.append((list(members), sorted(p.name for p in tmp_path.glob("p*.zarr"))))  # stores written so far
        return generate(loaded, members, *args)

    monkeypatch.setattr(job, "_generate", recording)
    outs = [tmp_path / f"p{d}.zarr" for d in range(3)]
    parts = job.run_documents(tiny_llama, docs, ACTIONS, outs, g, documents_per_batch=per_batch, progress=False)
    assert [members for members, _ in batches] == expected
    assert batches[-1][1] == sorted(p.name for p in outs[: batches[-1][0][0]])  # earlier batches already written
    arrays = lambda path: {  # noqa: E731
        k: v for k, v in read_document_store(path)[0]["checksums"].items() if k != ATTRS_CHECKSUM
    }
    assert parts == outs and [arrays(p) for p in parts] == [arrays(p) for p in whole]
    for bad in (0, "sometimes", 1.5):
        with pytest.raises(
            ValueError, match=f"documents_per_batch must be a positive integer, 'auto' or None, got {bad!r}"
        ):
            job.run_documents(tiny_llama, docs, ACTIONS, outs, g, documents_per_batch=bad, progress=False)


def test_a_batch_job_checks_every_document_before_running(tiny_llama, tmp_path):
    from kvdiv.trajectories.job import run_documents

    g = generation(master_seed=1, study_seed=2, horizon=H, replicates=1)
    outs = [tmp_path / "a.zarr", tmp_path / "b.zarr"]
    with pytest.raises(
        ValueError, match=r"document 'st-ruler_64-0001': its rendering has \d+ prompt tokens; \+ horizon 100 "
    ):
        run_documents(
            tiny_llama,
            [record(0), record(1, prompt=PROMPTS[1] * 40)],
            ACTIONS,
            outs,
            generation(master_seed=1, study_seed=2, horizon=100, replicates=1),
            progress=False,
        )
    with pytest.raises(ValueError, match="a document appears twice in one job"):
        run_documents(tiny_llama, [record(0), record(0)], ACTIONS, outs, g, progress=False)
    with pytest.raises(ValueError, match="one output per document: 2 documents, 1 outputs"):
        run_documents(tiny_llama, [record(0), record(1)], ACTIONS, outs[:1], g, progress=False)
    assert not any(p.exists() for p in outs)
