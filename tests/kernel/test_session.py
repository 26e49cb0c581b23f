"""KernelSession: one prefill for every action == kvpress's own prefill, batched decoding == per-chain
decoding == plain HF decoding, no-eviction invariant, EOS absorption, cache immutability."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from default_presses import DEFAULT_PRESSES, NO_EVICTION
from support.fresh import last_line
from support.layouts import with_layout
from support.sessions import kvpress_own_prefill
from kvpress import RandomPress, ScorerPress
from transformers import DynamicCache

from kvdiv.kernel.prefill_attention import prefill_attention
from kvdiv.kernel.presses.registry import build_press
from kvdiv.estimands import tv
from kvdiv.kernel.session import LAYOUTS, KernelSession
from kvdiv.kernel.prefill import REFERENCE
from kvdiv.seeds import derive_seed
from kvdiv.settings import generation

PROMPT_LEN = 48

PRESS_SPECS = DEFAULT_PRESSES


@pytest.fixture(scope="module")
def llama(tiny_model_factory):
    # a larger init than the default 0.02 makes attention and next-token laws far from uniform
    return tiny_model_factory("llama", initializer_range=0.25)


@pytest.fixture(scope="module")
def qwen2(tiny_model_factory):
    return tiny_model_factory("qwen2", initializer_range=0.25)


def prompt(loaded, n: int = PROMPT_LEN, seed: int = 0) -> torch.Tensor:
    vocab = loaded.model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, vocab, (n,), generator=g)
    eos = set(loaded.eos_token_ids)
    return torch.tensor([t if t not in eos else 11 for t in ids.tolist()])


@pytest.fixture(scope="module")
def session(llama):
    return KernelSession(llama, prompt(llama), {**PRESS_SPECS, "none": NO_EVICTION}, generation(horizon=128))


def kvpress_prefill(loaded, ids, spec):
    """The press run by kvpress inside its own prefill, with the attention kvdiv's prefill runs (and SnapKV's window
    products): (cache, press)."""
    press = build_press(spec)
    return kvpress_own_prefill(loaded.model, press, ids), press


def hf_decode(model, cache, tokens, start_position):
    """Plain HF decoding of ``tokens`` one at a time with ``cache``; positions start_position, … ."""
    laws = []
    with torch.no_grad():
        for i, t in enumerate(tokens):
            pos = torch.tensor([[start_position + i]])
            out = model(
                input_ids=torch.tensor([[t]]),
                past_key_values=cache,
                position_ids=pos,
                cache_position=pos[0],
                use_cache=True,
            )
            laws.append(torch.softmax(out.logits[0, -1].double(), -1))
    return torch.stack(laws)


@pytest.mark.parametrize("name", list(PRESS_SPECS))
def test_one_prefill_equals_kvpress_prefill(session, llama, name):
    """Each action's cache == the press's own kvpress prefill: same tensors, same kept positions."""
    ids = session.prompt_ids
    cache, press = kvpress_prefill(llama, ids, PRESS_SPECS[name])
    prefix = session.prompt_cache(name)
    ref = session.prompt_cache(REFERENCE)
    kept = session.kept_indices(name)
    attn = [layer.self_attn for layer in llama.model.model.layers]
    for layer in range(session.n_layers):
        k_own, v_own = cache.layers[layer].keys[0], cache.layers[layer].values[0]
        n_kept = k_own.shape[1]
        assert torch.equal(prefix.keys[layer][:, :n_kept], k_own)
        assert torch.equal(prefix.values[layer][:, :n_kept], v_own)
        assert torch.isinf(prefix.bias[layer][:, n_kept:]).all()  # padding (PyramidKV) never attended
        idx = kept[layer]
        assert idx is not None
        # kept positions per head: the reference keys at those positions are the press's keys
        own_masked = getattr(attn[layer], "masked_key_indices", None)
        if name.startswith("prob"):  # kept positions = the press's own record, heads padded with −1 and masked
            own = press.kept_indices[layer][0]
            assert torch.equal(idx, own)
            for h in range(session.kv_heads):
                keep = own[h] >= 0
                assert torch.equal(ref.keys[layer][h, own[h][keep]], k_own[h, : int(keep.sum())])
                masked = set() if own_masked is None else set(own_masked[2][own_masked[1] == h].tolist())
                assert masked == set(range(int(keep.sum()), n_kept))
            attn[layer].masked_key_indices = None
        elif own_masked is None:
            assert idx.shape == (session.kv_heads, n_kept)
            gathered = ref.keys[layer].gather(1, idx.unsqueeze(-1).expand(-1, -1, session.head_dim))
            assert torch.equal(gathered, k_own)
        else:  # head-wise press: same masked positions per head
            _, heads, seqs = own_masked
            for h in range(session.kv_heads):
                masked = set(seqs[heads == h].tolist())
                kept_h = {i for i in idx[h].tolist() if i >= 0}
                assert kept_h == set(range(n_kept)) - masked
            attn[layer].masked_key_indices = None


@pytest.mark.parametrize("name", ["snapkv", "streaming", "adakv", "pyramid"])
def test_action_law_equals_kvpress_decoding(session, llama, name):
    """Q from the session == HF decoding with kvpress's compressed cache at positions n, n+1, …"""
    ids = session.prompt_ids
    cache, _ = kvpress_prefill(llama, ids, PRESS_SPECS[name])
    tokens = [17, 42, 99]
    expected = hf_decode(llama.model, cache, tokens, session.prompt_length)
    for attn in (layer.self_attn for layer in llama.model.model.layers):
        attn.masked_key_indices = None
    c = session.new_chain(name)
    got = torch.stack([session.step([c], [t])[0] for t in tokens])
    session.release([c])
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(
        got, hf_decode(llama.model, full_cache(llama, ids), tokens, session.prompt_length), atol=1e-4
    )


def full_cache(loaded, ids):
    cache = DynamicCache(config=loaded.model.config)
    with torch.no_grad(), prefill_attention(loaded.model):
        loaded.model(input_ids=ids[None], past_key_values=cache, use_cache=True)
    return cache


def test_reference_cache_never_mutated(session, llama):
    """After deriving every action, the reference cache equals a fresh plain prefill (with the prefill's attention)
    bit for bit."""
    fresh = full_cache(llama, session.prompt_ids)
    ref = session.prompt_cache(REFERENCE)
    for layer in range(session.n_layers):
        assert torch.equal(ref.keys[layer], fresh.layers[layer].keys[0])
        assert torch.equal(ref.values[layer], fresh.layers[layer].values[0])
        assert (ref.bias[layer] == 0).all()
    c = session.new_chain(REFERENCE)
    with torch.no_grad(), prefill_attention(llama.model):
        expected = torch.softmax(llama.model(session.prompt_ids[None]).logits[0, -1].double(), -1)
    torch.testing.assert_close(session.initial_probs(REFERENCE), expected.detach())
    for name in session.caches:
        assert torch.equal(session.initial_probs(name), session.initial_probs(REFERENCE))  # δ_1 = 0
    session.release([c])


@pytest.fixture(scope="module")
def long_session(llama):
    # long enough that evicted and full caches fall into separate attention runs
    return KernelSession(
        llama, prompt(llama, n=200, seed=9), {**PRESS_SPECS, "none": NO_EVICTION}, generation(horizon=128)
    )


@pytest.mark.parametrize("which", ["session", "long_session"])
def test_batched_step_equals_single_chain_decoding(which, llama, request):
    """One batched step over chains with different caches (incl. non-contiguous slots and forks) ==
    each chain decoded alone, and the reference rows == plain HF decoding with DynamicCache."""
    session = request.getfixturevalue(which)
    names = [REFERENCE, "snapkv", "prob", "adakv", "pyramid", REFERENCE]
    chains = [session.new_chain(n) for n in names]
    gap = session.new_chain("streaming")  # released below: a hole in the slot range
    chains.append(session.new_chain("knorm"))
    names.append("knorm")
    session.release([gap])
    g = torch.Generator().manual_seed(1)
    vocab = session.initial_probs().numel()
    seqs = torch.randint(10, vocab, (len(chains), 4), generator=g)
    seqs[5] = seqs[0]  # a second reference chain with the same tokens
    batched = []
    for t in range(seqs.shape[1]):
        if t == 2:  # fork mid-way: the fork continues like its source
            chains.append(session.fork(chains[1]))
            names.append(names[1])
            seqs = torch.cat([seqs, seqs[1:2]])
            batched = [torch.cat([b, b[1:2]]) for b in batched]
        batched.append(session.step(chains, seqs[:, t]))
    batched = torch.stack(batched, 1)  # [chains, steps, V]
    session.release(chains)
    for i, name in enumerate(names):
        c = session.new_chain(name)
        alone = torch.stack([session.step([c], [int(t)])[0] for t in seqs[i]])
        session.release([c])
        torch.testing.assert_close(batched[i], alone, atol=1e-5, rtol=0)
    expected = hf_decode(llama.model, full_cache(llama, session.prompt_ids), seqs[0].tolist(), session.prompt_length)
    torch.testing.assert_close(batched[0], expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(batched[5], batched[0], atol=1e-6, rtol=0)  # same cache, same tokens (float32 noise)
    torch.testing.assert_close(batched[-1], batched[1], atol=1e-6, rtol=0)  # fork == source


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_no_eviction_gives_q_equal_p(arch, request):
    """compression_ratio 0 evicts nothing: TV(P, Q) < 1e-6 at every step along a sampled path."""
    loaded = request.getfixturevalue(arch)
    s = KernelSession(
        loaded,
        prompt(loaded, seed=2),
        {"none": NO_EVICTION, "prob0": {"press": "ProbabilisticPress"}},
        generation(horizon=128),
    )
    p = s.initial_probs(REFERENCE)
    assert tv(p, s.initial_probs("none")) < 1e-6
    chains = [s.new_chain(REFERENCE), s.new_chain("none"), s.new_chain("prob0")]
    g = torch.Generator().manual_seed(3)
    eos = set(loaded.eos_token_ids)
    for _ in range(8):
        x = int(torch.multinomial(p.float(), 1, generator=g))
        if x in eos:
            break
        laws = s.step(chains, [x] * 3)
        assert tv(laws[0], laws[1]) < 1e-6 and tv(laws[0], laws[2]) < 1e-6
        p = laws[0]


def test_eos_is_absorbing(session):
    eos = session.eos_token_ids
    c, d = session.new_chain(REFERENCE), session.new_chain("snapkv")
    laws = session.step([c, d], [eos[-1], 20])
    point = torch.zeros_like(laws[0])
    point[eos[0]] = 1.0
    assert torch.equal(laws[0], point) and session.is_done(c) and not session.is_done(d)
    assert laws[1].sum().item() == pytest.approx(1.0) and laws[1].max() < 1
    n_before = session.generated_length(c)
    laws = session.step([c, d], [30, 21])  # after EOS any token keeps the point mass; not run
    assert torch.equal(laws[0], point) and session.generated_length(c) == n_before
    f = session.fork(c)
    assert session.is_done(f) and torch.equal(session.step([f], [5])[0], point)
    session.release([c, d, f])


def test_positions_and_kept_indices(session):
    """Generated tokens continue from the prompt length in evicted caches; StreamingLLM keeps sinks + tail."""
    c = session.new_chain("streaming")
    session.step([c], [12])
    assert session.generated_length(c) == 1
    session.release([c])
    n = session.prompt_length
    n_kept = int(n * 0.5)
    expected = sorted(list(range(2)) + list(range(n - n_kept + 2, n)))
    for idx in session.kept_indices("streaming"):
        for head in idx:
            assert sorted(head.tolist()) == expected


def test_evict_first_step(llama):
    """evict_first_step: Q at step 1 == kvpress's press on prompt[:-1], then the last token at position n−1."""
    ids = prompt(llama, seed=4)
    spec = PRESS_SPECS["snapkv"]
    s = KernelSession(llama, ids, {"snapkv": spec}, generation(horizon=128, evict_first_step=True))
    cache, _ = kvpress_prefill(llama, ids[:-1], spec)
    expected = hf_decode(llama.model, cache, [int(ids[-1]), 33], len(ids) - 1)
    torch.testing.assert_close(s.initial_probs("snapkv"), expected[0], atol=1e-6, rtol=1e-5)
    full = torch.softmax(llama.model(ids[None]).logits[0, -1].double(), -1).detach()
    torch.testing.assert_close(s.initial_probs(REFERENCE), full, atol=1e-6, rtol=1e-5)
    assert tv(s.initial_probs(REFERENCE), s.initial_probs("snapkv")) > 1e-4
    c = s.new_chain("snapkv")
    torch.testing.assert_close(s.step([c], [33])[0], expected[1], atol=1e-6, rtol=1e-5)


def test_session_errors(llama):
    ids = prompt(llama)
    with pytest.raises(ValueError, match="unknown press 'NoSuchPress'.*SnapKVPress"):
        KernelSession(llama, ids, {"a": {"press": "NoSuchPress"}}, generation(horizon=128))
    with pytest.raises(ValueError, match="reserved"):
        KernelSession(llama, ids, {REFERENCE: NO_EVICTION}, generation(horizon=128))
    s = KernelSession(llama, ids, {}, generation(horizon=128))
    with pytest.raises(KeyError, match="unknown cache"):
        s.new_chain("snapkv")
    c = s.new_chain()
    s.release([c])
    with pytest.raises(KeyError, match="released"):
        s.step([c], [3])


def test_smollm2_no_eviction(smollm2):
    """SmolLM2: nothing evicted → Q ≡ P along a sampled path; SnapKV-half differs."""
    text = "The quick brown fox jumps over the lazy dog. " * 12
    ids = smollm2.tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids[0]
    s = KernelSession(
        smollm2,
        ids,
        {
            "none": {"press": "SnapKVPress", "compression_ratio": 0.0},
            "half": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 16},
        },
        generation(horizon=128),
    )
    chains = [s.new_chain(REFERENCE), s.new_chain("none"), s.new_chain("half")]
    p = s.initial_probs(REFERENCE)
    g = torch.Generator().manual_seed(0)
    diffs = []
    for _ in range(4):
        x = int(torch.multinomial(p.float(), 1, generator=g))
        laws = s.step(chains, [x] * 3)
        assert tv(laws[0], laws[1]) < 1e-6
        diffs.append(float(tv(laws[0], laws[2])))
        p = laws[0]
    assert max(diffs) > 1e-6


@pytest.mark.parametrize("arch", ["mistral", "qwen3", "phi3", "gemma3"])
def test_other_architectures(arch, tiny_model_factory):
    """Reference and a SnapKV action == plain HF decoding / kvpress's own prefill on other architectures."""
    loaded = tiny_model_factory(arch, initializer_range=0.25)
    ids = prompt(loaded, n=40, seed=5)
    spec = PRESS_SPECS["snapkv"]
    s = KernelSession(loaded, ids, {"snapkv": spec}, generation(horizon=128))
    chains = [s.new_chain(REFERENCE), s.new_chain("snapkv")]
    tokens = [21, 57]
    got = torch.stack([s.step(chains, [t, t]) for t in tokens], 1)
    ref = hf_decode(loaded.model, full_cache(loaded, ids), tokens, len(ids))
    cache, _ = kvpress_prefill(loaded, ids, spec)
    act = hf_decode(loaded.model, cache, tokens, len(ids))
    torch.testing.assert_close(got[0], ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(got[1], act, atol=1e-5, rtol=0)
    assert tv(got[0], got[1]).max() > 1e-4


@pytest.mark.parametrize("layout", LAYOUTS)
def test_slots_and_capacity_grow(llama, layout):
    """Starting with 1 slot and room for 1 new token, buffers grow on demand without changing laws."""
    llama = with_layout(llama, layout)
    ids = prompt(llama, seed=6)
    actions = {"snapkv": PRESS_SPECS["snapkv"]}
    small = KernelSession(llama, ids, actions, generation(horizon=1), max_chains=1)
    big = KernelSession(llama, ids, actions, generation(horizon=70), max_chains=8)
    out = []
    for s in (small, big):
        chains = [s.new_chain(REFERENCE), s.new_chain("snapkv"), s.new_chain("snapkv")]
        pool = s._chains.pools[s._chains.chain(chains[0]).pool]
        capacity = pool.capacity
        out.append(torch.stack([s.step(chains, [30 + t % 50, 40 + t % 50, 50 + t % 50]) for t in range(70)]))
    assert pool.capacity == capacity  # big: room for every token
    pool = small._chains.pools[small._chains.chain(0).pool]
    assert pool.n_slots >= 3 and pool.capacity >= small._chains.chain(0).length + 1
    torch.testing.assert_close(out[0], out[1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("first", ["kvdiv.kernel.decode_attention", "kvpress"])
def test_the_attention_transformers_calls_for_kvdiv_decode_is_kvdivs_whatever_is_imported_first(first):
    """kvpress wraps every attention function registered when it is imported (a head-wise-mask patch that would write
    fake keys into a chain's buffer); decode_attention imports kvpress before registering, so the function a model
    gets for "kvdiv_decode" is decode_attention itself in either import order (a fresh interpreter each)."""
    code = (
        f"import {first}\n"
        "import kvpress\n"
        "import kvdiv.kernel.decode_attention as d\n"
        "from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS as fns\n"
        "print(fns.get_interface(d.ATTN_IMPLEMENTATION, None) is d.decode_attention)\n"
    )
    assert last_line(code) == "True"


@dataclass
class DoubledKnorm(ScorerPress):
    """Knorm's top-k entries with their keys doubled: the session cannot recover its kept positions by key matching."""

    compression_ratio: float = 0.0

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        return -keys.norm(dim=-1)

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        kept = int(keys.shape[2] * (1 - self.compression_ratio))
        idx = self.score(module, hidden_states, keys, values, attentions, kwargs).topk(kept, dim=-1).indices
        self.record(module.layer_idx, idx)
        gidx = idx.unsqueeze(-1).expand(-1, -1, -1, keys.shape[-1])
        return 2 * keys.gather(2, gidx), values.gather(2, gidx)

    def record(self, layer: int, idx: torch.Tensor) -> None:
        """What a press of the session protocol reports (nothing here)."""


@dataclass
class ProtocolKnorm(DoubledKnorm):
    """DoubledKnorm that also speaks kvdiv.kernel.presses.protocol: seeded per document, a constant decode-time bias
    on its kept entries, and the kept positions it recorded."""

    seed: int = 5
    draw_seed: int | None = None
    kept_indices: dict = field(default_factory=dict)
    biases: dict = field(default_factory=dict)

    def set_document(self, *seed_parts, action):
        self.draw_seed = derive_seed(*seed_parts, action, self.seed)
        return self.draw_seed

    def layer_seed(self, layer):
        return derive_seed(self.draw_seed, layer)

    def attention_bias(self, layer):
        return self.biases.get(layer)

    def record(self, layer, idx):
        self.kept_indices[layer] = idx
        self.biases[layer] = torch.full(idx.shape, -0.5, dtype=torch.float64)


def test_a_press_of_the_session_protocol_is_seeded_biased_and_indexed(llama):
    """The session asks any press through kvdiv.kernel.presses.protocol, not for ProbabilisticPress: a press of one's
    own providing the members is seeded per document, its bias reaches the prefix and its kept positions are reported;
    a press without them (here the same eviction, and kvpress's RandomPress, which has a ``seed``) runs as before."""
    from kvdiv.kernel.presses.protocol import BiasedPress, IndexedPress, SeededPress

    ids = prompt(llama)
    assert all(isinstance(ProtocolKnorm(), kind) for kind in (SeededPress, BiasedPress, IndexedPress))
    actions = {
        "mine": ProtocolKnorm(compression_ratio=0.5),
        "plain": DoubledKnorm(compression_ratio=0.5),
        "random": RandomPress(compression_ratio=0.5, seed=3),
    }
    s = KernelSession(llama, ids, actions, generation(master_seed=1, study_seed=2, horizon=4), document_id="doc")
    draw = derive_seed(1, 2, "doc", "mine", 5)
    assert s.press_seeds() == {
        "mine": {"seed": 5, "draw_seed": draw, "layer_seeds": [derive_seed(draw, layer) for layer in range(s.n_layers)]}
    }
    mine, plain = s.kept_indices("mine"), s.kept_indices("plain")
    for layer in range(s.n_layers):
        assert torch.equal(s.prompt_cache("mine").keys[layer], s.prompt_cache("plain").keys[layer])
        assert (s.prompt_cache("mine").bias[layer] == -0.5).all() and (s.prompt_cache("plain").bias[layer] == 0).all()
        assert torch.equal(mine[layer], s.presses["mine"].kept_indices[layer][0]) and plain[layer] is None
    # the bias acts at decode time: the two caches hold the same entries, only the bias differs
    c_mine, c_plain = s.new_chain("mine"), s.new_chain("plain")
    laws = s.step([c_mine, c_plain], [33, 33])
    assert not torch.equal(laws[0], laws[1])


def _nan_or_zero_filled_run(loaded, fill, monkeypatch) -> list[torch.Tensor]:
    """Every law of a session whose new K/V buffers are filled with ``fill``: chains of every default press, a
    decode-time compression action, a released slot taken again, a fork, and the buffers regrown mid-way."""
    from test_decoding import DECODING

    from kvdiv.kernel.chain_slots import ChainSlots

    monkeypatch.setattr(ChainSlots, "unused_fill", fill)
    actions = {**PRESS_SPECS, "pyramid_decoding": DECODING["pyramid_decoding"], "dec_tova": DECODING["dec_tova"]}
    session = KernelSession(loaded, prompt(loaded, n=150, seed=4), actions, generation(horizon=2), max_chains=3)
    names = [REFERENCE, "snapkv", "pyramid", "pyramid_decoding", "dec_tova", "streaming", REFERENCE]
    chains = [session.new_chain(n) for n in names]
    g = torch.Generator().manual_seed(5)
    vocab = session.initial_probs().numel()
    laws = []
    pools = session._chains.pools
    capacity = {name: pool.capacity for name, pool in pools.items()}
    for t in range(70):  # horizon 2: the pools' capacity is exceeded and regrown
        if t == 3:
            session.release([chains.pop(1)])  # its slot is taken again by the fork
            chains.append(session.fork(chains[2]))
        laws.append(session.step(chains, torch.randint(10, vocab, (len(chains),), generator=g)))
    assert any(pool.capacity > capacity[name] for name, pool in pools.items())  # regrown
    assert sum(pool.n_slots for pool in pools.values()) > 3  # slots doubled
    assert session.compressions(chains[2]) > 0 and session.compressions(chains[3]) > 0  # decode-time cuts happened
    return laws


@pytest.mark.parametrize("layout", LAYOUTS)
def test_laws_never_read_unwritten_buffer_entries(llama, layout, monkeypatch):
    """Slot buffers are allocated uninitialised; only the entries a chain's attention span reads past its length
    are zeroed (kvdiv.kernel.chain_slots). With new buffers full of NaN every law is finite and bit-identical to the
    laws with zero-filled buffers: nothing reads an entry that was neither written nor zeroed."""
    llama = with_layout(llama, layout)
    nan = _nan_or_zero_filled_run(llama, float("nan"), monkeypatch)
    zero = _nan_or_zero_filled_run(llama, 0.0, monkeypatch)
    uninitialised = _nan_or_zero_filled_run(llama, None, monkeypatch)
    assert all(torch.isfinite(law).all() for law in nan)
    for a, b, c in zip(nan, zero, uninitialised):
        assert torch.equal(a, b) and torch.equal(a, c)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_without_ensure_finite_nan_buffers_poison_the_laws(llama, layout, monkeypatch):
    """The invariant's test can fail: skip the zeroing and the NaN-filled entries inside the attention spans reach
    the laws."""
    from kvdiv.kernel.chain_slots import ChainSlots

    monkeypatch.setattr(ChainSlots, "ensure_finite", lambda self, slot, end: None)
    laws = _nan_or_zero_filled_run(with_layout(llama, layout), float("nan"), monkeypatch)
    assert not all(torch.isfinite(law).all() for law in laws)


def test_an_observer_sees_each_batched_step(llama):
    """kvdiv.kernel.batched_step.observe_steps: one record per forward with the live rows (ended chains absorb EOS
    without a row), the K/V entries the step's attention read (what kv_entries_read grew by) and its seconds; nothing
    after the block; the laws are those of an unobserved step."""
    from kvdiv.kernel.batched_step import observe_steps

    ids = prompt(llama, seed=11)
    actions = {"snapkv": PRESS_SPECS["snapkv"]}
    observed, plain = (KernelSession(llama, ids, actions, generation(horizon=4)) for _ in range(2))
    records = []
    laws = []
    for s in (observed, plain):
        chains = [s.new_chain(REFERENCE), s.new_chain("snapkv"), s.new_chain("snapkv")]
        eos = s.eos_token_ids[0]
        if s is observed:
            with observe_steps(records.append):
                before = s.kv_entries_read
                laws.append(s.step(chains, [40, 41, 42]))
                grown = s.kv_entries_read - before
                laws.append(s.step(chains, [43, eos, 44]))  # the second chain ends: two live rows
            s.step(chains, [45, 46, 47])  # not observed
        else:
            laws += [s.step(chains, [40, 41, 42]), s.step(chains, [43, eos, 44])]
    assert [(r.rows, r.padding >= 0) for r in records] == [(3, True), (2, True)]
    assert records[0].kv_entries == grown > 0 and all(r.seconds > 0 for r in records)
    assert torch.equal(laws[0], laws[2]) and torch.equal(laws[1], laws[3])
