"""Tokenizers, end of turn and chat templates: how kvdiv turns a model's tokenizer into prompts and EOS ids.

- :func:`bytes_tokenizer`: the built-in 259-token byte tokenizer (no download) with a ChatML template, for
  random models (``tokenizer: bytes`` in a spec);
- :func:`apply_chat_template`, :func:`configure_chat_template`, :func:`uses_chat_template`: the spec's
  ``chat_template`` (true: the tokenizer's own, false: none, a string: a Jinja template replacing it);
- :func:`tokenizer_only_process`: a process (a document block) that loads tokenizers without importing torch;
- :func:`eos_token_ids`: every id that ends generation, the model's own end of turn first (``[0]`` is kvdiv's
  absorbing EOS; a model with several end ids has one EOS event, see :mod:`kvdiv.trajectories.coupling`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # documents render prompts without importing torch
    import torch

#: The ``tokenizer`` of a random model's spec that names the built-in byte tokenizer.
BYTES_TOKENIZER = "bytes"
#: ``model_max_length`` of the byte tokenizer: the context of the tiny random models (kvdiv.models.sources.TINY_CONFIG).
BYTES_MAX_LENGTH = 4096

# Tokens that end an assistant turn, by chat format (looked up in the tokenizer's vocabulary).
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>")

# Tokens that start a turn: some converted tokenizers wrongly report one of these as EOS.
START_OF_TURN_TOKENS = ("<|im_start|>", "<start_of_turn>", "<|start_header_id|>", "<|user|>")

BYTES_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

BYTES_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tokenizer_only_process() -> bool:
    """Make this process one that loads tokenizers but never torch: transformers, imported afterwards, takes torch
    for absent and imports only its tokenizer and configuration side (≈ 1.1 s instead of ≈ 3.4 s on the 2-core
    machine: benchmarks/workflow.md, "Tokenizer-only document blocks"). What the document rule's script calls first.

    Tokenizers are the same objects either way (transformers' ``TokenizersBackend`` over the ``tokenizers`` library),
    so documents are too. Afterwards ``import torch`` in this process raises ImportError. Returns False and changes
    nothing when torch or transformers is already imported (a test or notebook process), True otherwise.
    """
    import os
    import sys

    if "torch" in sys.modules or "transformers" in sys.modules:
        return False
    sys.modules["torch"] = None  # type: ignore[assignment]  # importlib.util.find_spec("torch") is then None
    # transformers says "PyTorch was not found. Models won't be available ..." on import: here that is the point
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    return True


def bytes_tokenizer():
    """A deterministic byte-level tokenizer built in-process (no download): 259 tokens.

    Ids 0, 1, 2 are ``<|endoftext|>`` (pad/unk), ``<|im_start|>`` (bos) and ``<|im_end|>`` (eos,
    the end of a turn); ids 3..258 are the 256 bytes, so every string round-trips exactly. It
    carries a ChatML chat template like SmolLM2's.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(ByteLevel.alphabet(), key=lambda ch: _BYTE_OF_CHAR[ch])
    vocab = {tok: i for i, tok in enumerate(BYTES_SPECIAL_TOKENS)}
    vocab.update({ch: len(BYTES_SPECIAL_TOKENS) + i for i, ch in enumerate(alphabet)})
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=BYTES_MAX_LENGTH,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(BYTES_SPECIAL_TOKENS)})
    tokenizer.chat_template = BYTES_CHAT_TEMPLATE
    return tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character map (the alphabet of byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


_BYTE_OF_CHAR = {ch: b for b, ch in _bytes_to_unicode().items()}


def configure_chat_template(name: str, tokenizer, spec: dict):
    """Give ``tokenizer`` the chat template of model ``name``'s spec and return it.

    ``chat_template`` in the spec: ``true`` (default) keeps the tokenizer's own template, ``false`` keeps
    it too (prompts are then not templated: see :func:`uses_chat_template`), a string is a Jinja chat
    template that replaces the tokenizer's. A string that does not render a user message is an error
    naming the model; so is a template the start-up probe refuses (:func:`kvdiv.models.chat_templates.probe_template`:
    one that drops the message or renders it differently twice).
    """
    from kvdiv.models.chat_templates import probe_template, tokenizer_template, tokenizer_variables

    template = spec.get("chat_template", True)
    if isinstance(template, str):
        tokenizer.chat_template = template
    source = tokenizer_template(tokenizer)
    if template is not False and source:
        owner = f"model {name!r}" + (" (chat_template in its spec)" if isinstance(template, str) else "")
        probe_template(source, owner=owner, variables=tokenizer_variables(tokenizer))
    return tokenizer


def uses_chat_template(tokenizer, spec: dict) -> bool:
    """Whether prompts for this model are wrapped in a chat template: the spec does not say
    ``chat_template: false`` and the tokenizer (after :func:`configure_chat_template`) has one."""
    return spec.get("chat_template", True) is not False and bool(getattr(tokenizer, "chat_template", None))


def apply_chat_template(tokenizer, text: str, enabled: bool = True, owner: str | None = None) -> str:
    """The final prompt string for a user message: chat-templated with a generation prompt when
    ``enabled`` and the tokenizer has a template, else ``text`` unchanged.

    Rendered by :func:`kvdiv.models.chat_templates.render_user_message` (what transformers' ``apply_chat_template``
    gives, within a time and size budget, ``strftime_now`` frozen); ``owner`` names the template in errors
    (default: the tokenizer's ``name_or_path``). Tokenize the result with ``add_special_tokens=False``.
    """
    from kvdiv.models.chat_templates import render_user_message, tokenizer_template, tokenizer_variables

    source = tokenizer_template(tokenizer) if enabled else None
    if not source:
        return text
    owner = owner or f"tokenizer {getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__!r}"
    return render_user_message(source, text, owner=owner, variables=tokenizer_variables(tokenizer))


def _as_list(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(value)]


def end_of_turn_token_id(tokenizer) -> int | None:
    """The token that ends an assistant turn: a known end-of-turn token of the vocabulary, else eos.

    A tokenizer eos that is a start-of-turn token (SmolLM2's GGUF tokenizer reports ``<|im_start|>``)
    is ignored.
    """
    vocab = tokenizer.get_vocab()
    for tok in END_OF_TURN_TOKENS:
        if tok in vocab:
            return int(vocab[tok])
    if tokenizer.eos_token is not None and tokenizer.eos_token not in START_OF_TURN_TOKENS:
        return int(tokenizer.eos_token_id)
    return None


def eos_token_ids(model: torch.nn.Module, tokenizer) -> list[int]:
    """Union of ``config.eos_token_id``, ``generation_config.eos_token_id`` and the end-of-turn token.

    Order: the tokenizer's end-of-turn token first when the model's configs also name it as EOS
    (Llama-3.1-Instruct: ``<|eot_id|>`` before ``<|end_of_text|>``), then the model config's, the
    generation config's, and the end of turn; duplicates and ids outside the vocabulary dropped.
    ``[0]`` is kvdiv's absorbing EOS.
    """
    vocab_size = int(model.config.get_text_config().vocab_size)
    configured = _as_list(getattr(model.config, "eos_token_id", None))
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        configured += _as_list(generation.eos_token_id)
    eot = end_of_turn_token_id(tokenizer)
    candidates = ([eot] if eot in configured else []) + configured + ([eot] if eot is not None else [])
    ids: list[int] = []
    for i in candidates:
        if 0 <= i < vocab_size and i not in ids:
            ids.append(i)
    if not ids:
        raise ValueError("the model has no EOS token (config, generation config and tokenizer name none)")
    return ids
