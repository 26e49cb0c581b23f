"""A chain's laws do not depend on its company: nothing evicted gives P's laws bit for bit, whatever other actions and
chains share the session and its steps (issue 39, item 8; docs/internals.md#kernel-pairs)."""

from __future__ import annotations

import pytest
import torch

from kvdiv.kernel.prefill import REFERENCE
from kvdiv.kernel.session import KernelSession
from kvdiv.settings import generation

#: Actions that evict nothing (a ProbabilisticPress at ratio 0 under each budget and design, SnapKV at ratio 0)
NOTHING_EVICTED = {
    "pips0": {"press": "ProbabilisticPress", "design": "pips", "compression_ratio": 0.0},
    "global0": {"press": "ProbabilisticPress", "budget": "global", "compression_ratio": 0.0},
    "snapkv0": {"press": "SnapKVPress", "compression_ratio": 0.0, "window_size": 8},
}
#: Actions that do evict, as company
EVICTING = {
    "recent_half": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 2},
    "prob_half": {"press": "ProbabilisticPress", "compression_ratio": 0.5, "seed": 1},
}


def _laws_beside_company(loaded, ids: torch.Tensor, steps: int) -> dict[str, list[torch.Tensor]]:
    """Every no-op chain's laws and the reference's, stepped together with evicting chains and two more reference
    chains, interleaved so that no-op and reference chains sit at many positions of the step."""
    s = KernelSession(loaded, ids, {**EVICTING, **NOTHING_EVICTED}, generation(horizon=steps))
    names = [REFERENCE, "recent_half", *NOTHING_EVICTED, REFERENCE, "prob_half", *reversed(NOTHING_EVICTED), REFERENCE]
    chains = [s.new_chain(n) for n in names]
    laws: dict[str, list[torch.Tensor]] = {}
    for t in range(steps):
        step = s.step(chains, [100 + 7 * t] * len(chains))
        for i, name in enumerate(names):
            laws.setdefault(f"{name}@{i}", []).append(step[i])
    return laws


def _assert_bitwise_p(laws: dict[str, list[torch.Tensor]]) -> None:
    reference = torch.stack(laws[f"{REFERENCE}@0"])
    for key, rows in laws.items():
        name = key.split("@")[0]
        if name in NOTHING_EVICTED or name == REFERENCE:
            got = torch.stack(rows)
            assert torch.equal(got, reference), (key, float((got - reference).abs().max()))


def test_nothing_evicted_is_p_bit_for_bit_in_any_company_smollm2(smollm2):
    """SmolLM2, a 400-token prompt (spans reaching the buffers' capacity from the first step): before the capacity was
    a multiple of the attention span, a capped span misaligned the rows of the attention's products and the no-op
    chains' laws moved by up to 3e-6 with their position in the step."""
    text = "The quick brown fox jumps over the lazy dog. " * 40
    ids = smollm2.tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids[0]
    _assert_bitwise_p(_laws_beside_company(smollm2, ids, steps=6))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("n", [48, 100, 200])
def test_nothing_evicted_is_p_bit_for_bit_in_any_company(arch, n, tiny_model_factory):
    loaded = tiny_model_factory(arch, initializer_range=0.25)
    g = torch.Generator().manual_seed(n)
    ids = torch.randint(10, 200, (n,), generator=g)
    _assert_bitwise_p(_laws_beside_company(loaded, ids, steps=8))
