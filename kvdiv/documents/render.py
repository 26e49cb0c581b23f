"""Rendering: a document's user message → the prompt text and token ids one model is fed.

A document stores the **untemplated** user message (``prompt``) and ``answer_prefix``; every model renders it
itself: with a chat template ``chat(message) + answer_prefix``, without one ``message + "\\n\\n" + answer_prefix``,
``rendered: true`` documents unchanged; tokenized with ``add_special_tokens=False``. Documents are *sized* with the
study's reference model's rendering; each trajectory job renders with its own model and records the ids it fed.
The contract: docs/internals.md#documents.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping


def build_prompt(user: str, answer_prefix: str, chat: Callable[[str], str] | None) -> str:
    """The final prompt text: ``chat(user) + answer_prefix`` with a chat template, else the plain
    message and the answer prefix separated by a blank line."""
    if chat is not None:
        return chat(user) + answer_prefix
    return f"{user}\n\n{answer_prefix}" if answer_prefix else user


def chat_function(tokenizer, enabled: bool) -> Callable[[str], str] | None:
    """The user message → chat-templated text map of ``tokenizer`` (None when disabled or absent)."""
    from kvdiv.llm.tokenization import apply_chat_template

    if not enabled or not getattr(tokenizer, "chat_template", None):
        return None
    return lambda text: apply_chat_template(tokenizer, text, True)


def render_with(document: Mapping[str, Any], chat: Callable[[str], str] | None) -> str:
    """``document`` (a documents-JSONL record) rendered with the message → chat text map ``chat``
    (None: no template); a ``rendered`` document's prompt is returned unchanged."""
    if document.get("rendered", False):
        if document.get("answer_prefix"):
            raise ValueError(f"document {document.get('id')!r}: a rendered prompt cannot carry an answer_prefix")
        return str(document["prompt"])
    return build_prompt(str(document["prompt"]), str(document.get("answer_prefix", "")), chat)


def render_prompt(document: Mapping[str, Any], tokenizer, chat_template: bool) -> str:
    """The text a model with ``tokenizer`` is fed for ``document``; ``chat_template``: whether the model
    wraps messages in its template (``LoadedModel.chat_template``)."""
    return render_with(document, chat_function(tokenizer, chat_template))


def prompt_token_ids(document: Mapping[str, Any], tokenizer, chat_template: bool) -> list[int]:
    """Token ids of :func:`render_prompt` (``add_special_tokens=False``)."""
    return list(tokenizer(render_prompt(document, tokenizer, chat_template), add_special_tokens=False)["input_ids"])


__all__ = ["build_prompt", "chat_function", "prompt_token_ids", "render_prompt", "render_with"]
