"""Linear layers through oneDNN with packed weights (kvdiv.models.prepacked): the same products within float32
round-off,
copies, pickles and weights changed in place, the measured batch-invariant row count, and decode steps padded to it."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from kvdiv.models import prepacked
from kvdiv.models.prepacked import (
    ATEN,
    ONEDNN,
    PackedLinear,
    is_prepacked,
    linear_kernel,
    min_rows,
    prepack_linears,
    unpack_linears,
    unpacked,
)
from kvdiv.kernel.session import KernelSession
from kvdiv.kernel.batched_step import step_sessions
from kvdiv.settings import generation

pytestmark = pytest.mark.skipif(not prepacked.available(), reason="this torch build has no oneDNN")


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1600, 48), torch.nn.ReLU(), torch.nn.Linear(48, 7, bias=False))


def test_packed_linears_compute_the_same_products_within_float32_round_off():
    model = small_model()
    x = torch.randn(5, 3, 1600)
    with torch.no_grad():
        default = model(x)
        exact = torch.nn.Sequential(*[copy.deepcopy(m).double() for m in model])(x.double())
        assert prepack_linears(model) == 2 and prepack_linears(model) == 0  # idempotent
        assert [type(m) for m in model] == [PackedLinear, torch.nn.ReLU, PackedLinear]
        assert is_prepacked(model) and linear_kernel(model) == ONEDNN
        packed = model(x)
        assert packed.shape == default.shape and not torch.equal(packed, default)  # another kernel, other round-off
        tol = 8 * (default.double() - exact).abs().max().item()
        assert (packed.double() - exact).abs().max().item() <= tol  # as close to the float64 product as torch's own
        # copies and pickles repack their own weights (an opaque oneDNN tensor has no storage to copy)
        assert torch.equal(copy.deepcopy(model)(x), packed)
        assert torch.equal(pickle.loads(pickle.dumps(model))(x), packed)
        # a weight changed in place is packed again on the next call
        model[2].weight.mul_(2)
        changed = model(x)
        with unpacked(model):
            assert not is_prepacked(model) and type(model[0]) is torch.nn.Linear
            torch.testing.assert_close(changed, model(x), rtol=1e-5, atol=1e-5)
        assert is_prepacked(model)  # unpacked() packs again on exit
        unpack_linears(model)
        assert linear_kernel(model) == ATEN and [type(m) for m in model][0] is torch.nn.Linear
        model[2].weight.div_(2)
        assert torch.equal(model(x), default)  # back on torch's default path: its own bits again


def test_only_plain_linear_modules_are_packed():
    class Scaled(torch.nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    model = torch.nn.Sequential(Scaled(8, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4).double())
    assert prepack_linears(model) == 1
    assert [type(m) for m in model] == [Scaled, PackedLinear, torch.nn.Linear]


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
def test_min_rows_is_the_row_count_from_which_every_row_keeps_its_bits(packed, threads):
    """For either kernel (torch's default sgemm changes kernels below 4 rows at 1 thread and below 12 at 2 on this
    machine; packed oneDNN below 2), every product of min_rows or more rows gives each row the bits of a larger one."""
    model = small_model()
    if packed:
        prepack_linears(model)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        check_min_rows(model)
    finally:
        torch.set_num_threads(before)


def check_min_rows(model):
    need = min_rows(model)
    assert 1 <= need < prepacked.PROBE_ROWS
    x = torch.randn(64, 1600)
    with torch.no_grad():
        big = model(x)
        for rows in range(need, 64):
            for start in (0, 3, 64 - rows):
                assert torch.equal(model(x[start : start + rows]), big[start : start + rows]), (rows, start)
        if need > 1:  # and it is the fewest: one row fewer changes some row's bits
            rows = need - 1
            assert any(not torch.equal(model(x[s : s + rows]), big[s : s + rows]) for s in range(0, 64 - rows, 3))


def perturbed_below(rows_needed: int):
    """A PackedLinear forward whose products of fewer than ``rows_needed`` rows round differently."""
    real = PackedLinear.forward

    def forward(self, x):
        out = real(self, x)
        return out * (1 + 2**-20) if x.reshape(-1, x.shape[-1]).shape[0] < rows_needed else out

    return forward


def test_min_rows_measures_a_kernel_that_changes_below_three_rows(monkeypatch):
    monkeypatch.setattr(prepacked, "_MIN_ROWS", {})
    monkeypatch.setattr(PackedLinear, "forward", perturbed_below(3))
    model = small_model()
    prepack_linears(model)
    assert min_rows(model) == 3
    monkeypatch.setattr(prepacked, "_MIN_ROWS", {})
    monkeypatch.setattr(PackedLinear, "forward", perturbed_below(prepacked.PROBE_ROWS))
    prepack_linears(other := small_model())
    with pytest.raises(
        RuntimeError,
        match=(
            r"packed CPU Linear \(48, 1600\) \(torch.float32\) gives a row different bits at 63 rows "
            r".*`prepack: false`"
        ),
    ):
        min_rows(other)


def test_a_one_row_step_is_padded_to_the_measured_minimum(tiny_model_factory, monkeypatch):
    """A tiny Llama whose MLP is 1536 wide (down_proj's input; one-row products take oneDNN's GEMV path on AVX-512):
    one chain stepping alone equals the same chain beside another session's rows; without the padding it does not
    (where this CPU's kernels change below min_rows)."""
    loaded = tiny_model_factory("llama", intermediate_size=1536)
    assert loaded.linear_kernel == ONEDNN
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ids = torch.tensor(loaded.tokenizer("The key is 4812. What is the key?", add_special_tokens=False)["input_ids"])
        actions = {"recent_half": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 0}}

        def one_row_alone_and_beside_others():
            a, b = (KernelSession(loaded, ids, actions, generation(horizon=4), max_chains=3) for _ in range(2))
            ca, cb, cb2 = a.new_chain("reference"), b.new_chain("reference"), b.new_chain("recent_half")
            twin = a.fork(ca)
            alone = a.step([ca], [70])
            together = step_sessions([(a, [twin], [70]), (b, [cb, cb2], [70, 71])])[0]
            return alone, together

        alone, together = one_row_alone_and_beside_others()
        assert torch.equal(alone, together)
        if min_rows(loaded.model) > 1:
            monkeypatch.setattr("kvdiv.kernel.batched_step._padding_rows", lambda rows, model, device: 0)
            alone, together = one_row_alone_and_beside_others()
            assert not torch.equal(alone, together)
    finally:
        torch.set_num_threads(before)


def test_the_spec_turns_packing_off_and_the_store_records_the_kernel(tiny_model_factory, tmp_path):
    from kvdiv.models.loading import load_model_dir

    packed = tiny_model_factory("llama")
    assert packed.linear_kernel == ONEDNN and is_prepacked(packed.model)
    plain = load_model_dir(packed.path, {**packed.spec, "prepack": False})
    assert plain.linear_kernel == ATEN and not is_prepacked(plain.model)
