"""Rendering chat templates within a budget, with a frozen clock, and probing them when the workflow starts.

kvdiv renders a template itself in transformers' sandboxed environment (the same text as
``tokenizer.apply_chat_template``) with a budget (:data:`MAX_STEPS`, :data:`MAX_SECONDS`, :data:`MAX_CHARS`;
:class:`TemplateBudgetError` names the model and the limit), a frozen clock (``strftime_now`` formats
:data:`FROZEN_CLOCK`) and a probe (:func:`probe_template`: a template that depends on anything but its input, or that
drops the message, is an error). No transformers import. Details: docs/security.md#chat-templates.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping

#: Template statements (Python line events in the compiled template) one rendering may run.
MAX_STEPS = 200_000
#: Seconds one rendering may take.
MAX_SECONDS = 10.0
#: Characters one rendering may produce (also the largest string or list a template's ``*`` may build).
MAX_CHARS = 2_000_000
#: Seconds one rendering of a probe message may take (a real template renders one in milliseconds).
PROBE_SECONDS = 2.0
#: A template step slower than this has its variables' sizes checked (building 2 MB of text takes longer).
SLOW_STEP_S = 1e-4
#: The instant ``strftime_now`` formats (a fixed date: renderings do not depend on when a job runs).
FROZEN_CLOCK = datetime(2026, 1, 1, 0, 0, 0)
#: Two user messages the probe renders (they differ in every word).
PROBE_MESSAGES = ("kvdiv probe one: what is 2 + 2?", "KVDIV PROBE TWO - name a colour.")
#: Where compiled templates' code lives (Jinja's filename of a template built from a string).
TEMPLATE_FILENAME = "<template>"


class TemplateBudgetError(ValueError):
    """A chat template ran past its budget (steps, seconds or characters)."""


class TemplateProbeError(ValueError):
    """A chat template whose rendering does not depend on the message, or depends on something else."""


class _TooLarge(Exception):
    """A template's ``*`` or ``**`` would build a value past :data:`MAX_CHARS` (turned into a budget error)."""


@functools.lru_cache(maxsize=1)
def environment():
    """The sandboxed Jinja environment transformers renders chat templates in (frozen ``strftime_now``)."""
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}`` (transformers' assistant-mask marker): renders its body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FROZEN_CLOCK.strftime(fmt)

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        """Refuses ``"x" * 10**9`` and ``9 ** 10**9`` before building them (one step the trace cannot stop)."""

        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_CHARS:
                        raise _TooLarge(f"{MAX_CHARS} characters or items built by one '*'")
            elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
                if right * max(abs(left), 2).bit_length() > 8 * MAX_CHARS:
                    raise _TooLarge(f"a number of more than {8 * MAX_CHARS} bits built by one '**'")
            return super().call_binop(context, operator, left, right)

    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


@functools.lru_cache(maxsize=64)
def compile_template(source: str):
    """The compiled template of ``source`` (cached)."""
    return environment().from_string(source)


def _largest(variables: Mapping[str, Any]) -> int:
    """The length of the longest string, list or tuple among ``variables`` and the attributes of the Jinja
    namespaces among them (what a template builds without writing it out)."""
    from jinja2.utils import Namespace

    longest = 0
    for value in variables.values():
        if isinstance(value, Namespace):
            values = object.__getattribute__(value, "_Namespace__attrs").values()
        else:
            values = (value,)
        for item in values:
            if isinstance(item, (str, list, tuple)):
                longest = max(longest, len(item))
    return longest


class _Budget:
    """A trace function counting the compiled template's statements and output; raises past a limit."""

    def __init__(self, owner: str, max_steps: int, max_seconds: float, max_chars: int):
        self.owner, self.max_steps, self.max_seconds, self.max_chars = owner, max_steps, max_seconds, max_chars
        self.steps = self.chars = 0
        self.start = self.last = time.perf_counter()

    def __call__(self, frame, event, arg):  # the global trace function: trace template frames only
        if frame.f_code.co_filename != TEMPLATE_FILENAME:
            return None
        return self.local

    def local(self, frame, event, arg):
        if event == "line":
            self.steps += 1
            if self.steps > self.max_steps:
                self.fail(f"{self.max_steps} template steps")
            now = time.perf_counter()
            if now - self.start > self.max_seconds:
                self.fail(f"{self.max_seconds:g} s")
            # a step that took long may have built a large value (a string doubled in a loop, never output)
            if (now - self.last > SLOW_STEP_S or not self.steps % 256) and _largest(frame.f_locals) > self.max_chars:
                self.fail(f"{self.max_chars} characters in one variable")
            self.last = now
        elif event == "return" and isinstance(arg, str):  # a generator frame yielding a piece of output
            self.chars += len(arg)
            if self.chars > self.max_chars:
                self.fail(f"{self.max_chars} characters of output")
        return self.local

    def fail(self, limit: str) -> None:
        raise TemplateBudgetError(
            f"{self.owner}: its chat template ran past the rendering budget of {limit} (a template that loops or "
            f"grows without bound; kvdiv.models.chat_templates)"
        )


def render(
    source: str,
    messages: list[dict],
    *,
    owner: str,
    add_generation_prompt: bool = True,
    variables: Mapping[str, Any] | None = None,
    max_steps: int = MAX_STEPS,
    max_seconds: float = MAX_SECONDS,
    max_chars: int = MAX_CHARS,
) -> str:
    """``source`` rendered for ``messages`` as transformers would (``variables``: the tokenizer's special tokens),
    within the budget; ``owner`` (e.g. ``model 'llama'``) names the template in errors."""
    template = compile_template(source)
    budget = _Budget(owner, max_steps, max_seconds, max_chars)
    previous = sys.gettrace()
    sys.settrace(budget)
    try:
        text = template.render(
            messages=messages,
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **dict(variables or {}),
        )
    except _TooLarge as err:
        text, too_large = "", str(err)
    else:
        too_large = None
    finally:
        sys.settrace(previous)
    if too_large is not None:
        budget.fail(too_large)
    if len(text) > max_chars:
        budget.fail(f"{max_chars} characters of output")
    return text


def render_user_message(
    source: str, text: str, *, owner: str, variables: Mapping[str, Any] | None = None, max_seconds: float = MAX_SECONDS
) -> str:
    """One user message with the generation prompt (what a document's prompt is)."""
    if len(text) > MAX_CHARS:
        raise TemplateBudgetError(
            f"{owner}: the message itself has {len(text)} characters, more than a rendering may produce "
            f"({MAX_CHARS}, kvdiv.models.chat_templates.MAX_CHARS): the prompt is too long, not the template"
        )
    return render(
        source, [{"role": "user", "content": text}], owner=owner, variables=variables, max_seconds=max_seconds
    )


def probe_template(source: str, *, owner: str, variables: Mapping[str, Any] | None = None) -> None:
    """Render :data:`PROBE_MESSAGES` twice each; raise :class:`TemplateProbeError` naming ``owner`` if renderings of
    one message differ or renderings of different messages are equal (and any render or budget error)."""
    try:
        renderings = [
            render_user_message(source, m, owner=owner, variables=variables, max_seconds=PROBE_SECONDS)
            for m in PROBE_MESSAGES * 2
        ]
        first, again = renderings[: len(PROBE_MESSAGES)], renderings[len(PROBE_MESSAGES) :]
    except TemplateBudgetError:
        raise
    except Exception as err:  # jinja2 syntax and runtime errors
        raise TemplateProbeError(f"{owner}: its chat template does not render a user message: {err}") from err
    if first != again:
        raise TemplateProbeError(
            f"{owner}: its chat template renders one message differently on two renderings (it depends on "
            "something besides the message, e.g. a random filter): documents would not be reproducible"
        )
    if first[0] == first[1]:
        raise TemplateProbeError(
            f"{owner}: its chat template renders two different messages identically ({first[0][:60]!r}): it drops "
            "the message, so every document would be the same prompt"
        )


def tokenizer_template(tokenizer) -> str | None:
    """The chat template string of a transformers tokenizer (a dict of templates: its ``default``)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template or None


def tokenizer_variables(tokenizer) -> dict[str, str]:
    """The variables transformers passes a template besides the messages: the tokenizer's named special tokens."""
    return dict(getattr(tokenizer, "special_tokens_map", {}) or {})


def read_model_template(model_dir: str | os.PathLike) -> tuple[str | None, dict[str, str]]:
    """A resolved model directory's chat template and special tokens, read from its files (no transformers):
    ``chat_template.jinja``, else ``chat_template.json``, else ``tokenizer_config.json``'s ``chat_template``."""
    model_dir = Path(model_dir)
    config_path = model_dir / "tokenizer_config.json"
    config: dict = {}
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{config_path} is not valid JSON: {err}") from None
    template: Any = None
    if (model_dir / "chat_template.jinja").is_file():
        template = (model_dir / "chat_template.jinja").read_text(encoding="utf-8")
    elif (model_dir / "chat_template.json").is_file():
        path = model_dir / "chat_template.json"
        try:
            template = json.loads(path.read_text(encoding="utf-8")).get("chat_template")
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as err:
            raise ValueError(f"{path} is not a chat template JSON: {err}") from None
    else:
        template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}]
        template = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
    if isinstance(template, dict):
        template = template.get("default")
    variables = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            variables[key] = value
    return (template if isinstance(template, str) and template else None), variables


def check_model_templates(models: Mapping[str, Mapping[str, Any]], models_dir: str | os.PathLike | Callable) -> None:
    """The workflow's start-up probe of every chat template known before any job runs: a spec's ``chat_template``
    string, else a resolved model's own template (``models_dir/{name}``, or ``models_dir(name)`` if callable: None
    for a model whose directory is not to be read). ``chat_template: false`` skips it."""
    for name, spec in models.items():
        chosen = spec.get("chat_template", True)
        if chosen is False:
            continue
        variables: dict[str, str] = {}
        source = chosen if isinstance(chosen, str) else None
        where = models_dir(name) if callable(models_dir) else Path(models_dir) / name
        directory = None if where is None else Path(where)
        if directory is not None and (directory / "provenance.json").is_file():
            own, variables = read_model_template(directory)
            source = source or own
        if source:
            owner = f"models.{name}" + (".chat_template" if isinstance(chosen, str) else f" ({directory})")
            probe_template(source, owner=owner, variables=variables)
