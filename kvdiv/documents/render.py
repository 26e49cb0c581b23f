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
    from kvdiv.models.tokenization import apply_chat_template

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


def question_text(document: Mapping[str, Any]) -> str:
    """The document's question, which ``compress: context`` keeps out of compression: its ``question`` field, which
    must end its message (for a ``rendered`` prompt: come after most of it), else the message's last paragraph (the
    text after its last blank line: kvdiv's synthetic tasks and RULER/HELMET records end their message with the
    question so) when that paragraph is shorter than the text before it. Anything else is ambiguous: an error naming
    the document, never a guess that would leave most of the context uncompressed."""
    doc = document.get("id")
    message = str(document["prompt"]).rstrip()
    question = document.get("question")
    if question:
        question = str(question).strip()
        start = message.rfind(question)
        if start < 0:
            raise ValueError(f"document {doc!r}: its 'question' field does not occur in its prompt")
        after = message[start + len(question) :]
        if (not document.get("rendered", False) and after.strip()) or len(after) > start:
            raise ValueError(
                f"document {doc!r}: its question does not end its message ({len(after)} characters follow it): "
                "compress: context compresses only what precedes the question and would leave the rest "
                "uncompressed; put the question last, or use compress: prompt"
            )
        return question
    if document.get("rendered", False) or "\n\n" not in message:
        raise ValueError(
            f"document {doc!r}: compress: context needs the question kept out of compression; give the "
            f"record a 'question' field (text that ends its prompt)"
            f"{'' if document.get('rendered') else ' or end the message with it after a blank line'}"
        )
    context, last = message.rsplit("\n\n", 1)
    if len(last) >= len(context):
        raise ValueError(
            f"document {doc!r}: compress: context would take its last paragraph ({len(last)} characters) for the "
            f"question, but it is not shorter than the {len(context)} characters before it: where the question "
            "starts is ambiguous; give the record a 'question' field"
        )
    return last


def context_length(document: Mapping[str, Any], tokenizer, chat_template: bool, prompt_ids: list[int]) -> int:
    """``compress: context``: how many leading ``prompt_ids`` (the :func:`prompt_token_ids` of ``document``) are the
    context the presses compress. The rest starts where the question's last occurrence in the rendered prompt
    starts: the question, the chat template's end of turn and generation prompt and the answer prefix, which
    kvpress's pipeline feeds after compressing the context. Counted as the tokens the context text and the
    whole prompt share (a token across the boundary stays in the context), so the ids fed are the same in both
    modes."""
    text = render_prompt(document, tokenizer, chat_template)
    start = text.rfind(question_text(document))
    if start <= 0:
        raise ValueError(
            f"document {document.get('id')!r}: its question does not occur in its rendered prompt after "
            f"some context: nothing to compress with compress: context"
        )
    context = list(tokenizer(text[:start], add_special_tokens=False)["input_ids"])
    k = 0
    while k < min(len(context), len(prompt_ids)) and context[k] == prompt_ids[k]:
        k += 1
    if not 1 <= k < len(prompt_ids):
        raise ValueError(f"document {document.get('id')!r}: no context tokens before its question to compress")
    return k


__all__ = [
    "build_prompt",
    "chat_function",
    "context_length",
    "prompt_token_ids",
    "question_text",
    "render_prompt",
    "render_with",
]
