"""The reference chains alone (kvdiv.trajectories.reference) are the x chains of a shared-reference coupled run, token
for token and EOS flag for EOS flag: on toy kernels with two end ids (folded) and on a tiny random Llama (one batched
forward for several documents)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvdiv.kernel.session import KernelSession
from kvdiv.settings import generation
from kvdiv.trajectories.generate import generate
from kvdiv.trajectories.reference import reference_chains
from support.job_documents import ACTIONS, PROMPTS
from support.toy_kernels import ToyKernelSession, history_kernel, mixture_kernel

V, H, R = 10, 8, 3
EOS = [8, 9]


def toy(seed: int) -> ToyKernelSession:
    p = history_kernel(V, seed)
    return ToyKernelSession(p, {"a": mixture_kernel(p, history_kernel(V, seed + 100), 0.3)}, eos_token_ids=EOS)


def shared(parts, horizon=H, replicates=R):
    """The shared-reference settings of a document's ``parts`` = (master seed, study seed, document id)."""
    return generation(
        master_seed=parts[0],
        study_seed=parts[1],
        horizon=horizon,
        replicates=replicates,
        mode="complete",
        reference_chain="shared",
        tv_atol=1e-6,
    )


def coupled_x(session, parts, eos, actions=("a",)):
    out = generate(session, list(actions), shared(parts), document_id=parts[2], eos_token_ids=eos, progress=False)
    return out[actions[0]]


def test_reference_chains_are_the_shared_reference_x_on_toy_kernels():
    parts = [(7, 50, f"doc-{d}") for d in range(4)]
    chains = reference_chains([toy(d) for d in range(4)], parts, R, H, eos_token_ids=EOS)
    ended = 0
    for d, (x, eos) in enumerate(chains):
        coupled = coupled_x(toy(d), parts[d], EOS)
        assert x.shape == eos.shape == (R, H)
        assert np.array_equal(x, coupled.x) and np.array_equal(eos, coupled.eos_x)
        ended += int(eos[:, -1].sum())
        after = np.logical_or.accumulate(np.isin(x, EOS), axis=1)
        assert np.array_equal(eos, after)
        assert not np.isin(x[np.roll(eos, 1, axis=1) & eos], [9]).any()  # after an end: the folded id 8 only
    assert 0 < ended < 4 * R  # both kinds of chains: ended within H and not
    again = reference_chains([toy(d) for d in range(4)], parts, R, H, eos_token_ids=EOS)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(chains, again))
    other = reference_chains([toy(0)], [(7, 51, "doc-0")], R, H, eos_token_ids=EOS)
    assert not np.array_equal(other[0][0], chains[0][0])  # another study seed, another stream


def test_reference_chains_batched_on_a_tiny_llama(tiny_llama):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        parts = [(3, 2, f"doc-{d}") for d in range(len(PROMPTS))]
        ids = [torch.tensor(tiny_llama.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in PROMPTS]
        eos = tiny_llama.eos_token_ids

        def session(i, actions):
            return KernelSession(tiny_llama, i, actions, shared(parts[0], horizon=10, replicates=2))

        chains = reference_chains([session(i, {}) for i in ids], parts, 2, 10, eos_token_ids=eos)
        for d, (x, flags) in enumerate(chains):
            coupled = generate(
                session(ids[d], {"recent_half": ACTIONS["recent_half"]}),
                ["recent_half"],
                shared(parts[d], horizon=10, replicates=2),
                document_id=parts[d][2],
                eos_token_ids=eos,
                progress=False,
            )["recent_half"]
            assert np.array_equal(x, coupled.x) and np.array_equal(flags, coupled.eos_x)
    finally:
        torch.set_num_threads(before)


def test_reference_chains_reject_bad_arguments():
    with pytest.raises(ValueError, match="one seed_parts per session: 1 sessions, 2 seed_parts"):
        reference_chains([toy(0)], [(1, 2, "a"), (1, 2, "b")], R, H, eos_token_ids=EOS)
    with pytest.raises(ValueError, match="replicates and horizon must be >= 1, got 0 and 8"):
        reference_chains([toy(0)], [(1, 2, "a")], 0, H, eos_token_ids=EOS)
