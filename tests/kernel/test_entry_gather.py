"""kvdiv.kernel.presses.entry_gather: kept entries copied as rows are kvpress's gather, element for element, and every
prefill that compresses through ScorerPress.compress gives the caches kvpress's own compress gives."""

from __future__ import annotations

import contextlib

import pytest
import torch
from default_presses import DEFAULT_PRESSES
from support.calls import record_calls
from support.sessions import assert_same_prompt_caches
from kvpress.presses.scorer_press import ScorerPress

import kvdiv.kernel.prefill as prefill_module
import kvdiv.kernel.presses.entry_gather as entry_gather
from kvdiv.kernel.presses.entry_gather import KVPRESS_COMPRESS, row_gather_compress, take_entries
from kvdiv.kernel.session import KernelSession
from kvdiv.settings import generation


def _gathered(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """kvpress's way: ``gather`` along the entries with the indices expanded over head_dim."""
    return tensor.gather(2, indices.unsqueeze(-1).expand(-1, -1, -1, tensor.shape[-1])).contiguous()


@pytest.mark.parametrize("batch, heads, n, d, kept", [(1, 3, 50, 64, 25), (2, 2, 17, 16, 17), (1, 1, 5, 8, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_take_entries_is_gather(batch, heads, n, d, kept, dtype):
    """Every element, with repeated and unsorted indices, on a contiguous tensor and on a transposed view."""
    gen = torch.Generator().manual_seed(n + kept)
    tensor = torch.randn(batch, heads, n, d, generator=gen).to(dtype)
    indices = torch.randint(0, n, (batch, heads, kept), generator=gen)
    for source in (tensor, tensor.transpose(2, 3).contiguous().transpose(2, 3)):
        ours = take_entries(source, indices)
        assert ours.is_contiguous() and ours.dtype == dtype
        assert torch.equal(ours, _gathered(source, indices))


def test_take_entries_reads_each_head_its_own_entries():
    """Head h of batch b takes its rows from its own [n, d] block (a wrong offset would mix heads)."""
    tensor = torch.arange(2 * 3 * 4, dtype=torch.float32).view(2, 3, 4, 1)
    indices = torch.tensor([[[3, 0]] * 3] * 2)
    assert take_entries(tensor, indices)[..., 0].tolist() == [[[3, 0], [7, 4], [11, 8]], [[15, 12], [19, 16], [23, 20]]]


def test_row_gather_compress_installs_and_restores():
    assert ScorerPress.__dict__["compress"] is KVPRESS_COMPRESS
    with row_gather_compress():
        assert ScorerPress.compress is entry_gather.compress
    assert ScorerPress.__dict__["compress"] is KVPRESS_COMPRESS
    with pytest.raises(RuntimeError, match="inside"):
        with row_gather_compress():
            raise RuntimeError("inside")
    assert ScorerPress.__dict__["compress"] is KVPRESS_COMPRESS


#: presses that compress through ScorerPress.compress (their own, or a wrapped scorer's)
COMPRESSING = ["snapkv", "streaming", "knorm", "expected", "tova", "random", "keydiff", "lagkv", "cur"]


@pytest.mark.parametrize("name", COMPRESSING)
def test_prefill_caches_equal_kvpress_own_compress(tiny_llama, monkeypatch, name):
    """Every action's prompt cache and initial law is bit for bit what kvpress's own compress (its gathers) gives, and
    the prefill did take the rows."""
    prompt = torch.randint(5, 200, (48,), generator=torch.Generator().manual_seed(5))
    actions = {name: DEFAULT_PRESSES[name]}
    calls = record_calls(monkeypatch, entry_gather, "take_entries")
    ours = KernelSession(tiny_llama, prompt, actions, generation(horizon=4))
    assert len(calls) >= 2 * ours.n_layers
    monkeypatch.setattr(prefill_module, "row_gather_compress", contextlib.nullcontext)
    theirs = KernelSession(tiny_llama, prompt, actions, generation(horizon=4))
    assert_same_prompt_caches(ours, theirs)


def test_take_entries_refuses_what_gather_refuses():
    """An index outside [0, n) or indices for other heads raise (gather raises; a row offset would read another
    head's entry silently)."""
    tensor = torch.randn(2, 3, 10, 4)
    indices = torch.randint(0, 10, (2, 3, 5))
    for bad in (10, -1):
        wrong = indices.clone()
        wrong[0, 1, 0] = bad
        with pytest.raises(IndexError, match=r"\[0, 10\)"):
            take_entries(tensor, wrong)
    with pytest.raises(ValueError, match="shape"):
        take_entries(tensor, indices[:, :1])
