"""compress: context (kvpress's pipeline): the presses compress the context only; the question and answer prefix are
fed through every cache uncompressed. Checked against kvpress's own two-phase computation (context under the press,
then the question), and recorded in the store."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from kvdiv.documents.render import context_length, prompt_token_ids, render_prompt
from kvdiv.kernel.presses.registry import build_press
from kvdiv.kernel.session import KernelSession
from kvdiv.kernel.prefill import REFERENCE
from kvdiv.trajectories.job import run_documents
from kvdiv.trajectories.store import read_document_store
from kvdiv.settings import generation

CONTEXT = "Remember: the code word is lantern. " + "The grass is green and the sky is blue. " * 6
QUESTION = "What is the code word?"
DOCUMENT = {"id": "d", "prompt": f"{CONTEXT}\n\n{QUESTION}", "answer_prefix": "Answer:", "rendered": False}
SPEC = {"press": "KnormPress", "compression_ratio": 0.5}


def test_context_is_the_prompt_before_the_question(tiny_llama):
    ids = prompt_token_ids(DOCUMENT, tiny_llama.tokenizer, True)
    k = context_length(DOCUMENT, tiny_llama.tokenizer, True, ids)
    text = render_prompt(DOCUMENT, tiny_llama.tokenizer, True)
    assert tiny_llama.tokenizer.decode(ids[k:]).startswith(QUESTION) and text.endswith("Answer:")
    assert tiny_llama.tokenizer.decode(ids[:k]).endswith(CONTEXT + "\n\n")


def test_first_law_equals_kvpress_two_phase_computation(tiny_llama):
    """Q at step 1 = kvpress's pipeline computation: the context prefilled under the press, then the question (and
    answer prefix) forwarded through the compressed cache at their positions; P is unchanged (the full prompt)."""
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    ids = prompt_token_ids(DOCUMENT, tok, True)
    k = context_length(DOCUMENT, tok, True, ids)
    session = KernelSession(
        tiny_llama, torch.tensor(ids), {"knorm": SPEC}, generation(horizon=128), compressed_length=k
    )
    press = build_press(SPEC)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        with press(model):
            model(input_ids=torch.tensor([ids[:k]]), past_key_values=cache, use_cache=True)
        assert cache.get_seq_length() < k  # the context was compressed
        logits = model(
            input_ids=torch.tensor([ids[k:]]),
            past_key_values=cache,
            use_cache=True,
            position_ids=torch.arange(k, len(ids))[None],
        ).logits[0, -1]
        full = model(input_ids=torch.tensor([ids])).logits[0, -1]
    torch.testing.assert_close(session.initial_probs("knorm"), torch.softmax(logits.double(), -1), atol=2e-6, rtol=0)
    torch.testing.assert_close(session.initial_probs(REFERENCE), torch.softmax(full.double(), -1), atol=2e-6, rtol=0)
    kept = session.kept_indices("knorm")
    assert all(int(layer.max()) < k for layer in kept)  # only context entries were scored and kept
    whole = KernelSession(tiny_llama, torch.tensor(ids), {"knorm": SPEC}, generation(horizon=128))
    assert (whole.initial_probs("knorm") - whole.initial_probs(REFERENCE)).abs().max() == 0  # δ_1 = 0 there
    assert (session.initial_probs("knorm") - session.initial_probs(REFERENCE)).abs().max() > 1e-6


def test_store_records_compress(tiny_llama, tmp_path):
    for compress in ("prompt", "context"):
        g = generation(master_seed=1, study_seed=2, horizon=3, replicates=1, compress=compress)
        out = run_documents(
            tiny_llama, [DOCUMENT], {"knorm": SPEC}, [tmp_path / f"{compress}.zarr"], g, progress=False
        )[0]
        attrs, _ = read_document_store(out)
        assert attrs["compress"] == compress
        assert (attrs["compressed_prompt_tokens"] < attrs["prompt_tokens"]) == (compress == "context")
