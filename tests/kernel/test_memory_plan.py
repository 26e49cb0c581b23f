"""kvdiv.kernel.memory_plan: what an action keeps, which actions decode, and batches cut by a memory budget (the bytes
themselves are checked against real sessions in tests/kernel/test_shared_prompt.py)."""

from __future__ import annotations

import pytest

from kvdiv.kernel.memory_plan import CacheShape, batch_sizes, decodes, document_bytes, retention

SHAPE = CacheShape(
    layers=30, kv_heads=3, head_dim=64, heads=9, hidden=576, intermediate=1536, vocab=49152, element_bytes=4
)
ACTIONS = {
    "snapkv_half": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 64},
    "snapkv_512": {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 512},
    "recent_half": {"press": "StreamingLLMPress", "compression_ratio": 0.5, "n_sink": 0},
}


@pytest.mark.parametrize(
    "held, peak, budget, sizes",
    [
        ([1, 1, 1], [0, 0, 0], 2, [2, 1]),
        ([1, 1, 1], [0, 0, 0], 0, [1, 1, 1]),  # nothing fits: each document alone
        ([1, 1], [5, 1], 7, [2]),  # the largest prefill counts once per batch
        ([1, 1], [5, 1], 6, [1, 1]),
        ([1, 1, 1, 1], [1, 3, 1, 1], 5, [2, 2]),
    ],
)
def test_batches_fit_the_budget(held, peak, budget, sizes):
    assert batch_sizes(held, peak, budget) == sizes


def test_what_an_action_keeps_and_whether_it_decodes():
    assert retention(ACTIONS["snapkv_half"]) == 0.5
    assert retention({"press": "AdaKVPress", "wraps": {"press": "SnapKVPress", "compression_ratio": 0.25}}) == 0.75
    assert retention({"press": "ProbabilisticPress", "compression_ratio": 0.9}) == pytest.approx(0.1)
    assert retention({"press": "DecodingPress", "target_size": 40, "wraps": {"press": "KnormPress"}}) == 1.0
    assert not decodes(ACTIONS["snapkv_half"], 100)
    assert decodes(
        {"press": "DecodingPress", "compression_interval": 4, "target_size": 40, "wraps": {"press": "KnormPress"}}, 100
    )
    # kept_entries (the literature's SnapKV-512): its share depends on the entries compressed, and it plans (the
    # default config's documents_per_batch: auto once failed building it without a length)
    kept = {"press": "SnapKVPress", "kept_entries": 512}
    assert retention(kept, 2048) == 0.25 and retention(kept, 400) == 1.0 and retention(kept) == 1.0
    assert not decodes(kept, 2048)
    shape = CacheShape(30, 3, 64, 9, 576, 1536, 49152, 4)  # SmolLM2-135M in float32
    shared, slots = (document_bytes(shape, 4096, 4096, {"k": kept}, 3, 128, layout) for layout in ("shared", "slots"))
    assert 0 < shared < slots
    prefill_decoding = {
        "press": "PrefillDecodingPress",
        "prefilling_press": {"press": "SnapKVPress", "compression_ratio": 0.5},
        "decoding_press": {
            "press": "DecodingPress",
            "compression_interval": 4,
            "target_size": 20,
            "wraps": {"press": "KnormPress"},
        },
    }
    assert decodes(prefill_decoding, 100)


def test_the_shared_layout_needs_a_fraction_of_the_slots_layout():
    """At 4096 tokens, SmolLM2's shapes, three actions and seven chains: the shared layout's document needs under 0.15
    of the slots layout's bytes, and more prompt needs more bytes in both."""
    for layout in ("shared", "slots"):
        assert document_bytes(SHAPE, 8192, 8192, ACTIONS, 7, 128, layout) > document_bytes(
            SHAPE, 4096, 4096, ACTIONS, 7, 128, layout
        )
    shared = document_bytes(SHAPE, 4096, 4096, ACTIONS, 7, 128, "shared")
    slots = document_bytes(SHAPE, 4096, 4096, ACTIONS, 7, 128, "slots")
    assert shared < 0.15 * slots
    # one prompt copy: 4096 entries of 2 × 30 layers × 3 heads × 64 × 4 bytes, and no more than twice that in all
    assert 4096 * SHAPE.entry_bytes < shared < 2 * 4096 * SHAPE.entry_bytes
    # a CPU job's packed prompt (kvdiv.kernel.shared_prompt.pack_prompt) is one more copy, and only in that layout
    packed = document_bytes(SHAPE, 4096, 4096, ACTIONS, 7, 128, "shared", packed=True)
    assert packed - shared == 4096 * SHAPE.entry_bytes and packed < 0.25 * slots
    assert document_bytes(SHAPE, 4096, 4096, ACTIONS, 7, 128, "slots", packed=True) == slots
    # oneDNN pads a packed matrix's output side to a multiple of 64: the values' head_dim of 80 takes 128
    wide = CacheShape(layers=2, kv_heads=1, head_dim=80, heads=1, hidden=80, intermediate=80, vocab=10, element_bytes=4)
    extra = document_bytes(wide, 640, 640, {}, 1, 8, "shared", packed=True) - document_bytes(wide, 640, 640, {}, 1, 8)
    assert extra == 640 * 2 * (80 + 128) * 4


def test_the_cpu_budget_reads_the_available_memory_through_psutil_on_every_platform(monkeypatch):
    """A CPU's free memory comes from psutil (Linux's MemAvailable, macOS's free and inactive pages), not from Linux's
    /proc/meminfo nor ``os.sysconf("SC_AVPHYS_PAGES")``, which macOS lacks (a ValueError there stopped every
    ``documents_per_batch: auto`` job); the default budget is 60 % of it."""
    import collections
    import os

    import psutil
    import torch

    from kvdiv.kernel import memory_plan
    from kvdiv.kernel.chain_slots import available_bytes

    if os.path.exists("/proc/meminfo"):  # on Linux psutil reads MemAvailable itself (both move: within 1 GiB)
        meminfo = dict(line.split(":", 1) for line in open("/proc/meminfo", encoding="ascii"))
        assert abs(available_bytes(torch.device("cpu")) - int(meminfo["MemAvailable"].split()[0]) * 1024) < 2**30
    memory = collections.namedtuple("svmem", "total available")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory(2**34, 10 * 2**30))

    def no_sysconf(name):
        raise ValueError("unrecognized configuration name")  # as on macOS

    monkeypatch.setattr(os, "sysconf", no_sysconf)
    assert memory_plan.free_bytes(torch.device("cpu")) == 10 * 2**30
    assert memory_plan.default_budget(torch.device("cpu")) == int(0.6 * 10 * 2**30)


def test_an_unknown_free_memory_is_a_clear_error_naming_the_keys(monkeypatch):
    """Where the platform reports no available memory, ``auto`` stops with what to set instead of a traceback."""
    import psutil
    import torch

    from kvdiv.kernel import memory_plan

    def unsupported():
        raise NotImplementedError("this platform")

    monkeypatch.setattr(psutil, "virtual_memory", unsupported)
    with pytest.raises(ValueError, match="memory_budget_gb.*documents_per_batch"):
        memory_plan.default_budget(torch.device("cpu"))


def test_a_platform_psutil_does_not_support_is_the_same_clear_error(monkeypatch):
    """psutil refuses an unsupported platform when imported (NotImplementedError): the budget still stops with what to
    set, not with psutil's traceback."""
    import builtins

    import torch

    from kvdiv.kernel import memory_plan

    real_import = builtins.__import__

    def refuse_psutil(name, *args, **kwargs):
        if name == "psutil":
            raise NotImplementedError("platform sunos5 is not supported")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse_psutil)
    with pytest.raises(ValueError, match="memory_budget_gb.*documents_per_batch"):
        memory_plan.default_budget(torch.device("cpu"))
