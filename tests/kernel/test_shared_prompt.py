"""The shared-prompt layout (model spec kv_layout: shared, kvdiv.kernel.shared_prompt): one prompt copy per document,
every action a bias over it. Its laws equal the slots layout's (a whole copy per chain) up to float32 round-off, its
caches are exactly the presses', a chain's bits do not depend on its company, and it holds a fraction of the memory."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from default_presses import DEFAULT_PRESSES
from support.layouts import with_layout
from kvpress import KnormPress
from test_decoding import DECODING

from kvdiv.estimands import tv
from kvdiv.kernel import memory_plan
from kvdiv.kernel.prefill import REFERENCE
from kvdiv.kernel.session import LAYOUTS, KernelSession
from kvdiv.kernel.shared_prompt import pack_prompt, packs_prompt
from kvdiv.models.prepacked import unpacked
from kvdiv.settings import generation


@dataclass
class HalvedValues(KnormPress):
    """A press whose cache is not a subset of the reference's (kept values halved): it stays a private copy."""

    def compress(self, module, hidden_states, keys, values, attentions, kwargs):
        keys, values = super().compress(module, hidden_states, keys, values, attentions, kwargs)
        return keys, values * 0.5


#: The largest |Δ law| and |Δ δ| between the layouts seen on the tiny models is 1.7e-6 (docs/internals.md); this bound
#: leaves room for other CPUs' kernels, far below any eviction's effect (δ ≫ 1e-3 here).
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def llama(tiny_model_factory):
    return tiny_model_factory("llama", initializer_range=0.25)


@pytest.fixture(scope="module")
def qwen2(tiny_model_factory):
    return tiny_model_factory("qwen2", initializer_range=0.25)


def ids(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(10, 200, (n,), generator=torch.Generator().manual_seed(seed))


def teacher_forced(loaded, prompt, actions, layout, steps=10, **kwargs):
    """Every cache's chain along the same tokens: (names, laws [caches, steps + 1, V], session)."""
    evict_first_step = kwargs.pop("evict_first_step", False)
    g = generation(horizon=steps, evict_first_step=evict_first_step)
    s = KernelSession(with_layout(loaded, layout), prompt, actions, g, **kwargs)
    names = s.caches
    chains = [s.new_chain(n) for n in names]
    tokens = torch.randint(10, 200, (steps,), generator=torch.Generator().manual_seed(1)).tolist()
    laws = [torch.stack([s.initial_probs(n) for n in names])]
    laws += [s.step(chains, [t] * len(chains)) for t in tokens]
    return names, torch.stack(laws, 1), s


@pytest.mark.parametrize(
    "arch, kwargs",
    [("llama", {}), ("qwen2", {}), ("llama", {"compressed_length": 120}), ("qwen2", {"evict_first_step": True})],
)
def test_shared_layout_equals_the_slots_layout_up_to_round_off(arch, kwargs, request):
    """Every default press, every decoding press and a private cache, teacher-forced: the two layouts' laws and
    δ_t = TV(P, Q) agree within TOLERANCE; the evictions themselves move δ by far more."""
    loaded = request.getfixturevalue(arch)
    actions = {**DEFAULT_PRESSES, **DECODING, "halved": HalvedValues(compression_ratio=0.5)}
    names, slots, _ = teacher_forced(loaded, ids(150), actions, "slots", **kwargs)
    _, shared, session = teacher_forced(loaded, ids(150), actions, "shared", **kwargs)
    assert set(session._tails) == set(names) - {"halved"}  # the one cache whose values are not the reference's
    assert (shared - slots).abs().max() < TOLERANCE
    delta_slots, delta_shared = tv(slots[1:], slots[0]), tv(shared[1:], shared[0])
    assert (delta_shared - delta_slots).abs().max() < TOLERANCE
    assert delta_shared[names.index("snapkv") - 1].max() > 100 * TOLERANCE
    # a private cache runs the slots layout's attention: its laws are that layout's bit for bit
    assert torch.equal(shared[names.index("halved")], slots[names.index("halved")])


def test_each_cache_is_the_presses_own(llama):
    """The shared layout keeps an action's cache as positions into the prompt copy: rebuilt, it is the slots layout's
    copy (what kvpress's prefill left, tests/kernel/test_session.py) bit for bit: keys, values, bias, order."""
    shared = KernelSession(with_layout(llama, "shared"), ids(90, 3), DEFAULT_PRESSES, generation(horizon=4))
    slots = KernelSession(with_layout(llama, "slots"), ids(90, 3), DEFAULT_PRESSES, generation(horizon=4))
    for name in shared.caches:
        a, b = shared.prompt_cache(name), slots.prompt_cache(name)
        assert a.length == b.length and a.position == b.position, name
        for layer in range(shared.n_layers):
            for x, y in ((a.keys, b.keys), (a.values, b.values), (a.bias, b.bias)):
                assert torch.equal(x[layer], y[layer]), (name, layer)
        if name != REFERENCE:
            for x, y in zip(shared.kept_indices(name), slots.kept_indices(name)):
                assert (x is None and y is None) or torch.equal(x, y), name


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_chain_has_the_same_bits_alone_and_in_a_crowd(llama, layout):
    """A chain's laws do not depend on how many chains share its step nor where it sits among them (the prompt's
    products come in fixed blocks of chains: here 1 chain against 13 in two blocks of 8, at several positions)."""
    loaded = with_layout(llama, layout)
    actions = {name: DEFAULT_PRESSES[name] for name in ("snapkv", "streaming", "prob", "adakv", "pyramid")}
    s = KernelSession(loaded, ids(130, 5), actions, generation(horizon=8))
    tokens = [40 + t for t in range(6)]
    alone = {}
    for name in s.caches:
        c = s.new_chain(name)
        alone[name] = torch.stack([s.step([c], [t])[0] for t in tokens])
        s.release([c])
    crowd = [*s.caches, *reversed(s.caches), REFERENCE, "prob"]
    chains = [s.new_chain(name) for name in crowd]
    laws = torch.stack([s.step(chains, [t] * len(chains)) for t in tokens], 1)
    for i, name in enumerate(crowd):
        assert torch.equal(laws[i], alone[name]), (name, i)


def test_the_packed_prompt_gives_torchs_products_up_to_round_off_and_is_not_read_once_changed(llama):
    """Where the model's Linears are packed (the tiny models' default, as a CPU job's), the session packs its prompt
    copy and decodes against it: teacher-forced laws within 1e-6 of the same session's with torch's batched products
    (packed copy dropped). A prompt copy changed in place since (its version moved) is not read packed: the step's
    laws are then torch's products' bit for bit. Without packed Linears (``prepack: false``) nothing is packed."""
    actions = {name: DEFAULT_PRESSES[name] for name in ("snapkv", "streaming", "prob")}
    loaded = with_layout(llama, "shared")
    _, packed, s = teacher_forced(loaded, ids(200, 2), actions, "shared")
    assert s._prompt.packed is not None and s.memory()["prompt"] == s._prompt.nbytes()
    s._prompt.packed = None
    names = s.caches
    chains = [s.new_chain(n) for n in names]
    tokens = torch.randint(10, 200, (10,), generator=torch.Generator().manual_seed(1)).tolist()
    bmm = torch.stack([torch.stack([s.initial_probs(n) for n in names])] + [s.step(chains, [t] * 4) for t in tokens], 1)
    assert 0 < (packed - bmm).abs().max() < 1e-6  # (0 would mean the packed products never ran)
    # stale: every layer's values changed in place (by a no-op) after packing; the step falls back to torch's products
    stale, fresh = (KernelSession(loaded, ids(200, 2), actions, generation(horizon=2)) for _ in range(2))
    fresh._prompt.packed = None
    for v in stale._prompt.values:
        v.add_(0.0)
    assert not stale._prompt.packed.current(0, stale._prompt.keys_t[0], stale._prompt.values[0])
    p = fresh._prompt  # (a dense copy replaced by another tensor is not the packed one's source either)
    assert pack_and_replace(p) is False
    laws = [x.step([x.new_chain(n) for n in x.caches], [7] * 4) for x in (stale, fresh)]
    assert torch.equal(laws[0], laws[1])
    with unpacked(llama.model):
        assert KernelSession(loaded, ids(200, 2), actions, generation(horizon=2))._prompt.packed is None


def pack_and_replace(prompt) -> bool:
    """Pack ``prompt``, replace its first layer's values by an equal copy (same version), and say whether that layer's
    packed copy still counts as current."""
    pack_prompt(prompt)
    old, new = prompt.values[0], prompt.values[0].clone()
    while new._version < old._version:  # (the same version too: only the address tells them apart)
        new.add_(0.0)
    assert new._version == old._version
    prompt.values[0] = new
    current = prompt.packed.current(0, prompt.keys_t[0], prompt.values[0])
    prompt.packed = None
    return current


def test_the_shared_layout_holds_a_fraction_of_the_memory_and_the_plan_counts_it(llama):
    """At 600 tokens, 3 actions and their 7 chains, the shared layout's session holds less than half the slots
    layout's bytes (what both allocate, the shared prompt's packed copy included — here 2.5 prompt copies, the values'
    head_dim of 16 padded to 64 by oneDNN; the tails, H + 64 entries per chain, weigh more the shorter the prompt), and
    kvdiv.kernel.memory_plan predicts each layout's bytes within 5 %."""
    actions = {
        "snapkv": DEFAULT_PRESSES["snapkv"],
        "streaming": DEFAULT_PRESSES["streaming"],
        "prob": DEFAULT_PRESSES["prob"],
    }
    held = {}
    shape = memory_plan.CacheShape.from_model(llama.model)
    for layout in LAYOUTS:
        s = KernelSession(with_layout(llama, layout), ids(600, 7), actions, generation(horizon=128), max_chains=7)
        s.release([s.new_chain(name) for name in s.caches])  # (a chain of each cache: what a job has loaded)
        held[layout] = sum(s.memory().values())
        laws = 3 * 7 * shape.vocab * 8
        packed = packs_prompt(llama.model, torch.float32, torch.device("cpu"))  # (True: its Linears are packed)
        planned = memory_plan.document_bytes(shape, 600, 600, actions, 7, 128, layout, packed) - laws
        assert abs(planned - held[layout]) < 0.05 * held[layout], (layout, planned, held[layout])
    assert held["shared"] < 0.5 * held["slots"]
