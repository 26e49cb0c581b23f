"""A trajectory job and its actions at each document's own length: ``kept_entries`` recorded as the ratio its press ran
at (``press_budget``), an action that cannot act at a document's real length refused before any prefill unless it says
``allow_degenerate`` (then recorded with the reason in ``allow_degenerate``)."""

from __future__ import annotations


import pytest
from kvpress.utils import compute_n_kept

from kvdiv.kernel.presses.registry import ratio_keeping
from kvdiv.trajectories.job import run_documents
from kvdiv.trajectories.store import build_cube, read_attrs, read_document_store
from kvdiv.settings import generation

DOCUMENT = {
    "id": "d",
    "prompt": "Remember: the code word is lantern. "
    + "The grass is green and the sky is blue. " * 4
    + "\n\nWhat is it?",
    "answer_prefix": "Answer:",
    "rendered": False,
}
SETTINGS = generation(master_seed=1, study_seed=2, horizon=3, replicates=1)
KEPT = {"press": "SnapKVPress", "kept_entries": 40, "window_size": 8}
RATIO = {"press": "KnormPress", "compression_ratio": 0.5}


@pytest.mark.parametrize("compress", ["prompt", "context"])
def test_stores_record_the_budget_each_press_ran_at(tiny_llama, tmp_path, compress):
    out = run_documents(
        tiny_llama,
        [DOCUMENT],
        {"kept": KEPT, "ratio": RATIO},
        [tmp_path / "d.zarr"],
        SETTINGS.replace(compress=compress),
        progress=False,
    )[0]
    attrs, _ = read_document_store(out)
    n = attrs["compressed_prompt_tokens"]
    assert (n < attrs["prompt_tokens"]) == (compress == "context")
    assert attrs["press_budget"] == {
        "kept": {"compressed_entries": n, "compression_ratio": ratio_keeping(n, 40), "kept_entries": 40},
        "ratio": {"compressed_entries": n, "compression_ratio": 0.5, "kept_entries": compute_n_kept(n, 0.5)},
    }
    assert attrs["allow_degenerate"] == {}
    cube = build_cube("s", tiny_llama.name, [out], tmp_path / "cube.zarr")
    assert not {"press_budget", "allow_degenerate"} & set(read_attrs(cube))  # per document, not the cube's


def test_an_action_that_cannot_act_at_a_documents_length_is_refused_before_any_prefill(tiny_llama, tmp_path):
    """kept_entries beyond the document's prompt, a decoding press whose target_size the document's real cache never
    reaches within H: Q ≡ P at this document, whatever the stratum's nominal length said."""
    kept_all = {"press": "SnapKVPress", "kept_entries": 10_000, "window_size": 8}
    never = {
        "press": "DecodingPress",
        "target_size": 10_000,
        "compression_interval": 1,
        "wraps": {"press": "KnormPress"},
    }
    for name, spec, reason in (
        ("kept_all", kept_all, "kept_entries = 10000 keeps all"),
        ("never", never, ".*target_size = 10000 entries, at least the longest cache"),
    ):
        with pytest.raises(ValueError, match=rf"document 'd': action '{name}' at its \d+ entries compressed: {reason}"):
            run_documents(tiny_llama, [DOCUMENT], {name: spec}, [tmp_path / f"{name}.zarr"], SETTINGS, progress=False)
        assert not (tmp_path / f"{name}.zarr").exists()


def test_allow_degenerate_runs_and_is_recorded_with_the_reason(tiny_llama, tmp_path):
    window = {"press": "SnapKVPress", "compression_ratio": 0.5, "window_size": 100, "allow_degenerate": True}
    itself = {**RATIO, "allow_degenerate": True}
    out = run_documents(
        tiny_llama, [DOCUMENT], {"window": window, "itself": itself}, [tmp_path / "d.zarr"], SETTINGS, progress=False
    )[0]
    attrs, _ = read_document_store(out)
    assert attrs["allow_degenerate"]["itself"] is None
    assert "are pinned by its observation window of 100: its scores choose only" in attrs["allow_degenerate"]["window"]
    assert attrs["actions"]["window"]["allow_degenerate"] is True
