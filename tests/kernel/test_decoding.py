"""Decode-time compression (kvpress's DecodingPress, CompressionRatioDecodingPress, PrefillDecodingPress) in the kernel
session: along a chain, the laws equal kvpress's own decode path (``with press(model)``: prefill, then one token per
forward); before the first compression and when the press keeps everything, Q equals P exactly; forks carry the
state; batching chains of several actions and sessions changes no law."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from kvdiv.kernel.presses.registry import build_press
from kvdiv.kernel.session import KernelSession
from kvdiv.kernel.prefill import REFERENCE
from kvdiv.kernel.batched_step import step_sessions
from kvdiv.settings import generation

PROMPT_LEN = 48
STEPS = 14
KNORM = {"press": "KnormPress"}

DECODING = {
    "dec_knorm": {
        "press": "DecodingPress",
        "compression_interval": 4,
        "target_size": 40,
        "hidden_states_buffer_size": 0,
        "wraps": KNORM,
    },
    "dec_streaming": {
        "press": "DecodingPress",
        "compression_interval": 5,
        "target_size": 36,
        "wraps": {"press": "StreamingLLMPress", "n_sink": 2},
    },
    "dec_snapkv": {
        "press": "DecodingPress",
        "compression_interval": 6,
        "target_size": 44,
        "hidden_states_buffer_size": 8,
        "wraps": {"press": "SnapKVPress", "window_size": 3},
    },
    "dec_tova": {
        "press": "DecodingPress",
        "compression_interval": 3,
        "target_size": 42,
        "wraps": {"press": "TOVAPress"},
    },
    "ratio_knorm": {
        "press": "CompressionRatioDecodingPress",
        "compression_interval": 5,
        "target_compression_ratio": 0.3,
        "wraps": KNORM,
    },
    "prefill_decoding": {
        "press": "PrefillDecodingPress",
        "prefilling_press": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 8},
        "decoding_press": {"press": "DecodingPress", "compression_interval": 4, "target_size": 20, "wraps": KNORM},
    },
    "pyramid_decoding": {
        "press": "PrefillDecodingPress",  # layers of different lengths (padded in the session)
        "prefilling_press": {"press": "PyramidKVPress", "compression_ratio": 0.5, "window_size": 8},
        "decoding_press": {"press": "DecodingPress", "compression_interval": 4, "target_size": 20, "wraps": KNORM},
    },
}


@pytest.fixture(scope="module")
def llama(tiny_model_factory):
    return tiny_model_factory("llama", initializer_range=0.25)


def prompt(loaded, n: int = PROMPT_LEN, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, loaded.model.config.vocab_size, (n,), generator=g)
    eos = set(loaded.eos_token_ids)
    return torch.tensor([t if t not in eos else 11 for t in ids.tolist()])


def tokens(loaded, n: int = STEPS, seed: int = 5) -> list[int]:
    return prompt(loaded, n, seed).tolist()


@pytest.fixture(scope="module")
def session(llama):
    return KernelSession(llama, prompt(llama), DECODING, generation(horizon=STEPS))


def kvpress_decode(loaded, ids, spec, toks):
    """kvpress's own path: ``with press(model)``, one prefill, then one token per forward (positions n, n+1, ...);
    returns the laws after each token and the cache's per-layer lengths at the end."""
    model = loaded.model
    press = build_press(spec)
    cache = DynamicCache(config=model.config)
    laws = []
    with torch.no_grad(), press(model):
        model(input_ids=ids[None], past_key_values=cache, use_cache=True)
        for i, t in enumerate(toks):
            pos = torch.tensor([[ids.numel() + i]])
            out = model(
                input_ids=torch.tensor([[t]]),
                past_key_values=cache,
                position_ids=pos,
                cache_position=pos[0],
                use_cache=True,
            )
            laws.append(torch.softmax(out.logits[0, -1].double(), -1))
    for layer in model.model.layers:  # head-wise prefill presses leave their masks on the modules
        layer.self_attn.masked_key_indices = None
    return torch.stack(laws), [layer.keys.shape[2] for layer in cache.layers]


def chain_laws(session, cache, toks):
    c = session.new_chain(cache)
    laws = torch.stack([session.step([c], [t])[0] for t in toks])
    state = session.cache_length(c), session.compressions(c)
    session.release([c])
    return laws, state


@pytest.mark.parametrize("name", list(DECODING))
def test_decoding_laws_equal_kvpress_decode_path(session, llama, name):
    """Teacher-forced along the same tokens, every law equals kvpress's own ``with press(model)`` decoding, and the
    cache has the length kvpress's has (its longest layer)."""
    toks = tokens(llama)
    expected, lengths = kvpress_decode(llama, session.prompt_ids, DECODING[name], toks)
    got, (length, compressions) = chain_laws(session, name, toks)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    assert length == max(lengths)
    assert compressions >= 2
    reference, _ = chain_laws(session, REFERENCE, toks)
    assert not torch.allclose(got[-1], reference[-1], atol=1e-4)  # the compression changed the law


def test_decode_only_press_equals_the_reference_until_its_first_compression(session, llama):
    """DecodingPress compresses at the end of its ``compression_interval``-th decode forward, after that forward's
    attention: the laws of forwards 1..interval are P's bit for bit, the next one is not."""
    toks = tokens(llama)
    reference, _ = chain_laws(session, REFERENCE, toks)
    for name, interval in [("dec_knorm", 4), ("dec_streaming", 5), ("dec_snapkv", 6)]:
        got, _ = chain_laws(session, name, toks)
        assert torch.equal(got[:interval], reference[:interval]), name
        assert not torch.allclose(got[interval], reference[interval], atol=1e-6), name


def test_a_decoding_press_that_keeps_everything_gives_q_equal_p(llama):
    """target_size above every cache length: it never cuts anything, Q ≡ P bit for bit at every step."""
    keep = {"press": "DecodingPress", "compression_interval": 3, "target_size": PROMPT_LEN + STEPS + 1, "wraps": KNORM}
    session = KernelSession(llama, prompt(llama), {"keep": keep}, generation(horizon=STEPS))
    toks = tokens(llama)
    got, (length, _) = chain_laws(session, "keep", toks)
    reference, _ = chain_laws(session, REFERENCE, toks)
    assert torch.equal(got, reference)
    assert length == PROMPT_LEN + STEPS


def test_a_fork_carries_the_compression_state(session, llama):
    """A chain forked between compressions continues exactly like its source (same counts, same buffers)."""
    toks = tokens(llama)
    alone, _ = chain_laws(session, "dec_snapkv", toks)
    c = session.new_chain("dec_snapkv")
    laws = [session.step([c], [t])[0] for t in toks[:8]]  # one compression (at 6) behind, 4 states buffered
    f = session.fork(c)
    session.release([c])
    laws += [session.step([f], [t])[0] for t in toks[8:]]
    assert session.compressions(f) == 2
    session.release([f])
    torch.testing.assert_close(torch.stack(laws), alone, atol=0, rtol=0)


def test_batching_decoding_chains_with_other_chains_and_sessions_changes_no_law(session, llama):
    """One forward over chains of every decoding action, the reference, different histories, a second session:
    each row's law equals the chain decoded alone."""
    other = KernelSession(llama, prompt(llama, seed=3), {"dec_knorm": DECODING["dec_knorm"]}, generation(horizon=STEPS))
    names = [REFERENCE, *DECODING]
    seqs = [tokens(llama, seed=10 + i) for i in range(len(names))]
    chains = [session.new_chain(n) for n in names]
    other_chain = other.new_chain("dec_knorm")
    other_seq = tokens(llama, seed=99)
    batched, other_laws = [], []
    for t in range(STEPS):
        laws, olaws = step_sessions([(session, chains, [s[t] for s in seqs]), (other, [other_chain], [other_seq[t]])])
        batched.append(laws)
        other_laws.append(olaws[0])
    batched = torch.stack(batched, 1)
    session.release(chains)
    for i, name in enumerate(names):
        alone, _ = chain_laws(session, name, seqs[i])
        torch.testing.assert_close(batched[i], alone, atol=1e-5, rtol=0)
    alone, _ = chain_laws(other, "dec_knorm", other_seq)
    torch.testing.assert_close(torch.stack(other_laws), alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "spec, match",
    [
        (
            {
                "press": "DecodingPress",
                "target_size": 8,
                "compression_interval": 4,
                "wraps": {"press": "SnapKVPress", "window_size": 8},
            },
            "window of 8 queries",
        ),
        ({"press": "DecodingPress", "target_size": 0, "wraps": KNORM}, "target_size"),
        ({"press": "DecodingPress", "compression_interval": 0, "wraps": KNORM}, "compression_interval"),
        ({"press": "DecodingPress", "hidden_states_buffer_size": -1, "wraps": KNORM}, "hidden_states_buffer_size"),
        (
            {"press": "DecodingPress", "wraps": {"press": "StreamingLLMPress"}, "unknown": 1},
            "unknown argument 'unknown'",
        ),
        ({"press": "DecodingPress", "wraps": {"press": "BlockPress", "wraps": KNORM}}, "rejected its arguments"),
        (
            {"press": "CompressionRatioDecodingPress", "target_compression_ratio": 1.0, "wraps": KNORM},
            "target_compression_ratio",
        ),
        ({"press": "CAMPress"}, "merges evicted entries"),
    ],
)
def test_bad_decoding_actions_name_the_argument(spec, match):
    with pytest.raises(ValueError, match=match):
        build_press(spec, name="dec")
